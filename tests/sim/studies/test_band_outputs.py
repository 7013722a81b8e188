"""The uncertainty band of every accelerator reaches the pool table, the planner CSV and the
run report, per pool (issues 12 and 24); the expected band is read from the raw catalog CSV."""

from __future__ import annotations

import csv
from pathlib import Path

from scenario_cases import make_scenario

from sim.results.planner_csv import fleet_workload_rows, planner_table
from sim.results.report_text import run_report
from sim.results.tables import run_scenario

ROOT = Path(__file__).resolve().parents[3]
CSV_ROWS = {r["key"]: r for r in csv.DictReader(open(ROOT / "fleets" / "data" / "accelerators.csv", newline=""))}
BAND = {k: r["efficiency_band_pct"] for k, r in CSV_ROWS.items()}


def test_band_per_pool_in_the_pool_table_report_and_planner_csv():
    """Issue 24: every chip has a band (calibrated ones from their own held-out points), and
    each pool shows its own: pool a on B200, pool b on H100, both serving one workload."""
    wl = {"chat": {"kind": "autoregressive", "model": "llama-3-8b", "arrival": {"kind": "poisson", "rate_per_s": 2.0},
                   "prompt_tokens": {"kind": "constant", "value": 200}, "output_tokens": {"kind": "constant", "value": 50}}}
    pools = [{"name": "a", "accelerator": "b200", "serves": ["chat"], "replicas": 1},
             {"name": "b", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1}]
    results = run_scenario(make_scenario(wl, pools, duration_s=20))
    b200, h100 = float(BAND["b200"]), float(BAND["h100-sxm"])
    assert b200 > 0 and h100 > 0
    by_pool = results.pools.set_index("pool")["perf_band_pct"]
    assert (by_pool["a"], by_pool["b"]) == (b200, h100)
    table = planner_table(fleet_workload_rows(results), ["fleet"])
    assert table["perf_band_pct"].iloc[0] == max(b200, h100)  # the fleet row: its least certain pool
    report = run_report(results)
    low, high = sorted((round(b200), round(h100)))
    spread = f"±{low}%" if low == high else f"±{low}-{high}% (band column)"
    assert f"perf model     {spread} on latency" in report  # the fleet line
    rows = {line.split()[0]: line.split() for line in report.splitlines() if line[:2] in ("a ", "b ")
            and len(line.split()) > 2 and line.split()[1] in ("b200", "h100-sxm")}
    assert (rows["a"][2], rows["b"][2]) == (f"±{b200:.0f}%", f"±{h100:.0f}%")  # the pool table's band column


def test_a_calibrated_chip_has_its_own_band():
    """A fleet of calibrated H100s is no longer shown as certain: its band is the q80 of the
    H100's own held-out errors."""
    wl = {"chat": {"kind": "autoregressive", "model": "llama-3-8b", "arrival": {"kind": "poisson", "rate_per_s": 2.0},
                   "prompt_tokens": {"kind": "constant", "value": 200}, "output_tokens": {"kind": "constant", "value": 50}}}
    results = run_scenario(make_scenario(wl, [{"name": "b", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1}],
                                         duration_s=20))
    assert planner_table(fleet_workload_rows(results), ["fleet"])["perf_band_pct"].iloc[0] == float(BAND["h100-sxm"])
    assert "own" in CSV_ROWS["h100-sxm"]["efficiency_source"]
