"""One run spread over many processes: a fleet split into identical cells.

A datacenter is built of cells (pods behind their own routers). :func:`run_cells` splits
every pool of a fleet into ``n`` equal parts (``replicas / n`` replicas each; a pool whose
replica count ``n`` does not divide is refused), gives each cell an independent thinning
of the demand, simulates the cells as separate tasks (in this process, on a process pool
or on Dask workers) and merges them into one :class:`~sim.results.tables.Results`.

**Thinning.** Every request of the scenario's demand (drawn once from the seed, exactly
as a whole run draws it) is sent to cell ``c`` with probability ``1/n``, independently
(a seeded stream per workload, ``SeedSequence([seed, crc32(name), 0xCE11])``, drawn
window by window as the demand is: :class:`sim.engine.demand.CellShare`). Each task
redraws the demand from the seed and keeps its own share, so only the scenario travels
to the workers; a streamed cell draws it as its run reaches it.

- For Poisson arrivals the split is exact: independent thinning of a Poisson process of
  rate λ gives ``n`` independent Poisson processes of rate λ/n (Kingman, *Poisson
  Processes*, 1993, §5.1), so the cells are exactly ``n`` independent smaller systems.
- For traces, gamma, MMPP and bursts the thinned streams keep the global timing (a
  burst reaches every cell at the same instant, ``1/n`` of it each); each cell is a
  faithful share of the load but the cells' arrival streams are correlated.

**What cells approximate.** A cell routes only among its own replicas. For
``round_robin`` with a single pool per workload and constant service, and whenever the
load spreads evenly, this is close to one global router; for ``least_outstanding``,
``join_shortest_queue`` and ``central_queue`` a global router pools capacity better, so
cells are pessimistic: e.g. M/M/c behind one central queue versus ``n`` M/M/(c/n) cells,
whose mean waits follow Erlang C for c and for c/n servers respectively. The merged
results are exact for the cell-decomposed system; ``n = 1`` is byte-identical to a whole
run.

**Merging.** Request rows are concatenated with their global request ids and replica
indices (cell ``c``'s replica ``r`` of a pool is replica ``c · replicas/n + r``); pool rows
sum every accumulated total (busy seconds, FLOP, bytes, byte·seconds, iterations) and
take the maximum of peaks (``*_peak_*`` columns); time series are carried forward onto
the union of the cells' sample instants, counts summed and memory fractions averaged
(:func:`_merge_series`); events are summed and the end time is the latest cell's. The
latency tails, SLO attainment and costs are then computed from the merged rows exactly
as for a whole run.

**Streaming.** When the run streams (``engine.stream: on``, or ``auto`` above
:data:`sim.engine.runner.STREAM_AUTO_REQUESTS` requests of demand) no request row
reaches the client. Each cell, on its worker, streams its rows (already given their
global ids and replica indices) into a :class:`~sim.results.streaming.FleetStream` in
a directory of its own under the run's spool (``cell-FFF-CCCCC/``) and returns only the
closed stream (per-workload accumulators with their DDSketches, replica-seconds per
pool), its pool rows and its time series. The client merges pools and time series as
above and the streams (:meth:`~sim.results.streaming.FleetStream.merge`), and builds
the summary from the merged accumulators. A second round of tasks, again on the
workers, costs each cell's rows against the merged pool table into
``requests/part-KKKKK.parquet`` (``K = fleet index · cells + cell``, completion order
within a part; a cell with no rows writes no part; the cell's raw files are then
removed); ``Results.requests_file`` is that
``requests/`` directory and ``dcsim run --out`` copies it as ``requests/`` (read it
with ``pandas.read_parquet(directory)``). Every column of the summary equals the
in-memory cell run's (float sums in another order, ~1e-12 relative) except the
quantiles, within the sketch's relative accuracy α = 0.5 %. The spool is a temporary
directory of the client (under ``TMPDIR``): the workers must share its filesystem
(serial, process pool, ``--dask local``, or a cluster whose workers mount the client's
``TMPDIR`` at the same path); a worker that cannot see it fails its cell with a
:class:`~sim.errors.UserError` saying so.
"""

from __future__ import annotations

import copy
import socket
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from sim.engine.core import FleetRun, run_fleet
from sim.engine.demand import CellShare, DemandStream, demand_streams
from sim.engine.runner import use_streaming
from sim.errors import UserError
from sim.fleet_plan import FleetPlan, resolve, resolve_fleet
from sim.models.economics import attribute_costs
from sim.results.metrics import fleet_table
from sim.results.streaming import FleetStream, StreamSpool, spool_errors, write_costed
from sim.results.summary import fleet_summary
from sim.results.tables import Results, assemble_results
from sim.overrides import derive, document, keep_fleet
from sim.scenario import Scenario, parse_scenario

