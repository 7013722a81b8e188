"""``python -m sim.studies.genai_report``: the GenAI image-trace replay, and the check of
dcsim's predicted service times against the trace's own production execution times.

``replay SCENARIO``: the usual run report, then per fleet and image workload: queueing
delay p50/p95/p99 (arrival to first admission), images/s and $/image.

``check SCENARIO [--fleet NAME]``: for the first workload replaying a ``genai_csv`` trace,
one row per (task, images per prompt) over the trace's SUCCEED rows: the measured median
``exec_time_seconds`` beside dcsim's predicted service time of the same requests on
fleet NAME (default: the first), each request simulated alone on an idle replica (no
queueing, no batching with others: the whole pipeline of its own steps, images and
CFG). ``ratio`` = measured / predicted; ``implied_tflops`` = the request's denoiser
FLOP (dcsim's count; the denoiser is > 90% of an SDXL request) / measured median time:
the effective dense throughput the production hardware would have to deliver for dcsim's
FLOP count to take the measured time. Nothing is tuned to the trace. The production
time also contains what dcsim does not model (image upload, checkpoint and LoRA
loading: the trace has 86 base checkpoints and per-request LoRA adapters), so the
intercept of measured time against images per prompt is printed too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from sim.engine.core import simulate
from sim.engine.demand import WorkloadDemand
from sim.fleet_plan import resolve_fleet
from sim.errors import UserError
from sim.results.report_text import run_report, table
from sim.results.tables import run_scenario
from sim.overrides import override
from sim.scenario import Scenario, load_scenario
from traffic.genai_trace import TASKS

ISOLATION_GAP_S = 10_000.0  # first gap between the probe requests; widened until each runs alone
MAX_ISOLATION_GAP_S = 1e8  # a request slower than this alone (over 3 years) is refused


def replay_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Queueing percentiles, images/s and $/image of the image workloads, one row per fleet."""
    columns = ["fleet", "workload", "queue_p50_s", "queue_p95_s", "queue_p99_s", "images_per_s", "cost_per_image_usd"]
    images = summary[summary["kind"] == "image_diffusion"]
    return images[[c for c in columns if c in images]].reset_index(drop=True)


def _genai_workload(scenario: Scenario) -> str:
    for name, wl in scenario.workloads.items():
        if getattr(wl.arrival, "format", None) == "genai_csv":
            return name
    raise UserError(f"{scenario.name}: no workload replays a genai_csv trace (arrival.format: genai_csv)")


def _keys(arrival, rows: np.ndarray) -> pd.DataFrame:
    shapes = arrival.request_shapes(rows)
    return pd.DataFrame({"steps": shapes["steps"], "images": shapes["images"], "cfg": shapes["cfg"]})


def isolated_service(scenario: Scenario, name: str, fleet: str, keys: pd.DataFrame) -> pd.DataFrame:
    """Predicted service time (s) and denoiser FLOP of each distinct (steps, images, cfg),
    each request simulated alone on ``fleet`` (columns: the keys, service_s, flops).

    The probes arrive :data:`ISOLATION_GAP_S` apart; when one is still running (or
    unfinished) as the next arrives, the run is repeated with a gap twice the longest
    service time seen (at least twice the gap), so each probe finds the fleet idle.

    Raises:
        UserError: a probe does not finish alone within :data:`MAX_ISOLATION_GAP_S`."""
    distinct = keys.drop_duplicates().reset_index(drop=True)
    gap_s = ISOLATION_GAP_S
    while True:
        done = _probe_run(scenario, name, fleet, distinct, gap_s)
        service_s = (done["done_at_s"] - done["arrival_at_s"]).to_numpy(dtype=float)
        if np.isfinite(service_s).all() and (service_s < gap_s).all():
            break
        if gap_s >= MAX_ISOLATION_GAP_S:
            raise UserError(f"fleet {fleet!r}: an image request of workload {name!r} does not finish alone within "
                            f"{MAX_ISOLATION_GAP_S:g} s; check the fleet's pools for {name!r}")
        gap_s = min(MAX_ISOLATION_GAP_S, max(2 * gap_s, 2 * np.nanmax(service_s, initial=0.0)))
    distinct["service_s"] = service_s
    distinct["flops"] = done["denoiser_flops"].to_numpy(dtype=float)
    return distinct


