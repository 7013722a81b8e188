"""Pools, nodes and racks: lay out identical replicas and check that the layout is feasible.

A pool is ``replicas`` copies of one model on one accelerator type, each replica spread
over ``tp`` (tensor parallel, inside one scale-up domain) x ``pp`` (pipeline stages)
accelerators (``ep`` per stage under expert parallelism).  The layout rules and the bytes
each replica holds are :mod:`sim.models.parallelism`'s; this module applies them to a
pool and adds the memory, node, rack and power checks.  :func:`place_pool` returns a
:class:`PoolLayout` with node, rack and power counts for the pool on its own, or raises
:class:`~sim.errors.PlacementError` explaining what to change.  A fleet's pools are then
packed together into shared nodes and racks by :func:`fleets.packing.pack_fleet`; costs
and power follow the packed layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.errors import PlacementError
from fleets.catalog import PRECISIONS, Accelerator, Model, default_attention_precision, default_kv_precision
from sim.models.parallelism import (
    LayoutError, check_degree, check_ep, check_pp, check_tp, replica_weight_bytes, stage_accelerators,
    stored_kv_bytes_per_token,
)

GB = 1e9
# Tolerance when dividing a power budget by node power (e.g. 18 x 6666.67 W in 120 kW).
POWER_FIT_TOLERANCE = 1e-6


@dataclass(frozen=True, slots=True)
class PoolLayout:
    """A feasible pool: counts, memory per replica (bytes) and power at full load (W)."""

    name: str
    accelerator: Accelerator
    model: Model
    precision: str
    tp: int
    pp: int
    replicas: int
    accelerators: int
    nodes: int
    nodes_per_rack: int
    racks: int
    replica_memory_bytes: float
    replica_weight_bytes: float
    replica_free_bytes: float
    node_power_w: float
    rack_power_w: float
    it_power_max_w: float
    ep: int = 1  # expert-parallel group (accelerators per pipeline stage when > 1)


def _fail(where: str, model: Model, acc: Accelerator, problem: str, fix: str) -> None:
    prefix = f"{where}: " if where else ""
    raise PlacementError(f"{prefix}cannot place model '{model.key}' ({model.name}) on "
                         f"accelerator '{acc.key}' ({acc.name}): {problem}. {fix}")


def _apply(rule, where, model, acc, *args) -> None:
    """Run a :mod:`sim.models.parallelism` rule; its LayoutError becomes a PlacementError
    naming the pool, the model and the accelerator."""
    try:
        rule(*args)
    except LayoutError as err:
        _fail(where, model, acc, err.problem, err.fix)


def _check_counts(tp, pp, replicas, memory_utilization, precision, model, acc, where):
    for label, value in (("tp", tp), ("pp", pp), ("replicas", replicas)):
        _apply(check_degree, where, model, acc, label, value)
    if not 0 < memory_utilization <= 1:
        _fail(where, model, acc, f"memory_utilization={memory_utilization!r} is not allowed",
              "Use a fraction in (0, 1], e.g. 0.9.")
    if precision not in PRECISIONS:
        _fail(where, model, acc, f"unknown precision {precision!r}",
              f"Allowed: {', '.join(PRECISIONS)}.")


def _check_precisions(precisions: dict[str, str], model, acc, where):
    """Every tensor's precision must be one the part has a published peak for (the engine
    would refuse it later with no field named)."""
    for field, value in precisions.items():
        if value not in acc.precisions:
            _fail(where, model, acc, f"{field}={value!r} has no published peak on this part",
                  f"Set {field} to one of: {', '.join(acc.precisions)}.")


def _check_layout(tp, pp, ep, model, acc, where):
    """The TP, PP and EP rules (:func:`sim.models.parallelism.check_tp`, ``check_pp``,
    ``check_ep``), in that order."""
    _apply(check_tp, where, model, acc, tp, model, acc)
    _apply(check_pp, where, model, acc, pp, model)
    _apply(check_ep, where, model, acc, ep, tp, model, acc)


def _check_memory(need: dict, have_bytes, tp, pp, precision, memory_utilization,
                  model, acc, where):
    need_bytes = sum(need.values())
    if need_bytes <= have_bytes:
        return
    parts = " + ".join(f"{k} {v / GB:.1f} GB" for k, v in need.items())
    _fail(where, model, acc,
          f"one replica ({precision}, tp={tp} x pp={pp}) needs {need_bytes / GB:.1f} GB "
          f"({parts}) but has {have_bytes / GB:.1f} GB ({tp * pp} x "
          f"{acc.memory_bytes / GB:.1f} GB x memory_utilization {memory_utilization})",
          f"Raise tp (up to {acc.scaleup_domain_size}) or pp, use a narrower precision "
          f"({', '.join(PRECISIONS)}), lower min_kv_tokens / min_activation_bytes, or pick "
          "an accelerator with more memory.")


def count_nodes(acc: Accelerator, tp: int, pp: int, replicas: int) -> int:
    """Nodes holding ``replicas`` x ``pp`` TP groups of ``tp`` accelerators.

    A TP group never straddles a node unless it is larger than a node (then the scale-up
    domain spans nodes, e.g. NVL72, and the group takes whole nodes).  Pipeline stages may
    sit on different nodes.  Equals ceil(accelerators / accelerators_per_node) whenever tp
    divides the node size.
    """
    groups = replicas * pp
    per_node = acc.accelerators_per_node
    if tp <= per_node:
        return math.ceil(groups / (per_node // tp))
    return groups * math.ceil(tp / per_node)


def _nodes_per_rack(acc, node_power_w, budget_w, nodes_per_rack, model, where) -> int:
    if node_power_w > budget_w * (1 + POWER_FIT_TOLERANCE):
        _fail(where, model, acc,
              f"one node draws {node_power_w / 1e3:.2f} kW at full load "
              f"({acc.accelerators_per_node} x {acc.tdp_w:.0f} W + "
              f"{acc.node_overhead_w:.0f} W overhead), over the rack power budget of "
              f"{budget_w / 1e3:.2f} kW", "Raise the pool's rack_power_budget_kw or pick another accelerator.")
    fit = math.floor(budget_w / node_power_w * (1 + POWER_FIT_TOLERANCE))
    if nodes_per_rack is None:
        return max(1, fit)
    if not isinstance(nodes_per_rack, int) or nodes_per_rack < 1 or nodes_per_rack > fit:
        _fail(where, model, acc,
              f"nodes_per_rack={nodes_per_rack!r} draws "
              f"{_kw(nodes_per_rack, node_power_w)} against a rack power budget of "
              f"{budget_w / 1e3:.2f} kW",
              f"Use an integer nodes_per_rack from 1 to {fit}, or raise the pool's rack_power_budget_kw.")
    return nodes_per_rack


def _kw(nodes, node_power_w) -> str:
    if isinstance(nodes, (int, float)):
        return f"{nodes * node_power_w / 1e3:.2f} kW"
    return "an undefined power"


def place_pool(*, name: str, accelerator: Accelerator, model: Model, precision: str,
               tp: int, pp: int, replicas: int, memory_utilization: float = 0.9,
               min_kv_tokens: int = 0, min_activation_bytes: float = 0.0,
               nodes_per_rack: int | None = None, rack_power_budget_w: float | None = None,
               where: str = "", ep: int = 1, kv_precision: str | None = None,
               attention_precision: str | None = None) -> PoolLayout:
    """Lay out a pool and check it (memory in bytes, power in W).

    Checks: tp, pp, replicas >= 1; memory_utilization in (0, 1]; precision in PRECISIONS;
    the weights', KV cache's and attention math's precisions (defaults:
    :func:`fleets.catalog.default_kv_precision`, :func:`default_attention_precision`) each
    with a published peak on the part; the layout rules of :mod:`sim.models.parallelism`
    (tp <= scaleup_domain_size and dividing the attention heads; pp <= model layers; ep
    below); weights + min_kv_tokens x the KV bytes a token takes across the TP group
    (:func:`sim.models.parallelism.stored_kv_bytes_per_token`, as the engine
    allocates) + min_activation_bytes <= tp x pp x memory_bytes x
    memory_utilization; one node and ``nodes_per_rack`` nodes fit the rack power budget
    (default: the accelerator's ``rack_power_budget_w``; default nodes_per_rack = as many
    as fit, at least 1).  Raises PlacementError naming ``where``, the model, the
    accelerator, the numbers and what to change.

    Expert parallelism (``ep`` > 1, MoE models only): each pipeline stage is a group of
    ``ep`` accelerators in one scale-up domain; ep must divide the routed experts and be a
    multiple of tp. Weights per replica: the experts once (n_experts / ep per accelerator)
    plus the shared part once per ep / tp attention group
    (:func:`sim.models.parallelism.replica_weight_bytes`).
    """
    acc = accelerator
    where = where or f"pool '{name}'"
    _check_counts(tp, pp, replicas, memory_utilization, precision, model, acc, where)
    kv_precision = kv_precision or default_kv_precision(precision)
    _check_precisions({"precision": precision, "kv_precision": kv_precision,
                       "attention_precision": attention_precision or default_attention_precision(kv_precision)},
                      model, acc, where)
    _check_layout(tp, pp, ep, model, acc, where)
    group = stage_accelerators(tp, ep)
    weight_bytes = replica_weight_bytes(model, precision, tp, ep)
    memory_bytes = group * pp * acc.memory_bytes * memory_utilization
    need = {"weights": weight_bytes,
            f"KV for {min_kv_tokens} tokens": min_kv_tokens * stored_kv_bytes_per_token(model, kv_precision, tp),
            "activations": float(min_activation_bytes)}
    _check_memory(need, memory_bytes, group, pp, precision, memory_utilization, model, acc, where)
    budget_w = acc.rack_power_budget_w if rack_power_budget_w is None else rack_power_budget_w
    node_power_w = acc.node_power_w
    per_rack = _nodes_per_rack(acc, node_power_w, budget_w, nodes_per_rack, model, where)
    nodes = count_nodes(acc, group, pp, replicas)
    return PoolLayout(
        name=name, accelerator=acc, model=model, precision=precision, tp=tp, pp=pp,
        replicas=replicas, accelerators=replicas * group * pp, nodes=nodes,
        nodes_per_rack=per_rack, racks=math.ceil(nodes / per_rack),
        replica_memory_bytes=memory_bytes, replica_weight_bytes=weight_bytes,
        replica_free_bytes=memory_bytes - weight_bytes, node_power_w=node_power_w,
        rack_power_w=min(nodes, per_rack) * node_power_w,
        it_power_max_w=nodes * node_power_w, ep=ep)
