"""MLPerf Inference datacenter benchmarks as dcsim sees them: dataset lengths, the latency
bounds of each scenario and the batch limit submitters configure.

Bounds (the values LoadGen enforces, github.com/mlcommons/inference ``loadgen/mlperf.conf``
at tag v5.1.1 @6776245e99dc, and for the v6.0 benchmarks at @b66003e10e2d; the rules
github.com/mlcommons/inference_policies ``inference_rules.adoc`` @8adac3167fe0 / @ac93e89c0c9a):

- Server and Interactive: Poisson arrivals, 99th-percentile TTFT and per-request TPOT
  bounds (``*.Server.target_latency_percentile = 99``); Interactive is the Server scenario
  of the ``<name>-interactive`` benchmark key with tighter bounds.
- SingleStream: one query at a time; the result is the 90th-percentile latency
  (``*.SingleStream.target_latency_percentile = 90``), no bound.
- Offline: every query at t = 0, throughput.

Lengths (tokens; what dcsim draws, clipped lognormals of :data:`LENGTH_SIGMA` in
:mod:`sim.studies.mlperf`, or a constant when the mean equals the cap):

- Mean outputs are the reference implementation's tokens per sample (``tokens_per_sample``
  in the rules' Datacenter table) or, where submissions generate otherwise, what their own
  Offline runs report: Tokens per second ÷ Samples per second of the v5.1 closed
  ``mlperf_log_summary.txt`` files (github.com/mlcommons/inference_results_v5.1
  @965182b03376): Llama 3.1 8B 128.0 in every submission (TensorRT-LLM and vLLM; NVIDIA's
  ``generation_config.json`` max_output_len 128 with stop tokens off), Llama 3.1 405B 652
  (median of the 20 Offline runs, 630-660; the reference's 684.68).
- Mean inputs are NOT published for any MLPerf LLM dataset (the datasets are downloaded
  at run time; the READMEs, mlperf.conf and the rules give only maxima). Every mean input
  here is ASSUMED, with its basis: Llama 2 70B 300 (OpenOrca questions, the earlier
  dcsim value); Mixtral 300; Llama 3.1 8B 950 (CNN/DailyMail articles: 781 word-level
  tokens on average in See et al. 2017, ACL, Table 1; x ~1.15 byte-pair tokens per word
  token for English news (ASSUMED), plus ~50 tokens of summarisation prompt and chat
  template, as the reference ``dataset.py`` wraps each article); Llama 3.1 405B
  9,400 (GovReport documents average 9,409 words, Huang et al. 2021, NAACL; LongBench and
  RULER items of 4k-16k tokens; max 20,000); DeepSeek-R1 800 and gpt-oss-120b 1,500
  (competition-math, GPQA and code prompts; maxima 3,136 and 15,330). ``dcsim validate``
  says so beside every point of these benchmarks.
- Batch limit: what the v5.1 closed submissions configure (the KV cache binds first on
  most systems): TensorRT-LLM ``gpu_batch_size`` in ``closed/*/configs/*/Offline/*.py``
  (llama2-70b 2048, mixtral-8x7b 3072-6144, llama3_1-8b 2048-6000, llama3_1-405b 128-512)
  and AMD's vLLM ``max_num_seqs`` in ``closed/AMD/code/*/harness_llm/models/*/offline_*.yaml``
  (llama2-70b 1792-3450), all @965182b03376.
- Token budget of one iteration (chunked prefill; it sets how long a prompt holds up the
  running decodes): TensorRT-LLM's runtime ``max_num_tokens`` in the same H200 configs
  (llama2-70b, llama3_1-8b and llama3_1-405b 1536, mixtral-8x7b 9216); dcsim's default
  8,192 (vLLM's ``max_num_batched_tokens``) where no config was read.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Bounds:
    """Latency bounds of one scenario (s): 99th-percentile TTFT and TPOT (LLMs) or
    99th-percentile end-to-end latency (image/video); None = no bound."""

    ttft_p99_s: float | None = None
    tpot_p99_s: float | None = None
    latency_p99_s: float | None = None


@dataclass(frozen=True, slots=True)
class Benchmark:
    """One MLPerf benchmark: dataset lengths (tokens), the bounds of its latency-bound
    scenarios, the batch limit submitters configure, and what of it is assumed."""

    model: str
    input_mean: float = 0.0
    input_max: float = 0.0
    output_mean: float = 0.0
    output_max: float = 0.0
    server: Bounds | None = None
    interactive: Bounds | None = None
    max_batch: int = 256
    steps: int | None = None  # image/video: denoising steps (with CFG)
    height_px: int | None = None
    width_px: int | None = None
    frames: int | None = None
    assumed: str = ""  # what is assumed, said beside every prediction
    prefill_budget_tokens: int = 8192  # tokens one iteration may carry (the engine's max_prefill_tokens)
    reserve_full_sequence: bool = False  # KV reserved for input + output at admission (no eviction)
    kv_fraction_of_free: float | None = None  # KV pool = this x (memory - weights); None: 90 % of memory - weights

    def bounds(self, scenario: str) -> Bounds | None:
        """The bounds of ``scenario`` ("Server", "Interactive"); None when the benchmark
        has no such scenario."""
        return {"Server": self.server, "Interactive": self.interactive}.get(scenario)


_INPUT_ASSUMED = "mean input {} tokens ASSUMED (MLPerf does not publish it; sim/studies/mlperf_benchmarks.py)"

BENCHMARKS = {
    "llama-2-70b": Benchmark("llama-2-70b", 300.0, 1024, 294.45, 1024, Bounds(2.0, 0.2), Bounds(0.45, 0.04),
                             max_batch=2048, prefill_budget_tokens=1536, assumed=_INPUT_ASSUMED.format(300)),
    "mixtral-8x7b": Benchmark("mixtral-8x7b", 300.0, 2048, 145.9, 2048, Bounds(2.0, 0.2), None,
                              max_batch=3072, prefill_budget_tokens=9216, assumed=_INPUT_ASSUMED.format(300)),
    "llama-3.1-8b": Benchmark("llama-3.1-8b", 950.0, 2048, 128.0, 128, Bounds(2.0, 0.1), Bounds(0.5, 0.03),
                              max_batch=2048, prefill_budget_tokens=1536, assumed=_INPUT_ASSUMED.format(950)),
    "llama-3.1-405b": Benchmark("llama-3.1-405b", 9400.0, 20000, 652.0, 2000, Bounds(6.0, 0.175),
                                Bounds(4.5, 0.08), max_batch=512, prefill_budget_tokens=1536,
                                assumed=_INPUT_ASSUMED.format(9400)),
    "deepseek-r1": Benchmark("deepseek-r1", 800.0, 3136, 3886.2274, 20000, Bounds(2.0, 0.08), Bounds(1.5, 0.015),
                             max_batch=2048, assumed=_INPUT_ASSUMED.format(800)),
    "gpt-oss-120b": Benchmark("gpt-oss-120b", 1500.0, 15330, 1278.2, 10240, Bounds(3.0, 0.08), Bounds(2.0, 0.015),
                              max_batch=2048, assumed=_INPUT_ASSUMED.format(1500)),
    "sdxl": Benchmark("sdxl", server=Bounds(latency_p99_s=20.0), max_batch=8, steps=20),
    "wan2.2-t2v-a14b": Benchmark("wan2.2-t2v-a14b", max_batch=1, steps=20, height_px=720, width_px=1280, frames=81),
}
"""Sources in the module docstring; SDXL: 20 steps with guidance at 1024x1024, Server p99
latency 20 s; Wan 2.2 T2V-A14B (MLPerf v6.0 text_to_video ``inference_config.yaml``
@b66003e10e2d): 720x1280, 81 frames, 20 steps, guidance on, Offline and SingleStream."""
