"""Streaming results: request rows to Parquet in batches, the summary from accumulators.

A large run cannot keep one row per request in memory. With streaming on, the engine
hands its finished requests over in batches (:mod:`sim.engine.outcomes`) and
:class:`FleetStream` for each batch

1. appends the rows to a Parquet file (one row group per batch, completion order), and
2. folds them into one :class:`~sim.results.summary.WorkloadAccumulator` per (fleet,
   workload), the accumulator a run held in memory is summarised by too, with its tails
   in DDSketches.

When every fleet has run, :func:`assemble_streamed` builds the pool rows, costs the rows
in a second pass over the file (one row group at a time: a request's cost needs the
whole run's bill) into the final ``requests.parquet``, and the summary rows from the
accumulators. Memory holds one batch, the accumulators and the sketches, whatever the
request count.

**Identical and approximate columns.** The summary comes from the same accumulator as
an in-memory run's (:mod:`sim.results.summary`), so every column is computed the same
way, except the quantiles, which come from sketches here (within relative accuracy
:data:`~sim.results.summary.SKETCH_RELATIVE_ACCURACY` of the exact ones).

**What streaming does not give.** ``Results.requests`` is an empty table with the request
columns (the rows are in ``Results.requests_file``, in completion order per fleet, not
in request-id order): the latency CDF charts of the HTML report and the dashboard, and
the dashboard's requests download, need the in-memory path.

**Cells.** A cell run (:mod:`sim.studies.cells`) streams each cell on its worker into a
:class:`FleetStream` of its own; the closed stream (accumulators, pool totals, the paths
of its files: :meth:`FleetStream.__getstate__`) goes back to the client, which adds the
cells' streams together (:meth:`FleetStream.merge`: counts and sums add, sketches merge
bucket by bucket) and builds the summary with :func:`sim.results.summary.fleet_summary`. The accumulators
do not depend on how the rows were split, so the streamed cell summary equals the
in-memory cell summary as a streamed whole run equals an in-memory one.
"""

from __future__ import annotations

import errno
import tempfile
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sim.engine.core import FleetRun
from sim.errors import UserError
from sim.models.economics import attribute_costs, cost_rates, held_shares
from sim.results.metrics import fleet_table, pool_table
from sim.fleet_plan import FleetPlan
from sim.results.summary import accumulators, feed, fleet_summary
from sim.scenario import Scenario

class FleetStream:
    """The sink of one fleet's streamed run: raw rows and pool shares to Parquet files in
    ``directory``, accumulators per workload, replica-seconds per pool (for the bills)."""

    def __init__(self, plan: FleetPlan, directory: Path, rows: bool = True) -> None:
        self.fleet = plan.name
        self.keep_rows = rows  # False: summary only (engine.output: summary), no row files
        self.workloads = accumulators(plan, exact=False)
        self.rows_path = directory / f"{len(list(directory.iterdir()))}-rows.parquet"
        self.shares_path = self.rows_path.with_name(self.rows_path.name.replace("-rows", "-shares"))
        self.rows_writer = self.shares_writer = None
        self.batches: list[bool] = []  # per batch: has pool-share rows
        self.pool_totals: Counter = Counter()
        self.rows = 0

    def __call__(self, requests: pd.DataFrame, shares: pd.DataFrame) -> None:
        if self.keep_rows:
            self.rows_writer = _write(self.rows_writer, self.rows_path, requests)
            self.batches.append(bool(len(shares)))
            if len(shares):
                self.shares_writer = _write(self.shares_writer, self.shares_path, shares)
        self.rows += len(requests)
        held = held_shares(requests, shares if len(shares) else None)
        for pool, total in held.groupby("pool", sort=True)["busy_share_s"].sum().items():
            self.pool_totals[pool] += total
        feed(self.workloads, requests, shares)

    def close(self) -> None:
        for writer in (self.rows_writer, self.shares_writer):
            if writer is not None and writer is not _WRITTEN:
                writer.close()

    def __getstate__(self) -> dict:
        """A closed stream travels between processes (a cell's worker hands it to the
        client): its writers stay behind, only whether they wrote anything goes."""
        state = dict(self.__dict__)
        for key in ("rows_writer", "shares_writer"):
            state[key] = None if state[key] is None else _WRITTEN
        return state

    def merge(self, other: "FleetStream") -> None:
        """Add ``other``'s accumulators and pool totals (another cell of the same fleet;
        its files stay where they are)."""
        for name, acc in self.workloads.items():
            acc.merge(other.workloads[name])
        self.pool_totals.update(other.pool_totals)
        self.rows += other.rows

    def costed_batches(self, pools: pd.DataFrame, end_s: float, ownership: str,
                       totals: pd.Series | None = None):
        """The rows again, one batch at a time, with their cost columns (``totals``:
        replica-seconds per pool over the whole fleet; this stream's own if None)."""
        if self.rows_writer is None:
            return
        rows, shares = pq.ParquetFile(self.rows_path), None
        if self.shares_writer is not None:
            shares = pq.ParquetFile(self.shares_path)
        if totals is None:
            totals = pd.Series(dict(self.pool_totals), dtype=float)
        k = 0
        for i, has_shares in enumerate(self.batches):
            batch = rows.read_row_group(i).to_pandas()
            held = None
            if has_shares:
                held = shares.read_row_group(k).to_pandas()
                k += 1
            yield attribute_costs(batch, pools, end_s, held, ownership, totals)


