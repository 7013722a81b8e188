"""Size to SLO (sim/dashboard_sizing.py): the budget is enforced (no simulation starts
after it), the verdicts name the winner and why each chip lost, and the winners land in
the fleets without disturbing the others."""

from __future__ import annotations

import copy
import math
import time

import pytest

from sim import dashboard as ds
from sim import dashboard_sizing as sz
from sim.overrides import document
from sim.scenario import load_scenario, parse_scenario
from sim.studies.planner_layouts import LayoutTrial


@pytest.fixture(scope="module")
def default_data() -> dict:
    return ds.for_dashboard(document(load_scenario("scenarios/default.yaml")))


def trial(acc, outcome, cost=math.nan, replicas=None, tp=1, ep=1, precision="fp8", why="", workload="chat"):
    return LayoutTrial(workload, acc, tp, ep, precision, replicas, cost, outcome, why)


def sizing_of(trials, spec=None, cap=32) -> sz.Sizing:
    return sz.Sizing(trials, budget_s=10.0, elapsed_s=1.0, simulations=5, max_replicas=cap,
                     workloads=sorted({t.workload for t in trials}), spec=spec)


def test_chip_table_names_the_winner_and_why_each_other_chip_lost():
    found = sizing_of([
        trial("b200", "meets", 5.0, 2, tp=2), trial("b200", "meets", 3.0, 3, tp=1),
        trial("h100-sxm", "meets", 6.0, 1, tp=4), trial("h100-sxm", "budget"),
        trial("mi300x", "slo_missed", tp=1), trial("mi300x", "slo_missed", tp=2),
        trial("tpu-v5e", "cannot_hold", why="cannot place model"),
        trial("gaudi3", "budget"),
    ], cap=16)
    table = sz.chip_table(found, "chat").set_index("chip")
    assert table.loc["b200", "layout"] == "TP1 fp8" and table.loc["b200", "replicas"] == 3
    assert table.loc["b200", "verdict"].startswith("winner")
    assert table.loc["b200", "accelerators"] == 3  # 3 replicas x TP1
    assert table.loc["h100-sxm", "accelerators"] == 4  # 1 replica x TP4
    # $6/h against the winner's $3/h: 100% more, by hand
    assert "loses on cost: $6.00/h, +100% over b200 ($3.00/h)" in table.loc["h100-sxm", "verdict"]
    assert "1 layout(s) not tried: time budget spent" in table.loc["h100-sxm", "verdict"]
    assert "SLO missed even at the replica cap (16 replicas) in every layout tried (TP1 fp8, TP2 fp8)" \
        in table.loc["mi300x", "verdict"]
    assert table.loc["tpu-v5e", "verdict"] == "cannot hold the model in any layout tried: cannot place model"
    assert "time budget ran out" in table.loc["gaudi3", "verdict"]
    assert table.loc["h100-sxm", "layouts_tried"] == 1 and table.loc["gaudi3", "layouts_tried"] == 0
    assert sz.winners(found)["chat"].accelerator == "b200"


def test_plan_spec_starts_each_chip_from_its_on_screen_pool(default_data):
    spec = sz.plan_spec(default_data)
    by_chip = {c.accelerator: c for c in spec.candidates}
    assert list(by_chip) == ["h100-sxm", "b200", "mi300x"]
    assert by_chip["h100-sxm"].layouts["chat"]["tp"] == 4  # all-h100's chat pool
    assert by_chip["mi300x"].layouts["chat"]["tp"] == 2  # h100+mi300x's chat pool
    assert by_chip["b200"].layouts["image"]["max_batch"] == 8
    assert set(by_chip["b200"].precisions) == {"bf16", "fp8", "fp4"}  # B200 has an FP4 peak (datasheet)
    assert "fp4" not in by_chip["h100-sxm"].precisions  # Hopper has no FP4 tensor cores
    assert spec.search.mixes is False and spec.demand["chat"]["slo"]["tpot_s"] == 0.1


def test_a_spent_budget_starts_no_simulation_and_says_so(default_data, monkeypatch):
    import sim.results.tables

    calls = []
    monkeypatch.setattr(sim.results.tables, "run_scenario", lambda *a, **k: calls.append(1))
    found = sz.size_to_slo(default_data, ["chat"], budget_s=1e-9)
    assert calls == [] and found.simulations == 0
    assert found.out_of_budget and not sz.winners(found)
    assert {t.outcome for t in found.trials} <= {"budget", "cannot_hold"}


