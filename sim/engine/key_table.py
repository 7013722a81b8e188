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


_B = 9  # an entry of BlockIndex.table: its bucket (key >> 3), then the masks of the bucket's 8 keys


def _free_buckets(n: int) -> array:
    """``n`` free entries of :class:`BlockIndex`'s table."""
    return array("q", [_EMPTY, 0, 0, 0, 0, 0, 0, 0, 0]) * n


class BlockIndex:
    """A pool's block index: per key, the bitmask of the pool's replicas holding the block
    (bit i: replica i, in any tier), kept by their caches as blocks enter and leave
    (:meth:`sim.engine.prefix_cache.PrefixCache.index_into`), read by the ``prefix_aware``
    router. A larger pool than 63 replicas keeps Python ints in a dict (``wide``).

    Up to 63 replicas the masks are C int64, in buckets of eight consecutive keys: a
    bucket's entry in ``table`` is 9 int64, its number (key >> 3) and its keys' masks (0:
    no replica). The entries form an open-addressing table like :class:`KeyTable`'s
    (linear probing from a multiplicative hash of the bucket number, at most half full,
    backward-shift deletion; a free entry has the number ``_EMPTY`` and zero masks). A
    cache's new blocks come as runs of consecutive keys (:meth:`add_run`), so a run of
    m blocks costs one probe per bucket it touches, about m / 8 + 1, not m.

    Args:
        replicas: the pool's replicas (>= 1).
    """

    __slots__ = ("narrow", "wide", "table", "tmask", "tshift", "tused", "held")

    def __init__(self, replicas: int) -> None:
        self.narrow = replicas <= _NARROW
        self.wide = None if self.narrow else {}
        self.held = 0  # keys with a replica (narrow)
        self.tused = 0
        self.tmask = 63
        self.tshift = 32 - 6
        self.table = _free_buckets(64)

    def _home(self, b: int) -> int:
        """Bucket ``b``'s first probe (Knuth's multiplicative hash, as :meth:`KeyTable._home`)."""
        return ((b & _LOW31) * _GOLDEN & _LOW32) >> self.tshift

    def _at(self, b: int) -> int:
        """The entry of bucket ``b``, or the free entry that ends its probe run."""
        mask = self.tmask
        i = self._home(b)
        while True:
            k = self.table[_B * i]
            if k == b or k == _EMPTY:
                return i
            i = (i + 1) & mask

    def _entry(self, b: int) -> int:
        """The entry of bucket ``b``, added (its masks 0) if absent."""
        i = self._at(b)
        if self.table[_B * i] == _EMPTY:
            if 2 * (self.tused + 1) > self.tmask + 1:
                self._rehash(2 * (self.tmask + 1))
                i = self._at(b)
            self.table[_B * i] = b
            self.tused += 1
        return i

    def _erase_at(self, i: int) -> None:
        """Free entry ``i`` (in use, its masks 0): the entries behind it in its probe run
        move back to keep every bucket reachable from its home."""
        mask = self.tmask
        j = i
        while True:
            j = (j + 1) & mask
            k = self.table[_B * j]
            if k == _EMPTY:
                break
            h = self._home(k)
            if (i <= j and i < h <= j) or (i > j and (h > i or h <= j)):
                continue  # its home lies between the hole and it: it stays
            for f in range(_B):
                self.table[_B * i + f] = self.table[_B * j + f]
            i = j
        self.table[_B * i] = _EMPTY
        for f in range(1, _B):
            self.table[_B * i + f] = 0
        self.tused -= 1

    def _rehash(self, buckets: int) -> None:
        old, n = self.table, self.tmask + 1
        self.table = _free_buckets(buckets)
        self.tmask = buckets - 1
        self.tshift = 32 - (buckets.bit_length() - 1)
        for i in range(n):
            b = old[_B * i]
            if b != _EMPTY:
                j = self._at(b)
                for f in range(_B):
                    self.table[_B * j + f] = old[_B * i + f]

    def add(self, key: int, position: int) -> None:
        """Replica ``position`` holds ``key``'s block."""
        self.add_run(key, 1, position)

    def add_run(self, key: int, length: int, position: int) -> None:
        """Replica ``position`` holds the blocks of keys ``key`` .. ``key + length - 1``."""
        if not self.narrow:
            for j in range(length):
                self.wide[key + j] = self.wide.get(key + j, 0) | (_ONE << position)
            return
        bit = 1
        bit <<= position  # an int64 shift when compiled
        b = -1
        i = 0
        for k in range(key, key + length):
            if k >> 3 != b:
                b = k >> 3
                i = self._entry(b)  # first: it may rehash, replacing self.table
            f = _B * i + 1 + (k & 7)
            if not self.table[f]:
                self.held += 1
            self.table[f] |= bit

    def remove(self, key: int, position: int) -> None:
        """Replica ``position`` no longer holds ``key``'s block (it did)."""
        if not self.narrow:
            wide_rest = self.wide[key] & ~(_ONE << position)
            if wide_rest:
                self.wide[key] = wide_rest
            else:
                del self.wide[key]
            return
        bit = 1
        bit <<= position
        i = self._at(key >> 3)
        f = _B * i + 1 + (key & 7)
        rest = self.table[f] & ~bit
        self.table[f] = rest
        if rest:
            return
        self.held -= 1
        for f in range(_B * i + 1, _B * i + _B):
            if self.table[f]:
                return
        self._erase_at(i)

    def remove_run(self, key: int, length: int, position: int) -> None:
        """Replica ``position`` no longer holds the blocks of keys ``key`` .. ``key +
        length - 1`` (it did): one probe per bucket."""
        if not self.narrow:
            for k in range(key, key + length):
                self.remove(k, position)
            return
        bit = 1
        bit <<= position
        k = key
        end = key + length
        while k < end:
            b = k >> 3
            i = self._at(b)
            stop = (b + 1) << 3  # the bucket's end
            if stop > end:
                stop = end
            while k < stop:
                f = _B * i + 1 + (k & 7)
                rest = self.table[f] & ~bit
                self.table[f] = rest
                if not rest:
                    self.held -= 1
                k += 1
            empty = True
            for f in range(_B * i + 1, _B * i + _B):
                if self.table[f]:
                    empty = False
                    break
            if empty:
                self._erase_at(i)

    def mask(self, key: int) -> int:
        """The int64 bitmask of the replicas holding ``key``'s block (0: none), of a pool
        of up to 63 replicas."""
        i = self._at(key >> 3)
        return self.table[_B * i + 1 + (key & 7)] if self.table[_B * i] == key >> 3 else 0

    def get(self, key: int):
        """The bitmask (a Python int) of the replicas holding ``key``'s block; 0: none."""
        if self.narrow:
            return self.mask(key)
        return self.wide.get(key, 0)

    def __len__(self) -> int:
        """Keys held by some replica."""
        return self.held if self.narrow else len(self.wide)
