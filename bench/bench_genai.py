"""GenAI image-trace benchmark: how long the replay of scenarios/genai-image.yaml takes.

Usage (from the repository root; the trace is an optional dataset: ``dcsim data`` says
where to get it and where to put it)::

    DCSIM_DATA_DIR=DIR python bench/bench_genai.py

Timed separately: reading the trace (first load; later loads are cached), drawing the
demand (jitter and per-request shapes of all 26,823 rows), and ``simulate`` on each
fleet. Printed: requests, wall seconds per phase, and simulated requests per
wall-second per fleet.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sim.engine.core import simulate  # noqa: E402
from sim.engine.demand import generate_demand  # noqa: E402
from sim.scenario import load_scenario  # noqa: E402


def main() -> int:
    scenario = load_scenario(REPO / "scenarios" / "genai-image.yaml")
    started = time.perf_counter()
    scenario.workloads["image"].arrival.trace()
    read_s = time.perf_counter() - started
    started = time.perf_counter()
    demand = generate_demand(scenario)
    demand_s = time.perf_counter() - started
    n = sum(len(d) for d in demand.values())
    print(f"trace read {read_s:.2f} s; demand of {n} requests drawn in {demand_s:.2f} s")
    for fleet in scenario.fleets:
        started = time.perf_counter()
        run = simulate(scenario, fleet.name, demand=demand)
        wall_s = time.perf_counter() - started
        print(f"{fleet.name:8s} simulate {wall_s:6.2f} s  {n / wall_s:9.0f} requests/s  {run.events} events")
    return 0


if __name__ == "__main__":
    sys.exit(main())