_WRITTEN = "written"  # a writer left behind in another process (FleetStream.__getstate__)


def write_costed(stream: FleetStream, pools: pd.DataFrame, end_s: float, ownership: str,
                 totals: pd.Series, path: Path) -> int:
    """Cost ``stream``'s rows (:meth:`FleetStream.costed_batches`) into a new Parquet
    file ``path``, one row group per batch; nothing is written for a stream without
    rows. Returns the rows written."""
    writer, n = None, 0
    for batch in stream.costed_batches(pools, end_s, ownership, totals):
        writer = _write(writer, path, batch)
        n += len(batch)
    if writer is not None:
        writer.close()
    return n


def _write(writer, path: Path, df: pd.DataFrame):
    table = pa.Table.from_pandas(df, preserve_index=False, schema=writer.schema if writer else None)
    if writer is None:
        writer = pq.ParquetWriter(path, table.schema)
    writer.write_table(table, row_group_size=max(len(table), 1))
    return writer


@contextmanager
def spool_errors() -> Iterator[None]:
    """Turn a failed write to the temporary spool (a full or read-only ``TMPDIR``) into
    a :class:`~sim.errors.UserError` saying where and what to do."""
    try:
        yield
    except OSError as err:
        full = err.errno in (errno.ENOSPC, errno.EDQUOT)
        reason = "it is full" if full else (err.strerror or type(err).__name__)
        raise UserError(f"the temporary directory {tempfile.gettempdir()} cannot hold this run's streamed rows "
                        f"({reason}); set TMPDIR to a directory with free space (nothing was written)") from None


class StreamSpool:
    """Temporary directory holding a streamed run's files (removed with this object).

    Raises:
        UserError: the temporary directory cannot be created (:func:`spool_errors`)."""

    def __init__(self) -> None:
        with spool_errors():
            self._dir = tempfile.TemporaryDirectory(prefix="dcsim-stream-")
        self.path = Path(self._dir.name)

    def cleanup(self) -> None:
        self._dir.cleanup()


def assemble_streamed(scenario: Scenario, runs: list[FleetRun], streams: list[FleetStream], spool: StreamSpool):
    """The tables of a streamed run (module docstring): pool rows, the final costed
    ``requests.parquet`` in ``spool`` and the summary from the accumulators. Returns
    (pools, summary, fleets, requests_file, empty requests frame)."""
    ownership = scenario.economics.ownership
    pools, summary = [], []
    final = spool.path / "requests.parquet"
    writer = None
    empty = None
    for run, stream in zip(runs, streams):
        stream.close()
        totals = pd.Series(dict(stream.pool_totals), dtype=float)
        table, rows = fleet_summary(run, stream.workloads, totals)
        pools.append(table)
        summary += rows
        for batch in stream.costed_batches(table, run.end_s, ownership, totals):
            writer = _write(writer, final, batch)
        if empty is None:
            empty = attribute_costs(run.requests, table, run.end_s, run.pool_shares, ownership)
    if writer is not None:
        writer.close()
    else:  # summary only (engine.output: summary): no request rows were kept
        final = None
    pools_df = pd.concat(pools, ignore_index=True)
    summary_df = pd.DataFrame(summary)
    return pools_df, summary_df, fleet_table(pools_df, summary_df, scenario.economics), final, empty
