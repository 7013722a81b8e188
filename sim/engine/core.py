"""``run_fleet(plan, demand)``: one fleet serving the scenario's demand in SimPy.

The heart of dcsim. It does no file I/O and keeps no global state; for a given plan and
demand it is deterministic. A run:

1. takes the fleet's resolved plan (:class:`sim.fleet_plan.FleetPlan`: pools laid out,
   routes of the workloads) and builds its replicas and routers;
2. starts one arrival process per workload;
3. runs until ``duration_s`` (arrivals stop), then drains for at most ``drain_s``;
4. returns flat per-request and per-pool rows as DataFrames.

:func:`simulate` is the same from a scenario (it resolves the fleet's plan first).

Requests are objects only while in flight: each one's outcome becomes a row of NumPy
columns when it finishes (:mod:`sim.engine.outcomes`). With a ``sink`` the rows are handed
on in batches (completion order) instead of kept, so a run's memory does not grow with
its request count (streaming, :mod:`sim.results.streaming`).
"""

from __future__ import annotations

import gc
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from fleets.catalog import Catalog
from fleets.catalog_io import load_catalog
from sim.engine.demand import DemandStream, WorkloadDemand, demand_streams, generate_demand
from sim.engine.journey import Handoffs, JourneyPlanner
from sim.engine.operations import FleetOps
from sim.engine.outcomes import Outcomes
from sim.engine.pools import Pool
from sim.engine.prefix_cache import TRAFFIC
from sim.engine.replica_ar import ARReplica
from sim.engine.replica_service import ServiceReplica
from sim.engine.replica_step import StepReplica
from sim.engine.request import STATUS_NAMES, Request
from sim.engine.router import Router
from sim.engine.run import PREFILL_TOKENS, RunContext, events_processed
from sim.engine.timer import Rearmable
from sim.errors import PlacementError
from sim.fleet_plan import FleetPlan, RunWindow, WorkloadRoute, resolve_fleet
from sim.scenario import Scenario, split_serves
from sim.workloads import kind_of

ProgressFn = Callable[[float, int], None]
RowSink = Callable[[pd.DataFrame, pd.DataFrame], None]


_REPLICA_TYPES = {"ar": ARReplica, "step": StepReplica, "service": ServiceReplica}


@dataclass
class FleetRun:
    """What one fleet did: per-request rows, per-pool rows, the simulated end time and
    the number of SimPy events processed. ``streamed``: the request rows went to the
    run's sink and ``requests`` / ``pool_shares`` are empty (with their columns)."""

    fleet: str
    requests: pd.DataFrame
    pools: pd.DataFrame
    end_s: float
    events: int
    timeseries: pd.DataFrame = field(default_factory=pd.DataFrame)
    pool_shares: pd.DataFrame = field(default_factory=pd.DataFrame)
    plan: FleetPlan | None = field(default=None, repr=False)
    streamed: bool = False
    operations: pd.DataFrame | None = None  # operated pools only (sim.engine.operations): counters, GPU-hours
    capacity: pd.DataFrame | None = None  # their serving/powered/failed replicas over time


def simulate(
    scenario: Scenario,
    fleet: str | int = 0,
    *,
    demand: dict[str, WorkloadDemand] | None = None,
    catalog: Catalog | None = None,
    progress: ProgressFn | None = None,
    sink: RowSink | None = None,
) -> FleetRun:
    """Resolve one of ``scenario``'s fleets (:func:`sim.fleet_plan.resolve_fleet`) and run
    the demand through it (:func:`run_fleet`).

    Args:
        fleet: fleet name or index into ``scenario.fleets``.
        demand: as for :func:`run_fleet`; drawn from the seed if None (as streams when
            ``sink`` is given).
        catalog: accelerator/model catalog (the packaged one if None).

    Raises:
        KeyError: no such fleet.
        UserError / PlacementError: the fleet cannot be built.
    """
    index = _fleet_index(scenario, fleet)
    plan = resolve_fleet(scenario, index, catalog or load_catalog())
    if demand is None:  # streamed: drawn window by window as the run reaches it
        demand = generate_demand(scenario) if sink is None else demand_streams(scenario)
    return run_fleet(plan, demand, progress=progress, sink=sink)


