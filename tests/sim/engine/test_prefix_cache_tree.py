"""PrefixCache (a radix tree of runs of blocks with consecutive keys, split where a hit
ends inside one, a request holding only its last run's slot, tiers counted per run)
against a second implementation: a per-block LRU written
here from the rules in sim/engine/prefix_cache.py's module docstring (ordered dicts per
tier, every block looked up by its key), driven by the same generated operations:
admissions, prefills, releases in any order (so hits end mid-chain, chains branch, some
blocks are pinned while others of the same chain are evicted) and trims, with HBM, host,
SSD tiers and a shared store of small capacities (so blocks move between tiers and leave).
Compared after every step: hits, promotions per tier, blocks per tier, the one LRU
list's order of unreferenced blocks and their tiers, the shared store's order, the block index and the blocks moved between tiers (``traffic``).
"""

from __future__ import annotations

from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.key_table import BlockIndex
from sim.engine.prefix_cache import HOST, SHARED, SSD, TRAFFIC, PrefixCache, SharedStore
from traffic.prefix import chain_keys


class ReferenceLRU:
    """Per-block LRU: ``refs`` (key -> references, HBM), and per tier an ordered dict of
    unreferenced blocks, least recent first; a block dropped past the last tier goes to
    the shared store (an ordered dict of at most ``shared_cap``). ``traffic``: blocks
    moved, by the names of ``prefix_cache.TRAFFIC``."""

    def __init__(self, cap, host, ssd, shared_cap, pages_per_block):
        self.cap, self.caps, self.shared_cap, self.ppb = cap, {HOST: host, SSD: ssd}, shared_cap, pages_per_block
        self.refs: dict = {}
        self.tiers = {0: OrderedDict(), HOST: OrderedDict(), SSD: OrderedDict()}
        self.shared: OrderedDict = OrderedDict()
        self.traffic = dict.fromkeys(TRAFFIC, 0)

    def _ref(self, key) -> int:
        """Reference ``key`` if held: the tier it came from (0: HBM), or -1 if absent."""
        if key in self.refs:
            self.refs[key] += 1
            return 0
        for t, blocks in self.tiers.items():
            if key in blocks:
                del blocks[key]
                self.refs[key] = 1
                return t
        return -1

    def acquire(self, keys, usable):
        moved = {HOST: 0, SSD: 0, SHARED: 0}
        n = 0
        while n < usable:
            t = self._ref(keys[n])
            if t > 0:
                moved[t] += 1
            elif t < 0:
                if self.shared_cap and keys[n] in self.shared:
                    self.shared.move_to_end(keys[n])
                    self.refs[keys[n]] = 1
                    moved[SHARED] += 1
                else:
                    break
            n += 1
        for t, name in ((HOST, "promoted_host"), (SSD, "promoted_ssd"), (SHARED, "promoted_shared")):
            self.traffic[name] += moved[t]
        return n, moved

    def commit(self, keys, hit, usable):
        for key in keys[hit:usable]:
            if self._ref(key) < 0:
                self.refs[key] = 1
        if self.cap is not None:
            while self.tiers[0] and len(self.refs) + len(self.tiers[0]) > self.cap:
                self._evict()

    def release(self, keys, held):
        for key in reversed(keys[:held]):
            self.refs[key] -= 1
            if not self.refs[key]:
                del self.refs[key]
                self.tiers[0][key] = None

    def trim(self, free_pages):
        while len(self.tiers[0]) > max(free_pages, 0) // self.ppb:
            self._evict()

    def _evict(self):
        key, _ = self.tiers[0].popitem(last=False)
        for t in (HOST, SSD):
            if self.caps[t]:
                self.tiers[t][key] = None
                self.traffic["demoted_host" if t == HOST else "demoted_ssd"] += 1
                if len(self.tiers[t]) <= self.caps[t]:
                    return
                key, _ = self.tiers[t].popitem(last=False)
        if not self.shared_cap:
            self.traffic["dropped"] += 1
        elif key in self.shared:
            self.shared.move_to_end(key)
        else:
            self.shared[key] = None
            self.traffic["written_shared"] += 1
            if len(self.shared) > self.shared_cap:
                self.shared.popitem(last=False)
                self.traffic["dropped"] += 1

    def held(self) -> set:
        return set(self.refs) | set(self.tiers[0]) | set(self.tiers[HOST]) | set(self.tiers[SSD])


@st.composite
def chains(draw, table):
    """A chain of 1-7 blocks over a 3-letter alphabet, after a shared first block (so
    chains branch at every depth)."""
    return chain_keys([0] + draw(st.lists(st.integers(0, 2), max_size=6)), table)


