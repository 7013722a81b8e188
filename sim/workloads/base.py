"""What every workload kind shares: the SLO, the common config fields, and
:class:`WorkloadKind`, the interface through which the engine, the results and the
shells ask a kind what it needs instead of branching on its name.

A kind is one module of :mod:`sim.workloads` holding its config schema (pydantic), its
request shapes (how its requests are drawn and what they run), which replica family
serves it, how a pool rejects its requests, and its own summary columns. Adding a kind
is adding such a module and one line of :data:`sim.workloads.KINDS`.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from traffic.arrivals import ArrivalProcess as Arrival
from traffic.distributions import MAX_SAMPLED_TOKENS
from sim.workloads.mix import ModelMix  # noqa: F401  (the annotation of WorkloadConfig.mix)

MAX_SPAN_S = 30 * 86400
"""Longest duration, warm-up, drain or SLO bound (30 days, in seconds)."""
PERCENTILES = (50, 95, 99)
"""The latency percentiles every summary reports."""
MAX_TOKENS = MAX_SAMPLED_TOKENS
"""Largest token count of any field or trace row (and of any draw: ``sample_tokens`` clips there)."""


class Strict(BaseModel):
    """Config base: unknown fields refused, values frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SLO(Strict):
    """Service-level objectives of one workload; a request meets its SLO when every set
    bound holds (TTFT and TPOT only apply to token-streaming workloads)."""

    ttft_s: float | None = Field(None, gt=0, le=MAX_SPAN_S, description="p-any bound on time to first token, s")
    tpot_s: float | None = Field(None, gt=0, le=MAX_SPAN_S, description="bound on mean time per output token, s")
    e2e_s: float | None = Field(None, gt=0, le=MAX_SPAN_S, description="bound on end-to-end latency, s")
    target: float = Field(0.99, description="fraction of requests that must meet it, in (0, 1]; "
                                            "'99%' is read as 0.99")

    @field_validator("target", mode="before")
    @classmethod
    def _percent(cls, value):
        """Accept '99%' (a percent string) as 0.99."""
        if isinstance(value, str) and value.strip().endswith("%"):
            try:
                return float(value.strip()[:-1]) / 100.0
            except ValueError:
                raise ValueError("a fraction in (0, 1] such as 0.99, or a percent such as '99%'") from None
        return value

    @field_validator("target")
    @classmethod
    def _fraction(cls, value: float) -> float:
        """Refuse a target outside (0, 1], in the user's units (percent as well as fraction)."""
        if not 0 < value <= 1:
            raise ValueError(f"a fraction of requests in (0, 1]: {value:g} is {value * 100:g}%; "
                             f"for 99% write 0.99 or '99%'")
        return value


class WorkloadConfig(Strict):
    """Fields of every model-serving workload: the model, the arrivals, the SLO."""

    model: str = Field(description="model key from `dcsim catalog`")
    arrival: Arrival
    slo: SLO = SLO()
    mix: ModelMix | None = Field(None, description="checkpoints and LoRA adapters the requests name "
                                   "(sim/workloads/mix.py); served by a pool with residency")


class Draws:
    """The RNG streams a workload draws its requests from (one per source, spawned from
    the scenario seed and the workload's name: :mod:`sim.engine.demand`)."""

    __slots__ = ("prompt", "output", "steps", "service", "verify")

    def __init__(self, prompt, output, steps, service, verify) -> None:
        self.prompt, self.output, self.steps, self.service, self.verify = prompt, output, steps, service, verify


class RequestShapes:
    """Per-request arrays of one window of arrivals, shape (n,): token counts (int64),
    denoising steps (int64), service times (s); ``draws`` (branching search: verifier
    failures, shape (n, checkpoints, k)), ``images`` and ``cfg`` (image-trace replay)."""

    __slots__ = ("prompt", "output", "steps", "service", "draws", "images", "cfg", "variant", "adapter", "lora")

    def __init__(self, n: int) -> None:
        zeros = np.zeros(n, dtype=np.int64)
        self.prompt, self.output, self.steps, self.service = zeros, zeros, zeros, np.zeros(n)
        self.draws = self.images = self.cfg = None
        self.variant = self.adapter = self.lora = None  # a workload's model mix (sim.workloads.mix)


