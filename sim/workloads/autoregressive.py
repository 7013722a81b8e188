"""Autoregressive LLM requests: prefill of the prompt, then token-by-token decode with a
KV cache, served by continuous-batching replicas (:mod:`sim.engine.replica_ar`)."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field

from sim.workloads.base import RequestShapes, WorkloadConfig, WorkloadKind, mean_of
from sim.workloads.checks import check_token_counts
from traffic.distributions import AZURE_CONV_OUTPUT_LOGNORMAL, AZURE_CONV_PROMPT_LOGNORMAL, Distribution, sample_tokens


def azure_lognormal(dist):
    """A fresh copy of one of the Azure-trace length fits (a default value)."""
    return dist.model_copy()


class AutoregressiveWorkload(WorkloadConfig):
    """LLM requests: prefill of the prompt, then token-by-token decode with a KV cache.

    ``best_of_k`` > 1 samples k branches per request (autoregressive best-of-k): the prompt
    is prefilled once, its KV cache copied to every branch, and k sequences decode
    side by side (k× the KV cache and decode work; the request ends with its last branch).

    Default lengths are lognormals fitted to the Azure LLM inference trace 2023 (conv),
    github.com/Azure/AzurePublicDataset (CC-BY 4.0); see traffic.distributions."""

    kind: Literal["autoregressive"]
    prompt_tokens: Distribution = Field(default_factory=lambda: azure_lognormal(AZURE_CONV_PROMPT_LOGNORMAL))
    output_tokens: Distribution = Field(default_factory=lambda: azure_lognormal(AZURE_CONV_OUTPUT_LOGNORMAL))
    best_of_k: int = Field(1, ge=1, le=64, description="branches per request, sharing a copied prompt KV")


def draw_lengths(wl, shapes: RequestShapes, rows, draws) -> None:
    """Prompt and output tokens of one window: drawn from the workload's distributions,
    or a trace replay's own per-row lengths where the workload sets no distribution."""
    n = len(shapes.prompt)
    shapes.prompt = sample_tokens(wl.prompt_tokens, draws.prompt, n)
    shapes.output = sample_tokens(wl.output_tokens, draws.output, n)
    if wl.arrival.kind == "trace":
        trace_prompt, trace_output = wl.arrival.lengths_of(rows)
        if "prompt_tokens" not in wl.model_fields_set:
            shapes.prompt = np.asarray(trace_prompt, dtype=np.int64)
        if "output_tokens" not in wl.model_fields_set:
            shapes.output = np.asarray(trace_output, dtype=np.int64)


def beyond_context(pool, tokens: int) -> bool:
    """Whether ``tokens`` exceed the context of the pool's model (unbounded if unknown)."""
    return tokens > (pool.perf.model.max_context_tokens or math.inf)


class Autoregressive(WorkloadKind):
    kind = "autoregressive"
    config = AutoregressiveWorkload
    family = "ar"
    model_kinds = ("autoregressive",)
    has_ttft = True
    has_tpot = True
    per_token = True
    label = "AR"
    marker = "circle"

    def check(self, name: str, wl) -> None:
        check_token_counts(name, wl)

    def draw(self, wl, shapes, rows, draws, default_steps) -> None:
        draw_lengths(wl, shapes, rows, draws)

    def reject_reason(self, pool, wl, req) -> str:
        """``exceeds_max_context`` (prompt + output beyond the model's context) or
        ``exceeds_kv_capacity`` (its KV blocks, ×branches, beyond one replica's KV cache,
        or more branches than ``max_batch``)."""
        tokens = req.prompt_tokens + req.output_tokens
        if beyond_context(pool, tokens):
            return "exceeds_max_context"
        blocks = -(-tokens // pool.config.kv_block_tokens) * req.branches
        if blocks > pool.kv_capacity_blocks or req.branches > pool.config.max_batch:
            return "exceeds_kv_capacity"
        return ""

    def capacity_rps(self, wl, pool, perf) -> float:
        """Batch b = min(max_batch, sequences whose prompt + output fit the KV cache); per
        request one prefill of the mean prompt P plus O decode iterations shared by b
        sequences at mean context P + O/2: 1 / (t_prefill(P) + O·t_decode(b)/b)."""
        prompt, output = mean_of(wl.prompt_tokens), max(mean_of(wl.output_tokens), 1.0)
        batch = pool.config.max_batch
        if perf.kv_bytes_per_token > 0 and pool.kv_capacity_blocks:
            kv_tokens = pool.kv_capacity_blocks * pool.config.kv_block_tokens
            batch = max(1, min(batch, int(kv_tokens // (prompt + output))))
        decode = perf.decode_time_s(batch, batch * (prompt + output / 2.0))
        return 1.0 / (perf.prefill_time_s(max(int(prompt), 1)) + output * decode / batch)

    def floor_terms(self, wl, perf) -> tuple[float, float]:
        """(linear FLOP of one request: 2·N_active·(P + O), forwards its sequence is in: O)."""
        prompt, output = mean_of(wl.prompt_tokens), max(mean_of(wl.output_tokens), 1.0)
        return perf.linear_flops_per_token * (prompt + output), output
