"""Streaming results: request rows to Parquet in batches, the summary from accumulators.

A large run cannot keep one row per request in memory. With streaming on, the engine
hands its finished requests over in batches (:mod:`sim.engine.outcomes`) and
:class:`FleetStream` for each batch

1. appends the rows to a Parquet file (one row group per batch, completion order), and
2. folds them into one :class:`WorkloadAccumulator` per (fleet, workload): exact counts
   and sums (requests, completions, rejections by reason, SLO misses by reason,
   goodput, output tokens, replica-seconds held per pool for the costs, hand-offs,
   images, the number-in-system integral behind the backlog trend) and a DDSketch per
   latency metric for the tails.

When every fleet has run, :func:`assemble_streamed` builds the pool rows, costs the rows
in a second pass over the file (one row group at a time: a request's cost needs the
whole run's bill) into the final ``requests.parquet``, and the summary rows from the
accumulators. Memory holds one batch, the accumulators and the sketches, whatever the
request count.

**Identical and approximate columns.** Every summary column is what the in-memory path
(:func:`sim.results.metrics.workload_summary`) computes on the same rows, from the same
counts and sums (floating-point sums in another order: equal to ~1e-12 relative), except
the quantiles (``*_p50_s``, ``*_p95_s``, ``*_p99_s``, ``tokens_per_s_per_request_p50``,
``queue_p*_s``): DDSketch (Masson, Rim & Lee, "DDSketch: a fast and fully-mergeable
quantile sketch with relative-error guarantees", VLDB 2019; the ``ddsketch`` package of
Datadog) returns the sample of any rank within relative accuracy
:data:`SKETCH_RELATIVE_ACCURACY` (α = 0.5 %); :func:`sketch_percentile` interpolates
between the two samples around the percentile's rank as numpy does, so a streamed
quantile is within α of the in-memory one (values are non-negative).

**What streaming does not give.** ``Results.requests`` is an empty table with the request
columns (the rows are in ``Results.requests_file``, in completion order per fleet, not
in request-id order): the latency CDF charts of the HTML report and the dashboard, and
the dashboard's requests download, need the in-memory path.

**Cells.** A cell run (:mod:`sim.studies.cells`) streams each cell on its worker into a
:class:`FleetStream` of its own; the closed stream (accumulators, pool totals, the paths
of its files: :meth:`FleetStream.__getstate__`) goes back to the client, which adds the
cells' streams together (:meth:`FleetStream.merge`: counts and sums add, sketches merge
bucket by bucket) and builds the summary with :func:`fleet_summary`. The accumulators
do not depend on how the rows were split, so the streamed cell summary equals the
in-memory cell summary as a streamed whole run equals an in-memory one.
"""

from __future__ import annotations

import math
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from ddsketch import DDSketch

from sim.engine.core import FleetRun
from sim.models.economics import attribute_costs, cost_rates, held_shares
from sim.results.metrics import (
    MISS_REASONS, PERCENTILES, REJECT_REASONS, TTFT_KINDS, fleet_table, pool_table, _unstable_reason,
)
from sim.results.stability import BATCHES, backlog_trend, interval_area
from sim.scenario import Scenario, fleet_workloads

STREAM_AUTO_REQUESTS = 1_000_000
"""``engine.stream: auto`` streams a run whose demand holds more requests than this."""
SKETCH_RELATIVE_ACCURACY = 0.005
"""α of the DDSketch behind streamed quantiles (relative error of a returned value)."""

_TAIL_METRICS = ("ttft_s", "tpot_s", "e2e_s")
_MEAN_COLUMNS = ("handoffs", "handoff_s", "handoff_wait_s", "sample_steps", "verifier_calls", "images")


def use_streaming(scenario: Scenario, total_requests: int) -> bool:
    """Whether a run of ``total_requests`` requests streams (``engine.stream``: on, off,
    or auto: above :data:`STREAM_AUTO_REQUESTS`)."""
    mode = scenario.engine.stream
    return mode == "on" or (mode == "auto" and total_requests > STREAM_AUTO_REQUESTS)


def new_sketch() -> DDSketch:
    """An empty latency sketch, relative accuracy :data:`SKETCH_RELATIVE_ACCURACY` (values
    in seconds)."""
    return DDSketch(relative_accuracy=SKETCH_RELATIVE_ACCURACY)


