"""Is a backlog growing through the measurement window? A trend test on batch means.

A queue that cannot keep up (arrival rate λ above what the fleet serves) gains
λ − served requests per second for as long as the overload lasts; a stable queue
fluctuates around a level. "Measured requests still in flight after the drain" catches
the first only when the drain is too short, so dcsim also tests the backlog itself:

1. Cut the window [t0, t1) into :data:`BATCHES` equal batches and take the time-average
   backlog over each (the *batch means* of simulation output analysis: Law & Kelton,
   *Simulation Modeling and Analysis*, 5th ed., 2015, §9.5.3; averaging over a batch
   much longer than the queue's relaxation time leaves nearly independent means).
2. Fit a least-squares line through the batch means against the batch mid-points and test
   H0 "slope ≤ 0" against "slope > 0" with the Student t test of the slope
   (``scipy.stats.linregress(..., alternative="greater")``).
3. Flag the backlog ``unstable`` when the slope is significant (p < :data:`P_VALUE_MAX`)
   **and** material: it gains at least :data:`GROWTH_SHARE_MIN` (1%) of the arrival rate,
   i.e. at least one arrival in a hundred is not being served — over the whole window
   **and** over its second half (the last 10 batches), so the backlog grows *through*
   the window. The materiality condition keeps a stable queue whose slow drift happens
   to be significant from being flagged (a stable queue can gain at most its mean level
   over the window, W / window of the arrivals by Little's law) and sets what
   "overloaded" means: an overload below 1% of the arrivals is not flagged. The
   second-half condition keeps a fill-up transient (a run without warm-up starts empty)
   or a load ramp that levels off (a trace whose rate rises, then holds) from being
   flagged; a sustained overload grows in both.

False alarms and detection, measured by ``tests/sim/results/test_stability.py`` on M/M/c
runs (central queue, exponential service) at 30 seeds per load: no stable run at loads
up to ρ = 0.9 is flagged and every run at ρ ≥ 1.1 is (see the test for the counts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

BATCHES = 20
P_VALUE_MAX = 0.01
GROWTH_SHARE_MIN = 0.01


@dataclass(frozen=True, slots=True)
class Trend:
    """Backlog trend over a window: least-squares growth in requests per second, the
    one-sided p-value of "it grows", growth as a share of the arrival rate, the verdict."""

    slope_per_s: float
    p_value: float
    growth_share: float
    unstable: bool


NO_TREND = Trend(math.nan, math.nan, math.nan, False)


def backlog_trend(batch_means: np.ndarray, t0_s: float, t1_s: float, arrival_rate_per_s: float) -> Trend:
    """Trend test (module docstring) on ``batch_means``: equal batches covering
    [t0_s, t1_s); NaN entries (batches without samples) are left out. The backlog must
    grow both over the whole window and over its second half (so a fill-up transient or
    a load ramp that levels off is not flagged); the reported slope, p-value and share
    are the whole window's. Fewer than 3 usable batches in either, or no arrivals:
    :data:`NO_TREND` (not flagged)."""
    means = np.asarray(batch_means, dtype=float)
    k = len(means)
    mids = t0_s + (np.arange(k) + 0.5) * (t1_s - t0_s) / max(k, 1)
    whole = _fit(mids, means, arrival_rate_per_s)
    late = _fit(mids[k // 2:], means[k // 2:], arrival_rate_per_s)
    if whole is NO_TREND or late is NO_TREND:
        return NO_TREND
    return Trend(whole.slope_per_s, whole.p_value, whole.growth_share, whole.unstable and late.unstable)


def _fit(x: np.ndarray, y: np.ndarray, arrival_rate_per_s: float) -> Trend:
    ok = np.isfinite(y)
    if ok.sum() < 3 or not arrival_rate_per_s > 0:
        return NO_TREND
    x, y = x[ok], y[ok]
    if np.ptp(y) == 0:
        return Trend(0.0, 1.0, 0.0, False)
    fit = stats.linregress(x, y, alternative="greater")
    share = fit.slope / arrival_rate_per_s
    return Trend(float(fit.slope), float(fit.pvalue), float(share),
                 bool(fit.pvalue < P_VALUE_MAX and share >= GROWTH_SHARE_MIN))


def batch_means_of_intervals(start_s: np.ndarray, end_s: np.ndarray, t0_s: float, t1_s: float,
                             batches: int = BATCHES) -> np.ndarray:
    """Exact time-average number of open intervals [start, end) in each of ``batches``
    equal batches of [t0_s, t1_s) (end NaN = still open). For requests: the number in
    system, from arrival to completion."""
    edges = np.linspace(t0_s, t1_s, batches + 1)
    return np.diff(interval_area(start_s, end_s, edges)) / np.diff(edges)


def interval_area(start_s: np.ndarray, end_s: np.ndarray, edges_s: np.ndarray) -> np.ndarray:
    """∫_{-∞}^{x} N(t) dt at every x of ``edges_s`` (request-seconds; same shape as
    ``edges_s``), N(t) the number of open intervals [start, end) at t (end NaN = still
    open): Σ clip(x − start, 0, end − start). Additive over intervals, so a streamed run
    sums it batch by batch (``sim/results/streaming.py``)."""
    start = np.asarray(start_s, dtype=float)
    end = np.asarray(end_s, dtype=float)
    end = np.where(np.isnan(end), np.inf, end)
    return np.array([np.clip(x - start, 0.0, end - start).sum() for x in edges_s])


def batch_means_of_samples(t_s: np.ndarray, values: np.ndarray, t0_s: float, t1_s: float,
                           batches: int = BATCHES) -> np.ndarray:
    """Mean of the samples falling in each of ``batches`` equal batches of [t0_s, t1_s)
    (NaN for a batch without samples). Samples on a regular grid make this the time
    average of the sampled quantity."""
    t = np.asarray(t_s, dtype=float)
    v = np.asarray(values, dtype=float)
    inside = (t >= t0_s) & (t < t1_s)
    index = np.minimum(((t[inside] - t0_s) / (t1_s - t0_s) * batches).astype(int), batches - 1)
    sums = np.bincount(index, weights=v[inside], minlength=batches)
    counts = np.bincount(index, minlength=batches)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
