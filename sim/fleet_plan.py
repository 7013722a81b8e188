"""A scenario resolved once into per-fleet plans, before the engine starts.

:func:`resolve` turns a validated :class:`~sim.scenario.Scenario` into a
:class:`ScenarioPlan`: for every fleet a :class:`FleetPlan` holding its pools laid out
(placement, perf model, KV/activation capacity: :class:`PoolPlan`), packed into nodes and
racks, checked against the economics (rentable, within the facility power limit), and
each workload's route (the pools serving it, stage by stage for pipelines) and
per-sample costs. The engine (:func:`sim.engine.core.run_fleet`) runs a fleet plan on
the demand; the results (:mod:`sim.results`) read the plan and the run's outcomes. The
plan is frozen: nothing is derived from the scenario again after it.

A pool serves whole workloads (``serves: [image]``) and/or single pipeline stages of
them (``serves: [image:decode]``). An autoregressive workload may instead be split
(prefill/decode disaggregation): pools serving ``chat:prefill`` and pools serving
``chat:decode`` (``PoolPlan.role``), the route naming both sets and the KV-cache link
between every pair (:mod:`sim.models.kv_transfer`). A stage not placed on a pool of its own runs on the
workload's main pool, co-located: that pool then holds the stage's model weights too.
Placement checks (``fleets.placement``) cover weights + minimum KV cache + the largest
activation footprint one request can need (e.g. ×k at a branching fork); a workload whose
single request cannot fit is refused at load time, naming the workload, the model and
the memory needed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from fleets.catalog import Catalog
from fleets.catalog_io import load_catalog
from fleets.packing import FleetPacking, PoolShare, pack_fleet
from fleets.placement import PoolLayout, place_pool
from sim.errors import PlacementError
from sim.models.parallelism import LayoutError
from sim.models.economics import check_rentable
from fleets.fabrics import with_fabric
from sim.models.kv_transfer import KVEnd, KVLink, kv_link
from sim.models.perf import PerfModel, StagePerfs
from sim.ops_plan import OpsPlan, lora_overhead_s, ops_plan, resident_extra_bytes
from sim.models.speculation import SpecPlan, attach_drafters, spec_plan
from sim.models.video_parallel import video_perfs, video_scheme
from sim.scenario import Economics, FleetConfig, PoolConfig, Scenario, fleet_workloads, split_serves
from sim.workloads import kind_of, picture_shape
from sim.workloads.base import WorkloadKind
from sim.workloads.phases import STAGE_CODES
from sim.workloads.picture import PictureShape, aux_models

GB = 1e9


@dataclass(frozen=True)
class RunWindow:
    """When a run measures and how it runs: arrivals in [0, duration_s), statistics over
    arrivals in [warmup_s, duration_s), at most ``drain_s`` of drain, the time series'
    first sampling period (None: duration_s / 1024), exact or fast engine mode."""

    warmup_s: float
    duration_s: float
    drain_s: float
    sample_interval_s: float | None
    exact: bool

    @property
    def length_s(self) -> float:
        """The measurement window's length."""
        return self.duration_s - self.warmup_s


@dataclass(eq=False)
class PoolPlan:
    """A pool laid out: placement, perf model, memory left for KV cache and activations.

    ``resident_bytes`` is the weights of every model the replicas hold (the main model,
    co-located pipeline stages, a speculative drafter); ``free_bytes`` what is left for KV
    cache and activations; ``kv_capacity_blocks`` the KV blocks one replica holds (AR
    pools; a block holds the target's and the drafter's KV of its tokens). ``role``:
    ``prefill`` or ``decode`` for a side of a split deployment, "" otherwise; ``spec``:
    the speculative decoding its workloads run (:class:`sim.models.speculation.SpecPlan`)."""

    index: int
    config: PoolConfig
    family: str  # "ar" | "step" | "service": the replica family (sim.workloads.base.WorkloadKind.family)
    workloads: Mapping[int, object]  # workload index -> config, for workloads (or stages) served here
    stages: Mapping[int, frozenset[str]]  # workload index -> stages run here
    layout: PoolLayout | None = None
    share: PoolShare | None = None  # of the fleet's packed nodes and racks
    perf: PerfModel | None = None
    stage_perfs: StagePerfs | None = None  # step pools: each phase's own roofline (co-located stages)
    kv_capacity_blocks: int = 0
    free_bytes: float = 0.0
    resident_bytes: float = 0.0
    ops: OpsPlan | None = None  # residency, autoscale, failures (sim.ops_plan); None: none set
    role: str = ""
    spec: SpecPlan | None = None

    @property
    def name(self) -> str:
        return self.config.name