def add_values(sketch: DDSketch, values: np.ndarray) -> None:
    """Add ``values`` (non-negative, NaN dropped) to ``sketch`` in bulk: values are grouped
    by the sketch's bucket key and each bucket added once with its count (the bucket's
    representative value, which the sketch maps back to the same bucket), so the sketch
    answers exactly as if every value had been added one by one."""
    values = values[~np.isnan(values)]
    if not len(values):
        return
    mapping = sketch._mapping  # noqa: SLF001 - the sketch's own key mapping
    positive = values[values > mapping.min_possible]
    zeros = len(values) - len(positive)
    if zeros:
        sketch.add(0.0, float(zeros))
    if len(positive):
        keys, counts = np.unique(_keys(mapping, positive), return_counts=True)
        for key, count in zip(keys.tolist(), counts.tolist()):
            sketch.add(mapping.value(key), float(count))


def _keys(mapping, values: np.ndarray) -> np.ndarray:
    """``mapping.key`` of every value, vectorised: ⌈log₂(v)·multiplier⌉ + offset (the
    formula of ddsketch's LogarithmicMapping), with the values whose log lands within
    1e-9 of a bucket edge (where numpy's and libm's last bits could disagree) keyed by
    the library itself."""
    x = np.log(values) / math.log(2) * mapping._multiplier  # noqa: SLF001 - the mapping's own constants
    keys = np.ceil(x) + mapping._offset  # noqa: SLF001
    edge = np.abs(x - np.round(x)) < 1e-9 * np.maximum(1.0, np.abs(x))
    if edge.any():
        keys[edge] = [mapping.key(v) for v in values[edge].tolist()]
    return keys.astype(np.int64)


def _order_statistic(sketch: DDSketch, k: int, n: int) -> float:
    """The sketch's value for the sample of rank ``k`` (0-based) of its ``n`` values: it
    answers quantile q with the sample of rank ⌊q·(n−1)⌋, so ask for rank k + ½."""
    return float(sketch.get_quantile_value(min((k + 0.5) / (n - 1), 1.0) if n > 1 else 0.0))


def sketch_percentile(sketch: DDSketch, p: float) -> float:
    """Percentile ``p`` (0-100) as :func:`numpy.percentile` defines it (linear between
    the samples of rank ⌊r⌋ and ⌊r⌋ + 1, r = p/100·(n−1)), from the sketch's values for
    those two samples. Each is within relative accuracy α of its sample, so for
    non-negative values the result is within α of numpy's percentile of the raw values.
    NaN for an empty sketch."""
    n = int(round(sketch.count))
    if n == 0:
        return math.nan
    rank = p / 100.0 * (n - 1)
    k = int(math.floor(rank))
    low = _order_statistic(sketch, k, n)
    frac = rank - k
    if frac == 0.0 or k + 1 >= n:
        return low
    return low + (_order_statistic(sketch, k + 1, n) - low) * frac


