"""Cache misses per simulated request at two fleet sizes, with cachegrind.

Usage (from the repository root; needs ``valgrind``; ~15 minutes on 2 cores)::

    python bench/bench_cache_misses.py [--replicas 16 4096] [--router least_outstanding]
                                       [--requests 100000] [--ll-bytes 4194304]

The machine's hardware counters cannot be read in a VM, so the misses come from
cachegrind's simulated caches (last level ``--ll-bytes``, default 4 MB, the size of the
development machine's L2). For each replica count, ``bench_routers``'s scenario is
simulated by one process once and by another process twice; the difference of the two
totals is the cost of one ``simulate`` call, so start-up, imports and drawing the demand
cancel. Printed per replica count: instructions, first-level and last-level data misses
per request (the four processes run two at a time).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = """
import gc, sys
sys.path.insert(0, {bench!r})
from bench_routers import build
from sim.engine.core import simulate
from sim.engine.demand import generate_demand
scenario = build({replicas}, {router!r}, {rate!r}, {requests})
demand = generate_demand(scenario)
print(sum(len(d) for d in demand.values()))
for _ in range({repeats}):
    gc.collect()
    run = simulate(scenario, 0, demand=demand)
    del run
"""


def totals(path: Path) -> dict[str, int]:
    """Sum of every event over a cachegrind output file."""
    events: list[str] = []
    sums: list[int] = []
    for line in path.read_text().splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
            sums = [0] * len(events)
        elif line[:1].isdigit():
            for i, value in enumerate(line.split()[1:]):
                sums[i] += int(value)
    return dict(zip(events, sums))


def cachegrind(replicas: int, repeats: int, args, out: Path) -> tuple[int, dict[str, int]]:
    """Simulate the scenario at ``replicas`` replicas ``repeats`` times in one process under
    cachegrind; (requests per run, totals of every cachegrind event over the process).
    Raises CalledProcessError if valgrind or the run fails."""
    code = CHILD.format(bench=str(HERE), replicas=replicas, router=args.router, rate=args.per_replica_rate,
                        requests=args.requests, repeats=repeats)
    result = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=yes", f"--LL={args.ll_bytes},16,64",
         f"--cachegrind-out-file={out}", sys.executable, "-c", code],
        capture_output=True, text=True, check=True, cwd=HERE.parent, env={**os.environ, "PYTHONPATH": str(HERE.parent)},
    )
    return int(result.stdout.split()[0]), totals(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replicas", type=int, nargs="+", default=[16, 4096])
    p.add_argument("--router", default="least_outstanding")
    p.add_argument("--requests", type=int, default=100_000)
    p.add_argument("--per-replica-rate", type=float, default=100 / 64)
    p.add_argument("--ll-bytes", type=int, default=4 << 20)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(2) as pool:
        jobs = {(r, k): pool.submit(cachegrind, r, k, args, Path(tmp) / f"cg-{r}-{k}.out")
                for r in args.replicas for k in (1, 2)}
        print(f"router {args.router}, ~{args.requests:,} requests, last level {args.ll_bytes >> 20} MB")
        print(f"{'replicas':>8} {'requests':>9} {'instr/req':>10} {'L1 miss/req':>11} {'LL miss/req':>11}")
        for r in args.replicas:
            n, once = jobs[(r, 1)].result()
            _, twice = jobs[(r, 2)].result()
            per = {e: (twice[e] - once[e]) / n for e in once}
            print(f"{r:>8} {n:>9,} {per['Ir']:>10,.0f} {per['D1mr'] + per['D1mw']:>11.1f} "
                  f"{per['DLmr'] + per['DLmw']:>11.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
