# cython: boundscheck=False, wraparound=False, initializedcheck=False
"""Prefix cache of one autoregressive replica: KV blocks kept after their request, keyed
by the chain of block hashes, reused by later requests with the same prefix.

The model follows vLLM's automatic prefix caching (docs.vllm.ai "Automatic Prefix
Caching", v0.6-v0.8, 2024-2025) and SGLang's RadixAttention (Zheng et al., "SGLang",
NeurIPS 2024):

- KV is held in blocks of ``block_tokens`` tokens (a multiple of the replica's paging
  block); block i of a request is known by a key standing for the hashes of blocks 0..i
  (a chain key, so equal keys mean an equal whole prefix, :func:`traffic.prefix.chain_keys`).
- Only whole blocks are cached, and at least one prompt token is always computed (the
  last token's logits are needed): a request of P prompt tokens can use its first
  ``(P - 1) // block_tokens`` keys (:meth:`PrefixCache.usable`).
- A hit is the longest run of a request's leading keys present in the cache, looked up
  when the request is admitted. Its blocks are then referenced (pinned) until the
  request leaves the replica (completion, preemption, hand-off); the blocks it computes
  join the cache, referenced too, when its prefill starts (a request admitted in the
  same iteration does not see them; the next admissions come after the prefill).
- A block no running request references is evictable, least recently used first. A
  request releases its blocks last block first, so its first block is the most recent
  (vLLM frees a request's blocks in reverse order for the same reason: the tail of a
  chain goes before its head). Evictable blocks are evicted when the cache holds more
  than ``capacity_blocks`` blocks, and when the running sequences' KV cache needs their
  HBM pages (:meth:`trim_pages`, called by the replica at its iteration boundaries).
- With ``host_blocks`` (a KV tier in host DRAM, as LMCache and Mooncake Store keep one)
  and ``ssd_blocks`` (a local NVMe tier below it, as LMCache's local-disk backend), an
  evicted block is demoted down the tiers that exist instead of dropped: a full tier
  passes its least recently used block to the next, the last one drops it. A hit may run
  through lower-tier blocks: they are promoted back to HBM at admission, and the replica
  pays their transfer (:meth:`acquire` counts them per tier in ``moved``).
- With a pool's shared store (``shared``, a :class:`SharedStore`: Mooncake Store, LMCache's
  remote backend), a block dropped past the replica's last tier is put there, and a hit
  continues through keys the replica lacks but the store holds: such a block is copied
  into this replica's HBM (counted in ``moved[SHARED]``) and stays in the store too.
- Every block that changes tier (demoted, written to the store, dropped for good,
  promoted) is counted in ``traffic`` (:data:`TRAFFIC`), cumulatively; the replica turns
  the counts into the pool's KV traffic in the measurement window
  (:meth:`sim.engine.replica_ar.ARReplica._cache_traffic`).

Capacity accounting: a running request counts its whole prompt's KV in the replica's
paged-KV bookkeeping as before (two running requests sharing a prefix each count it:
a conservative bound, no physical sharing between concurrent sequences); evictable blocks
occupy the pages left over and are treated as free by admission, which evicts them as it
needs them.
"""

from __future__ import annotations

from array import array

from sim.engine.key_table import BlockIndex, KeyTable

HOST, SSD = 1, 2
"""The lower local tiers, by number (tier 0: HBM)."""
SHARED = 3
"""The pool's shared store, by its entry in ``PrefixCache.moved`` (it has no list here)."""
TRAFFIC = ("demoted_host", "demoted_ssd", "written_shared", "dropped", "promoted_host", "promoted_ssd",
           "promoted_shared")
