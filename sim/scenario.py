"""The scenario: one pydantic schema for everything a run needs.

A scenario is data (Ciw-style): workloads (what is asked of the fleet), fleets (hardware
mixes to compare), economics (prices), and run settings. ``load_scenario`` reads YAML and
turns every validation failure into a :class:`~sim.errors.ScenarioError` naming the file,
the field path, the bad value and what is allowed.

Defaults that are facts carry their source in the field description.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sim.errors import ScenarioError
from sim.loader import LoadedYaml, check_file_kind, check_plain_data, dotted, load_yaml, resolve_paths
from traffic.arrivals import ArrivalProcess as Arrival
from traffic.distributions import (
    AZURE_CONV_OUTPUT_LOGNORMAL,
    AZURE_CONV_PROMPT_LOGNORMAL,
    MAX_SAMPLED_TOKENS,
    Distribution,
)

MAX_SPAN_S = 30 * 86400
"""Longest duration, warm-up, drain or SLO bound (30 days, in seconds)."""
MAX_TOKENS = MAX_SAMPLED_TOKENS
"""Largest token count of any field or trace row (and of any draw: ``sample_tokens`` clips there)."""
MAX_REPLICAS_PER_POOL = 100_000
"""Most replicas of one pool; also keeps two pools' replica event priorities apart
(:func:`sim.engine.timer.replica_priority`)."""
MAX_EXPECTED_REQUESTS = 1_000_000_000
"""Most requests one run may expect (sum over workloads of peak rate × duration_s). A
streamed run (``engine.stream``) holds neither its rows nor its demand (drawn window by
window), so memory does not bound it; time and disk do: a billion requests are about
4 hours of one core at ~66,000 requests/s and ~180 GB of ``requests.parquet`` (178 bytes
per request measured on ``bench/bench_engine.py``'s scenario, 2026-11-24), written twice
while the rows are costed."""
MAX_IN_MEMORY_REQUESTS = 2_000_000
"""Most requests a run with ``engine.stream: off`` may expect (one row per request in
memory: ~1.5 GB of peak RSS per million requests)."""


def loading_limits() -> dict[str, int]:
    """The limits the loader and the cross-field checks enforce (shown in `dcsim schema`)."""
    from sim import loader

    return {"max_file_bytes": loader.MAX_FILE_BYTES, "max_nesting_depth": loader.MAX_DEPTH,
            "max_values_after_alias_expansion": loader.MAX_NODES, "max_integer": loader.INT64_MAX,
            "max_expected_requests": MAX_EXPECTED_REQUESTS,
            "max_expected_requests_in_memory": MAX_IN_MEMORY_REQUESTS,
            "max_tokens": MAX_TOKENS}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _azure_lognormal(dist):
    return dist.model_copy()


class SLO(_Strict):
    """Service-level objectives of one workload; a request meets its SLO when every set
    bound holds (TTFT and TPOT only apply to token-streaming workloads)."""

    ttft_s: float | None = Field(None, gt=0, le=MAX_SPAN_S, description="p-any bound on time to first token, s")
    tpot_s: float | None = Field(None, gt=0, le=MAX_SPAN_S, description="bound on mean time per output token, s")
    e2e_s: float | None = Field(None, gt=0, le=MAX_SPAN_S, description="bound on end-to-end latency, s")
    target: float = Field(0.99, gt=0, le=1, description="fraction of requests that must meet it")


class _WorkloadBase(_Strict):
    model: str = Field(description="model key from `dcsim catalog`")
    arrival: Arrival
    slo: SLO = SLO()


class AutoregressiveWorkload(_WorkloadBase):
    """LLM requests: prefill of the prompt, then token-by-token decode with a KV cache.

    ``best_of_k`` > 1 samples k branches per request (autoregressive best-of-k): the prompt
    is prefilled once, its KV cache copied to every branch, and k sequences decode
    side by side (k× the KV cache and decode work; the request ends with its last branch).

    Default lengths are lognormals fitted to the Azure LLM inference trace 2023 (conv),
    github.com/Azure/AzurePublicDataset (CC-BY 4.0); see traffic.distributions."""

    kind: Literal["autoregressive"]
    prompt_tokens: Distribution = Field(default_factory=lambda: _azure_lognormal(AZURE_CONV_PROMPT_LOGNORMAL))
    output_tokens: Distribution = Field(default_factory=lambda: _azure_lognormal(AZURE_CONV_OUTPUT_LOGNORMAL))
    best_of_k: int = Field(1, ge=1, le=64, description="branches per request, sharing a copied prompt KV")


class DiffusionLMWorkload(_WorkloadBase):
    """Diffusion LM: outputs as blocks of ``block_tokens`` refined over ``steps`` denoising
    steps each (steps drawn once per request), semi-autoregressively over blocks."""

    kind: Literal["diffusion_lm"]
    prompt_tokens: Distribution = Field(default_factory=lambda: _azure_lognormal(AZURE_CONV_PROMPT_LOGNORMAL))
    output_tokens: Distribution = Field(default_factory=lambda: _azure_lognormal(AZURE_CONV_OUTPUT_LOGNORMAL))
    block_tokens: int = Field(256, ge=1, le=4096)
    steps: Distribution | None = Field(None, description="denoising steps per block; default: the model's "
                                       "catalog default_steps (LLaDA-8B: 32)")


class _PictureWorkload(_WorkloadBase):
    """Shared fields of image/video generation: resolution, frames and the compound
    pipeline (text encoder → denoiser × steps → safety filter → VAE decode)."""

    cfg: bool | None = Field(None, description="classifier-free guidance; default: the model's")
    cfg_mode: Literal["batched", "sequential"] | None = Field(
        None, description="CFG passes in one doubled batch or one after the other; default: the model's reference code "
        "(Wan 2.1: sequential; others: batched)")
    height_px: int | None = Field(None, ge=64, le=16_384, description="default: the model's reference")
    width_px: int | None = Field(None, ge=64, le=16_384, description="default: the model's reference")
    frames: int | None = Field(None, ge=1, le=10_000, description="video frames; default: the model's reference")
    pipeline: bool = Field(
        True, description="run the text encoder, safety filter and VAE decoder stages, not only the denoiser"
    )


class ImageDiffusionWorkload(_PictureWorkload):
    """Image diffusion: a compound pipeline whose denoiser runs ``steps`` forwards (two
    per step with CFG)."""

    kind: Literal["image_diffusion"]
    steps: int | None = Field(None, ge=1, le=10_000, description="default: the model's")


class VideoDiffusionWorkload(ImageDiffusionWorkload):
    kind: Literal["video_diffusion"]  # type: ignore[assignment]


class VerifierConfig(_Strict):
    """A verifier that scores every candidate after the denoising steps listed in
    ``checkpoints``. A check fails with probability ``fail_probability``; a failed
    candidate is re-noised ``backtrack_steps`` steps back, denoised again and re-checked,
    at most ``retry_budget`` times per checkpoint (depth-first backtracking)."""

    model: str = "verifier"
    checkpoints: list[int] | None = Field(None, description="steps after which to verify; default [total_steps]")
    fail_probability: float = Field(0.0, ge=0, lt=1)
    backtrack_steps: int = Field(5, ge=1, le=10_000)
    retry_budget: int = Field(2, ge=0, le=100)


class BranchingSearchWorkload(_PictureWorkload):
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


class ServiceTimeWorkload(_Strict):
    """A request that holds one batch slot of a replica for a sampled service time.

    Not a model of any real job: it exists so the engine can be checked against queueing
    theory (M/M/c with exponential service, Erlang-C)."""

    kind: Literal["service_time"]
    arrival: Arrival
    service_s: Distribution
    slo: SLO = SLO()
    model: None = None


Workload = Annotated[
    Union[
        AutoregressiveWorkload,
        DiffusionLMWorkload,
        ImageDiffusionWorkload,
        VideoDiffusionWorkload,
        BranchingSearchWorkload,
        ServiceTimeWorkload,
    ],
    Field(discriminator="kind"),
]


class PoolConfig(_Strict):
    """Identical replicas of one model on one accelerator type.

    Serving defaults follow vLLM's engine arguments (max_num_seqs 256,
    max_num_batched_tokens 8192, block_size 16, gpu_memory_utilization 0.9, watermark 0.01;
    docs.vllm.ai engine args, v0.6, 2024)."""

    name: str = Field(min_length=1)
    accelerator: str
    serves: list[str] = Field(
        min_length=1,
        description="workloads this pool serves; `name:stage` places one pipeline stage "
        "(encode, denoise, verify, safety, decode) of a workload here",
    )
    replicas: int = Field(ge=1, le=MAX_REPLICAS_PER_POOL)
    tp: int = Field(1, ge=1, le=4096, description="tensor-parallel degree")
    pp: int = Field(1, ge=1, le=256, description="pipeline-parallel stages")
    ep: int = Field(1, ge=1, le=4096, description="expert-parallel group of a MoE model (accelerators per pipeline "
                    "stage, in one scale-up domain; a multiple of tp dividing the routed experts); 1: none")
    precision: Literal["bf16", "fp8", "fp4"] = Field("fp8", description="weights and linear-layer math")
    kv_precision: Literal["bf16", "fp8", "fp4"] | None = Field(
        None, description="KV cache; default: the weights', FP8 under FP4 weights (production FP4 serving)")
    attention_precision: Literal["bf16", "fp8", "fp4"] | None = Field(
        None, description="attention math; default: the KV cache's; refused on a part without that peak")
    max_batch: int = Field(256, ge=1, le=65_536, description="max concurrent sequences/samples")
    max_prefill_tokens: int = Field(8192, ge=1, le=MAX_TOKENS, description="token budget of one iteration")
    kv_block_tokens: int = Field(16, ge=1, le=1024)
    kv_watermark: float = Field(0.01, ge=0, lt=1)
    memory_utilization: float = Field(0.9, gt=0, le=1)
    iteration_overhead_s: float = Field(0.0, ge=0, le=3600, description="fixed time per iteration")
    min_kv_tokens: int = Field(2048, ge=0, le=MAX_TOKENS, description="KV one replica must hold beyond weights")
    price_usd: float | None = Field(None, ge=0, le=1e9, description="override the catalog price per accelerator")
    nodes_per_rack: int | None = Field(None, ge=1, le=1024)
    domain: str | None = Field(
        None, description="scale-up domain label: pools sharing it (same accelerator) hand off over the scale-up link"
    )
    rack_power_budget_kw: float | None = Field(None, gt=0, le=10_000)


class FleetConfig(_Strict):
    """One hardware mix: pools plus the routing policy that spreads arrivals over them."""

    name: str = Field(min_length=1)
    router: Literal["round_robin", "least_outstanding", "join_shortest_queue", "central_queue"] = (
        "least_outstanding"
    )
    pools: list[PoolConfig] = Field(min_length=1)
    workloads: list[str] | None = Field(
        None,
        description="the workloads this fleet serves (default: all); lets one scenario compare "
        "demand variants, e.g. all-autoregressive against half moved to a diffusion LM",
    )

    @model_validator(mode="after")
    def _unique_pool_names(self) -> "FleetConfig":
        names = [p.name for p in self.pools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"pool names must be unique within a fleet; repeated: {dupes}")
        return self


class Economics(_Strict):
    """Datacenter cost, financing and power inputs. Defaults and their sources
    (../shared/data/reference/economics.csv unless stated):

    - facility_capex_usd_per_mw 11.7e6: Cushman & Wakefield, Data Center Development Cost
      Guide 2025, p.8-9, US average of 19 markets (cushwake.cld.bz).
    - pue 1.56: Uptime Institute Global Data Center Survey 2024 industry average.
    - electricity_usd_per_kwh 0.0892: U.S. EIA Electric Power Annual 2023, industrial
      average price, Virginia (largest US datacenter market), released 2024-10-17.
    - depreciation_years 5: Amazon servers useful life from 2025-01-01 (10-K FY2024);
      Microsoft and Alphabet use 6, Meta 5.5.
    - facility_depreciation_years 20: assumption (typical straight-line life of
      datacenter shell and M&E plant); set your own.
    - discount_rate_per_year 0.0: capex is recovered as an annuity at this rate
      (capital recovery factor r / (1 - (1 + r)^-n)); 0 gives straight-line
      depreciation. A choice, not a fact: set your cost of capital (WACC).
    - network_capex_usd_per_node 66,000: scale-out fabric share per 8-GPU node
      (switches, optics, cables) = 8 x $47,000 all-in capex per H100 incl. InfiniBand
      minus the $310,000 node incl. IB cards ("H100 Freakonomics",
      substack.tech-talk-cto.com, 2024-08; secondary, derived); applied to every type.
    - maintenance_fraction_per_year 0.0 (of IT capex per year) and staff_usd_per_kw_month
      0.0 (per provisioned IT kW): no source in ../shared/data, so not charged unless set.
    - other_opex_fraction_per_year 0.0: any other opex as a fraction of capex per year.
    - ownership own: buy the fleet; ``rent`` bills accelerator-hours at
      ``rental_usd_per_accelerator_hour`` (per type; defaults from the gpu_rental rows,
      in fleets/data/ownership.csv with their sources).
    - facility_power_limit_mw None: optional cap on a fleet's packed facility power
      (provisioned IT x PUE); a fleet over it is refused.

    Accelerator and host power follow fleets/data/power.csv (sim/models/power.py).
    """

    electricity_usd_per_kwh: float = Field(0.0892, ge=0, le=100)
    pue: float = Field(1.56, ge=1, le=5)
    facility_capex_usd_per_mw: float = Field(11.7e6, ge=0, le=1e10)
    depreciation_years: float = Field(5.0, gt=0, le=50)
    facility_depreciation_years: float = Field(20.0, gt=0, le=100)
    discount_rate_per_year: float = Field(0.0, ge=0, le=1)
    network_capex_usd_per_node: float = Field(66_000.0, ge=0, le=1e7)
    maintenance_fraction_per_year: float = Field(0.0, ge=0, le=1)
    staff_usd_per_kw_month: float = Field(0.0, ge=0, le=1e4)
    other_opex_fraction_per_year: float = Field(0.0, ge=0, le=10)
    ownership: Literal["own", "rent"] = "own"
    rental_usd_per_accelerator_hour: dict[str, Annotated[float, Field(ge=0, le=1000)]] = Field(
        default_factory=dict, description="per accelerator type; overrides fleets/data/ownership.csv")
    facility_power_limit_mw: float | None = Field(None, gt=0, le=1e5)


class EngineConfig(_Strict):
    mode: Literal["fast", "exact"] = Field(
        "fast",
        description="fast: a replica advances many iterations per SimPy event; "
        "exact: one event per iteration (for tests)",
    )
    stream: Literal["auto", "on", "off"] = Field(
        "auto",
        description="stream request rows to Parquet and build the summary from accumulators and "
        "DDSketch tails (bounded memory): on, off, or auto (on above 1,000,000 requests)",
    )


class Scenario(_Strict):
    """Everything one run needs. Times in seconds.

    Requests arrive during [0, duration_s); statistics cover those that arrived in
    [warmup_s, duration_s). After duration_s the fleet drains for at most drain_s more;
    requests still unfinished then are reported as in flight (and the run as unstable).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=lambda schema: schema.update(
        {"x-dcsim-limits": loading_limits()}))

    name: str = "scenario"
    description: str = ""
    seed: int = Field(0, ge=0, lt=2**63)
    duration_s: float = Field(gt=0, le=MAX_SPAN_S)
    warmup_s: float = Field(0.0, ge=0, le=MAX_SPAN_S)
    drain_s: float = Field(600.0, ge=0, le=MAX_SPAN_S, description="at most 30 days; a drain never runs forever")
    sample_interval_s: float | None = Field(
        None, gt=0, description="first time-series sampling period (doubled to keep at most 2048 "
        "instants over the run); default duration_s / 1024"
    )
    engine: EngineConfig = EngineConfig()
    workloads: dict[str, Workload] = Field(min_length=1)
    fleets: list[FleetConfig] = Field(min_length=1)
    economics: Economics = Economics()

    @model_validator(mode="after")
    def _cross_checks(self) -> "Scenario":
        if self.warmup_s >= self.duration_s:
            raise ValueError(f"warmup_s (={self.warmup_s}) must be < duration_s (={self.duration_s})")
        names = [f.name for f in self.fleets]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"fleet names must be unique; repeated: {dupes}")
        for fleet in self.fleets:
            _check_serves(self, fleet)
        _check_genai_replays(self)
        _check_sizes(self)
        for name, wl in self.workloads.items():
            _check_count_distributions(name, wl)
        return self


