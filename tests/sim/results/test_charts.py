"""Every chart function on a small real run: the right traces, axis titles with units,
one colour per fleet across charts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fleets.catalog_io import load_catalog
from sim.results import charts
from sim.results.tables import run_scenario
from sim.scenario import parse_scenario

SMALL = {
    "name": "small", "seed": 3, "duration_s": 30.0, "warmup_s": 5.0, "drain_s": 60.0,
    "workloads": {
        "chat": {"kind": "autoregressive", "model": "llama-3-70b", "arrival": {"kind": "poisson", "rate_per_s": 2},
                 "slo": {"ttft_s": 2.0, "tpot_s": 0.1}},
        "image": {"kind": "image_diffusion", "model": "sdxl", "arrival": {"kind": "poisson", "rate_per_s": 1},
                  "steps": 20, "cfg": True, "slo": {"e2e_s": 10.0}},
    },
    "fleets": [
        {"name": "h100", "pools": [
            {"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1, "tp": 4},
            {"name": "image", "accelerator": "h100-sxm", "serves": ["image"], "replicas": 1, "max_batch": 8}]},
        {"name": "b200", "pools": [
            {"name": "chat", "accelerator": "b200", "serves": ["chat"], "replicas": 1, "tp": 2},
            {"name": "image", "accelerator": "b200", "serves": ["image"], "replicas": 1, "max_batch": 8}]},
    ],
}


@pytest.fixture(scope="module")
def results():
    return run_scenario(parse_scenario(SMALL, "small"))


@pytest.fixture(scope="module")
def colors(results):
    return charts.fleet_colors(results.fleets["fleet"])


def axis_titles(fig) -> list[str]:
    layout = fig.layout.to_plotly_json()
    return [v["title"]["text"] for k, v in layout.items() if k.startswith(("xaxis", "yaxis")) and v.get("title")]


def has_unit(title: str) -> bool:
    return "(" in title and title.rstrip().endswith(")")


CATEGORY_AXES = {"fleet", "fleet / pool", "metric", "fleet / workload", "workload"}  # categorical axes carry no unit


def assert_units(fig) -> None:
    titles = [t for t in axis_titles(fig) if t not in CATEGORY_AXES]
    assert titles and all(has_unit(t) for t in titles), titles


def test_fleet_colours_are_stable_and_distinct():
    c = charts.fleet_colors(["a", "b", "a", "c"])
    assert list(c) == ["a", "b", "c"] and len(set(c.values())) == 3
    assert charts.fleet_colors(["a", "b"]) == {k: c[k] for k in ("a", "b")}


def test_latency_cdf_one_line_per_fleet_and_metric(results, colors):
    fig = charts.latency_cdf(results.requests, "chat", colors)
    assert len(fig.data) == 3 * 2  # TTFT, TPOT, E2E × two fleets
    assert {t.name for t in fig.data} == {"h100", "b200"}
    assert all(t.line.color == colors[t.name] for t in fig.data)
    assert_units(fig)
    assert any(t.startswith("TTFT (") for t in axis_titles(fig))
    for trace in fig.data:  # a CDF: x ascending, y ending at 1
        assert np.all(np.diff(trace.x) >= 0) and trace.y[-1] == pytest.approx(1.0)


def test_latency_cdf_leaves_out_metrics_a_workload_lacks(results):
    fig = charts.latency_cdf(results.requests, "image")
    assert [a.text for a in fig.layout.annotations] == ["E2E"]
    assert len(fig.data) == 2


def test_cdf_points_keeps_the_tail():
    values = np.arange(10_000, dtype=float)
    x, y = charts.cdf_points(values, points=100)
    assert len(x) < 300 and x[-1] == 9999 and y[-1] == 1.0
    assert set(values[9900:]) <= set(x)  # the last 1% in full


def test_busy_over_time_is_a_fraction(results):
    ts = charts.busy_over_time(results.timeseries, results.pools)
    assert ts["busy_fraction"].dropna().between(0, 1).all()
    assert ts["busy_fraction"].max() > 0


def test_utilisation_over_time_has_busy_queue_and_batch_per_pool(results):
    fig = charts.utilisation_over_time(results.timeseries, results.pools, "h100")
    assert len(fig.data) == 3 * 2  # busy + queue + batch fill for two pools
    fill = [t for t in fig.data if t.line.dash == "dash"]
    assert all(0 <= y <= 1 for t in fill for y in t.y)
    assert_units(fig)
    assert "simulated time (s)" in axis_titles(fig)


def test_pool_utilisation_bars(results):
    fig = charts.pool_utilisation(results.pools)
    assert [t.name for t in fig.data] == list(charts.UTILISATION_COLUMNS.values())
    assert len(fig.data[0].y) == len(results.pools)
    assert_units(fig)


def test_cost_breakdown_stacks_to_the_hourly_cost(results, colors):
    fig = charts.cost_breakdown(results.pools, colors)
    bars = [t for t in fig.data if t.type == "bar"]
    assert [t.name for t in bars] == ["capex amortisation", "power", "other opex"]
    total = sum(np.asarray(t.y) for t in bars)
    expected = results.pools.groupby("fleet", sort=False)["cost_usd_per_hour"].sum().to_numpy()
    assert total == pytest.approx(expected, rel=1e-9)
    assert "cost ($/hour)" in axis_titles(fig)


def test_cost_per_request_panel_per_workload(results, colors):
    fig = charts.cost_per_request(results.summary, colors)
    assert len(fig.data) == 2 * 2
    assert all(t.marker.color == colors[t.name] for t in fig.data)
    assert all(t.text[0].startswith("$") for t in fig.data)
    assert_units(fig)


def test_cost_panels_leave_room_for_their_tick_labels():
    """Four workloads: each panel's "$0.00015" ticks need ~80 px of a ~1300 px chart."""
    summary = pd.DataFrame({"fleet": ["a"] * 4, "workload": list("wxyz"), "cost_per_request_usd": [1.5e-4] * 4})
    fig = charts.cost_per_request(summary)
    gaps = [fig.layout[f"xaxis{i + 1}"].domain[0] - fig.layout[f"xaxis{i if i > 1 else ''}"].domain[1]
            for i in range(1, 4)]
    assert min(gaps) >= 80 / 1300, gaps


