"""The pool's shared KV tier (sim/engine/prefix_cache.py SharedStore, docs/kv-reuse.md):
blocks one replica drops are read by another over its scale-out NICs."""

from __future__ import annotations

import csv
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sim.engine.core import simulate
from sim.scenario import parse_scenario
from test_prefix_cache import BLOCK, ROOT, SMALL, _conv, one_replica, reference_hits, session_trace, write_trace


def _fabric(key: str) -> tuple[float, float]:
    """(bytes/s per GPU per direction, latency s) of a fleets/data/fabrics.csv row."""
    with open(ROOT / "fleets/data/fabrics.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if r["key"] == key)
    return float(row["gbps_per_dir_per_gpu"]) * 1e9, float(row["latency_us"]) * 1e-6


def test_a_block_one_replica_evicted_is_read_by_another_over_its_nics(tmp_path):
    """Llama-3.1-8B FP8 on H100, two TP2 replicas served round robin, HBM capped at 20
    cached blocks each, no host or SSD tier, a shared store of 100 blocks, InfiniBand NDR:
    A (20 whole blocks) on replica 0, a short D on replica 1, then Y (20 other blocks) on
    replica 0 evicts all of A's blocks into the shared store; C, A's 20 blocks and one new
    token, lands on replica 1, which never saw A, and reads all 20 from the store: 10,240
    tokens × 65,536 B (2 × 32 layers × 8 KV heads × 128 × 1 B) over 2 GPUs' NICs after
    one NIC latency. Its one-token prefill is shorter, so C's TTFT is that transfer."""
    x, y = list(range(21)), list(range(100, 121))
    rows = [_conv(0, x), _conv(10_000, [500], tail=100), _conv(50_000, y),
            {"timestamp": 100_000, "input_length": 20 * BLOCK + 1, "output_length": 5, "hash_ids": x[:20] + [999]}]
    data = one_replica(write_trace(tmp_path, rows), 120, 20, replicas=2, router="round_robin",
                       **(SMALL | {"tp": 2}))
    pool = data["fleets"][0]["pools"][0]
    pool["scaleout_fabric"] = "ib-ndr-400"
    pool["prefix_cache"]["shared_blocks"] = 100
    got = simulate(parse_scenario(data, "prefix")).requests.sort_values("request_id")
    assert got["replica"].tolist() == [0, 1, 0, 1]
    c = got.iloc[3]
    assert (c["cached_tokens"], c["shared_cached_tokens"], c["host_cached_tokens"]) == (10_240, 10_240, 0)
    bw, latency = _fabric("ib-ndr-400")
    assert c["ttft_s"] == pytest.approx(latency + 10_240 * 65_536 / (2 * bw), rel=1e-9)
    # without the shared tier C computes its whole prompt on replica 1
    pool["prefix_cache"]["shared_blocks"] = 0
    off = simulate(parse_scenario(data, "prefix")).requests.sort_values("request_id")
    assert off["cached_tokens"].iloc[3] == 0 and "shared_cached_tokens" not in off


def test_a_shared_store_too_small_keeps_the_most_recent_blocks(tmp_path):
    """The same run (TP1) with a shared store of 5 blocks: Y's commit evicts A's least
    recent block first, its last one (A released its blocks last first), so A's first
    block enters the store last and the 5 kept are A's blocks 0-4: C on replica 1 reads
    those 5 (2,560 tokens) and computes the rest."""
    x, y = list(range(21)), list(range(100, 121))
    rows = [_conv(0, x), _conv(10_000, [500], tail=100), _conv(50_000, y),
            {"timestamp": 100_000, "input_length": 20 * BLOCK + 1, "output_length": 5, "hash_ids": x[:20] + [999]}]
    data = one_replica(write_trace(tmp_path, rows), 120, 20, replicas=2, router="round_robin", **SMALL)
    data["fleets"][0]["pools"][0]["prefix_cache"]["shared_blocks"] = 5
    got = simulate(parse_scenario(data, "prefix")).requests.sort_values("request_id")
    assert (got["cached_tokens"].iloc[3], got["shared_cached_tokens"].iloc[3]) == (2560, 2560)


@settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=session_trace(), hbm_extra=st.integers(0, 3), shared=st.integers(1, 30), replicas=st.integers(2, 3))
def test_shared_tier_stays_within_the_infinite_cache_and_only_adds_hits(tmp_path, rows, hbm_extra, shared, replicas):
    """Requests 30 s apart (each done before the next arrives), served round robin by 2-3
    replicas with small HBM caches: with a shared store every request caches at least
    what it caches without (the replicas' own caches evolve alike: a block read from the
    store would have been computed and kept the same way), the tokens read from the store
    are among the cached ones, and the total never exceeds one infinite cache's over the
    whole trace (a block is only found after an earlier request computed it)."""
    rows = [r | {"timestamp": 30_000 * i} for i, r in enumerate(rows)]
    hbm = max(max(min(len(r["hash_ids"]), (r["input_length"] - 1) // BLOCK) for r in rows) + hbm_extra, 1)
    path = write_trace(tmp_path, rows)
    runs = []
    for s in (0, shared):
        data = one_replica(path, 30 * len(rows) + 1, hbm, replicas=replicas, router="round_robin", **SMALL)
        data["fleets"][0]["pools"][0]["prefix_cache"]["shared_blocks"] = s
        runs.append(simulate(parse_scenario(data, "prefix")).requests.sort_values("request_id"))
    off, on = runs
    assert (on["status"] == "completed").all()
    assert (on["cached_tokens"].to_numpy() >= off["cached_tokens"].to_numpy()).all()
    assert (on["shared_cached_tokens"] <= on["cached_tokens"]).all()
    assert (on["cached_tokens"] - off["cached_tokens"] <= on["shared_cached_tokens"]).all()
    assert on["cached_tokens"].sum() <= sum(reference_hits(rows, None))
    event(f"shared hits: {on['shared_cached_tokens'].sum() > 0}")


@settings(max_examples=int(os.environ.get("DCSIM_DIFF_EXAMPLES", 10)), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=session_trace(), capacity=st.integers(1, 5), max_batch=st.integers(1, 8), replicas=st.integers(2, 3),
       router=st.sampled_from(["least_outstanding", "round_robin", "prefix_aware"]),
       host=st.sampled_from([0, 3]), shared=st.sampled_from([2, 20]))
def test_fast_and_exact_modes_agree_with_a_shared_tier(tmp_path, rows, capacity, max_batch, replicas, router,
                                                        host, shared):
    """Fast and exact engine modes give every request the same outcome and the same
    cached and shared-tier tokens with a shared store under small HBM caches."""
    from fast_exact import assert_modes_agree

    data = one_replica(write_trace(tmp_path, rows), 10, capacity, max_batch, replicas, router=router, **SMALL)
    data["fleets"][0]["pools"][0]["prefix_cache"].update(host_blocks=host, shared_blocks=shared)
    fast, exact = assert_modes_agree(data)
    a, b = fast.requests, exact.requests
    event(f"shared hits: {a['shared_cached_tokens'].sum() > 0}")
    np.testing.assert_array_equal(a["cached_tokens"].to_numpy(), b["cached_tokens"].to_numpy())
    np.testing.assert_array_equal(a["shared_cached_tokens"].to_numpy(), b["shared_cached_tokens"].to_numpy())
