"""Rankings on the dashboard consider only fleets that meet their SLOs and are stable
(issue 28 item 1): hand-built summaries whose answer is known."""

from __future__ import annotations

import pandas as pd
import pytest

from sim import dashboard_rank as rank
from sim.results import charts


def summary() -> pd.DataFrame:
    """Three fleets, one workload: 'good' meets 99.5% vs 99% at $2/request; 'cheap'
    ($1) meets 74.4% of requests (mostly TTFT: 200 of 1,000 over bound); 'fast' ($0.5)
    meets its target but its queue grows (unstable)."""
    return pd.DataFrame([
        {"fleet": "good", "workload": "chat", "slo_attainment": 0.995, "slo_target": 0.99, "unstable": False,
         "requests": 1000, "slo_miss_ttft": 5, "cost_per_request_usd": 2.0, "ttft_p99_s": 0.9},
        {"fleet": "cheap", "workload": "chat", "slo_attainment": 0.744, "slo_target": 0.99, "unstable": False,
         "requests": 1000, "slo_miss_ttft": 200, "slo_miss_rejected": 56, "cost_per_request_usd": 1.0,
         "ttft_p99_s": 4.0},
        {"fleet": "fast", "workload": "chat", "slo_attainment": 0.999, "slo_target": 0.99, "unstable": True,
         "requests": 1000, "slo_miss_ttft": 1, "cost_per_request_usd": 0.5, "ttft_p99_s": 0.5},
    ])


def test_only_fleets_meeting_every_slo_and_stable_qualify_and_the_others_say_why():
    reasons = rank.disqualifications(summary())
    assert reasons["good"] == []
    # 99.0 − 74.4 = 24.6 points; TTFT misses 200 / 1,000 = 20.0% beat rejections 5.6%
    assert reasons["cheap"] == ["chat meets its SLO for 74.4% of requests against a 99.0% target "
                                "(24.6 points short; mostly TTFT over bound, 20.0% of requests)"]
    assert reasons["fast"] == ["chat is unstable (its queue grows through the run: the offered load exceeds capacity)"]
    assert rank.qualifying(summary()) == ["good"]


def test_compare_best_is_never_a_failing_fleet():
    fleets = pd.DataFrame({"fleet": ["good", "cheap", "fast"]})
    table = charts.compare_all(summary(), fleets)
    by_metric = dict(zip(table["metric"], table["best"]))
    assert by_metric["$/request"] == "fast"  # unranked, the cheapest is the unstable fleet
    best = dict(zip(table["metric"], rank.best_among(table, ["good"])))
    assert best["$/request"] == "good" and best["p99 TTFT"] == "good"
    two = dict(zip(table["metric"], rank.best_among(table, ["good", "cheap"])))
    assert two["$/request"] == "cheap" and two["p99 TTFT"] == "good" and two["SLO attainment"] == "good"
    assert set(rank.best_among(table, [])) == {None}


def test_cost_chart_marks_best_among_qualifying_and_hatches_the_rest():
    fig = rank.mark_cost_chart(charts.cost_per_request(summary()), summary(), ["good"])
    text = {t.name: t.text[0] for t in fig.data}
    assert text["good"].startswith("best ")
    assert text["cheap"].startswith("✗ ") and text["fast"].startswith("✗ ")
    hatched = {t.name for t in fig.data if t.marker.pattern and t.marker.pattern.shape == "/"}
    assert hatched == {"cheap", "fast"}
    assert rank.ranking_note(rank.disqualifications(summary()))[0].startswith("**cheap** is not ranked: chat meets")


def test_each_compare_row_is_judged_against_the_band_of_its_own_pools():
    # fleet 'mixed': chat on h100 (±25%), image on mi300x (±50%); fleet 'calibrated': no band
    mixed = charts.FleetBands({"chat": 25.0, "image": 50.0}, {"chat": (25.0, ["h100-sxm"]), "image": (50.0, ["mi300x"])},
                              (50.0, ["h100-sxm", "mi300x"]))
    calibrated = charts.FleetBands({"chat": None, "image": None}, {}, None)
    table = pd.DataFrame({"scope": ["fleet", "chat", "image", "search"], "metric": ["capex"] * 4,
                          "spread": [0.3, 0.3, 0.3, 0.3]})
    bands = rank.row_bands(table, {"mixed": mixed, "calibrated": calibrated})
    assert list(bands[:3]) == [50.0, 25.0, 50.0] and pd.isna(bands[3])
    # a 30% spread is beyond chat's ±25% but within image's ±50%; unknown without a band
    assert list(rank.beyond_band(table, bands)[:3]) == [False, True, False] and pd.isna(rank.beyond_band(table, bands)[3])
    assert rank.bands_caption({"mixed": mixed, "calibrated": calibrated}, ["chat", "image", "search"]) == \
        "chat ±25% (h100-sxm), image ±50% (mi300x)"


def test_seed_intervals_only_from_enough_seeds():
    from sim.results.report_text import seconds

    row = pd.Series({"seeds": 2, "ttft_p99_s_mean": 20.0, "ttft_p99_s_ci95_lo": 0.267, "ttft_p99_s_ci95_hi": 1560.0})
    assert rank.with_interval(row, "ttft_p99_s", seconds) == \
        f"{seconds(20.0)} (too few seeds for an interval: 2 < 5)"
    row["seeds"] = 5
    assert rank.with_interval(row, "ttft_p99_s", seconds) == f"{seconds(20.0)} [{seconds(0.267)}, {seconds(1560.0)}]"
    assert rank.with_interval(pd.Series({"ttft_p99_s": 1.5}), "ttft_p99_s", seconds) == seconds(1.5)


def _sweep_rows(aggregated: bool):
    """Two fleets at two load levels: 'cheap' is cheaper and faster everywhere but meets
    its 99% target only for 90% of requests; 'ok' meets it."""

    rate = "workloads.chat.arrival.rate_per_s"
    rows = []
    for r in (4.0, 8.0):
        for fleet, att, cost, ttft in (("cheap", 0.90, 0.01, 0.5), ("ok", 0.995, 0.02, 0.8)):
            row = {rate: r, "fleet": fleet, "workload": "chat", "kind": "autoregressive", "slo_target": 0.99}
            values = {"slo_attainment": att, "cost_per_request_usd": cost, "ttft_p99_s": ttft}
            if aggregated:
                row.update(seeds=5, unstable_seeds=0, **{f"{k}_mean": v for k, v in values.items()})
            else:
                row.update(unstable=False, **values)
            rows.append(row)
    return pd.DataFrame(rows)


@pytest.mark.parametrize("aggregated", [True, False])
def test_sweep_pareto_marks_and_front_rank_only_fleets_that_meet_their_slo(aggregated):
    from sim.results.charts import pareto_front

    table = rank.as_aggregated(_sweep_rows(aggregated))
    points = rank.sweep_points(table, "chat", "ttft_p99_s")
    marks = dict(zip(zip(points["workloads.chat.arrival.rate_per_s"], points["fleet"]), points["Pareto"]))
    assert marks[(4.0, "ok")] == marks[(8.0, "ok")] == "yes"
    assert marks[(4.0, "cheap")].startswith("excluded (chat: SLO 90")
    fronts = [t for t in pareto_front(table, "chat").data if t.name == "Pareto front"]
    assert sorted(y for t in fronts for y in t.y) == [0.02, 0.02]  # only 'ok' at each load level