MAX_CELLS = 4096
_PEAK = "_peak_"
_POOL_KEYS = ("fleet", "pool", "accelerator", "model", "family", "precision", "tp", "pp", "ep")


@dataclass(frozen=True)
class CellTask:
    """One cell of one fleet: what a worker needs (the scenario travels as its document,
    :func:`sim.overrides.document`, and is validated once on the worker)."""

    scenario_data: dict
    source: str
    fleet: str
    cells: int
    cell: int
    spool: str | None = None  # streaming: the run's spool directory (module docstring)
    fleet_index: int = 0

    @property
    def dask_key(self) -> str:
        run = "" if self.spool is None else f"-{Path(self.spool).name}"  # a streamed run's own spool
        return f"dcsim-cell-{self.fleet}-{self.cell}-of-{self.cells}{run}"


def check_cells(scenario: Scenario, cells: int) -> None:
    """The one check of ``--cells``: a whole number from 1 to :data:`MAX_CELLS` that
    divides the replicas of every pool of every fleet (cells are identical).

    Raises:
        UserError: naming ``--cells``, the pool and the allowed values."""
    if not isinstance(cells, int) or isinstance(cells, bool) or not 1 <= cells <= MAX_CELLS:
        raise UserError(f"--cells {cells!r}: must be a whole number from 1 to {MAX_CELLS}")
    for fleet in scenario.fleets:
        for pool in fleet.pools:
            if pool.replicas % cells:
                raise UserError(
                    f"--cells {cells}: fleet {fleet.name!r} pool {pool.name!r} has {pool.replicas} replicas, "
                    f"which {cells} cells cannot share equally; allowed: a divisor of every pool's replicas")


def cell_scenario(scenario: Scenario, fleet: str, cells: int) -> Scenario:
    """``scenario`` with only ``fleet``, every pool holding ``replicas / cells`` replicas
    (``cells`` passed :func:`check_cells`), changed in its document and validated once
    (:mod:`sim.overrides`): with ``cells`` 1 it is the fleet exactly as a whole run has it."""
    def change(doc: dict) -> None:
        keep_fleet(doc, fleet)
        for pool in doc["fleets"][0]["pools"]:
            pool["replicas"] //= cells

    return derive(scenario, change, f"{scenario.name} (cell of {cells})")


def cell_demand(scenario: Scenario, cells: int, cell: int) -> dict[str, DemandStream]:
    """Per workload, cell ``cell``'s share of the demand (module docstring, *Thinning*),
    drawn window by window, each request keeping its id in the whole demand."""
    whole = demand_streams(scenario)
    out, first_id = {}, 0
    for name, stream in whole.items():
        out[name] = DemandStream(scenario, name, CellShare(cells, cell, first_id))
        first_id += len(stream)
    return out


