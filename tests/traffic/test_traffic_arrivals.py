"""Arrival processes against queueing/renewal theory and against seeds."""

from __future__ import annotations

import time

import numpy as np
import pytest
from pydantic import ValidationError
from scipy.integrate import quad

from traffic.arrivals import ARRIVAL_ADAPTER, GammaArrivals, MMPPArrivals, PoissonArrivals
from traffic.distributions import AZURE_CONV_OUTPUT_LOGNORMAL, AZURE_CONV_PROMPT_LOGNORMAL, sample_tokens


def _cv(times: np.ndarray) -> float:
    gaps = np.diff(times)
    return float(gaps.std() / gaps.mean())


def _dispersion(times: np.ndarray, window_s: float, duration_s: float) -> float:
    counts = np.histogram(times, bins=np.arange(0.0, duration_s + window_s / 2, window_s))[0]
    return float(counts.var() / counts.mean())


def test_poisson_count_and_cv():
    rate, duration_s = 20.0, 10_000.0
    times = PoissonArrivals(rate_per_s=rate).arrival_times(np.random.default_rng(1), duration_s)
    expected = rate * duration_s
    assert abs(times.size - expected) < 5 * np.sqrt(expected)  # 5 sigma of a Poisson count
    assert _cv(times) == pytest.approx(1.0, abs=0.02)
    assert _dispersion(times, 10.0, duration_s) == pytest.approx(1.0, abs=0.1)


@pytest.mark.parametrize("make", [
    lambda: PoissonArrivals(rate_per_s=7.0),
    lambda: GammaArrivals(rate_per_s=7.0, cv=2.0),
    lambda: MMPPArrivals(rates_per_s=[1.0, 20.0], mean_dwell_s=[30.0, 5.0]),
    lambda: PoissonArrivals(rate_per_s=7.0, diurnal={"amplitude": 0.5, "period_s": 100.0}),
])
def test_times_sorted_within_horizon(make):
    times = make().arrival_times(np.random.default_rng(3), 500.0)
    assert times.dtype == np.float64 and times.ndim == 1 and times.size > 0
    assert np.all(np.diff(times) >= 0) and times[0] >= 0 and times[-1] < 500.0


def test_gamma_cv_and_rate():
    rate, cv, duration_s = 10.0, 3.0, 100_000.0
    times = GammaArrivals(rate_per_s=rate, cv=cv).arrival_times(np.random.default_rng(2), duration_s)
    assert _cv(times) == pytest.approx(cv, rel=0.03)
    assert times.size / duration_s == pytest.approx(rate, rel=0.02)


def test_gamma_cv_one_is_poisson_like():
    times = GammaArrivals(rate_per_s=5.0, cv=1.0).arrival_times(np.random.default_rng(4), 50_000.0)
    assert _cv(times) == pytest.approx(1.0, abs=0.02)


def test_mmpp_rate_and_overdispersion():
    # Hand-computed mean: (0.2*100 + 2*20) / (100 + 20) = 60/120 = 0.5 requests/s.
    # Over 1e6 s (~8300 on/off cycles) the rate estimate's relative s.d. is ~0.8%
    # (delta method on the time spent in each state), so 3% is about 4 sigma.
    process = MMPPArrivals(rates_per_s=[0.2, 2.0], mean_dwell_s=[100.0, 20.0])
    assert process.mean_rate_per_s == pytest.approx(0.5)
    duration_s = 1_000_000.0
    times = process.arrival_times(np.random.default_rng(5), duration_s)
    assert times.size / duration_s == pytest.approx(0.5, rel=0.03)
    assert _dispersion(times, 20.0, duration_s) > 3.0


def test_mmpp_three_states_mean():
    process = MMPPArrivals(rates_per_s=[0.0, 3.0, 9.0], mean_dwell_s=[10.0, 20.0, 10.0])
    assert process.mean_rate_per_s == pytest.approx((0 + 60 + 90) / 40)
    times = process.arrival_times(np.random.default_rng(6), 100_000.0)
    assert times.size / 100_000.0 == pytest.approx(3.75, rel=0.03)


def test_diurnal_peak_over_trough_ratio():
    amplitude, period_s, rate = 0.5, 1000.0, 10.0
    process = PoissonArrivals(rate_per_s=rate, diurnal={"amplitude": amplitude, "period_s": period_s})
    duration_s = 200 * period_s
    times = process.arrival_times(np.random.default_rng(7), duration_s)
    phase = (times % period_s) / period_s
    peak = np.count_nonzero((phase >= 0.125) & (phase < 0.375))
    trough = np.count_nonzero((phase >= 0.625) & (phase < 0.875))

    def integral(lo: float, hi: float) -> float:
        return quad(lambda x: 1 + amplitude * np.sin(2 * np.pi * x), lo, hi)[0]

    assert peak / trough == pytest.approx(integral(0.125, 0.375) / integral(0.625, 0.875), rel=0.03)
    assert times.size / duration_s == pytest.approx(rate, rel=0.01)
    assert process.mean_rate_per_s == rate


