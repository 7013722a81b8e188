"""The prefix cache (sim/engine/prefix_cache.py, docs/kv-reuse.md) against a reference
computed from the raw Mooncake JSONL alone, and its properties on generated traces.

The reference (:func:`reference_hits`) is a textbook LRU over prefix blocks, written here
from the trace's definition (one hash per 512-token prompt block; equal leading hashes
mean an equal prefix): a request hits the longest run of its leading whole blocks (short
of its last token) present in the cache, then touches its blocks last first, so its first
block is the most recent, and the least recently used blocks go while more than
``capacity`` are held. One replica serving one request at a time (max_batch 1) with an
HBM large enough never to evict for room must reproduce it request by request.
"""

from __future__ import annotations

import csv
import json
import os
from collections import Counter, OrderedDict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fleets.catalog_io import load_catalog
from sim.engine.core import simulate
from sim.engine.request import Request
from sim.errors import ScenarioError
from sim.scenario import parse_scenario

ROOT = Path(__file__).resolve().parents[3]
MOONCAKE = ROOT / "traffic/data/mooncake_conversation_trace.jsonl"
BLOCK = 512  # Mooncake hash_ids block (traffic.prefix.MOONCAKE_BLOCK_TOKENS; re-stated, not imported)


def reference_hits(rows: list[dict], capacity: int | None) -> list[int]:
    """Cached tokens of each request, in order (module docstring)."""
    lru: OrderedDict = OrderedDict()
    out = []
    for r in rows:
        ids, n = r["hash_ids"], max(r["input_length"], 1)
        usable = min(len(ids), (n - 1) // BLOCK)
        keys = [tuple(ids[: i + 1]) for i in range(usable)]
        hit = 0
        while hit < usable and keys[hit] in lru:
            hit += 1
        out.append(hit * BLOCK)
        for key in reversed(keys):
            lru[key] = None
            lru.move_to_end(key)
        while capacity is not None and len(lru) > capacity:
            lru.popitem(last=False)
    return out


def one_replica(path: Path, duration_s: float, capacity: int | None, max_batch: int = 1, replicas: int = 1,
                mode: str = "fast", router: str = "least_outstanding", model: str = "llama-3.1-405b",
                accelerator: str = "b200", tp: int = 8) -> dict:
    cache = {"block_tokens": BLOCK} | ({} if capacity is None else {"capacity_blocks": capacity})
    return {
        "name": "prefix", "seed": 1, "duration_s": duration_s, "warmup_s": 0, "drain_s": 100_000,
        "engine": {"mode": mode},
        "workloads": {"chat": {"kind": "autoregressive", "model": model,
                               "arrival": {"kind": "trace", "path": str(path), "format": "mooncake_jsonl"}}},
        "fleets": [{"name": "f", "router": router, "pools": [{
            "name": "p", "accelerator": accelerator, "serves": ["chat"], "replicas": replicas, "tp": tp,
            "precision": "fp8", "max_batch": max_batch, "min_kv_tokens": 2048, "prefix_cache": cache}]}],
    }


def raw_rows(path: Path, before_ms: float) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r["timestamp"] < before_ms]
    return sorted(rows, key=lambda r: r["timestamp"])  # stable: equal instants keep file order


@pytest.mark.parametrize("capacity", [None, 1000, 400])
def test_one_replica_reproduces_the_reference_on_mooncake(capacity):
    """First 60 s of the Mooncake trace (162 requests, 4,035 distinct cacheable blocks,
    at most 235 per request; the replica's HBM holds 6,737 such blocks beside the weights,
    so only ``capacity`` evicts): the infinite cache's hit ratio is 4.70%, LRU 1000 and
    400 give 3.73%; per request the cached tokens are the reference's."""
    rows = raw_rows(MOONCAKE, 60_000)
    expected = np.array(reference_hits(rows, capacity))
    run = simulate(parse_scenario(one_replica(MOONCAKE, 60, capacity), "prefix"))
    got = run.requests.sort_values("request_id")
    assert (got["status"] == "completed").all()
    assert got["prompt_tokens"].tolist() == [max(r["input_length"], 1) for r in rows]
    np.testing.assert_array_equal(got["cached_tokens"].to_numpy(), expected)
    ratio = expected.sum() / got["prompt_tokens"].sum()
    assert got["cached_tokens"].sum() / got["prompt_tokens"].sum() == ratio
    assert ratio > 0.03  # the trace does reuse prefixes here (the test would not be vacuous)


