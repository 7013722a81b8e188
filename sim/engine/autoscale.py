"""Autoscaling one pool (:class:`sim.operations.Autoscale`): a SimPy process that every
``interval_s`` compares the replicas the pool has (serving + starting) with the replicas
it wants, ``ceil(metric / target)`` clamped to [min_replicas, replicas]:

- metric ``outstanding``: the requests queued or running at the pool's replicas, held by
  its gate, parked, and waiting in the central queues that feed it;
- metric ``busy``: the replica-seconds the pool was busy over the last interval / the
  interval (the replicas' worth of busy time).

A change must be wanted for ``up_delay_s`` (``down_delay_s``) on end before it is made
(Kubernetes' stabilisation windows). Scaling up first takes back replicas still
draining (no cold start), then powers on replicas that are off: each is billed at once
and serves after ``cold_start_s`` (weights through the storage tiers + warm-up). Scaling
down first cancels the latest cold starts, then drains the replicas that began serving last: they
leave routing at once and power off when their last request finishes (checked every
interval). The process stops with the arrivals.
"""

from __future__ import annotations

import math

from sim.engine.capacity import DRAINING, OFF, SERVING, STARTING, real_outstanding


class Autoscaler:
    def __init__(self, ops, window) -> None:
        self.ops, self.env, self.window = ops, ops.env, window
        self.cfg = ops.ops.autoscale
        self.max = len(ops.pool.replicas)
        initial = self.cfg.initial_replicas or self.cfg.min_replicas
        for i in range(self.max - 1, initial - 1, -1):  # off in descending order: powered on lowest first
            ops.set_state(i, OFF)
        self.want_since: tuple[int, float] | None = None  # (direction, since)
        self.busy_mark = 0.0
        self.env.process(self._run())

    def _run(self):
        interval = self.cfg.interval_s
        while self.env.now + interval < self.window.duration_s:
            yield self.env.timeout(interval)
            self._power_off_drained()
            self._decide(self._wanted())

    def _metric(self) -> float:
        pool = self.ops.pool
        if self.cfg.metric == "busy":
            busy = pool.stats.busy_total_s
            value, self.busy_mark = (busy - self.busy_mark) / self.cfg.interval_s, busy
            return value
        central = sum(len(r.queue) for r in self.ops.routers)
        return pool.outstanding_total + len(self.ops.parked) + central

    def _wanted(self) -> int:
        want = math.ceil(self._metric() / self.cfg.target - 1e-9)
        return min(max(want, self.cfg.min_replicas), self.max)

    def _decide(self, want: int) -> None:
        by_state = self.ops.by_state
        have = len(by_state[SERVING]) + len(by_state[STARTING])
        direction = (want > have) - (want < have)
        if direction == 0:
            self.want_since = None
            return
        if self.want_since is None or self.want_since[0] != direction:
            self.want_since = (direction, self.env.now)
        delay = self.cfg.up_delay_s if direction > 0 else self.cfg.down_delay_s
        if self.env.now - self.want_since[1] + 1e-9 < delay:
            return
        self.want_since = None
        if direction > 0:
            self._up(want - have)
        else:
            self._down(have - want)

    def _up(self, n: int) -> None:
        """Take back the most recently drained replicas, then power on those off longest."""
        ops = self.ops
        for order in (DRAINING, OFF):
            pool = ops.by_state[order]
            while n and pool:
                i = next(reversed(pool)) if order == DRAINING else next(iter(pool))
                ops.counters["scale_ups"] += 1
                if order == DRAINING:
                    ops.set_state(i, SERVING)
                else:
                    ops.counters["cold_starts"] += 1
                    ops.set_state(i, STARTING)
                    self.env.timeout(ops.ops.cold_start_s).callbacks.append(lambda _e, i=i: self._started(i))
                n -= 1

    def _started(self, i: int) -> None:
        if self.ops.state[i] == STARTING:
            self.ops.set_state(i, SERVING)

    def _down(self, n: int) -> None:
        """Cancel the latest cold starts, then drain the latest replicas to serve."""
        ops = self.ops
        for order in (STARTING, SERVING):
            pool = ops.by_state[order]
            while n and pool:
                i = next(reversed(pool))
                ops.counters["scale_downs"] += 1
                ops.set_state(i, OFF if order == STARTING else DRAINING)
                n -= 1
        self._power_off_drained()

    def _power_off_drained(self) -> None:
        ops = self.ops
        for i in [i for i in ops.by_state[DRAINING] if real_outstanding(ops.pool.replicas[i]) == 0]:
            ops.set_state(i, OFF)
