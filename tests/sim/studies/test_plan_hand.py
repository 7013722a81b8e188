"""The planner on a case solvable by hand: SDXL images one at a time (max_batch 1), so a
replica serves one request per service time s; nearly periodic arrivals (gamma, CV 0.1)
behind a central queue meet an E2E bound of 1.25 s(H100) exactly when the fleet's
capacity Σ n/s covers the rate. With only the accelerator price in the cost (no energy,
no facility), the cheapest fleet is the integer program min Σ n·price s.t. Σ n/s ≥ rate,
which is a mix here: 1 × B200 + 1 × H100 (rate chosen so that no fleet's capacity
sits within 3 % of it with the catalog's MLPerf-calibrated efficiencies)."""

from __future__ import annotations

import itertools

import pytest
from scenario_cases import make_scenario

from fleets.catalog_io import load_catalog
from sim.errors import UserError
from sim.models.economics import HOURS_PER_YEAR
from sim.studies.planner import PlanSpec, run_plan
from sim.results.tables import run_scenario

PRICES = {"h100-sxm": 10_000.0, "b200": 18_000.0}
IMAGE = {"kind": "image_diffusion", "model": "sdxl", "steps": 40, "cfg": False}


def service_time_s(accelerator: str) -> float:
    """One request alone on an idle replica: its E2E is the service time."""
    sc = make_scenario({"img": {**IMAGE, "arrival": {"kind": "gamma", "rate_per_s": 0.05, "cv": 0.1}}},
                       [{"name": "p", "accelerator": accelerator, "serves": ["img"], "replicas": 1, "max_batch": 1}],
                       duration_s=100)
    e2e = run_scenario(sc).requests["e2e_s"]
    assert e2e.max() - e2e.min() < 1e-9
    return float(e2e.iloc[0])


def hand_answer(rate: float, s: dict[str, float]) -> tuple[dict[str, int], float]:
    """Cheapest (n_h100, n_b200) covering ``rate``; also checks that no combination sits
    within 3% of the rate (so the simulation's verdict is unambiguous)."""
    best = None
    for nh, nb in itertools.product(range(9), range(5)):
        capacity = nh / s["h100-sxm"] + nb / s["b200"]
        assert abs(capacity / rate - 1) > 0.03, (nh, nb, capacity, rate)
        cost = nh * PRICES["h100-sxm"] + nb * PRICES["b200"]
        if capacity >= rate and (best is None or cost < best[1]):
            best = ({"h100-sxm": nh, "b200": nb}, cost)
    return best


def plan_spec(rate: float, e2e_s: float, economics: dict | None = None) -> PlanSpec:
    return PlanSpec.model_validate({
        "name": "hand", "seed": 1, "verify_seed": 99, "duration_s": 60, "warmup_s": 5, "drain_s": 60,
        "router": "central_queue",
        "economics": {"electricity_usd_per_kwh": 0, "facility_capex_usd_per_mw": 0, "other_opex_fraction_per_year": 0,
                      "network_capex_usd_per_node": 0, **(economics or {})},
        "demand": {"img": {**IMAGE, "arrival": {"kind": "gamma", "rate_per_s": rate, "cv": 0.1},
                           "slo": {"e2e_s": e2e_s, "target": 0.99}}},
        "candidates": [{"accelerator": a, "price_usd": p, "layouts": {"img": {"max_batch": 1}}} for a, p in PRICES.items()],
        "headroom": False,
    })


def test_planner_finds_the_hand_computed_mix_and_it_holds_on_another_seed():
    s = {a: service_time_s(a) for a in PRICES}
    rate = 1.22 / s["b200"]
    counts, price = hand_answer(rate, s)
    assert counts == {"h100-sxm": 1, "b200": 1}  # the mix, not a single type
    result = run_plan(plan_spec(rate, 1.25 * s["h100-sxm"]))
    q = result.quarters[0]
    assert q.plan == {"img": counts}
    dep_hours = 5.0 * HOURS_PER_YEAR  # default depreciation life, hours
    assert q.cost_usd_per_hour == pytest.approx(price / dep_hours)
    # cheapest single type by hand: ceil(rate * s) replicas
    singles = {a: -(-rate * s[a] // 1) for a in PRICES}
    assert q.workloads[0].singles == {a: int(n) for a, n in singles.items()}
    best_single = min(singles[a] * PRICES[a] for a in PRICES)
    assert q.cheapest_single[1] == pytest.approx(best_single / dep_hours)
    # the check run used another seed and the plan meets the SLO there
    assert q.scenario.seed == 99
    plan_row = q.planner.set_index("fleet").loc["plan"]
    assert bool(plan_row["meets_slos"]) and plan_row["img_slo_attainment"] >= 0.99


def test_a_facility_power_limit_picks_the_cheapest_fleet_that_fits():
    s = {a: service_time_s(a) for a in PRICES}
    rate = 1.22 / s["b200"]  # as above: no single-type fleet's capacity within 3% of the rate
    singles = {a: int(-(-rate * s[a] // 1)) for a in PRICES}
    assert all(singles[a] / s[a] / rate > 1.03 for a in PRICES)
    assert all(n <= 8 for n in singles.values())  # each single type fits one 8-GPU node
    cat = load_catalog()
    node_mw = {a: (8 * cat.accelerator(a).tdp_w + cat.accelerator(a).node_overhead_w) * 1.56 / 1e6 for a in PRICES}
    # the hand-computed mix (1 H100 + 1 B200) needs one node of each type
    mix_mw = node_mw["h100-sxm"] + node_mw["b200"]
    limit = round((max(node_mw.values()) + mix_mw) / 2, 4)  # every single type fits, the mix does not
    q = run_plan(plan_spec(rate, 1.25 * s["h100-sxm"], {"facility_power_limit_mw": limit})).quarters[0]
    best = min(PRICES, key=lambda a: singles[a] * PRICES[a])
    assert q.plan == {"img": {best: singles[best]}}
    assert q.facility_power_mw == pytest.approx(node_mw[best])
    with pytest.raises(UserError, match=f"smallest needs {min(node_mw.values()):.3f} MW"):
        run_plan(plan_spec(rate, 1.25 * s["h100-sxm"], {"facility_power_limit_mw": round(min(node_mw.values()) / 2, 4)}))