def test_roofline_roofs_and_operating_points(results, colors):
    acc = load_catalog().accelerators
    kinds = charts.pool_kinds(results.scenario)
    assert kinds[("h100", "chat")] == "autoregressive"
    fig = charts.roofline(results.pools, acc, kinds, colors)
    roofs = [t for t in fig.data if t.name and t.name.endswith("roof")]
    assert {t.name for t in roofs} == {"h100-sxm fp8 roof", "b200 fp8 roof"}
    h100 = acc["h100-sxm"]
    roof = next(t for t in roofs if t.name.startswith("h100"))
    assert max(roof.y) == pytest.approx(h100.peak_flops("fp8"))
    points = [t for t in fig.data if t.mode == "markers+text"]
    assert len(points) == len(results.pools)
    assert {p.text[0] for p in points} == {"AR", "image"}
    ar = [p for p in points if p.text[0] == "AR"]
    image = [p for p in points if p.text[0] == "image"]
    # the picture: AR sits left of diffusion (lower arithmetic intensity)
    assert max(p.x[0] for p in ar) < min(p.x[0] for p in image)
    for p in points:  # every operating point lies under its roof
        fleet = p.name
        accel = acc[results.pools[results.pools.fleet == fleet].accelerator.iloc[0]]
        assert p.y[0] <= min(accel.peak_flops("fp8"), p.x[0] * accel.memory_bw_bytes_per_s) * 1.001
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert_units(fig)


def test_kpi_cards_are_formatted(results):
    kpi = charts.kpi_fleet(results.fleets.iloc[0], results.summary)
    assert kpi["capex"].startswith("$") and kpi["IT power avg / max"].endswith("kW")
    assert "$/request (all)" not in kpi  # no average over chat tokens and images
    rented = charts.kpi_fleet(results.fleets.iloc[0], results.summary, ownership="rent")
    assert rented["capex"] == f"none, rented (buying: {kpi['capex']})"  # no capex to add to a rent
    assert rented["opex / month"].endswith(" (rent)")
    assert kpi["worst SLO attainment"].endswith("%")
    table = charts.kpi_workloads(results.summary, "h100")
    assert list(table["workload"]) == ["chat", "image"]
    assert table["p99 E2E"].str.contains(r"\d (?:ms|s|min)$").all()
    assert {"$/request", "$/1M output tokens", "J/output token"} <= set(table.columns)
    assert set(table["status"]) <= {"ok", "SLO missed", "UNSTABLE"}
    assert {"rejected (share, reason)", "misses TTFT/TPOT/E2E/rejected/unfinished",
            "req/s offered / served / goodput"} <= set(table.columns)


