"""Choosing a split (prefill/decode) deployment: the planner's search per accelerator pair,
the headroom search over splits at a fixed GPU count, and refused ``split:`` input."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
import yaml

from sim.errors import UserError
from sim.scenario import parse_scenario
from sim.studies.headroom import split_headroom
from sim.studies.planner import PlanSpec, load_plan, run_plan
from sim.studies.planner_split import _fewest, role_key, split_key

PLAN = {
    "name": "split-plan",
    "seed": 2,
    "duration_s": 60,
    "warmup_s": 10,
    "drain_s": 120,
    "demand": {"chat": {"kind": "autoregressive", "model": "llama-3.1-8b",
                        "arrival": {"kind": "poisson", "rate_per_s": 6},
                        "prompt_tokens": {"kind": "lognormal", "median": 3000, "sigma": 0.5, "max": 8000},
                        "output_tokens": {"kind": "lognormal", "median": 60, "sigma": 0.5, "max": 400},
                        "slo": {"ttft_s": 1.0, "tpot_s": 0.03, "target": 0.95}}},
    "candidates": [{"accelerator": "h100-sxm", "tp": 1, "precision": "fp8"},
                   {"accelerator": "h200", "tp": 1, "precision": "fp8"}],
    "split": {"chat": {"prefill": ["h100-sxm"], "decode": ["h100-sxm", "h200"]}},
    "search": {"max_replicas_per_type": 8, "max_simulations": 120, "mixes": False},
    "headroom": False,
}


def test_keys_name_a_side_and_an_accelerator():
    assert role_key("prefill", "h100-sxm") == "prefill:h100-sxm"
    assert split_key("decode:h200") == ("decode", "h200") and split_key("h200") == (None, "h200")


@pytest.mark.parametrize("threshold", [1, 2, 5, 8])
def test_fewest_is_the_smallest_passing_count(threshold):
    calls = []
    assert _fewest(lambda n: calls.append(n) or n >= threshold, 8) == threshold
    assert len(calls) <= 3  # bisection over 8


def test_the_planner_plans_each_decode_type_with_a_prefill_pool(tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(PLAN, sort_keys=False))
    result = run_plan(load_plan(path))
    plan = result.quarters[0].workloads[0]
    trials = result.quarters[0].split_trials
    assert {t.pair for t in trials} == {("h100-sxm", "h100-sxm"), ("h100-sxm", "h200")}
    assert {t.pair for t in trials if t.outcome == "meets"} == {("h100-sxm", "h100-sxm"), ("h100-sxm", "h200")}
    assert len(plan.splits) == 1  # the cheapest pair's split, at its layouts, competes with co-located
    for (p_acc, d_acc), counts in plan.splits.items():
        assert set(counts) == {f"prefill:{p_acc}", f"decode:{d_acc}"} and min(counts.values()) >= 1
        assert plan.split_costs[p_acc, d_acc] > 0
    # the chosen fleet was simulated again (another seed) and meets the SLO
    verified = result.quarters[0].verified
    assert bool(verified.loc[verified["fleet"] == "plan", "slo_attainment"].iloc[0] >= 0.95)
    if plan.prefill_decode_ratio is not None:  # a split was cheapest: its pools serve the sides
        pools = [p for f in result.quarters[0].scenario.fleets if f.name == "plan" for p in f.pools]
        assert {s.partition(":")[2] for p in pools for s in p.serves} == {"prefill", "decode"}


@pytest.mark.parametrize("change,words", [
    (lambda p: p["split"].update(images={}), "split.images"),
    (lambda p: p["split"]["chat"].update(decode=["tpu-v9"]), "split.chat.decode"),
])
def test_refused_split_input(tmp_path, change, words):
    plan = copy.deepcopy(PLAN)
    change(plan)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    with pytest.raises(UserError, match=words):
        load_plan(path)
    assert PlanSpec  # the schema is importable for the message's allowed values


SPLIT_FLEET = {
    "name": "h", "seed": 1, "duration_s": 30,
    "workloads": {"chat": {"kind": "autoregressive", "model": "llama-3.1-8b",
                           "arrival": {"kind": "poisson", "rate_per_s": 2}}},
    "fleets": [{"name": "split", "pools": [
        {"name": "p", "accelerator": "h100-sxm", "serves": ["chat:prefill"], "replicas": 2, "tp": 2},
        {"name": "d", "accelerator": "h100-sxm", "serves": ["chat:decode"], "replicas": 2, "tp": 2}]}],
}


def test_split_headroom_tries_every_split_of_the_gpus():
    """Eight GPUs in TP2 replicas: splits 1:3, 2:2, 3:1; a stand-in simulation that passes
    up to a load of (prefill replicas × decode replicas) / 2 picks 2:2."""
    seen = []

    def fake(sc) -> pd.DataFrame:
        pools = sc.fleets[0].pools
        n_p, n_d = pools[0].replicas, pools[1].replicas
        scale = sc.workloads["chat"].arrival.rate_per_s / 2
        seen.append((n_p, n_d))
        ok = scale <= n_p * n_d / 2
        return pd.DataFrame({"unstable": [False], "slo_attainment": [1.0 if ok else 0.5], "slo_target": [0.99]})

    table = split_headroom(parse_scenario(copy.deepcopy(SPLIT_FLEET), "t"), "split", fake)
    assert list(zip(table["prefill_replicas"], table["decode_replicas"]))[0] == (2, 2)
    assert set(zip(table["prefill_replicas"], table["decode_replicas"])) == {(1, 3), (2, 2), (3, 1)}
    assert (table["prefill_accelerators"] + table["decode_accelerators"] == 8).all()
    assert table["headroom_load_multiplier"].iloc[0] == pytest.approx(2.0, rel=0.06)


def test_split_headroom_needs_one_pool_per_side():
    data = copy.deepcopy(SPLIT_FLEET)
    data["fleets"][0]["pools"].append({"name": "d2", "accelerator": "h200", "serves": ["chat:decode"], "replicas": 1})
    with pytest.raises(UserError, match="one prefill pool and one decode pool"):
        split_headroom(parse_scenario(data, "t"), "split", lambda sc: None)
