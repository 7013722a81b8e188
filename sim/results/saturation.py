"""Saturation signals of a pool over the measurement window, from the run's time series.

"Busy 100%" says a replica always had work, not whether it was full. What shows
saturation is how full the batch was against ``max_batch``, how full the KV cache (or the
activation memory of a step-batched pool) was, and whether requests queued, more and
more. The engine samples every pool on a regular grid (``sim.engine.core._Sampler``);
over the samples inside [warmup_s, duration_s) this gives, per pool:

- ``max_batch`` (the pool's limit) and ``batch_mean``: time-average batch per replica (running sequences for autoregressive
  pools, sample-width for step-batched ones, busy slots for service pools; idle time
  counts as 0) and ``batch_fill_fraction`` = ``batch_mean`` / ``max_batch``;
- ``memory_used_mean_fraction`` / ``memory_used_peak_fraction``: KV cache in use over
  the KV capacity (autoregressive), reserved activation (+ diffusion-LM KV) bytes over the
  memory left after weights (step-batched); NaN for service pools;
- ``queue_mean`` / ``queue_max`` / ``queue_end``: requests waiting for admission (at the
  replicas and in the central queues that feed the pool), mean, largest, and at the
  last sample of the window;
- ``backlog_slope_per_s``, ``backlog_growth_share``, ``backlog_trend_p_value`` and
  ``unstable``: the trend test of :mod:`sim.results.stability` on the sampled backlog
  (outstanding + central queue), against the arrival rate of the workloads the pool
  serves (an upper bound on what enters the pool when several pools share a workload,
  so the share is conservative).

Samples are instants, so means are time averages only up to the sampling grid (at least
~500 instants over the whole run; see the sampler).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sim.results.stability import NO_TREND, backlog_trend, batch_means_of_samples

SATURATION_COLUMNS = (
    "max_batch", "batch_mean", "batch_fill_fraction", "memory_used_mean_fraction", "memory_used_peak_fraction",
    "queue_mean", "queue_max", "queue_end", "backlog_slope_per_s", "backlog_growth_share",
    "backlog_trend_p_value", "unstable",
)


def saturation_columns(series: pd.DataFrame, replicas: int, max_batch: int, t0_s: float, t1_s: float,
                       arrival_rate_per_s: float) -> dict:
    """The columns above for one pool. ``series``: that pool's rows of the run's time
    series (columns ``t_s``, ``outstanding``, ``queued``, ``central_queued``, ``running``,
    ``memory_used_fraction``)."""
    s = series[(series["t_s"] >= t0_s) & (series["t_s"] < t1_s)]
    if s.empty:
        empty = {c: (False if c == "unstable" else math.nan) for c in SATURATION_COLUMNS}
        return {**empty, "max_batch": max_batch}
    batch = s["running"].to_numpy(dtype=float) / replicas
    queue = (s["queued"] + s["central_queued"]).to_numpy(dtype=float)
    memory = s["memory_used_fraction"].to_numpy(dtype=float)
    backlog = (s["outstanding"] + s["central_queued"]).to_numpy(dtype=float)
    means = batch_means_of_samples(s["t_s"].to_numpy(), backlog, t0_s, t1_s)
    trend = backlog_trend(means, t0_s, t1_s, arrival_rate_per_s) if len(s) >= 3 else NO_TREND
    return {
        "max_batch": max_batch,
        "batch_mean": float(batch.mean()),
        "batch_fill_fraction": float(batch.mean()) / max_batch,
        "memory_used_mean_fraction": float(np.mean(memory)) if np.isfinite(memory).all() else math.nan,
        "memory_used_peak_fraction": float(np.max(memory)) if np.isfinite(memory).all() else math.nan,
        "queue_mean": float(queue.mean()),
        "queue_max": float(queue.max()),
        "queue_end": float(queue[-1]),
        "backlog_slope_per_s": trend.slope_per_s,
        "backlog_growth_share": trend.growth_share,
        "backlog_trend_p_value": trend.p_value,
        "unstable": trend.unstable,
    }