def _check_genai_replays(scenario: "Scenario") -> None:
    """``format: genai_csv`` (an image-generation trace) shapes image_diffusion requests only."""
    for name, wl in scenario.workloads.items():
        if getattr(wl.arrival, "format", None) == "genai_csv" and wl.kind != "image_diffusion":
            raise ValueError(
                f"workloads.{name}.arrival: format genai_csv replays image-generation requests; "
                f"workload kind must be image_diffusion, got {wl.kind}"
            )


STAGES = {
    "image_diffusion": ("encode", "denoise", "safety", "decode"),
    "video_diffusion": ("encode", "denoise", "decode"),
    "branching_search": ("encode", "denoise", "verify", "safety", "decode"),
}


def split_serves(entry: str) -> tuple[str, str | None]:
    """``"image:decode"`` → ("image", "decode"); ``"image"`` → ("image", None)."""
    name, _, stage = entry.partition(":")
    return name, (stage or None)


def fleet_workloads(scenario: Scenario, fleet: FleetConfig) -> list[str]:
    """The workloads ``fleet`` serves, in scenario order."""
    if fleet.workloads is None:
        return list(scenario.workloads)
    return [n for n in scenario.workloads if n in fleet.workloads]


def _check_serves(scenario: Scenario, fleet: FleetConfig) -> None:
    known = sorted(scenario.workloads)
    at = f"fleets.{scenario.fleets.index(fleet)}"
    if fleet.workloads is not None and not fleet.workloads:
        raise ValueError(f"{at}.workloads: fleet '{fleet.name}' lists no workloads (workloads: []); list some of {known} "
                         f"or leave the field out to serve all")
    unknown = [n for n in (fleet.workloads or []) if n not in scenario.workloads]
    if unknown:
        raise ValueError(f"{at}.workloads: fleet '{fleet.name}' lists unknown workload(s) {unknown}; workloads are: {known}")
    served: set[str] = set()
    for p, pool in enumerate(fleet.pools):
        main = []
        for entry in pool.serves:
            name, stage = split_serves(entry)
            if name not in scenario.workloads:
                raise ValueError(
                    f"{at}.pools.{p}.serves: fleet '{fleet.name}' pool '{pool.name}' serves unknown workload '{name}'; "
                    f"workloads are: {known}"
                )
            if stage is not None:
                allowed = STAGES.get(scenario.workloads[name].kind, ())
                if stage not in allowed or stage == "denoise":
                    raise ValueError(
                        f"{at}.pools.{p}.serves: fleet '{fleet.name}' pool '{pool.name}' serves '{entry}': stage '{stage}' of a "
                        f"{scenario.workloads[name].kind} workload cannot be placed separately; "
                        f"allowed: {[a for a in allowed if a != 'denoise']}"
                    )
            else:
                main.append(name)
                served.add(name)
        if main and [split_serves(e)[1] for e in pool.serves if split_serves(e)[1]]:
            raise ValueError(
                f"{at}.pools.{p}.serves: fleet '{fleet.name}' pool '{pool.name}' mixes whole workloads and separate stages "
                f"({pool.serves}); give stages their own pool"
            )
        models = {scenario.workloads[n].model for n in main}
        kinds = {_engine_family(scenario.workloads[n].kind) for n in main}
        if len(models) > 1 or len(kinds) > 1:
            raise ValueError(
                f"{at}.pools.{p}.serves: fleet '{fleet.name}' pool '{pool.name}' serves workloads of different models or "
                f"engines ({sorted(map(str, models))}); a pool serves one model"
            )
    missing = [n for n in fleet_workloads(scenario, fleet) if n not in served]
    if missing:
        raise ValueError(f"{at}.pools: fleet '{fleet.name}' has no pool serving workload(s) {missing}")


