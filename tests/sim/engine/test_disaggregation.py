"""A split (prefill/decode) deployment in the engine: back-pressure when the decode side is
full (the prefill side holds the finished KV caches within its own KV capacity and stops
admitting; nothing is dropped), the replica-seconds each side is paid for, rejection of
what no decode pool could hold, and the decode router's choice among unequal pools."""

from __future__ import annotations

import numpy as np
import pytest
from scenario_cases import make_scenario

from sim.engine.core import simulate
from sim.fleet_plan import resolve_fleet

PROMPT, OUTPUT, BLOCK = 2000, 400, 16


def burst_trace(tmp_path, n: int, prompt: int = PROMPT, output: int = OUTPUT):
    path = tmp_path / f"burst{n}.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    + "".join(f"2023-11-16 18:00:00.{i:07d},{prompt},{output}\n" for i in range(n)))
    return {"kind": "trace", "path": str(path), "format": "azure_csv"}


def scenario(arrival, decode_memory: float, prefill_memory: float = 0.9, choice: str = "at_handoff", extra=()):
    return make_scenario(
        {"chat": {"kind": "autoregressive", "model": "llama-3.1-8b", "arrival": arrival,
                  "disaggregation": {"decode_choice": choice}}},
        [{"name": "prefill", "accelerator": "h100-sxm", "serves": ["chat:prefill"], "replicas": 1,
          "memory_utilization": prefill_memory, "min_kv_tokens": 0},
         {"name": "decode", "accelerator": "h100-sxm", "serves": ["chat:decode"], "replicas": 1,
          "memory_utilization": decode_memory, "min_kv_tokens": 0}, *extra],
        duration_s=1.0, drain_s=5000.0)


def max_overlap(starts: np.ndarray, ends: np.ndarray, weights: np.ndarray) -> float:
    """The largest total weight of intervals [start, end) open at one instant."""
    events = sorted([(s, 1, w) for s, w in zip(starts, weights)] + [(e, 0, -w) for e, w in zip(ends, weights)])
    level = peak = 0.0
    for _, _, w in events:  # at equal instants, ends (0) before starts (1)
        level += w
        peak = max(peak, level)
    return peak


