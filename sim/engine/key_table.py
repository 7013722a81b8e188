# cython: boundscheck=False, wraparound=False, initializedcheck=False
"""C tables keyed by prefix-block chain keys (:func:`traffic.prefix.chain_keys`: int64,
>= 0), for the prefix caches (:mod:`sim.engine.prefix_cache`) and their pool's block
index (the ``prefix_aware`` router, :class:`sim.engine.router.Router`).

Both are arrays of C integers, no Python object per key: a dict of ~16k int keys per
replica cost two cache misses per probe, a Python int per value, and a reallocation of
its table every few thousand insertions.
"""

from __future__ import annotations

from array import array

_EMPTY = -1  # a free entry (keys are >= 0)
_LOW31, _LOW32, _GOLDEN = 0x7FFFFFFF, 0xFFFFFFFF, 2654435761  # Fibonacci hashing (Knuth, TAOCP vol. 3, 6.4)
_NARROW = 63  # most replicas whose bitmasks fit an int64 (bits 0..62)
_ONE = 1  # a Python int (not declared in key_table.pxd): a wide mask's bit is shifted as one, never as a C int


class KeyTable:
    """A map of int64 keys (>= 0) to int64 values: an open-addressing table (``table``:
    pairs of int64 (key, value), linear probing, at most half full; a key's first probe
    is in the group of eight entries a multiplicative hash of its high bits picks,
    :meth:`_home`; deletion shifts the entries behind back, so no tombstones). A lookup
    is one to a few probes in one or two cache lines."""

    __slots__ = ("table", "tmask", "tshift", "tused")

    def __init__(self) -> None:
        self.tused = 0
        self.tmask = 127
        self.tshift = 32 - 7
        self.table = array("q", [_EMPTY]) * (2 * 128)

    def _home(self, key: int) -> int:
        """A key's first probe. Keys come in runs of consecutive integers (a request's new
        blocks get consecutive chain keys, :func:`traffic.prefix.chain_keys`, and they
        enter and leave a cache together), so the key's low three bits pick its entry
        within a group of eight (128 bytes of (key, value) pairs: two cache lines, which
        processors fetch as a pair) and the rest pick the group by Knuth's
        multiplicative hash (the top bits of the low 32 bits of its low 31 bits times
        2**32 / φ; below 2**63, so C and Python agree). A run of new keys touches an
        eighth of the lines a hash of every key would; the groups still land apart, so
        lookups stay short: 150,000 keys in runs of 1-40 at a quarter to half load took
        1.0-2.3 probes per present key on average (1.0-1.2 with every key hashed), the
        longest 81, each a step to the next entry. On the Mooncake prefix_aware + SSD
        fleet the block index's insertions took 315 profile samples against 626."""
        return ((((key >> 3) & _LOW31) * _GOLDEN & _LOW32) >> (self.tshift + 3) << 3) | (key & 7)

    def _at(self, key: int) -> int:
        """The entry of ``key``, or the free entry that ends its probe run."""
        mask = self.tmask
        i = self._home(key)
        while True:  # self.table, not a local: a local typed view costs two atomic operations
            k = self.table[2 * i]
            if k == key or k == _EMPTY:
                return i
            i = (i + 1) & mask

    def get(self, key: int, missing: int) -> int:
        """The value of ``key``; ``missing`` if absent."""
        i = self._at(key)
        return self.table[2 * i + 1] if self.table[2 * i] == key else missing

    def _entry(self, key: int) -> int:
        """The entry of ``key``, added with value 0 if absent."""
        i = self._at(key)
        if self.table[2 * i] == _EMPTY:
            if 2 * (self.tused + 1) > self.tmask + 1:
                self._rehash(2 * (self.tmask + 1))
                i = self._at(key)
            self.table[2 * i] = key
            self.table[2 * i + 1] = 0
            self.tused += 1
        return i

    def put(self, key: int, value: int) -> None:
        """Map ``key`` to ``value`` (added, or replacing its value)."""
        i = self._entry(key)  # first: it may rehash, replacing self.table
        self.table[2 * i + 1] = value

    def erase(self, key: int) -> None:
        """Unmap ``key`` (present)."""
        self._erase_at(self._at(key))

    def _erase_at(self, i: int) -> None:
        """Free entry ``i`` (in use): the entries behind it in its probe run move back to
        keep every key reachable from its home."""
        mask = self.tmask
        j = i
        while True:
            j = (j + 1) & mask
            k = self.table[2 * j]
            if k == _EMPTY:
                break
            h = self._home(k)
            if (i <= j and i < h <= j) or (i > j and (h > i or h <= j)):
                continue  # its home lies between the hole and it: it stays
            self.table[2 * i] = k
            self.table[2 * i + 1] = self.table[2 * j + 1]
            i = j
        self.table[2 * i] = _EMPTY
        self.tused -= 1

    def _rehash(self, buckets: int) -> None:
        old, n = self.table, self.tmask + 1
        self.table = array("q", [_EMPTY]) * (2 * buckets)
        self.tmask = buckets - 1
        self.tshift = 32 - (buckets.bit_length() - 1)
        self.tused = 0
        for i in range(n):
            if old[2 * i] != _EMPTY:
                self.put(old[2 * i], old[2 * i + 1])

    def __len__(self) -> int:
        return self.tused


class BlockIndex:
    """A pool's block index: per key, the bitmask of the pool's replicas holding the block
    (bit i: replica i, in any tier), kept by their caches as blocks enter and leave
    (:meth:`sim.engine.prefix_cache.PrefixCache.index_into`), read by the ``prefix_aware``
    router. Up to 63 replicas the masks are C int64 in a :class:`KeyTable`; a larger pool
    keeps Python ints in a dict.

    Args:
        replicas: the pool's replicas (>= 1).
    """

    __slots__ = ("masks", "wide")

    def __init__(self, replicas: int) -> None:
        self.masks = KeyTable() if replicas <= _NARROW else None
        self.wide = None if replicas <= _NARROW else {}

    def add(self, key: int, position: int) -> None:
        """Replica ``position`` holds ``key``'s block."""
        if self.masks is not None:
            bit = 1
            bit <<= position  # an int64 shift when compiled
            i = self.masks._entry(key)  # one probe: the table's entry is updated in place
            self.masks.table[2 * i + 1] |= bit
        else:
            self.wide[key] = self.wide.get(key, 0) | (_ONE << position)

    def remove(self, key: int, position: int) -> None:
        """Replica ``position`` no longer holds ``key``'s block (it did)."""
        if self.masks is not None:
            bit = 1
            bit <<= position
            i = self.masks._at(key)
            rest = self.masks.table[2 * i + 1] & ~bit
            if rest:
                self.masks.table[2 * i + 1] = rest
            else:
                self.masks._erase_at(i)
        else:
            wide_rest = self.wide[key] & ~(_ONE << position)
            if wide_rest:
                self.wide[key] = wide_rest
            else:
                del self.wide[key]

    def get(self, key: int):
        """The bitmask (a Python int) of the replicas holding ``key``'s block; 0: none."""
        if self.masks is not None:
            return self.masks.get(key, 0)
        return self.wide.get(key, 0)

    def __len__(self) -> int:
        """Keys held by some replica."""
        return len(self.masks) if self.masks is not None else len(self.wide)
