"""Dashboard page-update time with a 100,000-replica pool (issue 16).

Usage (from the repository root)::

    python bench/bench_dashboard_rerun.py [--replicas 100000] [--repeats 3]

Drives ``app.py`` through Streamlit's AppTest (no browser): loads the default scenario,
sets the all-h100 fleet's image pool to ``--replicas`` replicas in the sidebar, and
times whole-page reruns (what every widget edit costs) and an edit of an unrelated
field (PUE). Wall-clock seconds, medians of ``--repeats``; the simulation is not run.

Measured on the 2-core shared dev machine (2026-11-24): before (placement and packing
re-checked on every rerun, first-fit packing one replica at a time) 26-28 s per rerun
and 19 s for the PUE edit; after (packing by TP size, passed placements cached by fleet
content in ``sim.dashboard.check_placement``) 0.26-0.32 s, as with the default scenario.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    at = AppTest.from_file(APP, default_timeout=900)
    at.run()
    timed = lambda step: (lambda t: (step(), time.perf_counter() - t)[1])(time.perf_counter())  # noqa: E731
    default = statistics.median(timed(at.run) for _ in range(args.repeats))
    first = timed(lambda: at.number_input(key="default::fleets.0.pools.2.replicas").set_value(args.replicas).run())
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    rerun = statistics.median(timed(at.run) for _ in range(args.repeats))
    edit = timed(lambda: at.number_input(key="default::economics.pue").set_value(1.4).run())
    print(f"rerun, default scenario:               {default:.2f} s")
    print(f"setting {args.replicas:,} replicas:           {first:.2f} s")
    print(f"rerun with {args.replicas:,} replicas:        {rerun:.2f} s")
    print(f"PUE edit with {args.replicas:,} replicas:     {edit:.2f} s")


if __name__ == "__main__":
    main()