class WorkloadAccumulator:
    """Mergeable per-(fleet, workload) statistics of streamed request rows (module
    docstring). :meth:`add` folds in a batch of the workload's rows; :meth:`merge` adds
    another accumulator of the same workload (e.g. another part of the run)."""

    def __init__(self, scenario: Scenario, name: str) -> None:
        self.scenario, self.name = scenario, name
        self.wl = scenario.workloads[name]
        self.counts: Counter = Counter()
        self.sums: Counter = Counter()
        self.area = np.zeros(BATCHES + 1)
        self.sketches = {m: new_sketch() for m in (*_TAIL_METRICS, "tokens_per_s", "queue_s")}
        self.open_arrival: list[np.ndarray] = []  # measured requests in flight at the end
        self.open_ttft: list[np.ndarray] = []  # their TTFT (NaN: no first token yet; TTFT kinds only)
        self.pool_share_s: Counter = Counter()  # replica-seconds held per pool, completed measured
        self.signatures: Counter = Counter()  # completed measured requests per set of pools held

    def add(self, rows: pd.DataFrame, shares: pd.DataFrame) -> None:
        """Fold in ``rows`` (this workload's request rows of one batch) and ``shares``
        (their pool-share rows, for journeys across pools)."""
        sc, slo, c, s = self.scenario, self.wl.slo, self.counts, self.sums
        status = rows["status"].to_numpy()
        measured = rows["measured"].to_numpy()
        done_all = status == "completed"
        rejected_all = status == "rejected"
        g_done, g_rej, g_open = measured & done_all, measured & rejected_all, measured & (status == "in_flight")
        c["requests"] += int(measured.sum())
        c["completed"] += int(g_done.sum())
        c["in_flight"] += int(g_open.sum())
        c["rejected"] += int(g_rej.sum())
        reasons = rows["reject_reason"].to_numpy()[g_rej]
        for reason in REJECT_REASONS:
            c[f"rejected_{reason}"] += int((reasons == reason).sum())
        # number in system over the window: admitted requests, arrival to completion
        kept = ~rejected_all
        edges = np.linspace(sc.warmup_s, sc.duration_s, BATCHES + 1)
        self.area += interval_area(rows["arrival_at_s"].to_numpy()[kept], rows["done_at_s"].to_numpy()[kept], edges)
        # tails
        done = rows[g_done]
        for metric in _TAIL_METRICS:
            add_values(self.sketches[metric], done[metric].to_numpy(dtype=float))
        add_values(self.sketches["tokens_per_s"], done["tokens_per_s"].to_numpy(dtype=float))
        add_values(self.sketches["queue_s"], done["queue_s"].to_numpy(dtype=float))
        if g_open.any():
            open_ = rows[g_open]
            self.open_arrival.append(open_["arrival_at_s"].to_numpy(dtype=float))
            ttft_kind = open_["kind"].isin(TTFT_KINDS).to_numpy()
            self.open_ttft.append(np.where(ttft_kind, open_["ttft_s"].to_numpy(dtype=float), -1.0))
        # SLO
        meets_done = _meets(done, slo)
        c["meets"] += int(meets_done.sum())
        done_at = rows["done_at_s"].to_numpy()
        served_mask = done_all & (done_at >= sc.warmup_s) & (done_at < sc.duration_s)
        served = rows[served_mask]
        c["served"] += int(served_mask.sum())
        c["served_meets"] += int(_meets(served, slo).sum())
        s["served_output_tokens"] += int(served["output_tokens"].sum())
        left = np.ones(int(measured.sum()), dtype=bool)
        g = rows[measured]
        for reason in MISS_REASONS:
            if reason == "rejected":
                hit = (g["status"] == "rejected").to_numpy()
            elif reason == "unfinished":
                hit = (g["status"] == "in_flight").to_numpy()
            else:
                bound = getattr(slo, f"{reason}_s")
                hit = (g[f"{reason}_s"] > bound).to_numpy() if bound is not None else np.zeros(len(g), dtype=bool)
            hit = hit & left
            c[f"slo_miss_{reason}"] += int(hit.sum())
            left &= ~hit
        # sums over completed measured requests
        s["done_output_tokens"] += int(done["output_tokens"].sum())
        for column in _MEAN_COLUMNS:
            s[column] += done[column].sum()
        self._add_costs(done, shares)

    def _add_costs(self, done: pd.DataFrame, shares: pd.DataFrame) -> None:
        """Replica-seconds held per pool, and how many requests held each set of pools
        (a request's cost is NaN only when every pool it held has no such price)."""
        crossed = shares[shares["request_id"].isin(done["request_id"])] if len(shares) else None
        held = held_shares(done, crossed)
        for pool, share in held.groupby("pool", sort=True)["busy_share_s"].sum().items():
            self.pool_share_s[pool] += share
        several = held["request_id"].duplicated(keep=False).to_numpy()
        for pool, n in held.loc[~several, "pool"].value_counts().items():
            self.signatures[(pool,)] += int(n)
        by_request = held[several].groupby("request_id")["pool"]
        for pools, n in by_request.agg(lambda p: tuple(sorted(set(p)))).value_counts().items():
            self.signatures[pools] += int(n)

    def merge(self, other: "WorkloadAccumulator") -> None:
        """Add ``other`` (same workload, disjoint requests) into this accumulator."""
        self.counts.update(other.counts)
        self.sums.update(other.sums)
        self.area += other.area
        for metric, sketch in self.sketches.items():
            sketch.merge(other.sketches[metric])
        self.open_arrival += other.open_arrival
        self.open_ttft += other.open_ttft
        self.pool_share_s.update(other.pool_share_s)
        self.signatures.update(other.signatures)

    def admitted(self) -> int:
        return self.counts["requests"] - self.counts["rejected"]

    def row(self, fleet: str, end_s: float, rates: dict[str, pd.Series], ownership: str) -> dict:
        """The summary row, column for column as :func:`sim.results.metrics._workload_row`."""
        sc, wl, c, s = self.scenario, self.wl, self.counts, self.sums
        window = sc.duration_s - sc.warmup_s
        n, done_n = c["requests"], c["completed"]
        edges = np.linspace(sc.warmup_s, sc.duration_s, BATCHES + 1)
        trend = backlog_trend(np.diff(self.area) / np.diff(edges), sc.warmup_s, sc.duration_s, self.admitted() / window)
        in_flight = c["in_flight"]
        unstable = in_flight > 0 or trend.unstable
        row = {"fleet": fleet, "workload": self.name, "kind": wl.kind, "requests": n, "completed": done_n,
               "rejected": c["rejected"], "rejected_share": c["rejected"] / n if n else math.nan}
        for reason in REJECT_REASONS:
            row[f"rejected_{reason}"] = c[f"rejected_{reason}"]
        row["rejected_other"] = c["rejected"] - sum(c[f"rejected_{r}"] for r in REJECT_REASONS)
        row.update(
            in_flight=in_flight, unstable=unstable, unstable_reason=_unstable_reason(in_flight, trend),
            backlog_slope_per_s=trend.slope_per_s, backlog_growth_share=trend.growth_share,
            backlog_trend_p_value=trend.p_value, tails_lower_bound=unstable,
        )
        row.update(self._tails(end_s, unstable))
        row["arrival_rate_rps"] = n / window
        row["throughput_rps"] = c["served"] / window
        row["goodput_rps"] = c["served_meets"] / window
        row["tokens_per_s_per_request_p50"] = sketch_percentile(self.sketches["tokens_per_s"], 50) if done_n else math.nan
        row["output_tokens_per_s"] = s["served_output_tokens"] / window
        row["slo_attainment"] = c["meets"] / n if n else math.nan
        row["slo_target"] = wl.slo.target
        for reason in MISS_REASONS:
            row[f"slo_miss_{reason}"] = c[f"slo_miss_{reason}"]
        row["slo_misses"] = sum(c[f"slo_miss_{r}"] for r in MISS_REASONS)
        bills = {column: self._bill(rate) for column, rate in rates.items()}
        way = "rent" if ownership == "rent" else "own"
        tokens = s["done_output_tokens"]
        cost = bills[f"cost_{way}_usd"][0]
        row["cost_per_request_usd"] = cost / done_n if done_n else math.nan
        marginal, priced = bills[f"marginal_cost_{way}_usd"]
        row["marginal_cost_per_request_usd"] = marginal / priced if done_n and priced else math.nan
        row["cost_per_1m_output_tokens_usd"] = cost / tokens * 1e6 if tokens else math.nan
        for w in ("own", "rent"):
            (loaded, loaded_n), (marginal, marginal_n) = bills[f"cost_{w}_usd"], bills[f"marginal_cost_{w}_usd"]
            loaded_sum = loaded if loaded_n else math.nan
            marginal_sum = marginal if marginal_n else math.nan
            row[f"cost_per_request_{w}_usd"] = loaded_sum / done_n if done_n else math.nan
            row[f"marginal_cost_per_request_{w}_usd"] = marginal / marginal_n if done_n and marginal_n else math.nan
            row[f"cost_per_1m_output_tokens_{w}_usd"] = loaded_sum / tokens * 1e6 if tokens else math.nan
            row[f"marginal_cost_per_1m_output_tokens_{w}_usd"] = marginal_sum / tokens * 1e6 if tokens else math.nan
        energy = bills["energy_j"][0]
        row["energy_per_request_j"] = energy / done_n if done_n else math.nan
        row["energy_per_output_token_j"] = energy / tokens if tokens else math.nan
        row.update(self._search(done_n))
        if wl.kind == "image_diffusion":
            images = s["images"]
            row["images_per_s"] = images / window
            row["cost_per_image_usd"] = cost / images if images else math.nan
            for p in PERCENTILES:
                row[f"queue_p{p}_s"] = sketch_percentile(self.sketches["queue_s"], p) if not unstable else math.nan
        return row

    def _bill(self, rate: pd.Series) -> tuple[float, int]:
        """(Σ share × rate over the pools with a price, completed requests with a price
        on at least one pool they held)."""
        total = sum(share * rate[pool] for pool, share in sorted(self.pool_share_s.items())
                    if not math.isnan(rate[pool]))
        priced = sum(n for pools, n in self.signatures.items() if any(not math.isnan(rate[p]) for p in pools))
        return total, priced

    def _tails(self, end_s: float, censor: bool) -> dict:
        out = {}
        opened = np.concatenate(self.open_arrival) if self.open_arrival else np.zeros(0)
        open_ttft = np.concatenate(self.open_ttft) if self.open_ttft else np.zeros(0)
        for metric in _TAIL_METRICS:
            sketch = self.sketches[metric]
            if censor and metric != "tpot_s" and len(opened):
                merged = new_sketch()
                merged.merge(sketch)
                waited = end_s - opened
                if metric == "ttft_s":
                    keep = open_ttft != -1.0
                    waited = np.where(np.isnan(open_ttft), waited, open_ttft)[keep]
                add_values(merged, waited)
                sketch = merged
            for p in PERCENTILES:
                out[f"{metric[:-2]}_p{p}_s"] = sketch_percentile(sketch, p)
        return out

    def _search(self, n: int) -> dict:
        s, wl = self.sums, self.wl
        out = {
            "handoffs_per_request": s["handoffs"] / n if n else math.nan,
            "handoff_transfer_s_mean": s["handoff_s"] / n if n else math.nan,
            "handoff_queue_s_mean": s["handoff_wait_s"] / n if n else math.nan,
        }
        if wl.kind == "branching_search":
            k, shared, total = wl.candidates_k, wl.shared_steps, wl.total_steps
            out["compute_multiplier_formula"] = k - (k - 1) * shared / total
            out["compute_multiplier_measured"] = s["sample_steps"] / n / total if n else math.nan
            out["verifier_calls_per_request"] = s["verifier_calls"] / n if n else math.nan
        return out