def test_the_search_ends_within_one_simulation_of_its_budget(default_data, monkeypatch):
    """A fake clock that moves 10 s per simulation and a 25 s budget: simulations start at
    0, 10 and 20 s; the one due at 30 s is refused, so exactly 3 run and the search ends
    at 30 s, within one simulation (10 s) of the budget."""
    import sim.results.tables

    clock = [0.0]
    real = sim.results.tables.run_scenario

    def slow(scenario, progress=None):
        clock[0] += 10.0
        return real(scenario.model_copy(update={"duration_s": 5.0, "warmup_s": 0.0}))

    monkeypatch.setattr(sim.results.tables, "run_scenario", slow)
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    seen = []
    found = sz.size_to_slo(default_data, ["chat"], budget_s=25.0, progress=lambda n, t, what: seen.append((n, t)))
    assert found.simulations == 3 and clock[0] == 30.0
    assert found.elapsed_s <= 25.0 + 10.0
    assert found.out_of_budget
    assert seen == [(0, 0.0), (1, 10.0), (2, 20.0)]  # each simulation announced before it runs


def small(data: dict) -> dict:
    out = copy.deepcopy(data)
    out["workloads"] = {"chat": out["workloads"]["chat"]}
    out["workloads"]["chat"]["arrival"]["rate_per_s"] = 20.0  # several B200 replicas: the minimum is tested
    out["duration_s"], out["warmup_s"] = 60.0, 10.0
    out["fleets"] = [{"name": "b", "pools": [{"name": "chat", "accelerator": "b200", "serves": ["chat"],
                                              "replicas": 1, "tp": 1}]}]
    return out


@pytest.mark.slow
def test_the_winner_meets_the_slo_and_one_replica_fewer_does_not(default_data):
    """Checked by running the sized fleet and judging it with the ranking rule
    (sim/results/qualify.py), not with the planner's own verdict."""
    from sim.results.qualify import fleet_verdicts
    from sim.results.tables import run_scenario

    data = small(default_data)
    found = sz.size_to_slo(data, ["chat"], budget_s=600.0, max_replicas=8)
    assert not found.out_of_budget
    best = sz.winners(found)["chat"]
    fleets = sz.sized_fleets(data["fleets"], found, "b")
    assert fleets[0]["pools"][0]["replicas"] == best.replicas

    def verdict(replicas):
        pools = [dict(fleets[0]["pools"][0], replicas=replicas)]
        scenario = parse_scenario({**data, "fleets": [{"name": "b", "pools": pools}]}, "test")
        return fleet_verdicts(run_scenario(scenario).summary)["b"]

    assert best.replicas > 1
    assert verdict(best.replicas).qualifies
    assert not verdict(best.replicas - 1).qualifies


def test_winners_become_a_new_fleet_or_replace_a_fleets_pools(default_data):
    spec = sz.plan_spec(default_data)
    found = sizing_of([trial("b200", "meets", 3.0, 2, tp=2), trial("h100-sxm", "meets", 9.0, 1, tp=4)], spec)
    fleets = copy.deepcopy(default_data["fleets"])
    fleets[0]["pools"][0]["serves"] = ["chat", "dlm"]  # a pool serving a sized and an unsized workload
    out = sz.sized_fleets(fleets, found, None)
    assert [f["name"] for f in out] == ["all-h100", "all-b200", "h100+mi300x", "sized-to-slo"]
    assert out[:3] == fleets  # the other fleets untouched
    new = {p["name"]: p for p in out[3]["pools"]}
    # the winner's chip, replicas and layout; all-b200's chat pool gives no max_batch or price to carry
    assert new["chat-sized"] == {"name": "chat-sized", "accelerator": "b200", "serves": ["chat"], "replicas": 2,
                                 "tp": 2, "precision": "fp8"}
    assert new["chat"]["serves"] == ["dlm"]  # the shared pool keeps the workload without a winner
    assert {p["name"] for p in out[3]["pools"]} == {"chat", "dlm", "image", "search", "chat-sized"}
    again = sz.sized_fleets(out, found, None)
    assert again[-1]["name"] == "sized-to-slo-2"
    replaced = sz.sized_fleets(default_data["fleets"], found, "all-b200")
    b200 = {p["name"]: p for p in replaced[1]["pools"]}
    assert set(b200) == {"dlm", "image", "search", "chat"} and b200["chat"]["tp"] == 2
    assert replaced[0] == default_data["fleets"][0]
    parse_scenario({**default_data, "fleets": replaced}, "test")  # a valid scenario
