"""Run a sweep's points on a local process pool, a Dask cluster, or in this process.

Each point is a pure function of its task (:func:`run_point`): the base scenario with
the point's overrides, one fleet, one seed; it returns the point's summary rows (one per
workload) or its error. Points are sent in batches (:func:`batches`: about four tasks
per worker slot), so small points do not pay a scheduling round trip each, and while the
workers start this process runs points itself (:func:`_share_points`), so a Dask or
process-pool run is not slower than a serial one by more than the workers' start-up
takes from this process's CPU. Only the parent process writes files
(each point's file as its batch returns), so Dask workers need no
shared filesystem. Layout of ``--out DIR``::

    points/<point-id>.parquet   one finished point (written atomically as it finishes)
    sweep.yaml                  the sweep file as given
    base-scenario.yaml          the resolved base scenario (defaults and 'set' filled in)
    runs.parquet, runs.csv      one row per point × workload (i.e. per seed)
    sweep.parquet, sweep.csv    one row per (swept values, fleet, workload): mean and 95%
                                confidence interval across seeds (t interval on the log
                                scale, never negative: see :func:`_ci`)
    failures.csv                point id, fleet, seed, overrides, error (may be empty)

A rerun skips points whose file is a complete parquet file (a zero-byte or truncated
file, e.g. from a full disk, is deleted and the point run again); failed points are tried
again. Worker processes ignore Ctrl-C (the parent handles it), die with their parent
(Linux ``PR_SET_PDEATHSIG``) and are terminated when the parent stops early, so a killed
sweep leaves no worker running. ``--dask`` addresses are checked and connected before the
output directory is created.
"""

from __future__ import annotations

import concurrent.futures as cf
import copy
import ctypes
import json
import math
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pandas as pd
from scipy import stats
from tqdm import tqdm

from sim.errors import UserError
from sim.results.export import claim_dir, make_dirs, write_csv, write_file_atomic, write_parquet
from sim.overrides import keep_fleet
from sim.scenario import Scenario, parse_scenario, scenario_to_yaml
from sim.studies.sweep_spec import Point, SweepSpec, set_path

POINTS_DIR = "points"
CI_LEVEL = 0.95
AGG_METRICS = (
    "ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "tpot_p50_s", "tpot_p95_s", "tpot_p99_s",
    "e2e_p50_s", "e2e_p95_s", "e2e_p99_s", "throughput_rps", "goodput_rps", "slo_attainment",
    "cost_per_request_usd", "marginal_cost_per_request_usd", "cost_per_1m_output_tokens_usd",
    "capex_usd", "opex_usd_per_month", "cost_usd_per_hour", "headroom_load_multiplier",
)
FLEET_CONSTANTS = ("kind", "accelerators", "accelerator_count", "nodes", "racks", "it_power_max_kw", "slo_target")


@dataclass(frozen=True)
class PointTask:
    """One point for a worker: the base scenario's document (``base_data``) and, for
    paths to defaulted fields, the base with its defaults (``resolved``)."""

    point: Point
    base_data: dict
    source: str
    headroom: bool = False
    resolved: dict | None = None

    @property
    def dask_key(self) -> str:
        return f"dcsim-point-{self.point.point_id}"


@dataclass
class PointOutcome:
    point_id: str
    rows: pd.DataFrame | None
    error: str = ""


def _cell(value: Any) -> Any:
    """A swept value as a table cell: scalars as they are, lists/maps as JSON text."""
    return value if isinstance(value, (int, float, str, bool)) or value is None else json.dumps(value, sort_keys=True)


