"""SRAM-resident and wafer-scale inference (Groq-like, Cerebras-like parts), from their
architecture.

Such a machine keeps every weight in on-chip SRAM, so a model is spread over as many
*units* (chips or wafers) as its weights (plus the KV cache of the batch it serves) need,
and it is laid out weight-stationary: the layers are placed one after another, each on a
region of the units whose share of the SRAM (and so of the SRAM bandwidth and the
compute) is its share of the bytes.  A token walks the layer chain (the pipeline depth is
the model's layers, ``layers / units`` per unit), so its time is::

    t_token = layers · (t_layer + max(f / B, 2·(f / bytes_per_param)·b / (peak·η_c)))
            + hops · h

- ``f`` (bytes): what each unit holds, (weights + b·context·KV bytes per token) / units:
  every layer's region holds and reads f/B worth of the unit's bandwidth, so one layer
  streams its weights in ``f / B`` whatever its size (a region of a fraction s of the
  unit reads s·f bytes at s·B).  B is the unit's published SRAM bandwidth; the compute
  term is the same region's share of the unit's peak for a batch of b tokens.
- ``t_layer`` (``sram_layer_latency_us``): the fixed latency of one layer on its region
  (the dependent matrix-vector products, their reductions across the region or across the
  chips a layer spans, the hand-off to the next layer); the one constant not given by a
  datasheet, fitted per vendor software stack on published single-user rates.
- hops: a layer that fits one unit adds no hop, and the chain crosses ``units − 1`` unit
  boundaries (wafer to wafer), each ``h`` (``sram_hop_latency_us``); a layer spread over
  several chips (Groq) has its chip-to-chip traffic inside ``t_layer`` and no separate hop.
- weights are held at the precision the vendor serves: 16-bit on Cerebras (Cerebras blog
  "Introducing Cerebras Inference", 2024-08-27: "native 16-bit weights"), 8-bit on Groq
  (TruePoint numerics, groq.com blog "Inside the LPU: Deconstructing Groq's Speed",
  2025-08-01; a Llama-2-70B on 576 chips x 230 MB = 132 GB cannot hold 16-bit weights).
- the KV cache lives in SRAM too, so the batch is limited by what the units hold after the
  weights (:func:`max_users`).

The engine (:class:`sim.models.perf.PerfModel`) adds :func:`pipeline_latency_s` (the chain
at batch 1) to every iteration and keeps its whole-machine roofline for the batch on top.
Fits, hold-outs and their errors: ``docs/models.md`` (SRAM machines) and
``tests/sim/models/test_sram.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fleets.catalog import BYTES_PER_PARAM, Accelerator, Model, check_precision
from sim.errors import UserError

GB = 1e9


@dataclass(frozen=True, slots=True)
class SramStream:
    """One model on an SRAM machine at a given batch: size, time per token, power."""

    units: int  # chips or wafers holding weights + KV
    layer_units: float  # units one layer spans
    time_per_token_s: float
    layer_latency_s: float  # layers · t_layer
    stream_s: float  # layers · max(f / B, compute of the batch on the region)
    hop_latency_s: float  # hops · h
    power_w: float

    @property
    def tokens_per_s_per_user(self) -> float:
        return 1.0 / self.time_per_token_s


def _check(acc: Accelerator) -> None:
    if acc.memory_kind != "sram":
        raise UserError(f"accelerator '{acc.key}': the SRAM pipeline model needs memory_kind 'sram', "
                        f"got {acc.memory_kind!r}")
    if acc.sram_layer_latency_s is None or acc.sram_hop_latency_s is None:
        raise UserError(f"accelerator '{acc.key}': columns sram_layer_latency_us and "
                        f"sram_hop_latency_us must be set for an SRAM part")


def held_bytes(model: Model, precision: str, batch: int = 0, context_tokens: int = 0) -> float:
    """Bytes the units hold: weights at ``precision`` plus ``batch`` KV caches of
    ``context_tokens`` (KV at the same precision)."""
    return model.weight_bytes(precision) + batch * context_tokens * model.kv_bytes_per_token(precision)


def hops(acc: Accelerator, model: Model, precision: str, units: int) -> int:
    """Unit boundaries the layer chain crosses: ``units − 1`` when a layer fits one unit,
    else 0 (a layer spread over chips pays its chip-to-chip traffic in ``t_layer``)."""
    layer_bytes = model.weight_bytes(precision) / model.layers
    return units - 1 if layer_bytes <= acc.memory_bytes else 0


def chain_s(acc: Accelerator, model: Model, precision: str, units: int, batch: int = 1,
            context_tokens: int = 0) -> tuple[float, float, float]:
    """(layers · t_layer, layers · per-layer region roofline, hops · h) of one token through
    ``model`` laid out over ``units`` chips/wafers for a batch of ``batch`` (module
    docstring), s."""
    fill = held_bytes(model, precision, batch, context_tokens) / units
    per_param = BYTES_PER_PARAM[check_precision(precision, f"model '{model.key}'")]
    compute = 2.0 * (model.weight_bytes(precision) / units / per_param) * batch
    region = max(fill / acc.memory_bw_bytes_per_s,
                 compute / (acc.peak_flops(precision) * acc.compute_efficiency))
    return (model.layers * acc.sram_layer_latency_s, model.layers * region,
            hops(acc, model, precision, units) * acc.sram_hop_latency_s)


def pipeline_latency_s(acc: Accelerator, model: Model, precision: str, units: int) -> tuple[float, float]:
    """(layer chain at batch 1, unit-to-unit hops) of one forward through ``model`` laid out
    over ``units`` chips/wafers, s (module docstring); (0, 0) for a part without the SRAM
    latency columns or a model without layers."""
    if acc.sram_layer_latency_s is None or acc.sram_hop_latency_s is None or not model.layers:
        return 0.0, 0.0
    layer_s, region_s, hop_s = chain_s(acc, model, precision, units)
    return layer_s + region_s, hop_s


def units_needed(acc: Accelerator, model: Model, precision: str, batch: int = 1, context_tokens: int = 0) -> int:
    """Chips/wafers whose SRAM holds the weights plus ``batch`` KV caches of ``context_tokens``."""
    return max(1, math.ceil(held_bytes(model, precision, batch, context_tokens) / acc.memory_bytes))


def max_users(acc: Accelerator, model: Model, precision: str, units: int, context_tokens: int) -> int:
    """Concurrent sequences of ``context_tokens`` whose KV fits ``units`` after the weights."""
    free = units * acc.memory_bytes - model.weight_bytes(precision)
    per_user = context_tokens * model.kv_bytes_per_token(precision)
    return max(0, int(free // per_user)) if per_user > 0 else 0


def single_stream(acc: Accelerator, model: Model, precision: str, batch: int = 1,
                  context_tokens: int = 0, units: int | None = None) -> SramStream:
    """Decode time per token of ``batch`` streams of ``model`` on ``acc`` over ``units``
    chips/wafers (default: as few as hold weights and KV; see module docstring).

    Raises:
        UserError: ``acc`` is not an SRAM part, lacks its latency columns, lacks a peak for
        ``precision``, ``model`` has no layer count, or ``units`` cannot hold the model.
    """
    _check(acc)
    if not model.layers:
        raise UserError(f"model '{model.key}': no layer count; the SRAM pipeline model needs layers")
    acc.peak_flops(precision)  # a part without a peak at this precision refuses it
    need = units_needed(acc, model, precision, batch, context_tokens)
    units = need if units is None else units
    if units < need:
        raise UserError(f"model '{model.key}' at {precision} needs {need} units of accelerator '{acc.key}'"
                        f" ({acc.memory_bytes / GB:g} GB each); got units={units}")
    layer_s, region_s, hop_s = chain_s(acc, model, precision, units, batch, context_tokens)
    layer_units = model.weight_bytes(precision) / model.layers / acc.memory_bytes
    nodes = math.ceil(units / acc.accelerators_per_node)
    power_w = units * acc.tdp_w + nodes * acc.node_overhead_w
    return SramStream(units, layer_units, layer_s + region_s + hop_s, layer_s, region_s, hop_s, power_w)


@dataclass(frozen=True, slots=True)
class RatePoint:
    """A published single-user decode rate: ``model`` at ``precision`` on ``units`` (None:
    as few as hold it) with ``context_tokens`` of KV, ``tokens_per_s`` per user."""

    model: Model
    precision: str
    tokens_per_s: float
    context_tokens: int = 0
    units: int | None = None


def _terms(acc: Accelerator, point: RatePoint) -> tuple[float, float, float]:
    """(layers, hops, the rest of the token time) of ``point``: t = layers·t_layer + hops·h + rest."""
    m = point.model
    units = point.units or units_needed(acc, m, point.precision, 1, point.context_tokens)
    _, region_s, _ = chain_s(acc, m, point.precision, units, 1, point.context_tokens)
    return float(m.layers), float(hops(acc, m, point.precision, units)), region_s


def fit_chain(acc: Accelerator, points: list[RatePoint], fit_hop: bool) -> tuple[float, float]:
    """(t_layer, h) in s that make :func:`single_stream` reproduce ``points``: with
    ``fit_hop`` both from two points (an exact 2x2 solve), else t_layer alone from one point
    (h kept at the part's). The streaming term is the datasheet's and is not fitted.

    Raises:
        UserError: the wrong number of points, or points that do not determine the constants.
    """
    rows = [_terms(acc, p) + (1.0 / p.tokens_per_s,) for p in points]
    if not fit_hop:
        if len(rows) != 1:
            raise UserError("fit_chain: t_layer alone is fitted on exactly one point")
        layers, n_hops, rest, t = rows[0]
        return (t - rest - n_hops * acc.sram_hop_latency_s) / layers, acc.sram_hop_latency_s
    if len(rows) != 2:
        raise UserError("fit_chain: t_layer and h are fitted on exactly two points")
    (l1, h1, r1, t1), (l2, h2, r2, t2) = rows
    det = l1 * h2 - l2 * h1
    if det == 0:
        raise UserError("fit_chain: the two points cross the same ratio of layers to hops; h is not identifiable")
    y1, y2 = t1 - r1, t2 - r2
    return (y1 * h2 - y2 * h1) / det, (l1 * y2 - l2 * y1) / det
