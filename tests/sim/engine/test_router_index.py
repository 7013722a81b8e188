"""The indexed routers (per-pool heaps with lazy invalidation, :mod:`sim.engine.router`)
against a second implementation: the linear scan the engine used before, kept here as
:class:`LinearRouter` (``min`` over the router's replica list, so ties go to the first
replica in list order; the central queue filters replicas with a free slot first).

1. Unit level: generated sequences of arrivals (some pools unable to hold the request),
   completions, and changes of the replicas' waiting queues, over 1 to 300 replicas in
   1 to 4 pools of different ``max_batch``; before every dispatch the linear scan names
   the replica (or the central queue) and the indexed router must pick the same one.
   ``prefix_aware`` against a scan of every replica's prefix cache (``hit_blocks``),
   over pools of 1 to 130 replicas whose small caches fill, evict and demote.
2. Whole runs: the generated scenarios of the fast/exact differential test, simulated
   with each router class; every request's outcome must be identical.
"""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import sim.engine.core as core
from sim.engine.capacity import replace
from sim.engine.request import REJECTED, Request
from sim.engine.router import Router

# prefix_aware with no prefix cache scores −load × outstanding: the least outstanding, ties to the first
POLICY_NAMES = ["round_robin", "least_outstanding", "join_shortest_queue", "central_queue", "prefix_aware"]


class LinearRouter(Router):
    """The reference: the pre-index router, a linear scan per dispatch."""

    def __init__(self, run, policy: str, pools: list) -> None:  # noqa: D107 - no index
        self.run = run
        self.policy_name = policy
        self.central = policy == "central_queue"
        self.pools = pools
        self.replicas = [r for p in pools for r in p.replicas]
        self.next_index = -1
        self.queue = deque()
        if self.central:
            for replica in self.replicas:
                replica.listeners.append(self)

    def choose(self, candidates: list):
        if self.policy_name == "round_robin":
            self.next_index = (self.next_index + 1) % len(candidates)
            return candidates[self.next_index]
        if self.policy_name == "join_shortest_queue":
            return min(candidates, key=lambda r: (r.queued, r.outstanding))
        return min(candidates, key=lambda r: r.outstanding)

    def dispatch(self, req) -> None:
        candidates = self._eligible(req)
        if candidates is not None:
            self._route(req, candidates)

    def forward(self, req) -> None:
        self._route(req, self.replicas)

    def handoff(self, req) -> None:
        """The decode side of a split deployment, by the same linear scan (the indexed
        Router.handoff reads index fields this reference never sets)."""
        self.dispatch(req)

    def _route(self, req, candidates: list) -> None:
        if self.central:
            free = [r for r in candidates if r.has_slot]
            if not free or self.queue:
                self.queue.append(req)
                return
            candidates = free
        self._send(self.choose(candidates), req)

    def _eligible(self, req):
        reasons = [p.reject_reason(req) for p in self.pools]
        if not any(reasons):
            return self.replicas
        ok = [r for p, why in zip(self.pools, reasons) if not why for r in p.replicas]
        if ok:
            return ok
        req.status = REJECTED
        req.reason = reasons[0]
        self.run.request_finished(req)
        return None


# --- 1. unit level: fake replicas --------------------------------------------------------
class FakeRun:
    def __init__(self) -> None:
        self.finished = 0

    def request_finished(self, req=None) -> None:
        self.finished += 1


class FakeReq(Request):
    """An engine request (the router types it) that says per pool whether it fits."""

    def __init__(self, ok: tuple[bool, ...], arrival_at_s: float) -> None:
        super().__init__(0, 0, arrival_at_s)
        self.ok = ok  # per pool: can it hold this request?


class FakePool:
    def __init__(self, index: int, n: int, max_batch: int) -> None:
        self.index = index
        self.replicas = [FakeReplica(self, i, max_batch) for i in range(n)]
        self.watchers: list = []  # the routers' indexes over this pool, as on an engine Pool
        self.gate = None  # no operations layer (sim.engine.operations), as on an engine Pool

    def reject_reason(self, req: FakeReq) -> str:
        return "" if req.ok[self.index] else f"pool{self.index}_too_small"

    def prepare(self, req: FakeReq) -> None:
        pass


