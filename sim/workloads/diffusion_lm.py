"""Diffusion LMs: outputs as blocks of ``block_tokens`` refined in parallel over a few
denoising steps each, semi-autoregressively over blocks (LLaDA-style masked diffusion),
served by step-batched replicas."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from sim.workloads.autoregressive import LENGTHS_DEFAULT, beyond_context, default_lengths, draw_lengths, mean_lengths
from sim.workloads.base import WorkloadConfig, WorkloadKind, mean_of
from sim.workloads.checks import check_steps, check_token_counts
from sim.workloads.phases import DENOISE, PREFILL
from traffic.distributions import Distribution, sample_tokens

class DiffusionLMWorkload(WorkloadConfig):
    """Diffusion LM: outputs as blocks of ``block_tokens`` refined over ``steps`` denoising
    steps each (steps drawn once per request), semi-autoregressively over blocks."""

    kind: Literal["diffusion_lm"]
    prompt_tokens: Distribution | None = Field(None, description=LENGTHS_DEFAULT)
    output_tokens: Distribution | None = Field(None, description=LENGTHS_DEFAULT)
    block_tokens: int = Field(256, ge=1, le=4096)
    steps: Distribution | None = Field(None, description="denoising steps per block; default: the model's "
                                       "catalog default_steps (LLaDA-8B: 32)")

    @model_validator(mode="before")
    @classmethod
    def _default_lengths(cls, data):
        return default_lengths(data)


def diffusion_lm_phases(workload, perf, req) -> tuple[list[tuple], float]:
    """Phases of a diffusion-LM request on a replica with ``perf``
    (:class:`sim.models.perf.PerfModel`), and the KV-cache bytes it reserves for prompt and
    output (its activations are per phase): a prefill phase (one forward over the prompt
    with bidirectional attention, n² query-key pairs, which fills the KV cache), then one
    phase of ``req.steps`` steps per block of L tokens, attending to the committed context
    (read from the KV cache) and to the block itself. The first block is the first output."""
    block = workload.block_tokens
    prompt = req.prompt_tokens
    blocks = -(-req.output_tokens // block)
    kv = perf.kv_bytes_per_token
    pair = perf.attn_flops_per_pair
    linear = perf.linear_flops_per_token
    act = perf.model.activation_bytes_per_sample or 0.0
    # bidirectional attention (LLaDA-style masked diffusion): every prompt token attends to
    # every other, n² pairs, not the causal n²/2 of an autoregressive prefill
    prefill_flops = linear * prompt + pair * float(prompt) ** 2
    kernel = (perf.model.key,)
    phases = [(1, 1, prefill_flops, kv * prompt, prompt, False, act, PREFILL, kernel)]
    for i in range(blocks):
        context = prompt + i * block
        flops = linear * block + pair * block * (context + block)
        phases.append((req.steps, 1, flops, kv * (context + block), block, i == 0, act, DENOISE, kernel))
    return phases, kv * (prompt + blocks * block)


class DiffusionLM(WorkloadKind):
    kind = "diffusion_lm"
    config = DiffusionLMWorkload
    family = "step"
    model_kinds = ("diffusion_lm",)
    has_ttft = True
    per_token = True
    label = "diffusion LM"
    edit_fields = (("steps", "distribution", "denoising steps (one value, or choices: 4, 8, 16)", 1),)
    marker = "diamond"

    def check(self, name: str, wl) -> None:
        check_token_counts(name, wl)
        check_steps(name, wl.steps)

    def default_steps(self, wl, catalog) -> int | None:
        """The catalog's default steps of the model when the workload draws none."""
        return (catalog.model(wl.model).default_steps or 1) if wl.steps is None else None

    def draw(self, wl, shapes, rows, draws, default_steps) -> None:
        draw_lengths(wl, shapes, rows, draws)
        n = len(shapes.prompt)
        shapes.steps = (np.full(n, default_steps, dtype=np.int64) if default_steps is not None
                        else sample_tokens(wl.steps, draws.steps, n))

    def reject_reason(self, pool, wl, req) -> str:
        """``exceeds_max_context`` (prompt + whole blocks beyond the model's context) or
        ``exceeds_memory`` (its KV plus its largest phase's activations beyond a replica's
        free memory)."""
        blocks = -(-req.output_tokens // wl.block_tokens)
        if beyond_context(pool, req.prompt_tokens + blocks * wl.block_tokens):
            return "exceeds_max_context"
        phases, base = diffusion_lm_phases(wl, pool.perf, req)
        if base + max(p[1] * p[6] for p in phases) > pool.free_bytes:
            return "exceeds_memory"
        return ""

    def prepare(self, pool, wl, req) -> None:
        req.phases, req.reserved_bytes = diffusion_lm_phases(wl, pool.perf, req)

    def capacity_rps(self, wl, pool, perf) -> float:
        """Blocks of L tokens at mean context, E[steps] steps per block, b requests per
        forward (max_batch, or fewer if their KV does not fit), plus the prompt prefill."""
        prompt, output = mean_lengths(wl)
        output = max(output, 1.0)
        block = wl.block_tokens
        blocks = math.ceil(output / block)
        context = prompt + block * (blocks - 1) / 2.0
        per_request = perf.kv_bytes_per_token * (prompt + blocks * block)
        batch = pool.config.max_batch
        if per_request > 0:
            batch = max(1, min(batch, int(pool.free_bytes // per_request)))
        flops = perf.linear_flops_per_token * block + perf.attn_flops_per_pair * block * (context + block)
        bytes_moved = perf.kv_bytes_per_token * (context + block)
        step = perf.time_s(batch * flops, perf.weight_bytes_read(batch * block) + batch * bytes_moved, batch * block)
        steps = mean_of(wl.steps) if wl.steps is not None else (perf.model.default_steps or 1)
        return batch / (blocks * steps * step + perf.prefill_time_s(max(int(prompt), 1)))

    def floor_terms(self, wl, perf) -> tuple[float, float]:
        """(linear FLOP of the prompt and of every denoising forward over a block, the
        forwards: blocks x E[steps])."""
        prompt, output = mean_lengths(wl)
        output = max(output, 1.0)
        steps = mean_of(wl.steps) if wl.steps is not None else (perf.model.default_steps or 1)
        forwards = math.ceil(output / wl.block_tokens) * steps
        return perf.linear_flops_per_token * (prompt + forwards * wl.block_tokens), forwards
