"""From a fleet run's raw rows to the tables planners read.

- ``pool_table``: per pool, over the measurement window [warmup_s, duration_s): busy
  fraction, MFU (achieved FLOP/s ÷ peak), memory-bandwidth utilisation, HBM occupancy
  (mean, peak), arithmetic intensity, racks, power and costs.
- ``workload_summary``: per workload, requests that arrived in the window: p50/p95/p99
  of TTFT, TPOT and E2E latency, throughput, SLO attainment, goodput, $/request and
  $/1M output tokens.

Stability: a run is flagged ``unstable`` when measured requests are still in flight after
the drain period (the queue grew faster than the fleet served it); its latency tails are
then not reported (NaN), because percentiles of the requests that happened to finish
would understate them.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sim.models.economics import attribute_costs, pool_costs
from sim.engine.core import FleetRun
from sim.scenario import Scenario, fleet_workloads

PERCENTILES = (50, 95, 99)


def pool_table(run: FleetRun, scenario: Scenario) -> pd.DataFrame:
    """Per-pool utilisation, capacity and cost rows (units in column names)."""
    window = scenario.duration_s - scenario.warmup_s
    rows = []
    for pool, raw in zip(run.pool_objects, run.pools.to_dict("records")):
        rows.append(_pool_row(pool, raw, window, run.end_s, scenario))
    return pd.DataFrame(rows)


def _pool_row(pool, raw: dict, window_s: float, end_s: float, scenario: Scenario) -> dict:
    replicas = pool.config.replicas
    replica_window_s = window_s * replicas
    slots = pool.config.max_batch if pool.family == "service" else 1
    busy = raw["busy_s"] / (replica_window_s * slots)
    row = {k: raw[k] for k in ("fleet", "pool", "accelerator", "model", "precision", "tp", "pp", "replicas")}
    row["busy_fraction"] = busy
    if pool.perf is not None:
        perf, layout = pool.perf, pool.layout
        memory = layout.replica_memory_bytes / pool.config.memory_utilization
        idle_s = max(replica_window_s - raw["busy_s"], 0.0)
        row.update(
            accelerators=layout.accelerators,
            nodes=layout.nodes,
            nodes_per_rack=layout.nodes_per_rack,
            racks=layout.racks,
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
        row.update(accelerators=0, nodes=0, nodes_per_rack=1, racks=0)
    busy_run = raw["busy_total_s"] / (end_s * replicas * slots) if end_s > 0 else 0.0
    row.update(pool_costs(pool, scenario.economics, busy))
    row["run_cost_usd_per_hour"] = pool_costs(pool, scenario.economics, min(busy_run, 1.0))["cost_usd_per_hour"]
    return row


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.nan


def costed_requests(run: FleetRun, pools: pd.DataFrame) -> pd.DataFrame:
    """Request rows with ``cost_usd`` and ``marginal_cost_usd``."""
    return attribute_costs(run.requests, pools, run.end_s, run.pool_shares)


def workload_summary(requests: pd.DataFrame, scenario: Scenario) -> pd.DataFrame:
    """One row per (fleet, workload) over measured requests (see module docstring)."""
    window = scenario.duration_s - scenario.warmup_s
    rows = []
    measured = requests[requests["measured"]]
    for fleet in requests["fleet"].unique():
        fleet_cfg = next(f for f in scenario.fleets if f.name == fleet)
        for name in fleet_workloads(scenario, fleet_cfg):
            g = measured[(measured["fleet"] == fleet) & (measured["workload"] == name)]
            rows.append(_workload_row(fleet, name, g, scenario, window))
    return pd.DataFrame(rows)


def _workload_row(fleet: str, name: str, g: pd.DataFrame, scenario: Scenario, window_s: float) -> dict:
    wl = scenario.workloads[name]
    done = g[g["status"] == "completed"]
    in_flight = int((g["status"] == "in_flight").sum())
    unstable = in_flight > 0
    row = {
        "fleet": fleet,
        "workload": name,
        "kind": wl.kind,
        "requests": len(g),
        "completed": len(done),
        "rejected": int((g["status"] == "rejected").sum()),
        "in_flight": in_flight,
        "unstable": unstable,
    }
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        values = done[metric].dropna().to_numpy()
        for p in PERCENTILES:
            key = f"{metric[:-2]}_p{p}_s"
            row[key] = float(np.percentile(values, p)) if len(values) and not unstable else math.nan
    meets = _meets_slo(done, wl.slo)
    row["throughput_rps"] = len(done) / window_s
    row["tokens_per_s_per_request_p50"] = float(done["tokens_per_s"].median()) if len(done) else math.nan
    row["output_tokens_per_s"] = done["output_tokens"].sum() / window_s
    row["slo_attainment"] = meets.sum() / len(g) if len(g) else math.nan
    row["slo_target"] = wl.slo.target
    row["goodput_rps"] = meets.sum() / window_s
    cost = done["cost_usd"].sum()
    row["cost_per_request_usd"] = cost / len(done) if len(done) else math.nan
    row["marginal_cost_per_request_usd"] = done["marginal_cost_usd"].mean() if len(done) else math.nan
    tokens = done["output_tokens"].sum()
    row["cost_per_1m_output_tokens_usd"] = cost / tokens * 1e6 if tokens else math.nan
    row.update(_search_columns(wl, done))
    if wl.kind == "image_diffusion":
        row.update(_image_columns(g, done, cost, window_s, unstable))
    return row


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


def fleet_table(pools: pd.DataFrame) -> pd.DataFrame:
    """One row per fleet: accelerators by type, capex, opex per month, IT power.

    Nodes belong to one pool (a replica's TP group never straddles pools), but racks are
    shared: the racks of one accelerator type are its pools' nodes packed
    ``nodes_per_rack`` at a time."""
    rows = []
    for fleet, g in pools.groupby("fleet", sort=False):
        by_type = g.groupby("accelerator", sort=False)["accelerators"].sum()
        rows.append(
            {
                "fleet": fleet,
                "accelerators": " + ".join(f"{int(n)}× {a}" for a, n in by_type.items() if n),
                "accelerator_count": int(g["accelerators"].sum()),
                "nodes": int(g["nodes"].sum()),
                "racks": _shared_racks(g),
                "capex_usd": g["capex_usd"].sum(),
                "opex_usd_per_month": g["opex_usd_per_month"].sum(),
                "it_power_max_kw": g["it_power_max_w"].sum() / 1e3,
                "it_power_avg_kw": g["it_power_avg_w"].sum() / 1e3,
                "cost_usd_per_hour": g["cost_usd_per_hour"].sum(),
            }
        )
    return pd.DataFrame(rows)


def _shared_racks(pools: pd.DataFrame) -> int:
    racks = 0
    for _, g in pools[pools["nodes"] > 0].groupby("accelerator", sort=False):
        racks += math.ceil(g["nodes"].sum() / g["nodes_per_rack"].min())
    return racks
