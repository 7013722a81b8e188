"""Range checks of the distributions a workload draws counts from (token counts,
denoising steps), beyond what each field's schema can say on its own."""

from __future__ import annotations

import math

from pydantic import BaseModel

from sim.workloads.base import MAX_TOKENS

MAX_DIFFUSION_LM_STEPS = 10_000


def support_max(dist) -> float:
    """Largest value ``dist`` can draw (inf for unbounded supports)."""
    kind = dist.kind
    if kind == "constant":
        return dist.value
    if kind == "uniform":
        return dist.high
    if kind == "lognormal":
        return math.inf if dist.max is None else dist.max
    values = getattr(dist, "values", None)
    return max(values) if values else math.inf


def _explicit_values(dist) -> list[float]:
    if dist.kind == "constant":
        return [dist.value]
    return list(getattr(dist, "values", None) or [])


def check_token_counts(name: str, wl) -> None:
    """Token counts within [0, MAX_TOKENS] (larger would overflow the engine's int64
    arithmetic): a distribution that can draw more (its largest value: a constant, a
    choice or empirical value, uniform ``high``, lognormal ``max``) is refused, and so is
    an unbounded one (exponential, lognormal without ``max``) whose mean is beyond it;
    an unbounded tail's rare draws above it are clipped by
    :func:`traffic.distributions.sample_tokens`.

    Raises:
        ValueError: ``workloads.<name>.<field>: ...``."""
    for field in ("prompt_tokens", "output_tokens"):
        dist = getattr(wl, field, None)
        if isinstance(dist, BaseModel):
            try:
                mean = float(dist.mean)
            except (OverflowError, ValueError):
                mean = math.inf
            high = float(dist.observed().max()) if dist.kind == "empirical" else support_max(dist)
            if not mean <= MAX_TOKENS or (math.isfinite(high) and high > MAX_TOKENS):
                raise ValueError(f"workloads.{name}.{field}: token counts must be at most {MAX_TOKENS:,}; this "
                                 f"distribution draws up to {high:g} (mean {mean:g}): lower it")


def check_steps(name: str, steps) -> None:
    """Diffusion-LM steps: integers in [1, MAX_DIFFUSION_LM_STEPS] from a bounded
    distribution (0.3 or 1e12 steps are refused, not rounded).

    Raises:
        ValueError: ``workloads.<name>.steps: ...``."""
    if not isinstance(steps, BaseModel):
        return
    high = support_max(steps)
    bad = [v for v in _explicit_values(steps) if v != int(v) or not 1 <= v <= MAX_DIFFUSION_LM_STEPS]
    if bad or not high <= MAX_DIFFUSION_LM_STEPS or (steps.kind == "uniform" and steps.low < 1):
        raise ValueError(f"workloads.{name}.steps: denoising steps must be whole numbers from 1 to "
                         f"{MAX_DIFFUSION_LM_STEPS:,} drawn from a bounded distribution (constant, choice, "
                         f"uniform, or lognormal with max); got {steps.model_dump(exclude_defaults=True)}")
