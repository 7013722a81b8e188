"""Memory benchmark: peak RSS of a whole run against its request count, streaming on/off.

Usage (from the repository root)::

    python bench/bench_memory.py [--requests 1e6 2e6 3e6 10e6] [--modes on off] [--save]
    python bench/bench_memory.py --one 1000000 on      # one case, prints a JSON line

Each case runs in a fresh process (peak RSS is a per-process high-water mark): the
``bench_engine.py`` scenario (llama-3-70b on 64 H100-SXM TP4 FP8 replicas, Poisson
arrivals at 100 requests/s, Azure conv 2023 token lengths) with ``duration_s`` set to
give the request count, through :func:`sim.results.tables.run_scenario` (demand, engine,
pool/request/summary tables, and with streaming the final costed ``requests.parquet``).
Printed per case: requests, ``engine.stream``, wall seconds, simulated requests per
wall-second (and per CPU-second in the JSON: a shared machine stretches wall time), and peak RSS (``resource.getrusage(RUSAGE_SELF).ru_maxrss``). ``off`` is
skipped above :data:`sim.scenario.MAX_IN_MEMORY_REQUESTS` (the scenario would be refused).

Target (issue 14): 10M requests with peak RSS under 1 GB, streaming on.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

RESULTS_JSON = REPO / "bench" / "results_memory.json"
RATE_PER_S = 100.0
REPLICAS = 64
TARGET_PEAK_RSS_BYTES = 1 << 30


def one(requests: int, stream: str) -> dict:
    """Run one case in this process and return its figures."""
    from bench_engine import build_scenario
    from sim.results.tables import run_scenario

    scenario = build_scenario(requests / RATE_PER_S, RATE_PER_S, REPLICAS, "fast")
    scenario = scenario.model_copy(update={"engine": scenario.engine.model_copy(update={"stream": stream})})
    before = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = before.ru_utime + before.ru_stime
    started = time.perf_counter()
    results = run_scenario(scenario)
    wall = time.perf_counter() - started
    n = int(results.summary["requests"].sum())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime - cpu_before
    return {"requests": n, "stream": stream, "streamed": results.streamed, "wall_s": round(wall, 1),
            "req_per_wall_s": round(n / wall), "cpu_s": round(cpu, 1), "req_per_cpu_s": round(n / cpu),
            "peak_rss_mb": round(usage.ru_maxrss / 1024), "events": sum(results.events.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=float, nargs="+", default=[1e6, 2e6, 3e6, 10e6])
    parser.add_argument("--modes", nargs="+", default=["on", "off"], choices=["on", "off"])
    parser.add_argument("--one", nargs=2, metavar=("REQUESTS", "STREAM"))
    parser.add_argument("--save", action="store_true")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(int(float(args.one[0])), args.one[1])), flush=True)
        return
    from sim.scenario import MAX_IN_MEMORY_REQUESTS

    rows = []
    print(f"{'requests':>11} {'stream':>6} {'wall s':>8} {'req/s':>8} {'peak RSS MB':>12}")
    for n in args.requests:
        for mode in args.modes:
            if mode == "off" and n > MAX_IN_MEMORY_REQUESTS:
                continue
            out = subprocess.run([sys.executable, __file__, "--one", str(int(n)), mode],
                                 capture_output=True, text=True, check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"{row['requests']:>11,} {mode:>6} {row['wall_s']:>8.1f} {row['req_per_wall_s']:>8,} "
                  f"{row['peak_rss_mb']:>12,}", flush=True)
    if args.save:  # merged into earlier cases (one per request count and mode)
        old = json.loads(RESULTS_JSON.read_text())["cases"] if RESULTS_JSON.is_file() else []
        new = {(r["requests"], r["stream"]) for r in rows}
        cases = sorted([r for r in old if (r["requests"], r["stream"]) not in new] + rows,
                       key=lambda r: (r["requests"], r["stream"]))
        RESULTS_JSON.write_text(json.dumps({"machine": platform.platform(), "python": platform.python_version(),
                                            "target_peak_rss_bytes": TARGET_PEAK_RSS_BYTES, "cases": cases},
                                           indent=2) + "\n")


if __name__ == "__main__":
    main()