# --- generated traces ------------------------------------------------------------------
@st.composite
def session_trace(draw) -> list[dict]:
    """Mooncake-format rows: a few conversations whose turns extend their history (and a
    shared first block, a system prompt), on a millisecond grid with repeats."""
    sessions = draw(st.integers(1, 4))
    histories = [[0] for _ in range(sessions)]
    next_id = 1
    rows, t = [], 0
    for _ in range(draw(st.integers(2, 25))):
        s = draw(st.integers(0, sessions - 1))
        for _ in range(draw(st.integers(0, 3))):
            histories[s].append(next_id)
            next_id += 1
        tail = draw(st.integers(1, BLOCK))
        ids = histories[s] + [next_id]
        next_id += 1
        t += draw(st.sampled_from([0, 1, 40, 400]))
        rows.append({"timestamp": t, "input_length": (len(ids) - 1) * BLOCK + tail,
                     "output_length": draw(st.sampled_from([1, 7, 40, 300])), "hash_ids": ids})
    return rows


def write_trace(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


SMALL = {"model": "llama-3.1-8b", "accelerator": "h100-sxm", "tp": 1}


@settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=session_trace(), extra=st.integers(0, 8))
def test_hit_ratio_bounded_by_infinite_cache_and_grows_with_capacity(tmp_path, rows, extra):
    """On one replica serving one request at a time: cached tokens equal the reference's
    at capacities c and c + 3 and with no bound, and the hit ratio never exceeds the
    infinite cache's and never falls as the capacity grows (LRU is a stack algorithm).
    c is at least the most blocks one request holds (the engine never evicts the blocks
    of a running request; the reference would)."""
    capacity = max(min(len(r["hash_ids"]), (r["input_length"] - 1) // BLOCK) for r in rows) + extra
    capacity = max(capacity, 1)
    path = write_trace(tmp_path, rows)
    totals = []
    for cap in (capacity, capacity + 3, None):
        run = simulate(parse_scenario(one_replica(path, 10, cap, **SMALL), "prefix"))
        got = run.requests.sort_values("request_id")["cached_tokens"].to_numpy()
        np.testing.assert_array_equal(got, reference_hits(rows, cap))
        totals.append(int(got.sum()))
    assert totals[0] <= totals[1] <= totals[2]


@settings(max_examples=int(os.environ.get("DCSIM_DIFF_EXAMPLES", 10)), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=session_trace(), capacity=st.one_of(st.none(), st.integers(1, 12)), max_batch=st.integers(1, 8),
       replicas=st.integers(1, 3), router=st.sampled_from(["least_outstanding", "round_robin", "prefix_aware"]),
       kv_tokens=st.sampled_from([3000, 8000, 20000, None]), host=st.sampled_from([0, 3, 50]),
       ssd=st.sampled_from([0, 4, 40]))
def test_fast_and_exact_modes_agree_with_caching(tmp_path, rows, capacity, max_batch, replicas, router, kv_tokens,
                                                  host, ssd):
    """Fast and exact engine modes give every request the same outcome (tests/fast_exact.py)
    and the same cached tokens with the cache on: batches, several replicas, and KV caches
    of a few thousand tokens (preemption, and cached blocks evicted for the running
    sequences' room), a host-memory tier and an SSD tier included."""
    from fast_exact import assert_modes_agree

    path = write_trace(tmp_path, rows)
    data = one_replica(path, 10, capacity, max_batch, replicas, router=router, **SMALL)
    data["fleets"][0]["pools"][0]["prefix_cache"].update(host_blocks=host, ssd_blocks=ssd)
    if kv_tokens is not None:  # HBM for the weights and kv_tokens of KV cache
        m = load_catalog().model(SMALL["model"])
        memory = load_catalog().accelerator(SMALL["accelerator"]).memory_bytes
        data["fleets"][0]["pools"][0].update(min_kv_tokens=0, memory_utilization=min(
            1.0, (m.weight_bytes("fp8") + kv_tokens * m.kv_bytes_per_token("fp8")) / memory))
    fast, exact = assert_modes_agree(data)
    a, b = fast.requests, exact.requests
    event(f"preempted: {a['preemptions'].sum() > 0}, hits: {a['cached_tokens'].sum() > 0}")
    np.testing.assert_array_equal(a["cached_tokens"].to_numpy(), b["cached_tokens"].to_numpy())
    np.testing.assert_array_equal(a["ssd_cached_tokens"].to_numpy(), b["ssd_cached_tokens"].to_numpy())
    assert_same_tier_traffic(fast, exact)


def assert_same_tier_traffic(fast, exact) -> None:
    """The pools' blocks moved between tiers in the window (``kv_*_blocks``) are equal."""
    columns = [c for c in exact.pools.columns if c.startswith("kv_") and c.endswith("_blocks")]
    assert columns and fast.pools[columns].to_dict("records") == exact.pools[columns].to_dict("records")
    event(f"tier traffic: {exact.pools[columns].to_numpy().sum() > 0}")


def test_block_not_a_multiple_of_the_paging_block_is_refused():
    data = one_replica(MOONCAKE, 10, None)
    data["fleets"][0]["pools"][0]["prefix_cache"]["block_tokens"] = 100
    with pytest.raises(ScenarioError, match="block_tokens.*multiple of kv_block_tokens"):
        parse_scenario(data, "prefix")


# --- the prefix_aware router -----------------------------------------------------------
def _conv(ts_ms: int, ids: list[int], tail: int = 100) -> dict:
    return {"timestamp": ts_ms, "input_length": (len(ids) - 1) * BLOCK + tail, "output_length": 50, "hash_ids": ids}


@pytest.mark.parametrize(("router", "load_tokens", "expected_c"), [
    # by load alone: D1 to replica 0, D2 to 1, C to 0 (ties to the first), where it finds D1's
    # 11 blocks (C waits one iteration: the token budget of 8,192 holds one such prompt)
    ("least_outstanding", 4096, (0, 5632)),
    ("prefix_aware", 1024, (1, 5632)),  # 5,120 cached tokens outweigh two requests at 1,024 each
    ("prefix_aware", 4096, (0, 0)),  # ... but not two at 4,096 each: C goes to the idle replica
])
def test_prefix_aware_router_trades_cached_tokens_against_load(tmp_path, router, load_tokens, expected_c):
    """Two replicas. At 0 s conversations A and B arrive (A to replica 0, B to replica 1:
    equal scores, then the idle one); at 100 s, all done, three requests extending B's
    11-block prompt (10 whole blocks cacheable: 5,120 tokens) arrive together: D1 and D2
    go where B's prefix is (5,120 − load × 0, then 5,120 − load × 1 > 0), and C weighs
    5,120 − 2 × load on replica 1 against 0 on the idle replica 0."""
    b = list(range(100, 111))
    rows = [_conv(0, list(range(11))), _conv(0, b), _conv(100_000, b + [201]), _conv(100_000, b + [202]),
            _conv(100_000, b + [203])]
    data = one_replica(write_trace(tmp_path, rows), 200, None, max_batch=8, replicas=2, router=router, **SMALL)
    data["fleets"][0]["pools"][0]["prefix_cache"]["load_tokens"] = load_tokens
    got = simulate(parse_scenario(data, "prefix")).requests.sort_values("request_id")
    assert got["replica"].tolist()[:2] == [0, 1]
    if router == "prefix_aware":
        assert got["replica"].tolist()[2:4] == [1, 1]
        assert got["cached_tokens"].tolist()[2:4] == [5120, 5632]  # D2 prefills after D1: its 11 blocks
    replica_c, cached_c = expected_c
    assert (got["replica"].iloc[4], got["cached_tokens"].iloc[4]) == (replica_c, cached_c)


# --- the host-memory tier ----------------------------------------------------------------
def reference_two_tier(rows: list[dict], hbm: int, host: int) -> tuple[list[int], list[int]]:
    """(cached tokens, of them from host memory) per request: :func:`reference_hits` with
    HBM evictions demoted to a host LRU of ``host`` blocks (its oldest dropped when full),
    and hits through host blocks promoting them back."""
    fast: OrderedDict = OrderedDict()
    slow: OrderedDict = OrderedDict()
    cached, from_host = [], []
    for r in rows:
        ids, n = r["hash_ids"], max(r["input_length"], 1)
        usable = min(len(ids), (n - 1) // BLOCK)
        keys = [tuple(ids[: i + 1]) for i in range(usable)]
        hit = 0
        while hit < usable and (keys[hit] in fast or keys[hit] in slow):
            hit += 1
        cached.append(hit * BLOCK)
        from_host.append(sum(k in slow for k in keys[:hit]) * BLOCK)
        for k in keys:
            fast.pop(k, None)
            slow.pop(k, None)
        while fast and len(fast) + usable > hbm:  # room for this request's blocks, oldest demoted
            slow[fast.popitem(last=False)[0]] = None
            if len(slow) > host:
                slow.popitem(last=False)
        for k in reversed(keys):
            fast[k] = None
    return cached, from_host


@pytest.mark.parametrize(("hbm", "host", "host_hits"), [(400, 4000, True), (250, 500, False)])
def test_one_replica_reproduces_the_two_tier_reference_on_mooncake(hbm, host, host_hits):
    """First 60 s of the Mooncake trace, HBM bounded by ``capacity_blocks``, a host tier of
    ``host_blocks``: cached tokens and those from host memory per request are the
    reference's. The reuse here is far apart: a host tier of 4,000 blocks recovers every
    hit of the infinite cache (103,936 tokens against 82,432 for HBM alone; 21,504 from
    host memory), one of 500 none."""
    rows = raw_rows(MOONCAKE, 60_000)
    cached, from_host = reference_two_tier(rows, hbm, host)
    data = one_replica(MOONCAKE, 60, hbm)
    data["fleets"][0]["pools"][0]["prefix_cache"]["host_blocks"] = host
    got = simulate(parse_scenario(data, "prefix")).requests.sort_values("request_id")
    np.testing.assert_array_equal(got["cached_tokens"].to_numpy(), cached)
    np.testing.assert_array_equal(got["host_cached_tokens"].to_numpy(), from_host)
    assert (sum(from_host) > 0) == host_hits
    assert sum(reference_hits(rows, hbm)) <= sum(cached) <= sum(reference_hits(rows, None))


def test_a_host_hit_pays_its_copy_over_the_host_link(tmp_path):
    """Llama-3.1-8B FP8 on one H100 (TP1), HBM capped at 22 cached blocks, host tier on:
    A (20 whole blocks) then B (20 others) demote A's last 18 blocks to host memory; C, A's
    20 blocks and 1 new token, hits all 20, 18 from host. Its one-token prefill over 10,240
    cached tokens is shorter than copying 18 x 512 tokens x 65,536 B (2 x 32 layers x 8 KV
    heads x 128 x 1 B) over the PCIe Gen5 x16 link's 55.43 GB/s (storage_tiers.csv
    host-pcie5-x16), so C's TTFT is that copy: 9,216 x 65,536 / 55.43e9 s."""
    x, y = list(range(21)), list(range(100, 121))
    rows = [_conv(0, x), _conv(50_000, y), {"timestamp": 100_000, "input_length": 20 * BLOCK + 1,
                                            "output_length": 5, "hash_ids": x[:20] + [999]}]
    data = one_replica(write_trace(tmp_path, rows), 120, 22, **SMALL)
    data["fleets"][0]["pools"][0]["prefix_cache"]["host_blocks"] = 100
    got = simulate(parse_scenario(data, "prefix")).requests.sort_values("request_id")
    c = got.iloc[2]
    assert (c["cached_tokens"], c["host_cached_tokens"]) == (10_240, 9216)
    assert c["ttft_s"] == pytest.approx(9216 * 65_536 / 55.43e9, rel=1e-9)


def test_prefill_flops_saved_by_hand_from_the_catalog_row(tmp_path):
    """A (20 whole blocks and 100 tokens) then B, a prompt of A's 20 blocks and 1 new
    token, on Llama-3.1-8B (TP1): B computes m = 1 token over c = 10,240 cached ones
    instead of all n = 10,241. From the raw models.csv row, 2 · params FLOP per token in
    the linear layers and 4 · layers · heads · head_dim per causal (query, key) pair: the
    FLOP saved is 2 · params · (n − m) + per_pair · (n²/2 − m·c − m²/2). (The replica
    computes it on the perf model's coefficients copied for speed: this pins that copy
    to the formula.)"""
    row = next(r for r in csv.DictReader(open(ROOT / "fleets" / "data" / "models.csv", newline=""))
               if r["key"] == "llama-3.1-8b")
    x = list(range(21))
    rows = [_conv(0, x), {"timestamp": 60_000, "input_length": 20 * BLOCK + 1, "output_length": 5,
                          "hash_ids": x[:20] + [999]}]
    got = simulate(parse_scenario(one_replica(write_trace(tmp_path, rows), 120, None, **SMALL), "prefix"))
    b = got.requests.sort_values("request_id").iloc[1]
    n, c = 20 * BLOCK + 1, 20 * BLOCK
    m = n - c
    assert b["cached_tokens"] == c
    params = float(row["params_b"]) * 1e9
    per_pair = 4 * int(row["layers"]) * int(row["heads"]) * int(row["head_dim"])
    saved = 2 * params * (n - m) + per_pair * (n * n / 2 - m * c - m * m / 2)
    assert b["prefill_flops_saved"] == pytest.approx(saved, rel=1e-9)


# --- the SSD tier ----------------------------------------------------------------------
def reference_three_tier(rows: list[dict], hbm: int, host: int, ssd: int,
                         moves: Counter | None = None) -> tuple[list[int], list[int], list[int]]:
    """(cached tokens, of them from host memory, from the SSD tier) per request:
    :func:`reference_two_tier` with a third LRU below host memory: a block host memory
    pushes out goes to the SSD tier (its own oldest dropped when full); a hit anywhere
    promotes the block back to HBM. A tier of 0 blocks is skipped. ``moves`` (when
    given) counts the blocks: ``demoted_host``, ``demoted_ssd`` (entering the tier),
    ``dropped`` (out of the last tier), ``promoted_host``, ``promoted_ssd`` (hit there)."""
    tiers = [OrderedDict(), OrderedDict(), OrderedDict()]  # HBM, host, SSD
    caps = [hbm, host, ssd]
    cached, from_host, from_ssd = [], [], []
    for r in rows:
        ids, n = r["hash_ids"], max(r["input_length"], 1)
        usable = min(len(ids), (n - 1) // BLOCK)
        keys = [tuple(ids[: i + 1]) for i in range(usable)]
        hit = 0
        while hit < usable and any(keys[hit] in t for t in tiers):
            hit += 1
        cached.append(hit * BLOCK)
        from_host.append(sum(k in tiers[1] for k in keys[:hit]) * BLOCK)
        from_ssd.append(sum(k in tiers[2] for k in keys[:hit]) * BLOCK)
        if moves is not None:
            moves["promoted_host"] += from_host[-1] // BLOCK
            moves["promoted_ssd"] += from_ssd[-1] // BLOCK
        for k in keys:
            for t in tiers:
                t.pop(k, None)
        while tiers[0] and len(tiers[0]) + usable > hbm:  # room for this request's blocks
            block = tiers[0].popitem(last=False)[0]
            for level in (1, 2):  # demoted down the tiers that exist
                if not caps[level]:
                    continue
                tiers[level][block] = None
                if moves is not None:
                    moves[("", "demoted_host", "demoted_ssd")[level]] += 1
                if len(tiers[level]) <= caps[level]:
                    block = None
                    break
                block = tiers[level].popitem(last=False)[0]
            if block is not None and moves is not None:
                moves["dropped"] += 1
        for k in reversed(keys):
            tiers[0][k] = None
    return cached, from_host, from_ssd


@pytest.mark.parametrize(("hbm", "host", "ssd", "ssd_hits"), [(250, 300, 4000, True), (250, 0, 4000, True),
                                                              (250, 300, 400, False)])
def test_one_replica_reproduces_the_three_tier_reference_on_mooncake(hbm, host, ssd, ssd_hits):
    """First 60 s of the Mooncake trace with HBM, host DRAM and SSD tiers (and without the
    host tier: HBM evictions go straight to the SSD): cached tokens and those from host
    memory and from the SSD per request are the reference's; an SSD tier of 4,000 blocks
    serves hits that HBM and host memory alone lose (one of 400 none: the reuse here is
    far apart), and the total stays within the two bounds."""
    rows = raw_rows(MOONCAKE, 60_000)
    cached, from_host, from_ssd = reference_three_tier(rows, hbm, host, ssd)
    data = one_replica(MOONCAKE, 60, hbm)
    data["fleets"][0]["pools"][0]["prefix_cache"].update(host_blocks=host, ssd_blocks=ssd)
    got = simulate(parse_scenario(data, "prefix")).requests.sort_values("request_id")
    np.testing.assert_array_equal(got["cached_tokens"].to_numpy(), cached)
    np.testing.assert_array_equal(got["host_cached_tokens"].to_numpy(), from_host)
    np.testing.assert_array_equal(got["ssd_cached_tokens"].to_numpy(), from_ssd)
    assert (sum(from_ssd) > 0) == ssd_hits
    assert sum(reference_two_tier(rows, hbm, host)[0]) <= sum(cached) <= sum(reference_hits(rows, None))


MOVES = ("demoted_host", "demoted_ssd", "dropped", "promoted_host", "promoted_ssd")


@pytest.mark.parametrize(("hbm", "host", "ssd", "moved"), [
    (250, 3300, 400, MOVES),  # the reference: 3,827 / 498 / 85 / 29 / 13
    (250, 0, 400, ("demoted_ssd", "dropped")),
    (250, 300, 4000, ("demoted_host", "demoted_ssd", "promoted_ssd")),
])
def test_blocks_moved_between_tiers_match_the_three_tier_reference_on_mooncake(tmp_path, hbm, host, ssd, moved):
    """The same first 60 s of the Mooncake trace (replayed from a copy holding only those
    rows, in a window long enough that every tier change counts): the blocks demoted into
    host memory and into the SSD tier, dropped past the last tier, and promoted from each
    are the reference's totals, exactly."""
    rows = raw_rows(MOONCAKE, 60_000)
    moves: Counter = Counter()
    reference_three_tier(rows, hbm, host, ssd, moves)
    data = one_replica(write_trace(tmp_path, rows), 100_000, hbm)
    data["fleets"][0]["pools"][0]["prefix_cache"].update(host_blocks=host, ssd_blocks=ssd)
    run = simulate(parse_scenario(data, "prefix"))
    assert len(run.requests) == len(rows) and (run.requests["status"] == "completed").all()
    got = run.pools.iloc[0]
    for name in MOVES:
        assert got[f"kv_{name}_blocks"] == moves[name], name
    assert {name for name in MOVES if moves[name]} == set(moved)  # not vacuous: these happen here


def test_an_ssd_hit_pays_its_read(tmp_path):
    """:func:`test_a_host_hit_pays_its_copy_over_the_host_link` with a host tier of 5 blocks
    above an SSD tier: of A's 18 demoted blocks (its last first) the 5 demoted last stay in
    host memory, the 13 before passed on to the SSD. C hits 20 blocks: 2 in HBM, 5 from
    host, 13 from the SSD. One H100 of an 8-GPU node with 8 Gen4 drives reads at one
    drive's 6.8 GB/s (storage_tiers.csv nvme-gen4); 13 × 512 tokens × 65,536 B take
    65.2 ms after the 60 µs latency, longer than copying all 18 blocks over the 55.43 GB/s
    host link (10.9 ms) and than the one-token prefill, so C's TTFT is the read."""
    x, y = list(range(21)), list(range(100, 121))
    rows = [_conv(0, x), _conv(50_000, y), {"timestamp": 100_000, "input_length": 20 * BLOCK + 1,
                                            "output_length": 5, "hash_ids": x[:20] + [999]}]
    data = one_replica(write_trace(tmp_path, rows), 120, 22, **SMALL)
    data["fleets"][0]["pools"][0]["prefix_cache"].update(host_blocks=5, ssd_blocks=100, ssd="nvme-gen4",
                                                         ssd_drives=8, ssd_latency_s=60e-6)
    got = simulate(parse_scenario(data, "prefix")).requests.sort_values("request_id")
    c = got.iloc[2]
    assert (c["cached_tokens"], c["host_cached_tokens"], c["ssd_cached_tokens"]) == (10_240, 2560, 6656)
    assert c["ttft_s"] == pytest.approx(60e-6 + 6656 * 65_536 / 6.8e9, rel=1e-9)


@settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=session_trace(), hbm_extra=st.integers(0, 4), host=st.sampled_from([0, 2, 5]), ssd=st.integers(1, 6))
def test_tiers_stay_within_the_infinite_cache_and_grow_with_ssd_capacity(tmp_path, rows, hbm_extra, host, ssd):
    """One replica, one request at a time, HBM + host + SSD tiers: cached tokens (and
    those per tier) equal the three-tier reference's; the hit ratio never exceeds the
    infinite cache's and never falls as the SSD tier grows by 4 blocks."""
    hbm = max(max(min(len(r["hash_ids"]), (r["input_length"] - 1) // BLOCK) for r in rows) + hbm_extra, 1)
    path = write_trace(tmp_path, rows)
    totals = []
    for s in (ssd, ssd + 4):
        data = one_replica(path, 10, hbm, **SMALL)
        data["fleets"][0]["pools"][0]["prefix_cache"].update(host_blocks=host, ssd_blocks=s)
        got = simulate(parse_scenario(data, "prefix")).requests.sort_values("request_id")
        cached, from_host, from_ssd = reference_three_tier(rows, hbm, host, s)
        np.testing.assert_array_equal(got["cached_tokens"].to_numpy(), cached)
        np.testing.assert_array_equal(got["host_cached_tokens"].to_numpy(), from_host)
        np.testing.assert_array_equal(got["ssd_cached_tokens"].to_numpy(), from_ssd)
        totals.append(sum(cached))
    assert totals[0] <= totals[1] <= sum(reference_hits(rows, None))


# --- the prefix_aware router's block index against a scan ------------------------------
class _Cfg:
    def __init__(self, load_tokens: int) -> None:
        self.prefix_cache = type("PC", (), {"load_tokens": load_tokens})()


class _Pool:
    def __init__(self, index: int, load_tokens: int, replicas: list) -> None:
        self.index, self.config, self.replicas, self.watchers, self.gate = index, _Cfg(load_tokens), replicas, [], None

    def reject_reason(self, req) -> str:
        return ""


class _Replica:
    def __init__(self, index: int, cache, outstanding: int) -> None:
        self.index, self.prefix, self.outstanding, self.queued = index, cache, outstanding, 0
        self.listeners, self.max_batch = [], 8


@settings(max_examples=60)
@given(pools=st.lists(st.tuples(st.sampled_from([0, 512, 4096]), st.integers(1, 70)), min_size=1, max_size=2),
       data=st.data())
def test_prefix_aware_router_picks_what_a_scan_of_every_cache_picks(pools, data):
    """Replicas (up to 70 per pool: bitmasks past 64 bits) whose caches hold random chains
    (a shared first block, as in the Mooncake trace) and random loads: the router's
    choice through the block index is the replica a scan of every replica picks by the
    definition (highest cached − load_tokens × outstanding, ties to the first), with the
    cached tokens counted here from the chains each replica was given."""
    from sim.engine.prefix_cache import PrefixCache
    from sim.engine.router import Router
    from traffic.prefix import chain_keys

    table: dict = {}
    chain = st.lists(st.integers(0, 2), min_size=1, max_size=6).map(lambda hs: chain_keys([0] + hs, table))
    built, held = [], []
    for p, (load, n) in enumerate(pools):
        replicas = []
        for i in range(n):
            cache = PrefixCache(16, 1, None)
            keys_held: set = set()
            for keys in data.draw(st.lists(chain, max_size=3)):
                hit = cache.acquire(keys, len(keys))
                cache.release(cache.commit(keys, cache.last, hit, len(keys)), len(keys))
                keys_held.update(keys)
            replicas.append(_Replica(i, cache, data.draw(st.integers(0, 4))))
            held.append(keys_held)
        built.append(_Pool(p, load, replicas))
    router = Router(None, "prefix_aware", built)
    keys = data.draw(chain)
    req = Request(0, 0, 0.0, 16 * len(keys) + 1)
    req.prefix = keys
    best, best_score = None, None
    position = 0
    for (load, _), pool in zip(pools, built):
        for r in pool.replicas:
            run = 0
            while run < len(keys) and keys[run] in held[position]:
                run += 1
            score = 16 * run - load * r.outstanding
            if best_score is None or score > best_score:
                best, best_score = r, score
            position += 1
    assert router._by_prefix(req, router._all) is best


# --- the pool's shared tier (SharedStore): blocks one replica drops, read by another -----

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
    assert_same_tier_traffic(fast, exact)


# --- several traces feeding one cache ------------------------------------------------------
def two_workloads(tmp_path: Path, second_file_same: bool) -> dict:
    """Workload chat replays a.jsonl, workload other replays b.jsonl (the same rows in a file
    of its own) or a.jsonl again; one replica with a cache serves both, one request at a time."""
    rows = [_conv(0, [7, 8, 9, 10])]  # 3 × 512 + 100 tokens: 3 whole blocks cacheable (1,536 tokens)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for path in (a, b):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = one_replica(a, 100, None, **SMALL)
    data["workloads"]["other"] = {"kind": "autoregressive", "model": SMALL["model"], "arrival": {
        "kind": "trace", "path": str(a if second_file_same else b), "format": "mooncake_jsonl"}}
    data["fleets"][0]["pools"][0]["serves"] = ["chat", "other"]
    return data


@pytest.mark.parametrize(("same_file", "cached"), [(False, [0, 0]), (True, [0, 1536])])
def test_block_ids_of_two_trace_files_never_hit_each_other(tmp_path, same_file, cached):
    """Both workloads send a prompt with hash_ids [7, 8, 9, 10] at 0 s. Ids of two different
    files are each file's own, so neither request finds the other's blocks (a cache keyed
    by each file's chain keys from 0 once gave the second 1,536 cached tokens); the same
    file replayed twice is the same prompt, so the second request (after the first, one at
    a time) reuses its three whole blocks."""
    got = simulate(parse_scenario(two_workloads(tmp_path, same_file), "two")).requests
    assert sorted(got["cached_tokens"].tolist()) == cached


def test_each_trace_file_gets_a_key_range_of_its_own(tmp_path):
    """a.jsonl's one row has 4 blocks (chain keys 0-3), so b.jsonl's keys start at 4; a third
    workload replaying a.jsonl shares its range."""
    from sim.engine.demand import prefix_key_ranges

    data = two_workloads(tmp_path, False)
    data["workloads"]["again"] = dict(data["workloads"]["chat"])
    data["fleets"][0]["pools"][0]["serves"].append("again")
    assert prefix_key_ranges(parse_scenario(data, "three")) == ({"chat": 0, "other": 4, "again": 0}, 8)


def test_each_checkpoint_and_adapter_keeps_its_own_keys():
    """Hand values: keys span 10, 4 adapters (width 5): checkpoint 0 without an adapter keeps
    its keys; checkpoint 1 without one moves by 10 × 5; checkpoint 0 with adapter 3 by 10 × 4."""
    from sim.engine.demand import request_keys

    prefix = np.empty(3, dtype=object)
    prefix[:] = [(0, 1, 2), (0, 1, 2), (0, 1, 2)]
    got = request_keys(prefix, 0, 10, np.array([0, 1, 0]), np.array([-1, -1, 3]), 4)
    assert got.tolist() == [(0, 1, 2), (50, 51, 52), (40, 41, 42)]
    # a second trace file whose keys start at 100: every pair's range moves with it
    got = request_keys(prefix, 100, 10, np.array([0, 1, 0]), np.array([-1, -1, 3]), 4)
    assert got.tolist() == [(100, 101, 102), (150, 151, 152), (140, 141, 142)]
    assert request_keys(prefix, 100).tolist() == [(100, 101, 102)] * 3


def test_a_prompt_hits_only_blocks_its_own_checkpoint_and_adapter_computed(tmp_path):
    """Twenty requests with the same prompt (hash_ids [7, 8, 9, 10]: 3 whole blocks), 2 s
    apart, one at a time, drawn over 3 checkpoints and 4 adapters (half the requests name
    one): a request reuses the 1,536 tokens only if an earlier request had its checkpoint
    and adapter (the pairs come from the workload's demand, drawn before any cache runs).
    Before keys were per pair every request after the first hit."""
    from sim.engine.demand import workload_demand

    path = tmp_path / "same.jsonl"
    path.write_text("".join(json.dumps(_conv(t * 2000, [7, 8, 9, 10])) + "\n" for t in range(20)))
    data = one_replica(path, 100, None, **SMALL)
    data["workloads"]["chat"]["mix"] = {"models": 3, "adapters": 4, "adapter_share": 0.5}
    pool = data["fleets"][0]["pools"][0]
    pool["residency"] = {"resident_models": 8, "adapter_cache": 16}
    pool["loading"] = {"storage": "nvme-gen5", "devices": 4}
    scenario = parse_scenario(data, "mix")
    demand = workload_demand(scenario, "chat")
    pairs = list(zip(demand.variant.tolist(), demand.adapter.tolist()))
    want = [1536 if pair in pairs[:i] else 0 for i, pair in enumerate(pairs)]
    assert 1 < want.count(0) < 20  # the draw has repeats and several pairs
    got = simulate(scenario).requests.sort_values("request_id")
    assert got["cached_tokens"].tolist() == want


def test_a_mix_whose_key_ranges_pass_63_bits_is_refused():
    """The largest mix (10**6 checkpoints, 10**7 adapters: 10**6 × (10**7 + 1) key ranges)
    fits 900,000 distinct blocks (9.000009e18 < 2**63 ≈ 9.223e18) but not 1,000,000
    (1.000001e19): the error names the workload's mix and the block count."""
    from sim.engine.demand import _check_key_room
    from sim.workloads.mix import ModelMix

    mix = ModelMix(models=10**6, adapters=10**7, adapter_share=0.5)
    _check_key_room("chat", mix, 900_000)
    with pytest.raises(ScenarioError, match=r"workloads\.chat\.mix: .*1,000,000 distinct prefix blocks.*2\*\*63"):
        _check_key_room("chat", mix, 1_000_000)