def _meets(done: pd.DataFrame, slo) -> np.ndarray:
    ok = np.ones(len(done), dtype=bool)
    for field in ("ttft_s", "tpot_s", "e2e_s"):
        bound = getattr(slo, field)
        if bound is not None:
            values = done[field].to_numpy(dtype=float)
            ok &= np.isnan(values) | (values <= bound)
    return ok


class FleetStream:
    """The sink of one fleet's streamed run: raw rows and pool shares to Parquet files in
    ``directory``, accumulators per workload, replica-seconds per pool (for the bills)."""

    def __init__(self, scenario: Scenario, fleet: str, directory: Path) -> None:
        self.scenario, self.fleet = scenario, fleet
        fleet_cfg = next(f for f in scenario.fleets if f.name == fleet)
        self.workloads = {n: WorkloadAccumulator(scenario, n) for n in fleet_workloads(scenario, fleet_cfg)}
        self.rows_path = directory / f"{len(list(directory.iterdir()))}-rows.parquet"
        self.shares_path = self.rows_path.with_name(self.rows_path.name.replace("-rows", "-shares"))
        self.rows_writer = self.shares_writer = None
        self.batches: list[bool] = []  # per batch: has pool-share rows
        self.pool_totals: Counter = Counter()
        self.rows = 0

    def __call__(self, requests: pd.DataFrame, shares: pd.DataFrame) -> None:
        self.rows_writer = _write(self.rows_writer, self.rows_path, requests)
        self.batches.append(bool(len(shares)))
        if len(shares):
            self.shares_writer = _write(self.shares_writer, self.shares_path, shares)
        self.rows += len(requests)
        held = held_shares(requests, shares if len(shares) else None)
        for pool, total in held.groupby("pool", sort=True)["busy_share_s"].sum().items():
            self.pool_totals[pool] += total
        codes = requests["workload"].cat.codes.to_numpy()
        for w, name in enumerate(requests["workload"].cat.categories):
            if name in self.workloads and (codes == w).any():
                part = requests[codes == w]
                held = shares[shares["request_id"].isin(part["request_id"])] if len(shares) else shares
                self.workloads[name].add(part, held)

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


