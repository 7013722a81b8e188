"""The planner costs whole fleets packed into shared servers: checked by hand."""

from __future__ import annotations

import pytest

from fleets.catalog_io import load_catalog
from sim.models.economics import HOURS_PER_YEAR
from sim.studies.planner import PlanSpec, WorkloadPlan, choose_fleet

NETWORK_USD_PER_NODE = 10_000.0


def spec() -> PlanSpec:
    return PlanSpec.model_validate({
        "name": "pack", "duration_s": 10,
        "economics": {"electricity_usd_per_kwh": 0, "facility_capex_usd_per_mw": 0,
                      "network_capex_usd_per_node": NETWORK_USD_PER_NODE},
        "demand": {w: {"kind": "autoregressive", "model": "llama-3-8b", "arrival": {"kind": "poisson", "rate_per_s": 1}}
                   for w in ("chat", "code")},
        "candidates": [{"accelerator": "h100-sxm"}, {"accelerator": "b200"}],
    })


def plan(name, mix, singles):
    return WorkloadPlan(name, 1.0, mix, 0.0, singles, {a: 0.0 for a in singles}, {})


def hand_cost(counts_by_type: dict[str, int]) -> float:
    """Capex of a fleet holding these accelerators, packed (tp 1: ceil(n / 8) nodes per
    type), straight line over 5 years; both catalog prices include the server."""
    cat = load_catalog()
    capex = 0.0
    for acc, n in counts_by_type.items():
        a = cat.accelerator(acc)
        assert a.price_includes_server
        capex += n * a.price_usd + -(-n // a.accelerators_per_node) * NETWORK_USD_PER_NODE
    return capex / (5 * HOURS_PER_YEAR)


def test_one_shared_server_beats_two_part_empty_ones():
    # each workload alone prefers a different type; together, one type packs into one server
    plans = [plan("chat", {"b200": 2}, {"b200": 2, "h100-sxm": 3}),
             plan("code", {"h100-sxm": 3}, {"h100-sxm": 3, "b200": 2})]
    combos = {  # the workloads' options combined, with the accelerators each fleet holds
        ("b200", "h100-sxm"): hand_cost({"b200": 2, "h100-sxm": 3}),  # two part-empty servers
        ("b200", "b200"): hand_cost({"b200": 4}),                     # one server
        ("h100-sxm", "h100-sxm"): hand_cost({"h100-sxm": 6}),         # one server
        ("h100-sxm", "b200"): hand_cost({"h100-sxm": 3, "b200": 2}),
    }
    counts = {"b200": 2, "h100-sxm": 3}
    chosen, cost, mw = choose_fleet(spec(), plans)
    best = min(combos, key=combos.get)
    assert best[0] == best[1]  # a single type: one shared server
    assert combos[best] < combos[("b200", "h100-sxm")]  # below the per-workload picks in two servers
    assert chosen == {"chat": {best[0]: counts[best[0]]}, "code": {best[1]: counts[best[1]]}}
    assert cost == pytest.approx(combos[best], rel=1e-12)
    cat = load_catalog()
    assert mw == pytest.approx(cat.accelerator(best[0]).node_power_w * 1.56 / 1e6)


def test_planner_csv_carries_energy_and_own_rent_columns():
    from scenario_cases import make_scenario

    from sim.results.planner_csv import fleet_workload_rows, planner_table
    from sim.results.tables import run_scenario

    sc = make_scenario({"chat": {"kind": "autoregressive", "model": "llama-3-8b",
                                 "arrival": {"kind": "poisson", "rate_per_s": 2.0}}},
                       [{"name": "a", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 3},
                        {"name": "b", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 2}],
                       duration_s=30.0)
    results = run_scenario(sc)
    row = planner_table(fleet_workload_rows(results), ["fleet"]).iloc[0]
    pools = results.pools
    assert (row["nodes"], row["empty_slots"]) == (1, 3)  # 5 single-GPU replicas in one 8-GPU server
    assert row["it_energy_kwh_per_day"] == pytest.approx(pools["it_power_avg_w"].sum() * 24 / 1e3)
    assert row["facility_energy_kwh_per_day"] == pytest.approx(row["it_energy_kwh_per_day"] * 1.56)
    assert row["rent_usd_per_hour"] == pytest.approx(5 * 2.99)  # fleets/data/ownership.csv h100-sxm
    summary = results.summary.iloc[0]
    assert row["chat_energy_per_output_token_j"] == pytest.approx(summary["energy_per_output_token_j"])
    assert row["chat_cost_per_request_rent_usd"] == pytest.approx(summary["cost_per_request_rent_usd"])
    assert row["output_tokens_per_s_per_mw"] == pytest.approx(
        summary["output_tokens_per_s"] / ((8 * 700 + 4600) * 1.56 / 1e6))