def run_fleet(
    plan: FleetPlan,
    demand: dict[str, WorkloadDemand | DemandStream],
    *,
    progress: ProgressFn | None = None,
    sink: RowSink | None = None,
) -> FleetRun:
    """Run ``demand`` through the fleet of ``plan``.

    Args:
        plan: the fleet resolved (:func:`sim.fleet_plan.resolve_fleet`).
        demand: per workload of the scenario, its :class:`WorkloadDemand` (drawn in
            memory, shared across fleets) or :class:`DemandStream` (drawn as the run
            reaches it).
        progress: called as ``progress(sim_time_s, requests_finished)`` about 200 times.
        sink: if given, ``sink(requests, pool_shares)`` receives the request rows in
            batches of up to :data:`sim.engine.outcomes.CHUNK_ROWS` (completion order;
            requests still in flight at the end come last, in id order) with the same
            columns as ``FleetRun.requests`` / ``pool_shares``, and none are kept.

    Returns:
        FleetRun with ``requests`` (one row per request; status completed, rejected with
        a reason, or in_flight) and ``pools`` (one row per pool, raw window totals).

    Raises:
        PlacementError: a replayed request asks for more images than a pool's max_batch.
    """
    _check_images_fit(plan, demand)
    window = plan.window
    run = RunContext(window.warmup_s, window.duration_s, window.exact)
    pools = [Pool(p) for p in plan.pools]
    for pool in pools:
        cls = _REPLICA_TYPES[pool.family]
        pool.replicas = [cls(run, pool, i) for i in range(pool.config.replicas)]
    handoffs = Handoffs(run, {r.index: r.shape.latent_bytes for r in plan.routes if r.shape is not None})
    for pool in pools:
        pool.on_leg_done = lambda req, pool=pool: handoffs.leg_done(pool, req)
    routers: dict[tuple, Router] = {}
    run.pools = pools
    routes = {r.name: r for r in plan.routes}
    total = run.outstanding = sum(len(demand[n]) for n in routes)
    frames = _Frames(plan, pools)
    outcomes = run.outcomes = Outcomes(
        0 if sink is not None else _id_space(demand, plan.names),
        None if sink is None else (lambda cols, shares: sink(frames.requests(cols), frames.shares(shares))),
    )
    if any(p.spec is not None and p.spec.remote is not None for p in plan.pools):  # sim.models.speculation
        outcomes.drafted = tuple(-1 if p.spec is None or p.spec.remote is None else p.spec.remote.pool_index
                                 for p in plan.pools)
    first_id = 0
    for w, name in enumerate(plan.names):
        if name in routes:
            entry = _entry(routes[name], pools, routers, run, plan.router)
            _ArrivalFeed(run, w, first_id, demand[name], entry, routes[name].config, outcomes)
        first_id += len(demand[name])
    ops = FleetOps(run, plan, pools, routers, _REPLICA_TYPES) if plan.operated else None
    run.env.process(_stop_arrivals(run, window.duration_s))
    interval = window.sample_interval_s or window.duration_s / SAMPLES_WINDOW
    sampler = _Sampler(run, pools, list(routers.values()), interval)
    run.env.process(sampler.process())
    _run(run, window, total, progress)
    for pool in pools:  # a drain that ran out leaves runs of iterations half done
        for replica in pool.replicas:
            replica.settle()
    outcomes.finish_in_flight()
    run.outcomes = run.on_finished = None
    operations, capacity = ops.frames() if ops is not None else (None, None)
    if sink is None:
        cols, shares = outcomes.columns()
    else:
        cols, shares = Outcomes(0).columns()
    return FleetRun(
        fleet=plan.name,
        requests=frames.requests(cols),
        pools=_pools_frame(pools, plan.name),
        end_s=run.env.now,
        events=events_processed(run.env),
        timeseries=sampler.frame(plan.name),
        pool_shares=frames.shares(shares),
        plan=plan,
        streamed=sink is not None,
        operations=operations,
        capacity=capacity,
    )


