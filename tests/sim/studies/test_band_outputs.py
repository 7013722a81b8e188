"""The uncertainty band of transferred accelerators reaches the planner CSV and the run
report (issue 12, item 6); the expected band is read from the raw catalog CSV."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from scenario_cases import make_scenario

from sim.results.planner_csv import fleet_workload_rows, planner_table
from sim.results.report_text import run_report
from sim.results.tables import run_scenario

ROOT = Path(__file__).resolve().parents[3]
BAND = {r["key"]: r["efficiency_band_pct"] for r in csv.DictReader(open(ROOT / "fleets" / "data" / "accelerators.csv", newline=""))}


def test_band_beside_latency_throughput_and_cost():
    wl = {"chat": {"kind": "autoregressive", "model": "llama-3-8b", "arrival": {"kind": "poisson", "rate_per_s": 2.0},
                   "prompt_tokens": {"kind": "constant", "value": 200}, "output_tokens": {"kind": "constant", "value": 50}}}
    pools = [{"name": "a", "accelerator": "b200", "serves": ["chat"], "replicas": 1},
             {"name": "b", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1}]
    results = run_scenario(make_scenario(wl, pools, duration_s=20))
    table = planner_table(fleet_workload_rows(results), ["fleet"])
    assert BAND["h100-sxm"] == "" and float(BAND["b200"]) > 0
    assert table["perf_band_pct"].iloc[0] == float(BAND["b200"])
    assert f"±{float(BAND['b200']):.0f}% on latency, throughput and cost" in run_report(results)


def test_all_calibrated_fleet_has_no_band():
    wl = {"chat": {"kind": "autoregressive", "model": "llama-3-8b", "arrival": {"kind": "poisson", "rate_per_s": 2.0},
                   "prompt_tokens": {"kind": "constant", "value": 200}, "output_tokens": {"kind": "constant", "value": 50}}}
    results = run_scenario(make_scenario(wl, [{"name": "b", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1}],
                                         duration_s=20))
    assert math.isnan(planner_table(fleet_workload_rows(results), ["fleet"])["perf_band_pct"].iloc[0])
