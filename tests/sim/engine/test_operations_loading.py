"""Model loading priced through the storage tiers, checked by hand: one checkpoint load
and one LoRA adapter load (bytes / bandwidth at each tier), first from the formula, then
as the extra time to first token the engine gives a request that must wait for them."""

from __future__ import annotations

import math

import pytest

from fleets.storage import load_time_s, storage_tiers
from sim.engine.core import simulate
from sim.scenario import parse_scenario

GB = 1e9
# Llama-3.1-8B: 8.03e9 parameters (fleets/data/models.csv), FP8 weights: 1 byte each
WEIGHTS_FP8 = 8.03e9
NVME_GEN5_DRIVE = 14.0 * GB  # Micron 9550, per drive (storage_tiers.csv nvme-gen5)
PCIE5_MEASURED = 55.43 * GB  # nvbandwidth H2D, per GPU (host-pcie5-x16)


def test_the_tiers_are_the_sourced_rows():
    tiers = storage_tiers()
    assert tiers["nvme-gen5"].read_bytes_per_s == NVME_GEN5_DRIVE
    assert tiers["host-pcie5-x16"].read_bytes_per_s == PCIE5_MEASURED
    assert all(t.source and t.status in {"verified", "secondary", "derived"} for t in tiers.values())


def test_one_load_by_hand_staged_and_pipelined():
    # 4 drives in RAID 0 on one node, one GPU: 8.03 GB / 56 GB/s then 8.03 GB / 55.43 GB/s
    storage_s = 8.03 / (4 * 14.0)
    link_s = 8.03 / 55.43
    assert load_time_s(WEIGHTS_FP8, 4 * NVME_GEN5_DRIVE, PCIE5_MEASURED, 1, False) == pytest.approx(storage_s + link_s)
    assert load_time_s(WEIGHTS_FP8, 4 * NVME_GEN5_DRIVE, PCIE5_MEASURED, 1, True) == pytest.approx(max(storage_s, link_s))
    # TP 4: each GPU copies a quarter over its own link
    assert load_time_s(WEIGHTS_FP8, 4 * NVME_GEN5_DRIVE, PCIE5_MEASURED, 4, False) == pytest.approx(
        storage_s + 8.03 / 4 / 55.43)
    # a host-cache hit crosses only the link
    assert load_time_s(WEIGHTS_FP8, None, PCIE5_MEASURED, 1, False) == pytest.approx(link_s)


def adapter_bytes_by_hand() -> float:
    """LoRA rank 16 on q, k, v, o of Llama-3.1-8B (hidden 4096, 32 heads, 8 KV heads of 128,
    32 layers), bf16: q 16·(4096+4096), k and v 16·(4096+1024), o 16·(4096+4096) per layer."""
    per_layer = 16 * (4096 + 4096) + 2 * 16 * (4096 + 1024) + 16 * (4096 + 4096)
    return per_layer * 32 * 2.0


def scenario(mix: dict | None, arrivals: list[float], host_cache: int = 0, drives: int = 4) -> dict:
    wl = {"kind": "autoregressive", "model": "llama-3.1-8b",
          "arrival": {"kind": "poisson", "rate_per_s": 0.04},  # replaced by the demand given to simulate
          "prompt_tokens": {"kind": "constant", "value": 512}, "output_tokens": {"kind": "constant", "value": 2}}
    pool = {"name": "p", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1, "precision": "fp8",
            "loading": {"storage": "nvme-gen5", "devices": drives, "host_link": "host-pcie5-x16"}}
    if mix is not None:
        wl["mix"] = mix
        pool["residency"] = {"resident_models": 1, "adapter_cache": 4, "host_cache_models": host_cache,
                             "lora_step_overhead_s": 0.0}
    return {"name": "load", "seed": 1, "duration_s": 100.0, "drain_s": 100.0, "workloads": {"chat": wl},
            "fleets": [{"name": "f", "pools": [pool]}]}