# --- sweeps: a synthetic tidy table with the sweep's shape -----------------------------

@pytest.fixture
def sweep():
    rows = []
    for rate in (2, 4, 8):
        for price in (0.06, 0.12):
            for fleet, speed, cost in (("fast", 1.0, 2.0), ("cheap", 3.0, 1.0)):
                for workload in ("chat", "image"):
                    rows.append({
                        "workloads.chat.arrival.rate_per_s": rate, "economics.electricity_usd_per_kwh": price,
                        "fleet": fleet, "workload": workload, "seeds": 2,
                        "e2e_p99_s_mean": speed * rate, "e2e_p99_s_ci95_lo": speed * rate * 0.9,
                        "cost_per_request_usd_mean": cost * price / rate,
                        "slo_attainment_mean": 1 - 0.01 * rate,
                    })
    return pd.DataFrame(rows)


def test_swept_columns_and_metric_column(sweep):
    assert charts.swept_columns(sweep) == ["workloads.chat.arrival.rate_per_s", "economics.electricity_usd_per_kwh"]
    assert charts.metric_column(sweep, "e2e_p99_s") == "e2e_p99_s_mean"
    with pytest.raises(KeyError):
        charts.metric_column(sweep, "nope")


def test_pareto_mask_by_hand():
    mask = charts.pareto_mask(np.array([1, 2, 3, 2]), np.array([3, 2, 1, 3]))
    assert mask.tolist() == [True, True, True, False]


def test_pareto_front_figure(sweep):
    fig = charts.pareto_front(sweep, "chat")
    names = [t.name for t in fig.data]
    assert names == ["fast", "cheap"] + ["Pareto front"] * 6  # one front per (rate, price): 3 × 2
    for front in fig.data[2:]:  # at one rate and price, fast and cheap both sit on the front
        assert len(front.x) == 2 and np.all(np.diff(front.x) >= 0)
    assert_units(fig)
    assert fig.layout.xaxis.title.text == "p99 E2E latency (s)"


def test_sweep_heatmap_grid(sweep):
    fig = charts.sweep_heatmap(sweep, "workloads.chat.arrival.rate_per_s", "economics.electricity_usd_per_kwh",
                               fleet="cheap", workload="chat")
    z = np.asarray(fig.data[0].z)
    assert z.shape == (2, 3)
    assert z[1][0] == pytest.approx(1.0 * 0.12 / 2)
    assert fig.data[0].text[1][0].startswith("$")


def test_roofline_title_follows_the_plotted_points():
    """Far left of every ridge (1 FLOP/byte) is memory-bound, far right (1e6) compute-bound,
    whatever the catalog numbers; the title must say so per pool, not a fixed sentence."""
    acc = load_catalog().accelerators
    pools = pd.DataFrame({"fleet": ["a", "a", "b"], "pool": ["chat", "img", "chat"],
                          "accelerator": ["h100-sxm", "h100-sxm", "mi300x"], "precision": ["fp8"] * 3,
                          "arithmetic_intensity_flop_per_byte": [1.0, 1e6, 1e6]})
    kinds = {("a", "chat"): "autoregressive", ("a", "img"): "image_diffusion", ("b", "chat"): "autoregressive"}
    title = charts.roofline_title(pools, acc, kinds)
    assert title == "Roofline: memory-bound: AR; compute-bound: image, AR"


def test_latency_cdf_tells_identical_fleets_apart_and_marks_the_slo(results):
    twin = results.requests.assign(fleet=results.requests["fleet"].replace({"b200": "h100-copy"}))
    same = pd.concat([twin[twin["fleet"] == "h100"], twin[twin["fleet"] == "h100"].assign(fleet="h100-copy")])
    fig = charts.latency_cdf(same, "chat", slo_s={"ttft_s": 2.0, "tpot_s": 0.1}, log_x=True)
    lines = [t for t in fig.data if t.xaxis == "x"]
    assert len(lines) == 2 and list(lines[0].x) == list(lines[1].x)  # same data...
    assert lines[0].line.dash != lines[1].line.dash  # ...drawn differently
    assert lines[0].line.width > lines[1].line.width
    shapes = fig.layout.shapes
    assert len(shapes) == 2
    per_unit = {"ms": 1e-3, "s": 1.0}
    expected = set()
    for axis, bound_s in (("xaxis", 2.0), ("xaxis2", 0.1)):  # TTFT, TPOT in each axis's unit
        unit = fig.layout[axis].title.text.split("(")[1].split(",")[0]
        expected.add(round(bound_s / per_unit[unit], 6))
    assert {round(s.x0, 6) for s in shapes} == expected
    assert fig.layout.xaxis.type == "log"