def point_scenario(task: PointTask) -> Scenario:
    """The point's scenario: the base document with the point's grid values, its seed
    (unless the grid sets ``seed``) and only its fleet, validated once.

    Raises:
        UserError: a grid path that does not exist; ScenarioError: an invalid combination."""
    point = task.point
    overrides = list(point.overrides)
    if not any(path == "seed" for path, _ in overrides):
        overrides.append(("seed", point.seed))
    data = copy.deepcopy(task.base_data)
    for path, value in overrides:  # before the fleets are cut: a path may index fleets
        try:
            set_path(data, path, value, task.resolved)
        except KeyError as err:
            raise UserError(f"{task.source}: grid field '{path}': {err.args[0]}") from None
    keep_fleet(data, point.fleet)
    shown = ", ".join(f"{p}={v!r}" for p, v in overrides)
    return parse_scenario(data, f"{task.source} [{shown}] fleet {point.fleet}")


def run_point(task: PointTask) -> PointOutcome:
    """Simulate one point (pure: no file I/O). Any error becomes the outcome's message."""
    from sim.results.planner_csv import fleet_workload_rows
    from sim.studies.headroom import headroom_multiplier
    from sim.results.tables import run_scenario

    point = task.point
    try:
        scenario = point_scenario(task)
        rows = fleet_workload_rows(run_scenario(scenario))
        if task.headroom:
            rows["headroom_load_multiplier"] = headroom_multiplier(scenario, point.fleet)
    except Exception as err:  # noqa: BLE001 - a failing point is recorded, not fatal
        return PointOutcome(point.point_id, None, f"{type(err).__name__}: {err}")
    head = {"point_id": point.point_id, **{p: _cell(v) for p, v in point.overrides}, "seed": point.seed,
            "overrides_json": point.overrides_json()}
    for i, (name, value) in enumerate(head.items()):
        rows.insert(i, name, [value] * len(rows))
    return PointOutcome(point.point_id, rows)


# --- executors ----------------------------------------------------------------------

class SerialExecutor:
    """Runs each task in this process when submitted (``--workers 1``)."""

    slots = 1  # tasks that can run at once
    parallel = False  # True: tasks run elsewhere, and this process can work while they start

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def launch(self) -> None:
        """Start the workers if they are not started yet (a local Dask cluster starts in
        the background; spawned processes start at the first task)."""

    def started(self) -> bool:
        """Whether tasks can be submitted without waiting for workers to start."""
        return True

    def submit(self, fn: Callable, arg: Any) -> cf.Future:
        future: cf.Future = cf.Future()
        future.set_result(fn(arg))
        return future

    def as_completed(self, futures) -> Iterator:
        return iter(futures)

    def wait_first(self, futures: set, timeout_s: float | None = None) -> set:
        """The futures of ``futures`` that are done, after waiting for at least one or
        for ``timeout_s`` (then possibly none)."""
        return set(cf.wait(futures, timeout=timeout_s, return_when=cf.FIRST_COMPLETED).done)


