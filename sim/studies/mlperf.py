"""MLPerf Inference benchmarks (v4.x-v6.0, datacenter) as dcsim scenarios.

The benchmarks (lengths, Server and Interactive bounds, batch limits, sources) are in
:mod:`sim.studies.mlperf_benchmarks`. Scenarios:

- Offline (:func:`analytic_offline_rate`): the saturated steady state of one replica in
  closed form, so that fitting and leave-one-accelerator-out cross-validation cost
  milliseconds.  LLM: continuous batching keeps B = min(the benchmark's configured batch
  limit, KV capacity / mean context) sequences running; every iteration decodes B tokens
  and, on average, prefills the B/E[out] prompts that replace finished sequences
  (Σn = B·E[in]/E[out], Σn² = B·E[in²]/E[out]); a running sequence holds on average
  E[in] + (E[out²] − E[out]) / (2 E[out]) tokens of context (length-biased: long outputs
  stay longer).  Admissions are whole prompts, k per iteration with k ~ Poisson(B/E[out])
  (the finished sequences they replace), and the iteration time is averaged over k: the
  max() of the roofline is convex, so averaging the prompts first would hide the compute
  bursts of the iterations that prefill.  Throughput = B / E[t_iteration].  SDXL and video
  DiTs: a batch of images (videos) in lockstep through their phases (encode, denoising
  steps, safety, VAE), each phase at its own stage's roofline as the engine times
  co-located stages.  :func:`offline_rate` (the exact engine, a burst of queries at t ≈ 0,
  work done until the last admission divided by that time) is the second implementation
  the tests compare it with.
- Server and Interactive (:func:`server_rate`): Poisson arrivals at λ/replicas on one
  replica (random routing thins a Poisson stream into Poisson streams); the highest λ
  meeting the scenario's bounds, with every measured request finished, is found by
  bisection over exact-engine runs.
- SingleStream (:func:`singlestream_latency`): one query at a time on the whole system; the
  90th-percentile latency over the dataset's lengths (LLM: TTFT + decode at batch 1 for
  :data:`SINGLESTREAM_DRAWS` length pairs drawn with the fixed seed; image/video: the one
  request's phases at batch 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
from scipy.optimize import brentq
from scipy.special import ndtri
from scipy.stats import poisson

from fleets.catalog import Catalog, default_kv_precision
from sim.errors import UserError
from sim.studies.calibration import Point, family
from sim.studies.mlperf_benchmarks import BENCHMARKS, Benchmark, Bounds
from sim.engine.core import simulate
from sim.workloads.phases import BYTES, FLOPS, KERNEL, STEPS, TOKENS
from sim.workloads import picture_phases, picture_shape
from sim.models.parallelism import allowed_tp, stored_kv_bytes_per_token
from sim.models.perf import PerfModel, StagePerfs, decode_stretch_time_s
from sim.scenario import parse_scenario
from traffic.distributions import ConstantDist, LognormalDist

LENGTH_SIGMA = 0.8  # assumed spread of prompt/output lengths (log space)
LLM_MAX_BATCH = 256  # vLLM max_num_seqs default (docs.vllm.ai engine args)
IMAGE_MAX_BATCH = 8
KV_BUDGET_BATCH = 128  # a replica must hold this many mean-length sequences: the smallest batch
# limit the v5.1 submissions configure (llama3_1-405b gpu_batch_size 128 on B200); with it the
# rule picks the layouts they ran (70B TP1 on H200/B200, TP2 on H100; 405B 4 B200s, 8 H200s)
# trtllm-bench throughput (the vendor table's runs): max batch = KV capacity over requests
# reserved at input + output tokens (TensorRT-LLM's default GUARANTEED_NO_EVICT capacity
# scheduler), capped at 4096, from 95 % of the memory left after the weights
# (github.com/NVIDIA/TensorRT-LLM tensorrt_llm/bench/build/tuning.py calc_engine_setting /
# finetune_setting @04cba882; perf-overview.md: "--kv_cache_free_gpu_mem_fraction 0.95").
VENDOR_MAX_BATCH = 4096
VENDOR_KV_FRACTION = 0.95
SINGLESTREAM_DRAWS = 4000  # length pairs whose latencies give the 90th percentile
SINGLESTREAM_PERCENTILE = 90.0  # *.SingleStream.target_latency_percentile (mlperf.conf)
OFFLINE_LLM_QUERIES = 2048  # per replica, at least; 3 x the batch limit when larger (a steady state to measure)
OFFLINE_IMAGE_QUERIES = 160
SERVER_QUERIES = 1500  # expected arrivals per replica per bisection step
SERVER_MIN_DURATION_S = 120.0
SERVER_WARMUP_FRACTION = 0.25
BISECTION_STEPS = 8
SERVER_SEARCH_CEILING = 1.5  # × the Offline rate: the bisection's upper bracket
SAMPLE_INTERVAL_S = 30.0  # time-series sampling (unused here; coarse keeps runs cheap)
SEED = 20240828  # MLPerf v4.1 publication date
MEMORY_UTILIZATION = 0.9  # vLLM gpu_memory_utilization default (the pool default too)


@dataclass(frozen=True, slots=True)
class Layout:
    tp: int
    replicas: int


@cache
def length_dist(mean: float, cap: float):
    """Lognormal (σ = :data:`LENGTH_SIGMA`) clipped to [1, cap] whose exact mean is ``mean``;
    a constant when the mean is the cap (Llama 3.1 8B: every output is 128 tokens)."""
    if mean >= cap:
        return ConstantDist(value=cap)

    def gap(median: float) -> float:
        return LognormalDist(median=median, sigma=LENGTH_SIGMA, min=1, max=cap).mean - mean
    median = brentq(gap, 1.0, cap)
    return LognormalDist(median=median, sigma=LENGTH_SIGMA, min=1, max=cap)


def benchmark_of(point: Point) -> Benchmark:
    """The benchmark a point ran: its MLPerf benchmark, or for a vendor-table row its fixed
    lengths with the TensorRT-LLM batch limit of :data:`VENDOR_MAX_BATCH`."""
    if point.input_tokens and point.output_tokens:
        return Benchmark(point.model, float(point.input_tokens), float(point.input_tokens),
                         float(point.output_tokens), float(point.output_tokens), max_batch=VENDOR_MAX_BATCH,
                         reserve_full_sequence=True, kv_fraction_of_free=VENDOR_KV_FRACTION)
    return BENCHMARKS[point.model]


def choose_layout(point: Point, catalog: Catalog) -> Layout:
    """The smallest TP (a divisor of the system's chips that the layout rules allow,
    :func:`sim.models.parallelism.allowed_tp`: dividing the model's attention heads,
    within a scale-up domain, up to 72 on an NVL72 rack) whose
    replica holds the weights plus KV cache for :data:`KV_BUDGET_BATCH` sequences of mean
    length at 90 % memory utilisation; the largest such TP if none does. SDXL: one
    replica per chip (MLPerf submitters run data-parallel UNets). A video DiT: the
    largest allowed TP for SingleStream (one video at a time on every chip), else the
    smallest whose replica holds the weights and one video's activations."""
    if family(point.model) == "image":
        return Layout(1, point.count)
    if point.tp:
        return Layout(point.tp, max(1, point.count // point.tp))
    acc = catalog.accelerator(point.accelerator)
    model = catalog.model(point.model)
    options = [tp for tp in allowed_tp(model, acc) if point.count % tp == 0]
    if family(point.model) == "video":
        need = model.weight_bytes(point.precision) + (model.activation_bytes_per_sample or 0.0)
        fits = [tp for tp in options if tp * acc.memory_bytes * MEMORY_UTILIZATION >= need]
        tp = options[-1] if point.scenario == "SingleStream" or not fits else fits[0]
        return Layout(tp, point.count // tp)
    bench = benchmark_of(point)
    tokens = KV_BUDGET_BATCH * (bench.input_mean + bench.output_mean)
    kv_precision = default_kv_precision(point.precision)
    for tp in options:
        kv = tokens * stored_kv_bytes_per_token(model, kv_precision, tp)  # as the engine stores it
        if tp * acc.memory_bytes * MEMORY_UTILIZATION - model.weight_bytes(point.precision) >= kv:
            return Layout(tp, point.count // tp)
    return Layout(options[-1], point.count // options[-1])


def _workload(point: Point) -> tuple[dict, int]:
    """The scenario workload of a benchmark and the pool's max_batch."""
    bench = benchmark_of(point)
    fam = family(point.model)
    if fam == "llm":
        return ({"kind": "autoregressive", "model": point.model,
                 "prompt_tokens": length_dist(bench.input_mean, bench.input_max).model_dump(),
                 "output_tokens": length_dist(bench.output_mean, bench.output_max).model_dump()}, bench.max_batch)
    shape = {k: v for k, v in (("height_px", bench.height_px), ("width_px", bench.width_px),
                               ("frames", bench.frames)) if v}
    kind = "image_diffusion" if fam == "image" else "video_diffusion"
    return {"kind": kind, "model": point.model, "steps": bench.steps, "cfg": True, **shape}, bench.max_batch


def _scenario(point: Point, layout: Layout, arrival: dict, duration_s: float, warmup_s: float):
    workload, max_batch = _workload(point)
    pool = {"name": "sut", "accelerator": point.accelerator, "serves": ["bench"], "replicas": 1,
            "tp": layout.tp, "precision": point.precision, "max_batch": max_batch}
    if family(point.model) == "llm":
        pool["max_prefill_tokens"] = benchmark_of(point).prefill_budget_tokens
    return parse_scenario({
        "name": f"mlperf {point.point}", "seed": SEED, "duration_s": duration_s, "warmup_s": warmup_s,
        "drain_s": 3600.0, "sample_interval_s": SAMPLE_INTERVAL_S, "workloads": {"bench": {**workload, "arrival": arrival}},
        "fleets": [{"name": "sut", "pools": [pool]}], "engine": {"mode": "exact"},
    }, f"mlperf {point.point}")


def _work_units(requests, point: Point) -> np.ndarray:
    """Output tokens per request (LLM) or 1 per image or video."""
    if family(point.model) != "llm":
        return np.ones(len(requests))
    return requests["output_tokens"].to_numpy(dtype=float)


def offline_rate(point: Point, layout: Layout, catalog: Catalog) -> float:
    """Saturated throughput of one replica (tokens/s or samples/s); see module docstring."""
    n = max(OFFLINE_LLM_QUERIES, 3 * benchmark_of(point).max_batch) if family(point.model) == "llm" else OFFLINE_IMAGE_QUERIES
    window_s = 1e-3
    scenario = _scenario(point, layout, {"kind": "poisson", "rate_per_s": n / window_s}, window_s, 0.0)
    req = simulate(scenario, catalog=catalog).requests
    end_s = float(req["admitted_at_s"].max())
    start = req["admitted_at_s"].to_numpy()
    done = req["done_at_s"].to_numpy()
    progress = np.clip((end_s - start) / np.maximum(done - start, 1e-12), 0.0, 1.0)
    return float((_work_units(req, point) * progress).sum() / end_s)


def _meets(point: Point, layout: Layout, catalog: Catalog, rate_per_s: float, bounds: Bounds) -> bool:
    duration_s = max(SERVER_MIN_DURATION_S, SERVER_QUERIES / rate_per_s)
    scenario = _scenario(point, layout, {"kind": "poisson", "rate_per_s": rate_per_s},
                         duration_s, SERVER_WARMUP_FRACTION * duration_s)
    req = simulate(scenario, catalog=catalog).requests
    req = req[req["measured"]]
    if req.empty or (req["status"] != "completed").any():
        return False
    checks = ((bounds.ttft_p99_s, "ttft_s"), (bounds.tpot_p99_s, "tpot_s"), (bounds.latency_p99_s, "e2e_s"))
    return all(bound is None or float(req[col].quantile(0.99)) <= bound for bound, col in checks)


def server_rate(point: Point, layout: Layout, catalog: Catalog, offline_per_replica: float) -> float:
    """Highest Poisson rate per replica (queries/s) meeting the bounds of the point's
    scenario (Server or Interactive), times the mean work per query (tokens/s or
    samples/s). Raises UserError when the benchmark has no such scenario."""
    bench = benchmark_of(point)
    bounds = bench.bounds(point.scenario)
    if bounds is None:
        raise UserError(f"benchmark {point.benchmark!r} has no {point.scenario} scenario in dcsim's table")
    per_query = 1.0 if family(point.model) != "llm" else length_dist(bench.output_mean, bench.output_max).mean
    lo, hi = 0.0, SERVER_SEARCH_CEILING * offline_per_replica / per_query
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2.0
        if _meets(point, layout, catalog, mid, bounds):
            lo = mid
        else:
            hi = mid
    return lo * per_query


def singlestream_latency(point: Point, layout: Layout, catalog: Catalog) -> float:
    """90th-percentile latency (s) of one query at a time on one replica (module docstring)."""
    perf = _perf(point, layout, catalog)
    if family(point.model) != "llm":
        return 1.0 / _picture_rate(point, catalog, perf, width=1)
    bench = benchmark_of(point)
    rng = np.random.default_rng(SEED)
    prompts = length_dist(bench.input_mean, bench.input_max).sample(rng, SINGLESTREAM_DRAWS)
    outputs = length_dist(bench.output_mean, bench.output_max).sample(rng, SINGLESTREAM_DRAWS)
    line = perf.decode_line(1)
    latencies = [perf.prefill_time_s(int(p)) + decode_stretch_time_s(line, float(p), 1, int(o) - 1)
                 for p, o in zip(np.round(prompts), np.maximum(np.round(outputs), 1))]
    return float(np.percentile(latencies, SINGLESTREAM_PERCENTILE))


def predict(point: Point, catalog: Catalog, analytic: bool = True) -> tuple[float, Layout]:
    """Predicted value in the point's unit, and the layout used: system throughput for
    Offline, Server and Interactive; 90th-percentile latency (s) for SingleStream.

    Offline: :func:`analytic_offline_rate` (``analytic``) or the exact engine
    (:func:`offline_rate`); Server and Interactive: exact-engine bisection from that
    Offline rate."""
    layout = choose_layout(point, catalog)
    if point.scenario == "SingleStream":
        return singlestream_latency(point, layout, catalog), layout
    rate = analytic_offline_rate if analytic else offline_rate
    per_replica = rate(point, layout, catalog)
    if point.scenario in ("Server", "Interactive"):
        per_replica = server_rate(point, layout, catalog, per_replica)
    return per_replica * layout.replicas, layout


QUANTILE_GRID = 2000  # midpoint quantiles for the moments of a clipped lognormal


@cache
def length_moments(mean: float, cap: float) -> tuple[float, float]:
    """(E[X], E[X²]) of :func:`length_dist` by midpoint quadrature over its quantiles."""
    dist = length_dist(mean, cap)
    if isinstance(dist, ConstantDist):
        return dist.value, dist.value ** 2
    q = (np.arange(QUANTILE_GRID) + 0.5) / QUANTILE_GRID
    x = np.clip(np.exp(np.log(dist.median) + dist.sigma * ndtri(q)), dist.min, dist.max)
    return float(x.mean()), float((x * x).mean())


def _perf(point: Point, layout: Layout, catalog: Catalog) -> PerfModel:
    return PerfModel(catalog.accelerator(point.accelerator), catalog.model(point.model),
                     point.precision, layout.tp, 1)


def analytic_offline_rate(point: Point, layout: Layout, catalog: Catalog) -> float:
    """Saturated throughput of one replica in closed form (tokens/s or samples/s); the
    steady state described in the module docstring."""
    perf = _perf(point, layout, catalog)
    if family(point.model) != "llm":
        return _picture_rate(point, catalog, perf, width=BENCHMARKS[point.model].max_batch)
    bench = benchmark_of(point)
    e_in, e_in2 = length_moments(bench.input_mean, bench.input_max)
    e_out, e_out2 = length_moments(bench.output_mean, bench.output_max)
    held = e_in + (e_out2 - e_out) / (2.0 * e_out)
    batch = min(float(bench.max_batch), kv_batch_limit(perf, bench, layout, catalog.accelerator(point.accelerator), held))
    lam = batch / e_out  # prompts admitted per iteration on average
    ks = np.arange(int(lam + 12.0 * math.sqrt(lam) + 12.0))
    weights = poisson.pmf(ks, lam)
    t = sum(w * perf.mixed_cost(k * e_in, k * e_in2, batch, batch * held)[0] for k, w in zip(ks, weights))
    return batch / (t / weights.sum())


def kv_batch_limit(perf: PerfModel, bench: Benchmark, layout: Layout, acc, held_tokens: float) -> float:
    """Sequences the replica's KV cache holds: the KV pool (90 % of memory less the weights,
    or ``bench.kv_fraction_of_free`` of what the weights leave) over each sequence's
    reservation: its mean held context, or input + output when the stack reserves whole
    sequences (``bench.reserve_full_sequence``); at least 1, inf without a KV cache."""
    if perf.kv_bytes_per_token <= 0:
        return math.inf
    memory = layout.tp * acc.memory_bytes
    if bench.kv_fraction_of_free is None:
        free = memory * MEMORY_UTILIZATION - perf.weight_bytes
    else:
        free = (memory - perf.weight_bytes) * bench.kv_fraction_of_free
    tokens = bench.input_max + bench.output_max if bench.reserve_full_sequence else held_tokens
    return max(1.0, free / (perf.kv_bytes_per_token * tokens + perf.kv_bytes_per_sequence))


def _picture_rate(point: Point, catalog: Catalog, perf: PerfModel, width: int) -> float:
    """Images (videos) per second of a batch of ``width`` in lockstep through its phases."""
    workload = _scenario(point, Layout(perf.tp, 1), {"kind": "poisson", "rate_per_s": 1.0}, 1.0, 0.0).workloads["bench"]
    phases = picture_phases(workload, picture_shape(workload, catalog))
    # a batch of ``width`` images in lockstep: each phase at its own stage's roofline (its
    # own weights once per step, the batch's FLOP and activations), as the engine times it
    stages = StagePerfs(perf, catalog.model, perf.tp, 1)
    t_batch = 0.0
    for ph in phases:
        stage = stages.get(ph[KERNEL])
        tokens = width * ph[TOKENS]
        t_batch += ph[STEPS] * stage.time_s(width * ph[FLOPS], stage.weight_bytes_read(tokens) + width * ph[BYTES], tokens)
    return width / t_batch
