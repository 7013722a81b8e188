"""Economics against hand arithmetic, and the fully loaded costs adding up to the bill."""

from __future__ import annotations

import pytest
from scenario_cases import make_scenario

from fleets.catalog_io import load_catalog
from sim.results.tables import run_scenario

HOURS_PER_YEAR = 365.25 * 24


def chat_scenario(**economics):
    return make_scenario(
        {
            "chat": {
                "kind": "autoregressive",
                "model": "llama-3-8b",
                "arrival": {"kind": "poisson", "rate_per_s": 4.0},
                "prompt_tokens": {"kind": "constant", "value": 500},
                "output_tokens": {"kind": "constant", "value": 100},
            }
        },
        [{"name": "chat", "accelerator": "mi300x", "serves": ["chat"], "replicas": 3, "tp": 1}],
        duration_s=120.0,
        warmup_s=10.0,
        economics=economics,
    )


def test_capex_and_hourly_cost_by_hand():
    econ = {"electricity_usd_per_kwh": 0.1, "pue": 1.5, "facility_capex_usd_per_mw": 10e6,
            "depreciation_years": 4, "facility_depreciation_years": 20, "idle_power_fraction": 0.25,
            "other_opex_fraction_per_year": 0.05}
    results = run_scenario(chat_scenario(**econ))
    pool = results.pools.iloc[0]
    acc = load_catalog().accelerator("mi300x")
    nodes = 1  # 3 accelerators fit one 8-GPU node
    node_power_w = acc.accelerators_per_node * acc.tdp_w + acc.node_overhead_w
    it_power_max_w = nodes * node_power_w
    capex_it = 3 * acc.price_usd + (0 if acc.price_includes_server else nodes * acc.server_cost_usd_per_node)
    capex_facility = 10e6 * it_power_max_w / 1e6
    assert pool["capex_usd"] == pytest.approx(capex_it + capex_facility, rel=1e-12)
    busy = pool["busy_fraction"]
    power_w = it_power_max_w * (0.25 + 0.75 * busy)
    hourly = (
        capex_it / (4 * HOURS_PER_YEAR)
        + capex_facility / (20 * HOURS_PER_YEAR)
        + power_w * 1.5 / 1000 * 0.1
        + (capex_it + capex_facility) * 0.05 / HOURS_PER_YEAR
    )
    assert pool["cost_usd_per_hour"] == pytest.approx(hourly, rel=1e-12)
    assert pool["opex_usd_per_month"] == pytest.approx(
        (power_w * 1.5 / 1000 * 0.1 + (capex_it + capex_facility) * 0.05 / HOURS_PER_YEAR) * HOURS_PER_YEAR / 12, rel=1e-12
    )


def test_fully_loaded_costs_add_up_to_the_pool_bill():
    results = run_scenario(chat_scenario())
    req, pool = results.requests, results.pools.iloc[0]
    end_s = results.end_s["f"]
    assert end_s >= req["done_at_s"].max()
    bill = pool["run_cost_usd_per_hour"] * end_s / 3600
    assert req["cost_usd"].sum() == pytest.approx(bill, rel=1e-9)
    # marginal cost never exceeds the fully loaded one when the pool is partly idle
    assert (req["marginal_cost_usd"] <= req["cost_usd"] * (1 + 1e-9)).all()


def test_cheaper_electricity_lowers_cost_per_request():
    cheap = run_scenario(chat_scenario(electricity_usd_per_kwh=0.05)).summary.iloc[0]
    dear = run_scenario(chat_scenario(electricity_usd_per_kwh=0.20)).summary.iloc[0]
    assert cheap["cost_per_request_usd"] < dear["cost_per_request_usd"]
