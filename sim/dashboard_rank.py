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
    labelled "best", and every non-eligible fleet's bars hatched and labelled
    :data:`NOT_RANKED`."""
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
            trace.text = [f"{label} {NOT_RANKED}"]
        elif cheapest.get(workload) == trace.name:
            trace.text = [f"best {label}"]
    return fig


def ranking_note(reasons: Mapping[str, list[str]]) -> list[str]:
    """One line per fleet that is not ranked: '<fleet> is not ranked: <reasons>'."""
    return [f"**{fleet}** is not ranked: " + "; ".join(why) + "." for fleet, why in reasons.items() if why]

