"""Kill a sweep part-way, rerun it: only the missing points run, and the final table
equals that of an uninterrupted run."""

from __future__ import annotations

import subprocess
import time

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal
from sweep_cases import REPO, cli_command, cli_env, run_cli, write_sweep

GRID = {"workloads.chat.arrival.rate_per_s": [2, 3, 4, 5, 6, 7]}
SET = {"duration_s": 60}


def _points(out):
    return {p.name: p.stat().st_mtime_ns for p in (out / "points").glob("*.parquet")} if (out / "points").exists() else {}


@pytest.mark.slow  # three sweeps of 24 points through the CLI, one killed part-way
def test_killed_sweep_resumes_only_missing_points(tmp_path):
    sweep = write_sweep(tmp_path, GRID, seeds=2, set_=SET)  # 6 x 2 fleets x 2 seeds = 24 points
    out = tmp_path / "out"
    proc = subprocess.Popen(cli_command("sweep", sweep, "--out", out, "--workers", "1"), cwd=REPO, env=cli_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(_points(out)) < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    before = _points(out)
    assert 3 <= len(before) < 24, f"{len(before)} points existed when killed"
    done = run_cli("sweep", sweep, "--out", out, "--workers", "2")
    assert done.returncode == 0, done.stderr
    assert f"ran {24 - len(before)} point(s), skipped {len(before)} already done" in done.stderr
    after = _points(out)
    assert len(after) == 24
    assert all(after[name] == mtime for name, mtime in before.items())  # old points untouched
    again = run_cli("sweep", sweep, "--out", out)
    assert "ran 0 point(s), skipped 24" in again.stderr
    fresh = tmp_path / "fresh"
    assert run_cli("sweep", sweep, "--out", fresh, "--workers", "2").returncode == 0
    for name in ("runs.parquet", "sweep.parquet"):
        assert_frame_equal(pd.read_parquet(out / name), pd.read_parquet(fresh / name))
    assert (out / "sweep.csv").read_bytes() == (fresh / "sweep.csv").read_bytes()