class FakeReplica:
    """The counters a router reads, changed the way the engine's replicas change them
    (and telling the routers' indexes, as they do)."""

    def __init__(self, pool: FakePool, index: int, max_batch: int) -> None:
        self.pool = pool
        self.index = index
        self.max_batch = max_batch
        self.outstanding = 0
        self.queued = 0
        self.listeners: list = []
        self.received: list = []

    @property
    def has_slot(self) -> bool:
        return self.outstanding < self.max_batch

    def _tell(self) -> None:
        for index in self.pool.watchers:
            index.changed(self.index)

    _tell_watchers = _tell  # the engine replicas' name (sim.engine.capacity calls it)

    def submit(self, req: FakeReq) -> None:
        self.outstanding += 1
        self.queued += 1
        self.received.append(req)
        self._tell()

    def admit(self, k: int) -> None:
        self.queued -= min(k, self.queued)
        self._tell()

    def preempt(self, k: int) -> None:
        self.queued += min(k, self.outstanding - self.queued)
        self._tell()

    def finish(self) -> None:
        if self.outstanding > self.queued:
            self.outstanding -= 1
            self._tell()
            for listener in self.listeners:
                listener.pull(self)


def build_pools(sizes: list[tuple[int, int]]) -> list[FakePool]:
    return [FakePool(i, n, mb) for i, (n, mb) in enumerate(sizes)]


def expected_target(ref: LinearRouter, req: FakeReq):
    """The replica the linear scan sends ``req`` to; "queue" or "reject" otherwise
    (evaluated on a throw-away copy of the round-robin cursor)."""
    cursor = ref.next_index
    reasons = [p.reject_reason(req) for p in ref.pools]
    if not any(reasons):
        cands = ref.replicas
    else:
        cands = [r for p, why in zip(ref.pools, reasons) if not why for r in p.replicas]
        if not cands:
            return "reject"
    if ref.central:
        free = [r for r in cands if r.has_slot]
        if not free or ref.queue:
            return "queue"
        cands = free
    choice = ref.choose(cands)
    ref.next_index = cursor
    return choice


pool_sizes = st.lists(st.tuples(st.integers(0, 120), st.integers(1, 8)), min_size=1, max_size=4).filter(
    lambda s: 1 <= sum(n for n, _ in s) <= 300
)


@st.composite
def operations(draw, n_pools: int, n_replicas: int):
    kinds = st.sampled_from(["arrive", "arrive", "arrive", "finish", "finish", "admit", "preempt"])
    ops = []
    for _ in range(draw(st.integers(1, 400))):
        kind = draw(kinds)
        if kind == "arrive":
            all_ok = draw(st.booleans())
            ok = tuple(True for _ in range(n_pools)) if all_ok else tuple(
                draw(st.lists(st.booleans(), min_size=n_pools, max_size=n_pools))
            )
            ops.append((kind, ok))
        else:
            ops.append((kind, draw(st.integers(0, n_replicas - 1)), draw(st.integers(1, 3))))
    return ops


@pytest.mark.slow
@settings(max_examples=125)
@given(data=st.data(), policy=st.sampled_from(POLICY_NAMES), sizes=pool_sizes)
def test_indexed_router_picks_what_the_linear_scan_picks(data, policy, sizes):
    check_router(data, policy, sizes)


@settings(max_examples=25)
@given(data=st.data(), policy=st.sampled_from(POLICY_NAMES), sizes=pool_sizes)
def test_indexed_router_picks_what_the_linear_scan_picks_smoke(data, policy, sizes):
    """The fast loop's share of the 150 examples (the slow test draws the rest)."""
    check_router(data, policy, sizes)