def test_slo_miss_shares_add_up_to_the_missed_fraction(results):
    """Each miss is counted under one reason, so the shares sum to 1 - attainment
    (attainment is computed separately, from the requests meeting every bound)."""
    table = charts.slo_miss_breakdown(results.summary)
    shares = table[[c for c in table.columns if c.startswith("miss_")]].sum(axis=1)
    assert np.allclose(shares, 1 - table["slo_attainment"])
    fig = charts.slo_miss_chart(results.summary)
    assert [t.name for t in fig.data] == list(charts.MISS_LABELS.values())
    assert_units(fig)


def test_saturation_signals_show_batch_against_max_batch(results):
    table = charts.saturation_signals(results.pools)
    image = table[(table["fleet"] == "h100") & (table["pool"] == "image")].iloc[0]
    assert image["batch mean / max_batch"].split(" / ")[1].startswith("8 ")  # SMALL's max_batch
    assert set(table["backlog"]) <= {"growing", "steady"}


def test_compare_all_picks_the_best_fleet_per_row_and_checks_the_band():
    fleets = pd.DataFrame({"fleet": ["a", "b", "c"], "capex_usd": [300.0, 100.0, 200.0],
                           "output_tokens_per_s_per_mw": [10.0, 10.5, 30.0]})
    summary = pd.DataFrame({"fleet": ["a", "b", "c"], "workload": ["chat"] * 3,
                            "slo_attainment": [0.9, 0.99, 0.95], "ttft_p99_s": [1.0, 1.0, 1.0]})
    table = charts.compare_all(summary, fleets, {"a": 10.0, "b": None, "c": 5.0}).set_index("metric")
    assert table.loc["capex", "best"] == "b" and table.loc["capex", "spread"] == pytest.approx(2.0)
    assert table.loc["output tokens/s per MW", "best"] == "c"  # higher is better
    assert table.loc["SLO attainment", "best"] == "b"
    assert table.loc["capex", "beyond_band"]  # 200% > the widest band, 10%
    assert table.loc["SLO attainment", "spread"] == pytest.approx(1 - 0.9 / 0.99)  # |worst / best - 1|
    assert not table.loc["SLO attainment", "beyond_band"]  # 9.1% is within the ±10% band
    assert pd.isna(table.loc["p99 TTFT", "best"])  # all equal: nothing to highlight
    zero = charts.compare_all(summary.assign(rejected_share=[0.0, 0.0, 0.1]), fleets).set_index("metric")
    assert zero.loc["rejected", "best"] in ("a", "b")  # 0% beats 10% though the ratio is undefined
    shown = charts.format_comparison(table.reset_index(), ["a", "b", "c"])
    assert list(shown["a"][:1]) == ["$300"]


def test_energy_chart_has_units_and_one_bar_per_fleet(results, colors):
    fig = charts.energy_chart(results.fleets, results.summary, colors)
    power = [t for t in fig.data if t.type == "bar" and t.xaxis == "x"]
    assert [t.x[0] for t in power] == list(results.fleets["fleet"])
    assert [t.y[0] for t in power] == pytest.approx(list(results.fleets["it_power_avg_kw"]))
    assert_units(fig)