def _check_sizes(scenario: Scenario) -> None:
    """Refuse runs that would generate more requests than the documented limit, before
    any memory is allocated for them. (Time-series samples need no limit: the sampler
    keeps at most 2,048 instants by halving its grid, whatever ``sample_interval_s``.)"""
    expected = {}
    for name, wl in scenario.workloads.items():
        if wl.arrival.kind != "trace":
            diurnal = getattr(wl.arrival, "diurnal", None)
            peak = 1.0 + (diurnal.amplitude if diurnal else 0.0)
            expected[name] = wl.arrival.mean_rate_per_s * peak * scenario.duration_s
    total = sum(expected.values())
    limit = MAX_IN_MEMORY_REQUESTS if scenario.engine.stream == "off" else MAX_EXPECTED_REQUESTS
    if total > limit:
        worst = max(expected, key=expected.get)
        advice = "; or set engine.stream: auto (or on)" if limit == MAX_IN_MEMORY_REQUESTS else ""
        raise ValueError(
            f"workloads.{worst}.arrival: the arrivals would generate about {total:,.0f} requests over "
            f"duration_s={scenario.duration_s:g} ({worst} alone {expected[worst]:,.0f}); the limit is "
            f"{limit:,} per run with engine.stream: {scenario.engine.stream}: lower the rates or duration_s, "
            f"or split the study{advice}"
        )


