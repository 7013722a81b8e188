"""Pool-level operations config: model residency and loading, autoscaling, failures.

Each is optional on a pool (``PoolConfig.loading``, ``residency``, ``autoscale``,
``failures``); a pool without them runs as before (every replica warm, holding its one
model, never failing). What the engine does with them: :mod:`sim.engine.residency`,
:mod:`sim.engine.autoscale`, :mod:`sim.engine.failures`; the models and their sources:
``docs/operations.md``.

Defaults that are facts carry their source here:

- ``Autoscale.interval_s`` 15, ``up_delay_s`` 0, ``down_delay_s`` 300: Kubernetes
  HorizontalPodAutoscaler defaults (``--horizontal-pod-autoscaler-sync-period`` 15 s;
  ``behavior.scaleUp.stabilizationWindowSeconds`` 0, ``scaleDown`` 300;
  kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale, 2024).
- ``Residency.lora_step_overhead_s`` 0.002: Punica, arXiv 2310.18547 (MLSys 2024),
  abstract: batched LoRA serving "only adding 2ms latency per token" (SGMV kernel, 7B-70B
  Llama on A100); secondary (abstract), applied per iteration (one token per sequence).
- ``Failures.detection_s`` 300: Meta RSC health checks run every 5 minutes (Kokolis et
  al., arXiv 2410.21680, HPCA 2025); an upper bound on detection; secondary.
- the ``llama3`` preset: Llama 3 paper arXiv 2407.21783 section 3.3.4 Table 5, see
  :data:`LLAMA3_COUNTS`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from sim.workloads.base import MAX_SPAN_S, Strict

LLAMA3_GPU_HOURS = 16_384 * 54 * 24
"""GPU-hours of the Llama 3 405B pre-training snapshot: 16,384 H100 over 54 days."""
LLAMA3_COUNTS = {
    # component: (unexpected interruptions in 54 days, Table 5 categories summed)
    "gpu": (148 + 19 + 17 + 6 + 6, "faulty GPU 148, GPU SRAM 19, GPU system processor 17, silent data corruption 6, "
            "thermal interface + sensor 6"),
    "hbm": (72, "GPU HBM3 memory 72"),
    "host": (32 + 3 + 3 + 2 + 2 + 2 + 2, "unplanned host maintenance 32, SSD 3, power supply 3, server chassis 2, "
             "IO expansion board 2, CPU 2, system memory 2"),
    "nic": (7, "network interface card 7"),
    "switch": (35, "network switch/cable 35"),
    "software": (54 + 7 + 2, "software bug 54, NCCL watchdog timeouts 7, dependency 2"),
}
"""Llama 3 paper (arXiv 2407.21783) section 3.3.4 Table 5: 419 unexpected interruptions in
54 days on 16,384 H100 80GB (secondary: the counts as transcribed identically by
glennklockwood.com/garden/component-reliability and datacenterdynamics.com; the paper
prints "faulty GPU 148" as 30.1 %, but 148 / 419 = 35.3 %; every other percentage is its
count / 419 and the counts sum to 419). Rates per GPU-hour are count / LLAMA3_GPU_HOURS."""
SCOPES = {"gpu": "gpu", "hbm": "gpu", "software": "gpu", "host": "node", "nic": "node", "switch": "rack"}
"""What a component's failure takes down: the replica holding the GPU, every replica on
the node, or every replica in the rack (the node's top-of-rack switch)."""


class Loading(Strict):
    """Where a replica's weights come from: a storage tier into host memory, then the host
    link into HBM (``fleets/data/storage_tiers.csv`` keys; :func:`fleets.storage.load_time_s`)."""

    storage: str = Field(description="storage tier key (tier storage) of fleets/data/storage_tiers.csv")
    devices: int = Field(1, ge=1, le=64, description="drives per node, for a tier given per drive")
    host_link: str = Field("host-pcie5-x16", description="host link tier key (tier host_link)")
    pipelined: bool = Field(False, description="chunks stream through both tiers at once (ServerlessLLM); "
                            "false: read whole into host memory, then copy (safetensors)")


class Residency(Strict):
    """Several checkpoints (of the pool's model architecture) and LoRA adapters on one pool.

    A replica runs one checkpoint at a time; it holds ``resident_models`` in HBM (switching
    between them costs ``switch_s``), and ``host_cache_models`` more in host memory (a hit
    crosses only the host link); any other is loaded from storage. Adapters batch with
    any request of their base (S-LoRA / Punica); ``adapter_cache`` of them stay per
    replica."""

    resident_models: int = Field(1, ge=1, le=1024, description="checkpoints held in HBM per replica "
                                 "(their weights are taken from the KV/activation memory)")
    host_cache_models: int = Field(0, ge=0, le=100_000, description="checkpoints kept in host memory per node")
    switch_s: float = Field(0.0, ge=0, le=3600, description="switch between two HBM-resident checkpoints")
    adapter_cache: int = Field(8, ge=1, le=100_000, description="LoRA adapters held per replica (LRU)")
    lora_step_overhead_s: float = Field(0.002, ge=0, le=10, description="added to every iteration of a pool "
                                        "serving adapters (Punica: 2 ms per token)")
    routing: Literal["affinity", "any"] = Field("affinity", description="affinity: prefer a replica that "
                                                "runs or holds the request's checkpoint; any: the router's choice")


class Autoscale(Strict):
    """Replicas powered on and off with demand: every ``interval_s`` the wanted count is
    ceil(metric total / target), clamped to [min_replicas, max_replicas (the pool's
    ``replicas``)]; it must hold for ``up_delay_s`` (``down_delay_s``) before acting. A new
    replica is billed from the decision and serves after its cold start (weights loaded
    through ``loading`` + ``warmup_s``); a removed one drains, then powers off."""

    metric: Literal["outstanding", "busy"] = Field(
        "outstanding", description="outstanding: requests queued or running per serving replica; "
        "busy: the fraction of the last interval the serving replicas were busy")
    target: float = Field(gt=0, le=1e6)
    min_replicas: int = Field(1, ge=1, le=100_000)
    initial_replicas: int | None = Field(None, ge=1, le=100_000, description="default: min_replicas")
    interval_s: float = Field(15.0, gt=0, le=MAX_SPAN_S)
    up_delay_s: float = Field(0.0, ge=0, le=MAX_SPAN_S)
    down_delay_s: float = Field(300.0, ge=0, le=MAX_SPAN_S)
    warmup_s: float = Field(0.0, ge=0, le=3600, description="engine start after the weights are in HBM "
                            "(CUDA graphs, KV allocation); not sourced: set yours")


class Component(Strict):
    """One failure mode: a rate per GPU-hour of the pool, what it takes down, and how
    long until it is noticed and fixed (defaults: the ``failures`` block's)."""

    rate_per_gpu_hour: float = Field(ge=0, le=1)
    scope: Literal["gpu", "node", "rack"] | None = Field(None, description="default: the component's "
                                                         "(gpu, hbm, software: gpu; host, nic: node; switch: rack)")
    detection_s: float | None = Field(None, ge=0, le=MAX_SPAN_S)
    repair_s: float | None = Field(None, ge=0, le=MAX_SPAN_S)


class Failures(Strict):
    """Hardware that fails and is repaired. Failures arrive as a Poisson process per
    component (rate × the pool's GPUs), from an RNG stream of their own; a failure stops
    the replicas in its scope, is detected ``detection_s`` later (their in-flight requests
    are then retried elsewhere or lost), and each replica comes back after ``swap_s`` if a
    spare is free, else after ``repair_s``; a swapped-out unit becomes a spare again once
    repaired."""

    preset: Literal["llama3"] | None = Field(None, description="llama3: the component rates of Llama 3 Table 5")
    components: dict[Literal["gpu", "hbm", "host", "nic", "switch", "software"], Component] = Field(
        default_factory=dict, description="rates per component; added to (and overriding) the preset's")
    detection_s: float = Field(300.0, ge=0, le=MAX_SPAN_S)
    repair_s: float = Field(gt=0, le=MAX_SPAN_S, description="time to repair a failed unit; not published "
                            "by any operator we found: set yours")
    spares: int = Field(0, ge=0, le=100_000, description="spare replicas per pool")
    swap_s: float = Field(0.0, ge=0, le=MAX_SPAN_S, description="time to swap a spare in")
    in_flight: Literal["retry", "lose"] = "retry"

    @model_validator(mode="after")
    def _some(self) -> "Failures":
        if self.preset is None and not self.components:
            raise ValueError("failures: give a preset (llama3) or components")
        return self

    def rates(self) -> dict[str, tuple[float, str, float, float]]:
        """component -> (rate per GPU-hour, scope, detection_s, repair_s), preset first."""
        out = {}
        if self.preset == "llama3":
            for name, (count, _) in LLAMA3_COUNTS.items():
                out[name] = (count / LLAMA3_GPU_HOURS, SCOPES[name], self.detection_s, self.repair_s)
        for name, c in self.components.items():
            out[name] = (c.rate_per_gpu_hour, c.scope or SCOPES[name], self.detection_s if c.detection_s is None else c.detection_s,
                         self.repair_s if c.repair_s is None else c.repair_s)
        return out
