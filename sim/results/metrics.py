"""From a fleet run's raw rows to the pool and fleet tables planners read (the
per-workload summary is :mod:`sim.results.summary`).

- ``pool_table``: per pool, over the measurement window [warmup_s, duration_s): busy
  fraction, MFU (achieved FLOP/s ÷ peak), memory-bandwidth utilisation, HBM occupancy
  (mean, peak), arithmetic intensity, the performance model's band (``perf_band_pct``:
  ± % of its accelerator, from ``dcsim validate``), racks, power and costs, and the saturation signals
  sampled over time (:mod:`sim.results.saturation`: batch against ``max_batch``, KV
  occupancy, queue length, backlog trend).
- ``fleet_table``: per fleet, the pools summed: accelerators, capex, opex, power.
"""

from __future__ import annotations

import math

import pandas as pd

from sim.engine.core import FleetRun
from sim.engine.prefix_cache import TRAFFIC
from sim.fleet_plan import FleetPlan
from sim.models.economics import pool_activities, pool_costs
from sim.results.saturation import saturation_columns


def pool_table(run: FleetRun, admitted: dict[str, int]) -> pd.DataFrame:
    """Per-pool utilisation, capacity and cost rows (units in column names), from the
    fleet's plan (``run.plan``: layout, perf model, packing, economics) and what the run
    measured.

    ``admitted`` maps a workload to its measured requests not rejected (the summary's
    accumulators count them)."""
    plan = run.plan
    rows = []
    for pool, raw in zip(plan.pools, run.pools.to_dict("records")):
        row = _pool_row(pool, raw, plan.window.length_s, run.end_s, plan.economics)
        row.update(_pool_saturation(run, pool, plan, admitted))
        rows.append(row)
    return pd.DataFrame(rows)


def _pool_saturation(run: FleetRun, pool, plan: FleetPlan, admitted: dict[str, int]) -> dict:
    """Saturation columns (:mod:`sim.results.saturation`) of one pool, its backlog trend
    judged against the admitted arrival rate of the workloads it serves."""
    arrivals = sum(admitted.get(plan.names[w], 0) for w in set(pool.workloads))
    window = plan.window
    series = run.timeseries[run.timeseries["pool"] == pool.name] if len(run.timeseries) else run.timeseries
    if series.empty:
        return {}
    return saturation_columns(series, pool.config.replicas, pool.config.max_batch, window.warmup_s,
                              window.duration_s, arrivals / window.length_s)


def _pool_row(pool, raw: dict, window_s: float, end_s: float, econ) -> dict:
    replicas = pool.config.replicas
    replica_window_s = window_s * replicas
    slots = pool.config.max_batch if pool.family == "service" else 1
    busy = raw["busy_s"] / (replica_window_s * slots)
    row = {k: raw[k] for k in ("fleet", "pool", "accelerator", "model", "precision", "tp", "pp", "ep", "replicas")}
    row["busy_fraction"] = busy
    if getattr(pool.config, "prefix_cache", None) is not None:  # docs/kv-reuse.md
        row["prefix_hit_ratio"] = _ratio(raw["prefill_cached_tokens"], raw["prefill_prompt_tokens"])
        row["prefill_flops_saved"] = raw["prefill_flops_saved"]
        row["prefix_host_hit_ratio"] = _ratio(raw["prefill_host_tokens"], raw["prefill_prompt_tokens"])
        row["prefix_ssd_hit_ratio"] = _ratio(raw["prefill_ssd_tokens"], raw["prefill_prompt_tokens"])
        if pool.config.prefix_cache.shared_blocks:
            row["prefix_shared_hit_ratio"] = _ratio(raw["prefill_shared_tokens"], raw["prefill_prompt_tokens"])
        row.update(kv_tier_bytes(pool, raw))
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
            perf_band_pct=_band(perf.accelerator.efficiency_band_pct),
        )
    else:
        row.update(accelerators=0, nodes=0, nodes_per_rack=1, racks=0, empty_slots=0)
    busy_run = raw["busy_total_s"] / (end_s * replicas * slots) if end_s > 0 else 0.0
    a_c, a_m = pool_activities(pool, raw["busy_s"], raw["flops"], raw["bytes"])
    row.update(compute_activity=a_c, memory_activity=a_m)
    row.update(pool_costs(pool, econ, busy, a_c, a_m))
    run = pool_costs(pool, econ, min(busy_run, 1.0), a_c, a_m)
    busy_all = pool_costs(pool, econ, 1.0, a_c, a_m)  # every replica busy
    row.update(run_cost_usd_per_hour=run["cost_usd_per_hour"], run_own_cost_usd_per_hour=run["own_cost_usd_per_hour"],
               run_it_power_avg_w=run["it_power_avg_w"], busy_own_cost_usd_per_hour=busy_all["own_cost_usd_per_hour"])
    # the IT power line P(b) = idle + (busy - idle) x b at the run's activities: kW over time
    row.update(busy_total_s=raw["busy_total_s"], busy_slots=replicas * slots, run_end_s=end_s,
               it_power_idle_w=pool_costs(pool, econ, 0.0, a_c, a_m)["it_power_avg_w"],
               it_power_busy_w=busy_all["it_power_avg_w"])
    return row


def kv_tier_bytes(pool, raw: dict) -> dict:
    """A cached pool's KV traffic between its tiers in the window (docs/kv-reuse.md): each
    ``kv_<move>_blocks`` of the engine's pool frame (:data:`sim.engine.prefix_cache.TRAFFIC`)
    as ``kv_<move>_bytes`` = blocks × ``block_tokens`` × the model's KV bytes per token
    (the whole replica's, every GPU's shard)."""
    per_block = pool.config.prefix_cache.block_tokens * pool.perf.kv_bytes_per_token
    blocks = {name: raw.get(f"kv_{name}_blocks", math.nan) for name in TRAFFIC}
    return {f"kv_{name}_bytes": float(n * per_block) for name, n in blocks.items() if not math.isnan(n)}


def _band(pct: float | None) -> float:
    """The pool's performance-model band (±%, its accelerator's ``efficiency_band_pct``
    from dcsim validate's held-out residuals); NaN when the catalog gives none."""
    return math.nan if pct is None else float(pct)


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.nan


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