def _probe_run(scenario: Scenario, name: str, fleet: str, distinct: pd.DataFrame, gap_s: float) -> pd.DataFrame:
    """The requests of one run of ``distinct`` probes arriving ``gap_s`` apart, by id."""
    n = len(distinct)
    arrival_s = np.arange(n) * gap_s
    probe = override(scenario, [("duration_s", n * gap_s), ("warmup_s", 0.0)], f"{scenario.name} (probes)")
    zeros = np.zeros(n, dtype=np.int64)
    demand = {w: WorkloadDemand(w, probe.workloads[w].kind, np.zeros(0), *(np.zeros(0, dtype=np.int64),) * 3, np.zeros(0))
              for w in probe.workloads}
    demand[name] = WorkloadDemand(
        name, "image_diffusion", arrival_s, zeros, zeros, distinct["steps"].to_numpy(np.int64), np.zeros(n),
        None, distinct["images"].to_numpy(np.int64), distinct["cfg"].to_numpy(np.int8),
    )
    return simulate(probe, fleet, demand=demand).requests.sort_values("request_id")


def loading_s(scenario: Scenario, fleet: str, name: str, checkpoint: np.ndarray, loras: np.ndarray) -> np.ndarray | None:
    """Seconds of loading each request pays alone on a replica of ``fleet``'s pool serving
    workload ``name`` (None when the pool has no residency): the ``resident_models`` most
    used checkpoints are in HBM (``switch_s`` to switch to one but the first), the next
    ``host_cache_models`` in host memory (the host link), any other comes from storage; plus
    one adapter load per LoRA (the trace names none, so none is cached). Times from the
    pool's resolved :class:`sim.ops_plan.OpsPlan`."""
    plan = resolve_fleet(scenario, [f.name for f in scenario.fleets].index(fleet))
    pool = next(p for p in plan.pools if name in p.config.serves)
    ops = pool.ops
    if ops is None or ops.residency is None:
        return None
    r = ops.residency
    switch = np.where(checkpoint == 0, 0.0, r.switch_s)
    host = np.where(checkpoint < r.resident_models + r.host_cache_models, ops.host_load_s, ops.cold_load_s)
    return np.where(checkpoint < r.resident_models, switch, host) + loras * ops.adapter_load_s


def measured_vs_predicted(scenario: Scenario, fleet: str | None = None) -> tuple[pd.DataFrame, dict]:
    """The check table (see module doc) and the affine fit of measured median time on
    images per prompt for TXT_2_IMG (``intercept_s``, ``per_image_s``)."""
    name = _genai_workload(scenario)
    arrival = scenario.workloads[name].arrival
    fleet = fleet or scenario.fleets[0].name
    trace = arrival.trace()
    rows = np.flatnonzero(trace.succeeded & (trace.images > 0) & (trace.steps > 0))
    keys = _keys(arrival, rows)
    predicted = isolated_service(scenario, name, fleet, keys)
    per_row = keys.merge(predicted, on=["steps", "images", "cfg"], how="left")
    frame = pd.DataFrame({
        "task": np.asarray(TASKS)[trace.task[rows]], "images": trace.images[rows], "measured_s": trace.exec_s[rows],
        "steps_requested": trace.steps[rows], "steps_run": per_row["steps"].to_numpy(),
        "cfg": per_row["cfg"].to_numpy(), "predicted_s": per_row["service_s"].to_numpy(),
        "loras": trace.loras[rows] if trace.loras is not None else np.zeros(len(rows), dtype=np.int64),
        "flops": per_row["flops"].to_numpy(),
    })
    loads = loading_s(scenario, fleet, name, trace.checkpoint[rows], trace.loras[rows]) if trace.checkpoint is not None \
        else None
    frame["predicted_loading_s"] = frame["predicted_s"] + (0.0 if loads is None else loads)
    accelerator = next(f for f in scenario.fleets if f.name == fleet).pools[0].accelerator
    out = frame.groupby(["task", "images"], sort=True).agg(
        requests=("measured_s", "size"), steps_run_median=("steps_run", "median"), cfg_share=("cfg", "mean"),
        measured_median_s=("measured_s", "median"), predicted_median_s=("predicted_s", "median"),
        predicted_loading_median_s=("predicted_loading_s", "median"), lora_share=("loras", lambda x: float((x > 0).mean())),
        flops_median=("flops", "median"),
    ).reset_index()
    out.insert(2, "accelerator", accelerator)
    out["ratio"] = out["measured_median_s"] / out["predicted_median_s"]
    out["implied_tflops"] = out["flops_median"] / out["measured_median_s"] / 1e12
    txt = out[(out["task"] == "TXT_2_IMG") & (out["requests"] >= 100)]
    if len(txt) < 2:
        return out.drop(columns="flops_median"), {}
    slope, intercept = np.polyfit(txt["images"], txt["measured_median_s"], 1)
    flops_per_image = np.polyfit(txt["images"], txt["flops_median"], 1)[0]
    predicted_slope = np.polyfit(txt["images"], txt["predicted_median_s"], 1)[0]
    loaded_slope, loaded_intercept = np.polyfit(txt["images"], txt["predicted_loading_median_s"], 1)
    return out.drop(columns="flops_median"), {
        "intercept_s": float(intercept), "per_image_s": float(slope), "predicted_per_image_s": float(predicted_slope),
        "predicted_loading_intercept_s": float(loaded_intercept), "predicted_loading_per_image_s": float(loaded_slope),
        "marginal_tflops": float(flops_per_image / slope / 1e12),
    }


