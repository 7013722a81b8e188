"""KV bytes moved between a prefix cache's tiers (sim/engine/prefix_cache.py ``TRAFFIC``,
pools.csv and summary.csv ``kv_*_bytes``, docs/kv-reuse.md), counted by hand.

One replica of Llama-3.1-8B FP8 on one H100 (TP1), one request at a time, tiers of
2 (HBM, ``capacity_blocks``), 1 (host DRAM) and 1 (SSD) blocks of 512 tokens. A block is
512 tokens × 65,536 B (2 × 32 layers × 8 KV heads × 128 dims × 1 B, the model's
config.json at FP8) = 33,554,432 B. Five requests of two cacheable blocks each, 50 s
apart (each done before the next): A, B, C, B again, A again. A request releases its
blocks last first, so its second block is the older evictable one; a commit evicts the
least recent blocks down to the HBM capacity, each cascading down the tiers:

- A at 0 s: nothing moves. HBM {A0, A1}.
- B at 50 s: A1 then A0 to host; host over by one: A1 on to the SSD.
  HBM {B0, B1}, host {A0}, SSD {A1}. (2 demoted to host, 1 to the SSD)
- C at 100 s: B1 to host, A0 on to the SSD, A1 out of the SSD; B0 to host, B1 on to the
  SSD, A0 out. HBM {C0, C1}, host {B0}, SSD {B1}. (+2 host, +2 SSD, 2 leave the SSD)
- B at 150 s: B0 promoted from host, B1 from the SSD; C1 to host; C0 to host, C1 on to
  the SSD. HBM {B0, B1}, host {C0}, SSD {C1}. (+2 host, +1 SSD)
- A at 200 s: without a shared store A0 is gone (no hit): B1 to host, C0 on to the SSD,
  C1 out; B0 to host, B1 on, C0 out. (+2 host, +2 SSD, 2 leave the SSD)

Without a shared store: 8 demoted to host, 6 to the SSD, 4 dropped, 1 promoted from each
tier. With a shared store of one block, what leaves the SSD is written there instead: at
C, A1 (written) then A0 (written; A1 leaves the store: dropped); at the second A, A0 is
read from the store (promoted) and only A1 computed, and C1, C0 are written (each pushing
the store's one block out: 2 dropped). So 4 written, 3 dropped, 1 promoted from the store.
"""

from __future__ import annotations

import json

import pytest

from sim.engine.core import simulate
from sim.results.tables import run_scenario
from sim.scenario import parse_scenario

BLOCK = 512
BLOCK_BYTES = 512 * 2 * 32 * 8 * 128 * 1  # tokens x (K and V x layers x KV heads x head dim x FP8 byte)


def _rows() -> list[dict]:
    chains = {"A": [1, 2], "B": [11, 12], "C": [21, 22]}
    return [{"timestamp": 50_000 * i, "input_length": 2 * BLOCK + 100, "output_length": 5,
             "hash_ids": chains[name] + [100 + i]} for i, name in enumerate("ABCBA")]


def _scenario(tmp_path, shared: int = 0, warmup_s: float = 0.0, cache: bool = True) -> dict:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    pool = {"name": "p", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1, "tp": 1, "precision": "fp8",
            "max_batch": 1, "min_kv_tokens": 2048}
    if cache:
        pool["prefix_cache"] = {"block_tokens": BLOCK, "capacity_blocks": 2, "host_blocks": 1, "ssd_blocks": 1,
                                "shared_blocks": shared}
    return {
        "name": "traffic", "seed": 1, "duration_s": 300, "warmup_s": warmup_s, "drain_s": 1000,
        "workloads": {"chat": {"kind": "autoregressive", "model": "llama-3.1-8b",
                               "arrival": {"kind": "trace", "path": str(path), "format": "mooncake_jsonl"}}},
        "fleets": [{"name": "f", "router": "least_outstanding", "pools": [pool]}],
    }


NO_STORE = {"dropped": 4, "demoted_host": 8, "demoted_ssd": 6, "promoted_host": 1, "promoted_ssd": 1}
STORE = {"dropped": 3, "demoted_host": 8, "demoted_ssd": 6, "written_shared": 4, "promoted_host": 1,
         "promoted_ssd": 1, "promoted_shared": 1}


@pytest.mark.parametrize(("shared", "expected"), [(0, NO_STORE), (1, STORE)])
def test_blocks_moved_between_tiers_counted_by_hand(tmp_path, shared, expected):
    run = simulate(parse_scenario(_scenario(tmp_path, shared), "traffic"))
    got = run.requests.sort_values("request_id")
    assert (got["status"] == "completed").all()
    assert got["cached_tokens"].tolist() == [0, 0, 0, 1024, 512 if shared else 0]  # the walk-through's hits
    row = run.pools.iloc[0]
    blocks = {c[3:-7]: int(row[c]) for c in run.pools.columns if c.startswith("kv_") and c.endswith("_blocks")}
    assert blocks == expected


def test_pool_and_summary_columns_in_bytes(tmp_path):
    results = run_scenario(parse_scenario(_scenario(tmp_path, 1), "traffic"))
    pool, summary = results.pools.iloc[0], results.summary.iloc[0]
    for name, n in STORE.items():
        assert pool[f"kv_{name}_bytes"] == n * BLOCK_BYTES
        assert summary[f"kv_{name}_bytes"] == n * BLOCK_BYTES  # one pool serves the workload


def test_only_tier_changes_inside_the_measurement_window_count(tmp_path):
    """With the window opening at 75 s, B's demotions at 50 s are left out (2 to host, 1 to
    the SSD); everything after counts."""
    run = simulate(parse_scenario(_scenario(tmp_path, warmup_s=75.0), "traffic"))
    row = run.pools.iloc[0]
    assert (row["kv_demoted_host_blocks"], row["kv_demoted_ssd_blocks"], row["kv_dropped_blocks"]) == (6, 5, 4)
    assert (row["kv_promoted_host_blocks"], row["kv_promoted_ssd_blocks"]) == (1, 1)


def test_no_shared_store_no_shared_columns_and_no_cache_no_columns(tmp_path):
    with_cache = run_scenario(parse_scenario(_scenario(tmp_path), "traffic"))
    assert "kv_written_shared_bytes" not in with_cache.pools and "kv_promoted_shared_bytes" not in with_cache.summary
    assert "kv_demoted_host_bytes" in with_cache.summary
    plain = run_scenario(parse_scenario(_scenario(tmp_path, cache=False), "traffic"))
    for table in (plain.pools, plain.summary):
        assert not [c for c in table.columns if c.startswith(("kv_demoted", "kv_promoted", "kv_written", "kv_dropped"))]