@pytest.mark.parametrize("choice", ["at_handoff", "at_prefill"])
def test_a_full_decode_side_holds_kv_on_the_prefill_side_and_drops_nothing(tmp_path, choice):
    """40 requests at once; the decode replica holds about 3 of them, the prefill replica
    about 8 prompts. Every request completes; the KV caches the prefill side holds
    (from its prefill's start until its transfer ends) never exceed its capacity and
    fill it (so it stopped admitting); the decode side never reserves beyond its own.""" 
    sc = scenario(burst_trace(tmp_path, 40), decode_memory=0.1075, prefill_memory=0.1135, choice=choice)
    plan = resolve_fleet(sc, 0)
    prefill_cap, decode_cap = plan.pools[0].kv_capacity_blocks, plan.pools[1].kv_capacity_blocks
    per_prompt = -(-PROMPT // BLOCK)
    per_request = -(-(PROMPT + OUTPUT) // BLOCK)
    assert 7 * per_prompt <= prefill_cap < 9 * per_prompt and 3 * per_request <= decode_cap < 4 * per_request
    rows = simulate(sc).requests
    assert (rows["status"] == "completed").all() and len(rows) == 40
    assert (rows["pool"] == "prefill").all() and (rows["decode_pool"] == "decode").all()
    held = max_overlap(rows["admitted_at_s"].to_numpy(), rows["kv_done_at_s"].to_numpy(), np.full(40, per_prompt))
    watermark = -(-prefill_cap // 100)  # vLLM's 1% of the blocks kept free at admission
    assert prefill_cap - watermark - per_prompt < held <= prefill_cap
    assert (rows["decode_queue_s"] > 0).sum() >= 30  # most waited for room on the decode side
    reserved_at = rows["first_token_at_s"] + rows["decode_queue_s"]
    if choice == "at_prefill":  # reserved while the prefill may still run: from the start at the latest
        reserved_at = np.maximum(rows["admitted_at_s"], reserved_at)
    # every request on the decode side holds at least its prompt and first token's blocks
    # (those it preempted when the cache ran out wait without blocks, then recompute there)
    kept = (rows["preemptions"] == 0).to_numpy()
    assert 0 < (~kept).sum() < 40
    reserved = -(-(PROMPT + 1) // BLOCK)
    on_decode = max_overlap(reserved_at.to_numpy()[kept], rows["done_at_s"].to_numpy()[kept],
                            np.full(kept.sum(), reserved))
    assert on_decode <= decode_cap
    # the decode side admits first come, first served: reservations in prefill order
    order = rows.sort_values("first_token_at_s")
    assert (np.diff((order["first_token_at_s"] + order["decode_queue_s"]).to_numpy()) >= -1e-12).all()


def test_each_side_is_paid_its_replica_seconds(tmp_path):
    """A split request holds replica-seconds on both pools (its prefill share, then its
    decode share); over the requests they add up to each pool's busy time."""
    arrival = {"kind": "poisson", "rate_per_s": 20.0}
    sc = make_scenario(
        {"chat": {"kind": "autoregressive", "model": "llama-3.1-8b", "arrival": arrival,
                  "prompt_tokens": {"kind": "lognormal", "median": 1500, "sigma": 0.6, "max": 6000},
                  "output_tokens": {"kind": "lognormal", "median": 150, "sigma": 0.8, "max": 1500}}},
        [{"name": "prefill", "accelerator": "h100-sxm", "serves": ["chat:prefill"], "replicas": 2},
         {"name": "decode", "accelerator": "mi300x", "serves": ["chat:decode"], "replicas": 1}],
        duration_s=30.0, drain_s=600.0)
    run = simulate(sc)
    assert (run.requests["status"] == "completed").all()
    shares = run.pool_shares.groupby("pool")["busy_share_s"].sum()
    busy = run.pools.set_index("pool")["busy_total_s"]
    assert shares["prefill"] == pytest.approx(busy["prefill"], rel=1e-9)
    assert shares["decode"] == pytest.approx(busy["decode"], rel=1e-9)
    assert run.pool_shares["request_id"].nunique() == (run.requests["output_tokens"] > 1).sum()


def test_what_no_decode_pool_can_hold_is_rejected_at_arrival(tmp_path):
    rows = simulate(scenario(burst_trace(tmp_path, 3, prompt=2000, output=60_000), decode_memory=0.1075)).requests
    assert (rows["status"] == "rejected").all() and (rows["reject_reason"] == "exceeds_kv_capacity").all()


def test_the_decode_router_picks_a_pool_that_can_hold_the_request(tmp_path):
    """Two decode pools: a long request fits only the larger one."""
    big = {"name": "decode-big", "accelerator": "h200", "serves": ["chat:decode"], "replicas": 1}
    rows = simulate(scenario(burst_trace(tmp_path, 4, prompt=2000, output=20_000), decode_memory=0.1075,
                             extra=[big])).requests
    assert (rows["status"] == "completed").all()
    assert (rows["decode_pool"] == "decode-big").all()


def test_an_idle_prefill_replica_batches_the_prompts_that_arrive_at_one_instant(tmp_path):
    """An arrival alone at its instant starts an idle prefill replica at once (no wake-up
    timer, ARReplica.submit); two arrivals at one instant are still prefilled together, in
    one iteration, as the timer at that instant did: their first tokens come together and
    later after arrival than the lone request's (two prompts take longer than one)."""
    path = tmp_path / "pairs.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:00:00.0000000,2000,50\n"
                    "2023-11-16 18:00:00.3137000,2000,50\n"
                    "2023-11-16 18:00:00.3137000,2000,50\n")
    sc = scenario({"kind": "trace", "path": str(path), "format": "azure_csv"}, decode_memory=0.9,
                  choice="at_prefill")
    rows = simulate(sc).requests.sort_values("request_id")
    assert (rows["status"] == "completed").all()
    lone, a, b = (rows.iloc[i] for i in range(3))
    assert lone["admitted_at_s"] == lone["arrival_at_s"] and a["admitted_at_s"] == a["arrival_at_s"]
    assert a["admitted_at_s"] == b["admitted_at_s"] and a["first_token_at_s"] == b["first_token_at_s"]
    lone_ttft = lone["first_token_at_s"] - lone["arrival_at_s"]
    assert a["first_token_at_s"] - a["arrival_at_s"] > 1.5 * lone_ttft
