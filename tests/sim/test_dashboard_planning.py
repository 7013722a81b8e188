"""Size to SLO, the curves view and the prefix-cache columns in the app, through
Streamlit's AppTest (no browser): the views open before and after a run, a search within
a tiny budget says it ran out, the winners are applied with the user's other edits kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "app.py")
PREFIX = "default::"


def start() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    return at


def show(at: AppTest, view: str) -> None:
    at.get("button_group")[0].set_value(view).run()
    assert not at.exception, at.exception


def texts(at: AppTest) -> str:
    return " ".join(e.value for kind in ("warning", "success", "error", "info", "markdown", "caption")
                    for e in getattr(at, kind))


@pytest.fixture
def quick(monkeypatch):
    """Simulations of 5 s of arrivals, so a search finishes fast."""
    import sim.results.tables

    real = sim.results.tables.run_scenario
    monkeypatch.setattr(sim.results.tables, "run_scenario",
                        lambda scenario, progress=None: real(scenario.model_copy(update={"duration_s": 5.0, "warmup_s": 0.0})))


@pytest.mark.slow
def test_size_to_slo_before_a_run_states_its_budget_and_applies_the_winner_keeping_edits(quick):
    at = start()
    at.number_input(key=PREFIX + "run.seed").set_value(7).run()  # an edit that must survive
    show(at, "Size to SLO")
    at.multiselect(key="size-workloads").set_value(["chat"]).run()
    at.number_input(key="size-budget").set_value(600.0).run()
    assert "Budget: 600 s" in texts(at) and "h100-sxm, b200, mi300x" in texts(at)  # stated before it starts
    at.button(key="size-run").click().run()
    assert not at.exception, at.exception
    assert "Searched every layout" in texts(at) and "Winner: " in texts(at)
    chips = at.table[0].value
    assert list(chips.index) == ["h100-sxm", "b200", "mi300x"]
    assert sum(v.startswith("winner") for v in chips["verdict"]) == 1
    at.button(key="size-apply").click().run()
    assert not at.exception, at.exception
    assert at.session_state["all_fleets"] == ["all-h100", "all-b200", "h100+mi300x", "sized-to-slo"]
    version = at.session_state["table::default"]["version"]
    assert at.session_state[f"default#{version}::run.seed"] == 7  # the other edit kept
    assert "sized-to-slo" in at.session_state[f"default#{version}::fleets.selected"]
    assert not at.button(key="run").disabled  # the new fleet is a valid scenario


@pytest.mark.slow
def test_a_tiny_budget_says_it_ran_out(monkeypatch):
    """The sizing module's clock moves 10 s per simulation: with a 1 s budget the first
    simulation runs and no other starts, however fast the machine."""
    import types

    import sim.dashboard_sizing as sz
    import sim.results.tables

    offset, real, clock = [0.0], sim.results.tables.run_scenario, sz.time.monotonic

    def run(scenario, progress=None):
        offset[0] += 10.0
        return real(scenario.model_copy(update={"duration_s": 5.0, "warmup_s": 0.0}))

    monkeypatch.setattr(sim.results.tables, "run_scenario", run)
    monkeypatch.setattr(sz, "time", types.SimpleNamespace(monotonic=lambda: clock() + offset[0]))
    at = start()
    show(at, "Size to SLO")
    at.number_input(key="size-budget").set_value(1.0).run()
    at.multiselect(key="size-workloads").set_value(["chat", "image"]).run()
    at.button(key="size-run").click().run()
    assert not at.exception, at.exception
    assert "Ran out of budget** for chat" in texts(at) and "1 simulations" in texts(at)


def test_curves_view_draws_the_chips_on_screen_with_csv_downloads():
    at = start()
    show(at, "Curves")
    assert at.selectbox(key="curves-model").value == "llama-3.1-70b"
    table = at.table[0].value
    assert set(table.index.get_level_values("chip")) == {"h100-sxm", "b200", "mi300x"}
    at.number_input(key="curves-util").set_value(50.0).run()
    assert "tok/s per MW at 50%" in at.table[0].value.columns
    at.multiselect(key="curves-chips").set_value(["tpu-v5e"]).run()
    at.selectbox(key="curves-model").set_value("llama-3.1-405b").run()
    assert not at.exception and "tpu-v5e** has no curve" in texts(at)


@pytest.mark.slow
def test_overview_shows_prefix_cache_columns_for_a_cached_run(monkeypatch):
    import sim.results.tables

    real = sim.results.tables.run_scenario
    monkeypatch.setattr(sim.results.tables, "run_scenario",
                        lambda scenario, progress=None: real(scenario.model_copy(update={"duration_s": 120.0,
                                                                                        "warmup_s": 10.0})))
    at = start()
    at.selectbox(key="scenario").set_value("mooncake-prefix").run()
    at.button(key="run").click().run()
    assert not at.exception, at.exception
    assert any(s.value == "Prefix cache" for s in at.subheader)
    cached = next(t.value for t in at.table if "prefix_hit_ratio" in t.value.columns)
    assert {"tokens_from_hbm", "tokens_from_host", "kv_bytes_moved_host_to_hbm", "prefill_flops_saved"} <= set(cached.columns)
    assert "no-cache" not in cached.index.get_level_values("fleet")


@pytest.mark.slow
def test_tco_view_colocated_adds_up_to_the_hourly_bill_over_the_life(quick):
    """The TCO view of a colocated run: at r = 0 over the depreciation life, each fleet's
    undiscounted TCO is its pools' own cost per hour x 8766 x life (a second computation
    from pools.csv of the same run), and each pool's colocation line is its provisioned IT
    kW x $/kW-month / 730.5 (hours per month)."""
    import json

    from sim.results.tables import run_scenario
    from sim.scenario import parse_scenario

    at = start()
    at.selectbox(key=PREFIX + "economics.ownership").set_value("colocate").run()
    at.button(key="run").click().run()
    assert not at.exception, at.exception
    show(at, "TCO")
    frames = [d.value for d in at.dataframe]
    npv = next(f for f in frames if "tco_usd" in f.columns)
    sensitivity = next(f for f in frames if "winner" in f.columns)
    scenario = parse_scenario(json.loads(at.session_state["last_run"]), "dashboard")
    pools = run_scenario(scenario).pools
    life = scenario.economics.depreciation_years
    assert scenario.economics.ownership == "colocate" and scenario.economics.discount_rate_per_year == 0
    for fleet, group in pools.groupby("fleet"):
        assert npv.loc[fleet, "tco_usd"] == pytest.approx(group["own_cost_usd_per_hour"].sum() * 8766 * life, rel=1e-9)
        kw = group["it_power_max_w"] / 1000.0
        assert group["colocation_usd_per_hour"].to_numpy() == pytest.approx((kw * 184.06 / 730.5).to_numpy(), rel=1e-9)
    assert {"accelerator price", "power price", "lifetime"} <= set(sensitivity.index.get_level_values("factor"))
    assert set(sensitivity["winner"].dropna()) <= set(npv.index) | {""}
