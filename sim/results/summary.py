"""The per-workload summary: one accumulator, fed batch by batch.

:class:`WorkloadAccumulator` folds request rows (as :func:`sim.engine.core.simulate`
returns them, before costing) into exact counts and sums — requests, completions,
rejections by reason, SLO misses by reason, goodput, output tokens, replica-seconds held
per pool (for the costs), the number-in-system integral behind the backlog trend — and
the latency samples behind the tails. A run held in memory is one batch of it; a
streamed run (:mod:`sim.results.streaming`) feeds it one batch at a time; cells merge
their accumulators (:meth:`WorkloadAccumulator.merge`). :meth:`WorkloadAccumulator.row`
then gives the summary row, whichever way it was fed.

Definitions (over the measurement window [warmup_s, duration_s)). Latency tails, SLO
attainment, rejections and the SLO-miss breakdown cover the requests that *arrived* in
the window; ``throughput_rps`` is the completions *inside* the window divided by its
length (what the fleet served, whatever it was offered: ``arrival_rate_rps``),
``goodput_rps`` the part of those that met the SLO. SLO attainment is over all
arrivals: a rejected or unfinished request is a miss; ``slo_miss_<reason>`` says why each
miss happened (one reason per request, in the order of :data:`MISS_REASONS`).

Stability: a workload is flagged ``unstable`` when its number in system grows through
the window (trend test of :mod:`sim.results.stability`) or measured requests are still
in flight after the drain. Its tails are then lower bounds (``tails_lower_bound``): the
unfinished requests enter TTFT/E2E with the time they had waited when the run ended.

**Quantiles, exact or sketched.** The latency samples are kept exactly
(:class:`ExactQuantiles`: ``numpy.percentile`` of the values) when the run is held in
memory, and in a DDSketch (:class:`SketchQuantiles`) when it streams. DDSketch (Masson,
Rim & Lee, "DDSketch: a fast and fully-mergeable quantile sketch with relative-error
guarantees", VLDB 2019; the ``ddsketch`` package of Datadog) returns the sample of any
rank within relative accuracy :data:`SKETCH_RELATIVE_ACCURACY` (α = 0.5 %);
:func:`sketch_percentile` interpolates between the two samples around the percentile's
rank as numpy does, so a sketched quantile is within α of the exact one (values are
non-negative). Every other column is computed the same way in both.

**Costs.** A request's fully loaded cost needs the whole run's bill, so the accumulator
keeps the replica-seconds its completed requests held per pool, and :meth:`row` prices
them with :func:`sim.models.economics.cost_rates` (the same rates
:func:`~sim.models.economics.attribute_costs` charges each request row: the sums agree
with the costed rows to floating-point order, ~1e-15 relative).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pandas as pd
from ddsketch import DDSketch

from sim.engine.prefix_cache import TRAFFIC
from sim.models.economics import cost_rates, held_shares
from sim.results.metrics import pool_table
from sim.results.stability import BATCHES, Trend, backlog_trend, interval_area
from sim.fleet_plan import FleetPlan, RunWindow
from sim.workloads import kind_of

PERCENTILES = (50, 95, 99)
SKETCH_RELATIVE_ACCURACY = 0.005
"""α of the DDSketch behind streamed quantiles (relative error of a returned value)."""

# Why the engine refuses a request (``Pool.reject_reason``).
REJECT_REASONS = ("exceeds_max_context", "exceeds_kv_capacity", "exceeds_memory")
# Why a measured request missed its SLO, in the order a miss is attributed (one reason each).
MISS_REASONS = ("rejected", "unfinished", "ttft", "tpot", "e2e")

_TAIL_METRICS = ("ttft_s", "tpot_s", "e2e_s")
_MEAN_COLUMNS = ("handoffs", "handoff_s", "handoff_wait_s", "sample_steps", "verifier_calls", "images")
# summed only when the rows have them (the columns of a split deployment or of speculation)
_OPTIONAL_SUMS = ("kv_transfer_bytes", "kv_transfer_s", "decode_queue_s", "tokens_per_step")


# --- quantiles -------------------------------------------------------------------------

class ExactQuantiles:
    """The values themselves; percentiles as :func:`numpy.percentile` (linear)."""

    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []

    def add(self, values: np.ndarray) -> None:
        """Add ``values`` (NaN dropped)."""
        values = np.asarray(values, dtype=float)
        self.parts.append(values[~np.isnan(values)])

    def merge(self, other: "ExactQuantiles") -> None:
        self.parts += other.parts

    def with_values(self, values: np.ndarray) -> "ExactQuantiles":
        """A copy with ``values`` added (this one unchanged)."""
        out = ExactQuantiles()
        out.parts = self.parts + [np.asarray(values, dtype=float)]
        return out

    @property
    def count(self) -> int:
        return sum(len(p) for p in self.parts)

    def percentile(self, p: float) -> float:
        """Percentile ``p`` (0-100); NaN when empty."""
        values = np.concatenate(self.parts) if self.parts else np.zeros(0)
        return float(np.percentile(values, p)) if len(values) else math.nan


class SketchQuantiles:
    """A DDSketch of the values (relative accuracy :data:`SKETCH_RELATIVE_ACCURACY`)."""

    def __init__(self) -> None:
        self.sketch = new_sketch()

    def add(self, values: np.ndarray) -> None:
        add_values(self.sketch, np.asarray(values, dtype=float))

    def merge(self, other: "SketchQuantiles") -> None:
        self.sketch.merge(other.sketch)

    def with_values(self, values: np.ndarray) -> "SketchQuantiles":
        out = SketchQuantiles()
        out.sketch.merge(self.sketch)
        out.add(values)
        return out

    @property
    def count(self) -> int:
        return int(round(self.sketch.count))

    def percentile(self, p: float) -> float:
        return sketch_percentile(self.sketch, p)


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


# --- the accumulator -------------------------------------------------------------------

class WorkloadAccumulator:
    """Mergeable per-(fleet, workload) statistics of request rows (module docstring).

    Args:
        window: the run's window (:class:`sim.fleet_plan.RunWindow`).
        name: the workload.
        wl: its config (SLO, kind).
        exact: keep the latency samples (in-memory runs) rather than sketch them.

    :meth:`add` folds in a batch of the workload's rows; :meth:`merge` adds another
    accumulator of the same workload (disjoint requests: another cell or part of the run).
    """

    def __init__(self, window: RunWindow, name: str, wl, exact: bool) -> None:
        self.window, self.name, self.wl = window, name, wl
        quantiles = ExactQuantiles if exact else SketchQuantiles
        self.counts: Counter = Counter()
        self.sums: Counter = Counter()
        self.area = np.zeros(BATCHES + 1)
        self.tails = {m: quantiles() for m in (*_TAIL_METRICS, "tokens_per_s", "queue_s")}
        self.open_arrival: list[np.ndarray] = []  # measured requests in flight at the end
        self.open_ttft: list[np.ndarray] = []  # their TTFT (NaN: no first token yet; -1: a kind without TTFT)
        self.pool_share_s: Counter = Counter()  # replica-seconds held per pool, completed measured
        self.signatures: Counter = Counter()  # completed measured requests per set of pools held

    def add(self, rows: pd.DataFrame, shares: pd.DataFrame) -> None:
        """Fold in ``rows`` (this workload's request rows of one batch) and ``shares``
        (their pool-share rows, for journeys across pools)."""
        sc, slo, c, s = self.window, self.wl.slo, self.counts, self.sums
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
        done = rows[g_done]
        for metric, tail in self.tails.items():
            tail.add(done[metric].to_numpy(dtype=float))
        if g_open.any():
            open_ = rows[g_open]
            self.open_arrival.append(open_["arrival_at_s"].to_numpy(dtype=float))
            has_ttft = kind_of(self.wl).has_ttft
            self.open_ttft.append(open_["ttft_s"].to_numpy(dtype=float) if has_ttft else np.full(len(open_), -1.0))
        c["meets"] += int(meets_slo(done, slo).sum())
        done_at = rows["done_at_s"].to_numpy()
        served_mask = done_all & (done_at >= sc.warmup_s) & (done_at < sc.duration_s)
        served = rows[served_mask]
        c["served"] += int(served_mask.sum())
        c["served_meets"] += int(meets_slo(served, slo).sum())
        s["served_output_tokens"] += int(served["output_tokens"].sum())
        self._add_misses(rows[measured], slo)
        s["done_output_tokens"] += int(done["output_tokens"].sum())
        for column in _MEAN_COLUMNS:
            s[column] += done[column].sum()
        self._add_optional(done)
        self._add_costs(done, shares)

    def _add_optional(self, done: pd.DataFrame) -> None:
        """Sums behind the split-deployment and speculation columns (when the rows have
        them): KV bytes and transfer and decode-queue times of the requests that were
        handed over (``kv_handoffs`` of them), and the decode tokens and verification
        steps of the requests that speculated."""
        c, s = self.counts, self.sums
        if "kv_transfer_bytes" in done:
            moved = done["kv_transfer_bytes"].notna()
            c["kv_handoffs"] += int(moved.sum())
            for column in ("kv_transfer_bytes", "kv_transfer_s", "decode_queue_s"):
                s[column] += float(done.loc[moved, column].sum())
        if "cached_tokens" in done:  # a prefix cache: the first prefill's cached tokens
            s["prefix_prompt_tokens"] += int(done["prompt_tokens"].sum())
            s["cached_tokens"] += int(done["cached_tokens"].sum())
            s["prefill_flops_saved"] += float(done["prefill_flops_saved"].sum())
            s["host_cached_tokens"] += int(done["host_cached_tokens"].sum())
            s["ssd_cached_tokens"] += int(done["ssd_cached_tokens"].sum())
        if "shared_cached_tokens" in done:  # a pool's shared KV tier
            s["shared_cached_tokens"] += int(done["shared_cached_tokens"].sum())
        if "tokens_per_step" in done:
            stepped = done["steps"] > 0
            s["spec_steps"] += int(done.loc[stepped, "steps"].sum())
            s["spec_tokens"] += int((done.loc[stepped, "output_tokens"] - 1).sum())

    def _add_misses(self, g: pd.DataFrame, slo) -> None:
        """Count each measured request that missed the SLO once, under the first reason of
        :data:`MISS_REASONS` that applies: rejected, still unfinished when the run ended,
        then TTFT, TPOT, E2E over their bounds."""
        left = np.ones(len(g), dtype=bool)
        status = g["status"].to_numpy()
        for reason in MISS_REASONS:
            if reason == "rejected":
                hit = status == "rejected"
            elif reason == "unfinished":
                hit = status == "in_flight"
            else:
                bound = getattr(slo, f"{reason}_s")
                hit = (g[f"{reason}_s"] > bound).to_numpy() if bound is not None else np.zeros(len(g), dtype=bool)
            hit = hit & left
            self.counts[f"slo_miss_{reason}"] += int(hit.sum())
            left &= ~hit

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
        for metric, tail in self.tails.items():
            tail.merge(other.tails[metric])
        self.open_arrival += other.open_arrival
        self.open_ttft += other.open_ttft
        self.pool_share_s.update(other.pool_share_s)
        self.signatures.update(other.signatures)

    def admitted(self) -> int:
        """Measured requests not rejected."""
        return self.counts["requests"] - self.counts["rejected"]

    def row(self, fleet: str, end_s: float, rates: dict[str, pd.Series], ownership: str) -> dict:
        """The summary row of this workload in ``fleet`` (module docstring).

        Args:
            end_s: the instant the fleet's run ended (unfinished requests are censored there).
            rates: per request cost column, its rate per replica-second held of each pool
                (:func:`sim.models.economics.cost_rates`).
            ownership: ``own`` or ``rent``: which costs are the headline ones.
        """
        wl, c, s = self.wl, self.counts, self.sums
        window = self.window.length_s
        n, done_n = c["requests"], c["completed"]
        trend = self._trend()
        in_flight = c["in_flight"]
        unstable = in_flight > 0 or trend.unstable
        row = {"fleet": fleet, "workload": self.name, "kind": wl.kind, "requests": n, "completed": done_n,
               "rejected": c["rejected"], "rejected_share": c["rejected"] / n if n else math.nan}
        for reason in REJECT_REASONS:
            row[f"rejected_{reason}"] = c[f"rejected_{reason}"]
        row["rejected_other"] = c["rejected"] - sum(c[f"rejected_{r}"] for r in REJECT_REASONS)
        row.update(
            in_flight=in_flight, unstable=unstable, unstable_reason=unstable_reason(in_flight, trend),
            backlog_slope_per_s=trend.slope_per_s, backlog_growth_share=trend.growth_share,
            backlog_trend_p_value=trend.p_value, tails_lower_bound=unstable,
        )
        row.update(self._tails(end_s, unstable))
        row["arrival_rate_rps"] = n / window
        row["throughput_rps"] = c["served"] / window
        row["goodput_rps"] = c["served_meets"] / window
        row["tokens_per_s_per_request_p50"] = self.tails["tokens_per_s"].percentile(50) if done_n else math.nan
        row["output_tokens_per_s"] = s["served_output_tokens"] / window
        row["slo_attainment"] = c["meets"] / n if n else math.nan
        row["slo_target"] = wl.slo.target
        for reason in MISS_REASONS:
            row[f"slo_miss_{reason}"] = c[f"slo_miss_{reason}"]
        row["slo_misses"] = sum(c[f"slo_miss_{r}"] for r in MISS_REASONS)
        cost = self._cost_columns(row, rates, ownership)
        row.update(self._handoff_columns(done_n))
        row.update(kind_of(wl).summary_columns(wl, self, cost, window, unstable))
        return row

    def _trend(self) -> Trend:
        sc = self.window
        edges = np.linspace(sc.warmup_s, sc.duration_s, BATCHES + 1)
        return backlog_trend(np.diff(self.area) / np.diff(edges), sc.warmup_s, sc.duration_s,
                             self.admitted() / (sc.duration_s - sc.warmup_s))

    def _cost_columns(self, row: dict, rates: dict[str, pd.Series], ownership: str) -> float:
        """Fully loaded and marginal $/request and $/1M output tokens when owning and when
        renting (headline columns: ``ownership``'s), and IT energy per request and per
        output token (J), into ``row``. Returns the headline fully loaded cost (USD)."""
        done_n, tokens = self.counts["completed"], self.sums["done_output_tokens"]
        bills = {column: self._bill(rate) for column, rate in rates.items()}
        way = "rent" if ownership == "rent" else "own"
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
        return cost

    def _bill(self, rate: pd.Series) -> tuple[float, int]:
        """(Σ share × rate over the pools with a price, completed requests with a price
        on at least one pool they held)."""
        total = sum(share * rate[pool] for pool, share in sorted(self.pool_share_s.items())
                    if not math.isnan(rate[pool]))
        priced = sum(n for pools, n in self.signatures.items() if any(not math.isnan(rate[p]) for p in pools))
        return total, priced

    def _tails(self, end_s: float, censor: bool) -> dict:
        """p50/p95/p99 of TTFT, TPOT and E2E over the measured requests. Stable runs: the
        completed requests. Unstable runs (``censor``): requests still unfinished count
        with the time they had waited when the run ended (TTFT/E2E censored at ``end_s``),
        so the percentiles are lower bounds of the true ones; TPOT stays over completed
        requests (an unfinished request has no TPOT yet)."""
        out = {}
        opened = np.concatenate(self.open_arrival) if self.open_arrival else np.zeros(0)
        open_ttft = np.concatenate(self.open_ttft) if self.open_ttft else np.zeros(0)
        for metric in _TAIL_METRICS:
            tail = self.tails[metric]
            if censor and metric != "tpot_s" and len(opened):
                waited = end_s - opened
                if metric == "ttft_s":
                    keep = open_ttft != -1.0
                    waited = np.where(np.isnan(open_ttft), waited, open_ttft)[keep]
                tail = tail.with_values(waited)
            for p in PERCENTILES:
                out[f"{metric[:-2]}_p{p}_s"] = tail.percentile(p)
        return out

    def mean(self, column: str) -> float:
        """Mean of ``column`` (one of the summed request columns) over the completed
        measured requests; NaN when none completed."""
        n = self.counts["completed"]
        return self.sums[column] / n if n else math.nan

    def _handoff_columns(self, n: int) -> dict:
        """Mean hand-offs between pools per request, and their transfer and queueing time."""
        return {
            "handoffs_per_request": self.mean("handoffs"),
            "handoff_transfer_s_mean": self.mean("handoff_s"),
            "handoff_queue_s_mean": self.mean("handoff_wait_s"),
        }


def meets_slo(done: pd.DataFrame, slo) -> np.ndarray:
    """Per row of ``done``: every set SLO bound holds (a NaN metric, e.g. the TPOT of a
    one-token output, does not count against it)."""
    ok = np.ones(len(done), dtype=bool)
    for field in ("ttft_s", "tpot_s", "e2e_s"):
        bound = getattr(slo, field)
        if bound is not None:
            values = done[field].to_numpy(dtype=float)
            ok &= np.isnan(values) | (values <= bound)
    return ok


def unstable_reason(in_flight: int, trend: Trend) -> str:
    """``backlog_growing``, ``in_flight_after_drain``, both joined by ``+``, or ""."""
    reasons = (["backlog_growing"] if trend.unstable else []) + (["in_flight_after_drain"] if in_flight else [])
    return "+".join(reasons)


def feed(accumulators: dict[str, WorkloadAccumulator], requests: pd.DataFrame, shares: pd.DataFrame) -> None:
    """Fold a batch of one fleet's request rows (any workloads; those without an
    accumulator are skipped) and the pool-share rows of those requests into
    ``accumulators`` (workload name -> accumulator)."""
    codes = requests["workload"].cat.codes.to_numpy()
    for w, name in enumerate(requests["workload"].cat.categories):
        if name in accumulators and (codes == w).any():
            part = requests if (codes == w).all() else requests[codes == w]
            held = shares[shares["request_id"].isin(part["request_id"])] if len(shares) else shares
            accumulators[name].add(part, held)


def accumulators(plan: FleetPlan, exact: bool) -> dict[str, WorkloadAccumulator]:
    """An empty accumulator per workload the fleet of ``plan`` serves."""
    return {r.name: WorkloadAccumulator(plan.window, r.name, r.config, exact) for r in plan.routes}


def fleet_summary(run, accumulators: dict[str, WorkloadAccumulator], totals: pd.Series) -> tuple[pd.DataFrame, list[dict]]:
    """One fleet's pool table and summary rows (one per workload, from its accumulators).

    Args:
        run: the fleet's :class:`sim.engine.core.FleetRun` (its plan, pool totals, time
            series, end).
        totals: replica-seconds held per pool over the whole run (the costs' divisor).
    """
    admitted = {name: acc.admitted() for name, acc in accumulators.items()}
    table = pool_table(run, admitted)
    rates = cost_rates(table, run.end_s, totals)
    ownership = run.plan.economics.ownership
    rows = [acc.row(run.fleet, run.end_s, rates, ownership) for acc in accumulators.values()]
    for row in rows:
        row.update(kv_tier_columns(run.plan, table, row["workload"]))
    return table, rows


def kv_tier_columns(plan: FleetPlan, table: pd.DataFrame, workload: str) -> dict:
    """A workload's KV bytes moved between cache tiers: the ``kv_<move>_bytes`` of the
    pools serving it (``table``: the fleet's pool table) summed; none when no pool serving
    it has a prefix cache. A pool shared by several workloads counts whole in each of
    them (a block is not attributed to a workload: docs/kv-reuse.md)."""
    w = plan.names.index(workload)
    serving = table["pool"].isin([p.name for p in plan.pools if w in p.workloads])
    columns = [f"kv_{name}_bytes" for name in TRAFFIC if f"kv_{name}_bytes" in table.columns]
    sums = table.loc[serving, columns].sum(min_count=1)
    return {c: float(v) for c, v in sums.items() if not math.isnan(v)}


def summarize_in_memory(run) -> tuple[pd.DataFrame, list[dict], pd.Series]:
    """A run held in memory as one batch of the accumulators (exact quantiles): its pool
    table, summary rows, and replica-seconds held per pool (the costs' divisor, summed as
    :func:`sim.models.economics.attribute_costs` sums them)."""
    accs = accumulators(run.plan, exact=True)
    feed(accs, run.requests, run.pool_shares)
    totals = held_shares(run.requests, run.pool_shares).groupby("pool")["busy_share_s"].sum()
    table, rows = fleet_summary(run, accs, totals)
    return table, rows, totals
