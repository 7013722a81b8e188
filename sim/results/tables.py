"""The tables of a scenario run (:class:`Results`), assembled from its fleets' outcomes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sim.engine.core import FleetRun
from sim.engine.runner import ProgressFactory
from sim.engine.runner import run_scenario as engine_run
from sim.models.economics import attribute_costs
from sim.results.metrics import fleet_table
from sim.results.summary import summarize_in_memory
from sim.results.streaming import FleetStream, StreamSpool, assemble_streamed, spool_errors
from sim.scenario import Scenario


@dataclass
class Results:
    """Tidy tables of one scenario run, all fleets side by side.

    - ``requests``: one row per request and fleet (status, latencies in s, cost in USD).
    - ``pools``: one row per pool (utilisation, capacity, power, costs).
    - ``summary``: one row per fleet × workload (latency tails, SLO attainment, $/request).
    - ``fleets``: one row per fleet (accelerators, capex, opex per month, IT power).
    - ``events``: SimPy events processed per fleet (engine cost).
    - ``end_s``: simulated instant each fleet's run ended (costs cover [0, end_s]).
    - ``timeseries``: per pool, sampled outstanding/queued requests and busy time.
    - ``requests_file``: a streamed run's request rows (Parquet, completion order per
      fleet; ``requests`` is then empty): see :mod:`sim.results.streaming`.
    """

    scenario: Scenario
    requests: pd.DataFrame
    pools: pd.DataFrame
    summary: pd.DataFrame
    fleets: pd.DataFrame
    events: dict[str, int]
    end_s: dict[str, float]
    timeseries: pd.DataFrame
    requests_file: Path | None = None
    spool: Any = None  # keeps a streamed run's temporary directory alive
    operations: pd.DataFrame | None = None  # operated pools (sim.engine.operations); None: no pool is
    capacity: pd.DataFrame | None = None  # their serving/powered/failed replicas over time

    @property
    def streamed(self) -> bool:
        return self.requests_file is not None


def run_scenario(scenario: Scenario, progress: ProgressFactory | None = None) -> Results:
    """Simulate every fleet on the same demand (:func:`sim.engine.runner.run_scenario`)
    and tabulate the outcomes: in memory, or streamed through a :class:`FleetStream` per
    fleet into a temporary spool (:mod:`sim.results.streaming`).

    Args:
        progress: ``progress(fleet_name, duration_s, total_requests)`` returns the
            per-fleet callback passed to :func:`sim.engine.core.run_fleet`.
    """
    spool: list[StreamSpool] = []

    def sink_for(plan) -> FleetStream:
        if not spool:
            spool.append(StreamSpool())
        return FleetStream(plan, spool[0].path, rows=scenario.engine.output == "rows")

    with spool_errors():  # a full TMPDIR under a streamed run: a clear error, not a traceback
        run = engine_run(scenario, progress, sink_for)
        if run.streamed:
            return _assemble_streamed(scenario, run.runs, run.sinks, spool[0])
    return assemble_results(scenario, run.runs)


def _assemble_streamed(scenario: Scenario, runs: list[FleetRun], sinks: list, spool) -> Results:
    pools, summary, fleets, requests_file, empty = assemble_streamed(scenario, runs, sinks, spool)
    return Results(
        scenario=scenario,
        requests=empty,
        pools=pools,
        summary=summary,
        fleets=fleets,
        events={r.fleet: r.events for r in runs},
        end_s={r.fleet: r.end_s for r in runs},
        timeseries=pd.concat([r.timeseries for r in runs], ignore_index=True),
        requests_file=requests_file,
        spool=spool,
        operations=operations_of(runs, "operations"),
        capacity=operations_of(runs, "capacity"),
    )


def operations_of(runs: list[FleetRun], field: str) -> pd.DataFrame | None:
    """The runs' operations (or capacity) frames side by side; None when no fleet has one."""
    frames = [getattr(r, field) for r in runs if getattr(r, field) is not None]
    return pd.concat(frames, ignore_index=True) if frames else None


def assemble_results(scenario: Scenario, runs: list[FleetRun]) -> Results:
    """The tables of a scenario from its fleets' runs held in memory (one
    :class:`FleetRun` per fleet, in the scenario's fleet order): pool rows, costed request
    rows, and the summary (each run one batch of :mod:`sim.results.summary`'s accumulators)."""
    requests, pools, summary, series, events, ends = [], [], [], [], {}, {}
    for run in runs:
        table, rows, totals = summarize_in_memory(run)
        pools.append(table)
        summary += rows
        requests.append(attribute_costs(run.requests, table, run.end_s, run.pool_shares,
                                        scenario.economics.ownership, totals))
        series.append(run.timeseries)
        events[run.fleet] = run.events
        ends[run.fleet] = run.end_s
    requests_df = pd.concat(requests, ignore_index=True)
    pools_df = pd.concat(pools, ignore_index=True)
    summary_df = pd.DataFrame(summary)
    return Results(
        scenario=scenario,
        requests=requests_df,
        pools=pools_df,
        summary=summary_df,
        fleets=fleet_table(pools_df, summary_df, scenario.economics),
        events=events,
        end_s=ends,
        timeseries=pd.concat(series, ignore_index=True),
        operations=operations_of(runs, "operations"),
        capacity=operations_of(runs, "capacity"),
    )
