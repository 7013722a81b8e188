"""Colocation ownership (own the IT, rent space and power at $/kW-month) and the finance
assumptions every cost output names, against hand arithmetic."""

from __future__ import annotations

import pytest
from scenario_cases import make_scenario

from fleets.catalog_io import load_catalog
from sim.results.planner_csv import fleet_workload_rows, planner_table
from sim.results.report_text import run_report
from sim.results.tables import run_scenario

HOURS_PER_YEAR = 365.25 * 24


def chat_scenario(**economics):
    """Three single-GPU MI300X replicas (one 8-GPU node) serving Llama-3-8B chat."""
    return make_scenario(
        {"chat": {"kind": "autoregressive", "model": "llama-3-8b", "arrival": {"kind": "poisson", "rate_per_s": 4.0},
                  "prompt_tokens": {"kind": "constant", "value": 500}, "output_tokens": {"kind": "constant", "value": 100}}},
        [{"name": "chat", "accelerator": "mi300x", "serves": ["chat"], "replicas": 3, "tp": 1}],
        duration_s=120.0, warmup_s=10.0, economics=economics)


ECON = {"electricity_usd_per_kwh": 0.1, "pue": 1.5, "facility_capex_usd_per_mw": 10e6, "depreciation_years": 4,
        "discount_rate_per_year": 0.08, "network_capex_usd_per_node": 50_000, "maintenance_fraction_per_year": 0.03,
        "staff_usd_per_kw_month": 20.0, "ownership": "colocate", "colocation_usd_per_kw_month": 150.0,
        "colocation_contract_ratio": 1.2}


def _capex_it_and_max_w():
    acc = load_catalog().accelerator("mi300x")
    capex_it = 3 * acc.price_usd + (0 if acc.price_includes_server else acc.server_cost_usd_per_node) + 50_000
    return capex_it, acc.accelerators_per_node * acc.tdp_w + acc.node_overhead_w  # one node


@pytest.fixture(scope="module")
def metered():
    return run_scenario(chat_scenario(**ECON))


def test_colocation_prices_the_it_without_facility_capex(metered):
    pool = metered.pools.iloc[0]
    capex_it, it_max_w = _capex_it_and_max_w()
    assert pool["capex_facility_usd"] == 0.0
    assert pool["capex_usd"] == pytest.approx(capex_it, rel=1e-12)
    fee = 150.0 * 1.2 * it_max_w / 1e3 / (HOURS_PER_YEAR / 12)  # $/kW-month x contracted kW / hours per month
    assert pool["colocation_usd_per_hour"] == pytest.approx(fee, rel=1e-12)
    crf = 0.08 / (1 - 1.08 ** -4)
    energy = pool["it_power_avg_w"] * 1.5 / 1e3 * 0.1  # metered at $/kWh x PUE
    opex = 0.03 * capex_it / HOURS_PER_YEAR + 20.0 * it_max_w / 1e3 / (HOURS_PER_YEAR / 12) + fee
    assert pool["cost_usd_per_hour"] == pytest.approx(capex_it * crf / HOURS_PER_YEAR + energy + opex, rel=1e-9)
    assert pool["own_cost_usd_per_hour"] == pool["cost_usd_per_hour"]


def test_colocated_requests_split_the_colocated_bill(metered):
    req, pool = metered.requests, metered.pools.iloc[0]
    bill = pool["run_cost_usd_per_hour"] * metered.end_s["f"] / 3600
    assert req["cost_usd"].sum() == pytest.approx(bill, rel=1e-9)
    assert (req["cost_usd"].dropna() == req["cost_own_usd"].dropna()).all()


def test_power_included_drops_exactly_the_energy(metered):
    included = run_scenario(chat_scenario(**ECON, colocation_power="included")).pools.iloc[0]
    pool = metered.pools.iloc[0]
    assert included["energy_usd_per_hour"] == 0.0
    assert included["cost_usd_per_hour"] == pytest.approx(pool["cost_usd_per_hour"] - pool["energy_usd_per_hour"],
                                                          rel=1e-9)


def test_report_and_planner_csv_name_the_finance_assumptions(metered):
    text = run_report(metered, None)  # one line, unwrapped
    assert "cost of capital 8.0%/yr" in text and "maintenance 3.0% of IT capex/yr" in text
    assert "colocation $150.00/kW-month x 1.2 of provisioned kW, power metered" in text
    row = planner_table(fleet_workload_rows(metered), ["fleet"]).iloc[0]
    assert (row["ownership"], row["discount_rate_per_year"], row["maintenance_fraction_per_year"],
            row["staff_usd_per_kw_month"], row["colocation_usd_per_kw_month"], row["colocation_power"]) == (
        "colocate", 0.08, 0.03, 20.0, 150.0, "metered")


def test_zero_finance_defaults_are_printed_as_not_charged():
    results = run_scenario(chat_scenario())
    text = run_report(results, None)
    assert "Finance: ownership own; not charged: cost of capital, maintenance, staff (docs/costs.md)" in text
    row = planner_table(fleet_workload_rows(results), ["fleet"]).iloc[0]
    assert row["discount_rate_per_year"] == 0.0 and row["ownership"] == "own"
    assert row["colocation_usd_per_kw_month"] != row["colocation_usd_per_kw_month"]  # NaN: not colocating
