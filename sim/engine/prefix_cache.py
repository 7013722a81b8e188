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
_W = 9  # a run's fields in ``st`` (class docstring)
_REF, _PREV, _NEXT, _UP, _DOWN, _KIDS, _LEN, _NHOST, _NSSD = 0, 1, 2, 3, 4, 5, 6, 7, 8
_INT_BYTES = array("i").itemsize
_KEY_BYTES = array("q").itemsize


class PrefixCache:
    """The cached blocks of one replica (module docstring), kept as runs.

    A run is a stretch of blocks with consecutive chain keys on one chain (key ``skey[r]``
    + i for its block i), held together: ``st`` holds per run, in ``_W`` consecutive C
    ints, its references (running requests holding it; a referenced run is all in HBM),
    its links in the LRU list (below), its parent (the run whose last block precedes its
    first; -1 for a chain's first run), its chain child (one child found through it, -1:
    none) and how many children it has, its length in blocks, and how many of its blocks
    are in host DRAM and on SSD. Slots are runs: a request's new blocks join as one run
    (or a few, where their keys are not consecutive), so the work of a request grows with
    its runs, not its blocks, except for comparing its keys.

    The runs form SGLang's radix tree: children hang only at a run's end, and every
    request's last block ends a run, so a request keeps the slot of its last run and
    releases its blocks up the parent links. A hit ending inside a run splits it (the
    first part gets a new slot and takes the run's place under its parent; the rest
    keeps its slot, its children and the requests ending there). A run's first key maps
    to its slot in ``heads`` (a :class:`sim.engine.key_table.KeyTable`) unless it is its
    parent's chain child. Freed slots are chained through their next link; slots from
    ``used`` on were never used.

    The LRU is still per block, exactly: the unreferenced blocks of all tiers are one
    least-recently-used list, least recent first (those on local SSD, then in host DRAM,
    then the evictable HBM blocks). A request releases its blocks deepest first, so a
    run's blocks are adjacent in it, deepest first, and the list is one of runs (doubly
    linked, circular through the sentinel slot 0). Within a run the deepest blocks are the
    least recent, so they are the ones demoted: a run's blocks are, deepest first, its
    ``NSSD`` on SSD, its ``NHOST`` in host DRAM and the rest in HBM, and demoting a block
    is a count. ``first[0]`` is the first run of the list with an HBM block (the least
    recent evictable HBM block is its deepest one) and ``first[1]`` the first with a block
    in host DRAM or HBM (0: none). A block never leaves before its children: a child is
    never more recent than its parent, so a run's last block leaves after the runs below
    it. :meth:`lru_order` lists the blocks and checks the runs' tiers and ``first``.

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
                 "st", "tier_cap", "count", "first", "moved", "traffic", "n_refd", "evictable", "free",
                 "size", "used", "moves", "holders", "position", "shared", "last", "st_buf", "skey_buf",
                 "at_run", "at_len")

    def __init__(self, block_tokens: int, pages_per_block: int, capacity_blocks: int | None,
                 host_blocks: int = 0, ssd_blocks: int = 0, shared=None) -> None:
        self.block_tokens = block_tokens
        self.pages_per_block = pages_per_block
        self.capacity_blocks = capacity_blocks
        self.cap = -1 if capacity_blocks is None else capacity_blocks
        self.tier_cap = array("q", [0, host_blocks, ssd_blocks])  # per tier: most blocks (tier 0: unused)
        self.count = array("q", [0] * _TIERS)  # per lower tier: blocks held (count[0] unused: ``evictable``)
        self.first = array("q", [0, 0])  # the first list run with a block in HBM, in host DRAM or HBM (class docstring)
        self.moved = array("q", [0] * _MOVED)  # per lower tier: blocks the last acquire promoted from it
        self.traffic = array("q", [0] * _TRAFFIC)  # blocks moved between tiers so far, by :data:`TRAFFIC`
        self.moves = 0  # the sum of ``traffic`` (one test tells whether anything moved)
        self.shared = shared
        self.n_refd = 0  # referenced (HBM) blocks
        self.evictable = 0  # unreferenced HBM blocks
        self.last = -1  # the slot of the last run the last acquire referenced (-1: none)
        self.at_run = self.at_len = 0  # where the last _walk stopped
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
        for r in range(1, self.used):
            if self.st[_W * r + _LEN]:
                holders.add_run(self.skey[r], self.st[_W * r + _LEN], position)

    def leave_index(self) -> None:
        """Take this replica's blocks out of its block index and report no further change
        to it: the cache of a failed replica, whose index position a fresh replica takes
        (:func:`sim.engine.capacity.replace`). Nothing when it reports to none."""
        holders = self.holders
        if holders is None:
            return
        for r in range(1, self.used):
            if self.st[_W * r + _LEN]:
                holders.remove_run(self.skey[r], self.st[_W * r + _LEN], self.position)
        self.holders = None

    # --- slots -------------------------------------------------------------------------
    def _grow(self) -> None:
        """Twice the slots (64 at first), both arrays resized in place: a realloc, which
        moves no bytes when the allocator can extend the block. The compiled build's
        typed views are let go first (an array cannot be resized while a view of it is
        held) and taken again after. The new slots lie above ``used``, never used yet:
        :meth:`_new_run` takes them in order once the free list is empty and sets every
        field, so they may hold anything (``array *= 2`` leaves copies of the old slots
        there)."""
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

    def _unlink(self, r: int) -> None:
        """Run ``r`` leaves the LRU list; ``first`` at ``r`` moves to its successor (whose
        blocks are all in tiers at least as high as ``r``'s most recent one)."""
        p, n = self.st[_W * r + _PREV], self.st[_W * r + _NEXT]
        self.st[_W * p + _NEXT] = n
        self.st[_W * n + _PREV] = p
        if self.first[0] == r:
            self.first[0] = n
        if self.first[1] == r:
            self.first[1] = n

    def _push_back(self, r: int) -> None:
        """Run ``r`` (all in HBM) becomes the most recent of the LRU list."""
        last = self.st[_PREV]
        self.st[_W * last + _NEXT] = r
        self.st[_W * r + _PREV] = last
        self.st[_W * r + _NEXT] = 0
        self.st[_PREV] = r
        if not self.first[0]:
            self.first[0] = r
        if not self.first[1]:
            self.first[1] = r

    def _child(self, p: int, key: int) -> int:
        """The run whose first key is ``key`` below the end of run ``p`` (-1: ``key`` is a
        chain's first block); -1 if not held."""
        if p >= 0:
            d = self.st[_W * p + _DOWN]
            if d >= 0:
                if self.skey[d] == key:
                    return d
                if self.st[_W * p + _KIDS] == 1:
                    return -1  # its one child is another run
            elif not self.st[_W * p + _KIDS]:
                return -1  # no child held (always so for a run just added)
        return self.heads.get(key, -1)  # a root, or a branch

    def _alloc(self) -> int:
        """A free slot: the free list's first, else the next never used (the arrays grown
        when full); the caller sets its fields."""
        r = self.free
        if r >= 0:
            self.free = self.st[_W * r + _NEXT]
            return r
        if self.used == self.size:
            self._grow()
        r = self.used
        self.used += 1
        return r

    def _new_run(self, key: int, length: int, p: int) -> int:
        """A slot for the run of ``length`` blocks from ``key`` (none held), referenced
        once in HBM, the child of run ``p`` (-1: a chain's first run)."""
        r = self._alloc()
        self.st[_W * r + _REF] = 1
        self.st[_W * r + _UP] = p
        self.st[_W * r + _DOWN] = -1
        self.st[_W * r + _KIDS] = 0
        self.st[_W * r + _LEN] = length
        self.st[_W * r + _NHOST] = 0
        self.st[_W * r + _NSSD] = 0
        self.skey[r] = key
        self.n_refd += length
        if p >= 0:
            self.st[_W * p + _KIDS] += 1
            if self.st[_W * p + _DOWN] < 0:
                self.st[_W * p + _DOWN] = r
            else:
                self.heads.put(key, r)
        else:
            self.heads.put(key, r)
        if self.holders is not None:
            self.holders.add_run(key, length, self.position)
        return r

    def _split(self, r: int, e: int) -> int:
        """Run ``r``'s first ``e`` blocks (0 < e < its length) become a run of their own,
        returned: it takes ``r``'s place under its parent, ``r`` keeps the rest as its
        chain child (its slot, its children, its place in the LRU list). The new run has
        ``r``'s references; unreferenced, its blocks are the most recent of ``r``'s (HBM
        first, then host DRAM, then SSD), and it is not in the list: the caller takes it."""
        s = self._alloc()
        length = self.st[_W * r + _LEN]
        nhost = self.st[_W * r + _NHOST]
        nssd = self.st[_W * r + _NSSD]
        hbm = length - nhost - nssd
        top_hbm = hbm if hbm < e else e
        top_host = e - top_hbm
        if top_host > nhost:
            top_host = nhost
        top_ssd = e - top_hbm - top_host
        p = self.st[_W * r + _UP]
        key = self.skey[r]
        self.st[_W * s + _REF] = self.st[_W * r + _REF]
        self.st[_W * s + _UP] = p
        self.st[_W * s + _DOWN] = r
        self.st[_W * s + _KIDS] = 1
        self.st[_W * s + _LEN] = e
        self.st[_W * s + _NHOST] = top_host
        self.st[_W * s + _NSSD] = top_ssd
        self.skey[s] = key
        if p >= 0 and self.st[_W * p + _DOWN] == r:
            self.st[_W * p + _DOWN] = s
        else:
            self.heads.put(key, s)  # its first key now names the new run
        self.st[_W * r + _UP] = s
        self.st[_W * r + _LEN] = length - e
        self.st[_W * r + _NHOST] = nhost - top_host
        self.st[_W * r + _NSSD] = nssd - top_ssd
        self.skey[r] = key + e
        if not self.st[_W * r + _REF]:  # in the list: it may have lost its HBM or host blocks
            if self.first[0] == r and top_hbm == hbm:
                self.first[0] = self.st[_W * r + _NEXT]
            if self.first[1] == r and top_hbm + top_host == hbm + nhost:
                self.first[1] = self.st[_W * r + _NEXT]
        return s

    def _free_run(self, r: int) -> None:
        """Run ``r``, in the list and now without blocks, leaves the replica."""
        self._unlink(r)
        p = self.st[_W * r + _UP]
        if p >= 0 and self.st[_W * p + _DOWN] == r:
            self.st[_W * p + _DOWN] = -1
        else:
            self.heads.erase(self.skey[r])
        if p >= 0:
            self.st[_W * p + _KIDS] -= 1
        self.st[_W * r + _NEXT] = self.free
        self.free = r

    # --- the cache ---------------------------------------------------------------------
    def usable(self, keys: tuple, prompt_tokens: int) -> int:
        """How many of ``keys`` a prompt of ``prompt_tokens`` can cache: its whole blocks
        short of its last token."""
        n = prompt_tokens - 1
        if n < 0:
            n = 0
        n //= self.block_tokens
        return n if n < len(keys) else len(keys)

    def hit_blocks(self, keys: tuple, usable: int) -> int:
        """Leading keys of ``keys[:usable]`` present in the cache, any tier (read only)."""
        return self._walk(keys, 0, usable, -1, False, False)

    def _walk(self, keys: tuple, n: int, usable: int, r: int, take: bool, count_moved: bool) -> int:
        """Follow ``keys[n:usable]`` down from the end of run ``r`` (-1: from the chains'
        first blocks) while they are held: a key inside a run is its first key plus its
        place, a run's end leads to its children (:meth:`_child`). Returns the index of
        the first key not held (``usable`` if all are); the place reached is left in
        ``at_run`` (its run, -1 if none) and ``at_len`` (its blocks passed). With ``take``,
        each run passed wholly, other than ``r``, is referenced (:meth:`_take`)."""
        start = r
        j = self.st[_W * r + _LEN] if r >= 0 else 0  # blocks of run r passed
        while n < usable:
            key = keys[n]
            if r >= 0 and j < self.st[_W * r + _LEN]:
                if self.skey[r] + j != key:
                    break
                j += 1
            else:
                c = self._child(r, key)
                if c < 0:
                    break
                if take and r != start:
                    self._take(r, count_moved, True)  # wholly passed
                r = c
                j = 1
            n += 1
        self.at_run = r
        self.at_len = j
        return n

    def _take(self, r: int, count_moved: bool, linked: bool) -> None:
        """Reference run ``r``: unreferenced, it leaves the list (``linked``: it is in it;
        a run just split off is not) and its lower tiers' blocks are promoted to HBM
        (counted in ``moved`` when ``count_moved``)."""
        if self.st[_W * r + _REF]:
            self.st[_W * r + _REF] += 1
            return
        if linked:
            self._unlink(r)
        nhost = self.st[_W * r + _NHOST]
        nssd = self.st[_W * r + _NSSD]
        length = self.st[_W * r + _LEN]
        if nhost:
            self.count[_HOST] -= nhost
            self.st[_W * r + _NHOST] = 0
        if nssd:
            self.count[_SSD] -= nssd
            self.st[_W * r + _NSSD] = 0
        if count_moved:
            self.moved[_HOST] += nhost
            self.moved[_SSD] += nssd
        self.evictable -= length - nhost - nssd
        self.st[_W * r + _REF] = 1
        self.n_refd += length

    def _hold(self, r: int, j: int, count_moved: bool) -> int:
        """Reference the first ``j`` blocks of run ``r`` (split off when fewer than all);
        returns the run that ends with them."""
        if j < self.st[_W * r + _LEN]:
            r = self._split(r, j)
            self._take(r, count_moved, False)
        else:
            self._take(r, count_moved, True)
        return r

    def acquire(self, keys: tuple, usable: int) -> int:
        """A request was admitted: reference the longest run of ``keys[:usable]`` present
        (its hit, returned; the slot of its last run in ``last``). Blocks found in a
        lower tier are promoted to HBM; ``moved[t]``: how many from tier t. A key this
        replica lacks but the pool's shared store holds is copied in from there, referenced
        in HBM (``moved[SHARED]``)."""
        for t in range(1, _MOVED):
            self.moved[t] = 0
        n = self._walk(keys, 0, usable, -1, True, True)
        r = self.at_run
        if r >= 0:
            r = self._hold(r, self.at_len, True)
        shared = self.shared
        if shared is not None:
            fresh = -1  # the run the store's blocks join (made here, no child yet)
            while n < usable:
                key = keys[n]
                if not shared.touch(key):
                    break
                if fresh >= 0 and self.skey[fresh] + self.st[_W * fresh + _LEN] == key:
                    self.st[_W * fresh + _LEN] += 1
                    self.n_refd += 1
                    if self.holders is not None:
                        self.holders.add(key, self.position)
                else:
                    fresh = self._new_run(key, 1, r)
                    r = fresh
                self.moved[_SHARED] += 1
                n += 1
        self.last = r
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

    def _count(self, i: int, m: int) -> None:
        """``m`` blocks moved, counted in entry ``i`` of :data:`TRAFFIC` (and in ``moves``)."""
        self.traffic[i] += m
        self.moves += m

    def _evict(self, k: int) -> None:
        """Evict the ``k`` least recently used evictable HBM blocks, a run's share at a
        time: the deepest HBM blocks of the first list runs with one go to the first lower
        tier that exists (:meth:`_lower`), or past the last (:meth:`_drop`). Each tier's
        blocks are a stretch of the list (class docstring), so evicting moves the tiers'
        boundaries along it: the blocks that leave HBM, those that each tier over its
        capacity passes on and those dropped are the same, in the same order, as if they
        moved one at a time."""
        t = _HOST if self.tier_cap[_HOST] else _SSD if self.tier_cap[_SSD] else _TIERS
        while k > 0:
            r = self.first[0]  # the first list run with a block in HBM: its deepest HBM blocks go
            hbm = self.st[_W * r + _LEN] - self.st[_W * r + _NHOST] - self.st[_W * r + _NSSD]
            m = k if k < hbm else hbm
            self.evictable -= m
            if t < _TIERS:
                self._lower(r, 0, t, m)
            else:
                self._drop(r, 0, m)
            k -= m

    def _lower(self, r: int, src: int, t: int, m: int) -> None:
        """Move the deepest ``m`` of run ``r``'s blocks in tier ``src`` (0: HBM, counted out
        of ``evictable`` already) to lower tier ``t`` (whose capacity is not 0), as its
        most recent blocks (a count: they keep their place in the list); then, if ``t`` is
        over its capacity, its least recent blocks go on to the next tier that exists, or
        past the last (:meth:`_drop`). Each move is counted in ``traffic``."""
        if src == _HOST:
            self.st[_W * r + _NHOST] -= m
        if t == _HOST:
            self.st[_W * r + _NHOST] += m
        else:
            self.st[_W * r + _NSSD] += m
        low = self.st[_W * r + _LEN] - self.st[_W * r + _NSSD]  # its blocks in host DRAM or HBM
        if self.first[0] == r and low == self.st[_W * r + _NHOST]:
            self.first[0] = self.st[_W * r + _NEXT]
        if self.first[1] == r and not low:
            self.first[1] = self.st[_W * r + _NEXT]
        self.count[t] += m
        self._count(t - 1, m)
        over = self.count[t] - self.tier_cap[t]
        u = _SSD if t == _HOST and self.tier_cap[_SSD] else _TIERS  # where the tier's overflow goes
        while over > 0:
            # the tier's least recent blocks: the deepest of the first run with one in it
            # (host DRAM: the first in host DRAM or HBM; SSD: the list's first run)
            s = self.first[1] if t == _HOST else self.st[_NEXT]
            n = self.st[_W * s + _NHOST] if t == _HOST else self.st[_W * s + _NSSD]
            if n > over:
                n = over
            self.count[t] -= n
            over -= n
            if u < _TIERS:
                self._lower(s, t, u, n)
            else:
                self._drop(s, t, n)

    def _drop(self, r: int, t: int, m: int) -> None:
        """The deepest ``m`` blocks of run ``r`` (the list's first), in tier ``t`` (counted
        out of it already), leave the replica, deepest first; the run goes with its last
        block. Without a shared store they are dropped; with one each is put in it, as its
        most recent (counted as written unless it held the block, and a block the store
        let go for good as dropped)."""
        length = self.st[_W * r + _LEN]
        if self.st[_W * r + _KIDS]:
            raise RuntimeError(f"prefix cache: block {self.skey[r] + length - 1} dropped before its children "
                               "(class docstring)")
        if t == _SSD:
            self.st[_W * r + _NSSD] -= m
        elif t == _HOST:
            self.st[_W * r + _NHOST] -= m
        length -= m
        self.st[_W * r + _LEN] = length
        if self.shared is None:
            self._count(_DROPPED, m)
        else:
            key = self.skey[r] + length + m - 1
            while key >= self.skey[r] + length:
                put = self.shared.put(key)
                if put:
                    self._count(_SHARED - 1, 1)
                if put == 2:
                    self._count(_DROPPED, 1)
                key -= 1
        if self.holders is not None:
            self.holders.remove_run(self.skey[r] + length, m, self.position)
        if not length:
            self._free_run(r)

    def commit(self, keys: tuple, last: int, hit: int, usable: int) -> int:
        """The request's prefill started: its computed blocks ``keys[hit:usable]`` join the
        cache, referenced (a block another request computed meanwhile is shared; one in a
        lower tier is replaced by the HBM copy) below ``last``, the slot of its run ending
        with block ``hit - 1`` (-1 if ``hit`` is 0); then evict down to the capacity.
        Returns the slot of its run ending with block ``usable - 1`` (``last`` if none
        joined)."""
        n = self._walk(keys, hit, usable, last, True, False)
        r = self.at_run
        if r != last:
            r = self._hold(r, self.at_len, False)
        while n < usable:  # new blocks, a run per stretch of consecutive keys
            key = keys[n]
            m = 1
            while n + m < usable:
                nxt = keys[n + m]  # a C int64 when compiled: no Python comparison
                if nxt != key + m:
                    break
                m += 1
            r = self._new_run(key, m, r)
            n += m
        cap = self.cap
        if cap >= 0:
            over = self.n_refd + self.evictable - cap
            if over > 0 and self.evictable:
                self._evict(over if over < self.evictable else self.evictable)
        return r

    def release(self, last: int, held: int) -> None:
        """The request left the replica: drop its references to its ``held`` blocks, the
        last run in slot ``last``, deepest run first (up the parent links); unreferenced
        runs become the most recently used evictable ones."""
        r = last
        while held > 0:
            length = self.st[_W * r + _LEN]
            self.st[_W * r + _REF] -= 1
            if not self.st[_W * r + _REF]:
                self.n_refd -= length
                self.evictable += length
                self._push_back(r)
            held -= length
            r = self.st[_W * r + _UP]

    def trim_pages(self, free_pages: int) -> None:
        """Evict least recently used blocks until the evictable ones fit in
        ``free_pages`` paging blocks (the HBM the running sequences leave)."""
        keep = (free_pages if free_pages > 0 else 0) // self.pages_per_block
        if self.evictable > keep:
            self._evict(self.evictable - keep)

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
        (a walk of the whole list, for tests). Raises RuntimeError if the tiers do not
        run down the list, or ``first`` is not where they say."""
        out = []
        first = [0, 0]
        tiers = [0] * _TIERS
        below = _SSD  # the tier of the block before
        r = self.st[_NEXT]
        while r:
            length = self.st[_W * r + _LEN]
            nhost, nssd = self.st[_W * r + _NHOST], self.st[_W * r + _NSSD]
            if self.st[_W * r + _REF] or length < 1 or nhost < 0 or nssd < 0 or nhost + nssd > length:
                raise RuntimeError(f"prefix cache: run {r} in the list with {length} blocks, {nhost} in host "
                                   f"DRAM and {nssd} on SSD, {self.st[_W * r + _REF]} references")
            for i in range(length - 1, -1, -1):
                t = _SSD if i >= length - nssd else _HOST if i >= length - nssd - nhost else 0
                if t > below:
                    raise RuntimeError(f"prefix cache: a block in tier {t} after one in tier {below}")
                below = t
                out.append((t, self.skey[r] + i))
                tiers[t] += 1
            if not first[0] and length - nhost - nssd:
                first[0] = r
            if not first[1] and length - nssd:
                first[1] = r
            r = self.st[_W * r + _NEXT]
        if first[0] != self.first[0] or first[1] != self.first[1]:
            raise RuntimeError(f"prefix cache: first runs at {self.first[0]}, {self.first[1]}; "
                               f"the list's are {first[0]}, {first[1]}")
        if tiers[0] != self.evictable or tiers[_HOST] != self.count[_HOST] or tiers[_SSD] != self.count[_SSD]:
            raise RuntimeError(f"prefix cache: the list holds {tiers} blocks per tier, counted "
                               f"{[self.evictable, self.count[_HOST], self.count[_SSD]]}")
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
