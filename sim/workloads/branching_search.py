"""Branching search: k candidate trajectories share the first s of N denoising steps,
then fork; a verifier scores them at checkpoints and may force backtracking.

Phases of one request: the shared trunk (s steps, width 1), then the fork (width k) up to
each verifier checkpoint; at a checkpoint all k candidates are scored (width k); a
candidate whose check fails is re-noised ``backtrack_steps`` back, denoised again and
re-scored, up to ``retry_budget`` times (its draws are made per request, up front).
Without failures the denoiser runs k·N − (k−1)·s sample-steps, i.e. the multiplier
m = k − (k−1)·s/N of one trajectory; each failure adds r.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from sim.workloads.base import Strict, WorkloadKind
from sim.workloads.picture import Picture, PictureShape, PictureWorkload, denoise_phase


class VerifierConfig(Strict):
    """A verifier that scores every candidate after the denoising steps listed in
    ``checkpoints``. A check fails with probability ``fail_probability``; a failed
    candidate is re-noised ``backtrack_steps`` steps back, denoised again and re-checked,
    at most ``retry_budget`` times per checkpoint (depth-first backtracking)."""

    model: str = "verifier"
    checkpoints: list[int] | None = Field(None, description="steps after which to verify; default [total_steps]")
    fail_probability: float = Field(0.0, ge=0, lt=1)
    backtrack_steps: int = Field(5, ge=1, le=10_000)
    retry_budget: int = Field(2, ge=0, le=100)


class BranchingSearchWorkload(PictureWorkload):
    """k candidates share the first s of N denoising steps, then fork (multiplier
    m = k − (k−1)·s/N of one trajectory's denoiser FLOP, before backtracking); a verifier
    scores them at checkpoints and the best of k is returned."""

    kind: Literal["branching_search"]
    candidates_k: int = Field(4, ge=1, le=1024)
    shared_steps: int = Field(40, ge=0, le=10_000)
    total_steps: int = Field(50, ge=1, le=10_000)
    verifier: VerifierConfig | None = None

    @model_validator(mode="after")
    def _shared_within_total(self) -> "BranchingSearchWorkload":
        if self.shared_steps > self.total_steps:
            raise ValueError(
                f"shared_steps (={self.shared_steps}) must be <= total_steps (={self.total_steps})"
            )
        if self.verifier and self.verifier.checkpoints:
            bad = [c for c in self.verifier.checkpoints if not self.shared_steps <= c <= self.total_steps]
            if bad or sorted(set(self.verifier.checkpoints)) != self.verifier.checkpoints:
                raise ValueError(
                    f"verifier.checkpoints must be increasing steps between shared_steps "
                    f"(={self.shared_steps}) and total_steps (={self.total_steps}); got {self.verifier.checkpoints}"
                )
        return self

    @property
    def checkpoints(self) -> list[int]:
        if self.verifier is None:
            return []
        return self.verifier.checkpoints or [self.total_steps]


def compute_multiplier(wl) -> float:
    """m = k − (k−1)·s/N: the denoiser work of one search over one trajectory's N steps,
    without backtracking."""
    k, s, n = wl.candidates_k, wl.shared_steps, wl.total_steps
    return k - (k - 1) * s / n


def verifier_failures(wl, rng: np.random.Generator, n: int) -> np.ndarray | None:
    """For every request, checkpoint and candidate, how many checks fail before one
    passes (geometric with failure probability p), capped at the retry budget. Shape
    (n, checkpoints, k), int16; None without a fallible verifier."""
    verifier = wl.verifier
    if verifier is None or verifier.fail_probability == 0:
        return None
    shape = (n, len(wl.checkpoints), wl.candidates_k)
    failures = rng.geometric(1.0 - verifier.fail_probability, size=shape) - 1
    return np.minimum(failures, verifier.retry_budget).astype(np.int16)


def _verify(shape: PictureShape, width: int) -> tuple:
    steps, _, flops, bytes_, tokens, first, act, stage, kernel = shape.verify
    return (steps, width, flops, bytes_, tokens, first, act, stage, kernel)


class BranchingSearch(Picture):
    kind = "branching_search"
    config = BranchingSearchWorkload
    model_kinds = ("image_diffusion", "video_diffusion")
    stages = ("encode", "denoise", "verify", "safety", "decode")
    label = "search"
    marker = "star"
    item = "search"
    edit_fields = (("candidates_k", "int", "branching: candidates k", 1),
                   ("shared_steps", "int", "branching: shared steps s", 0),
                   ("total_steps", "int", "branching: total steps N", 1))

    def draw(self, wl, shapes, rows, draws, default_steps) -> None:
        shapes.draws = verifier_failures(wl, draws.verify, len(shapes.prompt))

    def sample_steps(self, wl, model) -> int:
        """k·N − (k−1)·s sample-steps (the multiplier m of one trajectory's N)."""
        k, s, n = wl.candidates_k, wl.shared_steps, wl.total_steps
        return k * n - (k - 1) * s

    def fork_width(self, wl) -> int:
        return wl.candidates_k if wl.shared_steps < wl.total_steps else 1

    def verify_width(self, wl) -> int:
        return wl.candidates_k

    def samples_at_once(self, wl, stages: set[str]) -> int:
        return wl.candidates_k if "denoise" in stages or "verify" in stages else 1

    def denoise_phases(self, wl, shape, den, failures, phases) -> None:
        """The trunk, the fork up to each checkpoint, the checks and the backtracking of
        failed candidates (module docstring)."""
        k, s, n = wl.candidates_k, wl.shared_steps, wl.total_steps
        if s:
            phases.append(denoise_phase(s, 1, den))
        done = s
        r = wl.verifier.backtrack_steps if wl.verifier else 0
        for j, checkpoint in enumerate(wl.checkpoints):
            if checkpoint > done:
                phases.append(denoise_phase(checkpoint - done, k, den))
                done = checkpoint
            phases.append(_verify(shape, k))
            fails = failures[j] if j < len(failures) else ()
            for round_ in range(1, max(fails, default=0) + 1):
                width = sum(1 for f in fails if f >= round_)
                phases.append(denoise_phase(r, width, den))
                phases.append(_verify(shape, width))
        if n > done:
            phases.append(denoise_phase(n - done, k, den))

    def summary_columns(self, wl, acc, cost_usd, window_s, unstable) -> dict:
        """``compute_multiplier_measured`` is the mean denoiser sample-steps per request over
        one trajectory's N steps; ``compute_multiplier_formula`` is m = k − (k−1)·s/N (they
        agree exactly without verifier failures; the difference is what backtracking adds)."""
        measured = acc.mean("sample_steps")
        return {
            "compute_multiplier_formula": compute_multiplier(wl),
            "compute_multiplier_measured": measured / wl.total_steps if not math.isnan(measured) else math.nan,
            "verifier_calls_per_request": acc.mean("verifier_calls"),
        }

    def report_columns(self, g, fmt, after):
        """Compute multiplier (measured / formula), verifier calls, hand-offs."""
        if after != "costs":
            return []
        return [
            ("compute × (measured / formula)",
             [f"{fmt.human(r['compute_multiplier_measured'])} / {fmt.human(r['compute_multiplier_formula'])}"
              for _, r in g.iterrows()]),
            ("verifier calls", [fmt.human(v) for v in g["verifier_calls_per_request"]]),
            ("hand-offs (transfer / queue)", [fmt.handoffs(r) for _, r in g.iterrows()]),
        ]
