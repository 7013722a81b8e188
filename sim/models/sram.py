"""SRAM-resident and wafer-scale inference (Groq-like, Cerebras-like parts).

Such a machine keeps every weight in on-chip SRAM, so a model is spread over as many
*units* (chips or wafers) as its weights (plus the KV cache of the batch it serves)
need, with layers placed one after another.  A token then walks the whole layer chain,
and its time is set by latency, not by HBM bandwidth::

    t_token = layers · c · sqrt(layer_bytes / 1 GB)          on-unit traversal of a layer
            + hops · h                                      unit-to-unit latency
            + max(FLOP / (units · peak · η_c), bytes / (units · BW · η_m))   the roofline

- ``c`` (``sram_layer_latency_us_per_sqrt_gb``): a layer's weights fill an area of the 2D
  on-chip mesh proportional to its bytes; the activations cross it, a distance ∝ the
  square root of that area.  Cerebras: fitted on the published Llama-3.1-8B single-user
  rate (one wafer, no hops) and checked on Llama-3.1-70B (four wafers).
- hops: a layer that fits one unit adds no hop, and the chain crosses ``units − 1``
  boundaries (wafers over the scale-out fabric, ``h`` = ``scaleout_latency_s``); a layer
  spread over several chips (Groq: 1.7 GB per Llama-70B layer on 230 MB chips) costs
  three chip-to-chip latencies per layer (the hand-off to the next layer and two
  tensor-parallel reductions, after attention and after the MLP), ``h`` =
  ``sram_hop_latency_us``, fitted on Groq's published Llama-2-70B rate.
- the KV cache lives in SRAM too, so the batch is limited by what the units hold after the
  weights (:func:`max_users`).

Published per-user rates (the test's reference): Cerebras Inference, Llama-3.1-8B 1,800
and Llama-3.1-70B 450 tokens/s per user, 16-bit weights (Cerebras blog "Introducing
Cerebras Inference", 2024-08-27); Groq, Llama-2-70B about 300 tokens/s per user (Groq
press release, 2023).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fleets.catalog import Accelerator, Model
from sim.errors import UserError

GB = 1e9
TP_REDUCTIONS_PER_LAYER = 2  # after attention and after the MLP (Megatron sharding)


@dataclass(frozen=True, slots=True)
class SramStream:
    """One model on an SRAM machine at a given batch: size, time per token, power."""

    units: int  # chips or wafers holding weights + KV
    layer_units: float  # units one layer spans
    time_per_token_s: float
    layer_latency_s: float  # the c·sqrt term, all layers
    hop_latency_s: float  # the h term, all hops
    roofline_s: float
    power_w: float

    @property
    def tokens_per_s_per_user(self) -> float:
        return 1.0 / self.time_per_token_s


def _check(acc: Accelerator) -> None:
    if acc.memory_kind != "sram":
        raise UserError(f"accelerator '{acc.key}': the SRAM pipeline model needs memory_kind 'sram', "
                        f"got {acc.memory_kind!r}")
    if acc.sram_layer_latency_s_per_sqrt_gb is None or acc.sram_hop_latency_s is None:
        raise UserError(f"accelerator '{acc.key}': columns sram_layer_latency_us_per_sqrt_gb and "
                        f"sram_hop_latency_us must be set for an SRAM part")


def pipeline_latency_s(acc: Accelerator, model: Model, precision: str, units: int) -> tuple[float, float]:
    """(on-unit layer latency, unit-to-unit hop latency) of one forward through ``model``
    laid out over ``units`` chips/wafers, s (module docstring); (0, 0) for a part without
    the SRAM latency columns or a model without layers."""
    if acc.sram_layer_latency_s_per_sqrt_gb is None or acc.sram_hop_latency_s is None or not model.layers:
        return 0.0, 0.0
    layer_bytes = model.weight_bytes(precision) / model.layers
    layer_s = model.layers * acc.sram_layer_latency_s_per_sqrt_gb * math.sqrt(layer_bytes / GB)
    if layer_bytes > acc.memory_bytes:
        return layer_s, model.layers * (1 + TP_REDUCTIONS_PER_LAYER) * acc.sram_hop_latency_s
    return layer_s, (units - 1) * acc.sram_hop_latency_s


def units_needed(acc: Accelerator, model: Model, precision: str, batch: int = 1, context_tokens: int = 0) -> int:
    """Chips/wafers whose SRAM holds the weights plus ``batch`` KV caches of ``context_tokens``."""
    need = model.weight_bytes(precision) + batch * context_tokens * model.kv_bytes_per_token(precision)
    return max(1, math.ceil(need / acc.memory_bytes))


def max_users(acc: Accelerator, model: Model, precision: str, units: int, context_tokens: int) -> int:
    """Concurrent sequences of ``context_tokens`` whose KV fits ``units`` after the weights."""
    free = units * acc.memory_bytes - model.weight_bytes(precision)
    per_user = context_tokens * model.kv_bytes_per_token(precision)
    return max(0, int(free // per_user)) if per_user > 0 else 0


def single_stream(acc: Accelerator, model: Model, precision: str, batch: int = 1,
                  context_tokens: int = 0) -> SramStream:
    """Decode time per token of ``batch`` streams of ``model`` on ``acc`` (see module docstring).

    Raises:
        UserError: ``acc`` is not an SRAM part, lacks its latency columns, lacks a peak for
        ``precision``, or ``model`` has no layer count.
    """
    _check(acc)
    if not model.layers:
        raise UserError(f"model '{model.key}': no layer count; the SRAM pipeline model needs layers")
    units = units_needed(acc, model, precision, batch, context_tokens)
    weights = model.weight_bytes(precision)
    layer_units = weights / model.layers / acc.memory_bytes
    layer_s, hops_s = pipeline_latency_s(acc, model, precision, units)
    flops = 2.0 * model.active_params * batch
    bytes_moved = weights + batch * context_tokens * model.kv_bytes_per_token(precision)
    roofline_s = max(flops / (units * acc.peak_flops(precision) * acc.compute_efficiency),
                     bytes_moved / (units * acc.memory_bw_bytes_per_s * acc.bandwidth_efficiency))
    nodes = math.ceil(units / acc.accelerators_per_node)
    power_w = units * acc.tdp_w + nodes * acc.node_overhead_w
    return SramStream(units, layer_units, layer_s + hops_s + roofline_s, layer_s, hops_s, roofline_s, power_w)


def fit_layer_latency(acc: Accelerator, model: Model, precision: str, tokens_per_s: float) -> float:
    """The ``c`` (s per sqrt(GB)) that makes :func:`single_stream` give ``tokens_per_s`` for
    one user of a model whose layers each fit one unit (the hop term is kept)."""
    probe = single_stream(acc, model, precision)
    rest = 1.0 / tokens_per_s - probe.hop_latency_s - probe.roofline_s
    return rest / (model.layers * math.sqrt(model.weight_bytes(precision) / model.layers / GB))


def fit_hop_latency(acc: Accelerator, model: Model, precision: str, tokens_per_s: float) -> float:
    """The ``h`` (s) that makes :func:`single_stream` give ``tokens_per_s`` for one user (the
    on-unit layer term is kept)."""
    probe = single_stream(acc, model, precision)
    hops = probe.hop_latency_s / acc.sram_hop_latency_s if acc.sram_hop_latency_s else None
    if not hops:
        raise UserError(f"accelerator '{acc.key}': model '{model.key}' crosses no unit boundary; h not identifiable")
    return (1.0 / tokens_per_s - probe.layer_latency_s - probe.roofline_s) / hops
