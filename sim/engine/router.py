"""Routers: one per workload and fleet, dispatching arrivals over the replicas of the
pools that serve the workload, by a named policy.

Policies (registered by name, picked by the fleet's ``router:`` key):

- ``round_robin``: replicas in turn.
- ``least_outstanding``: the replica with the fewest requests queued or running.
- ``join_shortest_queue``: the fewest requests waiting for admission, then fewest
  outstanding.
- ``central_queue``: requests wait in one FIFO at the router and are dispatched when a
  replica has a free batch slot (outstanding < max_batch); with max_batch 1 and
  exponential service this is the M/M/c queue.

Ties go to the lowest replica index, so runs are deterministic.
"""

from __future__ import annotations

from collections import deque
from operator import attrgetter
from typing import Callable

from sim.engine.request import REJECTED, Request

Policy = Callable[["Router", list], object]


def _round_robin(router: "Router", replicas: list):
    router.next_index = (router.next_index + 1) % len(replicas)
    return replicas[router.next_index]


def _least_outstanding(router: "Router", replicas: list):
    return min(replicas, key=_OUTSTANDING)


def _join_shortest_queue(router: "Router", replicas: list):
    return min(replicas, key=_queued_then_outstanding)


_OUTSTANDING = attrgetter("outstanding")  # a counter kept by every replica type


def _queued_then_outstanding(replica) -> tuple[int, int]:
    return replica.queued, replica.outstanding


POLICIES: dict[str, Policy] = {
    "round_robin": _round_robin,
    "least_outstanding": _least_outstanding,
    "join_shortest_queue": _join_shortest_queue,
    "central_queue": _least_outstanding,
}


class Router:
    """Dispatches the arrivals of one workload.

    Args:
        run: the run context (for counting finished requests).
        policy: a key of :data:`POLICIES`.
        pools: the pool runtimes serving this workload; each has ``replicas`` and
            ``reject_reason(req) -> str`` (empty when the pool can serve the request).
    """

    def __init__(self, run, policy: str, pools: list) -> None:
        self.run = run
        self.policy_name = policy
        self.choose = POLICIES[policy]
        self.central = policy == "central_queue"
        self.pools = pools
        self.replicas = [r for p in pools for r in p.replicas]
        self.next_index = -1
        self.queue: deque[Request] = deque()
        if self.central:
            for replica in self.replicas:
                replica.listeners.append(self)

    def dispatch(self, req: Request) -> None:
        """Route a new arrival (rejected with a reason if no pool can ever hold it)."""
        candidates = self._eligible(req)
        if candidates is None:
            return
        self._route(req, candidates)

    def forward(self, req: Request) -> None:
        """Route a request arriving from an earlier stage of its journey."""
        self._route(req, self.replicas)

    def _route(self, req: Request, candidates: list) -> None:
        if self.central:
            free = [r for r in candidates if r.has_slot]
            if not free or self.queue:
                self.queue.append(req)
                return
            candidates = free
        self._send(self.choose(self, candidates), req)

    def _eligible(self, req: Request) -> list | None:
        """Replicas whose pool can hold ``req``; None (and the request rejected) if none."""
        reasons = [p.reject_reason(req) for p in self.pools]
        if not any(reasons):
            return self.replicas
        ok = [r for p, why in zip(self.pools, reasons) if not why for r in p.replicas]
        if ok:
            return ok
        req.status = REJECTED
        req.reason = reasons[0]
        self.run.request_finished()
        return None

    def _send(self, replica, req: Request) -> None:
        index = replica.pool.index
        if req.pool < 0:
            req.pool = index  # the pool a request entered by; later legs are in pool_shares
        elif index != req.cur_pool:
            req.pool_shares += ((req.cur_pool, req.share_s),)
        req.cur_pool = index
        replica.pool.prepare(req)
        replica.submit(req)

    def pull(self, replica) -> None:
        """A replica freed capacity: hand it queued requests (central queue only),
        oldest first across all the workloads it serves."""
        blocked: set[int] = set()
        while replica.has_slot:
            best = None
            for router in replica.listeners:
                if router.queue and id(router) not in blocked:
                    if best is None or router.queue[0].arrival_at_s < best.queue[0].arrival_at_s:
                        best = router
            if best is None:
                return
            if not best._pull_one(replica):
                blocked.add(id(best))

    def _pull_one(self, replica) -> bool:
        req = self.queue[0]
        if replica.pool.reject_reason(req):
            return False
        self.queue.popleft()
        self._send(replica, req)
        return True