@dataclass(frozen=True)
class WorkloadRoute:
    """How one workload's arrivals enter a fleet: its index and config, its main pools
    (by index), and for a pipeline its per-sample costs and, per stage code, the pools
    serving that stage (its own pools, else the main ones). A split deployment enters by
    its prefill pools (``main``) and decodes on ``decode``; ``kv_links`` gives the KV-cache
    link of every (prefill pool, decode pool) pair."""

    index: int
    name: str
    config: object
    kind: WorkloadKind
    main: tuple[int, ...]
    shape: PictureShape | None = None
    stages: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    variants: Mapping[bool, PictureShape] = field(default_factory=dict)  # CFG off/on: per-request CFG (trace replay)
    decode: tuple[int, ...] = ()
    kv_links: Mapping[tuple[int, int], KVLink] = field(default_factory=dict)

    @property
    def split(self) -> bool:
        """Prefill and decode on pools of their own."""
        return bool(self.decode)


@dataclass(frozen=True)
class FleetPlan:
    """One fleet resolved: its pools, their packing, the routes of the workloads it
    serves, the routing policy, the run window and the economics."""

    index: int
    name: str
    router: str
    pools: tuple[PoolPlan, ...]
    packing: FleetPacking
    routes: tuple[WorkloadRoute, ...]
    names: tuple[str, ...]  # every workload of the scenario, in order (request rows name them)
    workload_configs: tuple  # their configs, in the same order
    window: RunWindow
    economics: Economics
    config: FleetConfig
    seed: int = 0  # the scenario's: the failure processes draw from streams spawned from it

    @property
    def operated(self) -> bool:
        """Some pool has residency, autoscale or failures (the engine's operations layer runs)."""
        return any(p.ops is not None for p in self.pools)

    def workload(self, name: str) -> WorkloadRoute:
        return next(r for r in self.routes if r.name == name)


@dataclass(frozen=True)
class ScenarioPlan:
    """Every fleet of a scenario resolved (:func:`resolve`)."""

    scenario: Scenario
    fleets: tuple[FleetPlan, ...]

    def fleet(self, fleet: str | int) -> FleetPlan:
        """The plan of fleet ``fleet`` (name or index).

        Raises:
            KeyError: no such fleet."""
        if isinstance(fleet, int):
            return self.fleets[fleet]
        for plan in self.fleets:
            if plan.name == fleet:
                return plan
        raise KeyError(f"no fleet named {fleet!r}; fleets: {[f.name for f in self.fleets]}")


def run_window(scenario: Scenario) -> RunWindow:
    return RunWindow(scenario.warmup_s, scenario.duration_s, scenario.drain_s, scenario.sample_interval_s,
                     scenario.engine.mode == "exact")


def resolve(scenario: Scenario, catalog: Catalog | None = None) -> ScenarioPlan:
    """Resolve every fleet of ``scenario`` (module docstring).

    Raises:
        UserError: unknown accelerator or model (naming the allowed keys); an accelerator
            with no rental price under ``ownership: rent``.
        PlacementError: a model that does not fit, TP beyond the scale-up domain, a rack
            over its power budget, a fleet over the facility power limit, or a workload
            whose one request's activations do not fit.
    """
    catalog = catalog or load_catalog()
    shapes = picture_shapes(scenario, catalog)
    return ScenarioPlan(scenario, tuple(resolve_fleet(scenario, f, catalog, shapes) for f in range(len(scenario.fleets))))


