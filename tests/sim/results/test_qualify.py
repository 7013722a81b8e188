"""Which fleets may be ranked (sim.results.qualify); expected values worked by hand."""

from __future__ import annotations

import math

import pandas as pd

from sim.results.qualify import fleet_verdicts, workload_verdict


def test_missed_target_names_the_slo_attainment_target_and_gap():
    # issue 28: h100+mi300x chat met 74.4% against a 99% target -> short by 24.6 points
    v = workload_verdict("chat", 0.744, 0.99)
    assert not v.qualifies and v.status == "slo_missed"
    assert "chat SLO met 74.4% < target 99%" in v.reason and "24.6 points" in v.reason


def test_unstable_never_qualifies_even_at_full_attainment():
    v = workload_verdict("chat", 1.0, 0.99, unstable=True, unstable_reason="backlog_growing")
    assert (v.qualifies, v.status) == (False, "unstable")
    assert v.reason == "chat unstable (backlog growing)"


def test_target_met_exactly_qualifies_and_no_requests_does_not_disqualify():
    assert workload_verdict("chat", 0.99, 0.99).qualifies
    assert workload_verdict("chat", math.nan, 0.99).qualifies
    assert not workload_verdict("chat", 0.9899, 0.99).qualifies


def test_a_fleet_qualifies_only_if_every_workload_does():
    summary = pd.DataFrame([
        {"fleet": "a", "workload": "chat", "slo_attainment": 1.0, "slo_target": 0.99, "unstable": False},
        {"fleet": "a", "workload": "image", "slo_attainment": 0.95, "slo_target": 0.99, "unstable": False},
        {"fleet": "b", "workload": "chat", "slo_attainment": 0.999, "slo_target": 0.99, "unstable": False},
        {"fleet": "b", "workload": "image", "slo_attainment": 0.99, "slo_target": 0.99, "unstable": False},
        {"fleet": "c", "workload": "chat", "slo_attainment": 0.5, "slo_target": 0.99, "unstable": True,
         "unstable_reason": "backlog_growing"},
        {"fleet": "c", "workload": "image", "slo_attainment": 0.2, "slo_target": 0.99, "unstable": False},
    ])
    v = fleet_verdicts(summary)
    assert [v[f].qualifies for f in "abc"] == [False, True, False]
    assert v["a"].status == "slo_missed" and v["a"].reason.startswith("image SLO met 95.0% < target 99%")
    assert v["c"].status == "unstable" and "chat unstable" in v["c"].reason and "image SLO met 20.0%" in v["c"].reason


def test_run_report_ranks_only_qualifying_fleets_by_cost():
    from sim.results.report_text import ranking_text

    summary = pd.DataFrame([  # h100+mi300x is the cheapest but misses (issue 28's Compare view)
        {"fleet": "all-h100", "workload": "chat", "slo_attainment": 0.995, "slo_target": 0.99,
         "unstable": False, "cost_per_request_usd": 0.0020},
        {"fleet": "all-b200", "workload": "chat", "slo_attainment": 1.0, "slo_target": 0.99,
         "unstable": False, "cost_per_request_usd": 0.0015},
        {"fleet": "h100+mi300x", "workload": "chat", "slo_attainment": 0.744, "slo_target": 0.99,
         "unstable": True, "unstable_reason": "backlog_growing", "cost_per_request_usd": 0.0010},
    ])
    lines = ranking_text(summary, width=60).splitlines()
    assert lines[2].split()[:2] == ["1.", "all-b200"] and lines[3].split()[:2] == ["2.", "all-h100"]
    assert "h100+mi300x" in lines[4] and "not ranked" in lines[4]
    assert all(len(line) <= 60 for line in lines[1:])
    assert "chat unstable (backlog growing)" in " ".join(" ".join(lines[4:]).split())


def test_planner_row_says_whether_the_fleet_qualifies_and_why():
    from sim.results.planner_csv import _planner_row

    g = pd.DataFrame([
        {"workload": w, "racks": 1, "nodes": 2, "accelerator_count": 16, "accelerators_by_type_json": '{"h100-sxm": 16}',
         "it_power_max_kw": 20.0, "pue": 1.3, "capex_usd": 1e6, "opex_usd_per_month": 1e4, "cost_usd_per_hour": 50.0,
         "depreciation_years": 4.0, "slo_attainment": a, "slo_target": 0.99, "unstable": False}
        for w, a in (("chat", 0.995), ("image", 0.9))])
    row = _planner_row({"fleet": "x"}, g, math.nan)
    assert row["qualifies"] is False and row["chat_status"] == "ok" and row["image_status"] == "slo_missed"
    assert row["not_qualified_reason"] == "image SLO met 90.0% < target 99% (short by 9 points)"