"""The entries of ``PrefixCache.traffic``, blocks counted since the cache was made:
demoted into host DRAM (from HBM) and into the SSD tier (from host DRAM, or from HBM
without a host tier), written to the shared store (past the last local tier, a key the
store did not hold), dropped for good (past the last local tier without a shared store,
or out of the shared store), promoted into HBM from host DRAM, from the SSD tier and from
the shared store (every :meth:`PrefixCache.acquire`). Entry t − 1 is the move down into
tier t (:data:`HOST`, :data:`SSD`, :data:`SHARED`), entry ``_PROMOTED + t`` the
promotion from it."""
_TRAFFIC = 7
_DROPPED = 3  # TRAFFIC[_DROPPED]
_PROMOTED = 3  # TRAFFIC[_PROMOTED + t]: promoted from tier t (HOST, SSD, SHARED)
_TIERS = 3  # local tiers: HBM, host DRAM, local SSD
_HOST, _SSD = 1, 2  # HOST, SSD as C constants when compiled
_MOVED = 4  # entries of ``moved``: the lower local tiers and the shared store
_SHARED = 3  # SHARED, a C constant when compiled
_W = 8  # a slot's fields in ``st`` (class docstring)
_REF, _TIER, _PREV, _NEXT, _UP, _DOWN, _KIDS, _HEAD = 0, 1, 2, 3, 4, 5, 6, 7
_FREE = -1  # a free slot's tier
_INT_BYTES = array("i").itemsize
_KEY_BYTES = array("q").itemsize


