"""Streaming runs (sim/results/streaming.py) against the in-memory path on the same scenario.

Independent truth: the in-memory path keeps every row and computes the summary with
pandas (sim/results/metrics.py); streaming never holds the rows and folds batches into
counts, sums and DDSketches. Every non-quantile summary column must agree (counts
exactly, float sums to 1e-9 relative: another summation order), the request rows must
be the same rows, and each streamed quantile must lie within the sketch's relative
accuracy α of the order statistic of rank ⌊q·(n−1)⌋ of the in-memory rows (numpy).
Batches are made small (CHUNK_ROWS patched) so every run crosses many of them, and so are
the demand's windows (ARRIVAL_CHUNK patched): the in-memory run holds the windows
concatenated, the streamed run draws them one by one as it reaches them, so the feed's
window changes and ids are checked too. Cell runs (sim/studies/cells.py) are checked the
same way: streamed cells (each drawing its share window by window) against in-memory
cells.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

import sim.engine.outcomes as outcomes
import traffic.chunks as chunks
from sim.errors import UserError
from sim.results.export import write_results
from sim.engine.runner import STREAM_AUTO_REQUESTS
from sim.results.summary import SKETCH_RELATIVE_ACCURACY, _keys, add_values, new_sketch, sketch_percentile
from sim.results.tables import run_scenario
from sim.scenario import load_scenario
from tests.scenario_cases import ar_pool, make_scenario

ALPHA = SKETCH_RELATIVE_ACCURACY
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
QUANTILE_COLUMNS = {f"{m}_p{p}_s": (m, p) for m in ("ttft", "tpot", "e2e", "queue") for p in (50, 95, 99)}
QUANTILE_COLUMNS["tokens_per_s_per_request_p50"] = ("tokens_per_s", 50)


@pytest.fixture(autouse=True)
def small_batches(monkeypatch):
    monkeypatch.setattr(outcomes, "CHUNK_ROWS", 97)
    monkeypatch.setattr(chunks, "ARRIVAL_CHUNK", 61)  # the demand is drawn in many windows


def _with_stream(scenario, mode: str):
    return scenario.model_copy(update={"engine": scenario.engine.model_copy(update={"stream": mode})})


def _both(scenario):
    memory = run_scenario(_with_stream(scenario, "off"))
    streamed = run_scenario(_with_stream(scenario, "on"))
    assert not memory.streamed and streamed.streamed
    return memory, streamed


def _truth(rows: pd.DataFrame, metric: str, censored: bool, end_s: float) -> np.ndarray:
    """The values a quantile column covers, from the in-memory rows (module docstring of
    sim/results/metrics.py: completed measured requests; unstable runs add the time the
    unfinished ones had waited at the end, for TTFT only on TTFT kinds)."""
    g = rows[rows["measured"]]
    done = g[g["status"] == "completed"]
    values = done[f"{metric}_s" if metric != "tokens_per_s" else metric].dropna().to_numpy()
    open_ = g[g["status"] == "in_flight"]
    if censored and metric in ("ttft", "e2e") and len(open_):
        waited = end_s - open_["arrival_at_s"].to_numpy()
        if metric == "ttft":
            keep = open_["kind"].isin(["autoregressive", "diffusion_lm"]).to_numpy()
            waited = np.where(open_["ttft_s"].notna(), open_["ttft_s"], waited)[keep]
        values = np.concatenate([values, waited])
    return np.sort(values)


def assert_same_summary(memory, streamed) -> None:
    a, b = memory.summary, streamed.summary
    assert list(a.columns) == list(b.columns)
    assert len(a) == len(b)
    for column in a.columns:
        x, y = a[column], b[column]
        if column in QUANTILE_COLUMNS:
            continue
        if pd.api.types.is_float_dtype(x) or pd.api.types.is_float_dtype(y):
            np.testing.assert_allclose(y.to_numpy(float), x.to_numpy(float), rtol=1e-9, atol=1e-12,
                                       err_msg=column)
        else:
            assert x.tolist() == y.tolist(), column
    for i, row in a.iterrows():
        rows = memory.requests[(memory.requests["fleet"] == row["fleet"]) &
                               (memory.requests["workload"] == row["workload"])]
        for column, (metric, p) in QUANTILE_COLUMNS.items():
            if column not in a.columns:
                continue
            got = b.at[i, column]
            if metric == "queue" and (row["kind"] != "image_diffusion" or row["unstable"]):
                assert math.isnan(got) == math.isnan(row[column]), column
                continue
            censored = bool(row["tails_lower_bound"]) and metric != "tokens_per_s"
            values = _truth(rows, metric, censored, memory.end_s[row["fleet"]])
            if not len(values):
                assert math.isnan(got) and math.isnan(row[column]), column
                continue
            want = float(np.percentile(values, p))
            assert abs(got - want) <= ALPHA * want + 1e-12, (column, got, want)
            assert abs(row[column] - want) <= 1e-9 * want, column  # the in-memory path is numpy's


def assert_same_rows(memory, streamed) -> None:
    file_rows = pd.read_parquet(streamed.requests_file)
    assert len(file_rows) == len(memory.requests)
    assert streamed.requests.empty and list(streamed.requests.columns) == list(memory.requests.columns)
    key = ["fleet", "request_id"]
    got = file_rows.sort_values(key, kind="stable", ignore_index=True)
    want = memory.requests.sort_values(key, kind="stable", ignore_index=True)
    for frame in (got, want):
        frame["workload"] = frame["workload"].astype(str)
    pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-12)


def _chat(rate: float, replicas: int, **extra):
    workloads = {"chat": {"kind": "autoregressive", "model": "llama-3-8b",
                          "arrival": {"kind": "poisson", "rate_per_s": rate},
                          "prompt_tokens": {"kind": "lognormal", "median": 800, "sigma": 0.8},
                          "output_tokens": {"kind": "lognormal", "median": 200, "sigma": 0.8},
                          "slo": {"ttft_s": 0.5, "tpot_s": 0.05, "e2e_s": 20.0}}}
    return make_scenario(workloads, [ar_pool(replicas=replicas, max_batch=16)], **extra)


@pytest.mark.slow  # default.yaml for 120 s, twice
def test_streamed_summary_and_rows_match_in_memory_on_a_two_fleet_scenario():
    """default.yaml's fleets (shortened): exact columns equal, tails within α, same rows."""
    scenario = load_scenario(os.path.join(REPO, "scenarios", "default.yaml"))
    scenario = scenario.model_copy(update={"duration_s": 120.0, "warmup_s": 20.0})
    memory, streamed = _both(scenario)
    assert len(memory.requests) > 1000
    assert_same_summary(memory, streamed)
    assert_same_rows(memory, streamed)
    pd.testing.assert_frame_equal(memory.pools, streamed.pools, check_exact=False, rtol=1e-9)
    pd.testing.assert_frame_equal(memory.fleets, streamed.fleets, check_exact=False, rtol=1e-9)


