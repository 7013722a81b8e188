"""Autoscaling by hand: when the policy acts, what is powered (and billed), and when a
cold-started replica begins to serve."""

from __future__ import annotations

import numpy as np
import pytest

from sim.engine.core import simulate
from sim.engine.demand import WorkloadDemand
from sim.scenario import parse_scenario

COLD_S = 8.03 / (4 * 14.0) + 8.03 / 55.43  # Llama-3.1-8B FP8 through 4 Gen5 drives, then PCIe Gen5 (staged)


def scenario(autoscale: dict, duration_s: float = 200.0) -> dict:
    return {
        "name": "autoscale", "seed": 2, "duration_s": duration_s, "drain_s": 100.0,
        "workloads": {"chat": {"kind": "autoregressive", "model": "llama-3.1-8b",
                               "arrival": {"kind": "poisson", "rate_per_s": 0.05},
                               "prompt_tokens": {"kind": "constant", "value": 128},
                               "output_tokens": {"kind": "constant", "value": 16}}},
        "fleets": [{"name": "f", "pools": [{
            "name": "p", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 4, "precision": "fp8",
            "max_batch": 4, "loading": {"storage": "nvme-gen5", "devices": 4}, "autoscale": autoscale}]}],
    }


def demand_at(times: list[float], output: int = 16) -> dict:
    n = len(times)
    ints = lambda v: np.full(n, v, dtype=np.int64)  # noqa: E731
    return {"chat": WorkloadDemand("chat", "autoregressive", np.array(times), ints(128), ints(output), ints(0),
                                   np.zeros(n))}


def test_an_idle_pool_scales_down_after_the_delay_and_bills_what_was_powered():
    # want = min_replicas = 1 at every tick (no load); 4 powered until the first tick at
    # which the wish has held for down_delay_s: ticks at 10, 20, 30, 40 -> acts at 40
    sc = parse_scenario(scenario({"target": 100.0, "min_replicas": 1, "initial_replicas": 4,
                                  "interval_s": 10.0, "down_delay_s": 30.0, "warmup_s": 5.0}))
    run = simulate(sc, demand=demand_at([150.0]))
    ops = run.operations.iloc[0]
    assert ops["powered_replica_s"] == pytest.approx(4 * 40.0 + 1 * (run.end_s - 40.0))
    assert ops["gpu_hours_powered"] == pytest.approx(ops["powered_replica_s"] / 3600.0)
    assert ops["powered_cost_usd"] == pytest.approx(ops["gpu_hours_powered"] * 2.99)  # H100 SXM, ownership.csv
    assert ops["scale_downs"] == 3 and ops["cold_starts"] == 0


def test_a_burst_cold_starts_replicas_that_serve_after_load_and_warm_up():
    # 12 requests of 4,000 output tokens at t = 1 s on one replica: outstanding 12 / target 4
    # wants 3 at the tick at 10 s (up_delay 0): two cold starts, serving at 10 + COLD_S + 5
    sc = parse_scenario(scenario({"target": 4.0, "min_replicas": 1, "interval_s": 10.0, "down_delay_s": 1000.0,
                                  "warmup_s": 5.0}))
    run = simulate(sc, demand=demand_at([1.0] * 12, output=4000))
    ops = run.operations.iloc[0]
    assert ops["cold_starts"] == 2
    cap = run.capacity
    up = cap[(cap["t_s"] > 10.0) & (cap["serving"] == 3)]
    assert up["t_s"].iloc[0] == pytest.approx(10.0 + COLD_S + 5.0)
    # powered from the decision at 10 s, serving only after the cold start
    started = cap[(cap["t_s"] == 10.0)]
    assert started["powered"].iloc[-1] == 3 and started["serving"].iloc[-1] == 1