def _id_space(demand: dict, names) -> int | np.ndarray:
    """The request ids of an in-memory run: their count when they are consecutive from
    0, else (windows carrying ``request_id``, a cell's share) the sorted ids."""
    if all(getattr(d, "request_id", None) is None for d in demand.values()):
        return sum(len(demand[n]) for n in names)
    return np.concatenate([demand[n].request_id for n in names])


def _check_images_fit(plan: FleetPlan, demand: dict[str, WorkloadDemand | DemandStream]) -> None:
    """A replayed request of n images runs n samples at once: every pool running its
    per-sample stages needs max_batch >= n, or the request could never be admitted."""
    for name, d in demand.items():
        most = d.most_images()
        if most <= 1:
            continue
        for pool in (p.config for p in plan.pools):
            stages = [split_serves(e)[1] for e in pool.serves if split_serves(e)[0] == name]
            if stages and any(s != "encode" for s in stages) and pool.max_batch < most:
                raise PlacementError(
                    f"fleet '{plan.name}' pool '{pool.name}': max_batch (={pool.max_batch}) is smaller than "
                    f"the {most} images per prompt that workload '{name}' replays; set max_batch >= {most}"
                )


def _fleet_index(scenario: Scenario, fleet: str | int) -> int:
    if isinstance(fleet, int):
        return fleet
    for i, f in enumerate(scenario.fleets):
        if f.name == fleet:
            return i
    raise KeyError(f"no fleet named {fleet!r}; fleets: {[f.name for f in scenario.fleets]}")


def _router(routers: dict, key_pools: list[Pool], w: int, policy: str, run: RunContext) -> Router:
    key = (w, tuple(p.index for p in key_pools))
    if key not in routers:
        routers[key] = Router(run, policy, key_pools)
        run.routers.append(routers[key])
    return routers[key]


def _entry(route: WorkloadRoute, pools: list[Pool], routers: dict, run: RunContext, policy: str):
    """How a workload's arrivals enter the fleet: its main router, or (pipelines) a
    journey planner whose legs name the routers of its stages."""
    main = [pools[i] for i in route.main]
    if route.split:
        _wire_split(route, pools, routers, run, policy)
    if route.shape is None:
        return _router(routers, main, route.index, policy, run)
    by_stage = {code: run.routers.index(_router(routers, [pools[i] for i in serving], route.index, policy, run))
                for code, serving in route.stages.items()}
    return JourneyPlanner(route.config, route.shape, by_stage, dict(route.variants))


def _wire_split(route: WorkloadRoute, pools: list[Pool], routers: dict, run: RunContext, policy: str) -> None:
    """A split deployment: its decode router, and what each side needs of the other
    (:class:`sim.engine.pools.Pool`, the hand-off attributes)."""
    w, handoff = route.index, route.config.handoff
    decode = [pools[i] for i in route.decode]
    position = run.routers.index(_router(routers, decode, w, policy, run))
    for i in route.main:
        pools[i].decode_router[w] = position
        pools[i].decode_pools[w] = decode
        pools[i].at_prefill[w] = handoff.decode_choice == "at_prefill"
    for j in route.decode:
        pools[j].layerwise[w] = handoff.kv_transfer == "layerwise"
    for (i, j), link in route.kv_links.items():
        pools[j].kv_in[i] = link


FEED_WINDOW = 4096
"""Arrivals converted to Python values at a time (lists of the whole demand would hold
~150 bytes per request for the whole run)."""


