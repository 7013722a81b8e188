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
    """A map of int64 keys (>= 0) to ``width`` − 1 int64 values each: an open-addressing
    table (``table``: entries of ``width`` int64, the key then its values; linear probing,
    at most half full; a key's first probe is in the group of eight entries a
    multiplicative hash of its high bits picks, :meth:`_home`; deletion shifts the
    entries behind back, so no tombstones; a free entry is ``_EMPTY`` then zeros). A
    lookup is one to a few probes in one or two cache lines. :meth:`get`, :meth:`put`
    and :meth:`erase` use one value (``width`` 2: the prefix caches' heads);
    :class:`BlockIndex` keeps eight per entry.

    Args:
        width: int64 per entry, the key's included (>= 2).
    """

    __slots__ = ("table", "tmask", "tshift", "tused", "width")

    def __init__(self, width: int = 2) -> None:
        self.width = width
        self.tused = 0
        self.tmask = 127
        self.tshift = 32 - 7
        self.table = self._free(128)

    def _free(self, entries: int) -> array:
        """``entries`` free entries."""
        return array("q", [_EMPTY] + [0] * (self.width - 1)) * entries

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
            k = self.table[self.width * i]
            if k == key or k == _EMPTY:
                return i
            i = (i + 1) & mask

    def get(self, key: int, missing: int) -> int:
        """The (first) value of ``key``; ``missing`` if absent."""
        i = self._at(key)
        return self.table[self.width * i + 1] if self.table[self.width * i] == key else missing

    def _entry(self, key: int) -> int:
        """The entry of ``key``, added with its values 0 if absent."""
        i = self._at(key)
        if self.table[self.width * i] == _EMPTY:
            if 2 * (self.tused + 1) > self.tmask + 1:
                self._rehash(2 * (self.tmask + 1))
                i = self._at(key)
            self.table[self.width * i] = key
            self.tused += 1
        return i

    def put(self, key: int, value: int) -> None:
        """Map ``key`` to ``value`` (added, or replacing its first value)."""
        i = self._entry(key)  # first: it may rehash, replacing self.table
        self.table[self.width * i + 1] = value

    def erase(self, key: int) -> None:
        """Unmap ``key`` (present)."""
        self._erase_at(self._at(key))

    def _erase_at(self, i: int) -> None:
        """Free entry ``i`` (in use): the entries behind it in its probe run move back to
        keep every key reachable from its home."""
        mask = self.tmask
        w = self.width
        j = i
        while True:
            j = (j + 1) & mask
            k = self.table[w * j]
            if k == _EMPTY:
                break
            h = self._home(k)
            if (i <= j and i < h <= j) or (i > j and (h > i or h <= j)):
                continue  # its home lies between the hole and it: it stays
            for f in range(w):
                self.table[w * i + f] = self.table[w * j + f]
            i = j
        self.table[w * i] = _EMPTY
        for f in range(1, w):
            self.table[w * i + f] = 0
        self.tused -= 1

    def _rehash(self, entries: int) -> None:
        old, n, w = self.table, self.tmask + 1, self.width
        self.table = self._free(entries)
        self.tmask = entries - 1
        self.tshift = 32 - (entries.bit_length() - 1)
        for i in range(n):
            k = old[w * i]
            if k != _EMPTY:
                j = self._at(k)
                for f in range(w):
                    self.table[w * j + f] = old[w * i + f]

    def __len__(self) -> int:
        return self.tused


_B = 9  # an entry of BlockIndex.buckets: its bucket (key >> 3), then the masks of the bucket's 8 keys


class BlockIndex:
    """A pool's block index: per key, the bitmask of the pool's replicas holding the block
    (bit i: replica i, in any tier), kept by their caches as blocks enter and leave
    (:meth:`sim.engine.prefix_cache.PrefixCache.index_into`), read by the ``prefix_aware``
    router. A larger pool than 63 replicas keeps Python ints in a dict (``wide``).

    Up to 63 replicas the masks are C int64, in buckets of eight consecutive keys: a
    :class:`KeyTable` of width 9 (``buckets``) keyed by the bucket's number (key >> 3),
    its values the eight keys' masks (0: no replica); a bucket leaves when its last mask
    clears. A cache's new blocks come as runs of consecutive keys (:meth:`add_run`), so a
    run of m blocks costs one probe per bucket it touches, about m / 8 + 1, not m.

    Args:
        replicas: the pool's replicas (>= 1).
    """

    __slots__ = ("narrow", "wide", "buckets", "held")

    def __init__(self, replicas: int) -> None:
        self.narrow = replicas <= _NARROW
        self.wide = None if self.narrow else {}
        self.buckets = KeyTable(_B)
        self.held = 0  # keys with a replica (narrow)

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
                i = self.buckets._entry(b)  # first: it may rehash, replacing its table
            f = _B * i + 1 + (k & 7)
            if not self.buckets.table[f]:
                self.held += 1
            self.buckets.table[f] |= bit

    def remove(self, key: int, position: int) -> None:
        """Replica ``position`` no longer holds ``key``'s block (it did)."""
        self.remove_run(key, 1, position)

    def remove_run(self, key: int, length: int, position: int) -> None:
        """Replica ``position`` no longer holds the blocks of keys ``key`` .. ``key +
        length - 1`` (it did): one probe per bucket."""
        if not self.narrow:
            for k in range(key, key + length):
                wide_rest = self.wide[k] & ~(_ONE << position)
                if wide_rest:
                    self.wide[k] = wide_rest
                else:
                    del self.wide[k]
            return
        bit = 1
        bit <<= position
        k = key
        end = key + length
        while k < end:
            b = k >> 3
            i = self.buckets._at(b)
            stop = (b + 1) << 3  # the bucket's end
            if stop > end:
                stop = end
            while k < stop:
                f = _B * i + 1 + (k & 7)
                rest = self.buckets.table[f] & ~bit
                self.buckets.table[f] = rest
                if not rest:
                    self.held -= 1
                k += 1
            empty = True
            for f in range(_B * i + 1, _B * i + _B):
                if self.buckets.table[f]:
                    empty = False
                    break
            if empty:
                self.buckets._erase_at(i)

    def mask(self, key: int) -> int:
        """The int64 bitmask of the replicas holding ``key``'s block (0: none), of a pool
        of up to 63 replicas."""
        i = self.buckets._at(key >> 3)
        return self.buckets.table[_B * i + 1 + (key & 7)] if self.buckets.table[_B * i] == key >> 3 else 0

    def get(self, key: int):
        """The bitmask (a Python int) of the replicas holding ``key``'s block; 0: none."""
        if self.narrow:
            return self.mask(key)
        return self.wide.get(key, 0)

    def __len__(self) -> int:
        """Keys held by some replica."""
        return self.held if self.narrow else len(self.wide)
