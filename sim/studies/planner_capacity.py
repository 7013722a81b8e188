"""Analytic per-replica capacity (requests/s) from the roofline, for the planner's
starting point. It is optimistic on purpose (a full batch, no queueing, no stalls), so
``ceil(rate / capacity)`` is a lower bound on the replicas a pool needs; the planner
then refines the count by simulation and never trusts this number alone.

- autoregressive: batch b = min(max_batch, sequences whose prompt + output fit the KV
  cache); per request one prefill of the mean prompt P plus O decode iterations shared
  by b sequences at mean context P + O/2: capacity = 1 / (t_prefill(P) + O·t_decode(b)/b).
- image/video diffusion, branching search: b samples per denoiser step (max_batch, or
  fewer if their activations do not fit); m sample-steps per request (S, or
  k·N − (k−1)·s); capacity = b / (m · t_step(b)).
- diffusion LM: blocks of L tokens at mean context, E[steps] steps per block.

Any shape the estimate does not know gives ``inf`` (lower bound of one replica).
"""

from __future__ import annotations

import math

from sim.engine.shapes import cfg_mode
from sim.models.perf import PerfModel


def _mean(dist) -> float:
    try:
        return float(dist.mean)
    except (NotImplementedError, AttributeError, TypeError):
        return math.nan


def replica_capacity_rps(workload, pool) -> float:
    """Optimistic requests/s one replica of ``pool`` (an engine Pool) can serve."""
    perf: PerfModel | None = pool.perf
    if perf is None:
        return math.inf
    try:
        if workload.kind == "autoregressive":
            value = _ar_capacity(workload, pool, perf)
        elif workload.kind == "diffusion_lm":
            value = _dlm_capacity(workload, pool, perf)
        else:
            value = _picture_capacity(workload, pool, perf)
    except (AttributeError, TypeError, ValueError, ZeroDivisionError):
        return math.inf
    return value if value > 0 and math.isfinite(value) else math.inf


def _ar_capacity(workload, pool, perf: PerfModel) -> float:
    prompt, output = _mean(workload.prompt_tokens), max(_mean(workload.output_tokens), 1.0)
    batch = pool.config.max_batch
    if perf.kv_bytes_per_token > 0 and pool.kv_capacity_blocks:
        kv_tokens = pool.kv_capacity_blocks * pool.config.kv_block_tokens
        batch = max(1, min(batch, int(kv_tokens // (prompt + output))))
    decode = perf.decode_time_s(batch, batch * (prompt + output / 2.0))
    return 1.0 / (perf.prefill_time_s(max(int(prompt), 1)) + output * decode / batch)


def _picture_capacity(workload, pool, perf: PerfModel) -> float:
    model = perf.model
    cfg = model.default_cfg if getattr(workload, "cfg", None) is None else workload.cfg
    guidance = 2 if cfg else 1
    passes = 2 if cfg and cfg_mode(workload, model) == "sequential" else 1
    guidance //= passes  # sequential CFG: single-pass forwards, twice per step
    act = (model.activation_bytes_per_sample or 0.0) * guidance
    tokens = (model.latent_tokens or 0) * guidance
    if workload.kind == "branching_search":
        k, s, n = workload.candidates_k, workload.shared_steps, workload.total_steps
        sample_steps = k * n - (k - 1) * s
    else:
        sample_steps = workload.steps or model.default_steps
    batch = pool.config.max_batch
    if act > 0:
        batch = max(1, min(batch, int(pool.free_bytes // act)))
    flops = model.flops_per_step * guidance
    step = perf.time_s(batch * flops, perf.weight_bytes_read(batch * tokens) + batch * act, batch * tokens)
    return batch / (sample_steps * passes * step)


def _dlm_capacity(workload, pool, perf: PerfModel) -> float:
    prompt, output = _mean(workload.prompt_tokens), max(_mean(workload.output_tokens), 1.0)
    block = workload.block_tokens
    blocks = math.ceil(output / block)
    context = prompt + block * (blocks - 1) / 2.0
    per_request = perf.kv_bytes_per_token * (prompt + blocks * block)
    batch = pool.config.max_batch
    if per_request > 0:
        batch = max(1, min(batch, int(pool.free_bytes // per_request)))
    flops = perf.linear_flops_per_token * block + perf.attn_flops_per_pair * block * (context + block)
    bytes_moved = perf.kv_bytes_per_token * (context + block)
    step = perf.time_s(batch * flops, perf.weight_bytes_read(batch * block) + batch * bytes_moved, batch * block)
    steps = _mean(workload.steps) if workload.steps is not None else (perf.model.default_steps or 1)
    return batch / (blocks * steps * step + perf.prefill_time_s(max(int(prompt), 1)))
