"""The split search over layouts and ratios (issues 25 and 28): the count search against
brute force over the same grid, a real plan whose optimum is found by simulating every
grid point, and the report's verdict per chip pair."""

from __future__ import annotations

import copy
import itertools
import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.studies.planner import WorkloadPlan, WorkloadSearch, dense_pool_cost, load_plan, run_plan
from sim.studies.planner_report import split_text
from sim.studies.planner_split import SplitSearch, cheapest_counts
from sim.studies.planner_split_layouts import SplitTrial

CAP = 8


@st.composite
def staircases(draw):
    """A monotone pass region on [1, CAP]²: f(p) = fewest passing decode replicas,
    non-increasing in p (CAP + 1: none), and increasing costs per side."""
    steps = sorted(draw(st.lists(st.integers(1, CAP + 1), min_size=CAP, max_size=CAP)), reverse=True)
    unit_p = draw(st.floats(0.5, 5.0))
    unit_d = draw(st.floats(0.5, 5.0))
    fixed = draw(st.floats(0.0, 3.0))
    return steps, (lambda n: fixed + unit_p * n), (lambda n: unit_d * n ** 1.1)


@settings(max_examples=300)
@given(staircases(), st.integers(1, CAP), st.integers(1, CAP))
def test_the_count_search_finds_the_brute_force_optimum(case, start_p, start_d):
    steps, cost_p, cost_d = case
    calls = []

    def passes(p, d):
        calls.append((p, d))
        return d >= steps[p - 1]

    grid = [(cost_p(p) + cost_d(d), p, d) for p, d in itertools.product(range(1, CAP + 1), repeat=2)
            if d >= steps[p - 1]]
    found = cheapest_counts(passes, cost_p, cost_d, CAP, (start_p, start_d))
    if not grid:
        assert found is None
        return
    best = min(grid)
    assert found is not None and found[1] == pytest.approx(best[0])
    assert passes(*found[0])
    # with the optimum's cost as the ceiling nothing cheaper exists
    assert cheapest_counts(passes, cost_p, cost_d, CAP, (start_p, start_d), ceiling=best[0]) is None


def test_the_count_search_walks_the_staircase_where_the_sides_trade():
    # f(p) = 9 - p on [1, 8]²: prefill and decode trade one for one, decode dearer
    (p, d), cost = cheapest_counts(lambda p, d: p + d >= 9, lambda n: 1.0 * n, lambda n: 2.0 * n, CAP, (2, 2))
    assert (p, d) == (8, 1) and cost == 10.0  # by hand: cost = p + 2(9 − p) = 18 − p, least at p = 8


def test_independent_sides_take_a_few_simulations():
    # each side alone sets its latency: prefill needs 5 replicas, decode 2 (an L-shaped region)
    seen = set()

    def passes(p, d):
        seen.add((p, d))
        return p >= 5 and d >= 2

    (p, d), cost = cheapest_counts(passes, lambda n: 3.0 * n, lambda n: 2.0 * n, CAP, (1, 1))
    assert (p, d) == (5, 2) and cost == 19.0
    assert len(seen) <= 16  # the grid has 64 points


PLAN = {
    "name": "split-brute", "seed": 4, "duration_s": 40, "warmup_s": 5, "drain_s": 120,
    "demand": {"chat": {"kind": "autoregressive", "model": "llama-3.1-70b",
                        "arrival": {"kind": "poisson", "rate_per_s": 3},
                        "prompt_tokens": {"kind": "lognormal", "median": 2000, "sigma": 0.5, "max": 6000},
                        "output_tokens": {"kind": "lognormal", "median": 100, "sigma": 0.5, "max": 400},
                        "slo": {"ttft_s": 0.6, "tpot_s": 0.02, "target": 0.95}}},
    "candidates": [{"accelerator": "h100-sxm", "tp": 2, "precision": "fp8"}],
    "split": {"chat": {}},
    "search": {"max_replicas_per_type": 3, "max_simulations": 400, "mixes": False},
    "headroom": False,
}


