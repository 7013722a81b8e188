"""A replica's running sequences ordered by completion: the iteration counter at which
each completes, then admission order (a per-replica sequence number; unique, so the order
is total and every correct heap pops in the same order).

Entries are ``(done, seq, slot)`` triples of int64 in one ``array("q")`` buffer, a typed
contiguous view in the compiled build (``completion_heap.pxd``): sifting compares and
moves C integers in one small buffer. The request of an entry sits in ``reqs[slot]``,
which never moves, so a sift touches no request. The heap of ``(counter, seq, request)``
tuples it replaces allocated a tuple and two Python ints per admission, read them back
out of cache at every level of every sift, and untracked the tuple from the garbage
collector when it was popped.
"""

from __future__ import annotations

from array import array

NO_COMPLETION = 1 << 62
""":meth:`CompletionHeap.next_done` of an empty heap (above any iteration counter)."""

_DONE, _SEQ, _SLOT, _WIDTH = 0, 1, 2, 3  # an entry's fields, and its length in the buffer


class CompletionHeap:
    """Entries ``(done, seq, request)``: :meth:`push` one, read the first with
    :meth:`next_done` / :meth:`first_seq` / :meth:`first`, take it out with :meth:`pop`.
    ``size`` is the number of entries."""

    __slots__ = ("keys", "size", "capacity", "reqs", "free")

    def __init__(self) -> None:
        self.keys = array("q")  # entry i (heap order): keys[3i : 3i + 3] = done, seq, slot
        self.size = 0
        self.capacity = 0
        self.reqs: list = []  # per slot: its request (None when free)
        self.free: list[int] = []  # free slots

    def _grow(self) -> None:
        """Room for twice the entries (at least 8): a new buffer, never resized in place
        (the compiled build holds a typed view of it)."""
        old = self.capacity
        capacity = max(8, 2 * old)
        keys = array("q", [0]) * (_WIDTH * capacity)
        for i in range(_WIDTH * old):
            keys[i] = self.keys[i]
        self.keys = keys
        self.reqs.extend([None] * (capacity - old))
        self.free.extend(range(capacity - 1, old - 1, -1))  # the lowest slot on top
        self.capacity = capacity

    def push(self, done: int, seq: int, req) -> None:
        """Add ``req``'s sequence number ``seq``, completing at counter ``done``."""
        if self.size == self.capacity:
            self._grow()
        slot = self.free.pop()
        self.reqs[slot] = req
        keys = self.keys
        pos = self.size
        self.size += 1
        while pos > 0:  # sift up
            parent = (pos - 1) >> 1
            p = _WIDTH * parent
            if keys[p] < done or (keys[p] == done and keys[p + _SEQ] < seq):
                break
            q = _WIDTH * pos
            keys[q], keys[q + _SEQ], keys[q + _SLOT] = keys[p], keys[p + _SEQ], keys[p + _SLOT]
            pos = parent
        q = _WIDTH * pos
        keys[q], keys[q + _SEQ], keys[q + _SLOT] = done, seq, slot

    def next_done(self) -> int:
        """The first entry's completion counter; :data:`NO_COMPLETION` if empty."""
        return self.keys[_DONE] if self.size else NO_COMPLETION

    def first_seq(self) -> int:
        """The first entry's sequence number (the heap must not be empty)."""
        return self.keys[_SEQ]

    def first(self):
        """The first entry's request (the heap must not be empty)."""
        return self.reqs[self.keys[_SLOT]]

    def pop(self):
        """Take the first entry out; its request (the heap must not be empty)."""
        keys = self.keys
        slot = keys[_SLOT]
        req = self.reqs[slot]
        self.reqs[slot] = None
        self.free.append(slot)
        self.size -= 1
        size = self.size
        if size:  # the last entry sifts down from the top
            last = _WIDTH * size
            done, seq, moved = keys[last], keys[last + _SEQ], keys[last + _SLOT]
            pos = 0
            while True:
                child = 2 * pos + 1
                if child >= size:
                    break
                c = _WIDTH * child
                if child + 1 < size:
                    r = c + _WIDTH
                    if keys[r] < keys[c] or (keys[r] == keys[c] and keys[r + _SEQ] < keys[c + _SEQ]):
                        child += 1
                        c = r
                if done < keys[c] or (done == keys[c] and seq < keys[c + _SEQ]):
                    break
                q = _WIDTH * pos
                keys[q], keys[q + _SEQ], keys[q + _SLOT] = keys[c], keys[c + _SEQ], keys[c + _SLOT]
                pos = child
            q = _WIDTH * pos
            keys[q], keys[q + _SEQ], keys[q + _SLOT] = done, seq, moved
        return req

    def entries(self) -> list:
        """``(seq, request)`` of every entry, in no particular order."""
        keys = self.keys
        return [(keys[_WIDTH * i + _SEQ], self.reqs[keys[_WIDTH * i + _SLOT]]) for i in range(self.size)]