def _worker_init() -> None:
    """In each worker: leave Ctrl-C to the parent, and die when the parent dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # pragma: no cover - no prctl in this libc
            pass
        if os.getppid() == 1:  # the parent died before prctl took effect
            os._exit(1)


class ProcessExecutor(SerialExecutor):
    """``concurrent.futures.ProcessPoolExecutor`` (spawned workers, no inherited state)."""

    parallel = True

    def __init__(self, workers: int) -> None:
        self.slots = workers
        self.pool = cf.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                           initializer=_worker_init)

    def __exit__(self, *exc) -> None:
        if exc[0] is not None:  # stopped early (Ctrl-C, SIGTERM, an error): stop the workers now
            for process in list(getattr(self.pool, "_processes", {}).values()):
                process.terminate()
        self.pool.shutdown(wait=exc[0] is None, cancel_futures=True)

    def submit(self, fn, arg):
        return self.pool.submit(fn, arg)

    def as_completed(self, futures):
        return cf.as_completed(futures)


class DaskExecutor(SerialExecutor):
    """A Dask ``distributed.Client``: ``local`` starts a ``LocalCluster`` of ``workers``
    single-threaded processes, in a background thread, at :meth:`launch` or the first
    :meth:`submit` (:meth:`started` says when it is up); otherwise ``address`` is an
    existing scheduler, connected here."""

    parallel = True

    def __init__(self, address: str, workers: int) -> None:
        self.cluster = self.client = None
        self.slots = workers
        self._local = address == "local"
        self._starting: threading.Thread | None = None
        self._start_error: BaseException | None = None
        if self._local:  # distributed itself (~0.3 s to import) waits for the launch
            return
        from distributed import Client

        try:
            self.client = Client(address, timeout="20s")
        except (OSError, TimeoutError) as err:
            raise UserError(f"--dask {address}: cannot connect to a Dask scheduler ({err})") from None
        ship_overlay(self.client)
        self.slots = max(1, sum(self.client.nthreads().values()))

    def _start_local(self, workers: int) -> None:
        from distributed import Client, LocalCluster

        try:
            self.cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                        dashboard_address=None, silence_logs=40)
            self.client = Client(self.cluster)
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
            self._start_error = err

    def launch(self) -> None:
        if self._local and self.client is None and self._starting is None:
            self._starting = threading.Thread(target=self._start_local, args=(self.slots,), daemon=True,
                                              name="dcsim-dask-start")
            self._starting.start()

    def started(self) -> bool:
        if self._starting is not None and not self._starting.is_alive():
            self._starting = None
            if self._start_error is not None:
                raise self._start_error
        return self.client is not None

    def connected(self):
        """The client, once the cluster is up (starts a local one if need be, and waits)."""
        self.launch()
        if self._starting is not None:
            self._starting.join()
            self.started()
        return self.client

    def __exit__(self, *exc) -> None:
        if self._starting is not None:
            self._starting.join()
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()

    def submit(self, fn, arg):
        return self.connected().submit(fn, arg, pure=False, key=arg.dask_key)

    def as_completed(self, futures):
        from distributed import as_completed

        return as_completed(futures)

    def wait_first(self, futures: set, timeout_s: float | None = None) -> set:
        from distributed import wait

        try:
            wait(list(futures), timeout=timeout_s, return_when="FIRST_COMPLETED")
        except TimeoutError:
            pass
        return {f for f in futures if f.done()}


OVERLAY_PLUGIN = "dcsim-catalog-overlay"


def _install_overlay(text: str) -> str:
    """Write a ``--catalog`` overlay's ``text`` to this process's temp directory and name it
    in the environment (:data:`fleets.catalog_io.OVERLAY_ENV`), so default catalog loads
    here apply it; returns the path."""
    import hashlib
    import tempfile

    from fleets.catalog_io import OVERLAY_ENV

    path = Path(tempfile.gettempdir()) / f"dcsim-catalog-overlay-{hashlib.sha256(text.encode()).hexdigest()[:16]}.csv"
    path.write_text(text, encoding="utf-8")
    os.environ[OVERLAY_ENV] = str(path)
    return str(path)


def _drop_overlay() -> None:
    """Stop applying a ``--catalog`` overlay in this process (a module function: a bound
    ``os.environ.pop`` would be pickled with a copy of the environment)."""
    from fleets.catalog_io import OVERLAY_ENV

    os.environ.pop(OVERLAY_ENV, None)


def ship_overlay(client) -> None:
    """Give every worker of a remote Dask cluster, present and future, this process's
    ``--catalog`` overlay: its text, installed by a worker plugin (:func:`_install_overlay`),
    since remote workers share neither this environment nor, necessarily, this filesystem.
    Without an overlay, one that an earlier client left on the workers is removed. Workers
    started by this process (``--dask local``, process pools) inherit the environment."""
    from distributed.diagnostics.plugin import WorkerPlugin

    from fleets.catalog_io import OVERLAY_ENV

    class OverlayPlugin(WorkerPlugin):
        name = OVERLAY_PLUGIN

        def __init__(self, text: str) -> None:
            self.text = text

        def setup(self, worker) -> None:
            _install_overlay(self.text)

    overlay = os.environ.get(OVERLAY_ENV, "")
    if overlay:
        client.register_plugin(OverlayPlugin(Path(overlay).read_text(encoding="utf-8")), name=OVERLAY_PLUGIN)
        return
    try:
        client.unregister_worker_plugin(OVERLAY_PLUGIN)
    except ValueError:  # none registered
        pass
    client.run(_drop_overlay)


DASK_SCHEMES = ("tcp", "tls", "ucx", "ws", "wss", "inproc")


def check_dask_address(address: str) -> None:
    """``local`` or SCHEME://HOST:PORT with a known scheme and a port 1..65535.

    Raises:
        UserError: naming the address and the accepted forms."""
    if address == "local":
        return
    from urllib.parse import urlsplit

    expected = f"expected 'local' or SCHEME://HOST:PORT with SCHEME one of {', '.join(DASK_SCHEMES)}"
    try:
        parts = urlsplit(address)
        port = parts.port
    except ValueError:
        raise UserError(f"--dask {address!r}: not an address; {expected}") from None
    if parts.scheme not in DASK_SCHEMES or not parts.hostname or port is None or port == 0:
        raise UserError(f"--dask {address!r}: not an address; {expected}")


def make_executor(dask: str | None, workers: int | None):
    if dask:
        check_dask_address(dask)
        return DaskExecutor(dask, workers or 2)
    workers = workers or os.cpu_count() or 1
    return SerialExecutor() if workers == 1 else ProcessExecutor(workers)


# --- running ------------------------------------------------------------------------

@dataclass
class SweepReport:
    out_dir: Path
    total: int
    skipped: int
    ran: int
    failures: pd.DataFrame
    wall_s: float
    table: pd.DataFrame = field(default_factory=pd.DataFrame)


def point_path(out_dir: Path, point_id: str) -> Path:
    return out_dir / POINTS_DIR / f"{point_id}.parquet"


def run_sweep(spec: SweepSpec, out_dir: str | Path, *, workers: int | None = None, dask: str | None = None,
              headroom: bool = False) -> SweepReport:
    """Run the points of ``spec`` not yet in ``out_dir`` and write the tables."""
    out_dir = Path(out_dir).absolute()
    if dask:
        check_dask_address(dask)
    todo = [p for p in spec.points if not _point_done(point_path(out_dir, p.point_id))]
    if headroom:  # points finished without headroom are redone
        todo += [p for p in spec.points if p not in todo and _lacks_headroom(out_dir, p)]
    started = time.perf_counter()
    with make_executor(dask, workers) if todo else SerialExecutor() as executor:
        _prepare_dir(out_dir, spec)
        errors = _run_points(spec, todo, out_dir, executor, headroom)
    wall = time.perf_counter() - started
    runs = collect_runs(spec, out_dir)
    failures = _failures(spec, errors, runs)
    table = aggregate(runs, spec.swept_fields)
    _write_tables(out_dir, runs, table, failures)
    return SweepReport(out_dir, len(spec.points), len(spec.points) - len(todo), len(todo), failures, wall, table)


def _point_done(path: Path) -> bool:
    """A complete parquet file (PAR1 magic at both ends); a zero-byte or truncated one
    (full disk, killed mid-write by an older version) is deleted so the point runs again."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(4)
            handle.seek(max(size - 4, 0))
            tail = handle.read(4)
    except FileNotFoundError:
        return False
    except OSError as err:
        raise UserError(f"{path}: cannot read this point file ({err.strerror})") from None
    if size >= 12 and head == tail == b"PAR1":
        return True
    path.unlink(missing_ok=True)
    return False


