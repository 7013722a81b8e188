"""Differential check of the engine's two modes: ``fast`` (a replica fast-forwards runs
of iterations or steps as one event) against ``exact`` (one event per iteration or step,
the reference). Both must give every request the same outcome: identical status,
placement and counts, and timestamps equal to 1e-9 relative.

Durations derived from timestamps (waits, busy shares) are compared to 1e-9 relative
plus 1e-9 × the run's last timestamp absolute: a difference of two timestamps each good
to 1e-9 relative is only good to that.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import yaml

from sim.engine.core import simulate
from sim.scenario import parse_scenario

RTOL = 1e-9
EQUAL_COLUMNS = (
    "request_id", "workload", "pool", "replica", "status", "reject_reason", "prompt_tokens",
    "output_tokens", "steps", "sample_steps", "preemptions", "verifier_calls", "handoffs", "branches",
)
TIMESTAMP_COLUMNS = ("arrival_at_s", "admitted_at_s", "first_token_at_s", "done_at_s")
DURATION_COLUMNS = ("handoff_s", "handoff_wait_s", "memory_wait_s", "busy_share_s", "denoiser_flops")
# the columns of a split (prefill/decode) deployment, in the runs that have one
SPLIT_EQUAL, SPLIT_TIMESTAMPS = ("decode_pool", "prefill_replica"), ("kv_done_at_s",)
SPLIT_DURATIONS = ("kv_transfer_bytes", "kv_transfer_s", "decode_queue_s")


def with_mode(data: dict, mode: str) -> dict:
    out = copy.deepcopy(data)
    out["engine"] = {"mode": mode}
    return out


def run_modes(data: dict):
    """(fast FleetRun, exact FleetRun) of scenario mapping ``data`` (its first fleet)."""
    fast = simulate(parse_scenario(with_mode(data, "fast"), "fast"))
    exact = simulate(parse_scenario(with_mode(data, "exact"), "exact"))
    return fast, exact


def assert_modes_agree(data: dict):
    """Run ``data`` in both modes and assert the per-request outcomes agree (see module
    docstring); returns (fast, exact) FleetRuns. The failure message carries the
    scenario as YAML so a counterexample can be kept as a regression test."""
    fast, exact = run_modes(data)
    a, b = fast.requests, exact.requests
    where = "\n--- scenario ---\n" + yaml.safe_dump(data, sort_keys=False) + _traces(data)
    assert len(a) == len(b), f"request count {len(a)} fast vs {len(b)} exact{where}"
    assert list(a.columns) == list(b.columns), f"columns differ{where}"
    split = "decode_pool" in a
    for col in EQUAL_COLUMNS + (SPLIT_EQUAL if split else ()):
        x, y = a[col].astype(object).to_numpy(), b[col].astype(object).to_numpy()
        bad = np.flatnonzero(x != y)
        assert bad.size == 0, (
            f"{col} differs for request(s) {a['request_id'].to_numpy()[bad[:5]].tolist()}: "
            f"fast {x[bad[:5]].tolist()} vs exact {y[bad[:5]].tolist()}{where}"
        )
    last = np.nanmax(np.concatenate([b[c].to_numpy(dtype=float) for c in TIMESTAMP_COLUMNS] + [[0.0]]))
    timestamps = TIMESTAMP_COLUMNS + (SPLIT_TIMESTAMPS if split else ())
    durations = DURATION_COLUMNS + (SPLIT_DURATIONS if split else ())
    for cols, atol in ((timestamps, 0.0), (durations, RTOL * last)):
        for col in cols:
            x, y = a[col].to_numpy(dtype=float), b[col].to_numpy(dtype=float)
            nan_x, nan_y = np.isnan(x), np.isnan(y)
            bad = np.flatnonzero(nan_x != nan_y)
            assert bad.size == 0, (
                f"{col} is NaN in one mode only for request(s) {a['request_id'].to_numpy()[bad[:5]].tolist()}: "
                f"fast {x[bad[:5]].tolist()} vs exact {y[bad[:5]].tolist()}{where}"
            )
            ok = ~nan_x
            err = np.abs(x[ok] - y[ok])
            bound = RTOL * np.abs(y[ok]) + atol
            bad = np.flatnonzero(err > bound)
            assert bad.size == 0, (
                f"{col} differs beyond 1e-9 for request(s) {a['request_id'].to_numpy()[ok][bad[:5]].tolist()}: "
                f"fast {x[ok][bad[:5]].tolist()} vs exact {y[ok][bad[:5]].tolist()}{where}"
            )
    return fast, exact


def _traces(data: dict) -> str:
    """The trace files a scenario replays, for the failure message (they live in a
    temporary directory)."""
    out = ""
    for name, wl in data.get("workloads", {}).items():
        arrival = wl.get("arrival", {})
        if arrival.get("kind") == "trace":
            out += f"--- {name}: {arrival['path']} ---\n" + Path(arrival["path"]).read_text()
    return out