def test_diurnal_phase_shifts_peak():
    process = PoissonArrivals(rate_per_s=10.0, diurnal={"amplitude": 0.9, "period_s": 100.0, "phase_s": 50.0})
    times = process.arrival_times(np.random.default_rng(8), 100_000.0)
    phase = (times % 100.0) / 100.0
    assert np.count_nonzero(phase >= 0.5) > 3 * np.count_nonzero(phase < 0.5)


@pytest.mark.parametrize("make", [
    lambda: GammaArrivals(rate_per_s=4.0, cv=2.0, diurnal={"amplitude": 0.6, "period_s": 200.0}),
    lambda: MMPPArrivals(rates_per_s=[2.0, 6.0], mean_dwell_s=[5.0, 5.0], diurnal={"amplitude": 0.6, "period_s": 200.0}),
])
def test_diurnal_keeps_mean_rate(make):
    process = make()
    times = process.arrival_times(np.random.default_rng(9), 100_000.0)
    assert times.size / 100_000.0 == pytest.approx(4.0, rel=0.03)
    assert process.mean_rate_per_s == pytest.approx(4.0)


@pytest.mark.parametrize("config", [
    {"kind": "poisson", "rate_per_s": 3.0},
    {"kind": "gamma", "rate_per_s": 3.0, "cv": 2.5},
    {"kind": "mmpp", "rates_per_s": [1.0, 8.0], "mean_dwell_s": [10.0, 3.0], "diurnal": {"amplitude": 0.3, "period_s": 60}},
])
def test_same_seed_same_arrays(config):
    process = ARRIVAL_ADAPTER.validate_python(config)
    first = process.arrival_times(np.random.default_rng(42), 1000.0)
    again = process.arrival_times(np.random.default_rng(42), 1000.0)
    other = process.arrival_times(np.random.default_rng(43), 1000.0)
    np.testing.assert_array_equal(first, again)
    assert first.size != other.size or not np.array_equal(first, other)


@pytest.mark.parametrize(("config", "needle"), [
    ({"kind": "poisson", "rate_per_s": -1}, "rate_per_s"),
    ({"kind": "poisson", "rate_per_s": 1, "burst": 2}, "burst"),
    ({"kind": "gamma", "rate_per_s": 1, "cv": 0}, "cv"),
    ({"kind": "poisson", "rate_per_s": 1, "diurnal": {"amplitude": 1.0}}, "amplitude"),
    ({"kind": "poisson", "rate_per_s": 1, "diurnal": {"amplitude": 0.2, "period_s": 0}}, "period_s"),
    ({"kind": "mmpp", "rates_per_s": [1.0], "mean_dwell_s": [1.0]}, "rates_per_s"),
    ({"kind": "mmpp", "rates_per_s": [1.0, 2.0], "mean_dwell_s": [1.0]}, "mean_dwell_s"),
    ({"kind": "mmpp", "rates_per_s": [0, 0], "mean_dwell_s": [1.0, 1.0]}, "at least one rate"),
    ({"kind": "trace", "path": "x.csv", "format": "parquet"}, "azure_csv"),
    ({"kind": "trace", "path": "x.csv", "format": "azure_csv", "rate_scale": 0}, "rate_scale"),
    ({"kind": "trace", "path": "x.csv", "format": "azure_csv", "start_s": -1}, "start_s"),
    ({"kind": "bursty", "rate_per_s": 1}, "poisson"),
])
def test_bad_config_names_the_field(config, needle):
    with pytest.raises(ValidationError, match=needle):
        ARRIVAL_ADAPTER.validate_python(config)


def test_bad_duration_rejected():
    with pytest.raises(ValueError, match="duration_s"):
        PoissonArrivals(rate_per_s=1.0).arrival_times(np.random.default_rng(0), 0.0)


def test_360k_arrivals_and_lengths_fast():
    rng = np.random.default_rng(10)
    start = time.perf_counter()
    times = PoissonArrivals(rate_per_s=100.0, diurnal={"amplitude": 0.3}).arrival_times(rng, 3600.0)
    prompt = sample_tokens(AZURE_CONV_PROMPT_LOGNORMAL, rng, times.size)
    output = sample_tokens(AZURE_CONV_OUTPUT_LOGNORMAL, rng, times.size)
    elapsed_s = time.perf_counter() - start
    assert times.size > 300_000 and prompt.size == output.size == times.size
    assert elapsed_s < 0.5