class PrefixCache:
    """The cached blocks of one replica (module docstring).

    Every block held has a slot; ``st`` holds per slot, in ``_W`` consecutive C ints, its
    references (running requests holding it; only an HBM block is referenced), its tier
    (0 HBM, :data:`HOST`, :data:`SSD`; ``_FREE`` for a free slot), its links in the LRU
    list (below), and its place in the chains: its parent (the slot of the block before
    it in its chain, -1 for a chain's first block), its chain child (one child found
    through it, -1: none), how many of its children are held, and whether it is a head;
    ``skey`` its key.
    A request's blocks are a path, so it keeps only the slot of its last one (released
    up the parent links).

    The blocks form a tree, as SGLang's radix tree does: a request's blocks are a path
    from a root, and a chain child is reached from its parent's slot without a lookup.
    The first child a block gets is its chain child; the others (branches) and the roots
    are heads, whose keys map to their slots in ``heads`` (a
    :class:`sim.engine.key_table.KeyTable`). So the blocks a prefill computes join the cache as a path of chain
    children with no table probe (a new block has no children, so its successor cannot
    be held), and a lookup walks chain children, probing the table only where a block
    has branches. Freed slots are chained through their next link (slots from ``used`` on
    were never used). No Python object per
    block (a dict of this size per replica cost two cache misses per probe and a
    reallocation of its table every few thousand insertions).

    A block never leaves before its children (so a held block's parent is held): a
    request holds a prefix of its chain and releases it deepest block first, so a child
    is never more recent than its parent, and blocks leave the replica least recent
    first from the last tier, each tier passing its least recent block on to the next
    (the order of recency runs unbroken through the tiers, the referenced blocks on top).
    :meth:`_drop` checks it.

    So the unreferenced blocks of all tiers are one least-recently-used list (doubly
    linked, circular through the sentinel slot 0), least recent first: those on local
    SSD, then those in host DRAM, then the evictable HBM blocks; ``edge[t]`` is the slot
    of the last block of tiers t and below (t = :data:`HOST`, :data:`SSD`; 0, the
    sentinel, while they hold none; ``edge[3]`` stays 0). A block demoted from a tier
    to the next keeps its place in the list: the edges between them move past it, and
    only its tier changes (one slot written, no links); a promotion (a hit below HBM)
    or a block leaving the replica unlinks it, and an edge at it moves to its
    predecessor. :meth:`lru_order` walks the list and checks the edges.

    With ``holders`` (its pool's :class:`sim.engine.key_table.BlockIndex`, for the
    ``prefix_aware`` router: :class:`sim.engine.router.Router`), a block that enters or
    leaves this replica (in any tier) sets or clears the replica's bit (``position``) there.

    Args:
        block_tokens: tokens per cached block (the hashes' block size).
        pages_per_block: the replica's KV paging blocks per cached block.
        capacity_blocks: most blocks held in HBM (referenced or evictable); None: bounded
            only by the replica's HBM.
        host_blocks: blocks held in host DRAM; 0: no host tier.
        ssd_blocks: blocks held on local SSD; 0: no SSD tier.
        shared: the pool's :class:`SharedStore`, below the last local tier; None: none.
    """

    __slots__ = ("block_tokens", "pages_per_block", "capacity_blocks", "cap", "heads", "skey",
                 "st", "tier_cap", "count", "edge", "moved", "traffic", "n_refd", "evictable", "free",
                 "size", "used", "moves", "holders", "position", "shared", "last", "st_buf", "skey_buf")

    def __init__(self, block_tokens: int, pages_per_block: int, capacity_blocks: int | None,
                 host_blocks: int = 0, ssd_blocks: int = 0, shared=None) -> None:
        self.block_tokens = block_tokens
        self.pages_per_block = pages_per_block
        self.capacity_blocks = capacity_blocks
        self.cap = -1 if capacity_blocks is None else capacity_blocks
        self.tier_cap = array("q", [0, host_blocks, ssd_blocks])  # per tier: most blocks (tier 0: unused)
        self.count = array("q", [0] * _TIERS)  # per lower tier: blocks held (count[0] unused: ``evictable``)
        self.edge = array("q", [0] * (_TIERS + 1))  # per tier t > 0: last list slot of tiers >= t (class docstring)
        self.moved = array("q", [0] * _MOVED)  # per lower tier: blocks the last acquire promoted from it
        self.traffic = array("q", [0] * _TRAFFIC)  # blocks moved between tiers so far, by :data:`TRAFFIC`
        self.moves = 0  # the sum of ``traffic`` (one test tells whether anything moved)
        self.shared = shared
        self.n_refd = 0  # referenced (HBM) blocks
        self.evictable = 0  # unreferenced HBM blocks
        self.last = -1  # the slot of the last block the last acquire referenced (-1: none)
        self.free = -1  # first free slot (-1: none)
        self.size = 0  # slots allocated
        self.used = 1  # slots ever used (the sentinel first): those above are fresh
        self.st_buf, self.skey_buf = array("i"), array("q")  # the arrays behind ``st`` and ``skey``
        self._grow()  # the sentinel, slot 0: an empty circular list (its links 0)
        self.heads = KeyTable()
        self.holders = None
        self.position = -1

    def index_into(self, holders: BlockIndex, position: int) -> None:
        """Report this replica's blocks in ``holders`` as replica ``position`` (class docstring),
        those held now included."""
        self.holders = holders
        self.position = position
        for i in range(1, self.used):
            if self.st[_W * i + _TIER] != _FREE:
                holders.add(self.skey[i], position)

    # --- slots -------------------------------------------------------------------------
    def _grow(self) -> None:
        """Twice the slots (64 at first), both arrays resized in place: a realloc, which
        moves no bytes when the allocator can extend the block, so a run touches each page
        of its final arrays about once (a new array per doubling, zeroed, filled and copied
        through a temporary, faulted in several times the final size: on
        scenarios/mooncake-prefix.yaml's fleet with an SSD tier, 6,400 page faults per run
        against 4,000-4,800 now, 1,000-1,900 without a cache). The
        compiled build's typed views are let go first (an array cannot be resized while
        a view of it is held) and taken again after. The new slots lie above ``used``,
        never used yet: :meth:`_new_slot` takes them in order once the free list is empty
        and sets every field, so they may hold anything (``array *= 2`` leaves copies of
        the old slots there)."""
        st, skey = self.st_buf, self.skey_buf
        self.st = self.skey = None  # no view held while resizing
        if self.size:
            st *= 2
            skey *= 2
        else:  # the sentinel (slot 0: an empty circular list, its links 0) and 63 fresh slots
            st.frombytes(bytes(_INT_BYTES * _W * 64))
            skey.frombytes(bytes(_KEY_BYTES * 64))
        self.st, self.skey = st, skey
        self.size = len(skey)

    def _unlink(self, s: int) -> None:
        """``s`` leaves the LRU list; an edge at ``s`` moves to its predecessor."""
        p, n = self.st[_W * s + _PREV], self.st[_W * s + _NEXT]
        self.st[_W * p + _NEXT] = n
        self.st[_W * n + _PREV] = p
        if self.edge[_HOST] == s:
            self.edge[_HOST] = p
        if self.edge[_SSD] == s:
            self.edge[_SSD] = p

    def _push_back(self, s: int) -> None:
        """``s`` becomes the most recent block of the LRU list (an evictable HBM block)."""
        last = self.st[_PREV]
        self.st[_W * last + _NEXT] = s
        self.st[_W * s + _PREV] = last
        self.st[_W * s + _NEXT] = 0
        self.st[_PREV] = s

    def _child(self, p: int, key: int) -> int:
        """The slot of ``key``, whose parent in its chain is held in slot ``p`` (-1: ``key``
        is a chain's first block); -1 if not held."""
        if p >= 0:
            d = self.st[_W * p + _DOWN]
            if d >= 0:
                if self.skey[d] == key:
                    return d
                if self.st[_W * p + _KIDS] == 1:
                    return -1  # its one child is another block
            elif not self.st[_W * p + _KIDS]:
                return -1  # no child held (always so for a block just added)
        return self.heads.get(key, -1)  # a root, or a branch

    def _new_slot(self, key: int, p: int) -> int:
        """A slot for ``key`` (not held), referenced once in HBM, the child of slot ``p``
        (-1: a chain's first block)."""
        s = self.free
        if s >= 0:
            self.free = self.st[_W * s + _NEXT]
        else:  # a slot never used
            if self.used == self.size:
                self._grow()
            s = self.used
            self.used += 1
        self.st[_W * s + _REF] = 1
        self.st[_W * s + _TIER] = 0
        self.st[_W * s + _UP] = p
        self.st[_W * s + _DOWN] = -1
        self.st[_W * s + _KIDS] = 0
        self.skey[s] = key
        self.n_refd += 1
        if p >= 0:
            self.st[_W * p + _KIDS] += 1
            if self.st[_W * p + _DOWN] < 0:
                self.st[_W * p + _DOWN] = s
                self.st[_W * s + _HEAD] = 0
            else:
                self.st[_W * s + _HEAD] = 1
                self.heads.put(key, s)
        else:
            self.st[_W * s + _HEAD] = 1
            self.heads.put(key, s)
        if self.holders is not None:
            self.holders.add(key, self.position)
        return s

    def _drop(self, s: int) -> None:
        """Forget slot ``s`` (unlinked): its block leaves the replica."""
        key = self.skey[s]
        if self.st[_W * s + _KIDS]:
            raise RuntimeError(f"prefix cache: block {key} dropped before its children (class docstring)")
        p = self.st[_W * s + _UP]
        if self.st[_W * s + _HEAD]:
            self.heads.erase(key)
        else:
            self.st[_W * p + _DOWN] = -1
        if p >= 0:
            self.st[_W * p + _KIDS] -= 1
        if self.holders is not None:
            self.holders.remove(key, self.position)
        self.st[_W * s + _TIER] = _FREE
        self.st[_W * s + _NEXT] = self.free
        self.free = s

    # --- the cache ---------------------------------------------------------------------
    def usable(self, keys: tuple, prompt_tokens: int) -> int:
        """How many of ``keys`` a prompt of ``prompt_tokens`` can cache: its whole blocks
        short of its last token."""
        n = prompt_tokens - 1
        if n < 0:
            n = 0
        n //= self.block_tokens
        return n if n < len(keys) else len(keys)

    def hit_blocks(self, keys: tuple, usable: int, start: int = 0) -> int:
        """Leading keys of ``keys[:usable]`` present in the cache, any tier (read only),
        the first ``start`` known to be (walked all the same: a block's slot is found
        through its parent's)."""
        n = 0
        p = -1
        while n < usable:
            p = self._child(p, keys[n])
            if p < 0:
                break
            n += 1
        return n

    def _take(self, s: int, count_moved: bool) -> None:
        """Reference slot ``s``: an unreferenced block leaves its list (a lower tier's is
        promoted to HBM, counted in ``moved`` when ``count_moved``)."""
        if self.st[_W * s + _REF]:
            self.st[_W * s + _REF] += 1
            return
        self._unlink(s)
        t = self.st[_W * s + _TIER]
        if t:
            self.count[t] -= 1
            if count_moved:
                self.moved[t] += 1
            self.st[_W * s + _TIER] = 0
        else:
            self.evictable -= 1
        self.st[_W * s + _REF] = 1
        self.n_refd += 1

    def acquire(self, keys: tuple, usable: int) -> int:
        """A request was admitted: reference the longest run of ``keys[:usable]`` present
        (its hit, returned; the slot of its last block in ``last``). Blocks found in a
        lower tier are promoted to HBM; ``moved[t]``: how many from tier t. A key this
        replica lacks but the pool's shared store holds is copied in from there, referenced
        in HBM (``moved[SHARED]``)."""
        for t in range(1, _MOVED):
            self.moved[t] = 0
        n = 0
        p = -1
        shared = self.shared
        while n < usable:
            key = keys[n]
            s = self._child(p, key)
            if s >= 0:
                self._take(s, True)
            elif shared is not None and shared.touch(key):
                s = self._new_slot(key, p)
                self.moved[_SHARED] += 1
            else:
                break
            p = s
            n += 1
        self.last = p
        for t in range(1, _MOVED):
            self.traffic[_PROMOTED + t] += self.moved[t]
            self.moves += self.moved[t]
        return n

    def moved_from(self, t: int) -> int:
        """Blocks the last :meth:`acquire` promoted from lower tier ``t`` (or copied from
        the shared store, ``t`` = :data:`SHARED`)."""
        return self.moved[t]

    def traffic_blocks(self, i: int) -> int:
        """Blocks counted so far in entry ``i`` of :data:`TRAFFIC`."""
        return self.traffic[i]

    def _count(self, i: int) -> None:
        """One block moved, counted in entry ``i`` of :data:`TRAFFIC` (and in ``moves``)."""
        self.traffic[i] += 1
        self.moves += 1

    def _demote(self, s: int) -> None:
        """Slot ``s``, the least recent evictable HBM block (left ``evictable``), goes to
        the first lower tier that exists, as its most recent block: ``s`` stays in the LRU
        list and the edges above it move past it (class docstring); a tier over its
        capacity passes its least recent block on the same way; past the last tier a block
        is dropped (put in the pool's shared store when there is one). Each move is
        counted in ``traffic``."""
        t = _HOST
        below = _HOST  # the first edge the block passes
        while t < _TIERS:
            cap = self.tier_cap[t]
            if cap > 0:
                self.st[_W * s + _TIER] = t
                while below <= t:
                    self.edge[below] = s
                    below += 1
                self.count[t] += 1
                self._count(t - 1)
                if self.count[t] <= cap:
                    return
                s = self.st[_W * self.edge[t + 1] + _NEXT]  # the tier's least recent block moves on
                self.count[t] -= 1
            t += 1
        self._unlink(s)
        if self.shared is not None:
            put = self.shared.put(self.skey[s])
            if put:
                self._count(_SHARED - 1)
            if put == 2:
                self._count(_DROPPED)
        else:
            self._count(_DROPPED)
        self._drop(s)

    def _evict_oldest(self) -> None:
        """Evict the least recently used evictable HBM block (demoted: :meth:`_demote`)."""
        self.evictable -= 1
        self._demote(self.st[_W * self.edge[_HOST] + _NEXT])

    def commit(self, keys: tuple, last: int, hit: int, usable: int) -> int:
        """The request's prefill started: its computed blocks ``keys[hit:usable]`` join the
        cache, referenced (a block another request computed meanwhile is shared; one in a
        lower tier is replaced by the HBM copy) below ``last``, the slot of its block
        ``hit - 1`` (-1 if ``hit`` is 0); then evict down to the capacity. Returns the slot
        of its block ``usable - 1`` (``last`` if none joined)."""
        p = last
        for i in range(hit, usable):
            key = keys[i]
            s = self._child(p, key)
            if s < 0:
                s = self._new_slot(key, p)
            else:
                self._take(s, False)
            p = s
        cap = self.cap
        if cap >= 0:
            while self.evictable and self.n_refd + self.evictable > cap:
                self._evict_oldest()
        return p

    def release(self, last: int, held: int) -> None:
        """The request left the replica: drop its references to its ``held`` blocks, the
        last in slot ``last``, last block first (up the parent links); unreferenced blocks
        become the most recently used evictable ones."""
        s = last
        for i in range(held):
            self.st[_W * s + _REF] -= 1
            if not self.st[_W * s + _REF]:
                self.n_refd -= 1
                self.evictable += 1
                self._push_back(s)
            s = self.st[_W * s + _UP]

    def trim_pages(self, free_pages: int) -> None:
        """Evict least recently used blocks until the evictable ones fit in
        ``free_pages`` paging blocks (the HBM the running sequences leave)."""
        keep = (free_pages if free_pages > 0 else 0) // self.pages_per_block
        while self.evictable > keep:
            self._evict_oldest()

    @property
    def blocks(self) -> int:
        """Blocks held in HBM, referenced and evictable."""
        return self.n_refd + self.evictable

    def tier_blocks(self, t: int) -> int:
        """Blocks held in lower tier ``t`` (:data:`HOST`, :data:`SSD`)."""
        return self.count[t]

    def lru_order(self) -> list:
        """The unreferenced blocks as ``(tier, key)`` pairs in the LRU list's order, least
        recent first (class docstring): those on local SSD, then in host DRAM, then in HBM
        (a walk of the whole list, for tests). Raises RuntimeError if an edge is not the
        last slot of its tiers."""
        out = []
        last = [0] * _TIERS  # per tier t > 0: the last slot seen of tiers >= t
        s = self.st[_NEXT]
        while s:
            t = self.st[_W * s + _TIER]
            out.append((t, self.skey[s]))
            for i in range(1, t + 1):
                last[i] = s
            s = self.st[_W * s + _NEXT]
        for t in range(1, _TIERS):
            if self.edge[t] != last[t]:
                raise RuntimeError(f"prefix cache: tier {t}'s edge at slot {self.edge[t]}, its tiers end at {last[t]}")
        return out