class _ArrivalFeed:
    """Creates workload ``w``'s requests at their arrival instants and hands them to the
    router: one timeout per distinct arrival instant, driven by callbacks (cheaper than a
    generator process). The demand's windows (:meth:`WorkloadDemand.windows`, drawn as
    they are reached when the demand is a :class:`DemandStream`) are read
    :data:`FEED_WINDOW` arrivals at a time. Ids are the window's ``request_id`` when it
    has them, else ``first_id``, ``first_id`` + 1, … in arrival order."""

    def __init__(self, run: RunContext, w: int, first_id: int, d, entry, workload, outcomes: Outcomes):
        self.env = run.env
        self.run = run
        self.w = w
        self.planner = entry if isinstance(entry, JourneyPlanner) else None
        self.routers = run.routers
        self.router = None if self.planner else entry
        self.branches = getattr(workload, "best_of_k", 1)
        self.arrived = outcomes.arrived
        self.windows = d.windows()
        self.next_id = first_id  # id of the current window's first request
        self.chunk, self.pos = None, 0
        self.timer = Rearmable(self.env, self._arrive)
        if self._window():
            self._schedule()

    def _window(self) -> bool:
        """Read the next :data:`FEED_WINDOW` arrivals into lists; False when none are left."""
        chunk = self.chunk
        while chunk is None or self.pos >= len(chunk):
            if chunk is not None:
                self.next_id += len(chunk)
            chunk = self.chunk = next(self.windows, None)
            self.pos = 0
            if chunk is None:
                return False
        start = self.pos
        end = self.pos = min(start + FEED_WINDOW, len(chunk))
        self.i = 0
        self.ids = (range(self.next_id + start, self.next_id + end) if chunk.request_id is None
                    else chunk.request_id[start:end].tolist())
        self.times = chunk.arrival_s[start:end].tolist()
        self.prompt = chunk.prompt_tokens[start:end].tolist()
        self.output = chunk.output_tokens[start:end].tolist()
        self.steps = chunk.steps[start:end].tolist()
        self.service = chunk.service_s[start:end].tolist()
        self.draws = chunk.draws[start:end] if chunk.draws is not None else None
        self.mix = None if chunk.variant is None else (chunk.variant[start:end].tolist(),
                                                       chunk.adapter[start:end].tolist(), chunk.lora[start:end].tolist())
        self.images = chunk.images[start:end].tolist() if chunk.images is not None else None
        self.cfg = chunk.cfg[start:end].tolist() if chunk.cfg is not None else None
        self.prefix = chunk.prefix[start:end].tolist() if chunk.prefix is not None else None
        return True

    def _schedule(self) -> None:
        self.timer.arm(self.times[self.i] - self.env.now)

    def _arrive(self, _event) -> None:
        now = self.env.now
        while True:
            times, n, i, ids = self.times, len(self.times), self.i, self.ids
            w, prompt, output, steps, service = self.w, self.prompt, self.output, self.steps, self.service
            while i < n and times[i] <= now:
                # positional (cheaper than keywords), in Request's order: id, workload,
                # arrival_at_s, prompt_tokens, output_tokens, steps, service_s
                req = Request(ids[i], w, times[i], prompt[i], output[i], steps[i], service[i])
                if self.branches != 1:
                    req.branches = self.branches
                if self.mix is not None:
                    req.variant, req.adapter, req.lora = self.mix[0][i], self.mix[1][i], self.mix[2][i]
                if self.prefix is not None:
                    req.prefix = self.prefix[i]
                self.arrived(req)
                if self.planner is None:
                    # the next arrival of this feed is later (one at a window's end may not be)
                    self.run.arrival_alone = i + 1 < n and times[i + 1] > now
                    self.router.dispatch(req)
                    self.run.arrival_alone = False
                else:
                    if self.draws is not None:
                        req.draws = tuple(map(tuple, self.draws[i].tolist()))
                    if self.images is not None:
                        req.images, req.cfg = self.images[i], self.cfg[i]
                    req.journey = self.planner.plan(req)
                    self.routers[req.journey[0][0]].dispatch(req)
                i += 1
            self.i = i
            if i < n:
                self._schedule()
                return
            if not self._window():
                return


SAMPLES_MAX = 2048  # instants kept per run; between SAMPLES_MAX / 2 and SAMPLES_MAX cover the span
SAMPLES_WINDOW = 1024  # default first interval: the arrival period over this many instants


