"""dcsim tco: cash flow, NPV and levelised cost by hand on synthetic pool tables, one
cross-check against the run's own hourly cost, and the sensitivity table's direction,
one value and its winner by hand."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from sim.scenario import Economics
from sim.studies.tco import Pricing, cash_flow_table, npv_table, sensitivity_table, tco_tables

H = 365.25 * 24  # hours per year
S = H * 3600  # seconds per year
FINANCE = pd.read_csv(Path(__file__).resolve().parents[3] / "fleets" / "data" / "finance.csv").set_index("key")


def pools(fleet="f", acc=100e3, servers=20e3, network=10e3, facility=50e3, max_w=10e3, idle_w=2e3, busy_w=8e3,
          busy=0.5, rent=10.0):
    return pd.DataFrame([{"fleet": fleet, "capex_accelerators_usd": acc, "capex_servers_usd": servers,
                          "capex_network_usd": network, "capex_facility_usd": facility, "it_power_max_w": max_w,
                          "it_power_idle_w": idle_w, "it_power_busy_w": busy_w, "busy_fraction": busy,
                          "rent_usd_per_hour": rent}])


def summary(fleets=("f",), tokens=1000.0, rps=10.0, attainment=1.0):
    return pd.DataFrame([{"fleet": f, "workload": "chat", "output_tokens_per_s": tokens, "throughput_rps": rps,
                          "slo_attainment": attainment, "slo_target": 0.99, "unstable": False} for f in fleets])


def econ(**kw):
    base = {"electricity_usd_per_kwh": 0.1, "pue": 1.5, "depreciation_years": 3, "facility_depreciation_years": 20,
            "discount_rate_per_year": 0.1, "maintenance_fraction_per_year": 0.05, "staff_usd_per_kw_month": 10.0}
    return Economics(**{**base, **kw})


def test_npv_and_levelised_cost_by_hand():
    flow = cash_flow_table(pools(), summary(), Pricing(econ()))
    npv = npv_table(flow, summary()).iloc[0]
    energy = (2e3 + 6e3 * 0.5) / 1e3 * 1.5 * 0.1 * H  # idle + (busy - idle) x busy fraction, kW x PUE x $/kWh
    yearly = energy + 0.05 * 130e3 + 10.0 * 10 * 12  # + maintenance (IT capex) + staff ($/kW-month x kW x 12)
    residual = 50e3 * (1 - 3 / 20)  # the facility's straight-line book value left after 3 of 20 years
    expected = 180e3 + sum(yearly / 1.1 ** y for y in (1, 2, 3)) - residual / 1.1 ** 3
    assert npv["npv_tco_usd"] == pytest.approx(expected, rel=1e-12)
    assert npv["tco_usd"] == pytest.approx(180e3 + 3 * yearly - residual, rel=1e-12)
    tokens = sum(1000 * S / 1.1 ** y for y in (1, 2, 3))
    assert npv["levelised_usd_per_1m_output_tokens"] == pytest.approx(expected / tokens * 1e6, rel=1e-12)
    assert npv["levelised_usd_per_request"] == pytest.approx(expected / (tokens / 100), rel=1e-12)
    assert list(flow["cumulative_discounted_usd"].round(6)) == list(flow["discounted_usd"].cumsum().round(6))


def test_it_is_bought_again_at_end_of_life_and_its_residual_credited():
    flow = cash_flow_table(pools(facility=0.0), summary(), Pricing(econ(), horizon_years=7)).set_index("year")
    assert list(flow["capex_it_usd"]) == [130e3, 0, 0, 130e3, 0, 0, 130e3, 0]  # bought at t = 0, 3, 6
    assert flow.loc[7, "residual_value_usd"] == pytest.approx(-130e3 * (1 - 1 / 3), rel=1e-12)


def test_colocation_and_rent_lines():
    coloc = econ(ownership="colocate", colocation_usd_per_kw_month=184.06, colocation_contract_ratio=1.5)
    row = cash_flow_table(pools(), summary(), Pricing(coloc)).set_index("year").loc[1]
    assert row["colocation_usd"] == pytest.approx(184.06 * 1.5 * 10 * 12, rel=1e-12)
    assert row["energy_usd"] > 0
    flow = cash_flow_table(pools(), summary(), Pricing(coloc)).set_index("year")
    assert flow["capex_facility_usd"].sum() == 0  # the provider owns the building
    included = cash_flow_table(pools(), summary(), Pricing(econ(ownership="colocate", colocation_power="included")))
    assert included["energy_usd"].sum() == 0
    rent = cash_flow_table(pools(), summary(), Pricing(econ(ownership="rent"))).set_index("year")
    assert rent["rent_usd"].tolist() == [0] + [10.0 * H] * 3
    assert rent[["capex_it_usd", "capex_facility_usd", "energy_usd", "maintenance_usd"]].to_numpy().sum() == 0


def test_undiscounted_tco_over_the_life_is_the_runs_hourly_cost():
    """Second implementation: at r = 0 and horizon = life, the cash flow adds up to the
    pool's own cost per hour (sim.models.economics.pool_costs) x 8766 x life."""
    from scenario_cases import make_scenario

    from sim.results.tables import run_scenario

    scenario = make_scenario(
        {"chat": {"kind": "autoregressive", "model": "llama-3-8b", "arrival": {"kind": "poisson", "rate_per_s": 4.0},
                  "prompt_tokens": {"kind": "constant", "value": 500}, "output_tokens": {"kind": "constant", "value": 100}}},
        [{"name": "chat", "accelerator": "mi300x", "serves": ["chat"], "replicas": 3, "tp": 1}],
        duration_s=120.0, warmup_s=10.0,
        economics={"depreciation_years": 4, "maintenance_fraction_per_year": 0.03, "staff_usd_per_kw_month": 20.0,
                   "other_opex_fraction_per_year": 0.02})
    results = run_scenario(scenario)
    tables = tco_tables(results)
    pool = results.pools.iloc[0]
    assert tables.npv.iloc[0]["tco_usd"] == pytest.approx(pool["own_cost_usd_per_hour"] * H * 4, rel=1e-9)
    assert tables.npv.iloc[0]["horizon_years"] == 4