MAX_DIFFUSION_LM_STEPS = 10_000


def _support_max(dist) -> float:
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


def _check_count_distributions(name: str, wl) -> None:
    """Token counts within [0, MAX_TOKENS] (larger would overflow the engine's int64
    arithmetic): a distribution that can draw more (its largest value: a constant, a
    choice or empirical value, uniform ``high``, lognormal ``max``) is refused, and so is
    an unbounded one (exponential, lognormal without ``max``) whose mean is beyond it;
    an unbounded tail's rare draws above it are clipped by
    :func:`traffic.distributions.sample_tokens`. Diffusion-LM steps integers in
    [1, MAX_DIFFUSION_LM_STEPS] from a bounded distribution (0.3 or 1e12 steps are
    refused, not rounded)."""
    for field in ("prompt_tokens", "output_tokens"):
        dist = getattr(wl, field, None)
        if isinstance(dist, BaseModel):
            try:
                mean = float(dist.mean)
            except (OverflowError, ValueError):
                mean = math.inf
            high = float(dist.observed().max()) if dist.kind == "empirical" else _support_max(dist)
            if not mean <= MAX_TOKENS or (math.isfinite(high) and high > MAX_TOKENS):
                raise ValueError(f"workloads.{name}.{field}: token counts must be at most {MAX_TOKENS:,}; this "
                                 f"distribution draws up to {high:g} (mean {mean:g}): lower it")
    steps = getattr(wl, "steps", None)
    if wl.kind == "diffusion_lm" and isinstance(steps, BaseModel):
        high = _support_max(steps)
        bad = [v for v in _explicit_values(steps) if v != int(v) or not 1 <= v <= MAX_DIFFUSION_LM_STEPS]
        if bad or not high <= MAX_DIFFUSION_LM_STEPS or (steps.kind == "uniform" and steps.low < 1):
            raise ValueError(f"workloads.{name}.steps: denoising steps must be whole numbers from 1 to "
                             f"{MAX_DIFFUSION_LM_STEPS:,} drawn from a bounded distribution (constant, choice, "
                             f"uniform, or lognormal with max); got {steps.model_dump(exclude_defaults=True)}")


