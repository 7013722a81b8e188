"""A failing point is recorded and the sweep goes on; --strict makes it an exit 1; a bad
path or value in the sweep file is a user error (exit 2) before anything runs."""

from __future__ import annotations

import pandas as pd
import pytest
from sweep_cases import run_cli, write_sweep

from sim.errors import UserError
from sim.studies.sweep_spec import load_sweep, set_path

INFEASIBLE = {"fleets.h100.pools.chat.tp": [1, 16]}  # tp 16 > the H100's 8-GPU NVLink domain


def test_infeasible_point_is_recorded_and_sweep_exits_0(tmp_path):
    sweep = write_sweep(tmp_path, INFEASIBLE, seeds=1)
    out = tmp_path / "out"
    done = run_cli("sweep", sweep, "--out", out, "--workers", "2")
    assert done.returncode == 0, done.stderr
    assert "1 point(s) failed" in done.stderr and "PlacementError" in done.stderr
    failures = pd.read_csv(out / "failures.csv")
    assert list(failures.columns) == ["point_id", "fleet", "seed", "overrides", "error"]
    assert len(failures) == 1
    row = failures.iloc[0]
    assert row["fleet"] == "h100" and '"fleets.h100.pools.chat.tp": 16' in row["overrides"]
    assert "tp" in row["error"] and "PlacementError" in row["error"]
    table = pd.read_parquet(out / "sweep.parquet")
    # 2 tp values x 2 fleets = 4 points, one failed: 3 rows (one workload)
    assert len(table) == 3
    assert not ((table["fleets.h100.pools.chat.tp"] == 16) & (table["fleet"] == "h100")).any()
    assert len(list((out / "points").glob("*.parquet"))) == 3
    # the result table on stdout: one row per table row, under its header
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["tp", "fleet", "workload"] and "Pareto" in lines[0]
    assert len([line for line in lines[2:] if " chat " in line]) == 3


def test_strict_exits_1_on_a_failed_point(tmp_path):
    sweep = write_sweep(tmp_path, INFEASIBLE, seeds=1, fleets=["h100"])
    done = run_cli("sweep", sweep, "--out", tmp_path / "out", "--workers", "1", "--strict")
    assert done.returncode == 1, done.stderr
    assert "1 point(s) failed" in done.stderr


@pytest.mark.parametrize(
    "grid, words",
    [
        ({"workloads.chat.arrival.rate_per_sec": [1]}, ["workloads.chat.arrival.rate_per_sec", "rate_per_sec", "rate_per_s"]),
        pytest.param({"fleets.a100.pools.chat.replicas": [1]}, ["fleets.a100.pools.chat.replicas", "a100", "h100"],
                     marks=pytest.mark.slow),  # each case runs the CLI once
        pytest.param({"workloads.chat.arrival.rate_per_s": [2, -1]}, ["workloads.chat.arrival.rate_per_s", "-1"],
                     marks=pytest.mark.slow),
        pytest.param({"economics.pue": []}, ["economics.pue", "non-empty list"], marks=pytest.mark.slow),
    ],
)
def test_bad_grid_is_a_user_error_naming_path_and_value(tmp_path, grid, words):
    sweep = write_sweep(tmp_path, grid, seeds=1)
    with pytest.raises(UserError) as err:
        load_sweep(sweep)
    for word in words:
        assert word in str(err.value)
    done = run_cli("sweep", sweep, "--out", tmp_path / "out")
    assert done.returncode == 2 and done.stderr.startswith("dcsim: error:"), done.stderr
    assert "Traceback" not in done.stderr


def test_points_are_stable_and_distinct(tmp_path):
    sweep = write_sweep(tmp_path, {"workloads.chat.arrival.rate_per_s": [2, 4], "economics.pue": [1.2, 1.5]})
    a, b = load_sweep(sweep), load_sweep(sweep)
    assert len(a.points) == 2 * 2 * 2 * 2
    assert [p.point_id for p in a.points] == [p.point_id for p in b.points]
    assert len({p.point_id for p in a.points}) == len(a.points)
    assert a.seeds == [5, 6]


def test_set_path_by_name_and_index():
    data = {"fleets": [{"name": "x", "pools": [{"name": "p", "tp": 1}]}]}
    set_path(data, "fleets.x.pools.0.tp", 4)
    assert data["fleets"][0]["pools"][0]["tp"] == 4
    with pytest.raises(KeyError):
        set_path(data, "fleets.y.pools.0.tp", 2)