def resolve_fleet(scenario: Scenario, fleet: int, catalog: Catalog | None = None,
                  shapes: dict[str, PictureShape] | None = None) -> FleetPlan:
    """Resolve fleet number ``fleet`` of ``scenario`` (see :func:`resolve`); ``shapes``:
    the picture workloads' per-sample costs (:func:`picture_shapes`), derived if None."""
    catalog = catalog or load_catalog()
    cfg = scenario.fleets[fleet]
    shapes = picture_shapes(scenario, catalog) if shapes is None else shapes
    pools = build_pools(scenario, cfg, catalog, shapes)
    packing = pack_fleet([p.layout for p in pools if p.layout is not None])
    where = f"fleets[{fleet}] '{cfg.name}'"
    for i, pool in enumerate(pools):
        if pool.layout is not None:
            pool.share = packing.shares[pool.name]
            check_rentable(pool.layout.accelerator.key, scenario.economics, f"{where} pools[{i}] '{pool.name}'")
    check_facility_limit(scenario.economics, packing, where)
    served = set(fleet_workloads(scenario, cfg))
    routes = tuple(_route(scenario, catalog, pools, w, name, shapes.get(name))
                   for w, name in enumerate(scenario.workloads) if name in served)
    return FleetPlan(fleet, cfg.name, cfg.router, tuple(pools), packing, routes, tuple(scenario.workloads),
                     tuple(scenario.workloads.values()), run_window(scenario), scenario.economics, cfg,
                     scenario.seed)


def _route(scenario: Scenario, catalog: Catalog, pools: list[PoolPlan], w: int, name: str,
           shape: PictureShape | None) -> WorkloadRoute:
    wl = scenario.workloads[name]
    kind = kind_of(wl)
    main = tuple(p.index for p in pools if name in p.config.serves)
    if not main and kind.split_stages:
        return _split_route(pools, w, name, wl, kind)
    if shape is None:
        return WorkloadRoute(w, name, wl, kind, main)
    stages = {}
    for stage in kind.stages:
        serving = tuple(p.index for p in pools if stage in p.stages.get(w, ()))
        stages[STAGE_CODES[stage]] = serving or main
    variants = {c: picture_shape(wl.model_copy(update={"cfg": c}), catalog) for c in (False, True)}
    return WorkloadRoute(w, name, wl, kind, main, shape, MappingProxyType(stages), MappingProxyType(variants))


def _split_route(pools: list[PoolPlan], w: int, name: str, wl, kind) -> WorkloadRoute:
    """The route of a workload split into prefill and decode pools, with the KV link of
    every pair (the scenario checked that both sides exist)."""
    prefill = tuple(p.index for p in pools if "prefill" in p.stages.get(w, ()))
    decode = tuple(p.index for p in pools if "decode" in p.stages.get(w, ()))
    links = {(a, b): kv_link(_kv_end(pools[a]), _kv_end(pools[b]), pools[a].perf.model, pools[a].perf.kv_precision,
                             _local_drafter(pools[b]))
             for a in prefill for b in decode}
    return WorkloadRoute(w, name, wl, kind, prefill, decode=decode, kv_links=MappingProxyType(links))


def _local_drafter(pool: PoolPlan):
    """The drafter model whose KV of the prompt a decode pool receives with the target's:
    the one its replicas run themselves (a draft model or a head); None without
    speculation, for n-gram drafting (no KV) and for a drafter on a pool of its own (the
    draft pool prefills the prompt itself, :mod:`sim.models.speculation`)."""
    spec = pool.spec
    if spec is None or spec.remote is not None or spec.draft is None:
        return None
    return spec.draft.model


def _kv_end(pool: PoolPlan) -> KVEnd:
    cfg = pool.config
    return KVEnd(pool.layout.accelerator, cfg.tp, cfg.pp, cfg.ep, cfg.domain)


