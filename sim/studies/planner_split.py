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
        self._costs: dict[tuple[str, int], float] = {}

    def _pool(self, counts: dict, role: str):
        from sim.fleet_plan import resolve_fleet

        sc = self.search._scenario(counts)
        return sc, next(p for p in resolve_fleet(sc, 0).pools if p.role == role)

    def cost(self, key: str, n: int) -> float:
        """Full-load $/hour of ``n`` replicas of side key ``key`` (node costs per slot)."""
        if (key, n) not in self._costs:
            role, acc = split_key(key)
            other = role_key(SIDES[1 - SIDES.index(role)], acc)
            sc, pool = self._pool({key: n, other: 1}, role)
            self._costs[key, n] = self.pool_cost(pool, sc.economics)
        return self._costs[key, n]

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

    def best(self, p_acc: str, d_acc: str, ceiling: float = math.inf,
             why: list | None = None) -> tuple[dict[str, int], float] | None:
        """The cheapest passing (prefill, decode) counts of this pair over the grid
        [1, max_replicas_per_type]² (:func:`cheapest_counts`), with its full-load $/hour;
        None when no count meets the SLOs (or, given ``ceiling``, none costs less than it).
        ``why``: a list the reason for None is appended to."""
        s, cap = self.search, self.search.spec.search.max_replicas_per_type
        p_key, d_key = role_key("prefill", p_acc), role_key("decode", d_acc)
        found = cheapest_counts(lambda p, d: s.meets({p_key: p, d_key: d}), lambda p: self.cost(p_key, p),
                                lambda d: self.cost(d_key, d), cap, self.estimates(p_acc, d_acc), ceiling, why)
        if found is None:
            return None
        (n_p, n_d), cost = found
        return {p_key: n_p, d_key: n_d}, cost


def cheapest_counts(passes, cost_p, cost_d, cap: int, start: tuple[int, int], ceiling: float = math.inf,
                    why: list | None = None) -> tuple[tuple[int, int], float] | None:
    """The cheapest (p, d) in [1, cap]² with ``passes(p, d)``: ((p, d), cost_p(p) + cost_d(d)),
    or None when none passes at a cost below ``ceiling`` (a cheaper option found elsewhere).

    Exact when ``passes`` is monotone in each count (more replicas of either side never
    fail where fewer pass) and both costs increase with the count: the passing region is
    then bounded by a staircase f(p) = the fewest decode replicas that pass with p prefill
    replicas, non-increasing in p, and the optimum lies on it. The search:

    1. without a ceiling, double both counts from ``start`` until they pass, then the fewest
       p at that d and the fewest d at that p (bisection): the first incumbent;
    2. with the incumbent's cost C, any cheaper point has d ≤ D (the most decode replicas
       that one prefill replica leaves affordable) and p ≤ P; if (P, D) misses, nothing
       affordable passes (one simulation prunes the whole pair); otherwise p_lo = the fewest
       p passing at D (fewer: the prefill side alone misses) and d_lo = the fewest d at P
       (fewer: the decode side alone misses);
    3. the staircase from p_lo upward, while cost_p(p) + cost_d(d_lo) < C: f(p) by bisection
       in [d_lo, min(f(p−1), the largest affordable d)], one simulation when even that misses.

    ``why`` (a list) receives a sentence when the answer is None."""
    best: list = [ceiling, None]

    def offer(p: int, d: int) -> None:
        cost = cost_p(p) + cost_d(d)
        if cost < best[0] - 1e-9:
            best[:] = [cost, (p, d)]

    if not math.isfinite(ceiling):
        n_p, n_d = start
        while not passes(n_p, n_d):
            if n_p >= cap and n_d >= cap:
                _say(why, f"SLO missed even at {cap} prefill and {cap} decode replicas")
                return None
            n_p, n_d = min(cap, 2 * n_p), min(cap, 2 * n_d)
        n_p = _fewest(lambda p: passes(p, n_d), n_p)
        offer(n_p, _fewest(lambda d: passes(n_p, d), n_d))
    top_d = _largest(lambda d: cost_p(1) + cost_d(d) < best[0], cap)
    top_p = _largest(lambda p: cost_p(p) + cost_d(1) < best[0], cap)
    if top_d == 0 or top_p == 0:
        _say(why, f"1 : 1 replicas already cost ${cost_p(1) + cost_d(1):,.2f}/h ≥ ${best[0]:,.2f}/h")
        return None if best[1] is None else (best[1], best[0])
    if not passes(top_p, top_d):
        _say(why, f"no count under ${best[0]:,.2f}/h meets the SLO (even {top_p} prefill : {top_d} decode misses)")
        return None if best[1] is None else (best[1], best[0])
    p_lo, d_lo = _fewest(lambda p: passes(p, top_d), top_p), _fewest(lambda d: passes(top_p, d), top_d)
    d_hi = top_d
    for p in range(p_lo, cap + 1):
        if cost_p(p) + cost_d(d_lo) >= best[0] - 1e-9:
            break
        d_aff = min(d_hi, _largest(lambda d: cost_p(p) + cost_d(d) < best[0] - 1e-9, cap))
        if d_aff < d_lo or not passes(p, d_aff):
            continue
        d_hi = _fewest(lambda d: d >= d_lo and passes(p, d), d_aff)
        offer(p, d_hi)
    if best[1] is None:
        _say(why, f"no count under ${ceiling:,.2f}/h meets the SLO")
        return None
    return best[1], best[0]


def _say(why: list | None, sentence: str) -> None:
    if why is not None:
        why.append(sentence)


def _largest(ok, cap: int) -> int:
    """The largest n in [1, cap] with ``ok(n)`` for ``ok`` true up to a point (0: none)."""
    lo, hi = 0, cap + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def _fewest(passes, high: int) -> int:
    """The smallest n in [1, high] with ``passes(n)``, given ``passes(high)`` and
    monotone ``passes`` (bisection)."""
    lo, hi = 0, high
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if passes(mid) else (mid, hi)
    return hi
