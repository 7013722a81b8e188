"""Demand drawn in windows (sim/engine/demand.py): a streamed run's view of the demand
against the in-memory one, and cell shares against the whole.

Independent truth: the in-memory demand's arrays themselves (every request once, in
order), and counts made here from them; windows are made small (ARRIVAL_CHUNK patched)
so every workload spans many of them.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from scenario_cases import make_scenario
from scenario_strategies import diff_settings, placeable, scenarios, squeeze

import traffic.chunks as chunks
import sim.engine.core as core
from sim.engine.core import simulate
from sim.engine.demand import CellShare, DemandStream, generate_demand
from sim.scenario import parse_scenario
from sim.results.tables import run_scenario
from sim.studies.cells import run_cells


@pytest.fixture
def small_windows(monkeypatch):
    monkeypatch.setattr(chunks, "ARRIVAL_CHUNK", 37)


def two_workloads():
    token = {"kind": "lognormal", "median": 300, "sigma": 0.8, "max": 4000}
    return make_scenario(
        {"chat": {"kind": "autoregressive", "model": "llama-3-8b",
                  "arrival": {"kind": "gamma", "rate_per_s": 6.0, "cv": 2.0},
                  "prompt_tokens": token, "output_tokens": {**token, "median": 80}},
         "batch": {"kind": "autoregressive", "model": "llama-3-8b",
                   "arrival": {"kind": "poisson", "rate_per_s": 3.0, "diurnal": {"amplitude": 0.5, "period_s": 60}},
                   "prompt_tokens": token, "output_tokens": token}},
        [{"name": "chat", "accelerator": "h100-sxm", "serves": ["chat", "batch"], "replicas": 4, "tp": 1,
          "max_batch": 32}],
        duration_s=120.0, warmup_s=10.0, seed=11,
    )


def test_stream_windows_concatenate_to_the_in_memory_demand(small_windows):
    sc = two_workloads()
    for name, whole in generate_demand(sc).items():
        stream = DemandStream(sc, name)
        windows = list(stream.windows())
        assert len(windows) > 5 and len(stream) == len(whole)
        np.testing.assert_array_equal(np.concatenate([w.arrival_s for w in windows]), whole.arrival_s)
        np.testing.assert_array_equal(np.concatenate([w.prompt_tokens for w in windows]), whole.prompt_tokens)
        np.testing.assert_array_equal(np.concatenate([w.output_tokens for w in windows]), whole.output_tokens)


def test_cell_shares_partition_the_demand_with_global_ids(small_windows):
    """Four cells' shares, window by window: every request of the whole demand exactly
    once, with its id in the whole demand (the workload's offset plus its position) and
    its own arrival instant and token counts; each share's length is its row count."""
    sc = two_workloads()
    whole = generate_demand(sc)
    first_id = 0
    for name, d in whole.items():
        ids, times, prompts = [], [], []
        for cell in range(4):
            share = DemandStream(sc, name, CellShare(4, cell, first_id))
            rows = share.in_memory()
            assert len(share) == len(rows) > 0
            ids.append(rows.request_id)
            times.append(rows.arrival_s)
            prompts.append(rows.prompt_tokens)
        ids = np.concatenate(ids)
        order = np.argsort(ids)
        np.testing.assert_array_equal(ids[order], np.arange(first_id, first_id + len(d)))
        np.testing.assert_array_equal(np.concatenate(times)[order], d.arrival_s)
        np.testing.assert_array_equal(np.concatenate(prompts)[order], d.prompt_tokens)
        first_id += len(d)


def test_cells_in_many_windows_keep_every_request_once_at_its_instant(small_windows):
    sc = two_workloads()
    whole, cells = run_scenario(sc), run_cells(sc, 4)
    a = whole.requests.set_index("request_id").sort_index()
    b = cells.requests.set_index("request_id").sort_index()
    assert list(a.index) == list(b.index) == list(range(len(a)))
    for column in ("arrival_at_s", "prompt_tokens", "output_tokens", "workload"):
        np.testing.assert_array_equal(a[column], b[column])


def test_a_streamed_run_never_holds_the_whole_demand(small_windows, monkeypatch):
    """Streaming on, whole and as cells: the demand is only ever drawn window by window
    (drawing it all at once is made to fail), and the run still serves every request."""
    import sim.engine.core as core
    import sim.engine.demand as demand
    import sim.results.tables as tables

    def whole(*_args, **_kwargs):
        raise AssertionError("a streamed run drew the whole demand at once")

    sc = two_workloads()
    sc = sc.model_copy(update={"engine": sc.engine.model_copy(update={"stream": "on"})})
    n = sum(len(d) for d in generate_demand(sc).values())
    for module in (core, demand, tables):
        for attr in ("generate_demand", "workload_demand"):
            if hasattr(module, attr):
                monkeypatch.setattr(module, attr, whole)
    for results in (run_scenario(sc), run_cells(sc, 2)):
        assert results.streamed
        assert len(pd.read_parquet(results.requests_file)) == n


@pytest.mark.slow
@diff_settings(30)
@given(data=st.data(), chunk=st.sampled_from([1, 2, 3, 7, 64]), feed=st.sampled_from([1, 3, 4096]))
def test_generated_scenarios_serve_the_same_requests_streamed_and_in_memory(tmp_path_factory, data, chunk, feed):
    check_windows(tmp_path_factory, data, chunk, feed)


@diff_settings(10)
@given(data=st.data(), chunk=st.sampled_from([1, 2, 3, 7, 64]), feed=st.sampled_from([1, 3, 4096]))
def test_generated_scenarios_serve_the_same_requests_streamed_and_in_memory_smoke(tmp_path_factory, data, chunk, feed):
    """The fast loop's share of the 40 examples (the slow test draws the rest)."""
    check_windows(tmp_path_factory, data, chunk, feed)


def check_windows(tmp_path_factory, data, chunk, feed) -> None:
    """Whole generated scenarios (every workload kind, traces, bursts, journeys across
    pools), the demand in windows of ``chunk`` expected arrivals, read ``feed`` at a time
    by the arrival feed: a run drawing each window as it reaches it (sink) gives the
    rows the in-memory run gives."""
    raw = data.draw(scenarios(tmp_path_factory.mktemp("windows")))
    squeeze(raw)
    assume(placeable(raw))
    scenario = parse_scenario(raw, "generated")
    with mock.patch.object(chunks, "ARRIVAL_CHUNK", chunk), mock.patch.object(core, "FEED_WINDOW", feed):
        memory = simulate(scenario, 0).requests
        parts = []
        streamed = simulate(scenario, 0, sink=lambda rows, shares: parts.append(rows))
    assert streamed.requests.empty
    got = pd.concat(parts, ignore_index=True) if parts else memory.iloc[:0]
    got = got.sort_values("request_id", kind="stable", ignore_index=True)
    pd.testing.assert_frame_equal(got, memory.reset_index(drop=True), check_categorical=False)
