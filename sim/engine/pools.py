"""A pool as one run drives it: its plan (:class:`sim.fleet_plan.PoolPlan`: layout, perf
model, capacity) plus the run's state (replicas, stats, the totals the sampler reads)."""

from __future__ import annotations

from typing import Callable

from sim.engine.prefix_cache import SharedStore
from sim.engine.request import Request
from sim.engine.run import PoolStats
from sim.fleet_plan import PoolPlan
from sim.workloads import kind_of


class Pool:
    """One pool in one run: the plan's fields (``index``, ``config``, ``family``,
    ``workloads``, ``stages``, ``layout``, ``share``, ``perf``, ``stage_perfs``,
    ``kv_capacity_blocks``, ``free_bytes``, ``resident_bytes``: see
    :class:`~sim.fleet_plan.PoolPlan`) copied as attributes (the replicas read them on
    their hot path), and the run's state."""

    def __init__(self, plan: PoolPlan) -> None:
        self.plan = plan
        self.index, self.config, self.family = plan.index, plan.config, plan.family
        self.workloads, self.stages = plan.workloads, plan.stages
        self.layout, self.share, self.perf, self.stage_perfs = plan.layout, plan.share, plan.perf, plan.stage_perfs
        self.kv_capacity_blocks, self.free_bytes = plan.kv_capacity_blocks, plan.free_bytes
        self.resident_bytes = plan.resident_bytes
        self.role, self.spec = plan.role, plan.spec
        # a split deployment (set by sim.engine.core from the routes): on a prefill pool, per
        # workload index, the decode router's position, the decode pools (to reject at
        # arrival what none could hold) and whether the decode replica is chosen at the
        # prefill's start; on a decode pool, the KV link from each prefill pool (by index)
        # and whether the transfer overlaps the prefill layer by layer
        self.decode_router: dict[int, int] = {}
        self.decode_pools: dict[int, list] = {}
        self.at_prefill: dict[int, bool] = {}
        self.kv_in: dict = {}
        self.layerwise: dict[int, bool] = {}
        self.stats = PoolStats()
        pc = getattr(self.config, "prefix_cache", None)  # the shared KV tier (docs/kv-reuse.md), one per pool
        self.shared_kv = SharedStore(pc.shared_blocks) if pc is not None and pc.shared_blocks else None
        self.replicas: list = []
        # the routers' indexes over this pool (sim.engine.router._MinIndex), told by a replica
        # whenever its outstanding or queued count changes; its position in each is its index
        self.watchers: list = []
        self.on_leg_done: Callable[[Request], None] | None = None
        self.gate = None  # sim.engine.operations.PoolOps when the pool has residency, autoscale or failures
        # running totals over the replicas, kept by the replicas as their state changes so the
        # time-series sampler reads a pool in O(1), not O(replicas) (see sim.engine.core._Sampler)
        self.outstanding_total = 0  # Σ replica.outstanding (queued + running requests)
        self.queued_total = 0  # Σ len(replica.waiting)
        self.running_total = 0  # Σ batch in flight: AR sequences, step sample-width, service busy slots
        self.kv_half_tokens_total = 0  # AR: Σ 2 × the KV tokens of ARReplica.kv_bytes_estimate (an integer)
        self.reserved_total_bytes = 0.0  # step: Σ replica.reserved (activation + diffusion-LM KV bytes)

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
