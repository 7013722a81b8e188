"""``simulate(scenario, fleet)``: one fleet serving the scenario's demand in SimPy.

The heart of dcsim. It does no file I/O and keeps no global state; for a given scenario
and seed it is deterministic. A run:

1. builds the fleet's pools (placement checks, perf model, KV/activation capacity);
2. starts one arrival process per workload and one router per workload;
3. runs until ``duration_s`` (arrivals stop), then drains for at most ``drain_s``;
4. returns flat per-request and per-pool rows as DataFrames.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Callable

import numpy as np
import pandas as pd

from fleets.catalog import Catalog, load_catalog
from fleets.placement import PoolLayout, place_pool
from sim.demand import WorkloadDemand, generate_demand
from sim.perf import PerfModel
from sim.replica_ar import ARReplica
from sim.replica_service import ServiceReplica
from sim.replica_step import StepReplica
from sim.request import STATUS_NAMES, Request
from sim.router import Router
from sim.run import PoolStats, RunContext, events_processed
from sim.scenario import FleetConfig, PoolConfig, Scenario, _engine_family
from sim.shapes import step_shape

ProgressFn = Callable[[float, int], None]


@dataclass(eq=False)
class Pool:
    """A pool as built for one run: layout (placement), perf model, capacity, stats."""

    index: int
    config: PoolConfig
    family: str  # "ar" | "step" | "service"
    workloads: dict[int, object]  # workload index -> workload config
    layout: PoolLayout | None = None
    perf: PerfModel | None = None
    kv_capacity_blocks: int = 0
    free_bytes: float = 0.0
    stats: PoolStats = field(default_factory=PoolStats)
    replicas: list = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.config.name

    def reject_reason(self, req: Request) -> str:
        """Why this pool can never serve ``req`` ("" if it can)."""
        if self.family == "ar":
            tokens = req.prompt_tokens + req.output_tokens
            if tokens > (self.perf.model.max_context_tokens or math.inf):
                return "exceeds_max_context"
            if -(-tokens // self.config.kv_block_tokens) > self.kv_capacity_blocks:
                return "exceeds_kv_capacity"
        elif self.family == "step":
            phases, reserve = step_shape(self.workloads[req.workload], self.perf, req)
            if max(p[1] for p in phases) > self.config.max_batch:
                return "exceeds_max_batch"
            if reserve > self.free_bytes:
                return "exceeds_memory"
        return ""

    def prepare(self, req: Request) -> None:
        if self.family == "step":
            req.phases, req.reserved_bytes = step_shape(self.workloads[req.workload], self.perf, req)


def build_pools(scenario: Scenario, fleet: FleetConfig, catalog: Catalog | None = None) -> list[Pool]:
    """Resolve a fleet's pools: catalog lookups and placement checks.

    Raises:
        UserError: unknown accelerator or model (naming the allowed keys).
        PlacementError: a model that does not fit, TP beyond the scale-up domain, a rack
            over its power budget.
    """
    catalog = catalog or load_catalog()
    names = list(scenario.workloads)
    fleet_index = scenario.fleets.index(fleet) if fleet in scenario.fleets else 0
    pools = []
    for i, cfg in enumerate(fleet.pools):
        where = f"fleets[{fleet_index}] '{fleet.name}' pools[{i}] '{cfg.name}'"
        served = {names.index(w): scenario.workloads[w] for w in cfg.serves}
        family = _engine_family(next(iter(served.values())).kind)
        pool = Pool(index=i, config=cfg, family=family, workloads=served)
        if family != "service":
            _place(pool, catalog, where)
        pools.append(pool)
    return pools


def _place(pool: Pool, catalog: Catalog, where: str) -> None:
    cfg = pool.config
    wl = next(iter(pool.workloads.values()))
    accelerator = catalog.accelerator(cfg.accelerator, where=f"{where}.accelerator")
    model = catalog.model(wl.model, where=f"{where} (model of workload served)")
    perf = PerfModel(accelerator, model, cfg.precision, cfg.tp, cfg.pp, cfg.iteration_overhead_s)
    min_act = _min_activation_bytes(pool, perf) if pool.family == "step" else 0.0
    layout = place_pool(
        name=cfg.name,
        accelerator=accelerator,
        model=model,
        precision=cfg.precision,
        tp=cfg.tp,
        pp=cfg.pp,
        replicas=cfg.replicas,
        memory_utilization=cfg.memory_utilization,
        min_kv_tokens=cfg.min_kv_tokens if pool.family == "ar" else 0,
        min_activation_bytes=min_act,
        nodes_per_rack=cfg.nodes_per_rack,
        rack_power_budget_w=None if cfg.rack_power_budget_kw is None else cfg.rack_power_budget_kw * 1e3,
        where=where,
    )
    pool.layout = layout
    pool.perf = perf
    pool.free_bytes = layout.replica_free_bytes
    if pool.family == "ar" and perf.kv_bytes_per_token > 0:
        pool.kv_capacity_blocks = int(layout.replica_free_bytes // (perf.kv_bytes_per_token * cfg.kv_block_tokens))


def _min_activation_bytes(pool: Pool, perf: PerfModel) -> float:
    """Activation bytes of one request of the largest served image/video/search shape
    (a diffusion LM's reservation depends on its lengths and is checked per request)."""
    probe = Request(id=-1, workload=-1, arrival_at_s=0.0, prompt_tokens=1, output_tokens=1, steps=1)
    fixed = [w for w in pool.workloads.values() if w.kind != "diffusion_lm"]
    return max((step_shape(w, perf, probe)[1] for w in fixed), default=0.0)


_REPLICA_TYPES = {"ar": ARReplica, "step": StepReplica, "service": ServiceReplica}


@dataclass
class FleetRun:
    """What one fleet did: per-request rows, per-pool rows, the simulated end time and
    the number of SimPy events processed."""

    fleet: str
    requests: pd.DataFrame
    pools: pd.DataFrame
    end_s: float
    events: int
    timeseries: pd.DataFrame = field(default_factory=pd.DataFrame)
    pool_objects: list = field(default_factory=list, repr=False)


def simulate(
    scenario: Scenario,
    fleet: str | int = 0,
    *,
    demand: dict[str, WorkloadDemand] | None = None,
    catalog: Catalog | None = None,
    progress: ProgressFn | None = None,
) -> FleetRun:
    """Run ``scenario``'s demand through one of its fleets.

    Args:
        scenario: a validated scenario.
        fleet: fleet name or index into ``scenario.fleets``.
        demand: pre-drawn demand (shared across fleets); drawn from the seed if None.
        catalog: accelerator/model catalog (the packaged one if None).
        progress: called as ``progress(sim_time_s, requests_finished)`` about 200 times.

    Returns:
        FleetRun with ``requests`` (one row per request; status completed, rejected with
        a reason, or in_flight) and ``pools`` (one row per pool, raw window totals).

    Raises:
        UserError / PlacementError: the fleet cannot be built.
    """
    fleet_cfg = _pick_fleet(scenario, fleet)
    pools = build_pools(scenario, fleet_cfg, catalog)
    demand = demand if demand is not None else generate_demand(scenario)
    run = RunContext(scenario.warmup_s, scenario.duration_s, scenario.engine.mode == "exact")
    for pool in pools:
        cls = _REPLICA_TYPES[pool.family]
        pool.replicas = [cls(run, pool, i) for i in range(pool.config.replicas)]
    names = list(scenario.workloads)
    requests: list[Request] = []
    total = sum(len(d) for d in demand.values())
    run.outstanding = total
    routers = []
    first_id = 0
    for w, name in enumerate(names):
        serving = [p for p in pools if w in p.workloads]
        routers.append(Router(run, fleet_cfg.router, serving))
        _ArrivalFeed(run, w, first_id, demand[name], routers[-1], requests)
        first_id += len(demand[name])
    run.env.process(_stop_arrivals(run, scenario.duration_s))
    samples: list[tuple] = []
    interval = scenario.sample_interval_s or scenario.duration_s / 120.0
    run.env.process(_sampler(run, pools, routers, interval, samples))
    _run(run, scenario, total, progress)
    return FleetRun(
        fleet=fleet_cfg.name,
        requests=_requests_frame(requests, names, scenario, pools, fleet_cfg.name),
        pools=_pools_frame(pools, fleet_cfg.name),
        end_s=run.env.now,
        events=events_processed(run.env),
        timeseries=_timeseries_frame(samples, pools, fleet_cfg.name),
        pool_objects=pools,
    )


def _pick_fleet(scenario: Scenario, fleet: str | int) -> FleetConfig:
    if isinstance(fleet, int):
        return scenario.fleets[fleet]
    for f in scenario.fleets:
        if f.name == fleet:
            return f
    raise KeyError(f"no fleet named {fleet!r}; fleets: {[f.name for f in scenario.fleets]}")


class _ArrivalFeed:
    """Creates workload ``w``'s requests at their arrival instants (ids ``first_id``,
    ``first_id`` + 1, …) and hands them to the router: one timeout per distinct arrival
    instant, driven by callbacks (cheaper than a generator process)."""

    def __init__(self, run: RunContext, w: int, first_id: int, d: WorkloadDemand, router: Router, requests: list):
        self.env = run.env
        self.w = w
        self.first_id = first_id
        self.router = router
        self.requests = requests
        self.times = d.arrival_s.tolist()
        self.prompt = d.prompt_tokens.tolist()
        self.output = d.output_tokens.tolist()
        self.steps = d.steps.tolist()
        self.service = d.service_s.tolist()
        self.i = 0
        if self.times:
            self._schedule()

    def _schedule(self) -> None:
        timer = self.env.timeout(self.times[self.i] - self.env.now)
        timer.callbacks.append(self._arrive)

    def _arrive(self, _event) -> None:
        now, times, n = self.env.now, self.times, len(self.times)
        i = self.i
        while i < n and times[i] <= now:
            req = Request(
                id=self.first_id + i,
                workload=self.w,
                arrival_at_s=times[i],
                prompt_tokens=self.prompt[i],
                output_tokens=self.output[i],
                steps=self.steps[i],
                service_s=self.service[i],
            )
            self.requests.append(req)
            self.router.dispatch(req)
            i += 1
        self.i = i
        if i < n:
            self._schedule()


def _sampler(run: RunContext, pools: list[Pool], routers: list[Router], interval_s: float, out: list):
    """Every ``interval_s``: per pool, requests outstanding (queued or running) and
    queued, plus the routers' central queues; busy time is the pool's cumulative total
    (its differences give utilisation over time)."""
    env = run.env
    while not run.drained.triggered:
        central = sum(len(r.queue) for r in routers)
        for p in pools:
            outstanding = sum(r.outstanding for r in p.replicas)
            queued = sum(r.queued for r in p.replicas)
            out.append((env.now, p.index, outstanding, queued, central, p.stats.busy_total_s))
        yield env.timeout(interval_s)


def _timeseries_frame(samples: list[tuple], pools: list[Pool], fleet: str) -> pd.DataFrame:
    df = pd.DataFrame(samples, columns=["t_s", "pool", "outstanding", "queued", "central_queued", "busy_total_s"])
    df.insert(0, "fleet", fleet)
    df["pool"] = [pools[i].name for i in df["pool"]]
    return df


def _stop_arrivals(run: RunContext, duration_s: float):
    yield run.env.timeout(duration_s)
    run.arrivals_done = True
    if run.outstanding == 0 and not run.drained.triggered:
        run.drained.succeed()


def _run(run: RunContext, scenario: Scenario, total: int, progress: ProgressFn | None) -> None:
    env = run.env
    end = scenario.duration_s + scenario.drain_s
    chunk = end / 200.0
    t = 0.0
    while not run.drained.triggered and t < end:
        t = min(t + chunk, end)
        env.run(until=_until(run, t))
        if progress is not None:
            progress(env.now, total - run.outstanding)


def _until(run: RunContext, t: float):
    """Run until time ``t`` or until everything has drained, whichever is first."""
    stop = run.env.timeout(t - run.env.now) if t > run.env.now else run.env.timeout(0)
    return run.env.any_of([stop, run.drained])


_REQUEST_FIELDS = (
    "id", "workload", "pool", "replica", "status", "reason", "arrival_at_s", "admitted_at_s",
    "first_token_at_s", "done_at_s", "prompt_tokens", "output_tokens", "steps", "sample_steps",
    "denoiser_flops", "preemptions", "share_s",
)


def _requests_frame(requests: list[Request], names: list[str], scenario: Scenario, pools: list[Pool], fleet: str) -> pd.DataFrame:
    requests.sort(key=lambda r: r.id)
    get = attrgetter(*_REQUEST_FIELDS)
    raw = pd.DataFrame.from_records([get(r) for r in requests], columns=_REQUEST_FIELDS)
    kinds = np.array([scenario.workloads[n].kind for n in names], dtype=object)
    pool_names = np.array([p.name for p in pools] + [""], dtype=object)  # index -1 -> ""
    accel = np.array([p.config.accelerator for p in pools] + [""], dtype=object)
    status_names = np.array([STATUS_NAMES[k] for k in sorted(STATUS_NAMES)], dtype=object)
    w, pool = raw["workload"].to_numpy(), raw["pool"].to_numpy()
    df = pd.DataFrame(
        {
            "request_id": raw["id"],
            "fleet": fleet,
            "workload": pd.Categorical.from_codes(w, categories=names),
            "kind": kinds[w],
            "pool": pool_names[pool],
            "accelerator": accel[pool],
            "replica": raw["replica"],
            "status": status_names[raw["status"].to_numpy()],
            "reject_reason": raw["reason"],
            "arrival_at_s": raw["arrival_at_s"],
            "admitted_at_s": raw["admitted_at_s"],
            "first_token_at_s": raw["first_token_at_s"],
            "done_at_s": raw["done_at_s"],
            "prompt_tokens": raw["prompt_tokens"],
            "output_tokens": raw["output_tokens"],
            "steps": raw["steps"],
            "sample_steps": raw["sample_steps"],
            "denoiser_flops": raw["denoiser_flops"].astype(float),
            "preemptions": raw["preemptions"],
            "busy_share_s": raw["share_s"],
        }
    )
    df["ttft_s"] = df["first_token_at_s"] - df["arrival_at_s"]
    df["e2e_s"] = df["done_at_s"] - df["arrival_at_s"]
    df["queue_s"] = df["admitted_at_s"] - df["arrival_at_s"]
    streamed = df["kind"] == "autoregressive"
    decode_tokens = (df["output_tokens"] - 1).where(df["output_tokens"] > 1)
    df["tpot_s"] = ((df["done_at_s"] - df["first_token_at_s"]) / decode_tokens).where(streamed)
    df.loc[~df["kind"].isin(["autoregressive", "diffusion_lm"]), "ttft_s"] = math.nan
    df["tokens_per_s"] = (df["output_tokens"] / df["e2e_s"]).where(df["kind"].isin(["autoregressive", "diffusion_lm"]))
    df["measured"] = (df["arrival_at_s"] >= scenario.warmup_s) & (df["arrival_at_s"] < scenario.duration_s)
    return df


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
    return pd.DataFrame(rows)