def _engine_family(kind: str) -> str:
    """Workload kinds that can share a replica's serving loop."""
    return {"autoregressive": "ar", "service_time": "service"}.get(kind, "step")


def _yaml_path(loc: tuple, data: Any) -> tuple:
    """The path of ``loc`` in the input as written: pydantic inserts union tags (the
    ``kind`` value) and validator names into ``loc``; they are not keys of the input."""
    path, node = [], data
    for part in loc:
        if isinstance(node, dict) and part in node:
            path.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            path.append(part)
            node = node[part]
        elif isinstance(node, dict) and part in (node.get("kind"), node.get("format")) or not isinstance(node, (dict, list)):
            continue  # a union tag: the kind of a workload or arrival, the format of a trace
        elif isinstance(part, str) and ("[" in part or "-" in part):
            continue  # validator labels such as function-after[...]
        else:
            path.append(part)  # a missing required field
            node = None
    return tuple(path)


def _leading_path(msg: str, data: Any) -> tuple:
    """``("workloads", "chat", "steps")`` from a message ``"workloads.chat.steps: ..."``
    whose first word is a dotted path starting at a top-level key of ``data``; else ``()``."""
    head = msg.split(": ", 1)[0] if ": " in msg else ""
    if not head or " " in head or not isinstance(data, dict) or head.split(".")[0] not in data:
        return ()
    return tuple(int(p) if p.isdigit() else p for p in head.split("."))


