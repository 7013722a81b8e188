"""Arrivals drawn a chunk at a time (traffic/chunks.py) are still the processes they claim.

ARRIVAL_CHUNK is made small so every process below crosses tens to hundreds of chunks:
split Poisson pieces, MMPP sojourns grouped and cut, renewal gaps carried over from one
chunk to the next, diurnal thinning per chunk, a looped trace replayed copy by copy.
Independent truth: Poisson counts and uniform placement (5-sigma bounds, a KS test),
renewal-theory CV, a hand-written draw of the whole span for a one-chunk process, and
the raw trace rows for a replay.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import traffic.chunks as chunks
from traffic.arrivals import GammaArrivals, MMPPArrivals, PoissonArrivals, TraceArrivals
from traffic.demand_fit import FittedArrivals
from tests.data_files import TRACES

SMALL = 50


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(chunks, "ARRIVAL_CHUNK", SMALL)


PROCESSES = {
    "poisson": (PoissonArrivals(rate_per_s=20.0), 2_000.0),
    "gamma": (GammaArrivals(rate_per_s=10.0, cv=3.0), 5_000.0),
    "mmpp": (MMPPArrivals(rates_per_s=[1.0, 40.0], mean_dwell_s=[60.0, 20.0]), 4_000.0),
    "diurnal": (PoissonArrivals(rate_per_s=20.0, diurnal={"amplitude": 0.6, "period_s": 500.0}), 2_000.0),
    "fitted": (FittedArrivals(rate_per_s=0.5, daily=[0.2] * 12 + [1.8] * 12, cv=2.0), 3 * 86_400.0),
}


@pytest.mark.parametrize("name", sorted(PROCESSES))
def test_chunks_are_consecutive_sorted_and_small(small_chunks, name):
    process, duration_s = PROCESSES[name]
    parts = [c.times_s for c in process.arrival_chunks(np.random.default_rng(1), duration_s)]
    assert len(parts) > 20
    for before, after in zip(parts, parts[1:]):
        if len(before) and len(after):
            assert before[-1] <= after[0]
    whole = np.concatenate(parts)
    assert np.all(np.diff(whole) >= 0) and whole[0] >= 0 and whole[-1] < duration_s
    # a chunk holds about SMALL arrivals: far fewer than the whole, never runaway
    assert max(len(p) for p in parts) <= 4 * SMALL
    again = process.arrival_times(np.random.default_rng(1), duration_s)
    np.testing.assert_array_equal(whole, again)


def test_split_poisson_count_and_placement(small_chunks):
    """One piece of 40,000 expected arrivals cut into 800 sub-pieces: the count is
    Poisson (within 5 sigma), the instants uniform on the span (KS), the gaps
    exponential (CV 1)."""
    rate, duration_s = 20.0, 2_000.0
    times = PoissonArrivals(rate_per_s=rate).arrival_times(np.random.default_rng(2), duration_s)
    expected = rate * duration_s
    assert abs(times.size - expected) < 5 * np.sqrt(expected)
    assert stats.kstest(times / duration_s, "uniform").pvalue > 1e-3
    gaps = np.diff(times)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.03)


def test_mmpp_long_sojourns_are_cut_and_keep_their_rates(small_chunks):
    """Dwell of ~1,000 s at 40/s (40,000 expected in one sojourn, cut into sub-pieces):
    the long-run rate is Σ rate·dwell / Σ dwell = (1·1000 + 40·1000)/2000 = 20.5/s."""
    process = MMPPArrivals(rates_per_s=[1.0, 40.0], mean_dwell_s=[1_000.0, 1_000.0])
    duration_s = 200_000.0
    times = process.arrival_times(np.random.default_rng(3), duration_s)
    assert times.size / duration_s == pytest.approx(20.5, rel=0.1)
    assert np.all(np.diff(times) >= 0)


def test_renewal_gaps_across_chunks_keep_the_cv(small_chunks):
    """Gamma gaps of CV 3 summed on across ~1,000 chunks: gap CV and rate hold (renewal
    theory; a restart at each chunk boundary would add a spurious first gap)."""
    rate, cv, duration_s = 10.0, 3.0, 5_000.0
    times = GammaArrivals(rate_per_s=rate, cv=cv).arrival_times(np.random.default_rng(4), duration_s)
    gaps = np.diff(times)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.08)
    assert times.size / duration_s == pytest.approx(rate, rel=0.1)


def test_one_chunk_process_draws_as_the_whole_span():
    """At most ARRIVAL_CHUNK expected arrivals: the count then sorted uniforms over the
    span, drawn here by hand from the same seed."""
    rate, duration_s = 3.0, 1_000.0
    rng = np.random.default_rng(5)
    count = rng.poisson(rate * duration_s)
    want = np.sort(rng.uniform(0.0, duration_s, size=count))
    got = PoissonArrivals(rate_per_s=rate).arrival_times(np.random.default_rng(5), duration_s)
    np.testing.assert_array_equal(got, want)


def test_looped_trace_replays_every_row_copy_by_copy(small_chunks):
    """A looped Azure conv replay over 2.5 periods, in chunks of at most SMALL rows of one
    copy: the rows are the trace's rows in order, repeated, and copy c is shifted by c
    periods (period = span + mean gap, from the raw CSV)."""
    import pandas as pd

    path = TRACES / "AzureLLMInferenceTrace_conv.csv"
    raw = pd.read_csv(path)
    created = pd.to_datetime(raw["TIMESTAMP"])
    offsets = ((created - created.iloc[0]).dt.total_seconds()).to_numpy()
    offsets = np.sort(offsets)
    period_s = offsets[-1] + (offsets[-1] - offsets[0]) / (offsets.size - 1)
    process = TraceArrivals(path=path, format="azure_csv", loop=True)
    duration_s = 2.5 * period_s
    parts = list(process.arrival_chunks(None, duration_s))
    assert max(len(p.times_s) for p in parts) <= SMALL
    times = np.concatenate([p.times_s for p in parts])
    rows = np.concatenate([p.rows for p in parts])
    n = offsets.size
    assert times.size == 2 * n + np.count_nonzero(offsets + 2 * period_s < duration_s)
    np.testing.assert_array_equal(rows[:n], np.arange(n))
    np.testing.assert_array_equal(rows[n:2 * n], np.arange(n))
    np.testing.assert_allclose(times[n:2 * n] - times[:n], period_s, rtol=1e-9)


def test_mmpp_with_too_many_state_changes_is_refused_before_drawing():
    """Sojourns are drawn at once, so their count has its own cap: 2 states of 1 ms mean
    dwell over 30 days is 2.6e9 state changes, refused naming them; arrivals themselves
    are capped at MAX_ARRIVALS only (drawn in chunks)."""
    from sim.errors import UserError
    from traffic.limits import MAX_STATE_CHANGES

    process = MMPPArrivals(rates_per_s=[0.001, 0.002], mean_dwell_s=[1e-3, 1e-3])
    with pytest.raises(UserError, match=f"state changes; the limit is {MAX_STATE_CHANGES:,}"):
        process.arrival_chunks(np.random.default_rng(0), 30 * 86_400.0)  # at the call, not when iterated