@settings(max_examples=120)
@given(cap=st.one_of(st.none(), st.integers(1, 14)), host=st.integers(0, 5), ssd=st.integers(0, 5),
       shared_cap=st.integers(0, 6), ppb=st.integers(1, 2), data=st.data())
def test_the_tree_matches_a_per_block_lru(cap, host, ssd, shared_cap, ppb, data):
    table: dict = {}
    _compare(cap, host, ssd, shared_cap, ppb, data, 40, table, lambda: data.draw(chains(table)))


@settings(max_examples=120)
@given(cap=st.integers(1, 4), host=st.integers(0, 3), ssd=st.integers(0, 3), shared_cap=st.integers(0, 3),
       data=st.data())
def test_the_tiers_edges_match_a_per_block_lru(cap, host, ssd, shared_cap, data):
    """Few short chains asked again and again into small tiers: hits land on every tier's
    oldest and newest block (the edges of the one LRU list), and a tier of capacity 0
    may lie between two that exist."""
    table: dict = {}
    pool = [chain_keys(data.draw(st.lists(st.integers(0, 2), min_size=1, max_size=3)), table) for _ in range(6)]
    _compare(cap, host, ssd, shared_cap, 1, data, 120, table, lambda: data.draw(st.sampled_from(pool)))


def _compare(cap, host, ssd, shared_cap, ppb, data, steps, table, chain):
    """Drive a PrefixCache and a ReferenceLRU of these capacities with up to ``steps``
    generated operations on the chains ``chain()`` draws (keys interned in ``table``);
    compare them after each."""
    store = SharedStore(shared_cap) if shared_cap else None
    cache = PrefixCache(16, ppb, cap, host, ssd, store)
    holders = BlockIndex(1)
    cache.index_into(holders, 0)
    ref = ReferenceLRU(cap, host, ssd, shared_cap, ppb)
    running: list = []  # [keys, hit, held, last slot, committed]
    for _ in range(data.draw(st.integers(1, steps))):
        op = data.draw(st.sampled_from(["admit", "admit", "commit", "release", "trim"]))
        if op == "admit":
            keys = chain()
            usable = data.draw(st.integers(0, len(keys)))
            hit = cache.acquire(keys, usable)
            want, moved = ref.acquire(keys, usable)
            assert hit == want
            if hit:
                assert [cache.moved_from(t) for t in (HOST, SSD, SHARED)] == [moved[HOST], moved[SSD], moved[SHARED]]
            running.append([keys, usable, hit, hit, cache.last if hit else -1, False])
        elif op == "commit":
            todo = [r for r in running if not r[5]]
            if not todo:
                continue
            r = data.draw(st.sampled_from(todo))
            keys, usable, hit = r[0], r[1], r[2]
            r[4] = cache.commit(keys, r[4], hit, usable)
            ref.commit(keys, hit, usable)
            r[3], r[5] = usable, True
        elif op == "release":
            if not running:
                continue
            r = running.pop(data.draw(st.integers(0, len(running) - 1)))
            if r[3]:
                cache.release(r[4], r[3])
                ref.release(r[0], r[3])
        else:
            free = data.draw(st.integers(-1, 12))
            cache.trim_pages(free)
            ref.trim(free)
        assert cache.blocks == len(ref.refs) + len(ref.tiers[0])
        assert cache.evictable == len(ref.tiers[0])
        assert [cache.tier_blocks(t) for t in (HOST, SSD)] == [len(ref.tiers[HOST]), len(ref.tiers[SSD])]
        assert cache.lru_order() == [(t, k) for t in (SSD, HOST, 0) for k in ref.tiers[t]]
        held = ref.held()
        assert [holders.get(k) for k in range(len(table))] == [1 if k in held else 0 for k in range(len(table))]
        assert len(holders) == len(held)
        if store is not None:
            assert list(store.lru) == list(ref.shared)
        assert [cache.traffic_blocks(i) for i in range(len(TRAFFIC))] == list(ref.traffic.values())
    probe = chain()  # a read-only lookup walks the same tree
    want = 0
    while want < len(probe) and probe[want] in ref.held():
        want += 1
    assert cache.hit_blocks(probe, len(probe)) == want


def _serve(cache, key):
    """One request of the one block ``key``: admitted, prefilled, gone (the edges checked
    by ``lru_order`` between each step); returns the tier its hit came from (-1: none)."""
    hit = cache.acquire((key,), 1)
    came = next((t for t in (HOST, SSD) if cache.moved_from(t)), 0) if hit else -1
    cache.lru_order()
    slot = cache.commit((key,), cache.last if hit else -1, hit, 1)
    cache.lru_order()
    cache.release(slot, 1)
    return came