def check_router(data, policy, sizes) -> None:
    # two identical fleets of fake replicas, one behind each router, driven in lockstep
    ref_pools, new_pools = build_pools(sizes), build_pools(sizes)
    ref, new = LinearRouter(FakeRun(), policy, ref_pools), Router(FakeRun(), policy, new_pools)
    ops = data.draw(operations(len(sizes), len(ref.replicas)))
    for step, op in enumerate(ops):
        if op[0] == "arrive":
            r_req, n_req = FakeReq(op[1], float(step)), FakeReq(op[1], float(step))
            want = expected_target(ref, r_req)
            ref.dispatch(r_req)
            new.dispatch(n_req)
            if want == "reject":
                assert n_req.status == REJECTED and n_req.reason == r_req.reason
            elif want == "queue":
                assert new.queue and new.queue[-1] is n_req
            else:
                got = new.replicas.index(next(r for r in new.replicas if r.received and r.received[-1] is n_req))
                assert got == ref.replicas.index(want), f"step {step}: {policy} picked {got}"
        else:
            kind, i, k = op
            for router in (ref, new):
                replica = router.replicas[i]
                if kind == "finish":
                    replica.finish()
                elif kind == "admit":
                    replica.admit(k)
                else:
                    replica.preempt(k)
        for a, b in zip(ref.replicas, new.replicas):
            assert (a.outstanding, a.queued, len(a.received)) == (b.outstanding, b.queued, len(b.received))
        assert len(ref.queue) == len(new.queue)


def test_ties_go_to_the_first_replica_in_list_order_across_pools():
    """Hand case: every replica idle, so each keyed policy takes the first replica of the
    first pool that can hold the request; after it, the next one in list order."""
    for policy in ("least_outstanding", "join_shortest_queue", "central_queue"):
        pools = build_pools([(3, 2), (2, 2)])
        router = Router(FakeRun(), policy, pools)
        req = FakeReq((False, True), 0.0)
        router.dispatch(req)
        assert pools[1].replicas[0].received == [req]
        req2 = FakeReq((True, True), 1.0)
        router.dispatch(req2)
        assert pools[0].replicas[0].received == [req2]
        router.dispatch(FakeReq((True, True), 2.0))
        assert pools[0].replicas[1].outstanding == 1  # replica 0 now holds one


def test_central_queue_queues_when_every_eligible_replica_is_full():
    pools = build_pools([(2, 1), (1, 1)])
    router = Router(FakeRun(), "central_queue", pools)
    for t in range(2):
        router.dispatch(FakeReq((True, False), float(t)))
    held = FakeReq((True, False), 2.0)
    router.dispatch(held)  # pool 1 is free but cannot hold it
    assert list(router.queue) == [held]
    later = FakeReq((True, True), 3.0)
    router.dispatch(later)  # FIFO: queued behind the first even though pool 1 is free
    assert list(router.queue) == [held, later]
    pools[0].replicas[1].admit(1)
    pools[0].replicas[1].finish()  # frees a slot: the oldest queued request goes there
    assert pools[0].replicas[1].received[-1] is held and list(router.queue) == [later]


# --- prefix_aware: the block-index walk against a scan of every replica's cache ----------
class CachePool(FakePool):
    """A pool whose replicas keep prefix caches (16-token blocks, ``cap`` HBM blocks and
    ``host`` host blocks each: small, so blocks are evicted and demoted) priced at
    ``load_tokens`` per outstanding request."""

    def __init__(self, index: int, n: int, load_tokens: int, cap: int, host: int) -> None:
        from sim.engine.prefix_cache import PrefixCache

        super().__init__(index, n, 8)
        self.config = type("Cfg", (), {"prefix_cache": type("PC", (), {"load_tokens": load_tokens})()})()
        self.cap, self.host = cap, host
        for r in self.replicas:
            r.prefix = PrefixCache(16, 1, cap, host)

    def fresh(self, run, pool, index: int) -> FakeReplica:
        """A replica with an empty cache (the ``cls`` of :func:`sim.engine.capacity.replace`)."""
        from sim.engine.prefix_cache import PrefixCache

        r = FakeReplica(pool, index, 8)
        r.prefix = PrefixCache(16, 1, self.cap, self.host)
        return r