def run_with(spec: dict, variant: list[int], adapter: list[int], lora: list[int], arrivals: list[float]):
    import numpy as np

    from sim.engine.demand import WorkloadDemand

    sc = parse_scenario(spec)
    n = len(arrivals)
    ints = lambda v: np.array(v, dtype=np.int64)  # noqa: E731
    demand = {"chat": WorkloadDemand("chat", "autoregressive", np.array(arrivals), ints([512] * n), ints([2] * n),
                                     ints([0] * n), np.zeros(n), variant=ints(variant), adapter=ints(adapter),
                                     lora=ints(lora))}
    return simulate(sc, demand=demand)


MIX = {"models": 2, "adapters": 10, "adapter_share": 0.5}
ARRIVALS = [0.0, 20.0, 40.0, 60.0]


def test_a_checkpoint_load_and_a_lora_swap_delay_the_first_token_by_the_hand_computed_time():
    run = run_with(scenario(MIX, ARRIVALS), variant=[0, 1, 1, 0], adapter=[-1, -1, 7, -1], lora=[0, 0, 1, 0],
                   arrivals=ARRIVALS)
    ttft = run.requests.sort_values("request_id")["ttft_s"].to_numpy()
    base = ttft[0]  # checkpoint 0 is resident at the start: an idle replica's prefill only
    cold_s = 8.03 / (4 * 14.0) + 8.03 / 55.43  # storage (4 Gen5 drives) then PCIe Gen5, staged
    lora_s = adapter_bytes_by_hand() / (4 * NVME_GEN5_DRIVE) + adapter_bytes_by_hand() / PCIE5_MEASURED
    assert ttft[1] - base == pytest.approx(cold_s, rel=1e-9)
    assert ttft[2] - base == pytest.approx(lora_s, rel=1e-9)  # checkpoint 1 now runs; the adapter loads
    assert ttft[3] - base == pytest.approx(cold_s, rel=1e-9)  # 1 resident model: checkpoint 0 was evicted
    ops = run.operations.iloc[0]
    assert (ops["loads_storage"], ops["adapter_loads"]) == (2, 1)
    assert ops["load_s"] == pytest.approx(2 * cold_s)


def test_a_host_cache_hit_crosses_only_the_host_link():
    run = run_with(scenario(MIX, ARRIVALS, host_cache=2), variant=[0, 1, 0, 1], adapter=[-1] * 4, lora=[0] * 4,
                   arrivals=ARRIVALS)
    ttft = run.requests.sort_values("request_id")["ttft_s"].to_numpy()
    cold_s = 8.03 / (4 * 14.0) + 8.03 / 55.43
    # 1 -> storage (now in host memory), 0 -> storage (never loaded through the host before), 1 -> host hit
    assert [ttft[i] - ttft[0] for i in (1, 2, 3)] == pytest.approx([cold_s, cold_s, 8.03 / 55.43], rel=1e-9)


def test_the_same_demand_without_a_mix_runs_as_before():
    plain = simulate(parse_scenario(scenario(None, ARRIVALS)))
    assert plain.operations is None and plain.plan.pools[0].ops is None
    assert math.isfinite(plain.requests["ttft_s"].iloc[0])


def test_affinity_routing_sends_a_checkpoint_to_the_replica_loading_it():
    # two idle replicas running checkpoint 0; two requests for checkpoint 1, 0.1 s apart:
    # least-outstanding sends the second to the other replica (a second load) unless the
    # router prefers the replica already switching to checkpoint 1 (one load)
    loads = {}
    for routing in ("affinity", "any"):
        spec = scenario(MIX, [0.0, 0.1])
        pool = spec["fleets"][0]["pools"][0]
        pool["replicas"] = 2
        pool["residency"]["routing"] = routing
        run = run_with(spec, variant=[1, 1], adapter=[-1, -1], lora=[0, 0], arrivals=[0.0, 0.1])
        assert (run.requests["status"] == "completed").all()
        loads[routing] = int(run.operations.iloc[0]["loads_storage"])
    assert loads == {"affinity": 1, "any": 2}
