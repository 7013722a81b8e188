"""Peak memory per simulated request of a dashboard-sized run (rows in memory).

Runs scenarios/default.yaml (3 fleets, 300 s of arrivals as the dashboard caps it) at
several total rates, each in a fresh process, and prints requests simulated, peak RSS
and the slope (bytes per request) between the smallest and largest run.  The figure is
``sim.dashboard_checks.PEAK_RSS_BYTES_PER_REQUEST``.

    .venv/bin/python bench/bench_dashboard_memory.py
"""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = """
import json, resource, sys
from sim import dashboard as ds
from sim.overrides import document
from sim.scenario import load_scenario, parse_scenario
from sim.results.tables import run_scenario
factor = float(sys.argv[1])
data = ds.for_dashboard(document(load_scenario(ds.SCENARIO_DIR / "default.yaml")))
for wl in data["workloads"].values():
    if "rate_per_s" in wl["arrival"]:
        wl["arrival"]["rate_per_s"] *= factor
data["engine"] = {**data.get("engine", {}), "stream": "off"}
results = run_scenario(parse_scenario(data, "bench"))
print(json.dumps({"requests": len(results.requests),
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def main() -> None:
    points = []
    for factor in (sys.argv[1:] or ["1", "4", "16"]):
        out = subprocess.run([sys.executable, "-c", CHILD, factor], capture_output=True, text=True, check=True)
        point = json.loads(out.stdout.strip().splitlines()[-1])
        points.append(point)
        print(f"rate x{factor}: {point['requests']:,} requests, peak RSS {point['peak_rss_bytes'] / 1e6:,.0f} MB")
    first, last = points[0], points[-1]
    slope = (last["peak_rss_bytes"] - first["peak_rss_bytes"]) / (last["requests"] - first["requests"])
    print(f"slope: {slope:,.0f} bytes of peak RSS per request")


if __name__ == "__main__":
    main()
