"""``engine.output: summary``: counters and DDSketches, no request rows. The summary equals
the in-memory run's (same accumulator), except the quantiles, which must be within the
sketch's stated relative accuracy α of the exact ones (DDSketch's guarantee, VLDB 2019)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim.results.export import write_results
from sim.results.summary import SKETCH_RELATIVE_ACCURACY
from sim.results.tables import run_scenario
from sim.scenario import parse_scenario


def scenario(output: str) -> dict:
    return {
        "name": "summary-only", "seed": 11, "duration_s": 600.0, "warmup_s": 60.0,
        "engine": {"output": output, "stream": "off" if output == "rows" else "auto"},
        "workloads": {"chat": {"kind": "autoregressive", "model": "llama-3.1-8b",
                               "arrival": {"kind": "poisson", "rate_per_s": 60.0},
                               "prompt_tokens": {"kind": "lognormal", "median": 400, "sigma": 1.0},
                               "output_tokens": {"kind": "lognormal", "median": 150, "sigma": 1.0},
                               "slo": {"ttft_s": 0.5, "tpot_s": 0.05}}},
        "fleets": [{"name": "f", "pools": [{"name": "p", "accelerator": "h100-sxm", "serves": ["chat"],
                                            "replicas": 4, "precision": "fp8"}]}],
    }


@pytest.fixture(scope="module")
def both():
    return run_scenario(parse_scenario(scenario("rows"))), run_scenario(parse_scenario(scenario("summary")))


def test_the_sketched_quantiles_are_within_the_stated_bound_of_the_exact_ones(both):
    exact, sketched = both
    # the exact percentiles from the request rows themselves (numpy's definition)
    rows = exact.requests[exact.requests["measured"] & (exact.requests["status"] == "completed")]
    for column in ("ttft", "e2e", "tpot"):
        values = rows[f"{column}_s"].dropna().to_numpy()
        for p in (50, 95, 99):
            truth = float(np.percentile(values, p))
            got = float(sketched.summary[f"{column}_p{p}_s"].iloc[0])
            assert abs(got - truth) <= SKETCH_RELATIVE_ACCURACY * truth + 1e-12, (column, p, got, truth)


def test_every_other_column_is_the_same(both):
    exact, sketched = both
    a, b = exact.summary.iloc[0], sketched.summary.iloc[0]
    for column in ("completed", "slo_attainment", "output_tokens_per_s", "cost_per_request_usd", "goodput_rps"):
        assert b[column] == pytest.approx(a[column], rel=1e-9), column
    assert sketched.requests.empty and sketched.requests_file is None


def test_no_request_rows_are_written(both, tmp_path):
    _, sketched = both
    out = write_results(sketched, tmp_path / "out")
    assert not (out / "requests.parquet").exists()
    assert (out / "summary.csv").exists()
