"""The same grid gives the same table in this process, on a local process pool and on a
real Dask LocalCluster with two worker processes."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal
from sweep_cases import write_sweep

from sim.studies.sweep import run_sweep
from sim.studies.sweep_spec import load_sweep

GRID = {"workloads.chat.arrival.rate_per_s": [2, 6], "economics.electricity_usd_per_kwh": [0.06, 0.12]}


def _tables(out):
    return pd.read_parquet(out / "runs.parquet"), pd.read_parquet(out / "sweep.parquet")


@pytest.mark.slow
def test_dask_local_cluster_matches_serial(tmp_path):
    spec = load_sweep(write_sweep(tmp_path, GRID, seeds=2))
    serial = run_sweep(spec, tmp_path / "serial", workers=1)
    dask = run_sweep(spec, tmp_path / "dask", workers=2, dask="local")
    assert serial.ran == dask.ran == 16 and serial.failures.empty and dask.failures.empty
    for a, b in zip(_tables(tmp_path / "serial"), _tables(tmp_path / "dask")):
        assert_frame_equal(a, b)
    runs, table = _tables(tmp_path / "dask")
    assert len(runs) == 16 and len(table) == 8  # 4 grid cells x 2 fleets, seeds aggregated
    assert (table["seeds"] == 2).all()
    assert {"ttft_p99_s_mean", "ttft_p99_s_ci95_lo", "ttft_p99_s_ci95_hi", "cost_per_request_usd_mean"} <= set(table)
    ok = table.dropna(subset=["ttft_p99_s_ci95_lo"])
    assert (ok["ttft_p99_s_ci95_lo"] <= ok["ttft_p99_s_mean"]).all()
    assert (ok["ttft_p99_s_mean"] <= ok["ttft_p99_s_ci95_hi"]).all()


def test_process_pool_matches_serial_and_ci_is_log_scale_t(tmp_path):
    from scipy import stats

    spec = load_sweep(write_sweep(tmp_path, {"workloads.chat.arrival.rate_per_s": [3]}, seeds=3, fleets=["b200"]))
    run_sweep(spec, tmp_path / "serial", workers=1)
    run_sweep(spec, tmp_path / "pool", workers=2)
    for a, b in zip(_tables(tmp_path / "serial"), _tables(tmp_path / "pool")):
        assert_frame_equal(a, b)
    runs, table = _tables(tmp_path / "pool")
    x = runs["cost_per_request_usd"]
    half = stats.t.ppf(0.975, 2) * x.std(ddof=1) / 3 ** 0.5
    assert table["cost_per_request_usd_mean"].iloc[0] == pytest.approx(x.mean())
    # t interval on the log scale (delta method): mean · exp(± half / mean)
    assert table["cost_per_request_usd_ci95_hi"].iloc[0] == pytest.approx(x.mean() * math.exp(half / x.mean()))
    assert table["cost_per_request_usd_ci95_lo"].iloc[0] == pytest.approx(x.mean() / math.exp(half / x.mean()))
    assert (tmp_path / "pool" / "base-scenario.yaml").exists() and (tmp_path / "pool" / "sweep.yaml").exists()