def test_streamed_journeys_across_pools_cost_the_same():
    """Branching search with a verifier pool: requests hold several pools (pool-share
    rows), and one fleet prices rent on TPU differently: costs from the accumulated
    replica-seconds per pool equal the per-request attribution."""
    scenario = load_scenario(os.path.join(REPO, "scenarios", "search-verifier.yaml"))
    scenario = scenario.model_copy(update={"duration_s": 120.0, "warmup_s": 10.0})
    memory, streamed = _both(scenario)
    assert memory.requests["handoffs"].sum() > 0
    assert_same_summary(memory, streamed)
    assert_same_rows(memory, streamed)


def test_unstable_run_censors_the_same_in_flight_requests():
    """An overloaded pool with no drain: requests still in flight at the end enter the
    TTFT/E2E tails with the time they had waited, in both paths."""
    scenario = _chat(40.0, 1, duration_s=60.0, warmup_s=5.0, drain_s=0.0)
    memory, streamed = _both(scenario)
    assert memory.summary["in_flight"].iloc[0] > 0 and memory.summary["unstable"].iloc[0]
    assert_same_summary(memory, streamed)
    assert_same_rows(memory, streamed)


def test_streamed_requests_file_is_byte_identical_for_the_same_seed(tmp_path):
    scenario = _with_stream(_chat(8.0, 2, duration_s=60.0), "on")
    first, second = tmp_path / "a", tmp_path / "b"
    write_results(run_scenario(scenario), first)
    write_results(run_scenario(scenario), second)
    for name in ("requests.parquet", "summary.csv", "pools.csv"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert len(pd.read_parquet(first / "requests.parquet")) > 300


def test_auto_streams_only_above_the_threshold(monkeypatch):
    """``engine.stream: auto``: a run whose demand is one request above the threshold
    streams, one at the threshold does not (threshold moved to this run's demand)."""
    import sim.engine.runner as runner
    from sim.engine.demand import generate_demand

    scenario = _chat(2.0, 1, duration_s=30.0)
    assert scenario.engine.stream == "auto"
    n = sum(len(d) for d in generate_demand(scenario).values())
    monkeypatch.setattr(runner, "STREAM_AUTO_REQUESTS", n - 1)
    assert run_scenario(scenario).streamed
    monkeypatch.setattr(runner, "STREAM_AUTO_REQUESTS", n)
    assert not run_scenario(scenario).streamed


def test_docs_state_the_auto_threshold():
    page = open(os.path.join(REPO, "docs", "scale.md"), encoding="utf-8").read()
    assert f"stream above {STREAM_AUTO_REQUESTS:,} requests" in page


def test_bulk_sketch_add_equals_one_by_one():
    """add_values groups values by bucket: the sketch must answer exactly as with
    DDSketch.add of each value (second implementation: the library's own add)."""
    rng = np.random.default_rng(3)
    mapping = new_sketch()._mapping
    edges = [mapping._pow_gamma(k) * f for k in range(-300, 300, 7) for f in (1.0, 1 - 1e-15, 1 + 1e-15)]  # bucket edges
    values = np.concatenate([rng.lognormal(0.0, 2.0, 20_000), [0.0, 0.0, 1e-12], edges])
    bulk, single = new_sketch(), new_sketch()
    add_values(bulk, values)
    for v in values:
        single.add(float(v))
    assert np.array_equal(_keys(mapping, values[values > mapping.min_possible]),
                          [mapping.key(v) for v in values[values > mapping.min_possible]])
    for q in (0.0, 0.01, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0):
        assert bulk.get_quantile_value(q) == single.get_quantile_value(q)
    assert bulk.count == single.count == len(values)


def test_sketch_quantiles_within_relative_accuracy_of_order_statistics():
    rng = np.random.default_rng(5)
    values = rng.lognormal(-2.0, 1.5, 20_000)
    sketch = new_sketch()
    add_values(sketch, values)
    ordered = np.sort(values)
    for p in (50, 90, 95, 99, 99.9):
        rank = ordered[int(math.floor(p / 100 * (len(values) - 1)))]
        assert abs(sketch.get_quantile_value(p / 100) - rank) <= ALPHA * rank
        want = np.percentile(values, p)
        assert abs(sketch_percentile(sketch, p) - want) <= ALPHA * want
    few = new_sketch()  # two values far apart: the interpolation, not the nearest sample
    add_values(few, np.array([1.0, 100.0]))
    assert abs(sketch_percentile(few, 50) - 50.5) <= ALPHA * 50.5
    assert math.isnan(sketch_percentile(new_sketch(), 99))


def test_streamed_cells_equal_in_memory_cells(tmp_path):
    """A 4-cell run streamed (rows to one part per cell on the workers, accumulators
    merged in the client) against the same 4 cells in memory: the summary as for a whole
    run (exact columns equal, quantiles within α of numpy on the in-memory rows), the
    parts together hold exactly the in-memory rows, and pools / time series are the same
    frames. Two workloads on two pools, so accumulators merge per workload."""
    from sim.studies.cells import run_cells

    workloads = {name: {"kind": "autoregressive", "model": "llama-3-8b",
                        "arrival": {"kind": "poisson", "rate_per_s": rate},
                        "prompt_tokens": {"kind": "lognormal", "median": 600, "sigma": 0.8},
                        "output_tokens": {"kind": "lognormal", "median": 150, "sigma": 0.8},
                        "slo": {"ttft_s": 0.05, "tpot_s": 0.05}}
                 for name, rate in (("chat", 14.0), ("batch", 5.0))}
    pools = [ar_pool(name="chat", serves=["chat"], replicas=4, max_batch=16),
             ar_pool(name="batch", serves=["batch"], replicas=4, max_batch=16)]
    scenario = make_scenario(workloads, pools, duration_s=60.0, warmup_s=5.0, seed=7)
    memory = run_cells(_with_stream(scenario, "off"), 4)
    streamed = run_cells(_with_stream(scenario, "on"), 4)
    assert not memory.streamed and streamed.streamed
    assert streamed.requests_file.is_dir()
    parts = sorted(p.name for p in streamed.requests_file.iterdir())
    assert parts == [f"part-{c:05d}.parquet" for c in range(4)]
    assert_same_summary(memory, streamed)
    assert_same_rows(memory, streamed)
    for name in ("pools", "timeseries"):
        pd.testing.assert_frame_equal(getattr(memory, name), getattr(streamed, name), check_exact=False, rtol=1e-12)
    assert memory.events == streamed.events and memory.end_s == streamed.end_s
    # the SLO is tight enough that both miss and meet counts are exercised
    assert 0 < streamed.summary["slo_misses"].sum() < streamed.summary["requests"].sum()
    out = write_results(streamed, tmp_path / "out")
    assert sorted(p.name for p in (out / "requests").iterdir()) == parts
    assert (out / "requests").stat().st_mode & 0o777 == 0o755  # a directory others can list
    assert {p.stat().st_mode & 0o777 for p in (out / "requests").iterdir()} == {0o644}
    assert len(pd.read_parquet(out / "requests")) == len(memory.requests)


def test_streamed_cells_of_three_fleets_with_journeys_across_pools():
    """search-verifier.yaml (three fleets; search requests also hold a verifier pool, so
    pool-share rows cross the cell boundary's id mapping) as 2 cells: streamed equals
    in memory, and there is one part per (fleet, cell)."""
    from sim.scenario import parse_scenario
    from sim.studies.cells import run_cells

    data = load_scenario(os.path.join(REPO, "scenarios", "search-verifier.yaml")).model_dump(mode="json")
    data.update(duration_s=60.0, warmup_s=5.0)
    for fleet in data["fleets"]:
        for pool in fleet["pools"]:
            pool["replicas"] = 2 * pool["replicas"] if pool["name"] == "verify" else pool["replicas"]
    scenario = parse_scenario(data, "search-verifier (2 verifiers)")
    memory = run_cells(_with_stream(scenario, "off"), 2)
    streamed = run_cells(_with_stream(scenario, "on"), 2)
    assert memory.requests["handoffs"].sum() > 0 and len(memory.summary) == 3
    assert sorted(p.name for p in streamed.requests_file.iterdir()) == [f"part-{k:05d}.parquet" for k in range(6)]
    assert_same_summary(memory, streamed)
    assert_same_rows(memory, streamed)
    pd.testing.assert_frame_equal(memory.fleets, streamed.fleets, check_exact=False, rtol=1e-9)


@settings(max_examples=6)
@given(rate=st.floats(1.0, 30.0), replicas=st.integers(1, 3), warmup=st.floats(0.0, 10.0),
       drain=st.sampled_from([0.0, 5.0, 600.0]), seed=st.integers(0, 2**16),
       ttft=st.sampled_from([0.05, 0.5, 5.0]))
def test_random_small_scenarios_agree(rate, replicas, warmup, drain, seed, ttft):
    scenario = _chat(rate, replicas, duration_s=40.0, warmup_s=warmup, drain_s=drain, seed=seed)
    scenario = scenario.model_copy(update={"workloads": {"chat": scenario.workloads["chat"].model_copy(
        update={"slo": scenario.workloads["chat"].slo.model_copy(update={"ttft_s": ttft})})}})
    memory, streamed = _both(scenario)
    assert_same_summary(memory, streamed)
    assert_same_rows(memory, streamed)


def test_accumulators_merge_like_one():
    """Two accumulators over alternate rows, merged, give the row one accumulator gives
    over all rows (the sketches' buckets add, so even the quantiles are equal)."""
    from sim.models.economics import cost_rates
    from sim.results.summary import WorkloadAccumulator

    scenario = _chat(10.0, 1, duration_s=60.0, warmup_s=5.0)
    memory = run_scenario(_with_stream(scenario, "off"))
    rows = memory.requests
    shares = pd.DataFrame({"request_id": pd.Series([], dtype="int64"), "pool": pd.Series([], dtype=object),
                           "busy_share_s": pd.Series([], dtype=float)})
    end = memory.end_s["f"]
    rates = cost_rates(memory.pools, end, rows[rows["pool"] != ""].groupby("pool")["busy_share_s"].sum())
    from sim.fleet_plan import run_window

    window, wl = run_window(memory.scenario), memory.scenario.workloads["chat"]
    whole, even, odd = (WorkloadAccumulator(window, "chat", wl, exact=False) for _ in range(3))
    whole.add(rows, shares)
    even.add(rows.iloc[::2], shares)
    odd.add(rows.iloc[1::2], shares)
    even.merge(odd)
    want, got = whole.row("f", end, rates, "own"), even.row("f", end, rates, "own")
    assert list(want) == list(got)
    for column, value in want.items():
        if isinstance(value, float):
            assert got[column] == pytest.approx(value, rel=1e-9, nan_ok=True), column
        else:
            assert got[column] == value, column
    assert want["completed"] > 300
