"""Throughput per accelerator at a per-user speed: the point of a throughput-interactivity
curve (SemiAnalysis InferenceMAX, TensorRT-LLM's DeepSeek-R1 guide) that a layout and a
batch reach.

For a replica of ``model`` on ``accelerator`` at a layout (tp, ep) running B sequences of
fixed input I and output O tokens in steady state, every step decodes B tokens and admits
on average B/O prompts of I tokens (as :func:`sim.studies.mlperf.analytic_offline_rate`,
Poisson admissions averaged over): the step time t is what every user waits between two
tokens, so the per-user speed is 1/t and the replica emits B/t output tokens/s. The best
point at a speed S is the largest B/t per accelerator over the layouts and batches with
1/t >= S and B within the KV cache. No speculative decoding (MTP, EAGLE): the published
batch-1 points that use it are faster than this by their acceptance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import poisson

from fleets.catalog import Accelerator, Catalog, Model
from sim.errors import UserError
from sim.models.parallelism import LayoutError, allowed_ep, allowed_tp, stage_accelerators
from sim.models.perf import PerfModel

MEMORY_UTILIZATION = 0.9  # share of HBM the engine may fill (the pool default)
BATCHES = tuple(sorted({1, 2, 4, 8} | {int(round(2 ** (k / 4))) for k in range(12, 57)}))  # 8 .. ~16k, 4 per octave


@dataclass(frozen=True, slots=True)
class CurvePoint:
    """One (layout, batch): output tokens/s per accelerator at a per-user speed."""

    tp: int
    ep: int
    batch: int
    accelerators: int
    tokens_per_s_per_user: float
    tokens_per_s_per_accelerator: float


def step_time_s(perf: PerfModel, batch: int, input_tokens: int, output_tokens: int) -> float:
    """Mean time of one steady-state step (decode of ``batch`` tokens plus the Poisson
    number of admitted prompts), s."""
    held = input_tokens + (output_tokens - 1) / 2.0
    lam = batch / output_tokens
    ks = np.arange(int(lam + 12.0 * math.sqrt(lam) + 12.0))
    weights = poisson.pmf(ks, lam)
    t = sum(w * perf.mixed_cost(k * input_tokens, k * input_tokens ** 2.0, batch, batch * held)[0]
            for k, w in zip(ks, weights))
    return t / weights.sum()


def _layouts(model: Model, acc: Accelerator, max_accelerators: int) -> list[tuple[int, int]]:
    out = []
    for tp in allowed_tp(model, acc):
        for ep in [1, *allowed_ep(tp, model, acc)]:
            if stage_accelerators(tp, ep) <= max_accelerators:
                out.append((tp, ep))
    return out


def curve(catalog: Catalog, accelerator: str, model: str, precision: str, input_tokens: int, output_tokens: int,
          max_accelerators: int = 8) -> list[CurvePoint]:
    """Every (layout, batch) point of ``model`` on ``accelerator`` at ``precision`` with
    replicas of at most ``max_accelerators`` chips whose KV cache holds the batch.
    Raises UserError for an unknown key or precision."""
    acc, m = catalog.accelerator(accelerator), catalog.model(model)
    points = []
    for tp, ep in _layouts(m, acc, max_accelerators):
        try:
            perf = PerfModel(acc, m, precision, tp=tp, ep=ep)
        except LayoutError:
            continue
        chips = stage_accelerators(tp, ep)
        free = chips * acc.memory_bytes * MEMORY_UTILIZATION - perf.weight_bytes
        per_sequence = perf.kv_bytes_per_token * (input_tokens + output_tokens) + perf.kv_bytes_per_sequence
        if free <= per_sequence:
            continue
        for batch in BATCHES:
            if batch * per_sequence > free:
                break
            t = step_time_s(perf, batch, input_tokens, output_tokens)
            points.append(CurvePoint(tp, ep, batch, chips, 1.0 / t, batch / t / chips))
    if not points:
        raise UserError(f"model '{model}' does not fit {max_accelerators} x '{accelerator}' at {precision}")
    return points


def best_at_speed(points: list[CurvePoint], tokens_per_s_per_user: float) -> CurvePoint | None:
    """The point of highest tokens/s per accelerator among those at least as fast per user
    as ``tokens_per_s_per_user``; None when none is."""
    fast = [p for p in points if p.tokens_per_s_per_user >= tokens_per_s_per_user]
    return max(fast, key=lambda p: p.tokens_per_s_per_accelerator) if fast else None
