"""From a fleet run's raw rows to the tables planners read.

- ``pool_table``: per pool, over the measurement window [warmup_s, duration_s): busy
  fraction, MFU (achieved FLOP/s ÷ peak), memory-bandwidth utilisation, HBM occupancy
  (mean, peak), arithmetic intensity, racks, power and costs, and the saturation signals
  sampled over time (:mod:`sim.results.saturation`: batch against ``max_batch``, KV
  occupancy, queue length, backlog trend).
- ``workload_summary``: per workload. Latency tails, SLO attainment, rejections and the
  SLO-miss breakdown cover the requests that *arrived* in the window; ``throughput_rps``
  is the completions *inside* the window divided by its length (what the fleet served,
  whatever it was offered: ``arrival_rate_rps``), ``goodput_rps`` the part of those that
  met the SLO. SLO attainment is over all arrivals: a rejected or unfinished request is
  a miss; ``slo_miss_<reason>`` says why each miss happened (one reason per request).

Stability: a workload is flagged ``unstable`` when its number in system grows through
the window (trend test of :mod:`sim.results.stability`) or measured requests are still
in flight after the drain. Its tails are then lower bounds (``tails_lower_bound``): the
unfinished requests enter TTFT/E2E with the time they had waited when the run ended.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sim.models.economics import attribute_costs, pool_activities, pool_costs
from sim.engine.core import FleetRun
from sim.results.saturation import saturation_columns
from sim.results.stability import Trend, backlog_trend, batch_means_of_intervals
from sim.scenario import Scenario, fleet_workloads

PERCENTILES = (50, 95, 99)


def pool_table(run: FleetRun, scenario: Scenario, admitted: dict[str, int] | None = None) -> pd.DataFrame:
    """Per-pool utilisation, capacity and cost rows (units in column names).

    ``admitted`` maps a workload to its measured requests not rejected (counted from
    ``run.requests`` if None; a streamed run passes its accumulated counts)."""
    window = scenario.duration_s - scenario.warmup_s
    if admitted is None:
        req = run.requests
        kept = req[req["measured"] & (req["status"] != "rejected")]
        admitted = {name: int(n) for name, n in kept["workload"].astype(str).value_counts().items()}
    rows = []
    for pool, raw in zip(run.pool_objects, run.pools.to_dict("records")):
        row = _pool_row(pool, raw, window, run.end_s, scenario)
        row.update(_pool_saturation(run, pool, scenario, admitted))
        rows.append(row)
    return pd.DataFrame(rows)


def _pool_saturation(run: FleetRun, pool, scenario: Scenario, admitted: dict[str, int]) -> dict:
    """Saturation columns (:mod:`sim.results.saturation`) of one pool, its backlog trend
    judged against the admitted arrival rate of the workloads it serves."""
    names = list(scenario.workloads)
    arrivals = sum(admitted.get(names[w], 0) for w in set(pool.workloads))
    window = scenario.duration_s - scenario.warmup_s
    series = run.timeseries[run.timeseries["pool"] == pool.name] if len(run.timeseries) else run.timeseries
    if series.empty:
        return {}
    return saturation_columns(series, pool.config.replicas, pool.config.max_batch, scenario.warmup_s,
                              scenario.duration_s, arrivals / window)


def _pool_row(pool, raw: dict, window_s: float, end_s: float, scenario: Scenario) -> dict:
    replicas = pool.config.replicas
    replica_window_s = window_s * replicas
    slots = pool.config.max_batch if pool.family == "service" else 1
    busy = raw["busy_s"] / (replica_window_s * slots)
    row = {k: raw[k] for k in ("fleet", "pool", "accelerator", "model", "precision", "tp", "pp", "ep", "replicas")}
    row["busy_fraction"] = busy
    if pool.perf is not None:
        perf, layout = pool.perf, pool.layout
        memory = layout.replica_memory_bytes / pool.config.memory_utilization
        idle_s = max(replica_window_s - raw["busy_s"], 0.0)
        row.update(
            accelerators=layout.accelerators,
            nodes=pool.share.node_share,
            nodes_per_rack=layout.nodes_per_rack,
            racks=pool.share.rack_share,
            empty_slots=pool.share.empty_slot_share,
            mfu=raw["flops"] / (replica_window_s * perf.peak_flops),
            bandwidth_utilisation=raw["bytes"] / (replica_window_s * perf.peak_bw_bytes_per_s),
            hbm_mean_fraction=(raw["hbm_byte_s"] + perf.weight_bytes * idle_s) / (replica_window_s * memory),
            hbm_peak_fraction=max(raw["hbm_peak_bytes"], perf.weight_bytes) / memory,
            arithmetic_intensity_flop_per_byte=_ratio(raw["flops"], raw["bytes"]),
            ridge_flop_per_byte=perf.ridge_flops_per_byte,
            achieved_flops_per_s=_ratio(raw["flops"], raw["busy_s"]),
            peak_flops_per_s=perf.peak_flops,
        )
    else:
        row.update(accelerators=0, nodes=0, nodes_per_rack=1, racks=0, empty_slots=0)
    busy_run = raw["busy_total_s"] / (end_s * replicas * slots) if end_s > 0 else 0.0
    a_c, a_m = pool_activities(pool, raw["busy_s"], raw["flops"], raw["bytes"])
    row.update(compute_activity=a_c, memory_activity=a_m)
    row.update(pool_costs(pool, scenario.economics, busy, a_c, a_m))
    run = pool_costs(pool, scenario.economics, min(busy_run, 1.0), a_c, a_m)
    busy_all = pool_costs(pool, scenario.economics, 1.0, a_c, a_m)  # every replica busy
    row.update(run_cost_usd_per_hour=run["cost_usd_per_hour"], run_own_cost_usd_per_hour=run["own_cost_usd_per_hour"],
               run_it_power_avg_w=run["it_power_avg_w"], busy_own_cost_usd_per_hour=busy_all["own_cost_usd_per_hour"])
    # the IT power line P(b) = idle + (busy - idle) x b at the run's activities: kW over time
    row.update(busy_total_s=raw["busy_total_s"], busy_slots=replicas * slots, run_end_s=end_s,
               it_power_idle_w=pool_costs(pool, scenario.economics, 0.0, a_c, a_m)["it_power_avg_w"],
               it_power_busy_w=busy_all["it_power_avg_w"])
    return row


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.nan


def costed_requests(run: FleetRun, pools: pd.DataFrame, ownership: str = "own") -> pd.DataFrame:
    """Request rows with ``cost_usd``, ``marginal_cost_usd`` (under ``ownership``), their
    own/rent variants and ``energy_j`` (see :func:`sim.models.economics.attribute_costs`)."""
    return attribute_costs(run.requests, pools, run.end_s, run.pool_shares, ownership)


def workload_summary(requests: pd.DataFrame, scenario: Scenario, end_s: dict[str, float] | None = None) -> pd.DataFrame:
    """One row per (fleet, workload) over the measurement window (see module docstring).

    ``end_s`` maps a fleet to the instant its run ended (unfinished requests are censored
    there for the lower-bound tails); default: the latest instant in its rows."""
    window = scenario.duration_s - scenario.warmup_s
    rows = []
    for fleet in requests["fleet"].unique():
        fleet_cfg = next(f for f in scenario.fleets if f.name == fleet)
        in_fleet = requests["fleet"] == fleet
        fr = requests if in_fleet.all() else requests[in_fleet]  # a one-fleet run: no copy of every row
        end = (end_s or {}).get(fleet, float(np.nanmax(fr[["arrival_at_s", "done_at_s"]].to_numpy())))
        for name in fleet_workloads(scenario, fleet_cfg):
            of_workload = fr["workload"] == name
            all_rows = fr if of_workload.all() else fr[of_workload]
            rows.append(_workload_row(fleet, name, all_rows, scenario, window, end))
    return pd.DataFrame(rows)


def _workload_row(fleet: str, name: str, rows: pd.DataFrame, scenario: Scenario, window_s: float, end_s: float) -> dict:
    wl = scenario.workloads[name]
    g = rows[rows["measured"]]
    done = g[g["status"] == "completed"]
    in_flight = int((g["status"] == "in_flight").sum())
    trend = _backlog_trend(rows, len(g) - int((g["status"] == "rejected").sum()), scenario)
    unstable = in_flight > 0 or trend.unstable
    row = {"fleet": fleet, "workload": name, "kind": wl.kind, "requests": len(g), "completed": len(done)}
    row.update(_rejections(g))
    row.update(
        in_flight=in_flight,
        unstable=unstable,
        unstable_reason=_unstable_reason(in_flight, trend),
        backlog_slope_per_s=trend.slope_per_s,
        backlog_growth_share=trend.growth_share,
        backlog_trend_p_value=trend.p_value,
        tails_lower_bound=unstable,
    )
    row.update(_tails(g, end_s, censor=unstable))
    meets = _meets_slo(done, wl.slo)
    served = rows[(rows["status"] == "completed") & (rows["done_at_s"] >= scenario.warmup_s)
                  & (rows["done_at_s"] < scenario.duration_s)]
    row["arrival_rate_rps"] = len(g) / window_s
    row["throughput_rps"] = len(served) / window_s
    row["goodput_rps"] = int(_meets_slo(served, wl.slo).sum()) / window_s
    row["tokens_per_s_per_request_p50"] = float(done["tokens_per_s"].median()) if len(done) else math.nan
    row["output_tokens_per_s"] = served["output_tokens"].sum() / window_s
    row["slo_attainment"] = meets.sum() / len(g) if len(g) else math.nan
    row["slo_target"] = wl.slo.target
    row.update(_slo_misses(g, wl.slo))
    cost = done["cost_usd"].sum()
    row["cost_per_request_usd"] = cost / len(done) if len(done) else math.nan
    row["marginal_cost_per_request_usd"] = done["marginal_cost_usd"].mean() if len(done) else math.nan
    tokens = done["output_tokens"].sum()
    row["cost_per_1m_output_tokens_usd"] = cost / tokens * 1e6 if tokens else math.nan
    row.update(_own_rent_energy_columns(done))
    row.update(_search_columns(wl, done))
    if wl.kind == "image_diffusion":
        row.update(_image_columns(g, done, cost, window_s, unstable))
    return row


# Why the engine refuses a request (sim/engine/pools.py ``Pool.reject_reason``).
REJECT_REASONS = ("exceeds_max_context", "exceeds_kv_capacity", "exceeds_memory")
# Why a measured request missed its SLO, in the order a miss is attributed (one reason each).
MISS_REASONS = ("rejected", "unfinished", "ttft", "tpot", "e2e")


def _rejections(g: pd.DataFrame) -> dict:
    """Rejected measured requests: count, share of arrivals, count per reason."""
    rejected = g[g["status"] == "rejected"]
    out = {"rejected": len(rejected), "rejected_share": len(rejected) / len(g) if len(g) else math.nan}
    reasons = rejected["reject_reason"].value_counts()
    for reason in REJECT_REASONS:
        out[f"rejected_{reason}"] = int(reasons.get(reason, 0))
    out["rejected_other"] = len(rejected) - sum(out[f"rejected_{r}"] for r in REJECT_REASONS)
    return out


def _slo_misses(g: pd.DataFrame, slo) -> dict:
    """Measured requests that missed the SLO, each counted once under the first reason
    of :data:`MISS_REASONS` that applies: rejected, still unfinished when the run ended,
    then TTFT, TPOT, E2E over their bounds. The counts sum to ``slo_misses``."""
    left = pd.Series(True, index=g.index)
    out = {}
    for reason in MISS_REASONS:
        if reason == "rejected":
            hit = g["status"] == "rejected"
        elif reason == "unfinished":
            hit = g["status"] == "in_flight"
        else:
            bound = getattr(slo, f"{reason}_s")
            hit = (g[f"{reason}_s"] > bound) if bound is not None else pd.Series(False, index=g.index)
        hit = hit & left
        out[f"slo_miss_{reason}"] = int(hit.sum())
        left &= ~hit
    out["slo_misses"] = sum(out[f"slo_miss_{r}"] for r in MISS_REASONS)
    return out


def _backlog_trend(rows: pd.DataFrame, admitted_arrivals: int, scenario: Scenario) -> Trend:
    """Trend test (:mod:`sim.results.stability`) on the workload's number in system
    (arrival to completion, every pool and queue it crossed) over the window."""
    t0, t1 = scenario.warmup_s, scenario.duration_s
    kept = rows[rows["status"] != "rejected"]
    means = batch_means_of_intervals(kept["arrival_at_s"].to_numpy(), kept["done_at_s"].to_numpy(), t0, t1)
    return backlog_trend(means, t0, t1, admitted_arrivals / (t1 - t0))


def _unstable_reason(in_flight: int, trend: Trend) -> str:
    reasons = (["backlog_growing"] if trend.unstable else []) + (["in_flight_after_drain"] if in_flight else [])
    return "+".join(reasons)


def _tails(g: pd.DataFrame, end_s: float, censor: bool) -> dict:
    """p50/p95/p99 of TTFT, TPOT and E2E over the measured requests. Stable runs: the
    completed requests. Unstable runs (``censor``): requests still unfinished count
    with the time they had waited when the run ended (TTFT/E2E censored at ``end_s``),
    so the percentiles are lower bounds of the true ones; TPOT stays over completed
    requests (an unfinished request has no TPOT yet)."""
    done = g[g["status"] == "completed"]
    open_ = g[g["status"] == "in_flight"]
    out = {}
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        values = done[metric].dropna().to_numpy()
        if censor and metric != "tpot_s" and len(open_):
            waited = end_s - open_["arrival_at_s"].to_numpy()
            if metric == "ttft_s":
                waited = np.where(open_["ttft_s"].notna(), open_["ttft_s"], waited)[open_["kind"].isin(TTFT_KINDS)]
            values = np.concatenate([values, waited])
        for p in PERCENTILES:
            out[f"{metric[:-2]}_p{p}_s"] = float(np.percentile(values, p)) if len(values) else math.nan
    return out


TTFT_KINDS = ("autoregressive", "diffusion_lm")


def _own_rent_energy_columns(done: pd.DataFrame) -> dict:
    """Fully loaded and marginal $/request and $/1M output tokens when owning and when
    renting, and IT energy per request and per output token (J)."""
    n, tokens = len(done), done["output_tokens"].sum()
    out = {}
    for way in ("own", "rent"):
        loaded, marginal = done[f"cost_{way}_usd"], done[f"marginal_cost_{way}_usd"]
        out[f"cost_per_request_{way}_usd"] = loaded.sum(min_count=1) / n if n else math.nan
        out[f"marginal_cost_per_request_{way}_usd"] = marginal.mean() if n else math.nan
        out[f"cost_per_1m_output_tokens_{way}_usd"] = loaded.sum(min_count=1) / tokens * 1e6 if tokens else math.nan
        out[f"marginal_cost_per_1m_output_tokens_{way}_usd"] = (
            marginal.sum(min_count=1) / tokens * 1e6 if tokens else math.nan)
    out["energy_per_request_j"] = done["energy_j"].sum() / n if n else math.nan
    out["energy_per_output_token_j"] = done["energy_j"].sum() / tokens if tokens else math.nan
    return out


def _image_columns(g: pd.DataFrame, done: pd.DataFrame, cost: float, window_s: float, unstable: bool) -> dict:
    """Images (samples) per second and per dollar, and queueing delay percentiles
    (arrival to first admission on a replica) of image requests, which may each ask
    for several images (trace replay)."""
    images = done["images"].sum() if "images" in done else len(done)
    out = {"images_per_s": images / window_s, "cost_per_image_usd": cost / images if images else math.nan}
    queue = done["queue_s"].dropna().to_numpy()
    for p in PERCENTILES:
        out[f"queue_p{p}_s"] = float(np.percentile(queue, p)) if len(queue) and not unstable else math.nan
    return out


def _search_columns(wl, done: pd.DataFrame) -> dict:
    """Compute multiplier, verifier calls and hand-off time of a workload's requests.

    ``compute_multiplier_measured`` is the mean denoiser sample-steps per request over one
    trajectory's N steps; ``compute_multiplier_formula`` is m = k − (k−1)·s/N (they agree
    exactly without verifier failures; the difference is what backtracking adds)."""
    n = len(done)
    out = {
        "handoffs_per_request": done["handoffs"].mean() if n else math.nan,
        "handoff_transfer_s_mean": done["handoff_s"].mean() if n else math.nan,
        "handoff_queue_s_mean": done["handoff_wait_s"].mean() if n else math.nan,
    }
    if wl.kind == "branching_search":
        k, s, total = wl.candidates_k, wl.shared_steps, wl.total_steps
        out["compute_multiplier_formula"] = k - (k - 1) * s / total
        out["compute_multiplier_measured"] = done["sample_steps"].mean() / total if n else math.nan
        out["verifier_calls_per_request"] = done["verifier_calls"].mean() if n else math.nan
    return out


def _meets_slo(done: pd.DataFrame, slo) -> pd.Series:
    ok = pd.Series(True, index=done.index)
    for field, column in (("ttft_s", "ttft_s"), ("tpot_s", "tpot_s"), ("e2e_s", "e2e_s")):
        bound = getattr(slo, field)
        if bound is not None:
            values = done[column]
            ok &= values.isna() | (values <= bound)
    return ok


def fleet_table(pools: pd.DataFrame, summary: pd.DataFrame | None = None, econ=None) -> pd.DataFrame:
    """One row per fleet: accelerators by type, packed nodes/racks/empty slots, capex,
    opex per month, power (kW, MW), energy per day, own and rent cost per hour, and
    output tokens per second per provisioned facility MW (when ``summary`` is given).

    Pools of one accelerator type share nodes and racks (``fleets/packing.py``); each
    pool row carries its share, so the sums here are the packed integers."""
    pue = econ.pue if econ is not None else 1.0
    rows = []
    for fleet, g in pools.groupby("fleet", sort=False):
        by_type = g.groupby("accelerator", sort=False)["accelerators"].sum()
        it_max_kw = g["it_power_max_w"].sum() / 1e3
        it_avg_kw = g["it_power_avg_w"].sum() / 1e3
        row = {
            "fleet": fleet,
            "accelerators": " + ".join(f"{int(n)}× {a}" for a, n in by_type.items() if n),
            "accelerator_count": int(g["accelerators"].sum()),
            "nodes": int(round(g["nodes"].sum())),
            "racks": int(round(g["racks"].sum())),
            "empty_slots": int(round(g["empty_slots"].sum())),
            "capex_usd": g["capex_usd"].sum(),
            "opex_usd_per_month": g["opex_usd_per_month"].sum(),
            "it_power_max_kw": it_max_kw,
            "it_power_avg_kw": it_avg_kw,
            "it_power_max_mw": it_max_kw / 1e3,
            "facility_power_max_mw": it_max_kw * pue / 1e3,
            "it_energy_kwh_per_day": it_avg_kw * 24.0,
            "facility_energy_kwh_per_day": it_avg_kw * pue * 24.0,
            "cost_usd_per_hour": g["cost_usd_per_hour"].sum(),
            "own_cost_usd_per_hour": g["own_cost_usd_per_hour"].sum(),
            "rent_usd_per_hour": g["rent_usd_per_hour"].sum(min_count=1),
        }
        row["output_tokens_per_s_per_mw"] = _tokens_per_mw(summary, fleet, row["facility_power_max_mw"])
        rows.append(row)
    return pd.DataFrame(rows)


def _tokens_per_mw(summary: pd.DataFrame | None, fleet: str, facility_mw: float) -> float:
    if summary is None or summary.empty or facility_mw <= 0:
        return math.nan
    return float(summary.loc[summary["fleet"] == fleet, "output_tokens_per_s"].sum()) / facility_mw
