"""``python -m sim.studies.operations``: studies of a fleet's operations (docs/operations.md).

``compare SCENARIO``: run the scenario and, per fleet, what it powered and billed against
what it delivered: GPU-hours powered (an operated pool's from its powered replica-seconds;
a static pool's, every replica for the whole run), their cost at the rental rate, SLO
attainment, cold starts, interruptions, requests retried and lost. Use it on
``scenarios/azure-autoscale.yaml`` (autoscaled vs static peak sizing).

``failures SCENARIO``: the same scenario run twice, with its pools' failures and without
(every ``failures`` block removed): SLO attainment, interruptions, capacity lost.

``spares RATE_PER_HOUR REPAIR_H TARGET``: :func:`spares_for` (the planner's spare sizing).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd
from scipy.stats import poisson

from sim.errors import UserError
from sim.fleet_plan import resolve
from sim.models.economics import rental_rate
from sim.results.report_text import table
from sim.results.tables import Results, run_scenario
from sim.scenario import Scenario, load_scenario


def spares_for(failures_per_hour: float, repair_h: float, target: float) -> int:
    """Spare replicas so that a failed replica finds a spare with probability ``target``
    at any instant: units under repair form an M/G/∞ queue, whose count is Poisson with mean
    rate × repair time for any repair-time distribution (Palm's theorem; Kleinrock,
    Queueing Systems vol. 1, 1975, §5.8), so the answer is the smallest s with
    P(Poisson(λ·R) ≤ s) ≥ target.

    Raises:
        ValueError: a negative rate or repair time, or target outside (0, 1)."""
    if failures_per_hour < 0 or repair_h < 0 or not 0 < target < 1:
        raise ValueError(f"spares_for: need rate >= 0, repair >= 0, 0 < target < 1; got {failures_per_hour}, "
                         f"{repair_h}, {target}")
    return int(poisson.ppf(target, failures_per_hour * repair_h))


def fleet_operations(results: Results) -> pd.DataFrame:
    """Per fleet and pool: GPU-hours powered, their cost (rental rate), and the operations
    counters, beside the fleet's SLO attainment per workload (the first workload's)."""
    plans = {p.name: p for p in resolve(results.scenario).fleets}
    ops = results.operations if results.operations is not None else pd.DataFrame(columns=["fleet", "pool"])
    rows = []
    for fleet, plan in plans.items():
        slo = results.summary[results.summary["fleet"] == fleet]
        for pool in plan.pools:
            mine = ops[(ops["fleet"] == fleet) & (ops["pool"] == pool.name)]
            gpus = pool.layout.accelerators if pool.layout else 0
            if len(mine):
                r = mine.iloc[0]
                gpu_h, counters = r["gpu_hours_powered"], r
            else:  # static: every replica powered for the whole run
                gpu_h, counters = gpus * results.end_s[fleet] / 3600.0, {}
            rows.append({
                "fleet": fleet, "pool": pool.name, "gpu_hours": gpu_h,
                "cost_usd": gpu_h * rental_rate(pool.config.accelerator, results.scenario.economics),
                "slo_attainment": float(slo["slo_attainment"].iloc[0]) if len(slo) else math.nan,
                "ttft_p99_s": float(slo["ttft_p99_s"].iloc[0]) if len(slo) else math.nan,
                **{k: int(counters.get(k, 0)) for k in ("cold_starts", "interruptions", "requests_retried",
                                                       "requests_lost")},
                "failed_replica_h": float(counters.get("failed_replica_s", 0.0)) / 3600.0,
            })
    return pd.DataFrame(rows)


def without_failures(scenario: Scenario) -> Scenario:
    """``scenario`` with every pool's ``failures`` removed."""
    data = scenario.model_dump(mode="json")
    for fleet in data["fleets"]:
        for pool in fleet["pools"]:
            pool["failures"] = None
    return Scenario.model_validate(data)


def operations_text(df: pd.DataFrame) -> str:
    headers = ["fleet", "pool", "GPU-hours", "cost", "SLO attained", "TTFT p99 (s)", "cold starts", "interruptions",
               "retried", "lost", "replica-h failed"]
    body = [[r.fleet, r.pool, f"{r.gpu_hours:,.1f}", f"${r.cost_usd:,.0f}", f"{r.slo_attainment:.4%}",
             f"{r.ttft_p99_s:.3f}", str(r.cold_starts), str(r.interruptions), str(r.requests_retried),
             str(r.requests_lost), f"{r.failed_replica_h:,.1f}"] for r in df.itertuples()]
    return table(headers, body, right=[False, False] + [True] * 9)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.studies.operations", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    for name in ("compare", "failures"):
        sub.add_parser(name).add_argument("scenario", type=Path)
    spares = sub.add_parser("spares")
    for arg in ("rate_per_hour", "repair_h", "target"):
        spares.add_argument(arg, type=float)
    args = parser.parse_args(argv)
    try:
        if args.what == "spares":
            print(spares_for(args.rate_per_hour, args.repair_h, args.target))
            return 0
        scenario = load_scenario(args.scenario)
        print(operations_text(fleet_operations(run_scenario(scenario))))
        if args.what == "failures":
            print("\nWithout failures:")
            print(operations_text(fleet_operations(run_scenario(without_failures(scenario)))))
    except (UserError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
