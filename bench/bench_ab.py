"""A/B engine benchmark for a busy machine: two source trees, alternating runs.

Usage (from the repository root)::

    python bench/bench_ab.py OLD_TREE NEW_TREE [--pairs 4]

Each tree (a checkout, e.g. ``git archive HEAD~3 | tar -x -C /tmp/old``; a tree from before
the traces shipped in ``traffic/data`` needs ``<tree>/../shared/data/traces`` to hold the
Azure trace) runs the two cases of
``bench_engine.py`` in a fresh subprocess: the main case (one hour at 100 req/s on 64
H100 TP4 replicas) and the 10-minute case with every output 1,000 tokens. Runs alternate
old, new, old, new, ... so both see the same background load; the table gives medians of
requests per wall-second, requests per CPU-second of the process (less sensitive to other
processes on a shared machine) and SimPy events per request.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
repo = sys.argv[1]
sys.path[:0] = [repo, repo + "/bench"]
import bench_engine as be
import sim
from sim.engine.core import simulate
from sim.engine.demand import generate_demand
assert sim.__file__.startswith(repo), sim.__file__
out = {}
for label, duration_s, kw in (("main", 3600.0, {}), ("out1000", 600.0, {"output_tokens": 1000})):
    sc = be.build_scenario(duration_s, 100.0, 64, "fast", **kw)
    demand = generate_demand(sc)
    n = sum(len(d) for d in demand.values())
    w0, c0 = time.perf_counter(), time.process_time()
    run = simulate(sc, 0, demand=demand)
    w1, c1 = time.perf_counter(), time.process_time()
    out[label] = {"requests": n, "req_per_wall_s": n / (w1 - w0), "req_per_cpu_s": n / (c1 - c0),
                  "events_per_request": run.events / n}
print(json.dumps(out))
"""


def run_once(tree: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(tree)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("old", type=Path)
    p.add_argument("new", type=Path)
    p.add_argument("--pairs", type=int, default=4, help="old/new run pairs")
    args = p.parse_args(argv)
    results: dict[str, list[dict]] = {"old": [], "new": []}
    for _ in range(args.pairs):
        for name in ("old", "new"):
            results[name].append(run_once(getattr(args, name).resolve()))
    print(f"{'tree':<5} {'case':<8} {'req/wall-s':>11} {'req/CPU-s':>10} {'events/req':>11}   (medians of {args.pairs})")
    for name, runs in results.items():
        for case in ("main", "out1000"):
            med = {k: statistics.median(r[case][k] for r in runs) for k in ("req_per_wall_s", "req_per_cpu_s", "events_per_request")}
            print(f"{name:<5} {case:<8} {med['req_per_wall_s']:>11,.0f} {med['req_per_cpu_s']:>10,.0f} {med['events_per_request']:>11.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
