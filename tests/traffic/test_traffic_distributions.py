"""Length distributions: analytic means against Monte-Carlo and scipy, validation, fits."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError
from scipy import integrate, stats

from traffic.distributions import (
    AZURE_CONV_OUTPUT_LOGNORMAL,
    AZURE_CONV_PROMPT_LOGNORMAL,
    DISTRIBUTION_ADAPTER,
    EmpiricalDist,
    LognormalDist,
    fit_lognormal,
    sample_tokens,
)
from traffic.fit import main as fit_main

CLIPPED = [
    LognormalDist(median=760.0, sigma=0.985, min=2, max=14050),
    LognormalDist(median=100.0, sigma=1.5, min=20, max=300),  # heavy clipping on both sides
    LognormalDist(median=50.0, sigma=0.8),  # lower clip at 1 only
]


@pytest.mark.parametrize("dist", CLIPPED)
def test_clipped_lognormal_mean_matches_monte_carlo(dist):
    samples = dist.sample(np.random.default_rng(11), 1_000_000)
    assert samples.min() >= dist.min and (dist.max is None or samples.max() <= dist.max)
    assert dist.mean == pytest.approx(samples.mean(), rel=0.005)


@pytest.mark.parametrize("dist", CLIPPED)
def test_clipped_lognormal_mean_matches_scipy_integral(dist):
    frozen = stats.lognorm(s=dist.sigma, scale=dist.median)
    upper = math.inf if dist.max is None else dist.max
    inside = integrate.quad(lambda x: x * frozen.pdf(x), dist.min, upper, limit=200)[0]
    tail = 0.0 if dist.max is None else dist.max * frozen.sf(dist.max)
    assert dist.mean == pytest.approx(dist.min * frozen.cdf(dist.min) + inside + tail, rel=1e-6)


@pytest.mark.parametrize(("config", "expected_mean"), [
    ({"kind": "constant", "value": 7.0}, 7.0),
    ({"kind": "uniform", "low": 10, "high": 30}, 20.0),
    ({"kind": "exponential", "mean": 4.0}, 4.0),
    ({"kind": "choice", "values": [8, 16, 32], "weights": [1, 2, 1]}, (8 + 32 + 32) / 4),
    ({"kind": "choice", "values": [4, 8]}, 6.0),
    ({"kind": "empirical", "values": [1, 2, 3, 10]}, 4.0),
])
def test_means_by_hand_and_by_sampling(config, expected_mean):
    dist = DISTRIBUTION_ADAPTER.validate_python(config)
    assert dist.mean == pytest.approx(expected_mean)
    samples = dist.sample(np.random.default_rng(12), 400_000)
    assert samples.dtype == np.float64 and samples.shape == (400_000,)
    assert samples.mean() == pytest.approx(expected_mean, rel=0.01)


def test_sample_tokens_rounds_and_floors_at_one():
    rng = np.random.default_rng(0)
    low = sample_tokens(DISTRIBUTION_ADAPTER.validate_python({"kind": "constant", "value": 0.2}), rng, 5)
    mid = sample_tokens(DISTRIBUTION_ADAPTER.validate_python({"kind": "constant", "value": 2.6}), rng, 5)
    assert low.dtype == np.int64 and low.tolist() == [1] * 5 and mid.tolist() == [3] * 5


@pytest.mark.parametrize("config", [
    {"kind": "lognormal", "median": 300, "sigma": 0.7, "min": 1, "max": 5000},
    {"kind": "choice", "values": [1, 2], "weights": [3, 1]},
    {"kind": "uniform", "low": 0, "high": 1},
])
def test_same_seed_same_samples(config):
    dist = DISTRIBUTION_ADAPTER.validate_python(config)
    np.testing.assert_array_equal(dist.sample(np.random.default_rng(5), 1000), dist.sample(np.random.default_rng(5), 1000))


@pytest.mark.parametrize(("config", "needle"), [
    ({"kind": "constant", "value": -1}, "value"),
    ({"kind": "uniform", "low": 5, "high": 5}, "low < high"),
    ({"kind": "exponential", "mean": 0}, "mean"),
    ({"kind": "lognormal", "median": 0, "sigma": 1}, "median"),
    ({"kind": "lognormal", "median": 10, "sigma": 1, "min": 50, "max": 20}, "min < max"),
    ({"kind": "lognormal", "median": 10, "sigma": 1, "mu": 2}, "mu"),
    ({"kind": "choice", "values": [1, 2], "weights": [1, -1]}, "weights"),
    ({"kind": "choice", "values": [1, 2], "weights": [0, 0]}, "sum to > 0"),
    ({"kind": "choice", "values": [1, 2], "weights": [1]}, "one weight per value"),
    ({"kind": "choice", "values": []}, "values"),
    ({"kind": "empirical"}, "exactly one"),
    ({"kind": "empirical", "values": [1], "trace": {"path": "t.csv", "format": "azure_csv", "field": "prompt_tokens"}}, "exactly one"),
    ({"kind": "empirical", "trace": {"path": "t.csv", "format": "azure_csv", "field": "tokens"}}, "prompt_tokens"),
    ({"kind": "gaussian", "mean": 1}, "lognormal"),
])
def test_bad_config_names_the_problem(config, needle):
    with pytest.raises(ValidationError, match=needle):
        DISTRIBUTION_ADAPTER.validate_python(config)


def test_fit_lognormal_recovers_parameters():
    samples = np.random.default_rng(13).lognormal(math.log(300.0), 0.7, size=200_000)
    median, sigma = fit_lognormal(samples)
    assert median == pytest.approx(300.0, rel=0.01) and sigma == pytest.approx(0.7, rel=0.01)


@pytest.mark.parametrize("values", [[5.0], [1.0, 0.0], [1.0, float("nan")]])
def test_fit_lognormal_rejects_bad_input(values):
    with pytest.raises(ValueError, match="fit_lognormal"):
        fit_lognormal(values)


def test_azure_constants_are_the_fit_of_the_trace(azure_conv_path):
    import pandas as pd

    frame = pd.read_csv(azure_conv_path)  # read independently of traffic.traces
    for dist, column in [(AZURE_CONV_PROMPT_LOGNORMAL, "ContextTokens"), (AZURE_CONV_OUTPUT_LOGNORMAL, "GeneratedTokens")]:
        logs = np.log(frame[column].to_numpy(dtype=float))
        assert dist.median == pytest.approx(math.exp(logs.mean()), rel=1e-4)
        assert dist.sigma == pytest.approx(logs.std(), abs=1e-4)
        assert (dist.min, dist.max) == (frame[column].min(), frame[column].max())


def test_azure_constants_mean_load_close_to_trace(trace_summary):
    # The MLE fit matches the mean tokens (the load) but not the median: see the comment
    # beside the constants. Bounds are from trace_summary.csv (independent numbers).
    conv = trace_summary.loc["azure2023_conv"]
    assert AZURE_CONV_PROMPT_LOGNORMAL.mean == pytest.approx(conv.in_mean, rel=0.07)
    assert AZURE_CONV_OUTPUT_LOGNORMAL.mean == pytest.approx(conv.out_mean, rel=0.02)


def test_empirical_from_trace(azure_conv_path, trace_summary):
    dist = EmpiricalDist(trace={"path": azure_conv_path, "format": "azure_csv", "field": "output_tokens"})
    assert dist.mean == pytest.approx(trace_summary.loc["azure2023_conv", "out_mean"], abs=0.05)
    samples = dist.sample(np.random.default_rng(14), 10_000)
    assert np.median(samples) == pytest.approx(trace_summary.loc["azure2023_conv", "out_p50"], rel=0.05)


def test_fit_cli_prints_the_constants(azure_conv_path, capsys):
    assert fit_main([str(azure_conv_path)]) == 0
    out = capsys.readouterr().out
    assert "LognormalDist(median=759.996, sigma=0.9852, min=2, max=14050)" in out
    assert "LognormalDist(median=151.259, sigma=0.8590, min=7, max=1000)" in out


def test_fit_cli_bad_file_exits_2(tmp_path, capsys):
    assert fit_main([str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv" in capsys.readouterr().err