def test_band_beside_latency_throughput_and_cost_per_pool(results):
    """SMALL runs an all-H100 fleet and an all-B200 fleet: each fleet's card lists its pools'
    bands and its workload rows carry the band of the pools serving them (read from the raw
    CSV: every chip has one since issue 24, calibrated ones from their own held-out points)."""
    import csv
    from pathlib import Path

    import fleets

    rows = {r["key"]: r for r in csv.DictReader(open(Path(fleets.__file__).parent / "data" / "accelerators.csv"))}
    b200_band, h100_band = float(rows["b200"]["efficiency_band_pct"]), float(rows["h100-sxm"]["efficiency_band_pct"])
    bands = charts.perf_bands(results.scenario, load_catalog().accelerators)
    assert bands["b200"].widest == (b200_band, ["b200"]) and bands["h100"].widest == (h100_band, ["h100-sxm"])
    fleets_ = results.fleets.set_index("fleet", drop=False)
    b200 = charts.kpi_fleet(fleets_.loc["b200"], results.summary, bands["b200"])
    assert b200["output tokens/s per MW"].endswith(f" ±{b200_band:g}%")
    assert all(f"±{b200_band:g}%" in b200["perf model band"] for _ in bands["b200"].pools)
    chat = charts.kpi_workloads(results.summary, "b200", bands["b200"]).iloc[0]
    for column in ("p99 TTFT", "p99 E2E", "$/request", "$/1M output tokens"):
        assert chat[column].endswith(f" ±{b200_band:g}%"), (column, chat[column])
    offered, served, goodput = chat["req/s offered / served / goodput"].split(" / ")
    assert "±" not in offered and served.endswith(f"±{b200_band:g}%") and goodput.endswith(f"±{b200_band:g}%")
    h100_chat = charts.kpi_workloads(results.summary, "h100", bands["h100"]).iloc[0]
    assert h100_chat["p99 TTFT"].endswith(f" ±{h100_band:g}%")

def test_latency_cdf_slo_labels_read_in_natural_units_and_the_log_axis_spans_the_data():
    import math

    rows = pd.DataFrame({"fleet": "a", "workload": "img", "status": "completed",
                         "e2e_s": [0.5, 1.0, 4.0, 9.0]})  # the axis in seconds
    fig = charts.latency_cdf(rows, "img", slo_s={"e2e_s": 20.0}, log_x=True)
    assert fig.layout.xaxis.title.text.endswith("(s, log)")
    labels = [a.text for a in fig.layout.annotations if a.text.startswith("SLO")]
    assert labels == ["SLO 20 s"]
    lo, hi = fig.layout.xaxis.range
    # data 0.5 .. 9 s and the SLO at 20 s, padded 0.05 decade each side
    assert lo == pytest.approx(math.log10(0.5) - 0.05) and hi == pytest.approx(math.log10(20.0) + 0.05)
    ms = charts.latency_cdf(rows.assign(e2e_s=rows["e2e_s"] / 100), "img", slo_s={"e2e_s": 2.0})
    assert [a.text for a in ms.layout.annotations if a.text.startswith("SLO")] == ["SLO 2.0 s"]  # not '2e+03 ms'
    assert ms.layout.xaxis.title.text.endswith("(ms)")
    linear = charts.latency_cdf(rows, "img", slo_s={"e2e_s": 2.0})
    assert linear.layout.xaxis.range is None


def test_cost_bars_name_their_fleets_and_stand_labels_upright_at_five_fleets():
    rows = pd.DataFrame([{"fleet": f"fleet-{i}", "workload": w, "cost_per_request_usd": 0.001 * (i + 1)}
                         for i in range(5) for w in ("chat", "image")])
    fig = charts.cost_per_request(rows)
    assert fig.layout.xaxis.showticklabels and fig.layout.xaxis2.showticklabels  # fleet names under the bars
    assert {t.textangle for t in fig.data} == {-90}  # vertical labels fit a narrow bar
    assert fig.layout.uniformtext.minsize >= 10  # never shrunk to ~6 px
    three = charts.cost_per_request(rows[rows["fleet"].isin(["fleet-0", "fleet-1", "fleet-2"])])
    assert {t.textangle for t in three.data} == {0}


def test_roofline_coinciding_points_of_identical_fleets_stay_visible(results):
    acc = load_catalog().accelerators
    twin = pd.concat([results.pools, results.pools[results.pools["fleet"] == "h100"].assign(fleet="h100-copy")])
    fig = charts.roofline(twin, acc, charts.pool_kinds(results.scenario))
    points = [t for t in fig.data if t.mode == "markers+text"]
    first = [p for p in points if p.name == "h100"]
    copy = [p for p in points if p.name == "h100-copy"]
    assert [(p.x[0], p.y[0]) for p in first] == [(p.x[0], p.y[0]) for p in copy]  # the same places...
    assert all(a.marker.size > b.marker.size for a, b in zip(first, copy))  # ...the later fleet's ring inside
    assert points.index(first[0]) < points.index(copy[0])  # drawn after, so on top
