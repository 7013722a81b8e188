"""One run spread over many processes: a fleet split into identical cells.

A datacenter is built of cells (pods behind their own routers). :func:`run_cells` splits
every pool of a fleet into ``n`` equal parts (``replicas / n`` replicas each; a pool whose
replica count ``n`` does not divide is refused), gives each cell an independent thinning
of the demand, simulates the cells as separate tasks (in this process, on a process pool
or on Dask workers) and merges them into one :class:`~sim.results.tables.Results`.

**Thinning.** Every request of the scenario's demand (drawn once from the seed, exactly
as a whole run draws it) is sent to cell ``c`` with probability ``1/n``, independently
(a seeded stream per workload, ``SeedSequence([seed, crc32(name), 0xCE11])``). Each task
redraws the demand from the seed and keeps its own share, so only the scenario travels
to the workers.

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

**Streaming.** Cells merge their in-memory request rows, so a cell run refuses a scenario
that would stream (``engine.stream: on``, or ``auto`` above
:data:`sim.results.streaming.STREAM_AUTO_REQUESTS` requests) with a UserError; set
``engine.stream: off``. (The streaming accumulators and sketches are mergeable, but
merging them across cells is not built.)
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from sim.engine.core import FleetRun, simulate
from sim.engine.demand import WorkloadDemand, generate_demand
from sim.engine.pools import build_pools
from sim.errors import UserError
from sim.results.streaming import STREAM_AUTO_REQUESTS, use_streaming
from sim.results.tables import Results, assemble_results, check_fleets
from sim.scenario import Scenario, parse_scenario

CELL_STREAM = 0xCE11
MAX_CELLS = 4096
_PEAK = "_peak_"
_POOL_KEYS = ("fleet", "pool", "accelerator", "model", "family", "precision", "tp", "pp", "ep")


@dataclass(frozen=True)
class CellTask:
    """One cell of one fleet: what a worker needs (the scenario travels as JSON data)."""

    scenario_data: dict
    source: str
    fleet: str
    cells: int
    cell: int

    @property
    def dask_key(self) -> str:
        return f"dcsim-cell-{self.fleet}-{self.cell}-of-{self.cells}"


def cell_scenario(scenario: Scenario, fleet: str, cells: int) -> Scenario:
    """``scenario`` with only ``fleet``, every pool holding ``replicas / cells`` replicas.

    Raises:
        UserError: ``cells`` is not a positive integer that divides every pool's replicas.
    """
    if not isinstance(cells, int) or isinstance(cells, bool) or not 1 <= cells <= MAX_CELLS:
        raise UserError(f"--cells {cells!r}: must be a whole number from 1 to {MAX_CELLS}")
    data = scenario.model_dump(mode="json")
    data["fleets"] = [f for f in data["fleets"] if f["name"] == fleet]
    for pool in data["fleets"][0]["pools"]:
        if pool["replicas"] % cells:
            raise UserError(
                f"--cells {cells}: fleet {fleet!r} pool {pool['name']!r} has {pool['replicas']} replicas, "
                f"which {cells} cells cannot share equally; allowed: a divisor of every pool's replicas")
        pool["replicas"] //= cells
    return parse_scenario(data, f"{scenario.name} (cell of {cells})")


def cell_masks(scenario: Scenario, demand: dict[str, WorkloadDemand], cells: int) -> dict[str, np.ndarray]:
    """Per workload, the cell (0 … cells−1) of each request: an independent uniform draw
    per request from a stream of its own (see module docstring). Shape (n,), int64."""
    out = {}
    for name, d in demand.items():
        seq = np.random.SeedSequence([scenario.seed, zlib.crc32(name.encode("utf-8")), CELL_STREAM])
        out[name] = np.random.default_rng(seq).integers(0, cells, size=len(d))
    return out


def _thin(d: WorkloadDemand, keep: np.ndarray) -> WorkloadDemand:
    return replace(
        d, arrival_s=d.arrival_s[keep], prompt_tokens=d.prompt_tokens[keep], output_tokens=d.output_tokens[keep],
        steps=d.steps[keep], service_s=d.service_s[keep], draws=None if d.draws is None else d.draws[keep])


def run_cell(task: CellTask) -> FleetRun:
    """Simulate one cell (pure: no file I/O) and give its rows global request ids and
    replica indices."""
    scenario = parse_scenario(task.scenario_data, task.source)
    demand = generate_demand(scenario)
    cells = cell_masks(scenario, demand, task.cells)
    local = cell_scenario(scenario, task.fleet, task.cells)
    kept = {name: np.flatnonzero(cells[name] == task.cell) for name in demand}
    run = simulate(local, task.fleet, demand={n: _thin(d, kept[n]) for n, d in demand.items()})
    global_ids = np.concatenate([kept[n] + offset for n, offset in zip(demand, _offsets(demand))])
    requests = run.requests.copy()
    requests["request_id"] = global_ids[requests["request_id"].to_numpy()]
    per_cell = {p.name: p.replicas for p in local.fleets[0].pools}
    shift = requests["pool"].map(per_cell).fillna(0).astype(np.int64) * task.cell
    requests["replica"] = np.where(requests["replica"] >= 0, requests["replica"] + shift, requests["replica"])
    shares = run.pool_shares.copy()
    if len(shares):
        shares["request_id"] = global_ids[shares["request_id"].to_numpy()]
    return FleetRun(run.fleet, requests, run.pools, run.end_s, run.events, run.timeseries, shares)


def _offsets(demand: dict[str, WorkloadDemand]) -> list[int]:
    sizes = [len(d) for d in demand.values()]
    return [int(x) for x in np.concatenate([[0], np.cumsum(sizes)[:-1]])]


def merge_cells(runs: list[FleetRun], pool_objects: list) -> FleetRun:
    """One fleet's run from its cells' runs (see module docstring, *Merging*)."""
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
                    series, shares, pool_objects)


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


def _refuse_streaming(scenario: Scenario) -> None:
    """Cells are merged from their in-memory request rows; a run that would stream
    (:func:`sim.results.streaming.use_streaming`) is refused rather than held whole."""
    mode = scenario.engine.stream
    if mode == "off":
        return
    total = sum(len(d) for d in generate_demand(scenario).values()) if mode == "auto" else 0
    if use_streaming(scenario, total):
        size = f" ({total:,} requests, more than {STREAM_AUTO_REQUESTS:,})" if mode == "auto" else ""
        raise UserError(
            f"engine.stream: {mode}: this run would stream{size}, but a cell run merges its cells' request "
            f"rows in memory; set engine.stream: off (at most 2,000,000 requests) or run without --cells"
        )


def run_cells(scenario: Scenario, cells: int, executor=None) -> Results:
    """Every fleet of ``scenario`` run as ``cells`` cells and merged (module docstring).

    Args:
        executor: an object with ``submit(fn, task)`` returning futures with
            ``result()`` (see :func:`sim.studies.sweep.make_executor`); None runs the
            cells one after another in this process.

    Raises:
        UserError: ``cells`` does not divide a pool's replicas; a fleet cannot be built;
            the run would stream (``engine.stream``: cells merge in-memory rows).
    """
    check_fleets(scenario)
    _refuse_streaming(scenario)
    data = scenario.model_dump(mode="json")
    tasks = []
    for fleet in scenario.fleets:
        cell_scenario(scenario, fleet.name, cells)  # refuse before any work is sent
        tasks += [CellTask(data, scenario.name, fleet.name, cells, c) for c in range(cells)]
    if executor is None:
        outcomes = [run_cell(t) for t in tasks]
    else:
        futures = [executor.submit(run_cell, t) for t in tasks]
        outcomes = [f.result() for f in futures]
    runs = [merge_cells(outcomes[i * cells:(i + 1) * cells], build_pools(scenario, fleet))
            for i, fleet in enumerate(scenario.fleets)]
    return assemble_results(scenario, runs)
