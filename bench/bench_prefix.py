"""Prefix-cache benchmark: engine cost per request with the cache on against off.

Usage (from the repository root)::

    python bench/bench_prefix.py [--repeats 10] [--rate-scale 1 8] [--traffic mooncake sessions]

Runs scenarios/mooncake-prefix.yaml's fleets (no cache; a cache with
least_outstanding routing; with prefix_aware routing; both with a host tier, and with
host and SSD tiers) on the same demand and prints per fleet the CPU microseconds per
request of ``simulate`` alone (the process's own time; the median and the best of
``repeats``, the fleets taking turns so that the machine's load drifts alike over all)
and its ratio to the uncached fleet's. Issue 26 asks for the cached runs within 15% of
the uncached one.

Each ``rate_scale`` s replays the trace s times faster on s times the replicas (5 × s):
the same 12,031 requests (the trace is not repeated) and the same load per replica, but
each replica sees 1/s of them. At 1 (the scenario as shipped) each replica's cache fills
and evicts, as in a long run; at 8 each of the 40 caches holds every block it computed
(~6,400, below its capacity), so the per-replica setup of a cache (its slot arrays, 44
bytes per run of blocks held: nine C ints and a key) weighs 8 times more per request.

``--traffic sessions`` runs the same fleets on an hour of the synthetic chat sessions of
:mod:`traffic.sessions` (1.5 sessions/s, seed 7, defaults otherwise: about 18,500
requests; written to a temporary directory and removed after) at rate scale 1, the load
at which the shipped fleets serve it with TTFT p50 under 0.5 s. Its prompts span about 12
blocks of 512 tokens on average against the Mooncake trace's 24, and most of the
cache's work grows with the blocks a request reads and writes: so each line also gives
the cache's extra CPU per prompt block, (cached − uncached) / blocks, to compare traffics
whose prompts differ in length (docs/kv-reuse.md, "What the cache costs per block").

Each run starts after a full garbage collection, outside the timing: otherwise Python's
full collections (~30 ms here, 2-3 µs per request of a run at rate scale 8) fall on
whichever fleet's run crosses the collector's threshold as the fleets take turns, and
moved the medians of some fleets by up to 0.1×.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sim import ENGINE_BUILD  # noqa: E402
from sim.engine.core import simulate  # noqa: E402
from sim.engine.demand import generate_demand  # noqa: E402
from sim.loader import resolve_paths  # noqa: E402
from sim.scenario import parse_scenario  # noqa: E402
from traffic.prefix import MOONCAKE_BLOCK_TOKENS  # noqa: E402
from traffic.sessions import SessionParams, generate_sessions  # noqa: E402

SCENARIO = REPO / "scenarios" / "mooncake-prefix.yaml"
SESSIONS = SessionParams(sessions_per_s=1.5, duration_s=3600.0)
SESSIONS_SEED = 7


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--rate-scale", type=float, nargs="+", default=[1.0, 8.0],
                    help="rate scales of the Mooncake trace (the sessions run at 1)")
    ap.add_argument("--traffic", nargs="+", choices=["mooncake", "sessions"], default=["mooncake", "sessions"])
    args = ap.parse_args()
    print(f"engine build: {ENGINE_BUILD}")
    if "mooncake" in args.traffic:
        for scale in args.rate_scale:
            run_scale(scale, args.repeats)
    if "sessions" in args.traffic:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "sessions.jsonl"
            with path.open("w") as out:
                for row in generate_sessions(SESSIONS, SESSIONS_SEED):
                    out.write(json.dumps(row) + "\n")
            run_scale(1.0, args.repeats, trace=path)


def run_scale(scale: float, repeats: int, trace: Path | None = None) -> None:
    """Time every fleet of the scenario at one rate scale (module docstring), on the
    Mooncake trace or on ``trace`` (a Mooncake-format JSONL), and print."""
    data = resolve_paths(yaml.safe_load(SCENARIO.read_text()), SCENARIO.parent)
    if trace is not None:
        data["workloads"]["chat"]["arrival"]["path"] = str(trace)
    data["workloads"]["chat"]["arrival"]["rate_scale"] = scale
    data["duration_s"] = 3600.0 / scale
    for fleet in data["fleets"]:
        fleet["pools"][0]["replicas"] = round(5 * scale)
    scenario = parse_scenario(data, "bench_prefix")
    demand = generate_demand(scenario)
    n = len(demand["chat"])
    blocks = prompt_blocks(demand["chat"].prompt_tokens)
    name = "Mooncake trace" if trace is None else "synthetic sessions"
    print(f"{name}, rate scale {scale:g}: {round(5 * scale)} replicas per fleet, {n} requests, "
          f"{blocks / n:.1f} prompt blocks per request")
    times: list[list[float]] = [[] for _ in scenario.fleets]
    done = [0] * len(scenario.fleets)  # requests recorded per run (every one, rejected or not)
    for _ in range(repeats):
        for i in range(len(scenario.fleets)):
            gc.collect()  # every run starts from the same collector state (module docstring)
            t0 = time.process_time()
            run = simulate(scenario, i, demand=demand)
            times[i].append(time.process_time() - t0)
            done[i] = len(run.requests)
    base_med = statistics.median(times[0]) / done[0] * 1e6
    base_min = min(times[0]) / done[0] * 1e6
    for fleet, ts, k in zip(scenario.fleets, times, done):
        med, best = statistics.median(ts) / k * 1e6, min(ts) / k * 1e6
        per_block_ns = (statistics.median(ts) - statistics.median(times[0])) / blocks * 1e9
        print(f"  {fleet.name:18s} median {med:6.1f} ({med / base_med:.2f} x no-cache)   "
              f"best {best:6.1f} ({best / base_min:.2f} x) CPU us/request   "
              f"{per_block_ns:4.0f} ns/prompt block over no-cache")


def prompt_blocks(prompt_tokens) -> int:
    """The requests' prompt blocks of MOONCAKE_BLOCK_TOKENS (512) tokens, a last partial
    block counted (the ``hash_ids`` a Mooncake-format row carries: ceil(input_length / 512))."""
    return int(sum(-(-int(p) // MOONCAKE_BLOCK_TOKENS) for p in prompt_tokens))


if __name__ == "__main__":
    main()
