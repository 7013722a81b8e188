"""The engine against queueing theory: Erlang-C for M/M/c and Little's law."""

from __future__ import annotations

import numpy as np
import pytest
from queueing_theory import erlang_c_wait_s
from scenario_cases import make_scenario

from sim.engine.core import simulate


def mmc_scenario(rate: float, mean_service_s: float, servers: int, duration_s: float, seed: int):
    return make_scenario(
        {
            "jobs": {
                "kind": "service_time",
                "arrival": {"kind": "poisson", "rate_per_s": rate},
                "service_s": {"kind": "exponential", "mean": mean_service_s},
            }
        },
        [{"name": "servers", "accelerator": "h100-sxm", "serves": ["jobs"], "replicas": servers, "max_batch": 1}],
        duration_s=duration_s,
        warmup_s=duration_s * 0.02,
        seed=seed,
        fleets=[
            {
                "name": "mmc",
                "router": "central_queue",
                "pools": [
                    {"name": "servers", "accelerator": "h100-sxm", "serves": ["jobs"], "replicas": servers, "max_batch": 1}
                ],
            }
        ],
    )


@pytest.mark.slow
def test_mmc_mean_wait_matches_erlang_c():
    rate, mean_s, c = 3.0, 1.0, 4  # utilisation 0.75
    expected = erlang_c_wait_s(rate, 1.0 / mean_s, c)
    waits = []
    for seed in (1, 2, 3):
        run = simulate(mmc_scenario(rate, mean_s, c, duration_s=40_000.0, seed=seed))
        df = run.requests[run.requests["measured"]]
        assert (df["status"] == "completed").all()
        waits.append(df["queue_s"].mean())
    observed = float(np.mean(waits))
    assert abs(observed - expected) / expected < 0.05, (observed, expected)


def test_mmc_utilisation_matches_offered_load():
    run = simulate(mmc_scenario(3.0, 1.0, 4, duration_s=20_000.0, seed=5))
    busy = run.pools["busy_s"].iloc[0] / ((20_000.0 * 0.98) * 4)
    assert abs(busy - 0.75) < 0.02


def test_littles_law_on_sampled_queue():
    """Time-average of the number in system, sampled from the replicas' state, equals
    throughput × mean E2E latency computed from the request records."""
    sc = make_scenario(
        {
            "chat": {
                "kind": "autoregressive",
                "model": "llama-3-8b",
                "arrival": {"kind": "poisson", "rate_per_s": 6.0},
                "prompt_tokens": {"kind": "lognormal", "median": 600, "sigma": 0.8, "max": 4000},
                "output_tokens": {"kind": "lognormal", "median": 150, "sigma": 0.8, "max": 1000},
            }
        },
        [{"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 2, "tp": 1, "max_batch": 32}],
        duration_s=1200.0,
        warmup_s=100.0,
        sample_interval_s=0.25,
    )
    run = simulate(sc)
    req = run.requests
    lo, hi = 100.0, 1200.0
    ts = run.timeseries[(run.timeseries["t_s"] >= lo) & (run.timeseries["t_s"] < hi)]
    sampled_l = (ts["outstanding"] + ts["central_queued"]).mean()
    # throughput × mean time in system, restricted to the same window
    arrivals = req[(req["arrival_at_s"] >= lo) & (req["arrival_at_s"] < hi)]
    assert (arrivals["status"] == "completed").all()
    lam = len(arrivals) / (hi - lo)
    w = arrivals["e2e_s"].mean()
    assert sampled_l > 1.0
    assert abs(sampled_l - lam * w) / (lam * w) < 0.05, (sampled_l, lam * w)