def _prepare_dir(out_dir: Path, spec: SweepSpec) -> None:
    """Create ``out_dir`` (checked by :func:`sim.results.outputs.output_dir` before),
    mark it as dcsim's, clear temporary leftovers and write the sweep and base files."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--out {out_dir}: exists and is not a directory")
    claim_dir(out_dir, "sweep")
    try:
        make_dirs(out_dir / POINTS_DIR)
    except OSError as err:
        raise UserError(f"--out {out_dir}: cannot create it ({err.strerror})") from None
    for leftover in (out_dir / POINTS_DIR).glob(".*.tmp-*"):
        leftover.unlink(missing_ok=True)
    write_file_atomic(out_dir / "sweep.yaml", lambda p: p.write_text(spec.text, encoding="utf-8"))
    write_file_atomic(out_dir / "base-scenario.yaml", lambda p: p.write_text(scenario_to_yaml(spec.base), encoding="utf-8"))


def _lacks_headroom(out_dir: Path, point: Point) -> bool:
    path = point_path(out_dir, point.point_id)
    return path.exists() and "headroom_load_multiplier" not in pd.read_parquet(path).columns


def progress_bar(total: int, file=None) -> tqdm:
    """The sweep's progress line on stderr (off when it is not a terminal, unless ``file``
    is given): "sweep: 1/48 done, 0 failed [..]" once :func:`count_failed` has run."""
    file = file or sys.stderr
    return tqdm(total=total, desc="sweep", unit="pt", file=file, disable=file is sys.stderr and not file.isatty(),
                dynamic_ncols=True, bar_format="{desc}: {n}/{total} done{postfix} [{elapsed}<{remaining}]")


def count_failed(bar: tqdm, failed: int) -> None:
    """Show ``failed`` on ``bar`` (tqdm puts the ", " before a postfix itself)."""
    bar.set_postfix_str(f"{failed} failed", refresh=False)


def _run_points(spec: SweepSpec, todo: list[Point], out_dir: Path, executor, headroom) -> dict[str, str]:
    errors: dict[str, str] = {}
    if not todo:
        return errors
    bar = progress_bar(len(todo))
    def record(outcomes: list[PointOutcome]) -> None:
        for outcome in outcomes:
            if outcome.rows is None:
                errors[outcome.point_id] = outcome.error
            else:
                write_file_atomic(point_path(out_dir, outcome.point_id),
                                  lambda p, r=outcome.rows: write_parquet(r, p), cleanup=False)
            count_failed(bar, len(errors))
            bar.update(1)

    with bar:
        tasks = [PointTask(p, spec.base_data, spec.source, headroom, spec.resolved) for p in todo]
        if not executor.parallel:
            for future in executor.as_completed([executor.submit(run_batch, b) for b in batches(tasks, 1)]):
                record(future.result())
        else:
            _share_points(tasks, executor, record)
    return errors


class WarmUp:
    """A first task per worker slot: imports what a point needs, so a worker that
    answers it is ready to run points."""

    def __init__(self, slot: int) -> None:
        self.slot = slot
        self.dask_key = f"dcsim-warm-up-{os.getpid()}-{time.monotonic_ns()}-{slot}"


def warm_up(_task: WarmUp) -> int:
    """Import the modules :func:`run_point` uses; returns this worker's pid."""
    import sim.results.planner_csv  # noqa: F401
    import sim.results.tables  # noqa: F401
    import sim.studies.headroom  # noqa: F401

    return os.getpid()


