"""The result table ``dcsim sweep`` prints: one row per swept values × fleet × workload,
the key metrics as ``mean [95% CI]`` across seeds (see :func:`sim.studies.sweep._ci`),
and whether the row is on its Pareto front.

The Pareto front (lower $/request and lower p99 latency: TTFT for token workloads, E2E
for the others, :func:`sim.results.charts.pareto_latency`, as on the Pareto chart) is
taken among the fleets of one workload at one set of swept values, so it never mixes load levels, and
only among fleets that qualify there (:func:`sim.results.qualify.fleet_qualifying_rows`: every
workload's mean SLO attainment at or above its target and no unstable seed); the others are marked
"excluded (workload: reason)"."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pandas as pd

from sim.results.charts import pareto_latency, pareto_mask
from sim.results.qualify import fleet_qualifying_rows
from sim.results.report_text import DEFAULT_WIDTH, MISSING, percent, seconds, table, usd


def _with_ci(row: pd.Series, metric: str, fmt) -> str:
    mean = row.get(f"{metric}_mean", math.nan)
    if mean is None or mean != mean:
        return MISSING
    lo, hi = row.get(f"{metric}_ci95_lo", math.nan), row.get(f"{metric}_ci95_hi", math.nan)
    return fmt(mean) if lo != lo or hi != hi else f"{fmt(mean)} [{fmt(lo)}, {fmt(hi)}]"


def pareto_flags(table_: pd.DataFrame, fields: list[str]) -> pd.Series:
    """True for rows on the $/request × p99-latency front of their (swept values,
    workload) group, among rows whose fleet qualifies (every workload meets its SLO target
    on the mean with no unstable seed: :func:`sim.results.qualify.fleet_qualifying_rows`;
    latency: :func:`pareto_latency`)."""
    flags = pd.Series(False, index=table_.index)
    ok, _ = fleet_qualifying_rows(table_, fields)
    for _, g in table_.groupby([*fields, "workload"], sort=False, dropna=False):
        g = g[ok.loc[g.index]]
        if g.empty:
            continue
        latency = np.array([r[f"{pareto_latency(r.get('kind'))}_mean"] for _, r in g.iterrows()], float)
        mask = pareto_mask(g["cost_per_request_usd_mean"].to_numpy(float), latency)
        flags.loc[g.index[mask]] = True
    return flags


def _short(fields: list[str]) -> list[str]:
    last = [f.split(".")[-1] for f in fields]
    return [s if last.count(s) == 1 else f for s, f in zip(last, fields)]


def sweep_text(table_: pd.DataFrame, fields: list[str]) -> str:
    """The sweep's result table (empty string when there are no rows)."""
    if table_.empty:
        return ""
    front = pareto_flags(table_, fields)
    _, why = fleet_qualifying_rows(table_, fields)
    rows = []
    for i, r in table_.iterrows():
        metric = pareto_latency(r.get("kind"))
        seeds = f"{int(r['seeds'])}" + (f" ({int(r['unstable_seeds'])} unstable)" if r.get("unstable_seeds") else "")
        rows.append([*(f"{r[f]:g}" if isinstance(r[f], float) else str(r[f]) for f in fields),
                     str(r["fleet"]), str(r["workload"]), seeds,
                     f"{'TTFT' if metric.startswith('ttft') else 'E2E'} {_with_ci(r, metric, seconds)}",
                     _with_ci(r, "slo_attainment", percent), _with_ci(r, "cost_per_request_usd", usd),
                     "yes" if front[i] else f"excluded ({why[i]})" if why[i] else ""])
    headers = [*_short(fields), "fleet", "workload", "seeds", "p99 latency mean [95% CI]",
               "SLO met [95% CI]", "$/request [95% CI]", "Pareto"]
    right = [True] * len(fields) + [False, False, True, False, True, True, False]
    note = ("95% CI across seeds: t interval on the log scale (never negative); Pareto: lowest $/request and p99 "
            "latency among the fleets at the same swept values that meet every SLO target and are stable on every "
            "seed; 'excluded' fleets are shown but never ranked")
    return table(headers, rows, right) + "\n" + "\n".join(textwrap.wrap(note, DEFAULT_WIDTH)) + "\n"
