"""Datacenter-day benchmark: 24 h of diurnal chat + image traffic on 10,240 accelerators,
run as cells on a Dask ``LocalCluster`` of 1 and of 2 workers (issue 14).

Usage (from the repository root; not part of ``make test``: one run takes minutes)::

    python bench/bench_datacenter_day.py [--scale 1.0] [--cells 16] [--workers 1 2]
                                         [--hours 24] [--json PATH]

Fleet (one, 10,240 H100-SXM):

- ``chat``: 2,304 replicas of llama-3-70b, TP4, FP8 (9,216 GPUs), least-outstanding;
- ``image``: 1,024 replicas of SDXL 1024x1024, 30 steps, TP1 (1,024 GPUs).

Demand: Poisson arrivals with a diurnal sine (amplitude 0.6, one period a day, trough at
03:00, peak at 15:00), chat at a mean ``10 x scale`` req/s (prompt / output lengths
lognormal, median 1,000 / 200 tokens, sigma 1.0, capped at 8,000 / 2,000) and images at
``1.5 x scale`` req/s: about 994,000 requests a day at ``--scale 1``. That count is what
one core simulates in minutes; it loads the fleet lightly (a few percent of its
capacity), so this measures the engine at datacenter size, not a capacity plan. Raise
``--scale`` for more load (requests and time grow linearly).

Each fleet is split into ``--cells`` cells (16: 144 chat + 64 image replicas each); every
request goes to one cell, uniformly and independently (exact for Poisson arrivals, see
``sim/studies/cells.py``). The scenario streams (``engine.stream: on``): each cell streams
its rows on its worker into a part file (``requests/part-KKKKK.parquet``) and returns only
its accumulators, pool rows and time series, so the client merges no request rows. For
each worker count the benchmark starts a fresh ``LocalCluster`` (single-threaded worker
processes, as ``dcsim run --cells N --dask local --workers W``) in a fresh child process
(so the client's peak RSS is its own), runs the cells, merges them, costs the parts on
the workers, then asks every worker its peak RSS. ``--repeat R`` runs every worker count
R times, alternating (1, 2, 1, 2, ...), and reports medians; each run records the 1-min
load average (``os.getloadavg``, as ``uptime``) before and after it.

Printed per run and as medians per worker count: wall seconds (cells + merge + cost
pass, cluster start excluded), seconds until the last cell's result arrived, requests,
simulated requests per wall-second, SimPy events per request, peak RSS per worker and
of the client process, load; then the speed-up of 2 workers over 1 (target >= 1.8x, on
a quiet 2-core machine). The same run from the command line::

    python bench/bench_datacenter_day.py --write-scenario /tmp/dc-day.yaml
    dcsim run /tmp/dc-day.yaml --cells 16 --dask local --workers 2 --out /tmp/dc-day
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sim.scenario import parse_scenario  # noqa: E402

CHAT_REPLICAS, CHAT_TP = 2304, 4
IMAGE_REPLICAS = 1024
TARGET_SPEEDUP = 1.8


def scenario_data(scale: float, hours: float) -> dict:
    """The benchmark scenario as a mapping (what a YAML file would hold)."""
    diurnal = {"amplitude": 0.6, "period_s": 86400.0, "phase_s": 32400.0}  # rate peaks at 15:00
    return {
        "name": "datacenter-day",
        "description": "24 h of diurnal chat + image traffic on 10,240 H100 (bench/bench_datacenter_day.py)",
        "seed": 14,
        "duration_s": hours * 3600.0,
        "warmup_s": 0.0,
        "drain_s": 600.0,
        "engine": {"mode": "fast", "stream": "on"},
        "workloads": {
            "chat": {
                "kind": "autoregressive",
                "model": "llama-3-70b",
                "arrival": {"kind": "poisson", "rate_per_s": 10.0 * scale, "diurnal": diurnal},
                "prompt_tokens": {"kind": "lognormal", "median": 1000, "sigma": 1.0, "max": 8000},
                "output_tokens": {"kind": "lognormal", "median": 200, "sigma": 1.0, "max": 2000},
                "slo": {"ttft_s": 2.0, "tpot_s": 0.1},
            },
            "image": {
                "kind": "image_diffusion",
                "model": "sdxl",
                "arrival": {"kind": "poisson", "rate_per_s": 1.5 * scale, "diurnal": diurnal},
                "steps": 30,
                "slo": {"e2e_s": 10.0},
            },
        },
        "fleets": [
            {
                "name": "h100-dc",
                "router": "least_outstanding",
                "pools": [
                    {"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": CHAT_REPLICAS,
                     "tp": CHAT_TP, "precision": "fp8"},
                    {"name": "image", "accelerator": "h100-sxm", "serves": ["image"], "replicas": IMAGE_REPLICAS,
                     "tp": 1, "precision": "fp8", "max_batch": 8},
                ],
            }
        ],
    }


def _peak_rss_mb() -> float:
    """Peak resident set of this process: VmHWM (Linux; ``ru_maxrss`` survives fork and
    exec, so a worker started by a 2 GB client would report the client's peak)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Timed:
    """Wraps an executor: remembers when the last cell's result arrived (the merge after
    it runs in this process, then the cost round on the workers)."""

    def __init__(self, executor) -> None:
        self.executor = executor
        self.last = 0.0  # the last cell's result (the cost round of a streamed run is not counted)

    def submit(self, fn, arg):
        future = self.executor.submit(fn, arg)
        outer = self

        class _Future:
            def result(self):
                value = future.result()
                if fn.__name__ == "run_cell":
                    outer.last = max(outer.last, time.perf_counter())
                return value

        return _Future()


def measure(scenario, cells: int, workers: int) -> dict:
    import pyarrow.parquet as pq

    from sim.studies.cells import run_cells
    from sim.studies.sweep import DaskExecutor

    with DaskExecutor("local", workers) as executor:
        executor.connected()  # the cluster's start is not timed
        timed = _Timed(executor)
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        results = run_cells(scenario, cells, timed)
        wall = time.perf_counter() - t0
        load_after = os.getloadavg()[0]
        worker_rss = executor.connected().run(_peak_rss_mb)
    n = sum(pq.ParquetFile(p).metadata.num_rows for p in results.requests_file.iterdir())
    events = sum(results.events.values())
    return {
        "workers": workers,
        "cells": cells,
        "requests": n,
        "wall_s": wall,
        "cells_wall_s": timed.last - t0,
        "requests_per_wall_s": n / wall,
        "events_per_request": events / n,
        "peak_rss_mb_per_worker": sorted(worker_rss.values()),
        "peak_rss_mb_client": _peak_rss_mb(),
        "load_1min_before": load_before,
        "load_1min_after": load_after,
    }


def _row(r: dict) -> str:
    rss = " / ".join(f"{x:,.0f}" for x in r["peak_rss_mb_per_worker"])
    return (f"{r['workers']:>7} {r['requests']:>10,} {r['wall_s']:>8.1f} {r['cells_wall_s']:>8.1f} "
            f"{r['requests_per_wall_s']:>10,.0f} {r['events_per_request']:>10.2f} {rss:>22} "
            f"{r['peak_rss_mb_client']:>9,.0f} {r['load_1min_before']:>5.2f}/{r['load_1min_after']:.2f}")


def _in_child(args, workers: int) -> dict:
    """One measurement in a fresh interpreter (its client peak RSS is its own)."""
    cmd = [sys.executable, __file__, "--single", str(workers), "--scale", str(args.scale), "--hours",
           str(args.hours), "--cells", str(args.cells)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=float, default=1.0, help="multiply both arrival rates")
    p.add_argument("--hours", type=float, default=24.0, help="arrival window (h)")
    p.add_argument("--cells", type=int, default=16, help="cells (must divide 2,304 and 1,024)")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="LocalCluster sizes to compare")
    p.add_argument("--repeat", type=int, default=1, help="runs per worker count, alternating; medians")
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument("--write-scenario", type=Path, help="write the scenario as YAML and exit")
    p.add_argument("--single", type=int, help=argparse.SUPPRESS)  # one measurement, JSON on stdout
    args = p.parse_args(argv)
    data = scenario_data(args.scale, args.hours)
    if args.write_scenario:
        import yaml

        args.write_scenario.write_text(yaml.safe_dump(data, sort_keys=False))
        print(f"wrote {args.write_scenario}")
        return 0
    if args.single is not None:
        scenario = parse_scenario(data, "bench_datacenter_day")
        print(json.dumps(measure(scenario, args.cells, args.single)))
        return 0
    accelerators = CHAT_REPLICAS * CHAT_TP + IMAGE_REPLICAS
    print(f"datacenter day: {accelerators:,} H100, {args.hours:g} h, scale {args.scale:g}, {args.cells} cells, "
          f"streamed cells, {args.repeat} run(s) per worker count, alternating")
    header = (f"{'workers':>7} {'requests':>10} {'wall s':>8} {'cells s':>8} {'req/wall-s':>10} {'events/req':>10} "
              f"{'peak RSS/worker MB':>22} {'client MB':>9} {'load 1m before/after':>20}")
    print(header)
    out = []
    for _ in range(args.repeat):
        for w in args.workers:
            r = _in_child(args, w)
            out.append(r)
            print(_row(r), flush=True)
    medians = {}
    for w in args.workers:
        runs = [r for r in out if r["workers"] == w]
        medians[w] = {k: statistics.median(r[k] for r in runs) for k in
                      ("wall_s", "cells_wall_s", "requests_per_wall_s", "events_per_request", "peak_rss_mb_client",
                       "load_1min_before", "load_1min_after")}
        worst = [max(r["peak_rss_mb_per_worker"]) for r in runs]
        print(f"median, {w} worker(s): wall {medians[w]['wall_s']:.1f} s, cells {medians[w]['cells_wall_s']:.1f} s, "
              f"{medians[w]['requests_per_wall_s']:,.0f} req/wall-s, {medians[w]['events_per_request']:.2f} events/req, "
              f"peak RSS per worker {statistics.median(worst):,.0f} MB, client {medians[w]['peak_rss_mb_client']:,.0f} MB, "
              f"load {medians[w]['load_1min_before']:.2f} before / {medians[w]['load_1min_after']:.2f} after")
    if 1 in medians and 2 in medians:
        speedup = medians[1]["wall_s"] / medians[2]["wall_s"]
        cells_speedup = medians[1]["cells_wall_s"] / medians[2]["cells_wall_s"]
        print(f"speed-up of 2 workers over 1 (medians): {speedup:.2f}x overall, {cells_speedup:.2f}x until the last "
              f"cell (target >= {TARGET_SPEEDUP}x on a quiet 2-core machine)")
    if args.json:
        args.json.write_text(json.dumps({"runs": out, "medians": medians}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