class WorkloadKind:
    """One workload kind, as the rest of dcsim sees it. Subclasses set the class
    attributes and override the hooks their kind needs; the defaults are a kind that
    runs no model-specific rule.

    Attributes:
        kind: the ``kind:`` tag in a scenario.
        config: the pydantic schema of its entry under ``workloads:``.
        family: the replica family that serves it: ``ar`` (continuous batching with a
            paged KV cache), ``step`` (step-batched phases: diffusion), ``service``
            (a sampled service time: queueing-theory checks).
        model_kinds: catalog model kinds its ``model`` may be (empty: it names no model).
        stages: pipeline stages; all but ``denoise`` can be placed on a pool of their own.
        split_stages: the sides of a split deployment (autoregressive: ``prefill`` and
            ``decode``): a fleet either serves the whole workload on its pools or places
            every one of these on pools of their own, each pool one side.
        helper_stages: work a pool of its own may do for the workload without serving it
            (autoregressive: ``draft``, the drafter of speculative decoding on its own pool);
            :meth:`check_helper` says whether the workload's settings allow it.
        has_ttft: it reports a first output token (TTFT, output tokens/s per request).
        has_tpot: its tokens stream one by one after the first (TPOT).
        per_token: its output is text tokens: costed per 1M output tokens, energy per
            output token, TTFT/TPOT columns in the text report.
        label, marker: short name and plotly marker symbol in charts.
        item: what one request delivers when that is not tokens ("image", "video",
            "search"): the text report's "$/<item>" column; "" for token workloads.
        cost_per_item_column: the summary column behind "$/<item>".
    """

    kind: ClassVar[str]
    config: ClassVar[type[BaseModel]]
    family: ClassVar[str] = "step"
    model_kinds: ClassVar[tuple[str, ...]] = ()
    stages: ClassVar[tuple[str, ...]] = ()
    split_stages: ClassVar[tuple[str, ...]] = ()
    helper_stages: ClassVar[tuple[str, ...]] = ()
    has_ttft: ClassVar[bool] = False
    has_tpot: ClassVar[bool] = False
    per_token: ClassVar[bool] = False
    label: ClassVar[str] = ""
    marker: ClassVar[str] = "circle"
    item: ClassVar[str] = ""
    cost_per_item_column: ClassVar[str] = "cost_per_request_usd"

    replays_images: ClassVar[bool] = False  # an image-generation trace (format genai_csv) may shape it
    edit_fields: ClassVar[tuple[tuple[str, str, str, int], ...]] = ()
    """Fields the dashboard edits: (field, widget, label, minimum). Widgets: ``distribution``
    (a constant or a choice of values, as text), ``steps`` (an integer, 0 = the model's
    default), ``int`` (an integer)."""

    # --- validation -----------------------------------------------------------------
    def check_arrival(self, name: str, wl) -> None:
        """Refuse an arrival process this kind cannot take (ValueError, message
        starting with the field path): ``format: genai_csv`` shapes image requests only."""
        if getattr(wl.arrival, "format", None) == "genai_csv" and not self.replays_images:
            raise ValueError(
                f"workloads.{name}.arrival: format genai_csv replays image-generation requests; "
                f"workload kind must be image_diffusion, got {wl.kind}"
            )

    def check(self, name: str, wl) -> None:
        """Cross-field checks of one workload's config (ValueError, message starting with
        the field path)."""

    def check_helper(self, name: str, wl, stage: str) -> None:
        """Whether a pool may run helper stage ``stage`` (one of :attr:`helper_stages`) of
        workload ``name`` (ValueError naming the field otherwise)."""

    # --- demand ---------------------------------------------------------------------
    def default_steps(self, wl, catalog) -> int | None:
        """Steps every request runs when the workload sets none (drawn otherwise)."""
        return None

    def draw(self, wl, shapes: RequestShapes, rows, draws: Draws, default_steps: int | None) -> None:
        """Fill ``shapes`` for one window of ``len(shapes.prompt)`` arrivals (``rows``:
        the trace rows of a replay, else None)."""

    # --- placement and serving --------------------------------------------------------
    def fork_width(self, wl) -> int:
        """Samples one request runs side by side at its widest (the ×k of a fork)."""
        return 1

    def reject_reason(self, pool, wl, req) -> str:
        """Why ``pool`` can never serve ``req`` ("" if it can)."""
        return ""

    def prepare(self, pool, wl, req) -> None:
        """Give ``req`` what it runs on ``pool`` (its current journey leg) before admission."""

    # --- analytic capacity (the planner's start and lower bound) -----------------------
    def capacity_rps(self, wl, pool, perf) -> float:
        """Optimistic requests/s one replica of ``pool`` serves (a full batch, no queueing:
        :mod:`sim.studies.planner_capacity`); inf when the kind has no estimate."""
        return float("inf")

    def floor_terms(self, wl, perf) -> tuple[float, float]:
        """(FLOP that one mean request cannot avoid, forwards it takes part in), for the
        replica-seconds floor of :func:`sim.studies.planner_capacity.replica_seconds_floor`."""
        return 0.0, 0.0

    # --- results ----------------------------------------------------------------------
    def summary_columns(self, wl, acc, cost_usd: float, window_s: float, unstable: bool) -> dict:
        """This kind's own columns of its summary row, from the accumulator ``acc``
        (:class:`sim.results.summary.WorkloadAccumulator`) and the fully loaded
        ``cost_usd`` of its completed measured requests."""
        return {}

    def report_columns(self, g, fmt, after: str) -> list[tuple[str, list[str]]]:
        """This kind's own columns of the text report's workload table, as (header, one
        cell per fleet row of the summary rows ``g``), placed ``after`` the latency
        ``"tails"`` or the ``"costs"``; ``fmt`` gives the report's number formats
        (:data:`sim.results.report_text.FORMATS`)."""
        return []


def mean_of(dist) -> float:
    """The analytic mean of a distribution; NaN when it has none."""
    try:
        return float(dist.mean)
    except (NotImplementedError, AttributeError, TypeError):
        return float("nan")