POLL_S = 0.05
"""How often the sweep's own process looks for returned results while it waits."""
WORKER_START_S = 2.0
"""About how long workers take to start and answer (measured on the 2-core development
machine, 2026-11-24: two spawned processes ~1.3 s, a ``LocalCluster`` of two ~2.1 s)."""


def _worth_launching(elapsed_s: float, done_here: int, pending: int) -> bool:
    """Start the workers once the points still pending would take this process longer
    than :data:`WORKER_START_S` (at the mean time of the points it ran), or once its
    first point has run that long (big points)."""
    if done_here == 0:
        return elapsed_s > WORKER_START_S
    return pending * elapsed_s / done_here > WORKER_START_S


def _share_points(tasks: list[PointTask], executor, record: Callable[[list[PointOutcome]], None]) -> None:
    """Run ``tasks`` on a parallel ``executor``, this process working too until the
    workers are up.

    Starting workers costs seconds (:data:`WORKER_START_S`: importing numpy, pandas and
    the simulator in each), as long as a small sweep takes serially. So a thread of this
    process runs points one at a time, in order, from the start. The workers are started
    only when the points still pending would take this process longer than they take to
    start (:func:`_worth_launching`), so a sweep that short simply runs serially. Once a
    worker has answered its warm-up task (:func:`warm_up`), the remaining points go to
    the workers in batches (:func:`batches`, at most two per slot in flight), the thread
    finishes the point it holds, and this process only writes what comes back (all
    files are written by the calling thread). A parallel run is so never much slower
    than a serial one (on a machine with no idle core the workers' start-up still takes
    CPU from this process). Which process ran a point changes nothing in its outcome.
    """
    pending = deque(tasks)
    size = len(batches(tasks, executor.slots)[0].tasks)
    ran_here: queue.SimpleQueue = queue.SimpleQueue()
    ready = threading.Event()
    began, done_here, launched = time.monotonic(), 0, False

    def work_here() -> None:
        while not ready.is_set():
            try:
                task = pending.popleft()
            except IndexError:
                return
            ran_here.put(run_point(task))

    threading.Thread(target=work_here, daemon=True, name="dcsim-sweep-here").start()
    warm: list | None = None
    in_flight: set = set()
    left = len(tasks)
    while left:
        while not ran_here.empty():
            record([ran_here.get()])
            left, done_here = left - 1, done_here + 1
        if not launched and _worth_launching(time.monotonic() - began, done_here, len(pending)):
            executor.launch()
            launched = True
        if launched and warm is None and executor.started():
            warm = [executor.submit(warm_up, WarmUp(slot)) for slot in range(executor.slots)]
        if not ready.is_set() and warm is not None and any(f.done() for f in warm):
            ready.set()
        while ready.is_set() and pending and len(in_flight) < 2 * executor.slots:
            batch = []
            while len(batch) < size:
                try:
                    batch.append(pending.popleft())
                except IndexError:
                    break
            if batch:
                in_flight.add(executor.submit(run_batch, PointBatch(tuple(batch))))
        waiting = in_flight or (set(warm) if warm is not None and not ready.is_set() else set())
        done = set()
        if waiting:
            done = executor.wait_first(waiting, POLL_S)
        else:  # only this process is working: wait for its next point
            try:
                record([ran_here.get(timeout=POLL_S)])
                left, done_here = left - 1, done_here + 1
            except queue.Empty:
                pass
        for future in done & in_flight:
            in_flight.discard(future)
            outcomes = future.result()
            record(outcomes)
            left -= len(outcomes)


