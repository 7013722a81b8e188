"""Which fleets may be called "best" on the dashboard, and why the others may not.

A fleet *qualifies for ranking* when every workload it serves meets its SLO target
(``slo_attainment >= slo_target`` in the summary) and none is unstable (the summary's
``unstable`` flag: its queue grew through the run, see :mod:`sim.results.stability`).
A cheaper fleet that fails either is not an answer a buyer can act on: the Compare view
and the overview's cost chart highlight the best value only among qualifying fleets,
and show the others marked, with the reason (which workload's SLO, by how many points
of attainment, and the largest miss reason).
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd
import plotly.graph_objects as go

from sim.results.charts import FLEET_KPIS, MISS_LABELS, WORKLOAD_KPIS
from sim.results.report_text import percent

NOT_RANKED = "✗ not ranked"


def disqualifications(summary: pd.DataFrame) -> dict[str, list[str]]:
    """Per fleet of ``summary`` (one row per fleet and workload), the reasons it does
    not qualify for ranking, one sentence per failing workload; [] when it qualifies."""
    reasons: dict[str, list[str]] = {str(f): [] for f in dict.fromkeys(summary["fleet"])}
    for _, row in summary.iterrows():
        parts = []
        attained, target = float(row["slo_attainment"]), float(row["slo_target"])
        if attained < target:
            parts.append(f"meets its SLO for {percent(attained, 1)} of requests against a {percent(target, 1)} "
                         f"target ({100 * (target - attained):.1f} points short{_main_miss(row)})")
        if bool(row.get("unstable", False)):
            parts.append("is unstable (its queue grows through the run: the offered load exceeds capacity)")
        if parts:
            reasons[str(row["fleet"])].append(f"{row['workload']} " + " and ".join(parts))
    return reasons


def _main_miss(row: pd.Series) -> str:
    requests = float(row.get("requests", 0) or 0)
    shares = {k: float(row.get(f"slo_miss_{k}", 0) or 0) / requests for k in MISS_LABELS if requests}
    top = max(shares, key=shares.get) if shares else None
    return f"; mostly {MISS_LABELS[top]}, {percent(shares[top], 1)} of requests" if top and shares[top] > 0 else ""


def qualifying(summary: pd.DataFrame) -> list[str]:
    """The fleets of ``summary`` that qualify for ranking, in their order."""
    return [f for f, why in disqualifications(summary).items() if not why]


def best_among(table: pd.DataFrame, eligible: list[str]) -> pd.Series:
    """For each row of :func:`sim.results.charts.compare_all`'s ``table``, the eligible
    fleet with the best value (direction from the KPI's definition), or None when no
    eligible fleet has a value or all eligible values are equal (nothing to highlight)."""
    higher = {label: up for _, label, _, up in FLEET_KPIS + WORKLOAD_KPIS}
    best = []
    for _, row in table.iterrows():
        known = {f: float(row[f]) for f in eligible if f in row and not pd.isna(row[f])}
        tied = len(known) > 1 and len(set(known.values())) == 1
        best.append(None if not known or tied else (max if higher[row["metric"]] else min)(known, key=known.get))
    return pd.Series(best, index=table.index, dtype=object)


def mark_cost_chart(fig: go.Figure, summary: pd.DataFrame, eligible: list[str]) -> go.Figure:
    """The cost-per-request figure (:func:`sim.results.charts.cost_per_request`: one bar
    trace per fleet and workload panel) with the cheapest eligible fleet of each panel
    labelled "best", and every non-eligible fleet's bars hatched, faded and labelled
    "✗ <value>"."""
    panels = list(dict.fromkeys(summary["workload"]))
    cheapest = {}
    for workload in panels:
        rows = summary[(summary["workload"] == workload) & summary["fleet"].isin(eligible)]
        rows = rows[rows["cost_per_request_usd"].notna()]
        if len(rows):
            cheapest[workload] = str(rows.loc[rows["cost_per_request_usd"].idxmin(), "fleet"])
    for trace in fig.data:
        axis = trace.xaxis or "x"
        workload = panels[(int(axis[1:]) if len(axis) > 1 else 1) - 1]
        label = trace.text[0] if trace.text else ""
        if trace.name not in eligible:
            trace.marker.pattern = {"shape": "/", "fgcolor": "#555"}
            trace.marker.opacity = 0.45
            trace.text = [f"✗ {label}"]  # short: a vertical label must fit above its bar
        elif cheapest.get(workload) == trace.name:
            trace.text = [f"best {label}"]
    return fig


def ranking_note(reasons: Mapping[str, list[str]]) -> list[str]:
    """One line per fleet that is not ranked: '<fleet> is not ranked: <reasons>'."""
    return [f"**{fleet}** is not ranked: " + "; ".join(why) + "." for fleet, why in reasons.items() if why]



def row_bands(table: pd.DataFrame, bands: Mapping) -> pd.Series:
    """The performance-model band (±%) that applies to each row of
    :func:`sim.results.charts.compare_all`'s ``table``: for a workload row the widest
    band among the pools that serve that workload in the fleets compared (``bands``:
    :func:`sim.results.charts.perf_bands`, by fleet), for a fleet row the widest pool band
    of those fleets; NaN when no pool concerned has one. A workload served only by
    calibrated chips is thus never judged against another chip's band."""
    out = []
    for _, row in table.iterrows():
        known = []
        for band in bands.values():
            pair = band.widest if row["scope"] == "fleet" else band.workload(row["scope"])
            if pair is not None:
                known.append(pair[0])
        out.append(max(known) if known else float("nan"))
    return pd.Series(out, index=table.index, dtype=float)


def beyond_band(table: pd.DataFrame, band_pct: pd.Series) -> pd.Series:
    """True where a row's spread exceeds its own band (:func:`row_bands`), False where it
    does not, NaN where either is unknown."""
    return pd.Series([float("nan") if pd.isna(b) or pd.isna(s) else bool(s > b / 100)
                      for s, b in zip(table["spread"], band_pct)], index=table.index, dtype=object)


def bands_caption(bands: Mapping, workloads: list[str]) -> str:
    """'chat ±25% (b200, h100-sxm), image ±50% (mi300x)': each workload's band over the
    fleets compared, from its own pools; '' when none has a band."""
    parts = []
    for workload in workloads:
        pairs = [b.workload(workload) for b in bands.values() if b.workload(workload) is not None]
        if pairs:
            chips = sorted({c for _, cs in pairs for c in cs})
            parts.append(f"{workload} ±{max(p for p, _ in pairs):g}% ({', '.join(chips)})")
    return ", ".join(parts)


MIN_SEEDS_FOR_INTERVAL = 5
"""Fewest seeds whose 95% interval the dashboard shows. With n seeds the interval's
half-width is t(0.975, n−1)·s/√n: t is 12.71 at 2 seeds, 4.30 at 3 and 2.78 at 5
(Student t table), so below 5 seeds the interval mostly measures the t quantile (two
seeds gave '20 s [267 ms, 26 min]' in issue 28) and says nothing a reader can use."""


def with_interval(row: pd.Series, metric: str, fmt) -> str:
    """A sweep table row's ``<metric>_mean`` formatted, with its ``_ci95_lo``/``_ci95_hi``
    interval when the row aggregates at least :data:`MIN_SEEDS_FOR_INTERVAL` seeds, else
    with 'too few seeds for an interval'. A table without ``_mean`` columns (one seed
    per point) shows the value alone."""
    if f"{metric}_mean" not in row.index:
        return fmt(row[metric]) if metric in row.index and not pd.isna(row[metric]) else "—"
    mean, seeds = row[f"{metric}_mean"], int(row.get("seeds", 1) or 1)
    if pd.isna(mean):
        return "—"
    if seeds < MIN_SEEDS_FOR_INTERVAL:
        return f"{fmt(mean)} (too few seeds for an interval: {seeds} < {MIN_SEEDS_FOR_INTERVAL})"
    lo, hi = row.get(f"{metric}_ci95_lo"), row.get(f"{metric}_ci95_hi")
    return fmt(mean) if pd.isna(lo) or pd.isna(hi) else f"{fmt(mean)} [{fmt(lo)}, {fmt(hi)}]"


def sweep_points(table: pd.DataFrame, workload: str, latency: str) -> pd.DataFrame:
    """The sweep ``table``'s rows for ``workload``: swept values, fleet, seeds and the
    p99 ``latency`` metric, SLO attainment and $/request each :func:`with_interval`."""
    from sim.results.charts import swept_columns
    from sim.results.report_text import seconds, usd

    rows = table[table["workload"] == workload] if "workload" in table.columns else table
    params = swept_columns(table)
    out = rows[[*params, "fleet", *(["seeds"] if "seeds" in rows.columns else [])]].copy()
    out[latency] = [with_interval(r, latency, seconds) for _, r in rows.iterrows()]
    out["SLO met"] = [with_interval(r, "slo_attainment", lambda v: percent(v, 1)) for _, r in rows.iterrows()]
    out["$/request"] = [with_interval(r, "cost_per_request_usd", usd) for _, r in rows.iterrows()]
    out["Pareto"] = pareto_marks(table, params).loc[rows.index]
    return out


SWEEP_METRICS = ("slo_attainment", "cost_per_request_usd", "ttft_p99_s", "tpot_p99_s", "e2e_p99_s")


def as_aggregated(table: pd.DataFrame) -> pd.DataFrame:
    """A sweep table in the shape ``dcsim sweep`` writes (``seeds``, ``unstable_seeds``,
    ``<metric>_mean``), so that one ranking rule (:mod:`sim.results.qualify`) marks it:
    a table of single runs (``slo_attainment``, ``unstable``, no ``_mean`` columns, e.g.
    written by hand) becomes one seed per row, its ``unstable`` flag an unstable seed.
    An aggregated table is returned unchanged."""
    if "slo_attainment_mean" in table.columns or "slo_attainment" not in table.columns:
        return table
    out = table.copy()
    out["seeds"] = out["seeds"] if "seeds" in out.columns else 1
    out["unstable_seeds"] = out["unstable"].fillna(False).astype(bool).astype(int) if "unstable" in out.columns else 0
    for metric in SWEEP_METRICS:
        if metric in out.columns:
            out[f"{metric}_mean"] = out[metric]
    return out


def pareto_marks(table: pd.DataFrame, params: list[str]) -> pd.Series:
    """Per row of an aggregated sweep table: "yes" on the $/request × p99-latency front of
    its swept values and workload among qualifying fleets, "" off it, or "excluded (<why>)"
    for a fleet that does not qualify: the `Pareto` column `dcsim sweep` prints
    (:func:`sim.studies.sweep_report.pareto_flags`, :func:`sim.results.qualify.fleet_qualifying_rows`)."""
    from sim.results.qualify import fleet_qualifying_rows
    from sim.studies.sweep_report import pareto_flags

    if "slo_attainment_mean" not in table.columns:
        return pd.Series("—", index=table.index)
    ok, why = fleet_qualifying_rows(table, params)
    front = pareto_flags(table, params)
    return pd.Series(["yes" if f else "" if q else f"excluded ({w})" for f, q, w in zip(front, ok, why)],
                     index=table.index)