def build_pools(scenario: Scenario, fleet: FleetConfig, catalog: Catalog,
                shapes: dict[str, PictureShape]) -> list[PoolPlan]:
    """A fleet's pools: catalog lookups, stage placement and memory checks (not yet packed).

    Raises:
        UserError: unknown accelerator or model (naming the allowed keys).
        PlacementError: a model that does not fit, TP beyond the scale-up domain, a rack
            over its power budget, or a workload whose one request's activations do not fit.
    """
    names = list(scenario.workloads)
    fleet_index = scenario.fleets.index(fleet) if fleet in scenario.fleets else 0
    placed = {split_serves(e) for p in fleet.pools for e in p.serves if ":" in e}
    drafted = frozenset(name for name, stage in placed if stage == "draft")
    pools = []
    for i, cfg in enumerate(fleet.pools):
        where = f"fleets[{fleet_index}] '{fleet.name}' pools[{i}] '{cfg.name}'"
        verifies = [split_serves(e)[0] for e in cfg.serves if split_serves(e)[1] == "verify"]
        if verifies:
            where += f" (the verifier pool of workload(s) {', '.join(verifies)})"
        pool = _new_pool(i, cfg, scenario, names, placed)
        if pool.family != "service":
            _place(pool, catalog, shapes, names, where, drafted)
            pool.ops = ops_plan(cfg, pool.layout, pool.layout.model, list(pool.workloads.values()),
                                scenario.economics, where)
        elif cfg.operated:
            raise PlacementError(f"{where}: residency, autoscale and failures need a model-serving pool "
                                 f"(autoregressive or step-batched), not a service-time pool")
        pools.append(pool)
    if drafted:
        attach_drafters(pools, _kv_end, f"fleets[{fleet_index}] '{fleet.name}'")
    return pools


def check_facility_limit(econ: Economics, packing: FleetPacking, where: str) -> None:
    """Refuse a fleet whose packed racks need more facility power than
    ``economics.facility_power_limit_mw`` (provisioned IT power x PUE).

    Raises:
        PlacementError: with the fleet's figure, the limit and its parts."""
    limit = econ.facility_power_limit_mw
    need_mw = packing.it_power_max_w * econ.pue / 1e6
    if limit is not None and need_mw > limit * (1 + 1e-9):
        raise PlacementError(
            f"{where}: the packed fleet needs {need_mw:.3f} MW of facility power "
            f"({packing.nodes} nodes in {packing.racks} racks, {packing.it_power_max_w / 1e3:,.1f} kW IT "
            f"at full load x PUE {econ.pue}), over economics.facility_power_limit_mw = {limit} MW. "
            "Use fewer or more efficient accelerators, or raise the limit.")


def picture_shapes(scenario: Scenario, catalog: Catalog) -> dict[str, PictureShape]:
    """Per-sample costs of every image/video/search workload (:func:`sim.workloads.picture_shape`)."""
    return {
        name: picture_shape(wl, catalog)
        for name, wl in scenario.workloads.items()
        if kind_of(wl).stages
    }


def _new_pool(i: int, cfg: PoolConfig, scenario: Scenario, names: list[str], placed: set) -> PoolPlan:
    workloads, stages = {}, {}
    for entry in cfg.serves:
        name, stage = split_serves(entry)
        w = names.index(name)
        wl = scenario.workloads[name]
        workloads[w] = wl
        if stage is not None:
            stages.setdefault(w, set()).add(stage)
        else:  # the main pool runs every stage not placed elsewhere
            own = [s for s in (kind_of(wl).stages or ("denoise",)) if (name, s) not in placed]
            stages.setdefault(w, set()).update(own)
    main = [split_serves(e)[0] for e in cfg.serves if ":" not in e]
    family = kind_of(scenario.workloads[main[0]]).family if main else "step"
    sides = {stage for name, stage in map(split_serves, cfg.serves)
             if stage in kind_of(scenario.workloads[name]).split_stages}
    role = next(iter(sides), "")  # one side per pool (sim.scenario._check_split_pool)
    if any(stage in kind_of(scenario.workloads[name]).helper_stages for name, stage in map(split_serves, cfg.serves)):
        role = "draft"  # a drafter's pool (sim.scenario: it serves nothing else)
    if role:
        family = kind_of(scenario.workloads[split_serves(cfg.serves[0])[0]]).family
    return PoolPlan(index=i, config=cfg, family=family, workloads=workloads, stages=stages, role=role)


