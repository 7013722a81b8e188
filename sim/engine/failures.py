"""Failures and repair on one pool (:class:`sim.operations.Failures`, rates resolved by
:mod:`sim.ops_plan`): the superposition of every component's Poisson process, drawn from
an RNG stream of its own (``SeedSequence([seed, FAILURE_STREAM, fleet, pool])``), so the
demand's draws do not move.

A failure of a component picks one unit of its scope uniformly (a GPU, a node, a rack)
and takes down every replica with a GPU on it: each stops at once (its iteration in
progress is lost; iterations already ended count), leaves routing and is ``FAILED``. After
``detection_s`` its requests (queued, running, held for loads) are retried through the
pool's router, or lost (completed as rejected, reason ``lost_in_failure``), and a fresh
replica takes its place, down until restored: after ``swap_s`` if a spare is free (the
failed unit is repaired in ``repair_s`` and becomes a spare again), else after
``repair_s``. A failure on a replica already down counts as an interruption and changes
nothing else. Failures stop with the arrivals (at ``duration_s``).

Capacity lost: the replica-seconds spent ``FAILED`` (:class:`sim.engine.operations.PoolOps`).
Cost per failure: O(replicas in its scope).
"""

from __future__ import annotations

import numpy as np

from sim.engine.capacity import DRAINING, FAILED, OFF, SERVING, STARTING, evacuate, freeze, replace, reset_for_retry
from sim.engine.request import REJECTED

FAILURE_STREAM = 0xFA11
LOST_REASON = "lost_in_failure"


class FailureProcess:
    def __init__(self, ops, window, seed: int, fleet_index: int) -> None:
        self.ops, self.env, self.window = ops, ops.env, window
        plan = ops.ops
        self.modes = plan.failures
        self.rates = np.array([m.rate_per_s for m in self.modes])
        self.total = float(self.rates.sum())
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, FAILURE_STREAM, fleet_index, ops.pool.index]))
        self.spares_free = plan.spares
        self.before: dict[int, int] = {}  # replica -> its state when it failed
        self.by_component = {m.component: 0 for m in self.modes}
        if self.total > 0:
            self.env.process(self._run())

    def _run(self):
        end = self.window.duration_s
        cdf = np.cumsum(self.rates) / self.total
        while True:
            gap = self.rng.exponential(1.0 / self.total)
            if self.env.now + gap >= end:
                return
            yield self.env.timeout(gap)
            mode = self.modes[min(int(np.searchsorted(cdf, self.rng.random(), side="right")), len(self.modes) - 1)]
            unit = int(self.rng.integers(mode.units))
            self._fail(mode, unit)

    def replicas_of(self, scope: str, unit: int) -> range:
        """Replica indices with a GPU on ``unit`` of ``scope``."""
        plan, n = self.ops.ops, len(self.ops.pool.replicas)
        g = plan.gpus_per_replica
        per = {"gpu": 1, "node": plan.gpus_per_node, "rack": plan.gpus_per_node * plan.nodes_per_rack}[scope]
        first, last = unit * per, (unit + 1) * per - 1
        return range(min(first // g, n), min(last // g + 1, n))

    def _fail(self, mode, unit: int) -> None:
        ops = self.ops
        ops.counters["interruptions"] += 1
        self.by_component[mode.component] += 1
        for i in self.replicas_of(mode.scope, unit):
            state = ops.state[i]
            if state == FAILED:
                continue
            ops.counters["replicas_failed"] += 1
            self.before[i] = state
            freeze(ops.pool.replicas[i])
            ops.set_state(i, FAILED)
            self.env.timeout(mode.detection_s).callbacks.append(lambda _e, i=i, m=mode: self._detected(i, m))

    def _detected(self, i: int, mode) -> None:
        ops = self.ops
        old = ops.pool.replicas[i]
        requests = ops.residency.evacuate(i) if ops.residency is not None else []
        requests = sorted(requests + evacuate(old), key=lambda r: r.id)
        replace(ops.run, ops.pool, i, ops.routers, ops.replica_cls)
        for req in requests:
            if ops.ops.retry:
                ops.counters["requests_retried"] += 1
                reset_for_retry(req)
                ops.redispatch(req)
            else:
                ops.counters["requests_lost"] += 1
                req.status, req.reason = REJECTED, LOST_REASON
                ops.run.request_finished(req)
        if self.spares_free > 0:
            self.spares_free -= 1
            down_s = ops.ops.swap_s
            self.env.timeout(mode.repair_s).callbacks.append(lambda _e: self._spare_back())
        else:
            down_s = mode.repair_s
        self.env.timeout(down_s).callbacks.append(lambda _e: self._restored(i))

    def _spare_back(self) -> None:
        self.spares_free += 1

    def _restored(self, i: int) -> None:
        before = self.before.pop(i, SERVING)
        self.ops.set_state(i, {STARTING: SERVING, DRAINING: OFF}.get(before, before) if before != OFF else OFF)
