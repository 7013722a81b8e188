"""What ``dcsim plan`` prints, on hand-made plan results (no simulation): replicas say
how many accelerators they hold, every alternative shows its cost, a fleet that failed
its check seed is flagged, and columns line up with five candidates."""

from __future__ import annotations

import math

import pandas as pd

from sim.studies.planner import QuarterPlan, WorkloadPlan
from sim.studies.planner_report import quarter_text, replicas

TYPES = ["h100-sxm", "b200", "mi300x", "gaudi3", "tpu-v5p"]


def test_replicas_name_replicas_and_accelerators():
    assert replicas(6, 4, "b200") == "6 replicas × tp4 = 24 b200"
    assert replicas(1, 8, "b200") == "1 replica × tp8 = 8 b200"
    assert replicas(3, 1, "mi300x") == "3 replicas = 3 mi300x"


def five_candidate_quarter() -> QuarterPlan:
    singles = {a: (None if a == "tpu-v5p" else 2 + i) for i, a in enumerate(TYPES)}
    costs = {a: 1.5 * (i + 1) for i, a in enumerate(TYPES) if singles[a] is not None}
    chat = WorkloadPlan("chat", 10.0, {"h100-sxm": 2}, costs["h100-sxm"], singles, costs,
                        {a: 1 + i for i, a in enumerate(TYPES)}, {a: 4 for a in TYPES},
                        {a: 11 + i for i, a in enumerate(TYPES)})
    fleets = ["plan", *(f"all-{a}" for a in TYPES if singles[a] is not None)]
    planner = pd.DataFrame({
        "fleet": fleets,
        "full_load_cost_usd_per_hour": [1.5, 1.5, 3.0, 4.5, 6.0],
        "cost_usd_per_hour": [1.25, 1.25, 2.5, 4.0, 5.5],
        "capex_usd": [100_000.0, 100_000.0, 200_000.0, 300_000.0, 400_000.0],
        "meets_slos": [True, True, False, True, True],
        "opex_usd_per_month": [10.0] * 5, "nodes": [1] * 5, "racks": [1] * 5,
        "facility_power_max_mw": [0.01] * 5, "rent_usd_per_hour": [math.nan] * 5,
        "headroom_load_multiplier": [math.nan] * 5,
    })
    verified = pd.DataFrame({"fleet": ["plan"], "workload": ["chat"], "slo_attainment": [0.995], "slo_target": [0.99]})
    return QuarterPlan("now", [chat], 1.5, {a: c for a, c in zip(TYPES, [1.5, 3.0, 4.5, 6.0])},
                       planner=planner, verified=verified)


def test_five_candidates_align_and_show_costs_and_failures():
    text = quarter_text(five_candidate_quarter())
    lines = text.splitlines()
    assert "  chat: 2 replicas × tp4 = 8 h100-sxm" in lines
    # every alternative's pool cost is printed: 1.5 × (i + 1) for the feasible types
    for i, acc in enumerate(TYPES[:4]):
        row = next(line for line in lines if line.split()[:3] == ["chat", "10", acc])
        assert f"${1.5 * (i + 1):.2f}" in row and f"{2 + i} replicas × tp4 = {4 * (2 + i)} {acc}" in row
    assert "> search cap" in next(line for line in lines if "tpu-v5p" in line and line.strip().startswith("chat"))
    # the options table: every cell of a column starts at the header's column
    header = next(i for i, line in enumerate(lines) if "roofline estimate" in line)
    body = lines[header + 2: header + 7]
    start = lines[header].index("type")
    assert all(line[start:].split()[0] in TYPES for line in body)
    end = lines[header].index("lower bound") + len("lower bound")
    assert [line[:end].split()[-1] for line in body] == ["1", "2", "3", "4", "5"]
    end = lines[header].index("roofline estimate") + len("roofline estimate")
    assert [line[:end].split()[-1] for line in body] == ["11", "12", "13", "14", "15"]
    # the all-b200 fleet failed its check seed and is flagged on its row and below
    assert "FAILED check run" in next(line for line in lines if line.strip().startswith("all-b200"))
    assert any(line.strip().startswith("FAILED the check run") and "all-b200" in line for line in lines)
