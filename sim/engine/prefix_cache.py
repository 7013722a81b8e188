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
- With ``host_blocks`` (a KV tier in host DRAM, as LMCache and Mooncake Store keep one), an
  evicted block is demoted to host memory instead of dropped; host memory evicts its own
  least recently used block when full. A hit may run through host blocks: they are
  promoted back to HBM at admission, and the replica pays their transfer over the host
  link (:meth:`acquire` returns how many).

Capacity accounting: a running request counts its whole prompt's KV in the replica's
paged-KV bookkeeping as before (two running requests sharing a prefix each count it:
a conservative bound, no physical sharing between concurrent sequences); evictable blocks
occupy the pages left over and are treated as free by admission, which evicts them as it
needs them.
"""

from __future__ import annotations

from array import array

HOST, SSD = 1, 2
"""The lower local tiers, by list number (list 0 holds the evictable HBM blocks)."""
_LISTS = 3  # LRU lists: evictable HBM, host DRAM, local SSD


class PrefixCache:
    """The cached blocks of one replica (module docstring).

    Every block held has a slot: ``where`` maps its key to the slot, and C arrays hold per
    slot its key, references (running requests holding it; only an HBM block is
    referenced), tier (0 HBM, :data:`HOST`, :data:`SSD`) and its links in the
    least-recently-used list of its tier (doubly linked, circular through the sentinel
    slots 0..2: slot t heads list t; list 0 holds the evictable HBM blocks). So a lookup
    is one dictionary probe, and a touch, an eviction or a demotion a few C integer
    moves; free slots are chained through ``nxt``.

    With ``holders`` (a pool's ``{key: bitmask of its replicas holding the block}``, for the
    ``prefix_aware`` router: :class:`sim.engine.router.Router`), a block that enters or
    leaves this replica (in any tier) sets or clears the replica's ``bit`` there.

    Args:
        block_tokens: tokens per cached block (the hashes' block size).
        pages_per_block: the replica's KV paging blocks per cached block.
        capacity_blocks: most blocks held in HBM (referenced or evictable); None: bounded
            only by the replica's HBM.
        host_blocks: blocks held in host DRAM; 0: no host tier.
        ssd_blocks: blocks held on local SSD; 0: no SSD tier.
    """

    __slots__ = ("block_tokens", "pages_per_block", "capacity_blocks", "cap", "where", "key", "ref", "tier",
                 "prev", "nxt", "tier_cap", "count", "moved", "n_refd", "evictable", "free", "size", "holders",
                 "bit", "nbit", "_zero")

    def __init__(self, block_tokens: int, pages_per_block: int, capacity_blocks: int | None,
                 host_blocks: int = 0, ssd_blocks: int = 0) -> None:
        self.block_tokens = block_tokens
        self.pages_per_block = pages_per_block
        self.capacity_blocks = capacity_blocks
        self.cap = -1 if capacity_blocks is None else capacity_blocks
        self.where: dict = {}  # key -> slot
        self.tier_cap = array("q", [0, host_blocks, ssd_blocks])  # per list: most blocks (list 0: unused)
        self.count = array("q", [0] * _LISTS)  # per lower tier: blocks held (count[0] unused: ``evictable``)
        self.moved = array("q", [0] * _LISTS)  # per lower tier: blocks the last acquire promoted from it
        self.n_refd = 0  # referenced (HBM) blocks
        self.evictable = 0  # unreferenced HBM blocks
        self.free = -1  # first free slot (-1: none)
        self.size = 0
        self.key: list = []  # per slot: its key (the request's own int object: dropping allocates none)
        self._zero = array("i", [0])
        self.ref = array("i")
        self.tier = array("i")
        self.prev = array("i")
        self.nxt = array("i")
        self._grow()
        for t in range(_LISTS):  # the sentinels: empty circular lists
            self.prev[t] = self.nxt[t] = t
        self.holders = None
        self.bit = 0
        self.nbit = -1

    def index_into(self, holders: dict, position: int) -> None:
        """Report this replica's blocks in ``holders`` as bit ``position`` (class docstring)."""
        self.holders = holders
        self.bit = 1 << position
        self.nbit = ~self.bit

    def _grow(self) -> None:
        """Twice the slots (at least 64), the new ones free: new arrays, never resized in
        place (the compiled build holds typed views of them)."""
        old = self.size
        size = max(64, 2 * old)
        ref, tier = array("i", [0]) * size, array("i", [0]) * size
        prev, nxt = array("i", [0]) * size, array("i", [0]) * size
        for i in range(old):
            ref[i], tier[i], prev[i], nxt[i] = self.ref[i], self.tier[i], self.prev[i], self.nxt[i]
        for i in range(old, size - 1):
            nxt[i] = i + 1
        nxt[size - 1] = self.free
        self.free = old if old >= _LISTS else _LISTS  # slots below _LISTS are the sentinels
        self.key.extend([None] * (size - old))
        self.ref, self.tier, self.prev, self.nxt = ref, tier, prev, nxt
        self.size = size

    def _unlink(self, s: int) -> None:
        p, n = self.prev[s], self.nxt[s]
        self.nxt[p] = n
        self.prev[n] = p

    def _push_back(self, t: int, s: int) -> None:
        """``s`` becomes the most recent block of list ``t``."""
        last = self.prev[t]
        self.nxt[last] = s
        self.prev[s] = last
        self.nxt[s] = t
        self.prev[t] = s

    def _new_slot(self, key: int) -> int:
        """A slot for ``key``, referenced once in HBM."""
        if self.free < 0:
            self._grow()
        s = self.free
        self.free = self.nxt[s]
        self.key[s] = key
        self.ref[s] = 1
        self.tier[s] = 0
        self.where[key] = s
        holders = self.holders
        if holders is not None:
            holders[key] = holders.get(key, 0) | self.bit
        return s

    def _drop(self, s: int) -> None:
        """Forget slot ``s`` (unlinked): its block leaves the replica."""
        key = self.key[s]
        del self.where[key]
        holders = self.holders
        if holders is not None:
            rest = holders[key] & self.nbit
            if rest:
                holders[key] = rest
            else:
                del holders[key]
        self.nxt[s] = self.free
        self.free = s

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
        where = self.where
        n = 0
        while n < usable and keys[n] in where:
            n += 1
        return n

    def new_slots(self, usable: int):
        """A zeroed ``array("i")`` of ``usable`` entries: a request's slots (:meth:`acquire`)."""
        return self._zero * usable

    def acquire(self, keys: tuple, slots, usable: int) -> int:
        """A request was admitted: reference the longest run of ``keys[:usable]`` present
        (its hit, returned), their slots written to ``slots[:hit]``. Blocks found in a
        lower tier are promoted to HBM; ``moved[t]``: how many from tier t."""
        where, ref, tier, count, moved = self.where, self.ref, self.tier, self.count, self.moved
        for t in range(1, _LISTS):
            moved[t] = 0
        n = 0
        while n < usable:
            s = where.get(keys[n], -1)
            if s < 0:
                break
            slots[n] = s
            n += 1
            if ref[s]:
                ref[s] += 1
                continue
            self._unlink(s)
            t = tier[s]
            if t:
                count[t] -= 1
                moved[t] += 1
                tier[s] = 0
            else:
                self.evictable -= 1
            ref[s] = 1
            self.n_refd += 1
        return n

    def moved_from(self, t: int) -> int:
        """Blocks the last :meth:`acquire` promoted from lower tier ``t``."""
        return self.moved[t]

    def _demote(self, s: int, t: int) -> None:
        """Slot ``s`` (unlinked, unreferenced) goes to the first lower tier from ``t`` on
        that exists, as its most recent block; a tier over its capacity passes its least
        recent block on the same way; past the last tier a block is dropped."""
        tier_cap, count = self.tier_cap, self.count
        while t < _LISTS:
            cap = tier_cap[t]
            if cap > 0:
                self.tier[s] = t
                self._push_back(t, s)
                count[t] += 1
                if count[t] <= cap:
                    return
                s = self.nxt[t]  # the tier's least recent block moves on
                self._unlink(s)
                count[t] -= 1
            t += 1
        self._drop(s)

    def _evict_oldest(self) -> None:
        """Evict the least recently used evictable HBM block (demoted: :meth:`_demote`)."""
        s = self.nxt[0]
        self._unlink(s)
        self.evictable -= 1
        self._demote(s, HOST)

    def commit(self, keys: tuple, slots, hit: int, usable: int) -> None:
        """The request's prefill started: its computed blocks ``keys[hit:usable]`` join the
        cache, referenced (a block another request computed meanwhile is shared; one in a
        lower tier is replaced by the HBM copy), their slots written to ``slots``; then
        evict down to the capacity."""
        where, ref, tier, count = self.where, self.ref, self.tier, self.count
        for i in range(hit, usable):
            key = keys[i]
            s = where.get(key, -1)
            if s < 0:
                s = self._new_slot(key)
                self.n_refd += 1
            elif ref[s]:
                ref[s] += 1
            else:
                self._unlink(s)
                t = tier[s]
                if t:
                    count[t] -= 1
                    tier[s] = 0
                else:
                    self.evictable -= 1
                ref[s] = 1
                self.n_refd += 1
            slots[i] = s
        cap = self.cap
        if cap >= 0:
            while self.evictable and self.n_refd + self.evictable > cap:
                self._evict_oldest()

    def release(self, slots, held: int) -> None:
        """The request left the replica: drop its references to the blocks of
        ``slots[:held]``, last block first; unreferenced blocks become the most recently
        used evictable ones."""
        ref = self.ref
        for i in range(held - 1, -1, -1):
            s = slots[i]
            ref[s] -= 1
            if not ref[s]:
                self.n_refd -= 1
                self.evictable += 1
                self._push_back(0, s)

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
