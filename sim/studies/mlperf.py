"""MLPerf Inference benchmarks (v4.x, datacenter) as dcsim scenarios.

Benchmark rules (github.com/mlcommons/inference ``loadgen/mlperf.conf``):

- llama2-70b Server: p99 TTFT ≤ 2000 ms and p99 TPOT ≤ 200 ms; mixtral-8x7b the same;
  stable-diffusion-xl Server: p99 latency ≤ 20000 ms (``target_latency_percentile = 99``).
- Offline: every query is available at t = 0; the result is the throughput of a run of at
  least 600 s (``*.Offline.min_duration = 600000``).

Workload statistics (what dcsim draws; lengths are clipped lognormals, σ = 0.8 assumed):

- llama2-70b: OpenOrca subset of 24,576 prompts, input and output limited to 1024 tokens
  (``language/llama2-70b/README.md``: ``processorca.py --seqlen_limit=1024``); mean output
  294.45 tokens ("Tokens per sample" of the reference FP16 run, same README; the shared
  file's tokens/s ÷ samples/s gives 291.5). Mean input 300 tokens: ASSUMED (not found in
  the sources at hand).
- mixtral-8x7b: 15,000 prompts (OpenOrca, GSM8K, MBXP); mean output 145.9 tokens (the
  shared file's tokens/s ÷ samples/s, identical across its 16 systems); mean input 300
  tokens and a 2048-token cap: ASSUMED.
- stable-diffusion-xl: 1024×1024, 20 denoising steps with classifier-free guidance
  (MLPerf reference: EulerDiscrete, guidance 8), text encoders + UNet + VAE decode; dcsim's
  pipeline also runs the SD safety checker (0.06 % of the FLOP; not in MLPerf).

Simulation, kept short (a replica is independent of the others when queries are spread
evenly, so one replica is simulated and its rate multiplied by the replica count):

- Offline (default, :func:`analytic_offline_rate`): the saturated steady state of one
  replica in closed form, so that fitting and leave-one-accelerator-out cross-validation
  cost milliseconds.  LLM: continuous batching keeps B = min(max_batch, KV capacity /
  mean context) sequences running; every iteration decodes B tokens and, on average,
  prefills the B/E[out] prompts that replace finished sequences (Σn = B·E[in]/E[out],
  Σn² = B·E[in²]/E[out]); a running sequence holds on average
  E[in] + (E[out²] − E[out]) / (2 E[out]) tokens of context (length-biased: long outputs
  stay longer).  Admissions are whole prompts, k per iteration with k ~ Poisson(B/E[out])
  (the finished sequences they replace), and the iteration time is averaged over k: the
  max() of the roofline is convex, so averaging the prompts first would hide the compute
  bursts of the iterations that prefill.  Throughput = B / E[t_iteration].  SDXL: ``IMAGE_MAX_BATCH``
  images in lockstep through their phases (encode, 20 UNet steps, safety, VAE), each phase
  at its own stage's roofline (own weights, own arithmetic intensity) as the engine times
  co-located stages.  :func:`offline_rate` (the exact engine, a burst of
  queries at t ≈ 0, work done until the last admission divided by that time) is the second
  implementation the tests compare it with.
- Server: Poisson arrivals at λ/replicas on one replica (random routing thins a Poisson
  stream into Poisson streams); the highest λ meeting the constraints, with every measured
  request finished, is found by bisection.
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
from sim.studies.calibration import Point, family
from sim.engine.core import simulate
from sim.workloads.phases import BYTES, FLOPS, KERNEL, STEPS, TOKENS
from sim.workloads import picture_phases, picture_shape
from sim.models.parallelism import allowed_tp, stored_kv_bytes_per_token
from sim.models.perf import PerfModel, StagePerfs
from sim.scenario import parse_scenario
from traffic.distributions import LognormalDist

LENGTH_SIGMA = 0.8  # assumed spread of prompt/output lengths (log space)
LLM_MAX_BATCH = 256  # vLLM max_num_seqs default (docs.vllm.ai engine args)
IMAGE_MAX_BATCH = 8
KV_BUDGET_BATCH = LLM_MAX_BATCH  # a replica must hold this many mean-length sequences
OFFLINE_LLM_QUERIES = 2048  # per replica
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
class Benchmark:
    """One MLPerf benchmark: dataset lengths (tokens) and Server constraints (s)."""

    model: str
    input_mean: float = 0.0
    input_max: float = 0.0
    output_mean: float = 0.0
    output_max: float = 0.0
    ttft_p99_s: float | None = None
    tpot_p99_s: float | None = None
    latency_p99_s: float | None = None


BENCHMARKS = {
    "llama-2-70b": Benchmark("llama-2-70b", 300.0, 1024, 294.45, 1024, ttft_p99_s=2.0, tpot_p99_s=0.2),
    "mixtral-8x7b": Benchmark("mixtral-8x7b", 300.0, 2048, 145.9, 2048, ttft_p99_s=2.0, tpot_p99_s=0.2),
    "sdxl": Benchmark("sdxl", latency_p99_s=20.0),
}


@dataclass(frozen=True, slots=True)
class Layout:
    tp: int
    replicas: int


@cache
def length_dist(mean: float, cap: float) -> LognormalDist:
    """Lognormal (σ = :data:`LENGTH_SIGMA`) clipped to [1, cap] whose exact mean is ``mean``."""
    def gap(median: float) -> float:
        return LognormalDist(median=median, sigma=LENGTH_SIGMA, min=1, max=cap).mean - mean
    median = brentq(gap, 1.0, cap)
    return LognormalDist(median=median, sigma=LENGTH_SIGMA, min=1, max=cap)


def choose_layout(point: Point, catalog: Catalog) -> Layout:
    """The smallest TP (a divisor of the system's chips that the layout rules allow,
    :func:`sim.models.parallelism.allowed_tp`: dividing the model's attention heads,
    within a scale-up domain, up to 72 on an NVL72 rack) whose
    replica holds the weights plus KV cache for :data:`KV_BUDGET_BATCH` sequences of mean
    length at 90 % memory utilisation; the largest such TP if none does. SDXL: one
    replica per chip (MLPerf submitters run data-parallel UNets)."""
    if family(point.model) == "image":
        return Layout(1, point.count)
    acc = catalog.accelerator(point.accelerator)
    model = catalog.model(point.model)
    bench = BENCHMARKS[point.model]
    tokens = KV_BUDGET_BATCH * (bench.input_mean + bench.output_mean)
    kv_precision = default_kv_precision(point.precision)
    options = [tp for tp in allowed_tp(model, acc) if point.count % tp == 0]
    for tp in options:
        kv = tokens * stored_kv_bytes_per_token(model, kv_precision, tp)  # as the engine stores it
        if tp * acc.memory_bytes * MEMORY_UTILIZATION - model.weight_bytes(point.precision) >= kv:
            return Layout(tp, point.count // tp)
    return Layout(options[-1], point.count // options[-1])


def _scenario(point: Point, layout: Layout, arrival: dict, duration_s: float, warmup_s: float):
    bench = BENCHMARKS[point.model]
    if family(point.model) == "image":
        workload = {"kind": "image_diffusion", "model": "sdxl", "steps": 20, "cfg": True}
        max_batch = IMAGE_MAX_BATCH
    else:
        workload = {"kind": "autoregressive", "model": point.model,
                    "prompt_tokens": length_dist(bench.input_mean, bench.input_max).model_dump(),
                    "output_tokens": length_dist(bench.output_mean, bench.output_max).model_dump()}
        max_batch = LLM_MAX_BATCH
    pool = {"name": "sut", "accelerator": point.accelerator, "serves": ["bench"], "replicas": 1,
            "tp": layout.tp, "precision": point.precision, "max_batch": max_batch}
    return parse_scenario({
        "name": f"mlperf {point.point}", "seed": SEED, "duration_s": duration_s, "warmup_s": warmup_s,
        "drain_s": 3600.0, "sample_interval_s": SAMPLE_INTERVAL_S, "workloads": {"bench": {**workload, "arrival": arrival}},
        "fleets": [{"name": "sut", "pools": [pool]}], "engine": {"mode": "exact"},
    }, f"mlperf {point.point}")


def _work_units(requests, point: Point) -> np.ndarray:
    """Output tokens per request (LLM) or 1 per image."""
    if family(point.model) == "image":
        return np.ones(len(requests))
    return requests["output_tokens"].to_numpy(dtype=float)


def offline_rate(point: Point, layout: Layout, catalog: Catalog) -> float:
    """Saturated throughput of one replica (tokens/s or samples/s); see module docstring."""
    n = OFFLINE_IMAGE_QUERIES if family(point.model) == "image" else OFFLINE_LLM_QUERIES
    window_s = 1e-3
    scenario = _scenario(point, layout, {"kind": "poisson", "rate_per_s": n / window_s}, window_s, 0.0)
    req = simulate(scenario, catalog=catalog).requests
    end_s = float(req["admitted_at_s"].max())
    start = req["admitted_at_s"].to_numpy()
    done = req["done_at_s"].to_numpy()
    progress = np.clip((end_s - start) / np.maximum(done - start, 1e-12), 0.0, 1.0)
    return float((_work_units(req, point) * progress).sum() / end_s)


def _meets(point: Point, layout: Layout, catalog: Catalog, rate_per_s: float) -> bool:
    bench = BENCHMARKS[point.model]
    duration_s = max(SERVER_MIN_DURATION_S, SERVER_QUERIES / rate_per_s)
    scenario = _scenario(point, layout, {"kind": "poisson", "rate_per_s": rate_per_s},
                         duration_s, SERVER_WARMUP_FRACTION * duration_s)
    req = simulate(scenario, catalog=catalog).requests
    req = req[req["measured"]]
    if req.empty or (req["status"] != "completed").any():
        return False
    checks = ((bench.ttft_p99_s, "ttft_s"), (bench.tpot_p99_s, "tpot_s"), (bench.latency_p99_s, "e2e_s"))
    return all(bound is None or float(req[col].quantile(0.99)) <= bound for bound, col in checks)


def server_rate(point: Point, layout: Layout, catalog: Catalog, offline_per_replica: float) -> float:
    """Highest Poisson rate per replica (queries/s) meeting the Server constraints, times
    the mean work per query (tokens/s or samples/s)."""
    per_query = 1.0 if family(point.model) == "image" else length_dist(
        BENCHMARKS[point.model].output_mean, BENCHMARKS[point.model].output_max).mean
    lo, hi = 0.0, SERVER_SEARCH_CEILING * offline_per_replica / per_query
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2.0
        if _meets(point, layout, catalog, mid):
            lo = mid
        else:
            hi = mid
    return lo * per_query


def predict(point: Point, catalog: Catalog, analytic: bool = True) -> tuple[float, Layout]:
    """Predicted system throughput in the point's unit, and the layout used.

    Offline: :func:`analytic_offline_rate` (``analytic``) or the exact engine
    (:func:`offline_rate`); Server: exact-engine bisection from that Offline rate."""
    layout = choose_layout(point, catalog)
    rate = analytic_offline_rate if analytic else offline_rate
    per_replica = rate(point, layout, catalog)
    if point.scenario == "Server":
        per_replica = server_rate(point, layout, catalog, per_replica)
    return per_replica * layout.replicas, layout


QUANTILE_GRID = 2000  # midpoint quantiles for the moments of a clipped lognormal


@cache
def length_moments(mean: float, cap: float) -> tuple[float, float]:
    """(E[X], E[X²]) of :func:`length_dist` by midpoint quadrature over its quantiles."""
    dist = length_dist(mean, cap)
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
    if family(point.model) == "image":
        return _image_rate(point, catalog, perf)
    bench = BENCHMARKS[point.model]
    e_in, e_in2 = length_moments(bench.input_mean, bench.input_max)
    e_out, e_out2 = length_moments(bench.output_mean, bench.output_max)
    held = e_in + (e_out2 - e_out) / (2.0 * e_out)
    acc = catalog.accelerator(point.accelerator)
    free = layout.tp * acc.memory_bytes * MEMORY_UTILIZATION - perf.weight_bytes
    batch = float(LLM_MAX_BATCH)
    if perf.kv_bytes_per_token > 0:
        batch = max(1.0, min(batch, free / (perf.kv_bytes_per_token * held)))
    lam = batch / e_out  # prompts admitted per iteration on average
    ks = np.arange(int(lam + 12.0 * math.sqrt(lam) + 12.0))
    weights = poisson.pmf(ks, lam)
    t = sum(w * perf.mixed_cost(k * e_in, k * e_in2, batch, batch * held)[0] for k, w in zip(ks, weights))
    return batch / (t / weights.sum())


def _image_rate(point: Point, catalog: Catalog, perf: PerfModel) -> float:
    workload = _scenario(point, Layout(1, 1), {"kind": "poisson", "rate_per_s": 1.0}, 1.0, 0.0).workloads["bench"]
    phases = picture_phases(workload, picture_shape(workload, catalog))
    width = float(IMAGE_MAX_BATCH)
    # a batch of ``width`` images in lockstep: each phase at its own stage's roofline (its
    # own weights once per step, the batch's FLOP and activations), as the engine times it
    stages = StagePerfs(perf, catalog.model, perf.tp, 1)
    t_batch = 0.0
    for ph in phases:
        stage = stages.get(ph[KERNEL])
        tokens = width * ph[TOKENS]
        t_batch += ph[STEPS] * stage.time_s(width * ph[FLOPS], stage.weight_bytes_read(tokens) + width * ph[BYTES], tokens)
    return width / t_batch

