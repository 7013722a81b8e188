"""Text of ``dcsim tco``: the finance assumptions, each fleet's cash flow over the horizon
with its NPV and levelised cost, and the sensitivity (tornado) table, within ``width``
characters (``COLUMNS``, default 120: wide tables split into column blocks,
:func:`sim.results.report_text.table`)."""

from __future__ import annotations

import math

import pandas as pd

from sim.models.economics import finance_line
from sim.results.report_text import DEFAULT_WIDTH, MISSING, _wrap, table, usd
from sim.scenario import Economics
from sim.studies.tco import FACTORS, TcoTables

# cash-flow column -> header; rent and other opex only shown when some fleet pays them
_FLOW_HEADERS = {"capex_it_usd": "IT capex", "capex_facility_usd": "facility capex", "residual_value_usd": "residual",
                 "energy_usd": "energy", "maintenance_usd": "maint.", "staff_usd": "staff",
                 "colocation_usd": "colocation", "rent_usd": "rent", "other_opex_usd": "other"}
_OPTIONAL = ("rent_usd", "other_opex_usd")
_METRIC_TEXT = {"levelised_usd_per_1m_output_tokens": "$/1M output tokens", "levelised_usd_per_request": "$/request"}


def _money(x: float) -> str:
    if x == 0:
        return "$0"
    return "-" + usd(-x) if x < 0 else usd(x)


def cash_flow_text(tables: TcoTables, width: int | None = DEFAULT_WIDTH) -> str:
    """Per fleet: its cash-flow table (one row per year) and the NPV / levelised line."""
    flow = tables.cash_flow
    shown = [c for c in _FLOW_HEADERS if c not in _OPTIONAL or (flow[c] != 0).any()]
    headers = ["year"] + [_FLOW_HEADERS[c] for c in shown] + ["total", "discount", "discounted", "cumulative"]
    parts = []
    for _, npv in tables.npv.iterrows():
        g = flow[flow["fleet"] == npv["fleet"]]
        rows = [[str(int(r["year"]))] + [_money(r[c]) for c in shown]
                + [_money(r["total_usd"]), f"{r['discount_factor']:.3f}", _money(r["discounted_usd"]),
                   _money(r["cumulative_discounted_usd"])] for _, r in g.iterrows()]
        head = f"Fleet {npv['fleet']}: cash flow over {int(npv['horizon_years'])} years (USD)"
        parts.append(head + "\n" + table(headers, rows, None, width) + "\n" + "\n".join(_wrap(_npv_line(npv), width)))
    return "\n\n".join(parts)


def _npv_line(npv: pd.Series) -> str:
    verdict = "" if npv["qualifies"] else "; does NOT meet every SLO (not ranked)"
    tokens = npv["levelised_usd_per_1m_output_tokens"]
    per_tokens = "" if _nan(tokens) else f"${tokens:,.4g} per 1M output tokens, "
    return (f"  NPV of TCO {usd(npv['npv_tco_usd'])} (undiscounted {usd(npv['tco_usd'])}); levelised "
            f"{per_tokens}${npv['levelised_usd_per_request']:,.4g} per request{verdict}")


def _nan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _value(factor: str, value: float) -> str:
    if _nan(value):
        return "as run"
    if factor in ("accelerator price", "utilisation"):
        return f"x{value:g}"
    if factor == "lifetime":
        return f"{value:g} years"
    if factor == "power price":
        return f"${value:.4f}/kWh"
    return f"{value:.1%}"


def sensitivity_text(tables: TcoTables, width: int | None = DEFAULT_WIDTH) -> str:
    """The tornado table: base row, then each factor's low and high rows, factors ordered
    by how far they move the base winner's (or, without one, the first fleet's) levelised
    cost; one column per fleet, the winner, and whether it changes."""
    sens = tables.sensitivity
    metric = str(sens["metric"].iloc[0])
    fleets = list(dict.fromkeys(sens["fleet"]))
    base = sens[sens["level"] == "base"]
    anchor = str(base["winner"].iloc[0]) or fleets[0]
    swing = {f: _swing(sens[(sens["factor"] == f) & (sens["fleet"] == anchor)][metric]) for f in FACTORS}
    order = ["base"] + sorted(FACTORS, key=lambda f: -swing[f])
    rows = []
    for factor in order:
        for level in (["base"] if factor == "base" else ["low", "high"]):
            g = sens[(sens["factor"] == factor) & (sens["level"] == level)].set_index("fleet")
            first = g.iloc[0]
            cells = [_sig(g.loc[f, metric]) + ("" if g.loc[f, "qualifies"] else "*") for f in fleets]
            mark = "CHANGES" if first["winner_changes"] else ""
            value = _value(factor, first["value"])
            if factor == "utilisation":
                value += f" demand ({first['utilisation_method']})"
            rows.append([factor, level, value, *cells, first["winner"] or "none", mark])
    headers = ["factor", "level", "value", *fleets, "winner", "changes"]
    right = [False, False, True] + [True] * len(fleets) + [False, False]
    changed = sens[sens["winner_changes"]]
    verdict = ("The winner changes at: " + "; ".join(sorted({f"{r.factor} {r.level} ({r.winner or 'none'})"
                                                           for r in changed.itertuples()}))
               if len(changed) else f"The winner ({base['winner'].iloc[0] or 'none'}) does not change at any level.")
    head = (f"Sensitivity of the levelised {_METRIC_TEXT[metric]} (one factor at a time, low and high from "
            f"fleets/data/finance.csv; winner = cheapest fleet that meets every SLO; utilisation scales every "
            f"arrival rate: re-simulated, or scaled without re-simulating)")
    foot = "* misses an SLO or is unstable at that level: not eligible to win. " + verdict
    return "\n".join(_wrap(head, width)) + "\n" + table(headers, rows, right, width) + "\n" + "\n".join(
        _wrap(foot, width))


def _sig(x: float) -> str:
    """Three significant digits (a levelised $ figure)."""
    return MISSING if _nan(x) else f"{x:.3g}"


def _swing(values: pd.Series) -> float:
    finite = values.dropna()
    return float(finite.max() - finite.min()) if len(finite) else 0.0


def tco_report(tables: TcoTables, econ: Economics, scenario_name: str, width: int | None = DEFAULT_WIDTH) -> str:
    """The whole stdout of ``dcsim tco``."""
    head = [f"TCO of scenario {scenario_name}: one run repriced (pricing does not feed back into the simulation)",
            *_wrap(finance_line(econ), width)]
    return "\n".join(head) + "\n\n" + cash_flow_text(tables, width) + "\n\n" + sensitivity_text(tables, width) + "\n"
