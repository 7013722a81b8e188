"""A replica whose requests each hold one of ``max_batch`` slots for a sampled service
time, independently of each other: with ``max_batch = 1`` and exponential service, a
pool of c replicas behind a central queue is an M/M/c queue (used to check the engine
against Erlang-C; not a model of real inference)."""

from __future__ import annotations

from collections import deque

from sim.engine.request import COMPLETED, Request, RouterFacing


class ServiceReplica(RouterFacing):
    # slots, not a __dict__: a 4,096-replica fleet's replica state stays compact in cache
    __slots__ = (
        "busy", "env", "index", "listeners", "max_batch", "outstanding", "pool", "run", "waiting",
    )

    def __init__(self, run, pool, index: int) -> None:
        self.run = run
        self.env = run.env
        self.pool = pool
        self.index = index
        self.max_batch = pool.config.max_batch
        self.waiting: deque[Request] = deque()
        self.busy = 0
        self.outstanding = 0
        self.listeners: list = []  # central-queue routers, pulled when a slot frees


    def submit(self, req: Request) -> None:
        req.replica = self.index
        self.outstanding += 1
        self.pool.outstanding_total += 1
        if self.busy < self.max_batch:
            self._start(req)
        else:
            self.waiting.append(req)
            self.pool.queued_total += 1
        self._tell_watchers()

    def _start(self, req: Request) -> None:
        self.busy += 1
        self.pool.running_total += 1
        req.admitted_at_s = self.env.now
        done = self.env.timeout(req.service_s)
        done.callbacks.append(lambda _event, req=req: self._finish(req))

    def settle(self) -> None:
        """The run stops now: nothing to settle (a request's service is one event)."""

    def _finish(self, req: Request) -> None:
        now = self.env.now
        self.busy -= 1
        self.outstanding -= 1
        pool = self.pool
        pool.running_total -= 1
        pool.outstanding_total -= 1
        req.status = COMPLETED
        req.done_at_s = now
        req.first_token_at_s = now
        req.share_s = req.service_s
        self.run.account(self.pool.stats, req.admitted_at_s, now, 0.0, 0.0, 0.0)
        self.run.request_finished(req)
        if self.waiting:
            self._start(self.waiting.popleft())
            pool.queued_total -= 1
        self._tell_watchers()
        for listener in self.listeners:
            listener.pull(self)