def _by_level(sens, fleet="f"):
    g = sens[sens["fleet"] == fleet].set_index(["factor", "level"])
    return g["levelised_usd_per_1m_output_tokens"]


def test_sensitivity_directions_and_one_value_by_hand():
    sens = sensitivity_table(pools(), summary(), Pricing(econ(electricity_usd_per_kwh=0.0892, depreciation_years=5)))
    cost = _by_level(sens)
    base = cost[("base", "base")]
    assert cost[("accelerator price", "low")] < base < cost[("accelerator price", "high")]
    assert cost[("power price", "low")] < base < cost[("power price", "high")]
    assert cost[("lifetime", "low")] > base > cost[("lifetime", "high")]
    assert cost[("utilisation", "low")] > base  # idle time spread over less output
    assert cost[("cost of capital", "low")] < base < cost[("cost of capital", "high")]  # base r = 0.1 lies between
    # the high power price by hand: California industrial, read from the catalog row
    price = float(FINANCE.loc["electricity_usd_per_kwh", "high"])
    yearly = 5.0 * 1.5 * price * H + 0.05 * 130e3 + 10.0 * 10 * 12
    residual = 50e3 * (1 - 5 / 20)
    npv = 180e3 + sum(yearly / 1.1 ** y for y in range(1, 6)) - residual / 1.1 ** 5
    tokens = sum(1000 * S / 1.1 ** y for y in range(1, 6))
    assert cost[("power price", "high")] == pytest.approx(npv / tokens * 1e6, rel=1e-12)


def test_scaled_utilisation_clips_power_at_busy_one_and_scales_output():
    sens = sensitivity_table(pools(busy=0.8), summary(), Pricing(econ(), horizon_years=1))
    high = sens[(sens["factor"] == "utilisation") & (sens["level"] == "high")].iloc[0]
    u = float(FINANCE.loc["load_multiplier", "high"])
    assert (high["utilisation_method"], high["load_multiplier"]) == ("scaled", u)
    energy = 8.0 * 1.5 * 0.1 * H  # busy 0.8 x 1.5 > 1: the busy power, 8 kW
    yearly = energy + 0.05 * 130e3 + 10.0 * 10 * 12
    residual = 130e3 * (1 - 1 / 3) + 50e3 * (1 - 1 / 20)  # book values left after 1 year of 3 and of 20
    npv = 180e3 + yearly / 1.1 - residual / 1.1
    assert high["levelised_usd_per_1m_output_tokens"] == pytest.approx(npv / (1000 * u * S / 1.1) * 1e6, rel=1e-12)


