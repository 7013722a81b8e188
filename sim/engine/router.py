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
- ``prefix_aware``: the replica with the highest score ``cached - load_tokens ×
  outstanding``, ``cached`` the prompt tokens its prefix cache holds for the request
  (:mod:`sim.engine.prefix_cache`, looked up without touching it) and ``load_tokens`` its
  pool's ``prefix_cache.load_tokens`` (:data:`sim.scenario.PREFIX_LOAD_TOKENS` for a pool
  without a cache); after llm-d's prefix-cache and load scorers and Mooncake's
  cache-aware conductor. The replicas with a hit come from a per-pool index of which
  replicas hold each block (:meth:`Router._by_prefix`), the rest from the load index:
  O(the request's blocks + replicas with a hit) per dispatch.

Ties go to the lowest replica index (the first in the router's replica list: pools in
the fleet's order, replicas in index order), so runs are deterministic.

Cost per dispatch does not grow with the replica count: the keyed policies keep, per
pool, an indexed binary heap of replicas by (key, position) (:class:`_MinIndex`). A
replica calls :meth:`_MinIndex.changed` whenever its ``outstanding`` or ``queued`` count
changes (its pool's ``watchers``) and is sifted in place, so a choice is the minimum of one
heap top per eligible pool: O(pools + log replicas) per change, the same replica a
linear ``min`` over the router's replica list picks (checked against a linear scan by
``tests/sim/engine/test_router_index.py``). Within a pool every replica has the same
``max_batch``, so for the central queue a pool has a free slot exactly when its
least-outstanding replica has one. Which pools can hold a request is looked up once per
distinct set of pool verdicts, not rebuilt per arrival.
"""

from __future__ import annotations

from collections import deque
from array import array
from typing import Callable

from sim.engine.indexed_heap import IndexedHeap
from sim.engine.key_table import BlockIndex
from sim.engine.request import REJECTED, Request
from sim.scenario import PREFIX_LOAD_TOKENS

_ONE = 1  # a Python int (not declared in router.pxd): a wide mask's bit is shifted as one, never as a C int
QUEUED_SHIFT = 32  # join_shortest_queue key: queued << 32 | outstanding (below 2**63 for < 2**31 queued)


def _outstanding_key(replica) -> int:
    return replica.outstanding


def _queued_then_outstanding_key(replica) -> int:
    return (replica.queued << QUEUED_SHIFT) + replica.outstanding


class _MinIndex(IndexedHeap):
    """The replicas of one pool as one router sees them: the one with the smallest
    ``key``, ties to the smallest router position, in O(log n) per change (an indexed
    heap: a replica whose key changed is sifted in place).

    Args:
        replicas: the pool's replicas, in order.
        base: router position of ``replicas[0]`` (positions are ``base + i``).
        key: replica -> int, the quantity minimised (below 2**63).
    """

    __slots__ = ("replicas", "base", "key", "keys")

    def __init__(self, replicas: list, base: int, key: Callable[[object], int]) -> None:
        self.replicas = replicas
        self.base = base
        self.key = key
        n = len(replicas)
        self.keys = array("q", [key(r) for r in replicas])
        self._init_heap(n)
        for i in range(n):
            self._push(i)

    def _before(self, a: int, b: int) -> bool:
        ka, kb = self.keys[a], self.keys[b]
        return ka < kb or (ka == kb and a < b)

    def changed(self, i: int) -> None:
        """Replica ``i`` (index within the pool) may have a new key."""
        k = self.key(self.replicas[i])
        if k != self.keys[i]:
            self.keys[i] = k
            self._restore(self.where[i])

    def top(self) -> tuple[int, int]:
        """(key, router position) of the minimum."""
        i = self.heap[0]
        return (self.keys[i], self.base + i)

    def least(self) -> int:
        """The index within the pool of the minimum (its key: ``keys[least()]``)."""
        return self.heap[0]


class _PrefixPool:
    """What the ``prefix_aware`` router reads of one pool: its replica list (the pool's
    own, so a replaced replica is seen), its :class:`_MinIndex` (keyed by outstanding
    requests), the router position of its first replica, its ``load_tokens`` (its
    ``prefix_cache.load_tokens``, :data:`sim.scenario.PREFIX_LOAD_TOKENS` without a
    cache), its block index (:func:`_holders`; None without a cache) and the cached
    block size in tokens (0 without a cache)."""

    __slots__ = ("replicas", "index", "base", "load", "holders", "block_tokens")

    def __init__(self, pool, index, base: int) -> None:
        cfg = getattr(getattr(pool, "config", None), "prefix_cache", None)
        self.replicas = pool.replicas
        self.index = index
        self.base = base
        self.load = cfg.load_tokens if cfg is not None else PREFIX_LOAD_TOKENS
        self.holders = _holders(pool)
        self.block_tokens = pool.replicas[0].prefix.block_tokens if self.holders is not None else 0


class Router:
    """Dispatches the arrivals of one workload.

    Args:
        run: the run context (for counting finished requests).
        policy: a key of :data:`POLICIES`.
        pools: the pool runtimes serving this workload; each has ``replicas`` and
            ``reject_reason(req) -> str`` (empty when the pool can serve the request).
    """

    def __init__(self, run, policy: str, pools: list) -> None:
        if policy not in POLICIES:
            raise KeyError(policy)
        self.run = run
        self.policy_name = policy
        self.central = policy == "central_queue"
        self.pools = pools
        self.replicas = [r for p in pools for r in p.replicas]
        self.next_index = -1
        self.queue: deque[Request] = deque()
        self._all = tuple(range(len(pools)))
        self._subsets: dict[tuple[bool, ...], object] = {}
        key = POLICIES[policy]
        self.indexes: list[_MinIndex | None] = []
        base = 0
        for p in pools:
            index = None
            if key is not None and p.replicas:
                index = _MinIndex(p.replicas, base, key)
                p.watchers.append(index)  # its replicas tell it of changes, by their pool index
            self.indexes.append(index)
            base += len(p.replicas)
        self._keyed = key is not None
        self.prefix_aware = policy == "prefix_aware"
        self._bases = []  # prefix_aware: per pool, a _PrefixPool
        base = 0
        for p, index in zip(pools, self.indexes) if self.prefix_aware else ():
            self._bases.append(_PrefixPool(p, index, base))
            base += len(p.replicas)
        if self.central:
            for replica in self.replicas:
                replica.listeners.append(self)

    def dispatch(self, req: Request) -> None:
        """Route a new arrival (rejected with a reason if no pool can ever hold it)."""
        candidates = self._eligible(req)
        if candidates is None:
            return
        self._route(req, candidates)

    def handoff(self, req: Request) -> None:
        """Route a request a prefill pool hands over (the decode side of a split
        deployment) among the pools that can hold it; there is at least one (the prefill
        pool rejected at arrival what none could: ``WorkloadKind.reject_reason``)."""
        if len(self.pools) == 1:  # the one pool: checked at arrival
            self._route(req, self._all if self._keyed else self.replicas)
            return
        candidates = self._eligible(req)
        if candidates is not None:
            self._route(req, candidates)

    def forward(self, req: Request) -> None:
        """Route a request arriving from an earlier stage of its journey."""
        self._route(req, self._all if self._keyed else self.replicas)

    def _route(self, req: Request, candidates) -> None:
        """``candidates``: pool slots (keyed policies) or the replica list (round robin)."""
        if not self._keyed:
            self.next_index = (self.next_index + 1) % len(candidates)
            self._send(candidates[self.next_index], req)
            return
        if self.central and self.queue:
            self.queue.append(req)
            return
        if self.prefix_aware:
            self._send(self._by_prefix(req, candidates), req)
            return
        best = None
        indexes = self.indexes
        for slot in candidates:
            index = indexes[slot]
            if index is None:
                continue
            entry = index.top()
            if self.central and entry[0] >= index.replicas[0].max_batch:
                continue  # the pool's least-loaded replica is full: so is every other
            if best is None or entry < best:
                best = entry
        if best is None:
            self.queue.append(req)  # central queue: no free slot (else: no replica at all)
            return
        self._send(self.replicas[best[1]], req)

    def _by_prefix(self, req: Request, candidates):
        """``prefix_aware``: the replica of the candidate pools with the highest
        ``cached − load_tokens × outstanding``, ties to the first (module docstring).

        Per pool the replicas with a hit are read off the pool's block index (``holders``:
        key -> bitmask of the replicas holding the block, :func:`_holders`), walking the
        request's usable keys while some replica still holds them all; every other
        replica scores ``−load_tokens × outstanding``, best at the pool's least-outstanding
        replica (its router index: ties to the lowest position, as the scan), or with
        ``load_tokens`` 0 at its first replica without a hit. A replica with a hit that is
        also the least outstanding scores above its no-hit score, so counting it twice
        changes nothing. Cost: O(the request's blocks + replicas with a hit) per pool,
        not O(replicas × blocks). The walk is :meth:`_walk_narrow` on C int64 masks for a
        pool of up to 63 replicas, :meth:`_walk_wide` on Python ints above: the same
        steps."""
        keys = req.prefix
        self._best, self._best_score = -1, 0
        for slot in candidates:
            pool = self._bases[slot]
            if not pool.replicas:
                continue
            usable = 0
            if pool.holders is not None and keys:
                cache = pool.replicas[0].prefix
                usable = cache.usable(keys, req.prompt_tokens)
            if pool.holders is None or pool.holders.narrow:
                self._walk_narrow(keys, usable, pool)
            else:
                self._walk_wide(keys, usable, pool)
        return self.replicas[self._best]

    def _offer(self, pos: int, score: int) -> None:
        """Replica ``pos`` (router position) scores ``score``: the best so far if higher,
        or equal and earlier."""
        if self._best < 0 or score > self._best_score or (score == self._best_score and pos < self._best):
            self._best, self._best_score = pos, score

    def _walk_narrow(self, keys: tuple, usable: int, pool: _PrefixPool) -> None:
        """:meth:`_by_prefix`'s walk over ``pool``, of up to 63 replicas (its block index
        keeps int64 masks, or it has none: no cache), offering its best replicas."""
        replicas, holders, index, base, load = pool.replicas, pool.holders, pool.index, pool.base, pool.load
        least = index.least()  # the least outstanding replica (index within the pool)
        pos = base + least
        seen = 0  # replicas with a hit
        alive = holders.mask(keys[0]) if usable else 0  # replicas holding keys[:n]
        star = 1
        star <<= pos - base  # an int64 shift when compiled
        n = 1
        while alive:
            if not alive & (alive - 1):  # one replica left: the rest of its run from its own cache
                cache = replicas[_bit_index(alive)].prefix
                n = cache.hit_blocks(keys, usable)
                ended = alive
                after = 0
            else:
                after = holders.mask(keys[n]) & alive if n < usable else 0
                if after == alive:
                    n += 1
                    continue
                ended = alive & ~after  # the replicas whose cached run is n blocks
            seen |= ended
            # among equal runs the least outstanding wins, ties to the first: with no price
            # on load the first; when the pool's least outstanding replica has at least
            # this run it is that one or one with a longer run beats them all
            if not load:
                ended &= -ended
            elif alive & star:
                ended &= star
            tokens = n * pool.block_tokens
            while ended:
                low = ended & -ended
                ended ^= low
                i = _bit_index(low)
                self._offer(base + i, tokens - load * index.keys[i])  # keys: outstanding (POLICIES)
            alive = after
            n += 1
        if load:  # no hit: the least outstanding (if it has a hit it beats every replica without)
            self._offer(pos, -load * index.keys[least])
            return
        i = 0
        while (seen >> i) & 1:
            i += 1
        if i < len(replicas):
            self._offer(base + i, 0)

    def _walk_wide(self, keys: tuple, usable: int, pool: _PrefixPool) -> None:
        """:meth:`_walk_narrow` for a pool of more than 63 replicas: the same walk on the
        Python-int masks of its block index's ``wide``."""
        replicas, holders, index, base, load = pool.replicas, pool.holders, pool.index, pool.base, pool.load
        least = index.least()
        pos = base + least
        seen = 0
        alive = holders.wide.get(keys[0], 0) if usable else 0
        star = _ONE << (pos - base)
        n = 1
        while alive:
            if not alive & (alive - 1):
                n = replicas[alive.bit_length() - 1].prefix.hit_blocks(keys, usable)
                ended = alive
                after = 0
            else:
                after = holders.wide.get(keys[n], 0) & alive if n < usable else 0
                if after == alive:
                    n += 1
                    continue
                ended = alive & ~after
            seen |= ended
            if not load:
                ended &= -ended
            elif alive & star:
                ended &= star
            tokens = n * pool.block_tokens
            while ended:
                low = ended & -ended
                ended ^= low
                i = low.bit_length() - 1
                self._offer(base + i, tokens - load * index.keys[i])
            alive = after
            n += 1
        if load:
            self._offer(pos, -load * index.keys[least])
            return
        i = 0
        while (seen >> i) & 1:
            i += 1
        if i < len(replicas):
            self._offer(base + i, 0)

    def _eligible(self, req: Request):
        """Pools (or, round robin, replicas) that can hold ``req``; None (and the request
        rejected) if none."""
        reasons = [p.reject_reason(req) for p in self.pools]
        if not any(reasons):
            return self._all if self._keyed else self.replicas
        mask = tuple(not why for why in reasons)
        subset = self._subsets.get(mask)
        if subset is None:
            ok_pools = tuple(s for s, fits in enumerate(mask) if fits)
            if self._keyed:
                subset = ok_pools if any(self.pools[s].replicas for s in ok_pools) else ()
            else:
                subset = [r for s in ok_pools for r in self.pools[s].replicas]
            self._subsets[mask] = subset
        if subset:
            return subset
        req.status = REJECTED
        req.reason = reasons[0]
        self.run.request_finished(req)
        return None

    def _send(self, replica, req: Request) -> None:
        index = replica.pool.index
        if req.pool < 0:
            req.pool = index  # the pool a request entered by; later legs are in pool_shares
        elif index != req.cur_pool:
            req.pool_shares += ((req.cur_pool, req.share_s),)
        req.cur_pool = index
        pool = replica.pool
        pool.prepare(req)
        if pool.gate is None:
            replica.submit(req)
        else:  # an operated pool (sim.engine.operations): residency, offline replicas
            pool.gate.submit(replica, req)

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


def _bit_index(bit: int) -> int:
    """The index of the one set bit of ``bit`` (0 < bit < 2**63): a binary search, six
    comparisons (``bit.bit_length() - 1`` on a Python int)."""
    i = 0
    if bit >> 32:
        i += 32
        bit >>= 32
    if bit >> 16:
        i += 16
        bit >>= 16
    if bit >> 8:
        i += 8
        bit >>= 8
    if bit >> 4:
        i += 4
        bit >>= 4
    if bit >> 2:
        i += 2
        bit >>= 2
    return i + (bit >> 1)


def _holders(pool) -> BlockIndex | None:
    """The block index of ``pool`` for the ``prefix_aware`` router (a
    :class:`sim.engine.key_table.BlockIndex`: per key, the bitmask of the replicas, bit i
    ``pool.replicas[i]``, holding the block in any tier), kept by their caches as blocks
    enter and leave (:meth:`PrefixCache.index_into`); one per pool, shared by the routers
    of its workloads. None when the pool's replicas keep no cache."""
    replicas = pool.replicas
    if not replicas or getattr(replicas[0], "prefix", None) is None:
        return None
    holders = replicas[0].prefix.holders
    if holders is None:
        holders = BlockIndex(len(replicas))
        for i, r in enumerate(replicas):
            r.prefix.index_into(holders, i)
    return holders


POLICIES: dict[str, Callable[[object], int] | None] = {
    "round_robin": None,
    "least_outstanding": _outstanding_key,
    "join_shortest_queue": _queued_then_outstanding_key,
    "central_queue": _outstanding_key,
    "prefix_aware": _outstanding_key,  # the index is unused: a scan by prefix and load (Router._by_prefix)
}
"""Policy name -> the replica key it minimises (None: round robin, no key)."""
