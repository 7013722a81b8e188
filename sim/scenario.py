"""The scenario: one pydantic schema for everything a run needs.

A scenario is data (Ciw-style): workloads (what is asked of the fleet), fleets (hardware
mixes to compare), economics (prices), and run settings. ``load_scenario`` reads YAML and
turns every validation failure into a :class:`~sim.errors.ScenarioError` naming the file,
the field path, the bad value and what is allowed.

Defaults that are facts carry their source in the field description.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError, model_serializer, model_validator

from sim.errors import ScenarioError
from sim.operations import Autoscale, Failures, Loading, Residency
from sim.loader import LoadedYaml, check_file_kind, check_plain_data, dotted, load_yaml, resolve_paths
from sim.schema_errors import format_validation_error
from sim.workloads import Workload, kind_of
from sim.workloads.base import MAX_SPAN_S, MAX_TOKENS, Strict

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
MAX_DURATION_S = 90 * 86400
"""Longest ``duration_s`` (90 days: a fleet over weeks, e.g. the 54 days of the Llama 3
failure record); drains, warm-ups and SLO bounds stay within 30 days (MAX_SPAN_S)."""
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


PREFIX_LOAD_TOKENS = 4096
"""Default ``prefix_cache.load_tokens`` (assumed, not measured: one request queued or running
counts as much as 4,096 cached prompt tokens, about one Mooncake conversation turn's new
input; docs/kv-reuse.md shows the hit-versus-balance trade as it varies)."""


SSD_READ_LATENCY_S = 60e-6
"""Default ``prefix_cache.ssd_latency_s``: a PCIe Gen5 enterprise NVMe drive's typical read
latency, 60 µs (Micron 9550 spec table as reproduced by StorageReview,
storagereview.com/review/micron-9550-max-review, 2025; secondary)."""


class PrefixCacheConfig(Strict):
    """A pool's prefix cache (:mod:`sim.engine.prefix_cache`, docs/kv-reuse.md): KV blocks
    kept after their request and reused by later requests with the same prefix. Requests
    carry their block hashes from their source (a Mooncake trace's ``hash_ids``, 512-token
    blocks); a request without hashes never hits."""

    block_tokens: int = Field(512, ge=1, le=MAX_TOKENS, description="tokens per cached block: the block size of "
                              "the requests' hashes (512 in the Mooncake traces, FAST'25 release README); a "
                              "multiple of the pool's kv_block_tokens")
    capacity_blocks: int | None = Field(None, ge=1, le=10**12, description="most blocks one replica caches; "
                                        "default: as many as its HBM holds beside the running sequences")
    host_blocks: int = Field(0, ge=0, le=10**12, description="blocks one replica keeps in host DRAM: HBM "
                             "evictions are demoted there, and a hit there is copied back over host_link; 0: no host tier")
    host_link: str = Field("host-pcie5-x16", description="host link tier key of fleets/data/storage_tiers.csv "
                           "(tier host_link, per GPU): the host-to-HBM copy rate of the host tier")
    ssd_blocks: int = Field(0, ge=0, le=10**12, description="blocks one replica keeps on local NVMe SSD, below "
                            "host DRAM: evictions from the tier above are demoted there, and a hit there is read "
                            "back over the drives and the host link; 0: no SSD tier")
    ssd: str = Field("nvme-gen5", description="the SSD's storage tier key of fleets/data/storage_tiers.csv (tier "
                     "storage, per drive): its read rate")
    ssd_drives: int = Field(8, ge=1, le=64, description="NVMe drives per node, shared by the node's replicas in "
                            "proportion to their accelerators (DGX B200: 8 x 3.84 TB U.2, DGX B200 user guide)")
    ssd_latency_s: float = Field(SSD_READ_LATENCY_S, ge=0.0, le=1.0, description="latency of a read from the SSD "
                                 "tier, paid once per prefill that reads from it")
    shared_blocks: int = Field(0, ge=0, le=10**12, description="blocks the pool's shared KV store keeps for all "
                               "its replicas (Mooncake Store, LMCache remote backend), below each replica's last "
                               "tier: the blocks they drop go there, and any replica's hit there is read over its "
                               "scale-out NICs (the pool's scaleout_fabric) into HBM; 0: no shared tier")
    load_tokens: int = Field(PREFIX_LOAD_TOKENS, ge=0, le=MAX_TOKENS, description="the prefix_aware router's "
                             "price of load: a replica scores its cached prefix tokens minus load_tokens per request "
                             "queued or running on it (assumed; sweep it: docs/kv-reuse.md)")

    @model_serializer(mode="wrap")
    def _leave_out_off(self, handler):
        """The saved scenario lists ``shared_blocks`` only when a shared tier is on (a
        scenario without one saves as it always did)."""
        data = handler(self)
        if isinstance(data, dict) and not data.get("shared_blocks"):
            data.pop("shared_blocks", None)
        return data


class PoolConfig(Strict):
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
    sp: int | None = Field(
        None, ge=1, le=4096, description="sequence-parallel degree of a video DiT (its tokens split over sp GPUs of "
        "one scale-up domain; replica accelerators = tp x sp x pp); default: 1 (the reference codes run Wan 2.1/2.2 "
        "with --ulysses_size = the GPU count)")
    sp_attention: Literal["ulysses", "ring"] | None = Field(
        None, description="how SP attention exchanges tokens: Ulysses all-to-all (sp divides the heads) or ring K/V "
        "passes; default: the model's reference code (sim.models.video_parallel.REFERENCES)")
    fsdp: bool | None = Field(
        None, description="video DiT weights and text encoder sharded over the SP group (FSDP, a block gathered "
        "before it runs); default: on when sp > 1 (Wan --dit_fsdp --t5_fsdp)")
    offload: bool | None = Field(
        None, description="video DiT pipeline models moved to host memory between phases (Wan --offload_model); "
        "default: on for a one-GPU replica, as Wan's generate.py")
    precision: Literal["bf16", "fp8", "fp4"] = Field("fp8", description="weights and linear-layer math")
    kv_precision: Literal["bf16", "fp8", "fp4"] | None = Field(
        None, description="KV cache; default: the weights', FP8 under FP4 weights (production FP4 serving)")
    attention_precision: Literal["bf16", "fp8", "fp4"] | None = Field(
        None, description="attention math; default: the KV cache's; refused on a part without that peak")
    max_batch: int = Field(256, ge=1, le=65_536, description="max concurrent sequences/samples")
    max_prefill_tokens: int = Field(8192, ge=1, le=MAX_TOKENS, description="token budget of one iteration")
    prefill_chunk_tokens: int | None = Field(
        None, ge=1, le=MAX_TOKENS, description="chunked prefill (docs/serving.md): each iteration's token budget, "
        "decodes first (k + 1 tokens each under speculation) and prompt chunks in the rest (Sarathi-Serve, vLLM), "
        "in place of max_prefill_tokens; more than max_batch (× (k + 1) under speculation); absent: every prompt "
        "prefilled whole in one iteration")
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
    # operations (sim/operations.py, docs/operations.md); absent: every replica warm, one model, never failing
    loading: Loading | None = Field(None, description="where weights load from (model swaps, cold starts)")
    residency: Residency | None = Field(None, description="several checkpoints and LoRA adapters on the pool")
    autoscale: Autoscale | None = Field(None, description="replicas powered with demand; replicas is the maximum")
    failures: Failures | None = Field(None, description="component failures, detection, repair and spares")

    prefix_cache: PrefixCacheConfig | None = Field(
        None, description="automatic prefix caching (docs/kv-reuse.md); absent: every prompt prefilled in full")

    scaleout_fabric: str | None = Field(
        None, description="scale-out NIC per accelerator, a key of fleets/data/fabrics.csv (ib-ndr-400, roce-400, "
        "eth-200 ...); default: the accelerator's catalog figures")

    @model_serializer(mode="wrap")
    def _leave_out_unset(self, handler):
        """The saved scenario lists ``scaleout_fabric`` and the operations blocks only when
        set (a scenario without them saves as it always did)."""
        data = handler(self)
        if isinstance(data, dict):
            for key in ("scaleout_fabric", "loading", "residency", "autoscale", "failures", "prefix_cache",
                        "prefill_chunk_tokens"):
                if data.get(key) is None:
                    data.pop(key, None)
        return data

    @model_validator(mode="after")
    def _operations(self) -> "PoolConfig":
        if (self.residency is not None or self.autoscale is not None) and self.loading is None:
            raise ValueError(f"pool '{self.name}': residency and autoscale load weights: give loading "
                             "(storage tier key, host_link)")
        a = self.autoscale
        if a is not None and not a.min_replicas <= (a.initial_replicas or a.min_replicas) <= self.replicas:
            raise ValueError(f"pool '{self.name}': autoscale needs min_replicas (={a.min_replicas}) <= "
                             f"initial_replicas (={a.initial_replicas or a.min_replicas}) <= replicas (={self.replicas}, the maximum)")
        c = self.prefix_cache
        if c is not None and c.block_tokens % self.kv_block_tokens:
            raise ValueError(f"pool '{self.name}': prefix_cache.block_tokens (={c.block_tokens}) must be a multiple "
                             f"of kv_block_tokens (={self.kv_block_tokens})")
        return self

    @property
    def operated(self) -> bool:
        """Any of residency, autoscale or failures is set (the engine's operations layer runs)."""
        return self.residency is not None or self.autoscale is not None or self.failures is not None


class FleetConfig(Strict):
    """One hardware mix: pools plus the routing policy that spreads arrivals over them."""

    name: str = Field(min_length=1)
    router: Literal["round_robin", "least_outstanding", "join_shortest_queue", "central_queue", "prefix_aware"] = (
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


MIN_YEARS = 0.1
"""Shortest depreciation life accepted (years, about five weeks): shorter lives are no
real input, and 1e-320 years made every cost infinite."""


class Economics(Strict):
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
      depreciation. A choice, not a fact: set your cost of capital (WACC). Not charged by
      default, and every cost output says so (docs/costs.md, "Finance defaults"); sourced
      values to choose from in fleets/data/finance.csv: 6.1% (Equinix WACC) and 6.3%
      (Digital Realty), data-centre REITs, to 10.9% (NVIDIA), all valueinvesting.io
      CAPM estimates (secondary).
    - network_capex_usd_per_node 66,000: scale-out fabric share per 8-GPU node
      (switches, optics, cables) = 8 x $47,000 all-in capex per H100 incl. InfiniBand
      minus the $310,000 node incl. IB cards ("H100 Freakonomics",
      substack.tech-talk-cto.com, 2024-08; secondary, derived); applied to every type.
    - maintenance_fraction_per_year 0.0 (of IT capex per year): not charged by default;
      4-8% per year after the first is the range in fleets/data/finance.csv (CTWatch
      Quarterly, May 2006, "Designing and supporting high-end computational
      facilities"; secondary, old).
    - staff_usd_per_kw_month 0.0 (per provisioned IT kW): no published figure found
      (fleets/data/finance.csv, status assumed); not charged unless set.
    - other_opex_fraction_per_year 0.0: any other opex as a fraction of capex per year.
    - ownership own: buy the fleet; ``rent`` bills accelerator-hours at
      ``rental_usd_per_accelerator_hour`` (per type; defaults from the gpu_rental rows,
      in fleets/data/ownership.csv with their sources); ``colocate`` buys the IT
      equipment and rents space and power in a colocation facility (no facility capex).
    - colocation_usd_per_kw_month 184.06 (``colocate`` only): CBRE North America Data
      Center Trends H2 2024 (2025-02-26), average monthly asking rate for a 250-500 kW
      requirement across primary markets (cbre.com; verified, publisher page), charged
      on the contracted IT kW = provisioned IT kW x ``colocation_contract_ratio`` (1.0).
    - colocation_power metered: power billed on top at ``electricity_usd_per_kwh`` x PUE
      per IT kWh (assumed: CBRE's rate does not say; wholesale leases usually pass power
      through); ``included`` when the rate covers power.
    - facility_power_limit_mw None: optional cap on a fleet's packed facility power
      (provisioned IT x PUE); a fleet over it is refused.

    Accelerator and host power follow fleets/data/power.csv (sim/models/power.py).
    """

    electricity_usd_per_kwh: float = Field(0.0892, ge=0, le=100)
    pue: float = Field(1.56, ge=1, le=5)
    facility_capex_usd_per_mw: float = Field(11.7e6, ge=0, le=1e10)
    depreciation_years: float = Field(5.0, ge=MIN_YEARS, le=50, description="IT equipment life, years (>= 0.1)")
    facility_depreciation_years: float = Field(20.0, ge=MIN_YEARS, le=100, description="facility life, years (>= 0.1)")
    discount_rate_per_year: float = Field(0.0, ge=0, le=1)
    network_capex_usd_per_node: float = Field(66_000.0, ge=0, le=1e7)
    maintenance_fraction_per_year: float = Field(0.0, ge=0, le=1)
    staff_usd_per_kw_month: float = Field(0.0, ge=0, le=1e4)
    other_opex_fraction_per_year: float = Field(0.0, ge=0, le=10)
    ownership: Literal["own", "rent", "colocate"] = "own"
    colocation_usd_per_kw_month: float = Field(184.06, ge=0, le=1e5)
    colocation_power: Literal["metered", "included"] = "metered"
    colocation_contract_ratio: float = Field(1.0, ge=1, le=10, description="contracted / provisioned IT kW")
    rental_usd_per_accelerator_hour: dict[str, Annotated[float, Field(ge=0, le=1000)]] = Field(
        default_factory=dict, max_length=1000,
        description="per accelerator type (catalog keys); overrides fleets/data/ownership.csv")
    facility_power_limit_mw: float | None = Field(None, gt=0, le=1e5)


class EngineConfig(Strict):
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
    output: Literal["rows", "summary"] = Field(
        "rows",
        description="rows: per-request rows (requests.parquet when streamed); summary: counters and mergeable "
        "quantile sketches only (streams, writes no request rows: 10^8-10^9 requests in bounded memory and disk)",
    )


class Scenario(Strict):
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
    duration_s: float = Field(gt=0, le=MAX_DURATION_S)
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
            _check_operations(self, fleet)
            _check_chunking(self, fleet)
        for name, wl in self.workloads.items():
            kind_of(wl).check_arrival(name, wl)
            mix = getattr(wl, "mix", None)
            if mix is not None and mix.from_trace and getattr(wl.arrival, "format", None) != "genai_csv":
                raise ValueError(f"workloads.{name}.mix.from_trace: only an image trace (arrival format genai_csv) "
                                 "names checkpoints and adapters; set models/adapters instead")
        _check_sizes(self)
        for name, wl in self.workloads.items():
            kind_of(wl).check(name, wl)
        return self


def split_serves(entry: str) -> tuple[str, str | None]:
    """``"image:decode"`` → ("image", "decode"); ``"image"`` → ("image", None)."""
    name, _, stage = entry.partition(":")
    return name, (stage or None)


def fleet_workloads(scenario: Scenario, fleet: FleetConfig) -> list[str]:
    """The workloads ``fleet`` serves, in scenario order."""
    if fleet.workloads is None:
        return list(scenario.workloads)
    return [n for n in scenario.workloads if n in fleet.workloads]


def _check_chunking(scenario: Scenario, fleet: FleetConfig) -> None:
    """``prefill_chunk_tokens`` is modelled on an autoregressive pool that prefills (a
    co-located pool, or a split deployment's prefill pool; with or without a prefix cache,
    with or without speculative decoding) and must exceed what the decodes of a full batch
    take from an iteration's budget, so a prompt mid-prefill always advances: ``max_batch``
    tokens, or ``max_batch`` × (k + 1) on a co-located pool whose workload speculates
    (each decoding sequence verifies k + 1 tokens; docs/serving.md)."""
    for p, pool in enumerate(fleet.pools):
        chunk = pool.prefill_chunk_tokens
        if chunk is None:
            continue
        at = f"fleets.{scenario.fleets.index(fleet)}.pools.{p}.prefill_chunk_tokens"
        per_sequence = 1
        for entry in pool.serves:
            name, stage = split_serves(entry)
            wl = scenario.workloads.get(name)
            if wl is None:
                continue  # _check_serves names it
            if stage == "draft":
                raise ValueError(f"{at}: pool '{pool.name}' serves '{entry}': a draft pool's prefill runs in its target "
                                 "pools' iterations (chunked with theirs); leave out prefill_chunk_tokens here and set "
                                 "it on the target pool")
            if stage not in (None, "prefill") or kind_of(wl).family != "ar":
                raise ValueError(f"{at}: pool '{pool.name}' serves '{entry}': chunked prefill is modelled on an "
                                 "autoregressive pool that prefills (co-located, or a split deployment's "
                                 "'<workload>:prefill' pool); leave out prefill_chunk_tokens here")
            spec = getattr(wl, "speculation", None)
            if stage is None and spec is not None:
                per_sequence = max(per_sequence, spec.draft_tokens + 1)
        if chunk <= pool.max_batch * per_sequence:
            what = (f"max_batch (={pool.max_batch})" if per_sequence == 1 else
                    f"max_batch × (draft_tokens + 1) (={pool.max_batch} × {per_sequence} = {pool.max_batch * per_sequence})")
            raise ValueError(f"{at}: pool '{pool.name}' prefill_chunk_tokens (={chunk}) must exceed {what}: "
                             "decodes come first in an iteration's token budget"
                             + ("" if per_sequence == 1 else ", each verifying its k drafted tokens and one more"))


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
    split: dict[str, dict[str, list[PoolConfig]]] = {}  # workload -> side -> pools (prefill/decode)
    helpers: dict[tuple[str, str], list[str]] = {}  # (workload, helper stage) -> pools running it
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
                kind = kind_of(scenario.workloads[name])
                allowed = [a for a in kind.stages if a != "denoise"] + list(kind.split_stages) + list(kind.helper_stages)
                if stage not in allowed:
                    raise ValueError(
                        f"{at}.pools.{p}.serves: fleet '{fleet.name}' pool '{pool.name}' serves '{entry}': stage '{stage}' of a "
                        f"{scenario.workloads[name].kind} workload cannot be placed separately; "
                        f"allowed: {allowed}"
                    )
                if stage in kind.split_stages:
                    split.setdefault(name, {}).setdefault(stage, []).append(pool)
                if stage in kind.helper_stages:
                    try:
                        kind.check_helper(name, scenario.workloads[name], stage)
                    except ValueError as err:
                        raise ValueError(f"{at}.pools.{p}.serves: fleet '{fleet.name}' pool '{pool.name}': {err}") from None
                    helpers.setdefault((name, stage), []).append(pool.name)
                    if len(helpers[name, stage]) > 1 or len(pool.serves) > 1:
                        raise ValueError(
                            f"{at}.pools.{p}.serves: fleet '{fleet.name}' pool '{pool.name}' serves {pool.serves}: one "
                            f"pool per fleet runs '{entry}' ({helpers[name, stage]}), and it serves nothing else")
            else:
                main.append(name)
                served.add(name)
        if main and [split_serves(e)[1] for e in pool.serves if split_serves(e)[1]]:
            raise ValueError(
                f"{at}.pools.{p}.serves: fleet '{fleet.name}' pool '{pool.name}' mixes whole workloads and separate stages "
                f"({pool.serves}); give stages their own pool"
            )
        models = {scenario.workloads[n].model for n in main}
        kinds = {kind_of(scenario.workloads[n]).family for n in main}
        if len(models) > 1 or len(kinds) > 1:
            raise ValueError(
                f"{at}.pools.{p}.serves: fleet '{fleet.name}' pool '{pool.name}' serves workloads of different models or "
                f"engines ({sorted(map(str, models))}); a pool serves one model"
            )
        _check_split_pool(scenario, fleet, p, pool, at)
    for name, sides in split.items():
        _check_split(scenario, fleet, name, sides, name in served, at)
        served.add(name)
    missing = [n for n in fleet_workloads(scenario, fleet) if n not in served]
    if missing:
        raise ValueError(f"{at}.pools: fleet '{fleet.name}' has no pool serving workload(s) {missing}")


def _check_operations(scenario: Scenario, fleet: FleetConfig) -> None:
    """Autoscaling and failures take replicas out of routing by their outstanding count,
    which round robin does not read; residency serves one workload's checkpoints."""
    at = f"fleets.{scenario.fleets.index(fleet)}"
    for p, pool in enumerate(fleet.pools):
        if (pool.autoscale or pool.failures) and fleet.router in ("round_robin", "prefix_aware"):
            raise ValueError(f"{at}.router: pool '{pool.name}' autoscales or fails, which needs a router that reads "
                             f"replica load: least_outstanding, join_shortest_queue or central_queue, not {fleet.router}")
        if pool.operated and any(":" in e for e in pool.serves):
            raise ValueError(f"{at}.pools.{p}: pool '{pool.name}' serves a separate pipeline stage ({pool.serves}); "
                             "residency, autoscale and failures apply to pools serving whole workloads")
        mixed = [e for e in pool.serves if getattr(scenario.workloads[split_serves(e)[0]], "mix", None) is not None]
        if mixed and pool.residency is None:
            raise ValueError(f"{at}.pools.{p}.residency: pool '{pool.name}' serves workload(s) {mixed} with a model "
                             "mix (checkpoints, adapters): give the pool residency (and loading)")


def _check_split_pool(scenario: Scenario, fleet: FleetConfig, p: int, pool: PoolConfig, at: str) -> None:
    """A pool of a split deployment runs one side (prefill or decode) of workloads of one model."""
    sides = {stage for name, stage in map(split_serves, pool.serves)
             if stage in kind_of(scenario.workloads[name]).split_stages}
    if not sides:
        return
    models = {scenario.workloads[split_serves(e)[0]].model for e in pool.serves}
    if len(sides) > 1 or len(models) > 1:
        raise ValueError(
            f"{at}.pools.{p}.serves: fleet '{fleet.name}' pool '{pool.name}' serves {pool.serves}: a pool of a split "
            f"deployment runs one side (prefill or decode) of workloads of one model; serve the whole workload "
            f"(serves: [name]) to run both on one pool")


def _check_split(scenario: Scenario, fleet: FleetConfig, name: str, sides: dict, whole: bool, at: str) -> None:
    """A workload split into prefill and decode: both sides placed, no whole-workload pool
    besides, one branch per request, and the same KV-cache precision on both sides (the
    transferred KV cache is used as it is)."""
    from fleets.catalog import default_kv_precision

    wl = scenario.workloads[name]
    where = f"{at}.pools: fleet '{fleet.name}' workload '{name}'"
    if whole:
        raise ValueError(f"{where} is served whole by one pool and split into {sorted(sides)} by others; "
                         f"serve it one way in a fleet")
    absent = [s for s in kind_of(wl).split_stages if s not in sides]
    if absent:
        raise ValueError(f"{where}: its {', '.join(sorted(sides))} side is placed (serves: [{name}:...]) but no pool "
                         f"serves '{name}:{absent[0]}'; a split deployment needs both sides")
    if getattr(wl, "best_of_k", 1) > 1:
        raise ValueError(f"{where}: best_of_k > 1 is not modelled in a split deployment; serve it whole")
    precisions = {(p.name, p.kv_precision or default_kv_precision(p.precision))
                  for pools in sides.values() for p in pools}
    if len({kv for _, kv in precisions}) > 1:
        listed = ", ".join(f"{n}: {kv}" for n, kv in sorted(precisions))
        raise ValueError(f"{where}: its prefill and decode pools store the KV cache at different precisions "
                         f"({listed}); the decode side uses the transferred cache as it is, so set one "
                         f"kv_precision on all of them")


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
        raise ScenarioError(format_validation_error(err, source, data, loaded, Scenario)) from None
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
    check_file_kind(loaded.data, str(path), "scenario", set(Scenario.model_fields))
    return parse_scenario(resolve_paths(loaded.data, Path(path).parent), str(path), loaded)


OPTIONAL_BLOCKS = {"pool": ("loading", "residency", "autoscale", "failures"), "workload": ("mix",)}
"""Blocks left out of the saved scenario when unset, so a scenario that does not use them
saves as it did before they existed."""


def scenario_to_yaml(scenario: Scenario) -> str:
    """The resolved scenario (defaults filled in) as YAML, saved beside every result
    (the :data:`OPTIONAL_BLOCKS` and ``engine.output: rows`` only when set)."""
    data = scenario.model_dump(mode="json")
    if data["engine"].get("output") == "rows":
        del data["engine"]["output"]
    for wl in data["workloads"].values():
        for key in OPTIONAL_BLOCKS["workload"]:
            if wl.get(key, 0) is None:
                del wl[key]
    for fleet in data["fleets"]:
        for pool in fleet["pools"]:
            for key in OPTIONAL_BLOCKS["pool"]:
                if pool.get(key, 0) is None:
                    del pool[key]
    return yaml.safe_dump(data, sort_keys=False)


# --- catalog references -------------------------------------------------------------

VERIFIER_KINDS = ("verifier",)


def check_catalog_refs(scenario: Scenario, source: str, loaded: LoadedYaml | None = None) -> None:
    """Every model and accelerator named exists in the catalog with a usable kind; fp4
    only on parts with an FP4 peak. (Trace rows beyond a model's context are replayed as
    recorded: see docs/traces.md, "Trace rules".)

    Raises:
        ScenarioError: naming ``source``, the field path (line), the value and what is allowed.
    """
    from fleets.catalog_io import load_catalog
    from fleets.fabrics import load_fabrics

    catalog = load_catalog()

    def fail(path: tuple, message: str) -> None:
        line = loaded.line_of(path) if loaded else None
        raise ScenarioError(f"{source}{f':{line}' if line else ''}: {dotted(path)}: {message}")

    for name, wl in scenario.workloads.items():
        model_kinds = kind_of(wl).model_kinds
        if model_kinds:
            _check_model(catalog, wl.model, model_kinds, f"workload '{name}' ({wl.kind})",
                         ("workloads", name, "model"), fail)
        draft = getattr(getattr(wl, "speculation", None), "draft_model", None)
        if draft is not None:
            _check_model(catalog, draft, ("autoregressive",), f"workload '{name}' speculation draft",
                         ("workloads", name, "speculation", "draft_model"), fail)
        verifier = getattr(wl, "verifier", None)
        if verifier is not None:
            _check_model(catalog, verifier.model, VERIFIER_KINDS, f"workload '{name}' verifier",
                         ("workloads", name, "verifier", "model"), fail)
    for key in scenario.economics.rental_usd_per_accelerator_hour:
        if key not in catalog.accelerators:
            fail(("economics", "rental_usd_per_accelerator_hour", key),
                 f"'{key}' is not a catalog accelerator; allowed: {', '.join(sorted(catalog.accelerators))}")
    for f, fleet in enumerate(scenario.fleets):
        for p, pool in enumerate(fleet.pools):
            where = ("fleets", f, "pools", p)
            if pool.accelerator not in catalog.accelerators:
                close = [k for k in catalog.accelerators if k.lower() == pool.accelerator.lower().strip()]
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                fail(where + ("accelerator",), f"unknown accelerator '{pool.accelerator}'{hint}; allowed: "
                     f"{', '.join(sorted(catalog.accelerators))}")
            acc = catalog.accelerators[pool.accelerator]
            if pool.scaleout_fabric is not None:
                fabrics = load_fabrics()
                if pool.scaleout_fabric not in fabrics:
                    fail(where + ("scaleout_fabric",), f"unknown scale-out fabric '{pool.scaleout_fabric}'; "
                         f"allowed: {', '.join(fabrics)}")
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