def _pool_models(pool: PoolPlan, catalog: Catalog, where: str) -> list:
    """The main model first, then co-located stage models (deduplicated by key)."""
    models: dict[str, object] = {}
    if pool.role == "draft":  # the draft model of the workloads it drafts for
        for wl in pool.workloads.values():
            key = wl.speculation.draft_model
            models.setdefault(key, catalog.model(key, where=f"{where} (draft model)"))
        return list(models.values())
    for w, wl in pool.workloads.items():
        stages = pool.stages.get(w, {"denoise"})
        pipeline = kind_of(wl).stages
        if not pipeline:
            models.setdefault(wl.model, catalog.model(wl.model, where=f"{where} (model of workload served)"))
            continue
        for stage in sorted(pipeline, key=lambda st: st != "denoise"):  # the denoiser first
            if stage in stages:
                for m in aux_models(wl, catalog, stage):
                    models.setdefault(m.key, m)
    return list(models.values())


def _place(pool: PoolPlan, catalog: Catalog, shapes: dict, names: list[str], where: str,
           drafted: frozenset = frozenset()) -> None:
    cfg = pool.config
    accelerator = with_fabric(catalog.accelerator(cfg.accelerator, where=f"{where}.accelerator"), cfg.scaleout_fabric)
    models = _pool_models(pool, catalog, where)
    if not models:
        raise PlacementError(f"{where}: serves no stage that runs a model ({cfg.serves})")
    main, extra = models[0], models[1:]
    extra_weights = sum(m.weight_bytes(cfg.precision) for m in extra)
    if cfg.residency is not None:  # more checkpoints and an adapter cache in each replica's HBM
        extra_weights += resident_extra_bytes(cfg, main.weight_bytes(cfg.precision), main,
                                              list(pool.workloads.values()), where)
    overhead_s = cfg.iteration_overhead_s + lora_overhead_s(cfg, list(pool.workloads.values()))
    spec = _speculation(pool, accelerator, main, catalog, where,
                        drafted=any(names[w] in drafted for w in pool.workloads))
    if spec is not None:
        extra_weights += spec.draft_resident_bytes
    peak_act, worst = _peak_activation(pool, shapes, names)
    scheme = video_scheme(cfg, main, accelerator, where)
    layout = place_pool(
        name=cfg.name,
        accelerator=accelerator,
        model=main,
        precision=cfg.precision,
        tp=cfg.tp * (scheme.sp if scheme else 1),  # an SP group counts as the replica's TP-sized group
        pp=cfg.pp,
        replicas=cfg.replicas,
        memory_utilization=cfg.memory_utilization,
        min_kv_tokens=cfg.min_kv_tokens if pool.family == "ar" else 0,
        min_activation_bytes=extra_weights,
        nodes_per_rack=cfg.nodes_per_rack,
        rack_power_budget_w=None if cfg.rack_power_budget_kw is None else cfg.rack_power_budget_kw * 1e3,
        where=where,
        ep=cfg.ep,
        kv_precision=cfg.kv_precision,
        attention_precision=cfg.attention_precision,
    )
    # the perf model after placement: placement refuses a TP group larger than the scale-up
    # domain (e.g. tp=4 on a wafer-scale part with no scale-up link) before any
    # communication time is computed over a link that does not exist
    perf = PerfModel(accelerator, main, cfg.precision, cfg.tp, cfg.pp, overhead_s,
                     cfg.kv_precision, cfg.attention_precision, ep=cfg.ep)
    pool.layout = layout
    pool.perf = perf
    pool.stage_perfs = StagePerfs(perf, catalog.model, cfg.tp, cfg.pp, overhead_s,
                                  cfg.kv_precision, cfg.attention_precision)
    pool.resident_bytes = layout.replica_weight_bytes + extra_weights
    pool.free_bytes = layout.replica_free_bytes - extra_weights
    if scheme is not None:  # a video DiT: held bytes per GPU by its scheme (sim.models.video_parallel)
        pool.perf, pool.stage_perfs, held = video_perfs(scheme, pool, perf, catalog, shapes, names, where)
        pool.resident_bytes = held * layout.tp
        pool.free_bytes = layout.replica_memory_bytes - pool.resident_bytes
    if peak_act > pool.free_bytes:
        name, width = worst
        raise PlacementError(
            f"{where}: workload '{name}' (model {main.key if len(models) == 1 else ', '.join(m.key for m in models)}) "
            f"needs {peak_act / GB:.1f} GB of activations for one request"
            f"{f' ({width} samples at once)' if width > 1 else ''}, but a replica of "
            f"{cfg.tp * cfg.pp}× {accelerator.key} has only {pool.free_bytes / GB:.1f} GB free after "
            f"{pool.resident_bytes / GB:.1f} GB of weights. Use an accelerator with more memory, a larger "
            f"tp, fewer candidates, a lower resolution, or fewer frames."
        )
    if peak_act and _max_width(pool, names) > cfg.max_batch:
        raise PlacementError(
            f"{where}: max_batch (={cfg.max_batch}) is smaller than the {_max_width(pool, names)} samples "
            f"one request runs at once; raise max_batch"
        )
    if pool.family == "ar" and perf.kv_bytes_per_token > 0:
        per_token = perf.kv_bytes_per_token + (spec.draft_kv_bytes_per_token if spec is not None else 0.0)
        pool.kv_capacity_blocks = int(pool.free_bytes // (per_token * cfg.kv_block_tokens))
    pool.spec = spec


def _speculation(pool: PoolPlan, accelerator, model, catalog: Catalog, where: str,
                 drafted: bool = False) -> SpecPlan | None:
    """The speculative decoding the pool's workloads run (None when none does).

    Raises:
        PlacementError: its workloads speculate differently (a replica runs one drafter),
            or the drafter cannot run at the pool's layout."""
    specs: list = []
    for wl in pool.workloads.values():  # distinct settings (a list: an acceptance list is unhashable)
        if getattr(wl, "speculation", None) not in specs:
            specs.append(getattr(wl, "speculation", None))
    if specs == [None] or pool.role == "draft":
        return None
    if len(specs) > 1:
        raise PlacementError(f"{where}: its workloads ({', '.join(str(w.model) for w in pool.workloads.values())}) "
                             "speculate differently (or not at all); a replica runs one drafter, so give them "
                             "one speculation setting or pools of their own")
    cfg = pool.config
    try:
        perf = PerfModel(accelerator, model, cfg.precision, cfg.tp, cfg.pp, cfg.iteration_overhead_s,
                         cfg.kv_precision, cfg.attention_precision, ep=cfg.ep)
    except LayoutError:
        return None  # the target's own layout error: place_pool reports it, naming the pool
    if drafted:  # its drafter runs on a pool of its own: attached once every pool is placed (_attach_drafters)
        return SpecPlan(specs[0], perf, None, 0.0)
    try:
        return spec_plan(specs[0], perf, lambda key: catalog.model(key, where=f"{where} (draft model)"),
                         cfg.iteration_overhead_s)
    except LayoutError as err:
        raise PlacementError(f"{where}: the speculative drafter cannot run at this layout: {err}") from None


def _peak_activation(pool: PoolPlan, shapes: dict, names: list[str]) -> tuple[float, tuple[str, int]]:
    peak, worst = 0.0, ("", 1)
    for w, wl in pool.workloads.items():
        shape = shapes.get(names[w])
        if shape is None:
            continue
        for act, width in kind_of(wl).stage_footprints(wl, shape, pool.stages.get(w, set())):
            if act > peak:
                peak, worst = act, (names[w], width)
    return peak, worst


def _max_width(pool: PoolPlan, names: list[str]) -> int:
    """The most samples one request runs at once on ``pool`` (the ×k of a fork)."""
    return max((kind_of(wl).samples_at_once(wl, pool.stages.get(w, set())) for w, wl in pool.workloads.items()
                if kind_of(wl).stages), default=1)
