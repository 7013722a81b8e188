"""The operations layer of one run: per operated pool (residency, autoscale or failures:
:mod:`sim.operations`), a :class:`PoolOps` that every request routed to the pool passes
through (``Pool.gate``), an autoscaler (:mod:`sim.engine.autoscale`) and a failure process
(:mod:`sim.engine.failures`). A pool without operations has no gate and runs as before.

Replica states: ``SERVING`` (powered, routed to), ``STARTING`` (powered, loading its
weights: a cold start), ``DRAINING`` (powered, not routed to, finishing its requests),
``OFF`` and ``FAILED`` (down: failed and not yet restored). Capacity over time is kept
as a step function (one row per change: serving, powered and failed replicas), and
powered and failed replica-seconds are integrated exactly between changes. Cost: O(1) per
request (the gate) plus O(replicas touched) per scale action or failure.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pandas as pd

from sim.engine.autoscale import Autoscaler
from sim.engine.capacity import DRAINING, FAILED, SERVING, STARTING, is_offline, set_offline, set_online
from sim.engine.failures import FailureProcess
from sim.engine.residency import Residency
COUNTERS = ("interruptions", "replicas_failed", "requests_retried", "requests_lost", "cold_starts",
            "scale_ups", "scale_downs", "loads_storage", "loads_host", "switches_hbm", "load_s",
            "adapter_loads", "adapter_hits", "adapter_load_s", "parked")


class PoolOps:
    """One operated pool in one run: the gate its requests pass, its replicas' states and
    its counters (module docstring)."""

    def __init__(self, run, pool, routers: list, replica_cls) -> None:
        self.run, self.env, self.pool, self.routers, self.replica_cls = run, run.env, pool, routers, replica_cls
        self.ops = pool.plan.ops
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.counters["load_s"] = self.counters["adapter_load_s"] = 0.0
        n = len(pool.replicas)
        self.state = [SERVING] * n
        # replicas by state (dicts as insertion-ordered sets): scale actions touch only the
        # replicas they move, never scan the pool
        self.by_state: list[dict[int, None]] = [{} for _ in range(5)]
        self.by_state[SERVING] = dict.fromkeys(range(n))
        self.parked: deque = deque()  # requests routed while no replica served
        self.residency = Residency(self.env, pool, self.ops, self.counters) if self.ops.residency else None
        self.powered = self.serving = n
        self.failed = 0
        self._t = 0.0
        self.powered_s = self.failed_s = self.serving_s = 0.0
        self.changes: list[tuple] = [(0.0, n, n, 0)]
        self.router_of: dict[int, object] = {}  # workload index -> the router that feeds this pool
        pool.gate = self

    # --- requests ------------------------------------------------------------------
    def submit(self, replica, req) -> None:
        """A request routed to ``replica``: parked if no replica serves, else on."""
        if is_offline(replica):
            self.parked.append(req)
            self.counters["parked"] += 1
            return
        if self.residency is None:
            replica.submit(req)
        else:
            self.residency.submit(replica, req)

    def finished(self, req) -> None:
        if self.residency is not None and req.replica >= 0:
            self.residency.finished(self.pool.replicas[req.replica])

    def redispatch(self, req) -> None:
        """Route ``req`` again (parked, or retried after a failure)."""
        if req.journey is not None:
            self.run.routers[req.journey[req.leg][0]].forward(req)
        else:
            self.router_of[req.workload].forward(req)

    def unpark(self) -> None:
        parked, self.parked = self.parked, deque()
        for req in parked:
            self.redispatch(req)

    # --- replica states ------------------------------------------------------------
    def _account(self) -> None:
        now = self.env.now
        dt = now - self._t
        self.powered_s += dt * self.powered
        self.failed_s += dt * self.failed
        self.serving_s += dt * self.serving
        self._t = now

    def set_state(self, i: int, state: int) -> None:
        """Move replica ``i`` to ``state``: routing, power and the capacity record follow."""
        old = self.state[i]
        if old == state:
            return
        self._account()
        powered = (SERVING, STARTING, DRAINING, FAILED)
        self.powered += (state in powered) - (old in powered)
        self.failed += (state == FAILED) - (old == FAILED)
        self.serving += (state == SERVING) - (old == SERVING)
        self.state[i] = state
        del self.by_state[old][i]
        self.by_state[state][i] = None
        replica = self.pool.replicas[i]
        if state == SERVING:
            set_online(replica)
            if self.parked:
                self.unpark()
        elif old == SERVING:
            set_offline(replica)
        self.changes.append((self.env.now, self.serving, self.powered, self.failed))

    def close(self) -> None:
        self._account()

    # --- outputs -------------------------------------------------------------------
    def row(self, fleet: str) -> dict:
        ops, c = self.ops, self.counters
        gpu_hours = self.powered_s * ops.gpus_per_replica / 3600.0
        return {"fleet": fleet, "pool": self.pool.name, **c,
                "powered_replica_s": self.powered_s, "serving_replica_s": self.serving_s,
                "failed_replica_s": self.failed_s, "gpu_hours_powered": gpu_hours,
                "powered_cost_usd": gpu_hours * ops.usd_per_gpu_hour}

    def capacity_frame(self, fleet: str) -> pd.DataFrame:
        t, serving, powered, failed = (np.array(c) for c in zip(*self.changes))
        return pd.DataFrame({"fleet": fleet, "pool": self.pool.name, "t_s": t, "serving": serving,
                             "powered": powered, "failed": failed})


OPERATIONS_COLUMNS = ("fleet", "pool", *COUNTERS, "powered_replica_s", "serving_replica_s", "failed_replica_s",
                      "gpu_hours_powered", "powered_cost_usd")
CAPACITY_COLUMNS = ("fleet", "pool", "t_s", "serving", "powered", "failed")


class FleetOps:
    """Every operated pool of one run, their autoscalers and failure processes."""

    def __init__(self, run, plan, pools: list, routers: dict, replica_types: dict) -> None:
        self.run, self.plan = run, plan
        self.pools: list[PoolOps] = []
        for pool in pools:
            if pool.plan.ops is None:
                continue
            feeding = [r for r in routers.values() if pool in r.pools]
            ops = PoolOps(run, pool, feeding, replica_types[pool.family])
            for (w, _), router in routers.items():
                if pool in router.pools:
                    ops.router_of[w] = router
            if ops.ops.autoscale is not None:
                Autoscaler(ops, plan.window)
            if ops.ops.failures:
                FailureProcess(ops, plan.window, plan.seed, plan.index)
            self.pools.append(ops)
        by_index = {ops.pool.index: ops for ops in self.pools}
        run.on_finished = lambda req: (by_index[req.cur_pool].finished(req) if req.cur_pool in by_index else None)

    def frames(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(one row per operated pool: counters, replica-seconds, GPU-hours, cost of the
        powered hours; capacity changes over time)."""
        for ops in self.pools:
            ops.close()
        rows = pd.DataFrame([ops.row(self.plan.name) for ops in self.pools], columns=list(OPERATIONS_COLUMNS))
        caps = [ops.capacity_frame(self.plan.name) for ops in self.pools]
        capacity = pd.concat(caps, ignore_index=True) if caps else pd.DataFrame(columns=list(CAPACITY_COLUMNS))
        return rows, capacity
