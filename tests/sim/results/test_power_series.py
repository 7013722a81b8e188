"""kW over time (sim.results.power_series): busy fractions per interval by hand, the
power line from the catalog CSVs by hand, and the integral of kW over the run against
the IT energy the request table is charged."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fleets
from sim.results.power_series import busy_per_interval, coarsen, energy_kwh, fleet_power_over_time, power_over_time
from sim.results.tables import run_scenario
from sim.scenario import parse_scenario

DATA = os.path.join(os.path.dirname(fleets.__file__), "data")


def test_busy_booked_late_is_carried_back_by_hand():
    # one replica; a 2.5 s busy span ending at 3 s is booked at the sample at 3 s
    b = busy_per_interval(np.array([0.0, 1, 2, 3, 4]), np.array([0.0, 0, 0, 2.5, 2.5]), slots=1)
    assert b == pytest.approx([0.5, 1.0, 1.0, 0.0])
    # two replicas (capacity 2 replica-s per 1 s interval): 3 s booked at 2 s fills [1, 2) and half of [0, 1)
    b = busy_per_interval(np.array([0.0, 1, 2]), np.array([0.0, 0, 3.0]), slots=2)
    assert b == pytest.approx([0.5, 1.0])


@settings(max_examples=60)
@given(st.lists(st.tuples(st.floats(0, 50), st.floats(0, 10)), min_size=1, max_size=12),
       st.integers(1, 4), st.floats(0.5, 7))
def test_busy_fractions_stay_in_0_1_and_keep_the_busy_time(spans, slots, interval_s):
    """Random busy spans on ``slots`` replicas, each booked when it ends (as the engine
    does): every fraction in [0, 1] and the busy time kept."""
    per_slot_free = [0.0] * slots
    booked = []  # (end_s, span_s), spans on a slot never overlap
    for start, length in spans:
        k = int(np.argmin(per_slot_free))
        s = max(start, per_slot_free[k])
        per_slot_free[k] = s + length
        booked.append((s + length, length))
    end = max(per_slot_free) + interval_s
    t = np.append(np.arange(0.0, end, interval_s), end)
    total = np.array([sum(l for e, l in booked if e <= ti) for ti in t])
    b = busy_per_interval(t, total, slots)
    assert np.all(b >= -1e-12) and np.all(b <= 1 + 1e-12)
    assert float(np.sum(b * np.diff(t) * slots)) == pytest.approx(sum(l for _, l in booked), rel=1e-9, abs=1e-9)


def test_known_busy_pattern_by_hand():
    """A pool of 2 replicas idle at 1 kW and busy at 3 kW, sampled every 10 s: its kW per
    interval and the integral, worked by hand."""
    pools = pd.DataFrame([{"fleet": "f", "pool": "p", "busy_total_s": 30.0, "busy_slots": 2,
                           "it_power_idle_w": 1000.0, "it_power_busy_w": 3000.0}])
    series = pd.DataFrame({"fleet": "f", "pool": "p", "t_s": [0.0, 10, 20, 30], "busy_total_s": [0.0, 5, 20, 25]})
    power = power_over_time(pools, series, {"f": 40.0}, pue=1.5)
    # booked per interval 5, 15 (cap 20), 5, then 5 more by the end at 40 s: fractions .25 .75 .25 .25
    assert list(power["t_end_s"]) == [10, 20, 30, 40]
    assert power["busy_fraction"].tolist() == pytest.approx([0.25, 0.75, 0.25, 0.25])
    assert power["it_power_kw"].tolist() == pytest.approx([1.5, 2.5, 1.5, 1.5])
    assert power["facility_power_kw"].tolist() == pytest.approx([2.25, 3.75, 2.25, 2.25])
    # 1 kW x 40 s + 2 kW x 30 busy replica-s / 2 replicas = 70 kJ
    assert energy_kwh(power)["f"] == pytest.approx(70e3 / 3.6e6)


SCENARIO = {
    "name": "power", "seed": 5, "duration_s": 40.0, "warmup_s": 5.0, "drain_s": 60.0,
    "economics": {"pue": 1.3},
    "workloads": {
        "chat": {"kind": "autoregressive", "model": "llama-3-70b", "arrival": {"kind": "poisson", "rate_per_s": 1.5}},
        "image": {"kind": "image_diffusion", "model": "sdxl", "arrival": {"kind": "poisson", "rate_per_s": 0.5},
                  "steps": 20},
    },
    "fleets": [
        {"name": "h100", "pools": [
            {"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 2, "tp": 4},
            {"name": "image", "accelerator": "h100-sxm", "serves": ["image"], "replicas": 1, "max_batch": 4}]},
        {"name": "mi300x", "pools": [
            {"name": "chat", "accelerator": "mi300x", "serves": ["chat"], "replicas": 1, "tp": 2},
            {"name": "image", "accelerator": "mi300x", "serves": ["image"], "replicas": 2}]},
    ],
}


@pytest.fixture(scope="module")
def results():
    return run_scenario(parse_scenario(SCENARIO, "power"))


def test_power_line_from_the_catalog_csvs_by_hand(results):
    """Idle and busy IT power of each pool from power.csv and accelerators.csv (a part
    without a power.csv row takes h100-sxm's fractions, idle scaled by TDP): chips at
    idle_w .. idle + (TDP - idle) x min(1, a_c + w_m a_m), the node share's host power at
    h .. h + (1 - h) x the same load."""
    power_csv = pd.read_csv(os.path.join(DATA, "power.csv")).set_index("key")
    acc_csv = pd.read_csv(os.path.join(DATA, "accelerators.csv")).set_index("key")
    for _, p in results.pools.iterrows():
        a = acc_csv.loc[p["accelerator"]]
        if p["accelerator"] in power_csv.index:
            c = power_csv.loc[p["accelerator"]]
        else:  # no row (mi300x): the h100-sxm fractions, idle scaled to the part's TDP (sim.models.power)
            c = power_csv.loc["h100-sxm"].copy()
            c["idle_w"] = c["idle_w"] / acc_csv.loc["h100-sxm", "tdp_w"] * a["tdp_w"]
        load = min(1.0, min(p["compute_activity"], 1) + c["memory_bound_dynamic_fraction"] * min(p["memory_activity"], 1))
        idle = p["accelerators"] * c["idle_w"] + p["nodes"] * a["node_overhead_w"] * c["host_idle_fraction"]
        busy = (p["accelerators"] * (c["idle_w"] + (a["tdp_w"] - c["idle_w"]) * load)
                + p["nodes"] * a["node_overhead_w"] * (c["host_idle_fraction"] + (1 - c["host_idle_fraction"]) * load))
        assert p["it_power_idle_w"] == pytest.approx(idle, rel=1e-9)
        assert p["it_power_busy_w"] == pytest.approx(busy, rel=1e-9)


def test_integral_of_kw_is_the_energy_the_requests_are_charged(results):
    power = power_over_time(results.pools, results.timeseries, results.end_s, results.scenario.economics.pue)
    it_kwh = energy_kwh(power)
    charged_kwh = results.requests.groupby("fleet")["energy_j"].sum() / 3.6e6
    run_kwh = (results.pools["run_it_power_avg_w"] * results.pools["fleet"].map(results.end_s)).groupby(
        results.pools["fleet"]).sum() / 3.6e6
    for fleet in results.end_s:
        assert it_kwh[fleet] == pytest.approx(charged_kwh[fleet], rel=1e-9)
        assert it_kwh[fleet] == pytest.approx(run_kwh[fleet], rel=1e-9)
        assert energy_kwh(power, "facility_power_kw")[fleet] == pytest.approx(1.3 * it_kwh[fleet], rel=1e-12)
    # every interval lies on the line between idle and busy power, and the run ends idle-ish:
    merged = power.merge(results.pools[["fleet", "pool", "it_power_idle_w", "it_power_busy_w"]], on=["fleet", "pool"])
    assert (merged["it_power_kw"] * 1e3 >= merged["it_power_idle_w"] - 1e-6).all()
    assert (merged["it_power_kw"] * 1e3 <= merged["it_power_busy_w"] + 1e-6).all()
    # the fleet curve is the sum of its pools on one grid that covers [0, end_s] without gaps
    fleet = fleet_power_over_time(power)
    for name, g in fleet.groupby("fleet"):
        assert g["t_start_s"].iloc[0] == 0 and g["t_end_s"].iloc[-1] == pytest.approx(results.end_s[name])
        assert np.allclose(g["t_start_s"].iloc[1:].to_numpy(), g["t_end_s"].iloc[:-1].to_numpy())
    assert fleet["it_power_kw"].sum() == pytest.approx(power["it_power_kw"].sum())


def test_coarsened_curve_keeps_the_energy_by_hand():
    """Steps of 1, 3, 2, 2 kW over 1 s each, averaged onto two 2 s intervals: 2 and 2 kW;
    onto one interval: 2 kW; the energy (8 kJ) kept both times."""
    fine = pd.DataFrame({"fleet": "f", "t_start_s": [0.0, 1, 2, 3], "t_end_s": [1.0, 2, 3, 4],
                         "it_power_kw": [1.0, 3, 2, 2], "facility_power_kw": [1.5, 4.5, 3, 3]})
    two = coarsen(fine, 2)
    assert two["it_power_kw"].tolist() == pytest.approx([2.0, 2.0])
    assert two["facility_power_kw"].tolist() == pytest.approx([3.0, 3.0])
    uneven = coarsen(fine.assign(t_end_s=[1.0, 2, 3, 5], t_start_s=[0.0, 1, 2, 3]), 2)  # last step 2 s long
    assert uneven["t_end_s"].tolist() == [2.5, 5.0]
    assert uneven["it_power_kw"].tolist() == pytest.approx([(1 + 3 + 2 * 0.5) / 2.5, (2 * 0.5 + 2 * 2) / 2.5])
    assert energy_kwh(uneven)["f"] == pytest.approx(energy_kwh(fine.assign(t_end_s=[1.0, 2, 3, 5]))["f"])
    assert coarsen(fine, 10).equals(fine)


def test_power_from_the_written_files_matches_the_run(results, tmp_path):
    """A run read back from ``--out`` files (no end_s in memory: the pools table's
    ``run_end_s``) gives the same kW curve; the HTML report draws it."""
    from sim.results.export import write_results
    from sim.results.report_html import load_run, report_html

    directory = write_results(results, tmp_path / "run")
    loaded = load_run(directory)
    assert loaded.end_s == {}
    live = energy_kwh(power_over_time(results.pools, results.timeseries, results.end_s, 1.3))
    read = energy_kwh(power_over_time(loaded.pools, loaded.timeseries, None, loaded.scenario.economics.pue))
    for fleet in results.end_s:
        assert read[fleet] == pytest.approx(live[fleet], rel=1e-6)
    assert "<h2>Power over the run</h2>" in report_html(directory)