def scan_prefix_aware(pools: list, keys: tuple, prompt_tokens: int):
    """The definition, replica by replica: the highest 16 × (blocks of ``keys`` the cache
    holds, from the first, short of the prompt's last token) − load_tokens × outstanding,
    ties to the first in list order."""
    best, best_score = None, None
    usable = min((prompt_tokens - 1) // 16, len(keys))
    for pool in pools:
        load = pool.config.prefix_cache.load_tokens
        for r in pool.replicas:
            score = 16 * r.prefix.hit_blocks(keys, usable) - load * r.outstanding
            if best_score is None or score > best_score:
                best, best_score = r, score
    return best


replica_counts = st.one_of(st.integers(1, 5), st.integers(60, 66), st.integers(120, 130))  # int64 masks up to 63


prefix_pools = st.lists(st.tuples(replica_counts, st.sampled_from([0, 16, 48, 4096]), st.integers(2, 12), st.sampled_from([0, 4])),
                        min_size=1, max_size=3)  # (replicas, load_tokens, HBM blocks, host blocks) per pool


@pytest.mark.slow
@settings(max_examples=60)
@given(data=st.data(), pools=prefix_pools)
def test_prefix_aware_walk_picks_what_a_scan_of_every_cache_picks(data, pools):
    check_prefix_walk(data, pools)


@settings(max_examples=10)
@given(data=st.data(), pools=prefix_pools)
def test_prefix_aware_walk_picks_what_a_scan_of_every_cache_picks_smoke(data, pools):
    """The fast loop's share (the slow test draws more)."""
    check_prefix_walk(data, pools)


def check_prefix_walk(data, pools) -> None:
    """Pools of 1 to 130 replicas (C int64 masks up to 63, Python ints above) whose small
    caches fill, evict and demote as generated requests (chains over a few shared first
    blocks, as in the Mooncake trace) are committed to random replicas, with random loads
    (``load_tokens`` 16: one block against one request, so ties are common), and now and
    then a replica fails and a fresh one with an empty cache takes its place
    (:func:`sim.engine.capacity.replace`): before every request the router's choice
    through the pools' block indexes is the replica the scan of every cache picks."""
    from traffic.prefix import chain_keys

    built = [CachePool(i, n, load, cap, host) for i, (n, load, cap, host) in enumerate(pools)]
    router = Router(FakeRun(), "prefix_aware", built)
    replicas = router.replicas
    for r in replicas:  # starting loads: the least outstanding anywhere in the pool
        r.outstanding = data.draw(st.integers(0, 3))
        r._tell()
    table: dict = {}
    chain = st.lists(st.integers(0, 2), min_size=1, max_size=8).map(lambda hs: chain_keys(hs, table))
    for _ in range(data.draw(st.integers(1, 30))):
        for _ in range(data.draw(st.integers(0, 4))):  # loads change
            r = replicas[data.draw(st.integers(0, len(replicas) - 1))]
            r.outstanding = data.draw(st.integers(0, 4))
            r._tell()
        if data.draw(st.integers(0, 7)) == 0:  # a replica fails: a fresh one, its cache empty, takes its place
            pool = built[data.draw(st.integers(0, len(built) - 1))]
            replace(FakeRun(), pool, data.draw(st.integers(0, len(pool.replicas) - 1)), [router], pool.fresh)
        keys = data.draw(chain)
        prompt_tokens = data.draw(st.integers(1, 16 * len(keys) + 1))
        req = Request(0, 0, 0.0, prompt_tokens)
        req.prefix = keys
        assert router._by_prefix(req, router._all) is scan_prefix_aware(built, keys, prompt_tokens)
        cache = replicas[data.draw(st.integers(0, len(replicas) - 1))].prefix  # the request runs somewhere
        usable = cache.usable(keys, prompt_tokens)
        hit = cache.acquire(keys, usable)
        cache.release(cache.commit(keys, cache.last, hit, usable), usable)


def test_a_replaced_replica_s_cache_leaves_the_block_index_and_the_fresh_one_joins():
    """Regression (the walk-against-scan property once replicas were replaced, shrunk
    and made into a hand case): two replicas, no price on load, so among equal hits the
    first wins and without a hit the first replica. Both hold block 0; replica 0 fails
    and a fresh replica with an empty cache takes its place: a request for block 0 goes
    to replica 1, the only holder (had the old cache's block stayed in the index, the
    fresh replica 0 would tie and win). Then replica 1 is replaced and its fresh cache
    takes block 1: a request for block 1 goes to it (had the fresh cache not reported
    to the index, no replica would show a hit and replica 0 would win)."""
    pool = CachePool(0, 2, 0, 2, 0)
    router = Router(FakeRun(), "prefix_aware", [pool])

    def request(key: int) -> Request:
        req = Request(0, 0, 0.0, 17)  # one usable block of 16 tokens
        req.prefix = (key,)
        return req

    def cache_on(i: int, key: int) -> None:
        cache = pool.replicas[i].prefix
        cache.release(cache.commit((key,), cache.last, cache.acquire((key,), 1), 1), 1)

    cache_on(0, 0)
    cache_on(1, 0)
    assert router._by_prefix(request(0), router._all) is pool.replicas[0]
    replace(FakeRun(), pool, 0, [router], pool.fresh)
    assert router._by_prefix(request(0), router._all) is pool.replicas[1]
    replace(FakeRun(), pool, 1, [router], pool.fresh)
    cache_on(1, 1)
    assert router._by_prefix(request(1), router._all) is pool.replicas[1]


@pytest.mark.parametrize("n, idle", [(40, 35), (63, 62), (70, 66)])
def test_prefix_aware_prefers_an_idle_holder_past_bit_31(n, idle):
    """Hand case: replicas 3 and ``idle`` hold the request's 3 blocks (48 tokens), every
    replica has one request outstanding but ``idle``, none; at 16 tokens per request
    ``idle`` scores 48, replica 3 scores 48 − 16 = 32, the rest −16. (The compiled
    router once shifted a 32-bit C int to mark the least outstanding replica, so past bit
    31 it marked the wrong one and picked replica 3.)"""
    pool = CachePool(0, n, 16, 64, 0)
    router = Router(FakeRun(), "prefix_aware", [pool])
    keys = (0, 1, 2)
    for i in (3, idle):
        cache = pool.replicas[i].prefix
        cache.release(cache.commit(keys, cache.last, cache.acquire(keys, 3), 3), 3)
    for r in pool.replicas:
        r.outstanding = 0 if r.index == idle else 1
        r._tell()
    req = Request(0, 0, 0.0, 16 * 3 + 1)
    req.prefix = keys
    assert router._by_prefix(req, router._all) is pool.replicas[idle]


# --- 2. whole runs -------------------------------------------------------------------------
from scenario_strategies import diff_settings, placeable, scenarios, squeeze  # noqa: E402

from sim.scenario import parse_scenario  # noqa: E402


@diff_settings(25)
@given(data=st.data())
def test_whole_runs_match_the_linear_router(tmp_path_factory, data, monkeypatch_module):
    scenario = data.draw(scenarios(tmp_path_factory.mktemp("trace"), max_workloads=2))
    squeeze(scenario)
    assume(placeable(scenario))
    parsed = parse_scenario(scenario, "router-diff")
    indexed = core.simulate(parsed).requests
    monkeypatch_module.setattr(core, "Router", LinearRouter)
    try:
        linear = core.simulate(parsed).requests
    finally:
        monkeypatch_module.undo()
    assert indexed.equals(linear), "indexed and linear routers disagree on a request outcome"


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp
