"""Arrivals drawn a chunk at a time, so a long run never holds all its arrivals at once.

Every arrival process yields its arrivals as :class:`ArrivalChunk` s in time order (each
sorted, every instant of one chunk at or before every instant of the next; at least one
chunk, possibly empty) with about :data:`ARRIVAL_CHUNK` arrivals in each, drawing from its
generator as it goes. The whole
demand of a process *is* the concatenation of its chunks: ``arrival_times`` concatenates
them, and a streamed run (:class:`sim.engine.demand.DemandStream`) consumes the same
chunks one by one, so both see identical instants. Chunk boundaries depend only on the
process and the duration, never on how the chunks are consumed.

A process whose expected count is at most :data:`ARRIVAL_CHUNK` draws exactly one chunk,
with the same draws in the same order as drawing the whole span at once.
"""

from __future__ import annotations

import math
from typing import Iterator, NamedTuple

import numpy as np

from traffic.limits import check_count

ARRIVAL_CHUNK = 1 << 16
"""Expected arrivals per chunk (about 0.5 MB of instants)."""


class ArrivalChunk(NamedTuple):
    """Consecutive arrivals: ``times_s`` float64 seconds, sorted, shape (k,); ``rows`` the
    int64 trace row of each (replays) or None (synthetic processes)."""

    times_s: np.ndarray
    rows: np.ndarray | None = None


def concatenate(chunks: Iterator[ArrivalChunk]) -> ArrivalChunk:
    """All chunks of a process (there is at least one) as one; rows None unless the
    chunks carry rows."""
    parts = list(chunks)
    times = np.concatenate([p.times_s for p in parts])
    rows = None if parts[0].rows is None else np.concatenate([p.rows for p in parts])
    return ArrivalChunk(times, rows)


def piecewise_poisson(rng: np.random.Generator, start_s: np.ndarray, length_s: np.ndarray,
                      rate_per_s: np.ndarray) -> Iterator[np.ndarray]:
    """A Poisson process of rate ``rate_per_s[i]`` on each piece
    [start_s[i], start_s[i] + length_s[i]) (pieces contiguous and in time order; all
    shape (m,)), in chunks: per chunk of pieces, the count of each piece (Poisson of
    mean rate · length) then its instants uniform on the piece, sorted.

    A piece expecting more than :data:`ARRIVAL_CHUNK` arrivals is cut into equal
    sub-pieces first (a Poisson process restricted to disjoint intervals is independent
    Poisson processes, so the cut changes nothing but the draw order); consecutive pieces
    are grouped while their expected total stays within :data:`ARRIVAL_CHUNK`. Yields
    float64 arrays, each sorted and inside its pieces' span.
    """
    expected = rate_per_s * length_s
    if expected.sum() > ARRIVAL_CHUNK:
        cuts = np.maximum(np.ceil(expected / ARRIVAL_CHUNK), 1).astype(np.int64)
        piece = np.repeat(np.arange(expected.size), cuts)
        j = np.arange(piece.size) - np.repeat(np.cumsum(cuts) - cuts, cuts)
        k, base, span = cuts[piece], start_s[piece], length_s[piece]
        lo = base + span * j / k
        hi = np.where(j + 1 == k, base + span, base + span * (j + 1) / k)  # the last sub-piece ends exactly
        start_s, length_s, rate_per_s = lo, hi - lo, rate_per_s[piece]
        expected = rate_per_s * length_s
    first, held = 0, 0.0
    for i in range(expected.size + 1):
        if i < expected.size and (held == 0.0 or held + expected[i] <= ARRIVAL_CHUNK):
            held += expected[i]
            continue
        if i > first:
            yield _uniform_arrivals(rng, start_s[first:i], length_s[first:i], rate_per_s[first:i])
        if i < expected.size:
            first, held = i, expected[i]


def _uniform_arrivals(rng: np.random.Generator, start_s: np.ndarray, length_s: np.ndarray,
                      rate_per_s: np.ndarray) -> np.ndarray:
    counts = rng.poisson(rate_per_s * length_s)
    offsets = rng.random(int(counts.sum())) * np.repeat(length_s, counts)
    times = np.sort(np.repeat(start_s, counts) + offsets)
    # U·length < length, but the sum can round up to the span's end: keep it inside
    return np.minimum(times, np.nextafter(start_s[-1] + length_s[-1], -math.inf))


def renewal(rng: np.random.Generator, shape: float, gap_scale: float, expected: float, cv: float,
            end: float) -> Iterator[np.ndarray]:
    """A renewal process from 0 with gamma gaps (``shape``, ``gap_scale``), instants in
    [0, end), in chunks: gaps are drawn :data:`ARRIVAL_CHUNK` at a time (or, for a short
    span, ``expected`` + 6 standard deviations + 16 at once, one chunk) and summed on
    from the last instant. Yields float64 arrays, each sorted."""
    chunk = min(int(expected + 6.0 * cv * math.sqrt(expected) + 16), ARRIVAL_CHUNK)
    last = 0.0
    while last < end:
        times = last + np.cumsum(rng.gamma(shape, gap_scale, size=chunk))
        last = float(times[-1])
        yield times[times < end]


def replay(offsets_s: np.ndarray, rows: np.ndarray, rate_scale: float, period_s: float | None,
           duration_s: float, what: str) -> Iterator[ArrivalChunk]:
    """A recorded segment (offsets sorted, with the trace row of each) replayed: offset
    t arrives at t / rate_scale; with ``period_s`` (looping) copy c of the segment is
    shifted by c · period_s first. Instants in [0, duration_s), in chunks of at most
    :data:`ARRIVAL_CHUNK` rows of one copy.

    Raises (at the call, before any chunk):
        UserError: more arrivals than :data:`traffic.limits.MAX_ARRIVALS` (``what`` names
            the trace).
    """
    copies = 1 if period_s is None else int(duration_s * rate_scale // period_s) + 1
    if period_s is None:
        check_count(int(np.count_nonzero(offsets_s / rate_scale < duration_s)), what)
    else:
        check_count(copies * offsets_s.size, f"{what} looped {copies:,} times")
    return _replay(offsets_s, rows, rate_scale, period_s, duration_s, copies)


def _replay(offsets_s, rows, rate_scale, period_s, duration_s, copies) -> Iterator[ArrivalChunk]:
    yielded = False
    for copy in range(copies):
        shifted = offsets_s if period_s is None else offsets_s + period_s * copy
        times_s = shifted / rate_scale
        keep = times_s < duration_s
        times_s, kept = times_s[keep], rows[keep]
        for start in range(0, times_s.size, ARRIVAL_CHUNK):
            yield ArrivalChunk(times_s[start:start + ARRIVAL_CHUNK], kept[start:start + ARRIVAL_CHUNK])
            yielded = True
    if not yielded:
        yield ArrivalChunk(np.empty(0), rows[:0])
