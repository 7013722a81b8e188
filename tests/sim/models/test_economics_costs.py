"""Economics against hand arithmetic (annuity, packing, power from the perf model's
achieved FLOP and bytes), and the fully loaded costs adding up to the bill."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from scenario_cases import make_scenario

from fleets.catalog_io import load_catalog
from sim.errors import PlacementError, UserError
from sim.fleet_plan import resolve
from sim.results.tables import run_scenario

HOURS_PER_YEAR = 365.25 * 24
DATA = Path(__file__).resolve().parents[3] / "fleets" / "data"


def chat_scenario(accelerator="mi300x", replicas=3, **economics):
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
        [{"name": "chat", "accelerator": accelerator, "serves": ["chat"], "replicas": replicas, "tp": 1}],
        duration_s=120.0,
        warmup_s=10.0,
        economics=economics,
    )


def power_row(key):
    """Power coefficients straight from the CSV; a type without a row takes the
    h100-sxm fractions scaled to its TDP (documented fallback)."""
    table = pd.read_csv(DATA / "power.csv").set_index("key")
    if key in table.index:
        r = table.loc[key]
        return r["idle_w"], r["memory_bound_dynamic_fraction"], r["host_idle_fraction"]
    r = table.loc["h100-sxm"]
    tdp = load_catalog().accelerator(key).tdp_w
    return r["idle_w"] / 700 * tdp, r["memory_bound_dynamic_fraction"], r["host_idle_fraction"]


def test_capex_and_hourly_cost_by_hand():
    econ = {"electricity_usd_per_kwh": 0.1, "pue": 1.5, "facility_capex_usd_per_mw": 10e6,
            "depreciation_years": 4, "facility_depreciation_years": 20, "discount_rate_per_year": 0.08,
            "network_capex_usd_per_node": 50_000, "maintenance_fraction_per_year": 0.03,
            "staff_usd_per_kw_month": 20.0, "other_opex_fraction_per_year": 0.05}
    results = run_scenario(chat_scenario(**econ))
    pool = results.pools.iloc[0]
    acc = load_catalog().accelerator("mi300x")
    nodes = 1  # 3 single-GPU replicas share one 8-GPU node
    node_power_w = acc.accelerators_per_node * acc.tdp_w + acc.node_overhead_w
    it_power_max_w = nodes * node_power_w
    capex_it = 3 * acc.price_usd + (0 if acc.price_includes_server else nodes * acc.server_cost_usd_per_node) + 50_000
    capex_facility = 10e6 * it_power_max_w / 1e6
    assert pool["capex_usd"] == pytest.approx(capex_it + capex_facility, rel=1e-12)
    crf = lambda r, n: r / (1 - (1 + r) ** -n)  # noqa: E731 - the annuity formula, written out
    # power by hand: activities from the achieved FLOP and bytes (MFU, MBU over busy time)
    busy = pool["busy_fraction"]
    a_c = min(1.0, pool["mfu"] / busy / acc.compute_efficiency)
    a_m = min(1.0, pool["bandwidth_utilisation"] / busy / acc.bandwidth_efficiency)
    idle_w, w_m, h = power_row("mi300x")
    load = busy * min(1.0, a_c + w_m * a_m)
    power_w = 3 * (idle_w + (acc.tdp_w - idle_w) * load) + acc.node_overhead_w * (h + (1 - h) * load)
    assert pool["it_power_avg_w"] == pytest.approx(power_w, rel=1e-9)
    opex = (0.03 * capex_it + 0.05 * (capex_it + capex_facility)) / HOURS_PER_YEAR + 20.0 * it_power_max_w / 1e3 / (HOURS_PER_YEAR / 12)
    hourly = (capex_it * crf(0.08, 4) + capex_facility * crf(0.08, 20)) / HOURS_PER_YEAR + power_w * 1.5 / 1000 * 0.1 + opex
    assert pool["cost_usd_per_hour"] == pytest.approx(hourly, rel=1e-9)
    assert pool["opex_usd_per_month"] == pytest.approx((power_w * 1.5 / 1000 * 0.1 + opex) * HOURS_PER_YEAR / 12, rel=1e-9)
    # a busy replica's rate (the marginal cost's): same capital and opex, power at busy = 1
    dyn = min(1.0, a_c + w_m * a_m)
    busy_w = 3 * (idle_w + (acc.tdp_w - idle_w) * dyn) + acc.node_overhead_w * (h + (1 - h) * dyn)
    assert pool["busy_own_cost_usd_per_hour"] == pytest.approx(hourly + (busy_w - power_w) * 1.5 / 1000 * 0.1, rel=1e-9)


def test_zero_discount_rate_is_straight_line():
    pool = run_scenario(chat_scenario(discount_rate_per_year=0.0, facility_capex_usd_per_mw=0,
                                      network_capex_usd_per_node=0)).pools.iloc[0]
    acc = load_catalog().accelerator("mi300x")
    capex_it = 3 * acc.price_usd + (0 if acc.price_includes_server else acc.server_cost_usd_per_node)
    assert pool["depreciation_usd_per_hour"] == pytest.approx(capex_it / (5 * HOURS_PER_YEAR), rel=1e-12)


def test_fully_loaded_costs_and_energy_add_up_to_the_pool_bill():
    results = run_scenario(chat_scenario())
    req, pool = results.requests, results.pools.iloc[0]
    end_s = results.end_s["f"]
    assert end_s >= req["done_at_s"].max()
    bill = pool["run_cost_usd_per_hour"] * end_s / 3600
    assert req["cost_usd"].sum() == pytest.approx(bill, rel=1e-9)
    assert req["energy_j"].sum() == pytest.approx(pool["run_it_power_avg_w"] * end_s, rel=1e-9)
    # marginal cost never exceeds the fully loaded one when the pool is partly idle
    assert (req["marginal_cost_usd"] <= req["cost_usd"] * (1 + 1e-9)).all()


def test_rent_bills_accelerator_hours_from_the_gpu_rental_rows():
    rates = pd.read_csv(DATA / "ownership.csv").set_index("key")["rental_usd_per_accelerator_hour"]
    results = run_scenario(chat_scenario(ownership="rent"))
    pool, req, row = results.pools.iloc[0], results.requests, results.summary.iloc[0]
    assert pool["cost_usd_per_hour"] == pytest.approx(3 * rates["mi300x"], rel=1e-12)
    assert req["cost_usd"].sum() == pytest.approx(3 * rates["mi300x"] * results.end_s["f"] / 3600, rel=1e-9)
    assert row["cost_per_request_usd"] == pytest.approx(row["cost_per_request_rent_usd"], rel=1e-12)
    # marginal rent: the replica-seconds held x one replica's hourly rate
    done = req[req["status"] == "completed"]
    assert done["marginal_cost_rent_usd"].sum() == pytest.approx(done["busy_share_s"].sum() * rates["mi300x"] / 3600, rel=1e-9)
    assert row["cost_per_request_own_usd"] > 0
    # the text report: a rented fleet has no capex and its opex is the rent (3 GPUs x rate x 730 h)
    from sim.results.report_text import run_report, usd
    text = run_report(results)
    assert "capex          none: rented (buying would cost $" in text
    assert f"opex           {usd(3 * rates['mi300x'] * 8760 / 12)}/month (rent)" in text


def test_rent_override_and_missing_rental_price():
    pool = run_scenario(chat_scenario(ownership="rent", rental_usd_per_accelerator_hour={"mi300x": 2.0})).pools.iloc[0]
    assert pool["cost_usd_per_hour"] == pytest.approx(6.0)
    with pytest.raises(UserError, match="rental_usd_per_accelerator_hour.gaudi3"):
        run_scenario(chat_scenario(accelerator="gaudi3", ownership="rent"))


def test_facility_limit_refuses_the_fleet_with_its_figure():
    acc = load_catalog().accelerator("mi300x")
    need_mw = 2 * (8 * acc.tdp_w + acc.node_overhead_w) * 1.56 / 1e6  # 9 GPUs -> 2 nodes
    with pytest.raises(PlacementError) as err:
        resolve(chat_scenario(replicas=9, facility_power_limit_mw=round(need_mw - 0.001, 3)))
    assert f"{need_mw:.3f} MW" in str(err.value) and "2 nodes" in str(err.value)
    resolve(chat_scenario(replicas=9, facility_power_limit_mw=round(need_mw + 0.001, 3)))


def test_cheaper_electricity_lowers_cost_per_request():
    cheap = run_scenario(chat_scenario(electricity_usd_per_kwh=0.05)).summary.iloc[0]
    dear = run_scenario(chat_scenario(electricity_usd_per_kwh=0.20)).summary.iloc[0]
    assert cheap["cost_per_request_usd"] < dear["cost_per_request_usd"]