@pytest.mark.slow
def test_a_real_split_plan_finds_the_brute_force_optimum_over_layouts_and_ratios(tmp_path):
    """Every (prefill TP, decode TP, prefill replicas, decode replicas) in {1, 2, 4, 8}² ×
    [1, 3]² simulated and costed by hand through the same simulation; the search's
    cheapest split is the grid's cheapest passing point."""
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(PLAN, sort_keys=False))
    spec = load_plan(path)
    result = run_plan(spec)
    w = result.quarters[0].workloads[0]
    trials = result.quarters[0].split_trials
    found = min((t.cost_usd_per_hour, t) for t in trials if t.outcome == "meets")[1]
    brute = []
    for tp_p, tp_d in itertools.product([1, 2, 4, 8], repeat=2):
        data = copy.deepcopy(PLAN)
        data["candidates"][0]["layouts"] = {"chat:prefill": {"tp": tp_p}, "chat:decode": {"tp": tp_d}}
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        splitter = SplitSearch(WorkloadSearch(load_plan(path), "chat", data["demand"]["chat"], [10_000]),
                               dense_pool_cost)
        for p, d in itertools.product(range(1, 4), repeat=2):
            counts = {"prefill:h100-sxm": p, "decode:h100-sxm": d}
            if splitter.search.meets(counts):
                brute.append((splitter.cost("prefill:h100-sxm", p) + splitter.cost("decode:h100-sxm", d), tp_p, tp_d,
                              p, d))
    assert brute, "the case must have a passing split"
    cost, tp_p, tp_d, p, d = min(brute)
    assert found.cost_usd_per_hour == pytest.approx(cost)
    assert w.split_costs[("h100-sxm", "h100-sxm")] == pytest.approx(cost)
    assert not [t for t in trials if t.outcome == "budget"]


def _trial(p_layout, d_layout, counts, cost, outcome, why, per=(1, 1), pair=("h100-sxm", "h100-sxm")):
    return SplitTrial("code", pair[0], p_layout, pair[1], d_layout, counts, cost, outcome, why, per)


def test_the_report_names_each_pairs_cheapest_split_and_why_it_lost():
    win = {"prefill:h100-sxm": 6, "decode:h100-sxm": 2}
    h200 = {"prefill:h200": 3, "decode:h200": 1}
    trials = [
        _trial("TP2 fp8", "TP4 fp8", win, 20.0, "meets", "meets", per=(2, 4)),
        _trial("TP4 fp8", "TP4 fp8", None, math.nan, "cannot_beat", "no count under $20.00/h meets the SLO"),
        _trial("TP8 fp8", "TP1 fp8", None, math.nan, "pruned", "1 : 1 replicas already cost $21/h ≥ $20/h"),
        _trial("TP4 fp8", "TP4 fp8", h200, 26.5, "meets", "meets", per=(4, 4), pair=("h200", "h200")),
        _trial("TP1 fp8", "TP1 fp8", None, math.nan, "cannot_hold", "weights exceed HBM", pair=("mi300x", "h200")),
    ]
    w = WorkloadPlan("code", 5.0, dict(win), 20.0, {}, {}, {})
    text = split_text(w, trials)
    rows = {line.split(" / ")[0].strip(): line for line in text.splitlines() if " / " in line and "tried" not in line}
    # the winner: 6 × TP2 = 12 prefill GPUs, 2 × TP4 = 8 decode GPUs
    assert "TP2 fp8 ×6 : TP4 fp8 ×2" in rows["h100-sxm"] and "12:8" in rows["h100-sxm"]
    assert rows["h100-sxm"].rstrip().endswith("winner")
    # H200 3 × TP4 : 1 × TP4 = 12:4 GPUs at $26.50, lost by 6.50 = 32.5%
    assert "12:4" in rows["h200"] and "lost on cost: +$6.50/h (+32%)" in rows["h200"]
    assert "cannot hold the model" in rows["mi300x"]
    flat = " ".join(text.split())
    assert "mi300x prefill TP1 fp8 : h200 decode TP1 fp8: weights exceed HBM" in flat
    assert "pruned unsimulated, 1 : 1 replicas already no cheaper than the best (1): TP8 fp8 : TP1 fp8" in flat
    assert "no count under $20.00/h meets the SLO" in flat
