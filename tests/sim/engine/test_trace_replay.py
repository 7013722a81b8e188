"""Trace replay end to end: scenarios/azure-conv.yaml and scenarios/mooncake-conv.yaml,
shortened, checked against truths computed here independently of dcsim's trace reader.

- request count: the trace rows whose offset from the first row is < duration_s
  (× rate_scale), counted with pandas straight from the file;
- conservation: every request is completed, rejected with a reason, or in flight;
- Little's law on the completed requests: the time-average number in system, integrated
  from the request intervals over [0, duration_s), against arrival rate × mean E2E.

The traces are the copies shipped in ``traffic/data`` (NOTICE.md there).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from sim.engine.demand import generate_demand
from sim.engine.core import simulate
from sim.results.tables import run_scenario
from sim.scenario import parse_scenario
from sim.loader import resolve_paths

REPO = Path(__file__).resolve().parents[3]
from data_files import TRACES  # noqa: E402
AZURE_CONV = TRACES / "AzureLLMInferenceTrace_conv.csv"
MOONCAKE_CONV = TRACES / "mooncake_conversation_trace.jsonl"

DURATION_S = 120.0
DRAIN_S = 600.0


def shortened(yaml_name: str, **arrival_overrides):
    """The repository scenario with duration_s/drain_s (and arrival fields) overridden."""
    data = yaml.safe_load((REPO / "scenarios" / yaml_name).read_text(encoding="utf-8"))
    data = resolve_paths(data, REPO / "scenarios")  # trace paths: beside the file
    data["duration_s"] = DURATION_S
    data["warmup_s"] = 0.0
    data["drain_s"] = DRAIN_S
    for workload in data["workloads"].values():
        workload["arrival"].update(arrival_overrides)
    return parse_scenario(data, yaml_name)


def azure_offsets_s() -> pd.DataFrame:
    """Seconds after the first request, and token counts, straight from the CSV."""
    df = pd.read_csv(AZURE_CONV)
    ts = pd.to_datetime(df["TIMESTAMP"], format="ISO8601")
    return pd.DataFrame(
        {
            "offset_s": (ts - ts.min()).dt.total_seconds(),
            "prompt": df["ContextTokens"],
            "output": df["GeneratedTokens"],
        }
    )


def mooncake_offsets_s() -> np.ndarray:
    with open(MOONCAKE_CONV, encoding="utf-8") as f:
        ms = np.array([json.loads(line)["timestamp"] for line in f if line.strip()], dtype=float)
    return (ms - ms.min()) / 1e3


def check_conservation(requests: pd.DataFrame, expected: int) -> None:
    """Every request completed, rejected with a reason, or in flight; nothing else."""
    assert len(requests) == expected
    assert requests["request_id"].is_unique
    status = requests["status"]
    assert set(status.unique()) <= {"completed", "rejected", "in_flight"}
    done = requests[status == "completed"]
    rejected = requests[status == "rejected"]
    in_flight = requests[status == "in_flight"]
    assert len(done) + len(rejected) + len(in_flight) == expected
    assert (rejected["reject_reason"] != "").all()
    assert (done["reject_reason"] == "").all()
    assert np.isfinite(done["done_at_s"]).all()
    assert (done["done_at_s"] >= done["first_token_at_s"]).all()
    assert (done["first_token_at_s"] > done["arrival_at_s"]).all()
    assert in_flight["done_at_s"].isna().all()


def time_average_in_system(arrive: np.ndarray, leave: np.ndarray, t0: float, t1: float) -> float:
    """(1/(t1−t0)) ∫ N(t) dt over [t0, t1), N the number of intervals [arrive, leave)
    covering t, by a sweep over the sorted interval ends."""
    a = np.clip(arrive, t0, t1)
    b = np.clip(leave, t0, t1)
    times = np.concatenate([a, b])
    steps = np.concatenate([np.ones_like(a), -np.ones_like(b)])
    order = np.argsort(times, kind="stable")
    times, steps = times[order], steps[order]
    n_after = np.cumsum(steps)  # number in system just after each event
    area = float(np.sum(n_after[:-1] * np.diff(times)))
    return area / (t1 - t0)


@pytest.fixture
def at_repo_root(monkeypatch):
    """Trace paths in the scenarios are relative to the repository root."""
    monkeypatch.chdir(REPO)


def test_azure_conv_replay_counts_conservation_little(at_repo_root):
    truth = azure_offsets_s()
    in_window = truth[truth["offset_s"] < DURATION_S]
    scenario = shortened("azure-conv.yaml")
    assert len(scenario.fleets) >= 2
    results = run_scenario(scenario)
    assert not results.summary["unstable"].any()

    for fleet, requests in results.requests.groupby("fleet", sort=False):
        # the trace rows, in order, with their own token counts (zero counts raised to 1)
        assert len(requests) == len(in_window), fleet
        requests = requests.sort_values("request_id")
        np.testing.assert_allclose(requests["arrival_at_s"].to_numpy(), in_window["offset_s"].to_numpy(), atol=1e-6)
        assert requests["prompt_tokens"].tolist() == in_window["prompt"].clip(lower=1).tolist()
        assert requests["output_tokens"].tolist() == in_window["output"].clip(lower=1).tolist()

        check_conservation(requests, len(in_window))
        assert (requests["status"] != "in_flight").all(), f"{fleet}: unstable after {DRAIN_S} s drain"

        # Little's law L = λ·W over [0, T): the fleet starts empty, so the only gap is
        # the requests that arrive near T and leave after it (≈ E[W²]/(2·W·T), computed below).
        done = requests[requests["status"] == "completed"]
        arrive, leave = done["arrival_at_s"].to_numpy(), done["done_at_s"].to_numpy()
        mean_in_system = time_average_in_system(arrive, leave, 0.0, DURATION_S)
        rate = len(done) / DURATION_S
        mean_e2e = float(np.mean(leave - arrive))
        edge = float(np.mean((leave - arrive) ** 2)) / (2.0 * mean_e2e * DURATION_S)  # the gap above
        assert mean_in_system == pytest.approx(rate * mean_e2e, rel=0.03 + edge), (fleet, edge)
        # and exactly, once the window covers every interval
        end = float(leave.max())
        assert time_average_in_system(arrive, leave, 0.0, end) == pytest.approx(len(done) / end * mean_e2e, rel=1e-9)


def test_azure_conv_rate_scale_two_doubles_requests(at_repo_root):
    """rate_scale 2 replays twice as fast: over duration T it sends the rows of the first
    2·T trace seconds, and its mean rate is exactly twice the recorded one. (The real
    trace is not stationary, so the count over T is not exactly twice the count at scale
    1: its first 2 minutes hold 456 rows, the next 2 hold 682.)"""
    truth = azure_offsets_s()["offset_s"]
    once = int((truth < DURATION_S).sum())
    twice = int((truth < 2 * DURATION_S).sum())
    assert twice > 2 * once * 0.9

    base = shortened("azure-conv.yaml")
    fast = shortened("azure-conv.yaml", rate_scale=2.0)
    assert fast.workloads["chat"].arrival.mean_rate_per_s == pytest.approx(
        2 * base.workloads["chat"].arrival.mean_rate_per_s, rel=1e-12
    )
    assert len(generate_demand(base)["chat"]) == once
    demand = generate_demand(fast)
    assert len(demand["chat"]) == twice
    np.testing.assert_allclose(demand["chat"].arrival_s, truth[truth < 2 * DURATION_S].to_numpy() / 2, atol=1e-6)
    # the whole trace fits in half its span
    span = float(truth.max())
    whole = shortened("azure-conv.yaml", rate_scale=2.0).model_copy(update={"duration_s": span / 2 + 1})
    assert len(generate_demand(whole)["chat"]) == len(truth)

    run = simulate(fast, 0, demand=demand)
    check_conservation(run.requests, twice)
    assert (run.requests["status"] != "in_flight").all()


def test_mooncake_conv_replay_conservation(at_repo_root):
    offsets = mooncake_offsets_s()
    expected = int((offsets < DURATION_S).sum())
    scenario = shortened("mooncake-conv.yaml")
    for fleet in scenario.fleets:
        run = simulate(scenario, fleet.name)
        check_conservation(run.requests, expected)
        assert (run.requests["status"] != "in_flight").all(), fleet.name
        assert math.isfinite(run.end_s) and run.end_s <= DURATION_S + DRAIN_S