def test_hits_on_the_tiers_edges_move_them():
    """By hand, one HBM block, a host tier of one and an SSD tier of two: each request's
    block pushes the one before it down (HBM → host → SSD → gone)."""
    cache = PrefixCache(16, 1, 1, 1, 2)
    for key in (0, 1, 2, 3):
        assert _serve(cache, key) == -1
    assert cache.lru_order() == [(SSD, 0), (SSD, 1), (HOST, 2), (0, 3)]
    assert _serve(cache, 1) == SSD  # the newest SSD block, below a host block; 3 → host, 2 → SSD
    assert cache.lru_order() == [(SSD, 0), (SSD, 2), (HOST, 3), (0, 1)]
    assert _serve(cache, 4) == -1  # 1 → host, 3 → SSD, 0 dropped
    assert cache.lru_order() == [(SSD, 2), (SSD, 3), (HOST, 1), (0, 4)]
    assert _serve(cache, 1) == HOST  # the host tier's only block; 4 takes its place
    assert cache.lru_order() == [(SSD, 2), (SSD, 3), (HOST, 4), (0, 1)]
    assert _serve(cache, 2) == SSD  # the oldest block; 1 → host, 4 → SSD
    assert cache.lru_order() == [(SSD, 3), (SSD, 4), (HOST, 1), (0, 2)]
    assert [cache.traffic_blocks(i) for i in range(len(TRAFFIC))] == [7, 5, 0, 1, 1, 2, 0]


def test_hits_on_the_edges_across_an_empty_host_tier():
    """By hand, no host tier between HBM and an SSD tier of two: both edges sit on the
    newest SSD block and move together."""
    cache = PrefixCache(16, 1, 1, 0, 2)
    for key in (0, 1, 2):
        assert _serve(cache, key) == -1
    assert cache.lru_order() == [(SSD, 0), (SSD, 1), (0, 2)]
    assert _serve(cache, 1) == SSD  # the newest SSD block; 2 → SSD
    assert cache.lru_order() == [(SSD, 0), (SSD, 2), (0, 1)]
    assert _serve(cache, 0) == SSD  # the oldest; 1 → SSD
    assert cache.lru_order() == [(SSD, 2), (SSD, 1), (0, 0)]
    assert _serve(cache, 3) == -1  # 0 → SSD, 2 dropped
    assert cache.lru_order() == [(SSD, 1), (SSD, 0), (0, 3)]
    assert [cache.traffic_blocks(i) for i in range(len(TRAFFIC))] == [0, 5, 0, 1, 0, 2, 0]


def test_a_hit_ending_inside_a_run_splits_it_across_its_tiers():
    """By hand: a request's six consecutive keys join as one run; trimmed to two HBM
    blocks, its deepest blocks go down (15, 14 → host; 13 → host pushes 15 to SSD; 12 →
    host pushes 14 to SSD). A second request hitting 10, 11 (HBM) and 12 (host) splits
    the run there: 10-12 are held (one promoted from host), 13-15 keep their tiers and
    their place; its new block 20 joins as a run below 12, and the release puts 20, then
    12, 11, 10 at the list's end (deepest first)."""
    cache = PrefixCache(16, 1, 2, 2, 2)
    first = (10, 11, 12, 13, 14, 15)
    assert cache.acquire(first, 6) == 0
    last = cache.commit(first, -1, 0, 6)
    cache.release(last, 6)
    cache.trim_pages(2)
    assert cache.lru_order() == [(SSD, 15), (SSD, 14), (HOST, 13), (HOST, 12), (0, 11), (0, 10)]
    second = (10, 11, 12, 20)
    assert cache.acquire(second, 4) == 3
    assert (cache.moved_from(HOST), cache.moved_from(SSD)) == (1, 0)
    assert cache.lru_order() == [(SSD, 15), (SSD, 14), (HOST, 13)]
    assert (cache.blocks, cache.tier_blocks(HOST), cache.tier_blocks(SSD)) == (3, 1, 2)
    last = cache.commit(second, cache.last, 3, 4)
    assert cache.hit_blocks(first, 6) == 6 and cache.hit_blocks(second, 4) == 4
    cache.release(last, 4)
    assert cache.lru_order() == [(SSD, 15), (SSD, 14), (HOST, 13), (0, 20), (0, 12), (0, 11), (0, 10)]
    assert [cache.traffic_blocks(i) for i in range(len(TRAFFIC))] == [4, 2, 0, 0, 1, 0, 0]
