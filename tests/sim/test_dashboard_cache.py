"""Prefix-cache columns in the dashboard (sim/dashboard_cache.py): tiers found by column
name, token and byte sums by hand, the KV bytes per token from the model's config."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from sim import dashboard_cache as cache


def rows() -> pd.DataFrame:
    """Five requests of one fleet and workload on two pools; an SSD tier column that the
    engine does not write today stands for a tier added later."""
    return pd.DataFrame({
        "fleet": ["f"] * 5, "workload": ["chat"] * 5, "pool": ["a", "a", "b", "b", "a"],
        "status": ["completed", "completed", "completed", "rejected", "completed"],
        "measured": [True, True, True, True, False],
        "cached_tokens": [1000, 512, 2048, 0, 4096],
        "host_cached_tokens": [512, 0, 1024, 0, 4096],
        "ssd_cached_tokens": [0, 512, 512, 0, 0],
    })


def test_tokens_per_tier_and_bytes_moved_by_hand():
    table = cache.tier_tokens(rows(), {("f", "a"): 100.0, ("f", "b"): 10.0}).iloc[0]
    # measured and completed: the first three rows only
    assert table["tokens_from_host"] == 512 + 0 + 1024
    assert table["tokens_from_ssd"] == 0 + 512 + 512
    assert table["tokens_from_hbm"] == (1000 - 512) + (512 - 512) + (2048 - 1024 - 512)
    assert table["kv_bytes_moved_host_to_hbm"] == 512 * 100 + 1024 * 10
    assert table["kv_bytes_moved_ssd_to_hbm"] == 512 * 100 + 512 * 10


def test_new_tier_columns_show_without_code_changes():
    assert cache.lower_tiers(rows()) == ["host", "ssd"]
    summary = pd.DataFrame({"fleet": ["f", "g"], "workload": ["chat", "chat"], "prefix_hit_ratio": [0.25, math.nan],
                            "prefix_ssd_hit_ratio": [0.05, math.nan], "prefill_flops_saved": [1.5e18, math.nan],
                            "ttft_p99_s": [1.0, 2.0]})
    assert cache.cache_columns(summary) == ["prefix_hit_ratio", "prefix_ssd_hit_ratio", "prefill_flops_saved"]
    shown = cache.cache_summary(summary, pd.DataFrame())
    assert list(shown["fleet"]) == ["f"]  # the fleet without a cache is left out
    assert shown.iloc[0]["prefix_ssd_hit_ratio"] == "5.0%" and shown.iloc[0]["prefill_flops_saved"] == "1.5e+18"


def test_kv_traffic_columns_show_beside_the_ratios_and_handoff_bytes_do_not():
    pools = pd.DataFrame({"fleet": ["f", "f"], "pool": ["chat", "plain"], "prefix_hit_ratio": [0.2, math.nan],
                          "kv_demoted_host_bytes": [3.0e12, math.nan], "kv_demoted_ssd_bytes": [1.25e12, math.nan],
                          "kv_written_shared_bytes": [5.0e11, math.nan], "kv_dropped_bytes": [0.0, math.nan],
                          "kv_promoted_host_bytes": [2.0e11, math.nan], "kv_transfer_bytes": [7.0, 7.0],
                          "busy_fraction": [0.5, 0.5]})
    assert cache.cache_columns(pools) == ["prefix_hit_ratio", "kv_demoted_host_bytes", "kv_demoted_ssd_bytes",
                                          "kv_written_shared_bytes", "kv_dropped_bytes", "kv_promoted_host_bytes"]
    shown = cache.pool_cache_table(pools)
    assert list(shown["pool"]) == ["chat"]
    row = shown.iloc[0]
    assert (row["kv_demoted_host_bytes"], row["kv_demoted_ssd_bytes"], row["kv_dropped_bytes"]) == ("3e+12", "1.25e+12", "0")


def test_no_cache_no_table():
    plain = rows().drop(columns=["cached_tokens", "host_cached_tokens", "ssd_cached_tokens"])
    assert cache.tier_tokens(plain, {}).empty
    assert cache.cache_summary(pd.DataFrame({"fleet": ["f"], "workload": ["w"], "ttft_p99_s": [1.0]}),
                               pd.DataFrame()).empty


@pytest.mark.slow
def test_mooncake_run_tiers_add_up_to_the_hit_ratio_and_bytes_follow_the_model():
    """Llama-3.1-405B stores 126 layers x 8 KV heads x 128 dims x 2 (K and V) x 1 byte
    (FP8 KV) = 258,048 bytes per token (its config.json; the scenario's comment agrees),
    whole on each TP8 shard set (8 KV heads over TP8: no replication)."""
    from sim.overrides import override
    from sim.results.tables import run_scenario
    from sim.scenario import load_scenario

    sc = override(load_scenario("scenarios/mooncake-prefix.yaml"), [("duration_s", 300.0), ("warmup_s", 30.0)], "t")
    results = run_scenario(sc)
    per_token = cache.kv_bytes_by_pool(results.scenario)
    assert per_token[("cache-load-host", "chat")] == 126 * 8 * 128 * 2 * 1
    assert ("no-cache", "chat") not in per_token
    tiers = cache.tier_tokens(results.requests, per_token).set_index("fleet")
    done = results.requests[results.requests["measured"] & (results.requests["status"] == "completed")]
    for fleet in ("cache-load", "cache-prefix-host", "cache-prefix-ssd"):
        prompt = done.loc[done["fleet"] == fleet, "prompt_tokens"].sum()
        hit = results.summary.set_index("fleet").loc[fleet, "prefix_hit_ratio"]
        served = sum(tiers.loc[fleet, c] for c in ("tokens_from_hbm", "tokens_from_host", "tokens_from_ssd")
                     if c in tiers.columns and tiers.loc[fleet, c] == tiers.loc[fleet, c])  # NaN: no such tier
        assert served / prompt == pytest.approx(hit)
    ssd = tiers.loc["cache-prefix-ssd"]
    assert ssd["kv_bytes_moved_ssd_to_hbm"] == ssd["tokens_from_ssd"] * 258_048
    host = tiers.loc["cache-prefix-host"]
    assert host["kv_bytes_moved_host_to_hbm"] == host["tokens_from_host"] * 258_048
    pools = cache.pool_cache_table(results.pools)
    assert set(pools["fleet"]) == {"cache-load", "cache-prefix", "cache-load-host", "cache-prefix-host",
                                   "cache-load-ssd", "cache-prefix-ssd"}
    # the tier traffic shows per pool and per workload (in 300 s the replicas' HBM does not
    # fill, so nothing is demoted yet: the blocks dropped, demoted and promoted are all 0)
    moves = ["kv_demoted_host_bytes", "kv_demoted_ssd_bytes", "kv_dropped_bytes", "kv_promoted_host_bytes",
             "kv_promoted_ssd_bytes"]
    shown = cache.cache_summary(results.summary, tiers).set_index("fleet")
    for table in (pools.set_index("fleet"), shown):
        assert table.loc["cache-prefix-ssd", moves].tolist() == ["0"] * 5
        assert table.loc["cache-load", "kv_dropped_bytes"] == "0"