def run_cell(task: CellTask) -> FleetRun | tuple[FleetRun, FleetStream]:
    """Simulate one cell; its rows carry global request ids and replica indices.

    Returns the cell's FleetRun; when ``task.spool`` is set (streaming), the rows go to
    files in the cell's own directory under it, the demand is drawn as the run reaches
    it, and (run with empty requests, closed stream) is returned instead."""
    scenario = parse_scenario(task.scenario_data, task.source)
    demand = cell_demand(scenario, task.cells, task.cell)
    local = cell_scenario(scenario, task.fleet, task.cells)
    per_cell = {p.name: p.replicas for p in local.fleets[0].pools}

    def globalise(requests: pd.DataFrame, shares: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        requests = requests.copy()
        shift = requests["pool"].map(per_cell).fillna(0).astype(np.int64) * task.cell
        requests["replica"] = np.where(requests["replica"] >= 0, requests["replica"] + shift, requests["replica"])
        return requests, shares

    plan = resolve_fleet(local, 0)
    if task.spool is None:
        run = run_fleet(plan, {n: d.in_memory() for n, d in demand.items()})
        requests, shares = globalise(run.requests, run.pool_shares)
        return FleetRun(run.fleet, requests, run.pools, run.end_s, run.events, run.timeseries, shares,
                        operations=run.operations, capacity=run.capacity)
    if not Path(task.spool).is_dir():
        raise UserError(
            f"cell {task.cell} of fleet {task.fleet!r} (worker host {socket.gethostname()}) cannot see the run's "
            f"spool directory {task.spool}: streamed cells write their rows there, so every worker must mount the "
            f"client's temporary directory at the same path; set TMPDIR on the client to a directory all workers "
            f"share, or run without streaming (engine.stream: off)")
    directory = Path(task.spool) / f"cell-{task.fleet_index:03d}-{task.cell:05d}"
    directory.mkdir()
    stream = FleetStream(plan, directory, rows=scenario.engine.output == "rows")
    run = run_fleet(plan, demand, sink=lambda r, s: stream(*globalise(r, s)))
    stream.close()  # the cell's plan stays on the worker: the client merges onto the whole fleet's
    return FleetRun(run.fleet, run.requests, run.pools, run.end_s, run.events, run.timeseries, run.pool_shares,
                    streamed=True, operations=run.operations, capacity=run.capacity), stream


@dataclass(frozen=True)
class CostTask:
    """The second round of a streamed cell run: cost one cell's rows into its part."""

    stream: FleetStream
    pools: pd.DataFrame
    end_s: float
    ownership: str
    totals: pd.Series
    path: str

    @property
    def dask_key(self) -> str:
        return f"dcsim-cost-{Path(self.path).parent.parent.name}-{Path(self.path).stem}"


def cost_cell(task: CostTask) -> int:
    """Write ``task.stream``'s rows with their cost columns to ``task.path``, then remove
    the cell's raw files (the disk holds the rows about once); returns the rows."""
    n = write_costed(task.stream, task.pools, task.end_s, task.ownership, task.totals, Path(task.path))
    for raw in (task.stream.rows_path, task.stream.shares_path):
        Path(raw).unlink(missing_ok=True)
    return n


def merge_cells(runs: list[FleetRun], plan: FleetPlan) -> FleetRun:
    """One fleet's run from its cells' runs (see module docstring, *Merging*), with the
    whole fleet's ``plan``."""
    requests = pd.concat([r.requests for r in runs], ignore_index=True)
    requests = requests.sort_values("request_id", kind="stable", ignore_index=True)
    pools = pd.concat([r.pools for r in runs], ignore_index=True)
    numeric = [c for c in pools.columns if c not in _POOL_KEYS and pd.api.types.is_numeric_dtype(pools[c])]
    how = {c: ("max" if _PEAK in c else "sum") for c in numeric}
    merged = pools.groupby(list(_POOL_KEYS), sort=False, dropna=False).agg(how).reset_index()
    merged = merged[[c for c in pools.columns if c in merged.columns]]
    series = _merge_series([r.timeseries for r in runs])
    shares = pd.concat([r.pool_shares for r in runs], ignore_index=True)
    if len(shares):
        shares = shares.sort_values(["request_id"], kind="stable", ignore_index=True)
    return FleetRun(runs[0].fleet, requests, merged, max(r.end_s for r in runs), sum(r.events for r in runs),
                    series, shares, plan, operations=merge_operations([r.operations for r in runs]),
                    capacity=_concat_or_none([r.capacity for r in runs]))


def merge_operations(frames: list) -> pd.DataFrame | None:
    """The cells' operations rows (:mod:`sim.engine.operations`) per (fleet, pool): counters,
    replica-seconds, GPU-hours and cost add; None when no pool is operated."""
    frames = [f for f in frames if f is not None]
    if not frames:
        return None
    rows = pd.concat(frames, ignore_index=True)
    return rows.groupby(["fleet", "pool"], sort=False).sum(numeric_only=True).reset_index()[list(rows.columns)]


def _concat_or_none(frames: list) -> pd.DataFrame | None:
    frames = [f for f in frames if f is not None]
    return pd.concat(frames, ignore_index=True) if frames else None


def _merge_series(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The fleet's time series from its cells': each cell's state is carried forward
    (it holds until its next sample; zero before its first) onto the union of the
    cells' sample instants (their grids may be decimated differently), then counts and
    cumulative busy time are summed and memory fractions averaged (cells are equal)."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame()
    columns = list(frames[0].columns)
    values = [c for c in columns if c not in ("fleet", "t_s", "pool")]
    instants = np.unique(np.concatenate([f["t_s"].to_numpy() for f in frames]))
    merged = []
    for pool in frames[0]["pool"].unique():
        per_cell = []
        for f in frames:
            own = f[f["pool"] == pool].set_index("t_s")[values]
            per_cell.append(own.reindex(instants, method="ffill").fillna(0.0))
        total = sum(per_cell)
        for c in values:
            if c.endswith("_fraction"):
                total[c] = total[c] / len(per_cell)
            elif pd.api.types.is_integer_dtype(frames[0][c]):
                total[c] = total[c].round().astype(np.int64)
        total = total.reset_index().rename(columns={"index": "t_s"})
        total.insert(0, "fleet", frames[0]["fleet"].iloc[0])
        total["pool"] = pool
        merged.append(total)
    out = pd.concat(merged, ignore_index=True).sort_values(["t_s"], kind="stable", ignore_index=True)
    return out[columns]


def _streams(scenario: Scenario) -> bool:
    """Whether this cell run streams (:func:`sim.engine.runner.use_streaming` on the
    whole demand; ``auto`` counts it by a pass over the arrivals)."""
    mode = scenario.engine.stream
    if mode != "auto":
        return mode == "on"
    return use_streaming(scenario, sum(len(d) for d in demand_streams(scenario).values()))


def _map(executor, fn, tasks: list) -> list:
    if executor is None:
        return [fn(t) for t in tasks]
    futures = [executor.submit(fn, t) for t in tasks]
    return [f.result() for f in futures]


def run_cells(scenario: Scenario, cells: int, executor=None) -> Results:
    """Every fleet of ``scenario`` run as ``cells`` cells and merged (module docstring);
    streamed (rows in ``Results.requests_file``, a directory of parts) when the
    scenario's ``engine.stream`` says so.

    Args:
        executor: an object with ``submit(fn, task)`` returning futures with
            ``result()`` (see :func:`sim.studies.sweep.make_executor`), or a callable
            returning one as a context manager (``lambda: make_executor(dask, workers)``),
            opened only once ``cells`` is checked (a bad ``--cells`` starts no worker)
            and closed on return; None runs the cells one after another in this
            process. Streaming: its workers must see this process's temporary directory.

    Raises:
        UserError: ``cells`` is not allowed (:func:`check_cells`); a fleet cannot be built.
    """
    check_cells(scenario, cells)  # before any work is sent or any worker started
    resolve(scenario)  # every fleet's placement checked before any worker starts
    with spool_errors():  # a full TMPDIR (streamed cells spool there): a clear error, not a traceback
        if callable(executor) and not hasattr(executor, "submit"):
            with executor() as opened:
                return _run_checked(scenario, cells, opened)
        return _run_checked(scenario, cells, executor)


def _run_checked(scenario: Scenario, cells: int, executor) -> Results:
    data = document(scenario)  # what each worker validates again, exactly
    spool = StreamSpool() if _streams(scenario) else None
    tasks = [CellTask(data, scenario.name, fleet.name, cells, c, None if spool is None else str(spool.path), i)
             for i, fleet in enumerate(scenario.fleets) for c in range(cells)]
    outcomes = _map(executor, run_cell, tasks)
    per_fleet = [outcomes[i * cells:(i + 1) * cells] for i in range(len(scenario.fleets))]
    if spool is None:
        runs = [merge_cells(own, resolve_fleet(scenario, i)) for i, own in enumerate(per_fleet)]
        return assemble_results(scenario, runs)
    return _assemble_streamed_cells(scenario, cells, per_fleet, spool, executor)


def _assemble_streamed_cells(scenario: Scenario, cells: int, per_fleet: list, spool: StreamSpool,
                             executor) -> Results:
    """Merge the streamed cells' runs and streams per fleet, then cost every cell's rows
    into its part file on the workers (module docstring, *Streaming*)."""
    ownership = scenario.economics.ownership
    parts = spool.path / "requests"
    parts.mkdir()
    runs, pools, summary, costs, empty = [], [], [], [], None
    for i, (own, fleet) in enumerate(zip(per_fleet, scenario.fleets)):
        run = merge_cells([r for r, _ in own], resolve_fleet(scenario, i))
        merged = copy.deepcopy(own[0][1])  # cell 0's own stream still goes to its cost task
        for _, stream in own[1:]:
            merged.merge(stream)
        totals = pd.Series(dict(merged.pool_totals), dtype=float)
        table, rows = fleet_summary(run, merged.workloads, totals)
        runs.append(run)
        pools.append(table)
        summary += rows
        costs += [CostTask(stream, table, run.end_s, ownership, totals, str(parts / f"part-{i * cells + c:05d}.parquet"))
                  for c, (_, stream) in enumerate(own)]
        if empty is None:
            empty = attribute_costs(run.requests, table, run.end_s, run.pool_shares, ownership)
    _map(executor, cost_cell, costs)
    pools_df = pd.concat(pools, ignore_index=True)
    summary_df = pd.DataFrame(summary)
    return Results(
        scenario=scenario, requests=empty, pools=pools_df, summary=summary_df,
        fleets=fleet_table(pools_df, summary_df, scenario.economics),
        events={r.fleet: r.events for r in runs}, end_s={r.fleet: r.end_s for r in runs},
        timeseries=pd.concat([r.timeseries for r in runs], ignore_index=True),
        requests_file=parts if scenario.engine.output == "rows" else None, spool=spool,
        operations=_concat_or_none([r.operations for r in runs]), capacity=_concat_or_none([r.capacity for r in runs]),
    )