def _members(annotation) -> list:
    """The types an annotation admits: unions, Optional and Annotated unwrapped."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin in (Union, UnionType):
        return [m for a in get_args(annotation) for m in _members(a)]
    return [annotation]


def _is_model(t) -> bool:
    return isinstance(t, type) and issubclass(t, BaseModel)


def _step(t, part) -> list:
    """The types at ``part`` below type ``t`` (a model field, a dict value, a list item, or
    the member of a tagged union whose ``kind``/``format`` literal is ``part``)."""
    if _is_model(t):
        for name, f in t.model_fields.items():
            if part in (name, f.alias):
                return _members(f.annotation)
            if get_origin(f.annotation) is Literal and part in get_args(f.annotation):
                return [t]  # a union tag in pydantic's loc: stay on this member
        return []
    args = get_args(t)
    if get_origin(t) is dict and len(args) == 2:
        return _members(args[1])
    if get_origin(t) is list and args and isinstance(part, int):
        return _members(args[0])
    return []


def valid_fields(model: type, loc: tuple) -> list[str]:
    """Field names (YAML spelling) allowed beside the unknown field at ``loc`` (its last
    part), found by walking ``model``'s annotations; [] when the walk gets lost."""
    types = [model]
    for part in loc[:-1]:
        types = [n for t in types for n in _step(t, part)]
    names = {f.alias or name for t in types if _is_model(t) for name, f in t.model_fields.items()}
    return sorted(names)