def fleet_summary(scenario: Scenario, run: FleetRun, stream: FleetStream) -> tuple[pd.DataFrame, list[dict], pd.Series]:
    """One streamed fleet's pool table, summary rows (one per workload, from the
    accumulators) and replica-seconds per pool (the cost pass's ``totals``)."""
    admitted = {name: acc.admitted() for name, acc in stream.workloads.items()}
    table = pool_table(run, scenario, admitted)
    totals = pd.Series(dict(stream.pool_totals), dtype=float)
    rates = cost_rates(table, run.end_s, totals)
    rows = [acc.row(run.fleet, run.end_s, rates, scenario.economics.ownership) for acc in stream.workloads.values()]
    return table, rows, totals


def _write(writer, path: Path, df: pd.DataFrame):
    table = pa.Table.from_pandas(df, preserve_index=False, schema=writer.schema if writer else None)
    if writer is None:
        writer = pq.ParquetWriter(path, table.schema)
    writer.write_table(table, row_group_size=max(len(table), 1))
    return writer


class StreamSpool:
    """Temporary directory holding a streamed run's files (removed with this object)."""

    def __init__(self) -> None:
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
        table, rows, totals = fleet_summary(scenario, run, stream)
        pools.append(table)
        summary += rows
        for batch in stream.costed_batches(table, run.end_s, ownership, totals):
            writer = _write(writer, final, batch)
        if empty is None:
            empty = attribute_costs(run.requests, table, run.end_s, run.pool_shares, ownership)
    if writer is not None:
        writer.close()
    pools_df = pd.concat(pools, ignore_index=True)
    summary_df = pd.DataFrame(summary)
    return pools_df, summary_df, fleet_table(pools_df, summary_df, scenario.economics), final, empty