class _Sampler:
    """Samples every pool's state on a regular grid over the whole simulated span, with a
    bounded count: it starts every ``interval_s`` and, whenever :data:`SAMPLES_MAX`
    instants are held, keeps every other one and doubles the interval (so a 1 ms burst
    drained over 400 s keeps ~2,000 instants, not 50 million). Instants are integer
    multiples of the first interval, so decimation keeps a regular grid.

    Per pool and instant: requests outstanding at its replicas (queued + running) and
    queued there, queued at the central queues of the routers that feed it, running (the
    batch: sequences for AR, sample-width for step-batched, busy slots for service
    replicas), the fraction of the KV/activation memory in use, and the pool's
    cumulative busy time (its differences give utilisation over time).
    """

    def __init__(self, run: RunContext, pools: list[Pool], routers: list[Router], interval_s: float) -> None:
        self.run, self.pools, self.interval_s = run, pools, interval_s
        self.feeds = [[r for r in routers if p in r.pools] for p in pools]
        # preallocated arrays, not per-sample Python objects: small objects kept alive
        # across a long run would pin allocator arenas (measured: +480 B of RSS/request)
        self.ticks = np.zeros(SAMPLES_MAX, dtype=np.int64)
        self.values = np.zeros((SAMPLES_MAX, len(pools), len(_STATE_COLUMNS)))
        self.count = 0
        self.stride = 1

    def process(self):
        env, tick = self.run.env, 0
        while not self.run.drained.triggered:
            i = self.count
            self.ticks[i] = tick
            for j, (p, feeds) in enumerate(zip(self.pools, self.feeds)):
                self.values[i, j] = self._pool_state(p, feeds)
            self.count += 1
            if self.count == SAMPLES_MAX:
                self.stride *= 2
                keep = np.flatnonzero(self.ticks % self.stride == 0)
                self.count = len(keep)
                self.ticks[: self.count] = self.ticks[keep]
                self.values[: self.count] = self.values[keep]
            tick = (tick // self.stride + 1) * self.stride
            yield env.timeout(max(tick * self.interval_s - env.now, 0.0))

    @staticmethod
    def _pool_state(p: Pool, feeds: list[Router]) -> tuple:
        """O(routers feeding ``p``), not O(replicas): the replicas keep the pool's totals."""
        central = sum(len(r.queue) for r in feeds)
        return (
            p.outstanding_total, p.queued_total, central, p.running_total, _memory_fraction(p),
            p.stats.busy_total_s,
        )

    def frame(self, fleet: str) -> pd.DataFrame:
        n, k = self.count, len(self.pools)
        values = self.values[:n].reshape(n * k, len(_STATE_COLUMNS))
        df = pd.DataFrame({
            "fleet": fleet,
            "t_s": np.repeat(self.ticks[:n] * self.interval_s, k),
            "pool": np.tile(np.array([p.name for p in self.pools], dtype=object), n),
        })
        for c, column in enumerate(_STATE_COLUMNS):
            df[column] = values[:, c].astype(np.int64) if column in _COUNT_COLUMNS else values[:, c]
        return df


_STATE_COLUMNS = ("outstanding", "queued", "central_queued", "running", "memory_used_fraction", "busy_total_s")
_COUNT_COLUMNS = ("outstanding", "queued", "central_queued", "running")
TIMESERIES_COLUMNS = ("fleet", "t_s", "pool", *_STATE_COLUMNS)


def _memory_fraction(p: Pool) -> float:
    """Fraction of the pool's KV/activation memory in use, from the totals its replicas
    keep (O(1)). AR: KV tokens held plus half a block of paging slack per sequence (as of
    the replica's last batch change in fast mode; ``ARReplica.kv_bytes_estimate``) over
    the KV capacity; step-batched: reserved activation (+ diffusion-LM KV) bytes over the
    memory left after weights; service: no memory model (NaN)."""
    n = len(p.replicas)
    if p.family == "ar":
        cap = p.kv_capacity_blocks * p.config.kv_block_tokens * p.perf.kv_bytes_per_token
        used = p.kv_half_tokens_total / 2 * p.perf.kv_bytes_per_token
        return used / (cap * n) if cap else math.nan
    if p.family == "step":
        return p.reserved_total_bytes / (p.free_bytes * n) if p.free_bytes else math.nan
    return math.nan


def _stop_arrivals(run: RunContext, duration_s: float):
    yield run.env.timeout(duration_s)
    run.arrivals_done = True
    if run.outstanding == 0 and not run.drained.triggered:
        run.drained.succeed()


def _run(run: RunContext, window: RunWindow, total: int, progress: ProgressFn | None) -> None:
    """Run the event loop in 200 chunks of simulated time (progress is reported between).

    Python's cyclic garbage collector is paused inside a chunk and collects the young
    generations between chunks: the event loop makes almost no reference cycles
    (measured: 9 to 45 cyclic objects per run, whatever the request count; everything
    else is freed by reference counting), but the automatic collector kept re-scanning the
    live requests and replicas, a cost that grew with the fleet (4,096 replicas: ~10 µs
    per request, 16 replicas: ~3 µs). Cyclic garbage is still collected, once per chunk;
    a caller that had the collector off keeps it off."""
    env = run.env
    end = window.duration_s + window.drain_s
    chunk = end / 200.0
    t = 0.0
    collecting = gc.isenabled()
    gc.disable()
    try:
        while not run.drained.triggered and t < end:
            t = min(t + chunk, end)
            env.run(until=_until(run, t))
            if collecting:
                gc.collect(1)
            if progress is not None:
                progress(env.now, total - run.outstanding)
    finally:
        if collecting:
            gc.enable()


def _until(run: RunContext, t: float):
    """Run until time ``t`` or until everything has drained, whichever is first."""
    stop = run.env.timeout(t - run.env.now) if t > run.env.now else run.env.timeout(0)
    return run.env.any_of([stop, run.drained])


class _Frames:
    """Outcome columns (:mod:`sim.engine.outcomes`) to the request and pool-share tables."""

    def __init__(self, plan: FleetPlan, pools: list[Pool]) -> None:
        self.names, self.window, self.fleet = list(plan.names), plan.window, plan.name
        kinds = [kind_of(w) for w in plan.workload_configs]
        self.kinds = np.array([k.kind for k in kinds], dtype=object)
        self.ttft_kinds = [k.kind for k in kinds if k.has_ttft]
        self.tpot_kinds = [k.kind for k in kinds if k.has_tpot]
        self.pool_names = np.array([p.name for p in pools] + [""], dtype=object)  # index -1 -> ""
        self.accel = np.array([p.config.accelerator for p in pools] + [""], dtype=object)
        self.status_names = np.array([STATUS_NAMES[k] for k in sorted(STATUS_NAMES)], dtype=object)
        # columns of the serving features, only in runs that use them (other runs' rows stay as they were)
        self.split = any(r.split for r in plan.routes)
        self.speculates = any(getattr(r.config, "speculation", None) is not None for r in plan.routes)
        self.caches = any(getattr(p.config, "prefix_cache", None) is not None for p in pools)
        self.shared_tier = any(p.shared_kv is not None for p in pools)  # a pool's shared KV tier

    def shares(self, shares: dict) -> pd.DataFrame:
        """Replica-seconds per (request, pool) for requests whose journey crossed pools
        (the others held only the pool in their ``pool`` column)."""
        return pd.DataFrame({"request_id": shares["request_id"], "pool": self.pool_names[shares["pool"]],
                             "busy_share_s": shares["busy_share_s"]})

    def requests(self, raw: dict) -> pd.DataFrame:
        window = self.window
        w, pool = raw["workload"], raw["pool"]
        df = pd.DataFrame(
            {
                "request_id": raw["id"],
                "fleet": self.fleet,
                "workload": pd.Categorical.from_codes(w, categories=self.names),
                "kind": self.kinds[w],
                "pool": self.pool_names[pool],
                "accelerator": self.accel[pool],
                "replica": raw["replica"],
                "status": self.status_names[raw["status"]],
                "reject_reason": raw["reason"],
                "arrival_at_s": raw["arrival_at_s"],
                "admitted_at_s": raw["admitted_at_s"],
                "first_token_at_s": raw["first_token_at_s"],
                "done_at_s": raw["done_at_s"],
                "prompt_tokens": raw["prompt_tokens"],
                "output_tokens": raw["output_tokens"],
                "steps": raw["steps"],
                "images": raw["images"],
                "sample_steps": raw["sample_steps"],
                "denoiser_flops": raw["denoiser_flops"],
                "preemptions": raw["preemptions"],
                "busy_share_s": raw["share_s"],
                "verifier_calls": raw["verifier_calls"],
                "handoffs": raw["handoffs"],
                "handoff_s": raw["handoff_s"],
                "handoff_wait_s": raw["handoff_wait_s"],
                "branches": raw["branches"],
                "memory_wait_s": raw["memory_wait_s"],
            }
        )
        df["ttft_s"] = df["first_token_at_s"] - df["arrival_at_s"]
        df["e2e_s"] = df["done_at_s"] - df["arrival_at_s"]
        df["queue_s"] = df["admitted_at_s"] - df["arrival_at_s"]
        streamed = df["kind"].isin(self.tpot_kinds)
        decode_tokens = (df["output_tokens"] - 1).where(df["output_tokens"] > 1)
        df["tpot_s"] = ((df["done_at_s"] - df["first_token_at_s"]) / decode_tokens).where(streamed)
        has_ttft = df["kind"].isin(self.ttft_kinds)
        df.loc[~has_ttft, "ttft_s"] = math.nan
        df["tokens_per_s"] = (df["output_tokens"] / df["e2e_s"]).where(has_ttft)
        df["measured"] = (df["arrival_at_s"] >= window.warmup_s) & (df["arrival_at_s"] < window.duration_s)
        if self.split:
            self._split_columns(df, raw)
        if self.speculates:
            steps = df["steps"].where(df["steps"] > 0)
            df["tokens_per_step"] = ((df["output_tokens"] - 1) / steps).where(df["kind"] == "autoregressive")
        if self.caches:  # a prefix cache (docs/kv-reuse.md): the first prefill's tokens served from it
            df["cached_tokens"] = raw["cached_tokens"]
            df["prefill_flops_saved"] = raw["prefill_flops_saved"]
            df["host_cached_tokens"] = raw["host_cached_tokens"]
            df["ssd_cached_tokens"] = raw["ssd_cached_tokens"]
            if self.shared_tier:  # only then, so the outputs without a shared tier keep their columns
                df["shared_cached_tokens"] = raw["shared_cached_tokens"]
        return df

    def _split_columns(self, df: pd.DataFrame, raw: dict) -> None:
        """A split deployment's columns: the prefill pool is ``pool`` (the pool the request
        entered by), ``replica`` the decode replica; the prefill replica, the decode pool,
        the KV bytes moved, the transfer's duration (α + bytes / bandwidth), the wait for
        room on the decode side after the prefill ended, and when the KV cache arrived."""
        decoded = raw["decode_pool"] >= 0
        df["prefill_replica"] = np.where(decoded, raw["kv_src_replica"], -1)
        df["decode_pool"] = self.pool_names[raw["decode_pool"]]
        df["kv_transfer_bytes"] = raw["kv_transfer_bytes"]
        df["kv_transfer_s"] = raw["kv_transfer_s"]
        df["decode_queue_s"] = raw["decode_queue_s"]
        df["kv_done_at_s"] = raw["kv_done_at_s"]


def _pools_frame(pools: list[Pool], fleet: str) -> pd.DataFrame:
    rows = []
    for p in pools:
        s = p.stats
        rows.append(
            {
                "fleet": fleet,
                "pool": p.name,
                "accelerator": p.config.accelerator,
                "model": p.perf.model.key if p.perf else "",
                "family": p.family,
                "precision": p.config.precision,
                "tp": p.config.tp,
                "pp": p.config.pp,
                "ep": p.config.ep,
                "replicas": p.config.replicas,
                "busy_s": s.busy_s,
                "busy_total_s": s.busy_total_s,
                "flops": s.flops,
                "bytes": s.bytes,
                "hbm_byte_s": s.hbm_byte_s,
                "hbm_peak_bytes": s.hbm_peak_bytes,
                "iterations": s.iterations,
            }
        )
        if getattr(p.config, "prefix_cache", None) is not None:
            tokens = dict(zip(PREFILL_TOKENS, s.prefill_tokens))
            rows[-1].update(prefill_prompt_tokens=tokens["prompt"], prefill_cached_tokens=tokens["cached"],
                            prefill_flops_saved=s.prefill_saved[0], prefill_host_tokens=tokens["host"],
                            prefill_ssd_tokens=tokens["ssd"])
            if p.shared_kv is not None:
                rows[-1].update(prefill_shared_tokens=tokens["shared"])
            rows[-1].update({f"kv_{name}_blocks": n for name, n in zip(TRAFFIC, s.kv_tier_blocks)
                             if p.shared_kv is not None or not name.endswith("_shared")})
    return pd.DataFrame(rows)