def format_validation_error(err: ValidationError, source: str, data: Any = None,
                            loaded: LoadedYaml | None = None, model: type | None = None) -> str:
    """One line per problem: ``source[:line]: field.path: message (got value)``; an
    unknown field also lists the valid ones (walked from ``model``, default
    :class:`Scenario` when ``err`` is about one)."""
    model = model or (Scenario if err.title == "Scenario" else None)
    lines = []
    for e in err.errors():
        path = _yaml_path(tuple(e["loc"]), data) if data is not None else tuple(e["loc"])
        if e["type"] in ("union_tag_invalid", "union_tag_not_found"):  # name the discriminating field
            tag = str(e.get("ctx", {}).get("discriminator", "")).strip("'\"")
            if tag and (not path or path[-1] != tag):
                path = (*path, tag)
        msg = str(e["ctx"]["error"]) if e["type"] == "value_error" and "error" in e.get("ctx", {}) else e["msg"]
        if not path:  # a cross-field check: its message starts with the field path when it has one
            path = _leading_path(msg, data)
            msg = msg if not path else msg.split(": ", 1)[1]
        line = loaded.line_of(path) if loaded and path else None
        got = e.get("input")
        shown = "" if isinstance(got, (dict, list)) or not e["loc"] else f" (got {got!r})"
        if e["type"] == "extra_forbidden" and model is not None and (allowed := valid_fields(model, tuple(e["loc"]))):
            shown += f"; valid fields here: {', '.join(allowed)}"
        lines.append(f"{source}{f':{line}' if line else ''}: {dotted(path)}: {msg}{shown}")
    return "\n".join(lines)


