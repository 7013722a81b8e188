"""Router scaling benchmark: CPU time per simulated request as the replica count grows,
for every router, at the same offered load per replica.

Usage (from the repository root)::

    python bench/bench_routers.py [--tree PATH] [--requests 20000] [--repeats 3]
                                  [--replicas 16 256 4096] [--routers ...]

Scenario: Poisson arrivals of llama-3-70b chat requests (prompt and output lengths
resampled from the Azure LLM inference trace 2023 (conv), as in ``bench_engine.py``) on
H100-SXM TP4 FP8 replicas, at ``--per-replica-rate`` requests/s per replica (default
1.5625 = bench_engine's 100/s over 64 replicas), for as long as it takes to offer about
``--requests`` requests; the drain lets every request finish. Only ``simulate`` is timed,
as CPU time of this process (``time.process_time``), so other processes on a shared
machine disturb it less than wall time; figures are medians of ``--repeats`` runs.

``--tree`` runs another source tree (e.g. ``git archive <commit> | tar -x -C /tmp/old``)
so before/after can be compared on one machine; the scenario comes from this tree's
``bench_engine.build_scenario`` (the trace from this repository's traffic/data) and is
parsed by the measured tree.

Printed per router and replica count: requests, µs of CPU per request, SimPy events per
request, and the ratio of µs/request to the smallest replica count (target of issue 14:
at 4,096 replicas within 1.25x of 16 replicas, every router).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

ROUTERS = ("round_robin", "least_outstanding", "join_shortest_queue", "central_queue")
TARGET_RATIO = 1.25


def build(replicas: int, router: str, per_replica_rate: float, requests: int):
    """bench_engine's scenario (:func:`bench_engine.build_scenario`: same model, trace
    lengths, pool and SLO) at ``replicas`` replicas behind ``router``, with a longer
    drain so every request finishes. Imported here, after ``main`` has put the measured
    tree's ``sim`` first, so the scenario is parsed by that tree."""
    from bench_engine import build_scenario
    from sim.scenario import parse_scenario

    rate = per_replica_rate * replicas
    data = build_scenario(requests / rate, rate, replicas, "fast").model_dump(mode="json")
    data["fleets"][0]["router"] = router
    data.update(name="bench-routers", drain_s=3600.0)
    return parse_scenario(data, "bench_routers")


def measure(replicas: int, router: str, args) -> dict:
    from sim.engine.core import simulate
    from sim.engine.demand import generate_demand

    scenario = build(replicas, router, args.per_replica_rate, args.requests)
    demand = generate_demand(scenario)
    n = sum(len(d) for d in demand.values())
    cpu, events = [], 0
    for _ in range(args.repeats):
        gc.collect()  # the previous repeat's garbage (cycles: replicas <-> pools) is not this run's cost
        c0 = time.process_time()
        run = simulate(scenario, 0, demand=demand)
        cpu.append(time.process_time() - c0)
        events = run.events
        del run
    return {"requests": n, "us_per_request": statistics.median(cpu) * 1e6 / n, "events_per_request": events / n}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    p.add_argument("--requests", type=int, default=20_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--per-replica-rate", type=float, default=100 / 64)
    p.add_argument("--replicas", type=int, nargs="+", default=[16, 256, 4096])
    p.add_argument("--routers", nargs="+", default=list(ROUTERS), choices=ROUTERS)
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    tree = args.tree.resolve()
    sys.path.insert(0, str(tree))
    import sim

    assert sim.__file__.startswith(str(tree)), sim.__file__
    print(f"tree {tree}: median CPU of {args.repeats} runs, ~{args.requests:,} requests, "
          f"{args.per_replica_rate:.4g} req/s per replica")
    print(f"{'router':<20} {'replicas':>8} {'requests':>9} {'us/req':>8} {'events/req':>10} {'vs first':>8}")
    out: dict[str, dict] = {}
    for router in args.routers:
        base = None
        for replicas in args.replicas:
            r = measure(replicas, router, args)
            base = base or r["us_per_request"]
            r["ratio"] = r["us_per_request"] / base
            out.setdefault(router, {})[replicas] = r
            print(f"{router:<20} {replicas:>8} {r['requests']:>9,} {r['us_per_request']:>8.1f} "
                  f"{r['events_per_request']:>10.3f} {r['ratio']:>7.2f}x", flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