class SharedStore:
    """A pool's shared KV store (Mooncake Store; LMCache's remote backend): the chain keys
    of at most ``capacity_blocks`` blocks, least recently used first out, filled by the
    blocks its replicas drop past their last local tier and read by any of them
    (:meth:`PrefixCache.acquire`). A read copies a block and leaves it in the store.
    Only which blocks it holds is modelled: the replica pays the transfer over its NICs
    (:meth:`sim.engine.replica_ar.ARReplica._cache_copy_s`), and the store's own servers
    and their bandwidth are not contended for (docs/kv-reuse.md).

    Args:
        capacity_blocks: most blocks held (> 0).
    """

    __slots__ = ("capacity_blocks", "lru")

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity_blocks = capacity_blocks
        self.lru: dict = {}  # key -> None, least recently used first (insertion order)

    def put(self, key: int) -> int:
        """``key``'s block arrives: the most recent; the least recent leaves when the store
        is over its capacity. Returns 0 when the store held it already (it is only
        refreshed: no bytes to write), 1 when it was written, 2 when written and another
        block left for good."""
        lru = self.lru
        if key in lru:
            del lru[key]
            lru[key] = None
            return 0
        lru[key] = None
        if len(lru) > self.capacity_blocks:
            del lru[next(iter(lru))]
            return 2
        return 1

    def touch(self, key: int) -> bool:
        """Whether ``key``'s block is held; if so it becomes the most recent."""
        lru = self.lru
        if key not in lru:
            return False
        del lru[key]
        lru[key] = None
        return True

    def __len__(self) -> int:
        return len(self.lru)
