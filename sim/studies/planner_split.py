"""Planning a split (prefill/decode) deployment: how many prefill and how many decode
replicas, of which accelerator each, at the lowest cost that meets the SLOs.

A plan's counts name a side with a prefix: ``{"prefill:h100-sxm": 3, "decode:h200": 2}``
is three H100 prefill replicas and two H200 decode replicas (:func:`role_key`); the
planner turns such keys into pools serving ``<workload>:prefill`` and
``<workload>:decode`` (:mod:`sim.studies.planner`).

Search, per pair of (prefill, decode) accelerator types (:meth:`SplitSearch.best`):

1. start from the analytic estimates ``ceil(rate / capacity)`` of each side
   (:meth:`sim.workloads.base.WorkloadKind.capacity_rps` with the pool's ``role``: a
   prefill replica's prompts per second at a full token budget, a decode replica's
   requests per second at a full batch) and double both until the pair meets every SLO;
2. the fewest prefill replicas that still meet them with that many decode replicas
   (bisection), then the fewest decode replicas with those prefill replicas.

The two sides are separate pools, so a side's replicas mostly set one latency each
(prefill: TTFT and the hand-off; decode: TPOT) and the pair found is the cheapest up to
the coupling through back-pressure (a short decode side holds KV caches on the prefill
side); attainment is assumed monotone in each count, as in the co-located search.
"""

from __future__ import annotations

import math

SIDES = ("prefill", "decode")


def role_key(role: str, accelerator: str) -> str:
    """The count key of ``accelerator`` replicas on side ``role``."""
    return f"{role}:{accelerator}"


def split_key(key: str) -> tuple[str | None, str]:
    """(side or None, accelerator) of a count key."""
    role, _, acc = key.rpartition(":")
    return (role or None), acc


class SplitSearch:
    """The split-deployment search of one workload, on top of the planner's
    :class:`sim.studies.planner.WorkloadSearch` ``search`` (its simulations, cache, budget
    and costs); ``pool_cost(pool, economics)``: a pool's full-load $/hour
    (:func:`sim.studies.planner.dense_pool_cost`, passed in: the planner imports this
    module)."""

    def __init__(self, search, pool_cost) -> None:
        self.search = search
        self.pool_cost = pool_cost

    def _pool(self, counts: dict, role: str):
        from sim.fleet_plan import resolve_fleet

        sc = self.search._scenario(counts)
        return sc, next(p for p in resolve_fleet(sc, 0).pools if p.role == role)

    def cost(self, key: str, n: int) -> float:
        """Full-load $/hour of ``n`` replicas of side key ``key`` (node costs per slot)."""
        role, acc = split_key(key)
        other = role_key(SIDES[1 - SIDES.index(role)], acc)
        sc, pool = self._pool({key: n, other: 1}, role)
        return self.pool_cost(pool, sc.economics)

    def estimates(self, p_acc: str, d_acc: str) -> tuple[int, int]:
        """``ceil(rate / capacity)`` of each side, within [1, max_replicas_per_type]."""
        from sim.studies.planner_capacity import replica_capacity_rps

        s, cap = self.search, self.search.spec.search.max_replicas_per_type
        counts = {role_key("prefill", p_acc): 1, role_key("decode", d_acc): 1}
        out = []
        for role in SIDES:
            sc, pool = self._pool(counts, role)
            capacity = replica_capacity_rps(sc.workloads[s.name], pool)
            out.append(min(cap, max(1, math.ceil(s.rate / capacity))) if math.isfinite(capacity) else 1)
        return out[0], out[1]

    def best(self, p_acc: str, d_acc: str) -> tuple[dict[str, int], float] | None:
        """The cheapest passing (prefill, decode) counts of this pair (module docstring),
        with its full-load $/hour; None when even max_replicas_per_type of both fails."""
        s, cap = self.search, self.search.spec.search.max_replicas_per_type
        p_key, d_key = role_key("prefill", p_acc), role_key("decode", d_acc)
        n_p, n_d = self.estimates(p_acc, d_acc)
        while not s.meets({p_key: n_p, d_key: n_d}):
            if n_p >= cap and n_d >= cap:
                return None
            n_p, n_d = min(cap, 2 * n_p), min(cap, 2 * n_d)
        n_p = _fewest(lambda p: s.meets({p_key: p, d_key: n_d}), n_p)
        n_d = _fewest(lambda d: s.meets({p_key: n_p, d_key: d}), n_d)
        counts = {p_key: n_p, d_key: n_d}
        return counts, self.cost(p_key, n_p) + self.cost(d_key, n_d)


def _fewest(passes, high: int) -> int:
    """The smallest n in [1, high] with ``passes(n)``, given ``passes(high)`` and
    monotone ``passes`` (bisection)."""
    lo, hi = 0, high
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if passes(mid) else (mid, hi)
    return hi
