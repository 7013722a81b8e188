"""Building a fleet's pools for a run: catalog lookups, stage placement, memory checks.

A pool serves whole workloads (``serves: [image]``) and/or single pipeline stages of
them (``serves: [image:decode]``). A stage not placed on a pool of its own runs on the
workload's main pool, co-located: that pool then holds the stage's model weights too.
Placement checks (``fleets.placement``) cover weights + minimum KV cache + the largest
activation footprint one request can need (e.g. ×k at a branching fork); a workload whose
single request cannot fit is refused at load time, naming the workload, the model and
the memory needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from fleets.catalog import Catalog

from fleets.catalog_io import load_catalog
from fleets.packing import FleetPacking, PoolShare, pack_fleet
from fleets.placement import PoolLayout, place_pool
from sim.errors import PlacementError
from sim.models.economics import check_rentable
from sim.models.perf import PerfModel, StagePerfs
from sim.engine.request import Request
from sim.engine.run import PoolStats
from sim.scenario import FleetConfig, PoolConfig, Scenario, split_serves
from sim.workloads import kind_of
from sim.workloads import picture_shape
from sim.workloads.picture import PictureShape, aux_models

GB = 1e9


@dataclass(eq=False)
class Pool:
    """A pool as built for one run: layout (placement), perf model, capacity, stats.

    ``resident_bytes`` is the weights of every model the replicas hold (the main model
    and co-located pipeline stages); ``free_bytes`` what is left for KV cache and
    activations."""

    index: int
    config: PoolConfig
    family: str  # "ar" | "step" | "service"
    workloads: dict[int, object]  # workload index -> config, for workloads (or stages) served here
    stages: dict[int, set[str]] = field(default_factory=dict)  # workload index -> stages run here
    layout: PoolLayout | None = None
    share: PoolShare | None = None  # of the fleet's packed nodes and racks
    perf: PerfModel | None = None
    stage_perfs: StagePerfs | None = None  # step pools: each phase's own roofline (co-located stages)
    kv_capacity_blocks: int = 0
    free_bytes: float = 0.0
    resident_bytes: float = 0.0
    stats: PoolStats = field(default_factory=PoolStats)
    replicas: list = field(default_factory=list)
    # the routers' indexes over this pool (sim.engine.router._MinIndex), told by a replica
    # whenever its outstanding or queued count changes; its position in each is its index
    watchers: list = field(default_factory=list)
    on_leg_done: Callable[[Request], None] | None = None
    # running totals over the replicas, kept by the replicas as their state changes so the
    # time-series sampler reads a pool in O(1), not O(replicas) (see sim.engine.core._Sampler)
    outstanding_total: int = 0  # Σ replica.outstanding (queued + running requests)
    queued_total: int = 0  # Σ len(replica.waiting)
    running_total: int = 0  # Σ batch in flight: AR sequences, step sample-width, service busy slots
    kv_half_tokens_total: int = 0  # AR: Σ 2 × the KV tokens of ARReplica.kv_bytes_estimate (an integer)
    reserved_total_bytes: float = 0.0  # step: Σ replica.reserved (activation + diffusion-LM KV bytes)

    @property
    def name(self) -> str:
        return self.config.name

    def reject_reason(self, req: Request) -> str:
        """Why this pool can never serve ``req`` ("" if it can): its workload kind's rule
        (:meth:`sim.workloads.base.WorkloadKind.reject_reason`)."""
        wl = self.workloads[req.workload]
        return kind_of(wl).reject_reason(self, wl, req)

    def prepare(self, req: Request) -> None:
        """Give ``req`` the phases it runs on this pool (its current journey leg)."""
        if self.family != "step":
            return
        wl = self.workloads[req.workload]
        kind_of(wl).prepare(self, wl, req)

    def finish_leg(self, req: Request) -> None:
        self.on_leg_done(req)


def build_pools(scenario: Scenario, fleet: FleetConfig, catalog: Catalog | None = None) -> list[Pool]:
    """Resolve a fleet's pools: catalog lookups, stage placement and memory checks.

    Raises:
        UserError: unknown accelerator or model (naming the allowed keys).
        PlacementError: a model that does not fit, TP beyond the scale-up domain, a rack
            over its power budget, or a workload whose one request's activations do not fit.
    """
    catalog = catalog or load_catalog()
    names = list(scenario.workloads)
    fleet_index = scenario.fleets.index(fleet) if fleet in scenario.fleets else 0
    placed = {split_serves(e) for p in fleet.pools for e in p.serves if ":" in e}
    shapes = picture_shapes(scenario, catalog)
    pools = []
    for i, cfg in enumerate(fleet.pools):
        where = f"fleets[{fleet_index}] '{fleet.name}' pools[{i}] '{cfg.name}'"
        verifies = [split_serves(e)[0] for e in cfg.serves if split_serves(e)[1] == "verify"]
        if verifies:
            where += f" (the verifier pool of workload(s) {', '.join(verifies)})"
        pool = _new_pool(i, cfg, scenario, names, placed)
        if pool.family != "service":
            _place(pool, catalog, shapes, names, where)
        pools.append(pool)
    packing = pack_fleet([p.layout for p in pools if p.layout is not None])
    for i, pool in enumerate(pools):
        if pool.layout is not None:
            pool.share = packing.shares[pool.name]
            check_rentable(pool.layout.accelerator.key, scenario.economics,
                           f"fleets[{fleet_index}] '{fleet.name}' pools[{i}] '{pool.name}'")
    check_facility_limit(scenario, packing, f"fleets[{fleet_index}] '{fleet.name}'")
    return pools


def check_facility_limit(scenario: Scenario, packing: FleetPacking, where: str) -> None:
    """Refuse a fleet whose packed racks need more facility power than
    ``economics.facility_power_limit_mw`` (provisioned IT power x PUE).

    Raises:
        PlacementError: with the fleet's figure, the limit and its parts."""
    econ = scenario.economics
    limit = econ.facility_power_limit_mw
    need_mw = packing.it_power_max_w * econ.pue / 1e6
    if limit is not None and need_mw > limit * (1 + 1e-9):
        raise PlacementError(
            f"{where}: the packed fleet needs {need_mw:.3f} MW of facility power "
            f"({packing.nodes} nodes in {packing.racks} racks, {packing.it_power_max_w / 1e3:,.1f} kW IT "
            f"at full load x PUE {econ.pue}), over economics.facility_power_limit_mw = {limit} MW. "
            "Use fewer or more efficient accelerators, or raise the limit.")


