"""Issue 10 part 1 reproduction: a 1 ms burst of 1,043 equal requests on one H100.

One H100 (tp 1, fp8, max_batch 256) serves llama-3-8b; 1,043 requests with constant
1,000 prompt and 1,000 output tokens arrive within 1 ms (Poisson at 1.024e6 req/s,
``duration_s`` 0.001, ``drain_s`` 3000). Runs the scenario in ``fast`` and ``exact`` mode
and prints, per mode: requests, the most sequences in flight at once (admitted and not
done), the last ``done_at_s``, SimPy events and wall seconds; then the largest relative
difference of the per-request timestamps between the modes.

Usage (from the repository root)::

    python bench/repro_burst.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sim.engine.core import simulate  # noqa: E402
from sim.scenario import parse_scenario  # noqa: E402

TIMESTAMPS = ("admitted_at_s", "first_token_at_s", "done_at_s")


def burst_scenario(mode: str):
    """The issue's burst, validated; ``sample_interval_s`` is set so the time-series
    sampler does not dominate the run (its default is duration_s / 120 = 8 µs)."""
    return parse_scenario(
        {
            "name": "burst-1ms",
            "seed": 1,  # 1,043 arrivals, as in the issue
            "duration_s": 0.001,
            "warmup_s": 0.0,
            "drain_s": 3000.0,
            "sample_interval_s": 10.0,
            "engine": {"mode": mode},
            "workloads": {
                "chat": {
                    "kind": "autoregressive",
                    "model": "llama-3-8b",
                    "arrival": {"kind": "poisson", "rate_per_s": 1.024e6},
                    "prompt_tokens": {"kind": "constant", "value": 1000},
                    "output_tokens": {"kind": "constant", "value": 1000},
                }
            },
            "fleets": [
                {
                    "name": "one-h100",
                    "pools": [
                        {
                            "name": "chat",
                            "accelerator": "h100-sxm",
                            "serves": ["chat"],
                            "replicas": 1,
                            "tp": 1,
                            "precision": "fp8",
                            "max_batch": 256,
                        }
                    ],
                }
            ],
        },
        "repro_burst",
    )


def max_in_flight(requests) -> int:
    """Most requests admitted and not yet done at any instant (a sweep over the
    [admitted_at_s, done_at_s) intervals; a completion at t ends before an admission at t)."""
    admitted = requests["admitted_at_s"].dropna().to_numpy()
    done = requests["done_at_s"].dropna().to_numpy()
    events = sorted([(t, 1) for t in admitted] + [(t, -1) for t in done])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def main() -> int:
    runs = {}
    for mode in ("fast", "exact"):
        t0 = time.perf_counter()
        run = simulate(burst_scenario(mode))
        wall = time.perf_counter() - t0
        req = run.requests
        runs[mode] = req
        print(
            f"{mode:>5}: {len(req):,} requests, {int((req['status'] == 'completed').sum()):,} completed, "
            f"max in flight {max_in_flight(req)}, last done_at_s {req['done_at_s'].max():.3f}, "
            f"{run.events:,} events, {wall:.2f} s wall"
        )
    fast, exact = runs["fast"], runs["exact"]
    for col in TIMESTAMPS:
        a, b = fast[col].to_numpy(), exact[col].to_numpy()
        rel = np.nanmax(np.abs(a - b) / np.maximum(np.abs(b), 1e-300))
        print(f"  max relative difference fast vs exact, {col}: {rel:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
