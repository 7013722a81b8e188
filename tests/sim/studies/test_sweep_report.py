"""The sweep's printed Pareto front: per workload at one set of swept values (never
across load levels), without fleets that met no SLO; fronts worked out by hand."""

from __future__ import annotations

import pandas as pd
import pytest

from sim.studies.sweep_report import pareto_flags, sweep_text

RATE = "workloads.chat.arrival.rate_per_s"


def sweep_table() -> pd.DataFrame:
    # (rate, fleet, $/request, p99 TTFT s, attainment)
    rows = [
        (3, "a", 1.0, 0.5, 1.0),   # front at rate 3: cheapest
        (3, "b", 2.0, 0.2, 1.0),   # front at rate 3: fastest
        (3, "c", 3.0, 0.6, 1.0),   # dominated by a and b
        (3, "z", 0.1, 0.1, 0.0),   # would dominate all, but met no SLO: excluded
        (24, "a", 0.5, 9.0, 0.6),  # alone on the front at rate 24 ...
        (24, "b", 0.6, 9.5, 0.9),  # ... dominated by a at the same rate,
        (24, "c", 0.9, 20.0, 0.8),  # although all of rate 24 would be beaten by rate 3's rows if mixed
    ]
    return pd.DataFrame([{RATE: r, "fleet": f, "workload": "chat", "kind": "autoregressive", "seeds": 2,
                          "unstable_seeds": 0, "cost_per_request_usd_mean": c, "ttft_p99_s_mean": t,
                          "slo_attainment_mean": s} for r, f, c, t, s in rows])


def test_front_is_per_load_level_and_skips_zero_attainment():
    flags = pareto_flags(sweep_table(), [RATE])
    assert flags.tolist() == [True, True, False, False, True, False, False]


def test_text_marks_the_front_and_shows_means():
    text = sweep_text(sweep_table(), [RATE])
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["rate_per_s", "fleet", "workload"]
    marked = [line.split()[:2] for line in lines[2:9] if line.rstrip().endswith("yes")]
    assert marked == [["3", "a"], ["3", "b"], ["24", "a"]]
    assert "TTFT 9.0 s" in lines[6] and "60%" in lines[6]


def test_chart_front_is_per_load_level_and_skips_zero_attainment():
    from sim.results.charts import pareto_front

    fig = pareto_front(sweep_table(), "chat")
    fronts = [t for t in fig.data if t.legendgroup == "pareto"]
    # one line per rate; costs on each by hand: rate 3 -> a, b (z excluded); rate 24 -> a
    assert sorted(sorted(t.y) for t in fronts) == [[0.5], [1.0, 2.0]]


@pytest.mark.parametrize("kind, front, axis", [
    ("autoregressive", [True, True], "p99 TTFT latency"),  # on TTFT b is faster: both on the front
    ("image_diffusion", [True, False], "p99 E2E latency"),  # on E2E a is cheaper and faster: b dominated
])
def test_flag_and_chart_trade_cost_against_the_same_latency(kind, front, axis):
    """TTFT and E2E disagree on these two fleets; the printed flag and the chart's front
    must both use p99 TTFT for a token workload and p99 E2E for another (fronts by hand)."""
    from sim.results.charts import pareto_front

    table = pd.DataFrame([{RATE: 3, "fleet": f, "workload": "w", "kind": kind, "seeds": 1, "unstable_seeds": 0,
                           "cost_per_request_usd_mean": c, "ttft_p99_s_mean": t, "e2e_p99_s_mean": e,
                           "slo_attainment_mean": 1.0}
                          for f, c, t, e in (("a", 1.0, 0.5, 5.0), ("b", 2.0, 0.2, 6.0))])
    assert pareto_flags(table, [RATE]).tolist() == front
    fig = pareto_front(table, "w")
    (line,) = [t for t in fig.data if t.legendgroup == "pareto"]
    assert sorted(line.y) == sorted(table["cost_per_request_usd_mean"][front])
    assert fig.layout.xaxis.title.text.startswith(axis)
