"""Sweep confidence intervals respect the metrics' bounds: latency and cost never go
below zero, SLO attainment stays in [0, 1] (values computed by hand here)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from sim.studies.sweep import aggregate

T_975_1 = 12.706204736174707  # Student t, 97.5% quantile, 1 degree of freedom (tables)


def runs(metric: str, values: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"fleet": "f", "workload": "w", "unstable": False, metric: values})


def test_wide_latency_spread_stays_positive():
    # two seeds, p99 TTFT 0.1 s and 10 s: mean 5.05 s, s = 9.9/√2, SE = 4.95;
    # the plain t interval would be 5.05 ± 12.706·4.95 = [-57.8, 67.9]
    row = aggregate(runs("ttft_p99_s", [0.1, 10.0]), []).iloc[0]
    mean, se = 5.05, 4.95
    assert mean - T_975_1 * se < 0
    factor = math.exp(T_975_1 * se / mean)
    assert row["ttft_p99_s_mean"] == pytest.approx(mean)
    assert row["ttft_p99_s_ci95_lo"] == pytest.approx(mean / factor)
    assert row["ttft_p99_s_ci95_hi"] == pytest.approx(mean * factor)
    assert row["ttft_p99_s_ci95_lo"] > 0


def test_attainment_is_clipped_to_zero_and_one():
    row = aggregate(runs("slo_attainment", [1.0, 0.9]), []).iloc[0]
    assert row["slo_attainment_ci95_hi"] == 1.0  # 0.95 + 12.706·0.05 > 1
    assert row["slo_attainment_ci95_lo"] == pytest.approx(0.95 - T_975_1 * 0.05)  # SE = 0.1/√2/√2
    low = aggregate(runs("slo_attainment", [0.0, 0.2]), []).iloc[0]
    assert low["slo_attainment_ci95_lo"] == 0.0  # 0.1 - 12.706·0.1 < 0


def test_a_zero_falls_back_to_the_clipped_t_interval():
    row = aggregate(runs("cost_per_request_usd", [0.0, 2.0]), []).iloc[0]
    assert row["cost_per_request_usd_ci95_lo"] == 0.0
    assert row["cost_per_request_usd_ci95_hi"] == pytest.approx(1.0 + T_975_1 * 1.0)


@settings(max_examples=60)
@given(st.lists(st.floats(1e-4, 1e4), min_size=2, max_size=8))
def test_latency_interval_is_positive_and_holds_the_mean(values):
    row = aggregate(runs("e2e_p99_s", values), []).iloc[0]
    assert 0 < row["e2e_p99_s_ci95_lo"] <= row["e2e_p99_s_mean"] * (1 + 1e-12)
    assert row["e2e_p99_s_mean"] <= row["e2e_p99_s_ci95_hi"] * (1 + 1e-12)