def parse_scenario(data: Any, source: str = "<scenario>", loaded: LoadedYaml | None = None) -> Scenario:
    """Validate a mapping (e.g. parsed YAML) into a :class:`Scenario`, strictly: a number
    is a number and a bool a bool (``"10"``, ``true`` for a count, ``4.0`` for an integer
    are refused), every number is finite, and every model and accelerator the scenario
    names exists in the catalog, of a kind its workload can use.

    Raises:
        ScenarioError: naming ``source``, the field path, the bad value and what is allowed.
    """
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario must be a YAML mapping, got {type(data).__name__}")
    check_plain_data(data, source, loaded)
    try:
        scenario = Scenario.model_validate(data, strict=True)
    except ValidationError as err:
        raise ScenarioError(format_validation_error(err, source, data, loaded)) from None
    check_catalog_refs(scenario, source, loaded)
    return scenario


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario YAML file (strictly, through :mod:`sim.loader`).

    Raises:
        ScenarioError: file missing, unreadable, special or too large; YAML syntax error,
            duplicate key or refused tag (with line); any validation failure (field path,
            bad value, allowed values).
    """
    loaded = load_yaml(path, "scenario")
    check_file_kind(loaded.data, str(path), "scenario")
    return parse_scenario(resolve_paths(loaded.data, Path(path).parent), str(path), loaded)


def scenario_to_yaml(scenario: Scenario) -> str:
    """The resolved scenario (defaults filled in) as YAML, saved beside every result."""
    return yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False)


# --- catalog references -------------------------------------------------------------

MODEL_KINDS = {
    "autoregressive": ("autoregressive",),
    "diffusion_lm": ("diffusion_lm",),
    "image_diffusion": ("image_diffusion",),
    "video_diffusion": ("video_diffusion",),
    "branching_search": ("image_diffusion", "video_diffusion"),
}
"""The catalog model kinds each workload kind can run (its denoiser or LLM)."""
VERIFIER_KINDS = ("verifier",)


def check_catalog_refs(scenario: Scenario, source: str, loaded: LoadedYaml | None = None) -> None:
    """Every model and accelerator named exists in the catalog with a usable kind; fp4
    only on parts with an FP4 peak. (Trace rows beyond a model's context are replayed as
    recorded: see docs/traces.md, "Trace rules".)

    Raises:
        ScenarioError: naming ``source``, the field path (line), the value and what is allowed.
    """
    from fleets.catalog_io import load_catalog

    catalog = load_catalog()

    def fail(path: tuple, message: str) -> None:
        line = loaded.line_of(path) if loaded else None
        raise ScenarioError(f"{source}{f':{line}' if line else ''}: {dotted(path)}: {message}")

    for name, wl in scenario.workloads.items():
        if wl.kind in MODEL_KINDS:
            _check_model(catalog, wl.model, MODEL_KINDS[wl.kind], f"workload '{name}' ({wl.kind})",
                         ("workloads", name, "model"), fail)
        verifier = getattr(wl, "verifier", None)
        if verifier is not None:
            _check_model(catalog, verifier.model, VERIFIER_KINDS, f"workload '{name}' verifier",
                         ("workloads", name, "verifier", "model"), fail)
    for f, fleet in enumerate(scenario.fleets):
        for p, pool in enumerate(fleet.pools):
            where = ("fleets", f, "pools", p)
            if pool.accelerator not in catalog.accelerators:
                close = [k for k in catalog.accelerators if k.lower() == pool.accelerator.lower().strip()]
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                fail(where + ("accelerator",), f"unknown accelerator '{pool.accelerator}'{hint}; allowed: "
                     f"{', '.join(sorted(catalog.accelerators))}")
            acc = catalog.accelerators[pool.accelerator]
            if pool.precision == "fp4" and acc.peak_fp4_flops is None:
                usable = [pr for pr, peak in (("bf16", acc.peak_bf16_flops), ("fp8", acc.peak_fp8_flops)) if peak]
                fail(where + ("precision",), f"'{pool.accelerator}' has no FP4 peak in the catalog, so fp4 is "
                     f"not allowed on it; allowed: {', '.join(usable)}")


def _check_model(catalog, key: str, kinds: tuple, who: str, path: tuple, fail) -> None:
    allowed = sorted(k for k, m in catalog.models.items() if m.kind in kinds)
    if key not in catalog.models:
        fail(path, f"unknown model '{key}' for {who}; allowed ({' or '.join(kinds)}): {', '.join(allowed)}")
    kind = catalog.models[key].kind
    if kind not in kinds:
        fail(path, f"model '{key}' is of kind '{kind}'; {who} needs a model of kind {' or '.join(kinds)}: "
             f"{', '.join(allowed)}")
