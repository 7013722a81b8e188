"""Cancelled timers taken out of SimPy's queue (:mod:`sim.engine.timer`) change nothing
but the number of events processed.

Second implementation: the same generated scenarios (the fast/exact differential
strategy, fast and exact mode) run with the purge switched off (``PURGE_MIN`` beyond any
queue), where every cancelled timer is popped and runs nothing, as before. Every request
outcome, pool row and time-series sample must be identical, and the events saved must
be the cancelled entries removed, less those the run would have ended before reaching
(shrunk counterexample of the exact identity: a 0.5 ms burst with no drain, whose one
cancelled timer was due after the end).
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from scenario_strategies import diff_settings, placeable, scenarios, squeeze

import sim.engine.core as core
import sim.engine.timer as timer
from sim.scenario import parse_scenario


def _run(scenario, purge_min: int):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(timer, "PURGE_MIN", purge_min)
        purged = []
        original = timer._purge  # noqa: SLF001

        def counting(queue, stale):
            before = stale.purged
            original(queue, stale)
            purged.append(stale.purged - before)

        mp.setattr(timer, "_purge", counting)
        run = core.simulate(scenario)
    return run, sum(purged)


@diff_settings(20)
@given(data=st.data(), mode=st.sampled_from(["fast", "exact"]), purge_min=st.sampled_from([1, 2, 16]))
def test_purging_cancelled_timers_changes_only_the_event_count(tmp_path_factory, data, mode, purge_min):
    scenario = data.draw(scenarios(tmp_path_factory.mktemp("trace"), max_workloads=2))
    squeeze(scenario)
    assume(placeable(scenario))
    parsed = parse_scenario(dict(scenario, engine={"mode": mode}), "stale-timers")
    with_purge, purged = _run(parsed, purge_min)
    without, none = _run(parsed, 10**12)
    assert none == 0
    assert with_purge.requests.equals(without.requests)
    assert with_purge.pools.equals(without.pools)
    assert with_purge.timeseries.equals(without.timeseries)
    assert with_purge.end_s == without.end_s
    # every purged entry is an event saved, unless the run ended before it was due (it
    # would have stayed in the queue, never processed)
    assert without.events - purged <= with_purge.events <= without.events


def test_a_mixed_fleet_purges_and_saves_the_events_it_removed():
    """Hand case: the mixed fleet of test_engine_modes (chat, diffusion LM, images, search;
    2 minutes) cuts many stretches, so entries are purged at the default threshold."""
    from scenario_cases import MIXED_POOLS, MIXED_WORKLOADS
    from scenario_cases import make_scenario

    scenario = make_scenario(MIXED_WORKLOADS, MIXED_POOLS, duration_s=120.0, seed=11, engine={"mode": "fast"})
    with_purge, purged = _run(scenario, timer.PURGE_MIN)
    without, _ = _run(scenario, 10**12)
    assert purged > 0
    assert with_purge.requests.equals(without.requests)
    assert with_purge.timeseries.equals(without.timeseries)
    assert without.events - purged <= with_purge.events < without.events


def test_a_cancelled_timer_due_after_the_end_saves_no_event():
    """Shrunk counterexample: one request, no drain; the cancelled timer purged from the
    queue was due after the run stopped, so it would never have been processed."""
    scenario = parse_scenario({
        "name": "diff", "seed": 0, "duration_s": 0.0005, "warmup_s": 0.0, "drain_s": 0.0,
        "sample_interval_s": 1.0005, "engine": {"mode": "fast"},
        "workloads": {"w0": {"kind": "autoregressive", "model": "llama-3-8b",
                             "arrival": {"kind": "poisson", "rate_per_s": 2000.0},
                             "prompt_tokens": {"kind": "constant", "value": 1},
                             "output_tokens": {"kind": "constant", "value": 1}}},
        "fleets": [{"name": "f", "router": "round_robin",
                    "pools": [{"name": "p0", "serves": ["w0"], "replicas": 1, "accelerator": "h100-sxm",
                               "tp": 1, "pp": 1, "precision": "fp8", "max_batch": 2,
                               "max_prefill_tokens": 64, "kv_block_tokens": 1, "kv_watermark": 0.0,
                               "iteration_overhead_s": 0.0, "min_kv_tokens": 0, "memory_utilization": 0.9}]}],
    }, "stale-timers-regression")
    with_purge, purged = _run(scenario, 1)
    without, _ = _run(scenario, 10**12)
    assert purged == 1
    assert with_purge.requests.equals(without.requests)
    assert with_purge.events == without.events
