"""Autoregressive LLM requests: prefill of the prompt, then token-by-token decode with a
KV cache, served by continuous-batching replicas (:mod:`sim.engine.replica_ar`)."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from sim.workloads.base import RequestShapes, WorkloadConfig, WorkloadKind, mean_of
from sim.workloads.checks import check_token_counts
from traffic.distributions import AZURE_CONV_OUTPUT_LOGNORMAL, AZURE_CONV_PROMPT_LOGNORMAL, Distribution, sample_tokens


LENGTH_FIELDS = (("prompt_tokens", AZURE_CONV_PROMPT_LOGNORMAL), ("output_tokens", AZURE_CONV_OUTPUT_LOGNORMAL))


def default_lengths(data):
    """A workload's raw fields with the Azure conv fits filled in for the lengths it
    leaves unset (absent or null), unless its arrival replays a token trace: then they
    stay None and the trace rows' own lengths are used (:func:`draw_lengths`). The
    choice is thus a value of the validated model, never whether a field was given, so
    a scenario dumped and validated again (an override, a cell, a sweep point) draws
    exactly what it drew before."""
    if not isinstance(data, dict):
        return data
    arrival = data.get("arrival")
    if isinstance(arrival, dict) and arrival.get("kind") == "trace":
        return data
    missing = {field: dist.model_dump() for field, dist in LENGTH_FIELDS if data.get(field) is None}
    return {**data, **missing} if missing else data


LENGTHS_DEFAULT = ("default: a token trace replay's own per-row lengths; otherwise the Azure conv "
                   "lognormal fit (filled in at validation)")


class AutoregressiveWorkload(WorkloadConfig):
    """LLM requests: prefill of the prompt, then token-by-token decode with a KV cache.

    ``best_of_k`` > 1 samples k branches per request (autoregressive best-of-k): the prompt
    is prefilled once, its KV cache copied to every branch, and k sequences decode
    side by side (k× the KV cache and decode work; the request ends with its last branch).

    Default lengths are lognormals fitted to the Azure LLM inference trace 2023 (conv),
    github.com/Azure/AzurePublicDataset (CC-BY 4.0); see traffic.distributions."""

    kind: Literal["autoregressive"]
    prompt_tokens: Distribution | None = Field(None, description=LENGTHS_DEFAULT)
    output_tokens: Distribution | None = Field(None, description=LENGTHS_DEFAULT)
    best_of_k: int = Field(1, ge=1, le=64, description="branches per request, sharing a copied prompt KV")

    @model_validator(mode="before")
    @classmethod
    def _default_lengths(cls, data):
        return default_lengths(data)


def draw_lengths(wl, shapes: RequestShapes, rows, draws) -> None:
    """Prompt and output tokens of one window: drawn from the workload's distributions,
    or a trace replay's own per-row lengths where the workload sets none (None: see
    :func:`default_lengths`). Both streams are drawn either way, so setting one length
    does not shift the other's draws."""
    n = len(shapes.prompt)
    shapes.prompt = sample_tokens(wl.prompt_tokens or AZURE_CONV_PROMPT_LOGNORMAL, draws.prompt, n)
    shapes.output = sample_tokens(wl.output_tokens or AZURE_CONV_OUTPUT_LOGNORMAL, draws.output, n)
    if wl.prompt_tokens is None or wl.output_tokens is None:
        trace_prompt, trace_output = wl.arrival.lengths_of(rows)
        if wl.prompt_tokens is None:
            shapes.prompt = np.asarray(trace_prompt, dtype=np.int64)
        if wl.output_tokens is None:
            shapes.output = np.asarray(trace_output, dtype=np.int64)


def mean_lengths(wl) -> tuple[float, float]:
    """(mean prompt tokens, mean output tokens): the distributions' analytic means, or a
    trace replay's own (:meth:`traffic.arrivals.TraceArrivals.mean_lengths`) where the
    workload sets none."""
    trace = wl.arrival.mean_lengths() if wl.prompt_tokens is None or wl.output_tokens is None else (0.0, 0.0)
    return (trace[0] if wl.prompt_tokens is None else mean_of(wl.prompt_tokens),
            trace[1] if wl.output_tokens is None else mean_of(wl.output_tokens))


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
        prompt, output = mean_lengths(wl)
        output = max(output, 1.0)
        batch = pool.config.max_batch
        if perf.kv_bytes_per_token > 0 and pool.kv_capacity_blocks:
            kv_tokens = pool.kv_capacity_blocks * pool.config.kv_block_tokens
            batch = max(1, min(batch, int(kv_tokens // (prompt + output))))
        decode = perf.decode_time_s(batch, batch * (prompt + output / 2.0))
        return 1.0 / (perf.prefill_time_s(max(int(prompt), 1)) + output * decode / batch)

    def floor_terms(self, wl, perf) -> tuple[float, float]:
        """(linear FLOP of one request: 2·N_active·(P + O), forwards its sequence is in: O)."""
        prompt, output = mean_lengths(wl)
        output = max(output, 1.0)
        return perf.linear_flops_per_token * (prompt + output), output
