"""Throughput per accelerator at a per-user speed (issue 24 acceptance: gpt-oss-120b and
DeepSeek-R1 on B200, GB200 NVL72 and MI355X). The step time is checked by hand against
the roofline's own decode time, and the choice of point against a list read by eye."""

from __future__ import annotations

import pytest

from fleets.catalog_io import load_catalog
from sim.models.perf import PerfModel
from sim.studies.interactivity import CurvePoint, best_at_speed, curve, step_time_s

CAT = load_catalog()


def test_a_long_output_step_is_a_decode_step_at_the_mean_context():
    """With 1,024 input and 1,000,000 output tokens a prompt is admitted once in a million
    steps: the step is the decode of 64 sequences holding 1,024 + 999,999/2 tokens each."""
    perf = PerfModel(CAT.accelerator("b200"), CAT.model("llama-3.1-70b"), "fp8", tp=4)
    expected = perf.decode_time_s(64, 64 * (1024 + 999_999 / 2))
    assert step_time_s(perf, 64, 1024, 1_000_000) == pytest.approx(expected, rel=2e-3)


def test_best_point_is_the_highest_throughput_fast_enough():
    points = [CurvePoint(1, 1, 256, 1, 40.0, 9000.0), CurvePoint(8, 1, 16, 8, 120.0, 900.0),
              CurvePoint(2, 1, 64, 2, 60.0, 4000.0)]
    assert best_at_speed(points, 50.0) == points[2]
    assert best_at_speed(points, 100.0) == points[1]
    assert best_at_speed(points, 200.0) is None


def test_faster_users_cost_throughput_per_gpu():
    """On any curve the best throughput per accelerator falls as the per-user speed rises."""
    points = curve(CAT, "b200", "gpt-oss-120b", "fp8", 1024, 8192)
    rates = [best_at_speed(points, s).tokens_per_s_per_accelerator for s in (50, 100, 200)]
    assert rates[0] >= rates[1] >= rates[2] > 0