def picture_shapes(scenario: Scenario, catalog: Catalog) -> dict[str, PictureShape]:
    """Per-sample costs of every image/video/search workload (see sim.engine.shapes)."""
    return {
        name: picture_shape(wl, catalog)
        for name, wl in scenario.workloads.items()
        if kind_of(wl).stages
    }


def _new_pool(i: int, cfg: PoolConfig, scenario: Scenario, names: list[str], placed: set) -> Pool:
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
    return Pool(index=i, config=cfg, family=family, workloads=workloads, stages=stages)


def _pool_models(pool: Pool, catalog: Catalog, where: str) -> list:
    """The main model first, then co-located stage models (deduplicated by key)."""
    models: dict[str, object] = {}
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


def _place(pool: Pool, catalog: Catalog, shapes: dict, names: list[str], where: str) -> None:
    cfg = pool.config
    accelerator = catalog.accelerator(cfg.accelerator, where=f"{where}.accelerator")
    models = _pool_models(pool, catalog, where)
    if not models:
        raise PlacementError(f"{where}: serves no stage that runs a model ({cfg.serves})")
    main, extra = models[0], models[1:]
    extra_weights = sum(m.weight_bytes(cfg.precision) for m in extra)
    peak_act, worst = _peak_activation(pool, shapes, names)
    layout = place_pool(
        name=cfg.name,
        accelerator=accelerator,
        model=main,
        precision=cfg.precision,
        tp=cfg.tp,
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
    perf = PerfModel(accelerator, main, cfg.precision, cfg.tp, cfg.pp, cfg.iteration_overhead_s,
                     cfg.kv_precision, cfg.attention_precision, ep=cfg.ep)
    pool.layout = layout
    pool.perf = perf
    pool.stage_perfs = StagePerfs(perf, catalog.model, cfg.tp, cfg.pp, cfg.iteration_overhead_s,
                                  cfg.kv_precision, cfg.attention_precision)
    pool.resident_bytes = layout.replica_weight_bytes + extra_weights
    pool.free_bytes = layout.replica_free_bytes - extra_weights
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
        pool.kv_capacity_blocks = int(pool.free_bytes // (perf.kv_bytes_per_token * cfg.kv_block_tokens))


def _peak_activation(pool: Pool, shapes: dict, names: list[str]) -> tuple[float, tuple[str, int]]:
    peak, worst = 0.0, ("", 1)
    for w, wl in pool.workloads.items():
        shape = shapes.get(names[w])
        if shape is None:
            continue
        for act, width in kind_of(wl).stage_footprints(wl, shape, pool.stages.get(w, set())):
            if act > peak:
                peak, worst = act, (names[w], width)
    return peak, worst


def _max_width(pool: Pool, names: list[str]) -> int:
    """The most samples one request runs at once on ``pool`` (the ×k of a fork)."""
    return max((kind_of(wl).samples_at_once(wl, pool.stages.get(w, set())) for w, wl in pool.workloads.items()
                if kind_of(wl).stages), default=1)
