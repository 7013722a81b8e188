"""Cells: one fleet split into identical cells, each with an independent thinning of the
demand, run separately and merged.

Independent truth: a single cell is the whole run (byte-identical tables); 4 cells of an
M/M/8 behind central queues are 4 independent M/M/2 queues at a quarter of the rate, so
the merged mean wait follows Erlang C for 2 servers, not for 8 (computed here); the
thinning keeps every request exactly once with the whole run's arrival instant.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from queueing_theory import erlang_c_wait_s
from scenario_cases import make_scenario

from sim.errors import UserError
from sim.results.export import write_results
from sim.results.tables import run_scenario
from sim.studies.cells import run_cells


def mmc(rate: float, servers: int, duration_s: float, seed: int):
    pool = {"name": "servers", "accelerator": "h100-sxm", "serves": ["jobs"], "replicas": servers, "max_batch": 1}
    return make_scenario(
        {"jobs": {"kind": "service_time", "arrival": {"kind": "poisson", "rate_per_s": rate},
                  "service_s": {"kind": "exponential", "mean": 1.0}}},
        [pool], duration_s=duration_s, warmup_s=duration_s * 0.02, seed=seed,
        fleets=[{"name": "mmc", "router": "central_queue", "pools": [pool]}],
    )


def chat(replicas: int = 4, rate: float = 8.0):
    return make_scenario(
        {"chat": {"kind": "autoregressive", "model": "llama-3-8b",
                  "arrival": {"kind": "poisson", "rate_per_s": rate},
                  "prompt_tokens": {"kind": "lognormal", "median": 500, "sigma": 0.8, "max": 4000},
                  "output_tokens": {"kind": "lognormal", "median": 120, "sigma": 0.8, "max": 800}}},
        [{"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": replicas, "tp": 1,
          "max_batch": 32}],
        duration_s=120.0, warmup_s=10.0,
    )


def test_one_cell_is_the_whole_run():
    sc = chat()
    whole, one = run_scenario(sc), run_cells(sc, 1)
    for name in ("requests", "pools", "summary", "fleets", "timeseries"):
        pd.testing.assert_frame_equal(getattr(whole, name), getattr(one, name))
    assert whole.events == one.events and whole.end_s == one.end_s


def test_thinning_keeps_every_request_once_at_its_instant():
    sc = chat()
    whole, cells = run_scenario(sc), run_cells(sc, 4)
    a = whole.requests.set_index("request_id").sort_index()
    b = cells.requests.set_index("request_id").sort_index()
    assert list(a.index) == list(b.index) == list(range(len(a)))
    np.testing.assert_array_equal(a["arrival_at_s"], b["arrival_at_s"])
    np.testing.assert_array_equal(a["prompt_tokens"], b["prompt_tokens"])
    # every cell received a share: replicas 0..3, one per cell, all used
    assert sorted(b["replica"].unique()) == [0, 1, 2, 3]
    assert cells.pools["replicas"].iloc[0] == 4
    # the cells' busy seconds add up to what the merged pool row reports
    assert cells.pools["busy_fraction"].iloc[0] == pytest.approx(
        b["busy_share_s"][b["measured"]].sum() / (4 * 110.0), rel=0.05)


@pytest.mark.slow
def test_four_cells_of_mm8_are_four_mm2_queues():
    rate, servers, cells = 6.0, 8, 4  # utilisation 0.75
    whole_expected = erlang_c_wait_s(rate, 1.0, servers)
    cell_expected = erlang_c_wait_s(rate / cells, 1.0, servers // cells)
    assert cell_expected > 2 * whole_expected  # the decomposition is not free: pooling matters
    waits_whole, waits_cells = [], []
    for seed in (1, 2, 3):
        sc = mmc(rate, servers, 12_000.0, seed)
        for results, out in ((run_scenario(sc), waits_whole), (run_cells(sc, cells), waits_cells)):
            df = results.requests[results.requests["measured"]]
            assert (df["status"] == "completed").all()
            out.append(df["queue_s"].mean())
    assert np.mean(waits_whole) == pytest.approx(whole_expected, rel=0.08)
    assert np.mean(waits_cells) == pytest.approx(cell_expected, rel=0.08)


def test_cells_must_divide_every_pool():
    with pytest.raises(UserError, match=r"pool 'chat' has 4 replicas, which 3 cells cannot share"):
        run_cells(chat(replicas=4), 3)
    with pytest.raises(UserError, match="whole number"):
        run_cells(chat(), 0)


def streamed(sc):
    return sc.model_copy(update={"engine": sc.engine.model_copy(update={"stream": "on"})})


class _ElsewhereExecutor:
    """Runs cell tasks as a worker on another machine would: the client's spool path
    does not exist there."""

    def submit(self, fn, task):
        from concurrent.futures import Future
        from dataclasses import replace

        future = Future()
        try:
            elsewhere = replace(task, spool="/nonexistent/dcsim-spool") if task.spool else task
            future.set_result(fn(elsewhere))
        except Exception as error:  # noqa: BLE001 - handed to the caller as a worker would
            future.set_exception(error)
        return future


def test_streamed_cell_on_a_worker_without_the_spool_says_so():
    with pytest.raises(UserError, match=r"cell 0 of fleet .* cannot see the run's spool directory "
                                        r"/nonexistent/dcsim-spool.*set TMPDIR on the client"):
        run_cells(streamed(chat()), 2, executor=_ElsewhereExecutor())


def output_bytes(results, directory) -> dict[str, bytes]:
    """Every file ``dcsim run --out`` writes for ``results``, by relative path."""
    out = write_results(results, directory)
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_dask_cells_equal_serial_cells(tmp_path):
    """Same seed, same bytes whatever runs the cells: in-memory cells and streamed cells
    (one part per cell, written on the workers), serially and on 2 Dask workers."""
    from sim.studies.sweep import DaskExecutor

    sc = chat(replicas=4, rate=6.0)
    serial, serial_streamed = run_cells(sc, 2), run_cells(streamed(sc), 2)
    with DaskExecutor("local", 2) as executor:
        distributed = run_cells(sc, 2, executor)
        distributed_streamed = run_cells(streamed(sc), 2, executor)
    for name in ("requests", "pools", "summary", "fleets", "timeseries"):
        pd.testing.assert_frame_equal(getattr(serial, name), getattr(distributed, name))
    assert output_bytes(serial, tmp_path / "a") == output_bytes(distributed, tmp_path / "b")
    want = output_bytes(serial_streamed, tmp_path / "c")
    assert sorted(want) == [".dcsim", "fleets.csv", "pools.csv", "requests/part-00000.parquet", "requests/part-00001.parquet",
                            "scenario.yaml", "summary.csv", "timeseries.parquet"]
    assert output_bytes(distributed_streamed, tmp_path / "d") == want


def test_streamed_cells_are_byte_identical_whatever_order_they_finish(tmp_path):
    """Four streamed cells run one after another and on a pool of 4 threads (cells
    finish in any order) write the same bytes; the parts hold every request once."""
    from concurrent.futures import ThreadPoolExecutor

    sc = streamed(chat(replicas=4, rate=6.0))
    serial = run_cells(sc, 4)
    with ThreadPoolExecutor(4) as pool:
        threaded = run_cells(sc, 4, pool)
    want = output_bytes(serial, tmp_path / "a")
    assert output_bytes(threaded, tmp_path / "b") == want
    ids = pd.read_parquet(tmp_path / "a" / "requests")["request_id"]
    assert sorted(ids) == list(range(len(ids))) and len(ids) > 500
    raw = [p for p in serial.spool.path.rglob("*.parquet") if p.parent.name != "requests"]
    assert raw == []  # each cell's uncosted rows are removed once its part is written


def test_merged_time_series_obeys_littles_law():
    """The cells' sampled states, merged onto one grid, give the number in system whose
    time average equals λ·W computed from the merged request rows (Little's law)."""
    sc = chat(replicas=4, rate=6.0).model_copy(update={"sample_interval_s": 0.25})
    results = run_cells(sc, 4)
    req, ts = results.requests, results.timeseries
    lo, hi = 10.0, 120.0
    window = ts[(ts["t_s"] >= lo) & (ts["t_s"] < hi)]
    sampled_l = (window["outstanding"] + window["central_queued"]).mean()
    arrivals = req[(req["arrival_at_s"] >= lo) & (req["arrival_at_s"] < hi)]
    assert (arrivals["status"] == "completed").all()
    lam_w = len(arrivals) / (hi - lo) * arrivals["e2e_s"].mean()
    assert sampled_l == pytest.approx(lam_w, rel=0.08)
    assert window["memory_used_fraction"].between(0, 1).all()


def test_a_cell_keeps_every_per_request_array_aligned():
    """Regression: a cell's thinned demand kept tokens, steps and draws but not a replayed
    image trace's images and CFG, so its requests took the shapes of other requests.
    Expected values: each array indexed by hand at the kept positions."""
    import numpy as np

    from sim.engine.demand import WorkloadDemand

    n = 6
    d = WorkloadDemand(name="img", kind="image_diffusion", arrival_s=np.arange(n, dtype=float),
                       prompt_tokens=np.zeros(n, dtype=np.int64), output_tokens=np.zeros(n, dtype=np.int64),
                       steps=np.array([10, 20, 30, 40, 50, 60]), service_s=np.zeros(n),
                       images=np.array([1, 2, 3, 4, 5, 6]), cfg=np.array([1, 0, 1, 0, -1, 1], dtype=np.int8))
    cell = d.subset(np.array([1, 4, 5]))
    assert cell.arrival_s.tolist() == [1.0, 4.0, 5.0] and cell.steps.tolist() == [20, 50, 60]
    assert cell.images.tolist() == [2, 5, 6] and cell.cfg.tolist() == [0, -1, 1]
    assert cell.draws is None and len(cell) == 3
