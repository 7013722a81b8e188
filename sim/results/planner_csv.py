"""The planner CSV: one row per fleet with what a procurement plan needs.

Columns (units in the names; plain numbers, no currency strings):

- ``fleet``; for sweeps also ``point_id``, ``seed`` and one column per swept field.
- ``racks``, ``nodes``, ``accelerators_total`` and ``accelerators_<type>`` per
  accelerator type (``h100-sxm`` -> ``accelerators_h100_sxm``).
- ``it_power_max_kw`` (provisioned IT power) and ``facility_power_max_mw`` (IT × PUE).
- ``capex_usd``; ``opex_usd_per_month`` (energy at the simulated mean power plus other
  opex); ``cost_usd_per_hour`` (depreciation + energy + other opex);
  ``depreciation_years``; ``tco_usd`` = capex + opex per month × 12 × depreciation years.
- the finance assumptions the costs rest on (:func:`sim.models.economics.finance_assumptions`):
  ``ownership`` (own | rent | colocate), ``discount_rate_per_year``,
  ``maintenance_fraction_per_year``, ``staff_usd_per_kw_month`` (0 = not charged),
  ``colocation_usd_per_kw_month`` and ``colocation_power`` (NaN and "" unless colocating).
- ``empty_slots`` (accelerator slots left in the packed nodes), ``it_energy_kwh_per_day``
  and ``facility_energy_kwh_per_day`` (at the simulated mean power),
  ``output_tokens_per_s_per_mw`` (per provisioned facility MW), ``own_cost_usd_per_hour``
  and ``rent_usd_per_hour`` (the fleet bought, or rented at the gpu_rental prices; NaN
  when a type has no rental price); ``cost_usd_per_hour`` follows ``economics.ownership``.
- per workload ``w``: ``w_cost_per_request_usd``, ``w_cost_per_1m_output_tokens_usd``
  (NaN for workloads without output tokens), ``w_slo_attainment`` (over all arrivals in
  the window; rejected and unfinished requests are misses), ``w_slo_target``,
  ``w_arrival_rate_rps`` (offered), ``w_throughput_rps`` (completions inside the window
  per second: what was served), ``w_goodput_rps`` (those meeting the SLO),
  ``w_rejected_share`` and ``w_status`` (``ok`` | ``slo_missed`` | ``unstable``),
  the same costs owned and rented (``w_cost_per_request_own_usd``,
  ``w_cost_per_request_rent_usd``, ``w_cost_per_1m_output_tokens_{own,rent}_usd``) and
  IT energy ``w_energy_per_request_j`` and ``w_energy_per_output_token_j``.
- ``qualifies``: every workload meets its SLO target and is stable
  (:func:`sim.results.qualify.fleet_verdicts`); only such rows may be ranked.
  ``not_qualified_reason``: which workload, attainment vs target and by how much, or
  "unstable" ("" when it qualifies).
- ``headroom_load_multiplier``: the largest multiplier m of every workload's arrival
  rate (all scaled together) at which every workload still meets its SLO target (and the
  run stays stable), found by re-simulating the fleet with the same seed: doubling from
  1 up to :data:`HEADROOM_MAX`, then geometric bisection until the bracket is narrower
  than :data:`HEADROOM_TOLERANCE` (5%). A value of 1.3 means 30% more load fits;
  below 1 means the fleet misses an SLO at today's load (0 if even
  :data:`HEADROOM_MIN` × the load fails); ``HEADROOM_MAX`` means "at least that".
  ``headroom_pct`` = (m − 1) × 100. NaN when headroom was not computed.
- ``perf_band_pct``: ± uncertainty (%) of this row's latency, throughput and cost: the
  widest ``efficiency_band_pct`` among the fleet's accelerators (every chip has one, from
  ``dcsim validate``'s leave-one-accelerator-out residuals: its own for a calibrated chip,
  its vendor's for a transferred one); NaN when none of them has a band.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pandas as pd

from fleets.catalog_io import load_catalog
from sim.models.economics import finance_assumptions
from sim.results.qualify import fleet_verdicts, row_verdict
from sim.results.tables import Results

MONTHS_PER_YEAR = 12
FLEET_COLUMNS = ("accelerators", "accelerator_count", "nodes", "racks", "capex_usd", "opex_usd_per_month",
                 "it_power_max_kw", "it_power_avg_kw", "cost_usd_per_hour")
# energy and ownership columns (sim.results.metrics.fleet_table), copied as they are
FLEET_ENERGY_COLUMNS = ("empty_slots", "it_energy_kwh_per_day", "facility_energy_kwh_per_day",
                        "output_tokens_per_s_per_mw", "own_cost_usd_per_hour", "rent_usd_per_hour")
FINANCE_COLUMNS = ("ownership", "discount_rate_per_year", "maintenance_fraction_per_year", "staff_usd_per_kw_month",
                   "colocation_usd_per_kw_month", "colocation_power")
WORKLOAD_METRICS = ("cost_per_request_usd", "cost_per_1m_output_tokens_usd", "slo_attainment", "slo_target",
                    "cost_per_request_own_usd", "cost_per_request_rent_usd", "cost_per_1m_output_tokens_own_usd",
                    "cost_per_1m_output_tokens_rent_usd", "energy_per_request_j", "energy_per_output_token_j",
                    "arrival_rate_rps", "throughput_rps", "goodput_rps", "rejected_share")


def workload_status(row) -> str:
    """``unstable`` (backlog growing or requests left after the drain: the tails are lower
    bounds), ``slo_missed`` (attainment below target) or ``ok``, from a summary row
    (the rule is :func:`sim.results.qualify.row_verdict`)."""
    return row_verdict(row).status


def accelerator_column(accelerator: str) -> str:
    """``h100-sxm`` -> ``accelerators_h100_sxm``."""
    return "accelerators_" + re.sub(r"[^0-9a-zA-Z]+", "_", accelerator).strip("_").lower()


def fleet_workload_rows(results: Results) -> pd.DataFrame:
    """One row per fleet × workload: the summary row joined with its fleet's totals,
    accelerators by type (JSON), PUE and depreciation life (all a planner row needs)."""
    fleets = results.fleets[list(FLEET_COLUMNS) + [c for c in FLEET_ENERGY_COLUMNS if c in results.fleets] + ["fleet"]]
    rows = results.summary.merge(fleets, on="fleet", how="left")
    by_type = {
        fleet: json.dumps({a: int(n) for a, n in g.groupby("accelerator", sort=True)["accelerators"].sum().items()})
        for fleet, g in results.pools.groupby("fleet", sort=False)
    }
    rows["accelerators_by_type_json"] = rows["fleet"].map(by_type)
    rows["pue"] = results.scenario.economics.pue
    rows["depreciation_years"] = results.scenario.economics.depreciation_years
    for column, value in finance_assumptions(results.scenario.economics).items():
        rows[column] = value
    return rows


def planner_table(rows: pd.DataFrame, keys: list[str], headroom: dict | None = None) -> pd.DataFrame:
    """One planner row per group of ``keys`` (e.g. ``["fleet"]``) from fleet × workload
    ``rows`` (see :func:`fleet_workload_rows`); ``headroom`` maps a key tuple to m."""
    out = []
    for key, g in rows.groupby(keys, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        out.append(_planner_row(dict(zip(keys, key)), g, (headroom or {}).get(key, math.nan)))
    table = pd.DataFrame(out)
    acc_cols = sorted(c for c in table.columns if c.startswith("accelerators_") and c != "accelerators_total")
    table[acc_cols] = table[acc_cols].fillna(0).astype(int)
    return table[_column_order(table, keys, acc_cols)]


def _planner_row(key: dict, g: pd.DataFrame, headroom: float) -> dict:
    first = g.iloc[0]
    row: dict[str, Any] = dict(key)
    row.update(racks=int(first["racks"]), nodes=int(first["nodes"]), accelerators_total=int(first["accelerator_count"]))
    for acc, n in json.loads(first["accelerators_by_type_json"]).items():
        row[accelerator_column(acc)] = int(n)
    row["it_power_max_kw"] = float(first["it_power_max_kw"])
    row["facility_power_max_mw"] = float(first["it_power_max_kw"]) * float(first["pue"]) / 1e3
    row["capex_usd"] = float(first["capex_usd"])
    row["opex_usd_per_month"] = float(first["opex_usd_per_month"])
    row["cost_usd_per_hour"] = float(first["cost_usd_per_hour"])
    row["depreciation_years"] = float(first["depreciation_years"])
    row["tco_usd"] = row["capex_usd"] + row["opex_usd_per_month"] * MONTHS_PER_YEAR * row["depreciation_years"]
    for column in FINANCE_COLUMNS:
        if column in first:
            row[column] = first[column]
    for column in FLEET_ENERGY_COLUMNS:
        if column in first:
            row[column] = float(first[column])
    for _, w in g.iterrows():
        for metric in WORKLOAD_METRICS:
            if metric in w:
                row[f"{w['workload']}_{metric}"] = float(w[metric])
        row[f"{w['workload']}_status"] = workload_status(w)
    verdict = fleet_verdicts(g.assign(fleet="_"))["_"]
    row["qualifies"] = verdict.qualifies
    row["not_qualified_reason"] = verdict.reason
    band = load_catalog().band_pct(json.loads(first["accelerators_by_type_json"]))
    row["perf_band_pct"] = math.nan if band is None else band
    row["headroom_load_multiplier"] = headroom
    row["headroom_pct"] = (headroom - 1.0) * 100.0 if headroom == headroom and headroom > 0 else math.nan
    return row


def _column_order(table: pd.DataFrame, keys: list[str], acc_cols: list[str]) -> list[str]:
    head = list(keys) + ["racks", "nodes", "accelerators_total"] + acc_cols
    tail = ["headroom_load_multiplier", "headroom_pct"]
    middle = [c for c in table.columns if c not in head and c not in tail]
    return head + middle + tail
