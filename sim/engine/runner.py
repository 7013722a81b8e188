"""``run_scenario``: every fleet of a scenario on the same demand.

The run is resolved once (:func:`sim.fleet_plan.resolve`: every fleet's pools laid out
and checked before any fleet runs), the demand drawn once (held in memory and shared by
the fleets, or, when the run streams, drawn window by window for each fleet in turn:
identical requests), and each fleet's plan run on it (:func:`sim.engine.core.run_fleet`).
What becomes of the outcomes is the caller's: :func:`sim.results.tables.run_scenario`
turns them into tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from sim.engine.core import FleetRun, ProgressFn, RowSink, run_fleet
from sim.engine.demand import demand_streams, generate_demand
from sim.errors import UserError
from sim.fleet_plan import FleetPlan, ScenarioPlan, resolve
from sim.scenario import MAX_IN_MEMORY_REQUESTS, Scenario

STREAM_AUTO_REQUESTS = 1_000_000
"""``engine.stream: auto`` streams a run whose demand holds more requests than this."""

ProgressFactory = Callable[[str, float, int], ProgressFn]
SinkFactory = Callable[[FleetPlan], RowSink]


def use_streaming(scenario: Scenario, total_requests: int) -> bool:
    """Whether a run of ``total_requests`` requests streams (``engine.stream``: on, off,
    or auto: above :data:`STREAM_AUTO_REQUESTS`): its rows go to a sink batch by batch
    and its demand is drawn as the run reaches it."""
    mode = scenario.engine.stream
    if scenario.engine.output == "summary":  # counters and sketches: the streamed path, without rows
        return True
    return mode == "on" or (mode == "auto" and total_requests > STREAM_AUTO_REQUESTS)


@dataclass
class ScenarioRun:
    """What :func:`run_scenario` did: the plan, one :class:`FleetRun` per fleet (in the
    scenario's order), each fleet's sink (None when the rows were kept in memory), and
    the number of requests in the demand."""

    plan: ScenarioPlan
    runs: list[FleetRun]
    sinks: list[Any]
    total_requests: int

    @property
    def streamed(self) -> bool:
        return any(s is not None for s in self.sinks)


def run_scenario(scenario: Scenario, progress: ProgressFactory | None = None,
                 sink_for: SinkFactory | None = None) -> ScenarioRun:
    """Resolve ``scenario``, draw its demand and run every fleet on it (module docstring).

    Args:
        progress: ``progress(fleet_name, span_s, total_requests)`` returns the per-fleet
            callback of :func:`sim.engine.core.run_fleet`.
        sink_for: when the run streams (:func:`use_streaming`), called once per fleet
            plan for the sink its rows go to; required then.

    Raises:
        UserError: no request arrives in the window; the run streams but no
            ``sink_for`` was given.
        PlacementError: a fleet cannot be built.
    """
    plan = resolve(scenario)  # every fleet up front: placement errors before any run
    demand = demand_streams(scenario)  # counted by a pass over the arrivals alone
    total = sum(len(d) for d in demand.values())
    if total == 0:
        raise UserError(f"no request arrives in duration_s={scenario.duration_s:g} s (seed {scenario.seed}) for "
                        f"workloads {list(scenario.workloads)}; raise an arrival rate or duration_s")
    stream = use_streaming(scenario, total)
    if not stream and total > MAX_IN_MEMORY_REQUESTS:  # traces (looped ones too) are only counted here
        raise UserError(f"the demand holds {total:,} requests; with engine.stream: off at most {MAX_IN_MEMORY_REQUESTS:,} "
                        f"are held in memory: set engine.stream: auto (or on), or lower the rates or duration_s")
    if stream and sink_for is None:
        raise UserError("this run streams its rows (engine.stream) but nothing was given to receive them")
    if not stream:  # drawn once in memory and shared by the fleets; a streamed run draws as it goes
        demand = generate_demand(scenario)
    runs, sinks = [], []
    for fleet in plan.fleets:
        callback = progress(fleet.name, scenario.duration_s + scenario.drain_s, total) if progress else None
        sink = sink_for(fleet) if stream else None
        runs.append(run_fleet(fleet, demand, progress=callback, sink=sink))
        sinks.append(sink)
    return ScenarioRun(plan, runs, sinks, total)
