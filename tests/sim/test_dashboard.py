"""The dashboard's widgets and logic through Streamlit's AppTest (no browser): a slider
changes the scenario handed to the simulator; bad input shows an error beside its widget."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from sim import dashboard as ds
from sim.scenario import load_scenario

APP = str(Path(__file__).resolve().parents[2] / "app.py")
PREFIX = "default::"


@pytest.fixture
def captured(monkeypatch):
    """Replace the simulator with a recorder of the scenario it is given (fast)."""
    import sim.results.tables

    seen = []
    real = sim.results.tables.run_scenario

    def fake(scenario, progress=None):
        seen.append(scenario)
        tiny = scenario.model_copy(update={"duration_s": 5.0, "warmup_s": 0.0})
        return real(tiny)

    monkeypatch.setattr(sim.results.tables, "run_scenario", fake)
    import streamlit as st

    st.cache_data.clear()
    return seen


def start() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def test_first_page_offers_the_default_scenario_and_no_error():
    at = start()
    assert at.selectbox(key="scenario").value == "default"
    assert not at.error
    assert not at.button(key="run").disabled


def test_typing_a_total_rate_changes_the_simulated_scenario(captured):
    at = start()
    at.number_input(key=PREFIX + "traffic.total_rate_per_s").set_value(36.2).run()
    at.button(key="run").click().run()
    assert not at.exception, at.exception
    assert len(captured) == 1
    rates = {n: w.arrival.mean_rate_per_s for n, w in captured[0].workloads.items()}
    assert sum(rates.values()) == pytest.approx(36.2)
    assert rates["chat"] == pytest.approx(24.0, rel=1e-3)  # 12 of 18.1 req/s, doubled
    assert at.main.table, "the per-workload KPI table shown after Run"


def test_untouched_sidebar_runs_the_file_as_written_with_the_dashboard_duration(captured):
    at = start()
    at.button(key="run").click().run()
    expected = ds.for_dashboard(load_scenario("scenarios/default.yaml").model_dump(mode="json"))
    assert captured[0].model_dump(mode="json") == expected
    assert captured[0].duration_s == ds.DASHBOARD_MAX_DURATION_S


@pytest.mark.slow  # several app runs and simulations
def test_same_scenario_twice_is_served_from_the_cache(captured):
    at = start()
    at.button(key="run").click().run()
    at.number_input(key=PREFIX + "run.seed").set_value(43).run()
    at.button(key="run").click().run()
    at.number_input(key=PREFIX + "run.seed").set_value(42).run()
    at.button(key="run").click().run()
    assert [s.seed for s in captured] == [42, 43]


def test_hardware_and_price_edits_reach_the_scenario(captured):
    at = start()
    at.number_input(key=PREFIX + "fleets.1.pools.0.replicas").set_value(3).run()
    at.number_input(key=PREFIX + "economics.pue").set_value(1.2).run()
    at.multiselect(key=PREFIX + "fleets.selected").set_value(["all-b200"]).run()
    at.button(key="run").click().run()
    scenario = captured[-1]
    assert [f.name for f in scenario.fleets] == ["all-b200"]
    assert scenario.fleets[0].pools[0].replicas == 3
    assert scenario.economics.pue == 1.2


def test_shared_steps_above_total_shows_an_error_and_blocks_run():
    at = start()
    at.number_input(key=PREFIX + "workloads.search.shared_steps").set_value(40).run()
    assert not at.exception
    messages = [e.value for e in at.error]
    assert any("shared_steps (=40) must be <= total_steps (=28)" in m for m in messages), messages
    assert at.button(key="run").disabled


def test_bad_steps_text_and_impossible_tp_show_errors():
    at = start()
    at.text_input(key=PREFIX + "workloads.dlm.steps").input("four").run()
    at.selectbox(key=PREFIX + "fleets.0.pools.0.tp").set_value(16).run()
    messages = " ".join(e.value for e in at.error)
    assert "steps: write whole numbers" in messages
    assert "TP must fit one scale-up domain" in messages
    assert not at.exception


def test_error_lands_on_its_widget_key():
    data = ds.for_dashboard(load_scenario("scenarios/default.yaml").model_dump(mode="json"))
    initial = ds.initial_values(data)
    _, errors = ds.validate(data, {**initial, "fleets.0.pools.0.tp": 16}, initial)
    assert list(errors) == ["fleets.0.pools.0.tp"]
    assert "TP must fit one scale-up domain of 8" in errors["fleets.0.pools.0.tp"][0]
    assert "raise pp" not in errors["fleets.0.pools.0.tp"][0]  # the dashboard has no pp control
    assert "set it in the scenario file" in errors["fleets.0.pools.0.tp"][0]
    _, errors = ds.validate(data, {**initial, "fleets.0.pools.1.serves": []}, initial)
    assert list(errors) == ["fleets.0.pools.1.serves"]
    _, errors = ds.validate(data, {**initial, "traffic.share.dlm": 0.0}, initial)
    assert list(errors) == ["traffic.share.dlm"]


def test_only_run_scenarios_are_listed():
    found = ds.run_scenarios()
    assert "default" in found
    assert all("workloads" in p.read_text() for p in found.values())
    assert "sweep-mix" not in found


def test_steps_text_round_trip():
    assert ds.parse_steps("16") == {"kind": "constant", "value": 16}
    assert ds.parse_steps("4, 8 16") == {"kind": "choice", "values": [4, 8, 16]}
    assert ds.steps_text({"kind": "choice", "values": [4, 8]}) == "4, 8"
    with pytest.raises(ValueError):
        ds.parse_steps("0")


@pytest.mark.slow  # several app runs and simulations
def test_total_rate_has_no_artificial_cap(captured):
    at = start()
    at.number_input(key=PREFIX + "traffic.total_rate_per_s").set_value(1000.0).run()
    assert not at.exception, at.exception
    at.button(key="run").click().run()
    rates = {n: w.arrival.mean_rate_per_s for n, w in captured[-1].workloads.items()}
    assert sum(rates.values()) == pytest.approx(1000.0)  # 55x the file's 18.1 req/s
    assert rates["chat"] == pytest.approx(1000.0 * 12 / 18.1, rel=1e-3)


@pytest.mark.slow  # several app runs and simulations
def test_price_follows_the_accelerator_and_the_shown_price_is_what_runs(captured):
    """H100 -> MI300X: the field shows MI300X's catalog price; typing the H100 price back
    (the value the field started with) is applied, not ignored as 'unchanged'."""
    from fleets.catalog_io import load_catalog

    accelerators = load_catalog().accelerators
    at = start()
    pool = PREFIX + "fleets.0.pools.0."
    start_acc = at.selectbox(key=pool + "accelerator").value
    start_price = at.number_input(key=pool + "price_usd").value
    other = "mi300x" if start_acc != "mi300x" else "h100"
    at.selectbox(key=pool + "accelerator").set_value(other).run()
    assert at.number_input(key=pool + "price_usd").value == accelerators[other].price_usd
    at.button(key="run").click().run()
    assert captured[-1].fleets[0].pools[0].accelerator == other
    assert captured[-1].fleets[0].pools[0].price_usd in (None, accelerators[other].price_usd)
    at.number_input(key=pool + "price_usd").set_value(start_price).run()
    at.button(key="run").click().run()
    assert captured[-1].fleets[0].pools[0].price_usd == start_price
    assert start_price != accelerators[other].price_usd


@pytest.mark.slow  # several app runs and simulations
def test_precision_and_max_batch_are_editable(captured):
    at = start()
    pool = PREFIX + "fleets.1.pools.0."
    at.selectbox(key=pool + "precision").set_value("bf16").run()
    at.number_input(key=pool + "max_batch").set_value(64).run()
    at.button(key="run").click().run()
    edited = captured[-1].fleets[1].pools[0]
    assert (edited.precision, edited.max_batch) == ("bf16", 64)


def test_accelerator_defaults_pick_a_supported_precision():
    from fleets.catalog_io import load_catalog

    catalog = load_catalog()
    for key, acc in catalog.accelerators.items():
        got = ds.accelerator_defaults(key, "fp4", catalog)
        assert got["price_usd"] == acc.price_usd
        assert got["precision"] in acc.precisions
        if "fp4" in acc.precisions:
            assert got["precision"] == "fp4"


def test_untouched_sidebar_round_trips_every_run_scenario():
    """Applying every shown value (not only differences) leaves each file as written."""
    from fleets.catalog_io import load_catalog
    from sim.scenario import parse_scenario

    catalog = load_catalog()
    for name, path in ds.run_scenarios().items():
        data = ds.for_dashboard(load_scenario(path).model_dump(mode="json"))
        initial = ds.initial_values(data, catalog)
        scenario, errors = ds.validate(data, initial, initial, catalog)
        assert errors == {}, (name, errors)
        assert scenario.model_dump(mode="json") == parse_scenario(data, name).model_dump(mode="json"), name


def test_long_placement_error_is_shown_full_width_and_run_says_why():
    at = start()
    at.selectbox(key=PREFIX + "fleets.0.pools.0.accelerator").set_value("tpu-v5e").run()  # 16 GB for a 70B
    assert at.button(key="run").disabled
    main = [e.value for e in at.main.error]
    assert any("Run is disabled" in m for m in main), main
    assert any("cannot place model" in m and "pick an accelerator with more memory" in m for m in main), main
    sidebar = [e.value for e in at.sidebar.error]
    assert all(len(m) <= 260 for m in sidebar), sidebar


def test_trace_scenario_shows_the_trace_rate_and_rate_scale():
    """19,366 rows over ~3,502 s (the scenario file's header): ~5.5 req/s at rate_scale 1."""
    data = ds.for_dashboard(load_scenario("scenarios/azure-conv.yaml").model_dump(mode="json"))
    trace = next(w for w in data["workloads"].values() if w["arrival"]["kind"] == "trace")["arrival"]
    assert Path(trace["path"]).is_file()  # shipped in traffic/data
    at = start()
    at.selectbox(key="scenario").set_value("azure-conv").run()
    assert not at.exception, at.exception
    captions = " ".join(c.value for c in at.sidebar.caption)
    rate = float(captions.split("replays a trace: ", 1)[1].split(" req/s")[0])
    assert rate == pytest.approx(19_366 / 3_502, rel=0.02)
    assert "rate_scale 1" in captions
    assert at.number_input(key="azure-conv::workloads." + next(
        n for n, w in data["workloads"].items() if w["arrival"]["kind"] == "trace") + ".arrival.rate_scale")


VIEWS = ["Latency", "Utilisation", "Cost", "Roofline", "SLO misses", "Compare", "Energy", "Overview"]


@pytest.mark.slow  # several app runs and simulations
def test_every_view_renders_after_a_run(captured):
    at = start()
    at.button(key="run").click().run()
    for view in VIEWS:
        at.button_group[0].set_value(view).run()
        assert not at.exception, (view, at.exception)
    at.button_group[0].set_value("SLO misses").run()
    assert at.warning or at.success  # every missed workload explained, or all met
    at.button_group[0].set_value("Compare").run()
    assert at.table, "the N-fleet comparison table"



def default_data() -> dict:
    return ds.for_dashboard(load_scenario("scenarios/default.yaml").model_dump(mode="json"))


def test_fleets_table_round_trips_the_scenario():
    from sim.scenario import parse_scenario

    data = default_data()
    fleets = ds.fleets_from_table(ds.fleets_table(data), data)
    assert parse_scenario({**data, "fleets": fleets}, "t").model_dump() == parse_scenario(data, "t").model_dump()


def test_fleets_table_add_remove_rename_and_catalog_defaults():
    from fleets.catalog_io import load_catalog

    catalog = load_catalog()
    data = default_data()
    rows = ds.fleets_table(data)
    first = rows[0]["fleet"]
    rows = [r for r in rows if r["fleet"] != data["fleets"][1]["name"]]  # remove a fleet
    rows = [{**r, "fleet": "renamed"} if r["fleet"] == first else r for r in rows]  # rename one
    rows.append({"fleet": "new", "pool": "all", "accelerator": "groq-lpu", "replicas": 600, "tp": None,
                 "precision": "fp8", "max_batch": None, "price_usd": float("nan"), "serves": "chat, dlm"})
    rows.append({"fleet": None, "pool": None})  # the editor's empty new row
    fleets = ds.fleets_from_table(rows, data, catalog)
    names = [f["name"] for f in fleets]
    assert names == ["renamed", data["fleets"][2]["name"], "new"]
    new = fleets[-1]["pools"][0]
    assert new["precision"] in catalog.accelerators["groq-lpu"].precisions  # one the part has a peak for
    assert (new["tp"], new["max_batch"], new["price_usd"], new["serves"]) == (1, 256, None, ["chat", "dlm"])


def test_duplicate_fleet_names_the_copy_uniquely():
    fleets = default_data()["fleets"]
    once = ds.duplicate_fleet(fleets, fleets[0]["name"])
    twice = ds.duplicate_fleet(once, fleets[0]["name"])
    assert [f["name"] for f in twice][-2:] == [f"{fleets[0]['name']}-copy", f"{fleets[0]['name']}-copy2"]
    assert twice[-1]["pools"] == fleets[0]["pools"]


@pytest.mark.slow  # several app runs and simulations
def test_duplicating_a_fleet_in_the_app_runs_it_and_keeps_other_edits(captured):
    at = start()
    at.number_input(key=PREFIX + "run.seed").set_value(7).run()
    at.button(key="dup-fleet").click().run()
    assert not at.exception, at.exception
    at.button(key="run").click().run()
    scenario = captured[-1]
    assert [f.name for f in scenario.fleets][-1] == scenario.fleets[0].name + "-copy"
    assert scenario.fleets[-1].pools == scenario.fleets[0].pools
    assert scenario.seed == 7  # the seed edit survived the new fleet layout



def test_every_economics_field_is_editable(captured):
    at = start()
    at.number_input(key=PREFIX + "economics.staff_usd_per_kw_month").set_value(12.5).run()
    at.number_input(key=PREFIX + "economics.discount_rate_per_year").set_value(0.08).run()
    at.selectbox(key=PREFIX + "economics.ownership").set_value("rent").run()
    at.button(key="run").click().run()
    economics = captured[-1].economics
    assert (economics.staff_usd_per_kw_month, economics.discount_rate_per_year, economics.ownership) == (12.5, 0.08, "rent")



def test_an_arithmetic_bug_in_placement_is_reported_not_a_crash(monkeypatch):
    """A catalog row the placement code divides by zero on (found: cerebras-wse3 at tp=4)
    must leave the page usable with Run disabled and say what happened."""
    import sim.fleet_plan

    def broken(scenario, fleet, *args):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(sim.fleet_plan, "resolve_fleet", broken)
    ds._placed.clear()
    data = default_data()
    initial = ds.initial_values(data)
    scenario, errors = ds.validate(data, initial, initial)
    assert scenario is None
    assert "dcsim bug" in errors[ds.GENERAL][0] and "ZeroDivisionError" in errors[ds.GENERAL][0]


def test_placement_is_checked_once_per_fleet_content(monkeypatch):
    """Each widget edit reruns the page: a fleet whose placement passed is not placed
    again until the fleet or a workload's shape changes; a failing one is re-checked
    (its message shown each time)."""
    import sim.fleet_plan

    calls = []
    real = sim.fleet_plan.resolve_fleet
    monkeypatch.setattr(sim.fleet_plan, "resolve_fleet",
                        lambda sc, i, *a: calls.append(sc.fleets[i].name) or real(sc, i, *a))
    ds._placed.clear()
    data = ds.for_dashboard(load_scenario(ds.run_scenarios()["default"]).model_dump(mode="json"))
    initial = ds.initial_values(data)
    fleets = [f["name"] for f in data["fleets"]]
    assert ds.validate(data, initial, initial)[0] is not None and calls == fleets
    ds.validate(data, initial, initial)
    faster = {**initial, "traffic.total_rate_per_s": 2 * initial["traffic.total_rate_per_s"]}
    assert ds.validate(data, faster, initial)[0] is not None
    assert calls == fleets  # same fleets, only arrival rates changed: nothing placed again
    bigger = {**initial, "fleets.0.pools.2.replicas": 100_000}
    assert ds.validate(data, bigger, initial)[0] is not None
    assert calls == fleets + [fleets[0]]
    bad = {**initial, "fleets.0.pools.0.tp": 64}
    for _ in range(2):
        scenario, errors = ds.validate(data, bad, initial)
        assert scenario is None and errors
    assert calls.count(fleets[0]) == 4


def test_a_pool_of_100000_replicas_validates_and_can_run():
    """The issue: 100,000 replicas made every page update take > 60 s (placement and
    packing rechecked on each rerun; packing was O(replicas²)). Rerun times: bench/bench_dashboard_rerun.py."""
    at = start()
    at.number_input(key=PREFIX + "fleets.0.pools.2.replicas").set_value(100_000).run()
    at.run()
    assert not at.exception, at.exception
    assert not at.error
    assert not at.button(key="run").disabled


# --- robustness (issue 28 item 4): bad values block Run, table mistakes keep the edits ---

@pytest.mark.parametrize(("key", "value", "says"), [
    ("fleets.0.pools.0.replicas", 0, "replicas must be a whole number ≥ 1 (got 0)"),
    ("run.duration_s", 0.5, "arrivals for must be at least 1 s (got 0.5 s)"),
    ("run.seed", -1, "seed must be a whole number ≥ 0 (got -1)"),
    ("workloads.chat.slo.target", 150.0, "at most 100% of requests (got 150%)"),
])
def test_an_invalid_value_blocks_run_with_its_reason_beside_the_field(key, value, says):
    at = start()
    at.number_input(key=PREFIX + key).set_value(value).run()
    assert not at.exception, at.exception
    assert at.button(key="run").disabled  # never runs the old value
    errors = ds.validate(default_data(), {**ds.initial_values(default_data()), key: value},
                         ds.initial_values(default_data()))[1]
    assert list(errors) == [key] and says in errors[key][0], errors
    assert any(says in e.value for e in at.error)


def test_an_arrivals_window_inside_the_warm_up_is_refused():
    data, initial = default_data(), ds.initial_values(default_data())
    scenario, errors = ds.validate(data, {**initial, "run.duration_s": 30.0}, initial)  # warm-up is 60 s
    assert scenario is None and "longer than the scenario's warm-up (60 s)" in errors["run.duration_s"][0]


def _rows_renaming_one_pool(data):
    rows = ds.fleets_table(data)
    rows[0]["fleet"] = "brand-new"  # all-h100's chat pool moves to a fleet of its own
    return rows


def test_table_with_a_one_pool_fleet_or_empty_serves_is_refused_with_reasons():
    from fleets.catalog_io import load_catalog

    catalog, data = load_catalog(), default_data()
    fleets, problems = ds.table_fleets(_rows_renaming_one_pool(data), data, catalog)
    assert fleets is None
    text = " ".join(problems)
    assert "fleet 'brand-new' has no pool serving workload(s) ['dlm', 'image', 'search']" in text, problems
    rows = ds.fleets_table(data) + [{"fleet": "x", "pool": "p", "accelerator": "b200", "replicas": 1, "serves": ""}]
    fleets, problems = ds.table_fleets(rows, data, catalog)
    assert fleets is None and problems == [f"row {len(rows)} (x/p): serves is empty; list workloads from: "
                                           "chat, dlm, image, search"]
    rows[-1]["serves"] = "chat, videos"
    assert "serves names videos, not a workload" in ds.table_fleets(rows, data, catalog)[1][0]


def test_a_valid_table_with_a_renamed_fleet_applies():
    from fleets.catalog_io import load_catalog

    data = default_data()
    rows = [{**r, "fleet": "renamed"} if r["fleet"] == "all-b200" else r for r in ds.fleets_table(data)]
    fleets, problems = ds.table_fleets(rows, data, load_catalog())
    assert problems == [] and [f["name"] for f in fleets] == ["all-h100", "renamed", "h100+mi300x"]


def test_a_huge_rate_is_refused_and_a_large_one_needs_confirmation(monkeypatch):
    from sim import dashboard_checks as checks

    monkeypatch.setattr(checks, "physical_memory_bytes", lambda: 24e9)  # the 24 GB machine of the issue
    at = start()
    at.number_input(key=PREFIX + "traffic.total_rate_per_s").set_value(100_000.0).run()
    assert not at.exception and at.button(key="run").disabled
    # 100,000 req/s × 300 s of arrivals × 3 fleets, at 1,000 bytes each: 90 GB
    refusal = " ".join(e.value for e in at.error)
    assert "about 90,000,000 requests" in refusal and "90.0 GB" in refusal, refusal
    at.number_input(key=PREFIX + "traffic.total_rate_per_s").set_value(2_000.0).run()
    size = checks.run_size(ds.validate(default_data(), {**ds.initial_values(default_data()),
                                                      "traffic.total_rate_per_s": 2_000.0},
                                       ds.initial_values(default_data()))[0], memory_bytes=64e9)
    assert size.requests == pytest.approx(2_000 * 300 * 3) and size.needs_confirmation
    assert at.button(key="run").disabled
    assert any("about 1,800,000 requests" in w.value and "1.8 GB" in w.value for w in at.warning)
    at.checkbox(key="confirm-size::1800000").check().run()
    assert not at.button(key="run").disabled


def test_run_size_counts_every_fleet_and_the_diurnal_peak():
    from sim import dashboard_checks as checks
    from sim.scenario import parse_scenario

    data = default_data()  # 12 + 4 + 2 + 0.1 req/s for 300 s, 3 fleets
    size = checks.run_size(parse_scenario(data, "t"), memory_bytes=1e12)
    assert size.requests == pytest.approx(18.1 * 300 * 3)
    assert not size.refused and not size.needs_confirmation
    assert checks.run_size(parse_scenario(data, "t"), memory_bytes=1e3).refused


def test_sweep_view_says_when_there_are_too_few_seeds_for_an_interval(tmp_path):
    rate = "workloads.chat.arrival.rate_per_s"
    rows = [{rate: r, "fleet": f, "workload": "chat", "kind": "autoregressive", "seeds": 2,
             "ttft_p99_s_mean": 20.0, "ttft_p99_s_ci95_lo": 0.267, "ttft_p99_s_ci95_hi": 1560.0,
             "slo_attainment_mean": 0.9, "slo_attainment_ci95_lo": 0.5, "slo_attainment_ci95_hi": 1.0,
             "cost_per_request_usd_mean": 0.01, "cost_per_request_usd_ci95_lo": 0.005, "cost_per_request_usd_ci95_hi": 0.02}
            for r in (4.0, 8.0) for f in ("a", "b")]
    import pandas as pd

    pd.DataFrame(rows).to_csv(tmp_path / "sweep.csv", index=False)
    at = start()
    at.text_input(key="sweep-dir").input(str(tmp_path)).run()
    assert not at.exception, at.exception
    cells = " ".join(str(v) for t in at.table for v in t.value.to_numpy().ravel())
    assert "too few seeds for an interval: 2 < 5" in cells and "26 min" not in cells