def _chat(rate_per_s: float):
    from scenario_cases import make_scenario

    return make_scenario(
        {"chat": {"kind": "autoregressive", "model": "llama-3-8b",
                  "arrival": {"kind": "poisson", "rate_per_s": rate_per_s},
                  "prompt_tokens": {"kind": "constant", "value": 500}, "output_tokens": {"kind": "constant", "value": 100}}},
        [{"name": "chat", "accelerator": "mi300x", "serves": ["chat"], "replicas": 3, "tp": 1}],
        duration_s=120.0, warmup_s=10.0, economics={"depreciation_years": 4})


def test_re_simulated_utilisation_is_priced_from_the_runs_at_that_demand():
    """Second implementation: at r = 0 and horizon = life the levelised cost of a run is
    its pools' own cost per hour over its output tokens per hour (pool_costs)."""
    from sim.results.tables import run_scenario
    from sim.studies.tco import load_multipliers, scaled_demand

    base = _chat(4.0)
    results = run_scenario(base)
    runs = {level: run_scenario(scaled_demand(base, m)) for level, m in load_multipliers().items()}
    assert runs["low"].summary["arrival_rate_rps"].iloc[0] < results.summary["arrival_rate_rps"].iloc[0]
    sens = tco_tables(results, load_runs=runs).sensitivity.set_index(["factor", "level"])
    for level, run in runs.items():
        row = sens.loc[("utilisation", level)]
        hourly = run.pools["own_cost_usd_per_hour"].sum()
        tokens_per_hour = run.summary["output_tokens_per_s"].sum() * 3600
        assert row["utilisation_method"] == "re-simulated"
        assert row["levelised_usd_per_1m_output_tokens"] == pytest.approx(hourly / tokens_per_hour * 1e6, rel=1e-9)
    assert sens.loc[("utilisation", "low"), "levelised_usd_per_1m_output_tokens"] > \
        sens.loc[("base", "base"), "levelised_usd_per_1m_output_tokens"]


def test_winner_flips_where_the_hand_calculation_says():
    """A: dear, 1 kW; B: cheap, 10 kW; same output, no facility, no opex but energy. A wins
    while 100k + PV(energy_A) < 50k + PV(energy_B)."""
    both = pd.concat([pools("A", acc=100e3, servers=0, network=0, facility=0, idle_w=1e3, busy_w=1e3),
                      pools("B", acc=50e3, servers=0, network=0, facility=0, idle_w=10e3, busy_w=10e3)])
    base = econ(discount_rate_per_year=0.0, maintenance_fraction_per_year=0.0, staff_usd_per_kw_month=0.0,
                electricity_usd_per_kwh=0.0892, depreciation_years=5, pue=1.56)
    sens = sensitivity_table(both, summary(("A", "B")), Pricing(base))

    def hand_winner(factor, level):
        value = float(FINANCE.loc[{"accelerator price": "accelerator_price_factor", "utilisation": "load_multiplier",
                                   "lifetime": "depreciation_years", "power price": "electricity_usd_per_kwh",
                                   "cost of capital": "discount_rate_per_year"}[factor], level]) if level != "base" else None
        f, r, life, price = 1.0, 0.0, 5, 0.0892
        if factor == "accelerator price":
            f = value
        elif factor == "lifetime":
            life = int(value)
        elif factor == "power price":
            price = value
        elif factor == "cost of capital":
            r = value
        pv = sum(1 / (1 + r) ** y for y in range(1, life + 1))
        a = 100e3 * f + pv * 1.0 * 1.56 * price * H
        b = 50e3 * f + pv * 10.0 * 1.56 * price * H
        return "A" if a < b else "B"

    for (factor, level), g in sens.groupby(["factor", "level"]):
        assert g["winner"].iloc[0] == hand_winner(factor, level), (factor, level)
        assert g["winner_changes"].iloc[0] == (hand_winner(factor, level) != hand_winner("base", "base"))
    assert sens["winner_changes"].any()  # the power price low flips it to B


def test_a_fleet_that_misses_its_slo_never_wins():
    both = pd.concat([pools("A", acc=1e3), pools("B")])
    s = summary(("A", "B"))
    s.loc[s["fleet"] == "A", "slo_attainment"] = 0.5
    sens = sensitivity_table(both, s, Pricing(econ()))
    assert set(sens["winner"]) == {"B"}