def check_text(out: pd.DataFrame, fit: dict) -> str:
    headers = ["task", "images", "accelerator", "requests", "steps run (median)", "CFG share", "LoRA share",
               "measured median (s)", "predicted (s)", "with loading (s)", "measured/predicted", "implied TFLOP/s"]
    body = [[r.task, str(r.images), r.accelerator, str(r.requests), f"{r.steps_run_median:g}", f"{r.cfg_share:.0%}",
             f"{r.lora_share:.0%}", f"{r.measured_median_s:.1f}", f"{r.predicted_median_s:.2f}",
             f"{r.predicted_loading_median_s:.2f}", f"{r.measured_median_s / r.predicted_loading_median_s:.0f}×",
             f"{r.implied_tflops:.1f}"] for r in out.itertuples()]
    lines = [table(headers, body, right=[False, True, False] + [True] * 9)]
    if fit:
        lines.append(
            f"\nTXT_2_IMG medians, least squares over groups with ≥ 100 requests: measured ≈ {fit['intercept_s']:.1f} s "
            f"+ {fit['per_image_s']:.2f} s × images; predicted {fit['predicted_per_image_s']:.2f} s per image. The "
            f"marginal image costs the production hardware {fit['marginal_tflops']:.0f} TFLOP/s effective (dcsim's "
            f"denoiser FLOP per image / measured seconds per image)."
            f"\nWith loading (checkpoints and LoRA adapters through the pool's storage tiers, alone on a replica): "
            f"predicted ≈ {fit['predicted_loading_intercept_s']:.2f} s + {fit['predicted_loading_per_image_s']:.2f} s "
            f"× images; the rest of the intercept is time dcsim does not model."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.studies.genai_report", description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["replay", "check"])
    parser.add_argument("scenario", type=Path)
    parser.add_argument("--fleet", default=None)
    args = parser.parse_args(argv)
    try:
        scenario = load_scenario(args.scenario)
        if args.what == "replay":
            results = run_scenario(scenario)
            print(run_report(results))
            extra = replay_table(results.summary)
            body = [[r.fleet, r.workload, f"{r.queue_p50_s:.3f}", f"{r.queue_p95_s:.3f}", f"{r.queue_p99_s:.3f}",
                     f"{r.images_per_s:.4f}", f"${r.cost_per_image_usd:.4f}"] for r in extra.itertuples()]
            print("\nImage workloads: queueing delay (arrival to first admission) and images")
            print(table(["fleet", "workload", "queue p50 (s)", "p95 (s)", "p99 (s)", "images/s", "$/image"], body))
        else:
            out, fit = measured_vs_predicted(scenario, args.fleet)
            print(check_text(out, fit))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
