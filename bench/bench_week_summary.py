"""A week at datacenter scale in summary-only mode (issue 27): 10,240 H100 (the fleet of
``bench_datacenter_day.py``), diurnal chat + image traffic at ``--scale`` times that
benchmark's rates for ``--hours`` (default 168 h at scale 15: about 1.04e8 requests), with
``engine.output: summary`` (counters and DDSketches, no request rows), run as ``--cells``
cells on a Dask ``LocalCluster`` of ``--workers`` single-threaded workers.

Usage (from the repository root; takes long: run it niced, in the background)::

    nice python bench/bench_week_summary.py [--scale 15] [--hours 168] [--workers 2] [--cells 16]
    nice python bench/bench_week_summary.py --exact-check --hours 16   # ~1e7 requests, with rows

Printed (and with ``--json PATH`` saved): requests, wall seconds, simulated requests per
wall-second, peak RSS per worker and of the client, the size on disk of the written
outputs (``dcsim run --out`` files). ``--exact-check`` runs the same scenario with request
rows kept (streamed to Parquet) and compares the summary's sketched p50/p95/p99 TTFT and
E2E (DDSketch, relative accuracy α = 0.5 %) with the exact percentiles of the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import bench_datacenter_day as day  # noqa: E402
from sim.scenario import parse_scenario  # noqa: E402


def scenario(scale: float, hours: float, output: str):
    data = day.scenario_data(scale, hours)
    data["name"] = "datacenter-week"
    data["engine"] = {"mode": "fast", "stream": "on", "output": output}
    return parse_scenario(data)


def _size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def run(args, output: str) -> tuple[dict, object]:
    from sim.results.export import write_results
    from sim.studies.cells import run_cells
    from sim.studies.sweep import DaskExecutor

    sc = scenario(args.scale, args.hours, output)
    with DaskExecutor("local", args.workers) as executor:
        executor.connected()
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        results = run_cells(sc, args.cells, executor)
        wall = time.perf_counter() - t0
        worker_rss = executor.connected().run(day._peak_rss_mb)
    out = Path(tempfile.mkdtemp(prefix="dcsim-week-")) / "out"
    write_results(results, out)
    requests = int(results.summary["requests"].sum())
    return {"requests": requests, "wall_s": wall, "requests_per_wall_s": requests / wall,
            "events_per_request": sum(results.events.values()) / requests,
            "peak_rss_mb_per_worker": sorted(worker_rss.values()), "peak_rss_mb_client": day._peak_rss_mb(),
            "output_bytes": _size(out), "output_dir": str(out), "load_1min_before": load,
            "hours": args.hours, "scale": args.scale, "cells": args.cells, "workers": args.workers}, results


def exact_check(results) -> dict:
    """Sketched vs exact percentiles of measured, completed requests (rows from the parts)."""
    import numpy as np
    import pyarrow.dataset as ds

    table = ds.dataset(str(results.requests_file)).to_table(
        columns=["workload", "status", "measured", "ttft_s", "e2e_s"]).to_pandas()
    out = {}
    for name in ("chat", "image"):
        rows = table[(table["workload"] == name) & table["measured"] & (table["status"] == "completed")]
        srow = results.summary[results.summary["workload"] == name].iloc[0]
        for col in ("ttft", "e2e"):
            values = rows[f"{col}_s"].dropna().to_numpy()
            if not len(values):
                continue
            for p in (50, 95, 99):
                exact, sketch = float(np.percentile(values, p)), float(srow[f"{col}_p{p}_s"])
                out[f"{name}_{col}_p{p}"] = {"exact_s": exact, "sketch_s": sketch, "relative_error": sketch / exact - 1}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=float, default=15.0)
    p.add_argument("--hours", type=float, default=168.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--cells", type=int, default=16)
    p.add_argument("--exact-check", action="store_true")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    figures, results = run(args, "rows" if args.exact_check else "summary")
    if args.exact_check:
        figures["percentiles"] = exact_check(results)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