BATCHES_PER_SLOT = 4
"""Tasks per worker slot when points are batched: enough to balance uneven points, few
enough that each task's scheduling and transfer cost is spread over several points."""


@dataclass(frozen=True)
class PointBatch:
    """Consecutive points run by one task (one scheduling round trip for all of them)."""

    tasks: tuple[PointTask, ...]

    @property
    def dask_key(self) -> str:
        return f"dcsim-points-{self.tasks[0].point.point_id}-{len(self.tasks)}"


def batches(tasks: list[PointTask], slots: int) -> list[PointBatch]:
    """``tasks`` cut into about ``BATCHES_PER_SLOT × slots`` batches of consecutive points
    (one point per batch when there are fewer points than that); order is kept."""
    size = max(1, math.ceil(len(tasks) / (BATCHES_PER_SLOT * max(1, slots))))
    return [PointBatch(tuple(tasks[i:i + size])) for i in range(0, len(tasks), size)]


def run_batch(batch: PointBatch) -> list[PointOutcome]:
    """Every point of ``batch``, in order (pure: no file I/O)."""
    return [run_point(task) for task in batch.tasks]


def collect_runs(spec: SweepSpec, out_dir: Path) -> pd.DataFrame:
    """Every finished point's rows, in the sweep's point order."""
    frames = [pd.read_parquet(point_path(out_dir, p.point_id)) for p in spec.points
              if point_path(out_dir, p.point_id).exists()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _failures(spec: SweepSpec, errors: dict[str, str], runs: pd.DataFrame) -> pd.DataFrame:
    """Failed points (error) and unstable ones (backlog growing, or requests left after the drain)."""
    rows = []
    unstable = runs[runs["unstable"].astype(bool)] if len(runs) else runs
    for p in spec.points:
        error = errors.get(p.point_id, "")
        if not error and len(unstable):
            bad = unstable[unstable["point_id"] == p.point_id]
            if len(bad):
                reasons = bad.get("unstable_reason", pd.Series("", index=bad.index))
                error = "unstable (backlog growing or requests in flight after the drain): " + ", ".join(
                    f"{w} ({r or 'in_flight_after_drain'}, {n} in flight)"
                    for w, r, n in zip(bad["workload"], reasons, bad["in_flight"]))
        if error:
            rows.append({"point_id": p.point_id, "fleet": p.fleet, "seed": p.seed,
                         "overrides": p.overrides_json(), "error": error})
    return pd.DataFrame(rows, columns=["point_id", "fleet", "seed", "overrides", "error"])


FRACTIONS = ("slo_attainment",)  # bounded to [0, 1]; every other AGG_METRIC is >= 0


def _ci(values: pd.Series, fraction: bool = False) -> tuple[float, float, float]:
    """Mean and 95% confidence interval of the non-NaN ``values`` (NaN CI with one seed).

    The metrics are non-negative (latency, throughput, cost) and a Student t interval
    ``mean ± t·s/√n`` goes below zero with few seeds and a wide spread. When every value
    is positive the interval is built on the log scale instead (delta method:
    ``log x̄ ± t·(s/√n)/x̄``, back-transformed to ``x̄·exp(±t·(s/√n)/x̄)``): it keeps the
    mean inside, is positive, and matches the t interval when the spread is small.
    Fractions (SLO attainment) and series with a zero use the t interval clipped to
    [0, 1] or [0, ∞). Source: Casella & Berger, Statistical Inference (2002), 5.5.4
    (delta method)."""
    v = values.dropna().astype(float)
    n = len(v)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = float(v.mean())
    if n == 1:
        return mean, math.nan, math.nan
    t = float(stats.t.ppf(0.5 + CI_LEVEL / 2, n - 1))
    se = float(v.std(ddof=1)) / math.sqrt(n)
    if not fraction and (v > 0).all():
        factor = math.exp(t * se / mean)
        return mean, mean / factor, mean * factor
    upper = 1.0 if fraction else math.inf
    return mean, max(mean - t * se, 0.0), min(mean + t * se, upper)


def aggregate(runs: pd.DataFrame, fields: list[str]) -> pd.DataFrame:
    """One row per (swept values, fleet, workload): ``seeds``, ``unstable_seeds``, and
    ``<metric>_mean``, ``<metric>_ci95_lo``, ``<metric>_ci95_hi`` for latency
    percentiles, attainment, throughput and costs (CI NaN with one seed)."""
    if runs.empty:
        return pd.DataFrame(columns=[*fields, "fleet", "workload", "seeds"])
    keys = [*fields, "fleet", "workload"]
    out = []
    for key, g in runs.groupby(keys, sort=False, dropna=False):
        row = dict(zip(keys, key))
        row.update({c: g[c].iloc[0] for c in FLEET_CONSTANTS if c in g})
        row["seeds"] = len(g)
        row["unstable_seeds"] = int(g["unstable"].astype(bool).sum())
        for metric in AGG_METRICS:
            if metric in g:
                row[f"{metric}_mean"], row[f"{metric}_ci95_lo"], row[f"{metric}_ci95_hi"] = _ci(g[metric], metric in FRACTIONS)
        out.append(row)
    return pd.DataFrame(out)


def _write_tables(out_dir: Path, runs: pd.DataFrame, table: pd.DataFrame, failures: pd.DataFrame) -> None:
    for name, df in (("runs", runs), ("sweep", table)):
        write_file_atomic(out_dir / f"{name}.parquet", lambda p, d=df: write_parquet(d, p))
        write_file_atomic(out_dir / f"{name}.csv", lambda p, d=df: write_csv(d, p))
    write_file_atomic(out_dir / "failures.csv", lambda p: write_csv(failures, p))
