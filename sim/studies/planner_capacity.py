"""Analytic per-replica capacity (requests/s) from the roofline, for the planner's
starting point, and a true lower bound on the replicas (:func:`replica_seconds_floor`).

The capacity is an *estimate* (a full batch, no queueing, no stalls, but mean context
and whole-sequence KV), so ``ceil(rate / capacity)`` is where the search starts and can
be above the simulated minimum: on a KV-limited pool it charges each sequence its whole
output's KV while the engine's blocks grow with the tokens generated so far.

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
    guidance, passes, sample_steps = _picture_work(workload, model)
    act = (model.activation_bytes_per_sample or 0.0) * guidance
    tokens = (model.latent_tokens or 0) * guidance
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


# --- a true lower bound ------------------------------------------------------------------

def replica_seconds_floor(workload, pool) -> float:
    """The fewest busy replica-seconds one mean request of ``workload`` can cost a replica
    of ``pool`` (an engine Pool), so that ``ceil(rate x floor / pp)`` replicas is a lower
    bound on any pool that keeps up with ``rate`` (at 100% busy, a replica supplies one
    busy replica-second per second).

    Best case everywhere: every iteration carries a full batch of ``max_batch``
    sequences or samples (so it reads the weights once for ``max_batch`` of them), no
    attention FLOP and no KV-cache or activation traffic, no queueing, no preemption,
    no verifier calls; what is left cannot be avoided by the engine's roofline
    (:meth:`sim.models.perf.PerfModel.time_s` = max(compute, memory) + interconnect +
    overhead per iteration, and Σ max(c, m) ≥ max(Σ c, Σ m)):

    - autoregressive: compute 2·N_active·(P + O) FLOP; O iterations per sequence, each
      shared by at most ``max_batch`` sequences and reading at least the weights of one
      token (MoE: the experts one token touches).
    - diffusion LM: blocks·E[steps] forwards of ``block_tokens`` tokens, plus the prompt
      prefill.
    - image/video diffusion, branching search: (sample-steps × CFG passes) denoiser
      forwards, ``max_batch`` samples sharing each.

    Means of the token/step distributions are used; every term is linear in them, so
    the mean request's floor is the mean of the requests' floors. 0 when the shape is
    unknown (a bound of one replica). Units: s."""
    perf: PerfModel | None = pool.perf
    if perf is None:
        return 0.0
    batch = max(int(pool.config.max_batch), 1)
    try:
        if workload.kind == "autoregressive":
            flops, forwards = _ar_floor_terms(workload, perf)
        elif workload.kind == "diffusion_lm":
            flops, forwards = _dlm_floor_terms(workload, perf)
        else:
            flops, forwards = _picture_floor_terms(workload, perf)
    except (AttributeError, TypeError, ValueError, ZeroDivisionError):
        return 0.0
    compute = flops / perf.compute_rate
    memory = forwards / batch * perf.weight_bytes_read(1.0) / perf.mem_rate
    value = max(compute, memory) + forwards / batch * (perf.overhead_s + perf.comm_time_s(1.0))
    return value if value > 0 and math.isfinite(value) else 0.0


def _ar_floor_terms(workload, perf: PerfModel) -> tuple[float, float]:
    """(linear FLOP of one request: 2·N_active·(P + O), forwards its sequence is in: O)."""
    prompt, output = _mean(workload.prompt_tokens), max(_mean(workload.output_tokens), 1.0)
    return perf.linear_flops_per_token * (prompt + output), output


def _dlm_floor_terms(workload, perf: PerfModel) -> tuple[float, float]:
    """(linear FLOP of the prompt and of every denoising forward over a block, the
    forwards: blocks x E[steps])."""
    prompt, output = _mean(workload.prompt_tokens), max(_mean(workload.output_tokens), 1.0)
    steps = _mean(workload.steps) if workload.steps is not None else (perf.model.default_steps or 1)
    forwards = math.ceil(output / workload.block_tokens) * steps
    return perf.linear_flops_per_token * (prompt + forwards * workload.block_tokens), forwards


def _picture_floor_terms(workload, perf: PerfModel) -> tuple[float, float]:
    """(denoiser FLOP of one request, denoiser forwards it takes part in)."""
    model = perf.model
    guidance, passes, sample_steps = _picture_work(workload, model)
    return sample_steps * passes * model.flops_per_step * guidance, sample_steps * passes


def _picture_work(workload, model) -> tuple[int, int, int]:
    """(samples per forward for guidance, CFG passes per step, sample-steps per request)
    of an image/video diffusion or branching-search request."""
    cfg = model.default_cfg if getattr(workload, "cfg", None) is None else workload.cfg
    passes = 2 if cfg and cfg_mode(workload, model) == "sequential" else 1
    guidance = (2 if cfg else 1) // passes  # sequential CFG: single-pass forwards, twice per step
    if workload.kind == "branching_search":
        k, s, n = workload.candidates_k, workload.shared_steps, workload.total_steps
        return guidance, passes, k * n - (k - 1) * s
    return guidance, passes, workload.steps or model.default_steps
