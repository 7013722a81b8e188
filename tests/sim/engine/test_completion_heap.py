"""The AR replica's completion heap against Python's heapq of ``(done, seq, request)``
tuples (what it replaced, a second implementation): for any sequence of pushes and pops,
with many equal completion counters, the same entries come out in the same order."""

from __future__ import annotations

import heapq

from hypothesis import given
from hypothesis import strategies as st

from sim.engine.completion_heap import NO_COMPLETION, CompletionHeap


class Tag:
    """A stand-in request (identity only; never compared)."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n


# an operation: push with a completion counter from a small range (ties are the rule), or pop
OPS = st.lists(st.one_of(st.integers(0, 12), st.none()), max_size=300)


@given(OPS)
def test_pops_in_the_order_of_a_heapq_of_tuples(ops):
    heap, reference = CompletionHeap(), []
    seq = 0
    for op in ops:
        if op is None:
            if not reference:
                continue
            done, want_seq, want = heapq.heappop(reference)
            assert heap.next_done() == done
            assert heap.first_seq() == want_seq
            assert heap.first() is want
            assert heap.pop() is want
        else:
            req = Tag(seq)
            heap.push(op, seq, req)
            heapq.heappush(reference, (op, seq, req))
            seq += 1
        assert heap.size == len(reference)
        assert heap.next_done() == (reference[0][0] if reference else NO_COMPLETION)
        assert sorted((s, r.n) for s, r in heap.entries()) == sorted((s, r.n) for _, s, r in reference)


def test_a_popped_request_is_no_longer_held():
    heap = CompletionHeap()
    held = [Tag(i) for i in range(20)]
    for i, req in enumerate(held):
        heap.push(100 - i, i, req)
    for _ in range(20):
        heap.pop()
    assert heap.size == 0 and heap.next_done() == NO_COMPLETION
    assert all(r is None for r in heap.reqs)
