"""A pool's operations resolved once (:class:`OpsPlan`): load times through the storage
tiers, the residency limits, the autoscaling policy with its cold start, and the failure
processes with their scopes. Built by :mod:`sim.fleet_plan` for a pool whose config sets
``residency``, ``autoscale`` or ``failures`` (:mod:`sim.operations`); read by the engine's
operations layer (:mod:`sim.engine.operations`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fleets.storage import load_time_s, storage_rate, tier
from sim.errors import PlacementError, UserError
from sim.models.economics import rental_rate
from sim.workloads.mix import adapter_bytes

HOUR_S = 3600.0


@dataclass(frozen=True)
class FailureMode:
    """One component's failures on a pool: ``rate_per_s`` over the whole pool (rate per
    GPU-hour × the pool's GPUs / 3600), what one takes down (``scope``: gpu, node, rack)
    and its ``units`` of that scope in the pool."""

    component: str
    rate_per_s: float
    scope: str
    units: int
    detection_s: float
    repair_s: float


@dataclass(frozen=True)
class OpsPlan:
    """A pool's operations (module docstring). Bytes, seconds; ``None`` where off."""

    gpus_per_replica: int
    gpus_per_node: int
    nodes_per_rack: int
    weight_bytes: float  # one replica's copy of its main model
    cold_load_s: float  # storage -> host -> HBM
    host_load_s: float  # host -> HBM (a host-cache hit)
    residency: object | None = None  # sim.operations.Residency
    adapter_bytes: float = 0.0
    adapter_load_s: float = 0.0
    autoscale: object | None = None  # sim.operations.Autoscale
    cold_start_s: float = 0.0  # a new replica: cold_load_s + warmup_s
    failures: tuple[FailureMode, ...] = ()
    spares: int = 0
    swap_s: float = 0.0
    retry: bool = True
    usd_per_gpu_hour: float = math.nan  # for the bill of powered hours (rental rate; NaN: none known)


def ops_plan(cfg, layout, main_model, workloads, economics, where: str) -> OpsPlan | None:
    """The :class:`OpsPlan` of pool config ``cfg`` laid out as ``layout`` (None when the
    pool sets no operations).

    Raises:
        UserError: unknown storage tier or host link; an adapter size that cannot be derived.
        PlacementError: a failure scope the layout cannot express."""
    if not cfg.operated:
        return None
    per_node = layout.accelerator.accelerators_per_node
    gpus = layout.accelerators // max(layout.replicas, 1)
    nodes = max(1, math.ceil(gpus / per_node))
    cold = host = 0.0
    if cfg.loading is not None:
        cold, host = _load_times(cfg.loading, layout.replica_weight_bytes, gpus, nodes, where)
    plan = dict(gpus_per_replica=gpus, gpus_per_node=per_node, nodes_per_rack=layout.nodes_per_rack,
                weight_bytes=layout.replica_weight_bytes, cold_load_s=cold, host_load_s=host,
                usd_per_gpu_hour=rental_rate(layout.accelerator.key, economics))
    if cfg.residency is not None:
        plan.update(residency=cfg.residency, **_adapters(cfg, main_model, workloads, gpus, nodes, where))
    if cfg.autoscale is not None:
        plan.update(autoscale=cfg.autoscale, cold_start_s=cold + cfg.autoscale.warmup_s)
    if cfg.failures is not None:
        plan.update(failures=_failure_modes(cfg.failures, layout, gpus, where), spares=cfg.failures.spares,
                    swap_s=cfg.failures.swap_s, retry=cfg.failures.in_flight == "retry")
    return OpsPlan(**plan)


def _load_times(loading, weight_bytes: float, gpus: int, nodes: int, where: str) -> tuple[float, float]:
    """(storage -> HBM, host -> HBM) seconds for ``weight_bytes`` (:func:`fleets.storage.load_time_s`)."""
    try:
        store, link = tier(loading.storage, "storage"), tier(loading.host_link, "host_link")
    except UserError as err:
        raise UserError(f"{where}.loading: {err}") from None
    rate = storage_rate(store, gpus, nodes, loading.devices)
    return (load_time_s(weight_bytes, rate, link.read_bytes_per_s, gpus, loading.pipelined),
            load_time_s(weight_bytes, None, link.read_bytes_per_s, gpus, loading.pipelined))


def _adapters(cfg, model, workloads, gpus: int, nodes: int, where: str) -> dict:
    mixes = [wl.mix for wl in workloads if getattr(wl, "mix", None) is not None and wl.mix.has_adapters]
    if not mixes:
        return {}
    try:
        size = max(adapter_bytes(m, model) for m in mixes)
    except ValueError as err:
        raise UserError(f"{where}: {err}") from None
    return {"adapter_bytes": size, "adapter_load_s": _load_times(cfg.loading, size, gpus, nodes, where)[0]}


def resident_extra_bytes(cfg, main_weight_bytes: float, model, workloads, where: str) -> float:
    """HBM per replica that residency takes from the KV/activation memory: the extra
    resident checkpoints and the adapter cache (bytes)."""
    if cfg.residency is None:
        return 0.0
    extra = (cfg.residency.resident_models - 1) * main_weight_bytes
    mixes = [wl.mix for wl in workloads if getattr(wl, "mix", None) is not None and wl.mix.has_adapters]
    if mixes:
        try:
            extra += cfg.residency.adapter_cache * max(adapter_bytes(m, model) for m in mixes)
        except ValueError as err:
            raise UserError(f"{where}: {err}") from None
    return extra


def lora_overhead_s(cfg, workloads) -> float:
    """Seconds added to every iteration of a pool serving LoRA adapters (0 otherwise)."""
    if cfg.residency is None or not any(getattr(wl, "mix", None) is not None and wl.mix.has_adapters
                                        for wl in workloads):
        return 0.0
    return cfg.residency.lora_step_overhead_s


def _failure_modes(failures, layout, gpus: int, where: str) -> tuple[FailureMode, ...]:
    total_gpus = layout.replicas * gpus
    units = {"gpu": total_gpus, "node": layout.nodes, "rack": layout.racks}
    modes = []
    for name, (rate, scope, detection_s, repair_s) in failures.rates().items():
        if units[scope] < 1:
            raise PlacementError(f"{where}.failures.{name}: the pool has no {scope} to fail")
        modes.append(FailureMode(name, rate * total_gpus / HOUR_S, scope, units[scope], detection_s, repair_s))
    return tuple(modes)
