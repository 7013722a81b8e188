"""A finished run leaves none of its engine behind.

Compiled, :class:`sim.engine.request.Request` is not tracked by the cyclic garbage
collector (it only holds plain data), so a request that referred to an engine object
would keep a whole cycle alive: request -> router -> pool -> replica -> queue -> request,
never collected. The riskiest case is a run that ends with multi-stage journeys still in
flight (a drain that runs out): their requests sit in queues and batches, each holding
its journey. After the run and a collection, no router or replica of it may be left."""

from __future__ import annotations

import gc
from pathlib import Path

from sim.engine.core import simulate
from sim.engine.replica_ar import ARReplica
from sim.engine.replica_step import StepReplica
from sim.engine.router import Router
from sim.scenario import load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[3]


def _engine_objects() -> int:
    gc.collect()
    return sum(isinstance(o, (Router, StepReplica, ARReplica)) for o in gc.get_objects())


def test_a_run_cut_short_with_journeys_in_flight_frees_its_routers_and_replicas():
    scenario = load_scenario(ROOT / "scenarios" / "search-verifier.yaml")
    # three times the arrivals the fleet can serve, and a drain of 1 s: the run ends with
    # requests queued and mid-journey on both pools (hand-offs to the verifier pool)
    data = scenario.model_dump(mode="json")
    data.update(duration_s=120, warmup_s=0, drain_s=1)
    data["workloads"]["search"]["arrival"]["rate_per_s"] = 2.0
    scenario = parse_scenario(data, "cut-short")
    before = _engine_objects()
    run = simulate(scenario, "split-tpu")
    in_flight = run.requests[run.requests["status"] == "in_flight"]
    assert len(in_flight) > 50, "the run must end with journeys in flight"
    assert (run.requests["handoffs"] > 0).any(), "the journeys must cross pools"
    del run
    assert _engine_objects() == before
