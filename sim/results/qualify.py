"""Which fleets may be ranked: a fleet qualifies for a ranking, a "best" mark, a Pareto
front or a plan only when every workload it serves meets its SLO target and its backlog
is stable. Every other fleet is still shown, marked with the reason.

One rule, used by ``dcsim sweep`` (Pareto marks), the run report (status and the
ranking line), the planner CSV (``w_status``) and the dashboard:

- ``unstable``: the backlog grows through the window or measured requests were still in
  flight after the drain (:mod:`sim.results.stability`). Its tails are lower bounds and
  its attainment counts only what finished, so it never qualifies, whatever it attained.
- ``slo_missed``: SLO attainment (fraction of measured requests meeting every latency
  limit; rejected and unfinished requests are misses) below the workload's target.
- ``ok``: neither.

Public functions: :func:`workload_verdict` (one workload row), :func:`fleet_verdicts`
(one fleet = all its workloads) and :func:`qualifying_rows` (a sweep's aggregated table,
where a row qualifies only if no seed was unstable and the mean attainment meets the
target).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

OK, SLO_MISSED, UNSTABLE = "ok", "slo_missed", "unstable"


@dataclass(frozen=True)
class Verdict:
    """``qualifies`` for ranking; ``status`` ok | slo_missed | unstable; ``reason`` in
    words ("" when it qualifies), e.g. "chat SLO met 74.4% < target 99% (short by 24.6 points)"."""

    qualifies: bool
    status: str
    reason: str


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.3g}%" if fraction * 100 >= 99 or fraction * 100 < 1 else f"{fraction * 100:.1f}%"


def workload_verdict(workload: str, slo_attainment: float, slo_target: float, unstable: bool = False,
                     unstable_reason: str = "") -> Verdict:
    """The verdict for one workload on one fleet. ``slo_attainment`` and ``slo_target`` are
    fractions in [0, 1]; a NaN attainment (no measured request) does not disqualify on
    its own. ``unstable_reason`` is the engine's code (e.g. ``backlog_growing``)."""
    if unstable:
        why = str(unstable_reason or "in_flight_after_drain").replace("_", " ")
        return Verdict(False, UNSTABLE, f"{workload} unstable ({why})")
    a, t = float(slo_attainment), float(slo_target)
    if not math.isnan(a) and a < t:
        return Verdict(False, SLO_MISSED, f"{workload} SLO met {_pct(a)} < target {_pct(t)} "
                                          f"(short by {(t - a) * 100:.3g} points)")
    return Verdict(True, OK, "")


def row_verdict(row) -> Verdict:
    """:func:`workload_verdict` of a summary row (``workload``, ``slo_attainment``,
    ``slo_target``, optional ``unstable``, ``unstable_reason``)."""
    reason = row.get("unstable_reason", "")
    return workload_verdict(str(row.get("workload", "")), row["slo_attainment"], row["slo_target"],
                            bool(row.get("unstable", False)), "" if reason is None or reason != reason else str(reason))


def fleet_verdicts(summary: pd.DataFrame) -> dict[str, Verdict]:
    """Fleet name -> verdict over its workload rows (a summary table with ``fleet``): it
    qualifies only if every workload does; the status is the worst (unstable before
    slo_missed) and the reason lists every failing workload, "; "-separated."""
    out = {}
    for fleet, g in summary.groupby("fleet", sort=False):
        verdicts = [row_verdict(r) for _, r in g.iterrows()]
        bad = [v for v in verdicts if not v.qualifies]
        status = UNSTABLE if any(v.status == UNSTABLE for v in bad) else SLO_MISSED if bad else OK
        out[str(fleet)] = Verdict(not bad, status, "; ".join(v.reason for v in bad))
    return out


def qualifying_rows(table: pd.DataFrame) -> pd.Series:
    """For a sweep's aggregated table (``slo_attainment_mean``, ``slo_target``,
    ``unstable_seeds``): True where the row may be ranked (no unstable seed and mean
    attainment at or above the target). Index as ``table``."""
    unstable = table.get("unstable_seeds", pd.Series(0, index=table.index)).fillna(0) > 0
    attained = table["slo_attainment_mean"].astype(float)
    target = table.get("slo_target", pd.Series(0.0, index=table.index)).astype(float)
    return ~unstable & ~(attained < target)


def sweep_row_reason(row) -> str:
    """Why a sweep row does not qualify ("" when it does), e.g. "1/2 seeds unstable"."""
    n = int(row.get("unstable_seeds", 0) or 0)
    if n:
        return f"{n}/{int(row['seeds'])} seeds unstable"
    a, t = float(row["slo_attainment_mean"]), float(row.get("slo_target", 0.0))
    if not math.isnan(a) and a < t:
        return f"SLO {_pct(a)} < {_pct(t)}"
    return ""


def fleet_qualifying_rows(table: pd.DataFrame, fields: list[str]) -> tuple[pd.Series, pd.Series]:
    """A sweep table's rows at the fleet level: (qualifies, reason) Series indexed as
    ``table``. A row qualifies only if every workload row of its fleet at the same swept
    ``fields`` does (:func:`qualifying_rows`); the reason names the failing workloads,
    e.g. "chat: 1/2 seeds unstable"."""
    own = qualifying_rows(table)
    ok = pd.Series(True, index=table.index)
    reason = pd.Series("", index=table.index)
    for _, g in table.groupby([*fields, "fleet"], sort=False, dropna=False):
        bad = [f"{r['workload']}: {sweep_row_reason(r)}" for i, r in g.iterrows() if not own[i]]
        if bad:
            ok.loc[g.index] = False
            reason.loc[g.index] = "; ".join(bad)
    return ok, reason
