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

- Offline: a burst of queries at t ≈ 0 on one replica; throughput is the work done until
  the last query is admitted, divided by that time (the saturated rate: MLPerf's ≥ 600 s
  runs make the final drain a few percent; a short simulation would exaggerate it).
- Server: Poisson arrivals at λ/replicas on one replica (random routing thins a Poisson
  stream into Poisson streams); the highest λ meeting the constraints, with every measured
  request finished, is found by bisection.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
from scipy.optimize import brentq

from fleets.catalog import Catalog
from sim.studies.calibration import Point, family
from sim.engine.core import simulate
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
    """The smallest TP (a divisor of the system's chips, within a scale-up domain) whose
    replica holds the weights plus KV cache for :data:`KV_BUDGET_BATCH` sequences of mean
    length at 90 % memory utilisation; the largest such TP if none does. SDXL: one
    replica per chip (MLPerf submitters run data-parallel UNets)."""
    if family(point.model) == "image":
        return Layout(1, point.count)
    acc = catalog.accelerator(point.accelerator)
    model = catalog.model(point.model)
    bench = BENCHMARKS[point.model]
    kv = KV_BUDGET_BATCH * (bench.input_mean + bench.output_mean) * model.kv_bytes_per_token(point.precision)
    options = [tp for tp in (1, 2, 4, 8) if point.count % tp == 0 and tp <= acc.scaleup_domain_size]
    for tp in options:
        if tp * acc.memory_bytes * 0.9 - model.weight_bytes(point.precision) >= kv:
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
        "fleets": [{"name": "sut", "pools": [pool]}],
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


def predict(point: Point, catalog: Catalog) -> tuple[float, Layout]:
    """Predicted system throughput in the point's unit, and the layout used."""
    layout = choose_layout(point, catalog)
    per_replica = offline_rate(point, layout, catalog)
    if point.scenario == "Server":
        per_replica = server_rate(point, layout, catalog, per_replica)
    return per_replica * layout.replicas, layout

