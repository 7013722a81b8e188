"""Sweep points are batched per task: every point exactly once, in order, in about four
tasks per worker slot; a batched run writes the same tables as one point per task."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import pytest
from sweep_cases import write_sweep

from sim.studies.sweep import SerialExecutor, batches, run_sweep
from sim.studies.sweep_spec import load_sweep


@dataclass(frozen=True)
class FakePoint:
    point_id: str


@dataclass(frozen=True)
class FakeTask:
    point: FakePoint


@pytest.mark.parametrize("points,slots,expected_sizes", [
    (48, 2, [6] * 8),          # ceil(48 / 8) = 6 points per task
    (3, 2, [1, 1, 1]),         # fewer points than 4 × slots: one each
    (10, 1, [3, 3, 3, 1]),     # ceil(10 / 4) = 3
    (1, 16, [1]),
])
def test_batches_cover_every_point_once_in_order(points, slots, expected_sizes):
    tasks = [FakeTask(FakePoint(f"p{i}")) for i in range(points)]
    cut = batches(tasks, slots)
    assert [len(b.tasks) for b in cut] == expected_sizes
    assert [t for b in cut for t in b.tasks] == tasks
    assert len({b.dask_key for b in cut}) == len(cut)


class OnePointPerTask(SerialExecutor):
    slots = 10_000  # forces batches of one point


@pytest.fixture(scope="module")
def serial_sweep(tmp_path_factory):
    """(spec, runs.csv) of 12 points run in batches by the serial executor: the table
    both tests below compare their runs against (run once for the module)."""
    tmp = tmp_path_factory.mktemp("serial-sweep")
    spec = load_sweep(write_sweep(tmp, {"workloads.chat.arrival.rate_per_s": [2, 3, 4]}, seeds=2))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sim.studies.sweep.make_executor", lambda dask, workers: SerialExecutor())
        run_sweep(spec, tmp / "serial")
    return spec, pd.read_csv(tmp / "serial" / "runs.csv")


def test_batched_and_unbatched_sweeps_write_the_same_tables(tmp_path, monkeypatch, serial_sweep):
    spec, batched = serial_sweep
    monkeypatch.setattr("sim.studies.sweep.make_executor", lambda dask, workers: OnePointPerTask())
    run_sweep(spec, tmp_path / "single")
    pd.testing.assert_frame_equal(batched, pd.read_csv(tmp_path / "single" / "runs.csv"))


class NeverStarts(SerialExecutor):
    """A parallel executor whose workers never come up."""

    parallel, slots = True, 2
    submitted = 0

    def started(self) -> bool:
        return False

    def submit(self, fn, arg):
        NeverStarts.submitted += 1
        return super().submit(fn, arg)


class StartsAtOnce(SerialExecutor):
    """A parallel executor whose 'workers' (this thread) are up as soon as launched:
    every task submitted runs on submission and is remembered."""

    parallel, slots = True, 2

    def __init__(self) -> None:
        self.points = self.launches = 0

    def launch(self) -> None:
        self.launches += 1

    def submit(self, fn, arg):
        self.points += len(getattr(arg, "tasks", ()))
        return super().submit(fn, arg)


@pytest.mark.slow  # ~3 s: in make test, not the one-minute loop
def test_the_sweep_runs_its_points_itself_until_workers_are_worth_it(tmp_path, monkeypatch, serial_sweep):
    """A sweep shorter than the workers' start (12 points of ~0.1 s against a start
    taken as 60 s) launches none and runs serially. Forced to launch (WORKER_START_S =
    0): workers that never start leave every point to the sweep's own process, nothing
    submitted; workers up at once get the points (the first may already be running
    here). The tables are the serial ones every time."""
    import sim.studies.sweep as sweep

    spec, serial = serial_sweep

    def run(name, executor):
        monkeypatch.setattr("sim.studies.sweep.make_executor", lambda dask, workers: executor)
        report = run_sweep(spec, tmp_path / name)
        return report, pd.read_csv(tmp_path / name / "runs.csv")

    monkeypatch.setattr(sweep, "WORKER_START_S", 60.0)
    short = StartsAtOnce()
    _, table = run("short", short)
    assert short.launches == 0 and short.points == 0
    pd.testing.assert_frame_equal(table, serial)
    monkeypatch.setattr(sweep, "WORKER_START_S", 0.0)
    _, table = run("never", NeverStarts())
    assert NeverStarts.submitted == 0
    pd.testing.assert_frame_equal(table, serial)
    at_once = StartsAtOnce()
    report, table = run("at-once", at_once)
    assert at_once.launches == 1
    assert report.total - 2 <= at_once.points <= report.total  # at most the points in flight here before the warm-up
    pd.testing.assert_frame_equal(table, serial)
