"""Sweep benchmark: wall time of one sweep run serially, on a process pool and on Dask.

Usage (from the repository root; not part of ``make test``)::

    python bench/bench_sweep.py [--sweep scenarios/sweep-mix.yaml] [--workers 2]
                                [--repeat 3] [--save]

Issue 14 asks that small points be batched per task "so a Dask run is never slower than
serial" (before batching, the 48 points of ``scenarios/sweep-mix.yaml`` ran 1.37x slower
on 2 Dask workers than serially). Each case runs :func:`sim.studies.sweep.run_sweep` into
a fresh output directory in a fresh child process (interpreter start and imports
excluded from the time; the pool or cluster start included, as a user waits for it):

- ``serial``: ``--workers 1`` (every point in the parent process);
- ``processes``: a local process pool of ``--workers`` processes;
- ``dask``: ``--dask local --workers W`` (a ``LocalCluster`` of W single-threaded workers).

``--repeat R`` runs the cases R times each, interleaved, and reports medians and the
1-min load average before each run (``os.getloadavg``, as ``uptime``): on a 2-core
machine the parallel cases need both cores. Printed: points, median wall seconds per
case, and each case's speed-up over serial (target: >= 1, never slower). ``--save``
writes ``bench/results_sweep.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS_JSON = REPO / "bench" / "results_sweep.json"
CASES = ("serial", "processes", "dask")


def one(sweep: str, case: str, workers: int) -> dict:
    """Run the sweep once in this process as ``case``; returns its figures."""
    sys.path.insert(0, str(REPO))
    from sim.studies.sweep import run_sweep
    from sim.studies.sweep_spec import load_sweep

    spec = load_sweep(sweep)
    kwargs = {"serial": {"workers": 1}, "processes": {"workers": workers},
              "dask": {"workers": workers, "dask": "local"}}[case]
    with tempfile.TemporaryDirectory(prefix="dcsim-bench-sweep-") as out:
        started = time.perf_counter()
        report = run_sweep(spec, Path(out) / "sweep", **kwargs)
        wall = time.perf_counter() - started
    return {"case": case, "workers": 1 if case == "serial" else workers, "points": report.total,
            "ran": report.ran, "failed": len(report.failures), "wall_s": round(wall, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", default=str(REPO / "scenarios" / "sweep-mix.yaml"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--save", action="store_true")
    parser.add_argument("--one", nargs=2, metavar=("CASE", "WORKERS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.sweep, args.one[0], int(args.one[1]))), flush=True)
        return
    runs = []
    for r in range(args.repeat):
        for case in CASES:
            load = round(os.getloadavg()[0], 2)
            out = subprocess.run([sys.executable, __file__, "--sweep", args.sweep, "--one", case, str(args.workers)],
                                 capture_output=True, text=True, check=True, cwd=REPO)
            row = {**json.loads(out.stdout.strip().splitlines()[-1]), "repeat": r, "load_before": load}
            runs.append(row)
            print(f"{case:>9} x{row['workers']}: {row['wall_s']:7.2f} s  ({row['ran']} points, load {load})", flush=True)
    medians = {c: statistics.median(r["wall_s"] for r in runs if r["case"] == c) for c in CASES}
    print(f"\n{runs[0]['points']} points; medians of {args.repeat}:")
    for case in CASES:
        print(f"{case:>9}: {medians[case]:7.2f} s  speed-up over serial {medians['serial'] / medians[case]:.2f}x")
    if args.save:
        RESULTS_JSON.write_text(json.dumps({
            "machine": platform.platform(), "python": platform.python_version(), "sweep": Path(args.sweep).name,
            "workers": args.workers, "median_wall_s": medians,
            "speedup_over_serial": {c: round(medians["serial"] / medians[c], 3) for c in CASES}, "runs": runs,
        }, indent=2) + "\n")


if __name__ == "__main__":
    main()
