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

from collections import OrderedDict


class PrefixCache:
    """The cached blocks of one replica (module docstring).

    Args:
        block_tokens: tokens per cached block (the hashes' block size).
        pages_per_block: the replica's KV paging blocks per cached block.
        capacity_blocks: most blocks held (referenced or evictable); None: bounded only
            by the replica's HBM.
    """

    __slots__ = ("block_tokens", "pages_per_block", "capacity_blocks", "refs", "lru", "host", "host_blocks")

    def __init__(self, block_tokens: int, pages_per_block: int, capacity_blocks: int | None,
                 host_blocks: int = 0) -> None:
        self.block_tokens = block_tokens
        self.pages_per_block = pages_per_block
        self.capacity_blocks = capacity_blocks
        self.host_blocks = host_blocks
        self.refs: dict[int, int] = {}  # referenced blocks: key -> running requests holding it
        self.lru: OrderedDict[int, None] = OrderedDict()  # evictable blocks, least recent first
        self.host: OrderedDict[int, None] = OrderedDict()  # blocks demoted to host memory, least recent first

    def usable(self, keys: tuple, prompt_tokens: int) -> int:
        """How many of ``keys`` a prompt of ``prompt_tokens`` can cache: its whole blocks
        short of its last token."""
        return min(len(keys), max(prompt_tokens - 1, 0) // self.block_tokens)

    def hit_blocks(self, keys: tuple, usable: int) -> int:
        """Leading keys of ``keys[:usable]`` present in the cache (read only)."""
        refs, lru, host = self.refs, self.lru, self.host
        n = 0
        while n < usable and (keys[n] in refs or keys[n] in lru or keys[n] in host):
            n += 1
        return n

    def acquire(self, keys: tuple, n: int) -> int:
        """Reference the first ``n`` keys (all present): a request was admitted on them.
        Blocks found in host memory are promoted to HBM; returns how many."""
        refs, lru, host = self.refs, self.lru, self.host
        moved = 0
        for key in keys[:n]:
            if key in lru:
                del lru[key]
                refs[key] = 1
            elif key in refs:
                refs[key] += 1
            else:
                del host[key]
                refs[key] = 1
                moved += 1
        return moved

    def _evict_oldest(self) -> None:
        """Drop the least recently used evictable HBM block, demoted to host memory when
        it has room for blocks (its own oldest dropped when full)."""
        key = self.lru.popitem(last=False)[0]
        if self.host_blocks:
            host = self.host
            host[key] = None
            if len(host) > self.host_blocks:
                host.popitem(last=False)

    def commit(self, keys: tuple, hit: int, usable: int) -> None:
        """The request's prefill ended: its computed blocks ``keys[hit:usable]`` join the
        cache, referenced (a block another request computed meanwhile is shared); then
        evict down to the capacity."""
        refs, lru, host = self.refs, self.lru, self.host
        for key in keys[hit:usable]:
            if key in refs:
                refs[key] += 1
            elif key in lru:
                del lru[key]
                refs[key] = 1
            else:
                if key in host:  # computed again: the HBM copy replaces it
                    del host[key]
                refs[key] = 1
        cap = self.capacity_blocks
        if cap is not None:
            while lru and len(refs) + len(lru) > cap:
                self._evict_oldest()

    def release(self, keys: tuple, held: int) -> None:
        """The request left the replica: drop its references to ``keys[:held]``, last
        block first; unreferenced blocks become the most recently used evictable ones."""
        refs, lru = self.refs, self.lru
        for i in range(held - 1, -1, -1):
            key = keys[i]
            count = refs[key] - 1
            if count:
                refs[key] = count
            else:
                del refs[key]
                lru[key] = None

    def trim_pages(self, free_pages: int) -> None:
        """Evict least recently used blocks until the evictable ones fit in
        ``free_pages`` paging blocks (the HBM the running sequences leave)."""
        lru, per = self.lru, self.pages_per_block
        keep = max(free_pages, 0) // per
        while len(lru) > keep:
            self._evict_oldest()

    @property
    def blocks(self) -> int:
        """Blocks held, referenced and evictable."""
        return len(self.refs) + len(self.lru)
