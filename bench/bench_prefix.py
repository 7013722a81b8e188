"""Prefix-cache benchmark: engine cost per request with the cache on against off.

Usage (from the repository root)::

    python bench/bench_prefix.py [--repeats 5] [--rate-scale 8]

Runs scenarios/mooncake-prefix.yaml's fleets (no cache; a cache with
least_outstanding routing; with prefix_aware routing; both with a host tier, and with
host and SSD tiers) on the same demand, the trace
replayed ``rate_scale`` times faster on as many times the replicas (more requests per
run, the same load per replica), and prints per fleet the CPU microseconds per request of
``simulate`` alone (the process's own time, median of ``repeats``) and its ratio to the
uncached fleet's. Issue 26 asks for the cached runs within 15% of the uncached one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
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

SCENARIO = REPO / "scenarios" / "mooncake-prefix.yaml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rate-scale", type=float, default=8.0)
    args = ap.parse_args()
    data = resolve_paths(yaml.safe_load(SCENARIO.read_text()), SCENARIO.parent)
    data["workloads"]["chat"]["arrival"]["rate_scale"] = args.rate_scale
    data["duration_s"] = 3600.0 / args.rate_scale
    for fleet in data["fleets"]:
        fleet["pools"][0]["replicas"] = round(5 * args.rate_scale)
    scenario = parse_scenario(data, "bench_prefix")
    demand = generate_demand(scenario)
    print(f"engine build: {ENGINE_BUILD}; {len(demand['chat'])} requests per fleet")
    base = None
    for i, fleet in enumerate(scenario.fleets):
        times = []
        for _ in range(args.repeats):
            t0 = time.process_time()
            run = simulate(scenario, i, demand=demand)
            times.append(time.process_time() - t0)
        us = statistics.median(times) / len(run.requests) * 1e6
        base = us if base is None else base
        print(f"{fleet.name:18s} {us:7.1f} CPU us/request  ({us / base:.2f} x no-cache)")


if __name__ == "__main__":
    main()
