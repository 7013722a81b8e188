"""A binary min-heap of slots that knows where each slot sits, so a slot whose key
changed is sifted in place (O(log n)) instead of pushed again with the old entry left
behind as garbage. Subclasses own the keys and define the order (:meth:`_before`):
:class:`sim.engine.timer.ReplicaClock` (replica timers by instant, then priority) and
:class:`sim.engine.router._MinIndex` (replicas by routing key, then position).

Positions live in ``array("q")`` buffers, typed ``int64`` views in the compiled build
(``indexed_heap.pxd``), so sifting compares and moves C integers, not Python tuples.
"""

from __future__ import annotations

from array import array


class IndexedHeap:
    """Slots ``0 … capacity-1``; ``heap[:size]`` holds the slots in the heap, ``where[s]``
    is slot ``s``'s position in it, or -1."""

    __slots__ = ("heap", "where", "size", "capacity")

    def _init_heap(self, capacity: int) -> None:
        self.size = 0
        self.capacity = 0
        self.heap = array("q")
        self.where = array("q")
        self._grow_heap(capacity)

    def _grow_heap(self, capacity: int) -> None:
        """New buffers of ``capacity`` slots with the old contents (never resized in
        place: the compiled build holds typed views of them)."""
        heap, where = array("q", [0]) * capacity, array("q", [-1]) * capacity
        for i in range(self.capacity):
            heap[i], where[i] = self.heap[i], self.where[i]
        self.heap, self.where = heap, where
        self.capacity = capacity

    def _before(self, a: int, b: int) -> bool:
        """Does slot ``a`` come before slot ``b``? (subclasses)"""
        raise NotImplementedError

    def _place(self, pos: int, slot: int) -> None:
        self.heap[pos] = slot
        self.where[slot] = pos

    def _sift_up(self, pos: int) -> int:
        """Move the slot at ``pos`` up to its place; its final position. (``_place``
        is written out in the loops: a call per level costs the source build dearly.)"""
        heap, where = self.heap, self.where
        slot = heap[pos]
        while pos > 0:
            parent = (pos - 1) >> 1
            above = heap[parent]
            if not self._before(slot, above):
                break
            heap[pos] = above
            where[above] = pos
            pos = parent
        heap[pos] = slot
        where[slot] = pos
        return pos

    def _sift_down(self, pos: int) -> None:
        heap, where, size = self.heap, self.where, self.size
        slot = heap[pos]
        while True:
            child = 2 * pos + 1
            if child >= size:
                break
            right = child + 1
            if right < size and self._before(heap[right], heap[child]):
                child = right
            below = heap[child]
            if not self._before(below, slot):
                break
            heap[pos] = below
            where[below] = pos
            pos = child
        heap[pos] = slot
        where[slot] = pos

    def _restore(self, pos: int) -> None:
        """The key of the slot at ``pos`` changed: sift it whichever way it must go."""
        if self._sift_up(pos) == pos:
            self._sift_down(pos)

    def _push(self, slot: int) -> None:
        pos = self.size
        self.size += 1
        self._place(pos, slot)
        self._sift_up(pos)

    def _remove(self, pos: int) -> None:
        """Take the slot at ``pos`` out of the heap."""
        self.where[self.heap[pos]] = -1
        self.size -= 1
        if pos < self.size:
            self._place(pos, self.heap[self.size])
            self._restore(pos)
