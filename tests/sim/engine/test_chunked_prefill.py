"""Chunked prefill (pool ``prefill_chunk_tokens``, docs/serving.md): an 8k-token prompt
prefilled in four 2k-token chunks beside a decoding sequence, on a split deployment's
prefill replica then handed to the decode side, and a prompt with a cached prefix
chunking only its missed tokens (docs/kv-reuse.md), all timed by hand from the catalog
CSV rows; and the schema's refusal of a budget that decodes could fill and of chunking
where it is not modelled (chunks beside speculation: test_chunked_speculation.py)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import yaml
from scenario_cases import make_scenario
from typer.testing import CliRunner

from sim.cli import app

from sim.engine.core import simulate

ROOT = Path(__file__).resolve().parents[3]
TP, BPP = 4, 2.0  # Llama-3.1-70B (128k context), BF16 weights and KV, TP4 H100


def _row(table: str, key: str) -> dict:
    with open(ROOT / "fleets" / "data" / f"{table}.csv", newline="") as f:
        return next(r for r in csv.DictReader(f) if r["key"] == key)


H100 = _row("accelerators", "h100-sxm")
L70 = _row("models", "llama-3.1-70b")


def hand_iteration_s(m: int, c: int, decoders: int, context: int, model: dict = L70, tp: int = TP) -> float:
    """One iteration, from the raw CSV numbers (BF16 weights and KV on ``tp`` H100s): a
    chunk of m prompt tokens after c already prefilled or cached (causal pairs m²/2 + m·c,
    the c tokens' KV read) beside ``decoders`` sequences decoding one token over
    ``context`` tokens in all. Roofline: max(FLOP / (peak·η_c), bytes / (bandwidth·η_m))
    + 2 all-reduces per layer of the iteration's tokens (TP > 1) + the fixed
    per-iteration overhead."""
    TP = tp
    params = float(model["params_b"]) * 1e9
    layers, heads, kv_heads, head_dim, hidden = (int(model[k]) for k in ("layers", "heads", "kv_heads", "head_dim", "hidden"))
    pair = 4 * layers * heads * head_dim  # FLOP per query-key pair (QK and PV, 2 FLOP per MAC)
    tokens = m + decoders
    flops = 2 * params * tokens + pair * (0.5 * m * m + m * c) + pair * context
    kv_per_token = 2 * layers * kv_heads * head_dim * BPP
    bytes_moved = params * BPP + kv_per_token * (context + m + c)
    peak = float(H100["peak_bf16_tflops"]) * 1e12 * TP
    bw = float(H100["memory_bw_tbps"]) * 1e12 * TP
    eta_c, eta_m = float(H100["compute_efficiency"]), float(H100["bandwidth_efficiency"])
    link = float(H100["scaleup_gbps_per_dir"]) * 1e9
    latency = float(H100["scaleup_latency_us"]) * 1e-6 + float(H100["scaleup_latency_log2_us"]) * 1e-6 * math.log2(TP)
    allreduce = latency + 2 * (TP - 1) / TP * tokens * hidden * 2 / (link * float(H100["scaleup_bus_efficiency"]))
    return (max(flops / (peak * eta_c), bytes_moved / (bw * eta_m)) + (2 * layers * allreduce if TP > 1 else 0.0)
            + float(H100["iteration_overhead_us"]) * 1e-6)


PROMPT_A, OUTPUT_A = 100, 300  # the decoding sequence
PROMPT_B, CHUNK = 8192, 2048  # the long prompt, its chunk (the budget less A's decode token)


def _scenario(tmp_path, mode: str, chunk_tokens: int | None):
    trace = tmp_path / "trace.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     f"2023-11-16 18:00:00.0000000,{PROMPT_A},{OUTPUT_A}\n"
                     f"2023-11-16 18:00:00.5000000,{PROMPT_B},1\n")
    pool = {"name": "p", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1, "tp": TP,
            "precision": "bf16", "max_batch": 8}
    if chunk_tokens is not None:
        pool["prefill_chunk_tokens"] = chunk_tokens
    wl = {"chat": {"kind": "autoregressive", "model": "llama-3.1-70b",
                   "arrival": {"kind": "trace", "path": str(trace), "format": "azure_csv"}}}
    return make_scenario(wl, [pool], duration_s=60.0, engine={"mode": mode})


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_long_prompt_in_four_chunks_beside_a_decode(tmp_path, mode):
    run = simulate(_scenario(tmp_path, mode, CHUNK + 1))
    req = run.requests.sort_values("arrival_at_s").reset_index(drop=True)
    a, b = req.iloc[0], req.iloc[1]
    assert (a["status"], b["status"]) == ("completed", "completed")
    # A alone: its prefill, then batch-1 decodes until the first boundary at or after B's arrival
    t = a["arrival_at_s"] + hand_iteration_s(PROMPT_A, 0, 0, 0)
    assert a["first_token_at_s"] == pytest.approx(t, rel=1e-9)
    g = 1  # tokens A holds beyond its prompt
    while t < b["arrival_at_s"]:
        t += hand_iteration_s(0, 0, 1, PROMPT_A + g)
        g += 1
    assert b["admitted_at_s"] == pytest.approx(t, rel=1e-9)
    # B's four chunks, each beside A's decode; B's first token at the end of the last
    chunks = [hand_iteration_s(CHUNK, k * CHUNK, 1, PROMPT_A + g + k) for k in range(PROMPT_B // CHUNK)]
    assert len(chunks) == 4
    assert b["first_token_at_s"] - b["admitted_at_s"] == pytest.approx(sum(chunks), rel=1e-9)
    assert b["ttft_s"] == pytest.approx(t - b["arrival_at_s"] + sum(chunks), rel=1e-9)
    # A's inter-token gaps while B prefills are the chunk iterations: each well under the
    # whole 8k prefill that an unchunked replica would run beside it
    whole = hand_iteration_s(PROMPT_B, 0, 1, PROMPT_A + g)
    assert max(chunks) < whole / 3
    # A's timeline to its last token: the chunks then batch-1 decodes (B left with its token)
    t += sum(chunks)
    for h in range(g + 4, OUTPUT_A):
        t += hand_iteration_s(0, 0, 1, PROMPT_A + h)
    assert a["done_at_s"] == pytest.approx(t, rel=1e-9)


def test_unchunked_replica_stalls_the_decode_for_the_whole_prompt(tmp_path):
    """The same requests without chunking: B is prefilled whole in one iteration (the
    behaviour every scenario without the field keeps)."""
    req = simulate(_scenario(tmp_path, "fast", None)).requests.sort_values("arrival_at_s")
    a, b = req.iloc[0], req.iloc[1]
    t = a["arrival_at_s"] + hand_iteration_s(PROMPT_A, 0, 0, 0)
    g = 1
    while t < b["arrival_at_s"]:
        t += hand_iteration_s(0, 0, 1, PROMPT_A + g)
        g += 1
    whole = hand_iteration_s(PROMPT_B, 0, 1, PROMPT_A + g)
    assert b["first_token_at_s"] - b["admitted_at_s"] == pytest.approx(whole, rel=1e-9)


@pytest.mark.parametrize("chunk,field_text", [(8, "must exceed max_batch"), (0, "greater than or equal to 1")])
def test_bad_chunk_budget_is_refused(tmp_path, chunk, field_text):
    """``dcsim run`` exits 2 naming the field, writes nothing, shows no traceback."""
    data = {"name": "bad", "seed": 1, "duration_s": 10, "warmup_s": 0,
            "workloads": {"chat": {"kind": "autoregressive", "model": "llama-3.1-70b",
                                   "arrival": {"kind": "poisson", "rate_per_s": 1.0},
                                   "prompt_tokens": {"kind": "constant", "value": 100},
                                   "output_tokens": {"kind": "constant", "value": 10}}},
            "fleets": [{"name": "f", "pools": [{"name": "p", "accelerator": "h100-sxm", "serves": ["chat"],
                                                "replicas": 1, "tp": 4, "max_batch": 8,
                                                "prefill_chunk_tokens": chunk}]}]}
    _assert_run_refused(tmp_path, data, "prefill_chunk_tokens", field_text)


def _assert_run_refused(tmp_path, data: dict, *texts: str) -> None:
    """``dcsim run`` of scenario ``data`` exits 2 with every one of ``texts`` in its
    message, no traceback, and writes nothing."""
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    out = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert out.exit_code == 2, out.output
    for text in texts:
        assert text in out.output
    assert "Traceback" not in out.output
    assert not (tmp_path / "out").exists()


def _failing_chunked_scenario(in_flight: str) -> dict:
    """4 one-GPU replicas prefilling 8,000-token prompts in chunks of at most 236 tokens
    (300 less 64 decodes), a GPU failure rate high enough for several failures in an hour."""
    return {
        "name": "chunked-failures", "seed": 5, "duration_s": 3600.0, "drain_s": 1800.0,
        "workloads": {"chat": {"kind": "autoregressive", "model": "llama-3.1-8b",
                               "arrival": {"kind": "poisson", "rate_per_s": 4.0},
                               "prompt_tokens": {"kind": "constant", "value": 8000},
                               "output_tokens": {"kind": "constant", "value": 64}}},
        "fleets": [{"name": "f", "pools": [{
            "name": "h100", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 4, "tp": 1,
            "precision": "bf16", "max_batch": 64, "prefill_chunk_tokens": 300,
            "failures": {"components": {"gpu": {"rate_per_gpu_hour": 1.0}}, "detection_s": 30.0,
                         "repair_s": 300.0, "in_flight": in_flight}}]}],
    }


@pytest.mark.slow  # two one-hour runs (~6 s)
def test_a_failed_replica_gives_up_its_prompts_mid_prefill():
    """Requests mid-prefill (outside the completion heap until their last chunk) are taken
    out of a failed replica with the rest (sim.engine.capacity.evacuate): retried, every
    request completes (without that, one of this seed's stays in flight for ever); lost,
    each is counted once."""
    from sim.scenario import parse_scenario

    retried = simulate(parse_scenario(_failing_chunked_scenario("retry")))
    ops = retried.operations.iloc[0]
    assert ops["interruptions"] > 0 and ops["requests_retried"] > 0
    assert (retried.requests["status"] == "completed").all()
    lost = simulate(parse_scenario(_failing_chunked_scenario("lose")))
    rows = lost.requests[lost.requests["reject_reason"] == "lost_in_failure"]
    assert lost.operations.iloc[0]["requests_lost"] == len(rows) > 0
    assert (lost.requests["status"].isin(["completed", "rejected"])).all()


# --- a split deployment's prefill pool in chunks ------------------------------------------
L8 = _row("models", "llama-3.1-8b")
KV70 = 2 * int(L70["layers"]) * int(L70["kv_heads"]) * int(L70["head_dim"]) * BPP  # B per token (327,680)
SPLIT_PROMPT, SPLIT_OUTPUT = 8192, 4


def _split_scenario(tmp_path, mode: str, choice: str, transfer: str):
    trace = tmp_path / "one.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     f"2023-11-16 18:00:00.2500000,{SPLIT_PROMPT},{SPLIT_OUTPUT}\n")
    side = {"accelerator": "h100-sxm", "replicas": 1, "tp": TP, "precision": "bf16", "max_batch": 8}
    wl = {"chat": {"kind": "autoregressive", "model": "llama-3.1-70b",
                   "arrival": {"kind": "trace", "path": str(trace), "format": "azure_csv"},
                   "disaggregation": {"decode_choice": choice, "kv_transfer": transfer}}}
    pools = [{"name": "prefill", "serves": ["chat:prefill"], "prefill_chunk_tokens": CHUNK, **side},
             {"name": "decode", "serves": ["chat:decode"], **side}]
    return make_scenario(wl, pools, duration_s=60.0, engine={"mode": mode})


@pytest.mark.parametrize("mode", ["fast", "exact"])
@pytest.mark.parametrize("choice,transfer", [("at_handoff", "after_prefill"), ("at_prefill", "layerwise")])
def test_long_prompt_in_chunks_on_a_prefill_replica_then_its_transfer(tmp_path, mode, choice, transfer):
    """An 8,192-token prompt on an idle prefill replica with a 2,048-token budget: four
    chunk iterations with no decodes beside them (TTFT = their sum), handed off at the end
    of the last; the KV cache (8,192 × 327,680 B in BF16) crosses the H100s' scale-out NICs
    on min(4, 4) lanes: T = α + bytes / (4 β). After the last chunk (``after_prefill``) it
    arrives T after the first token; ``layerwise``, the decode replica reserved at the last
    chunk's start p0 and the layers stream during that chunk: α + max(p0 + (p1 − p0)/L +
    T_β, p1 + T_β/L). The decode replica then runs tokens 2 … 4 from its arrival."""
    row = simulate(_split_scenario(tmp_path, mode, choice, transfer)).requests.iloc[0]
    assert row["status"] == "completed" and (row["pool"], row["decode_pool"]) == ("prefill", "decode")
    chunks = [hand_iteration_s(CHUNK, k * CHUNK, 0, 0) for k in range(SPLIT_PROMPT // CHUNK)]
    assert len(chunks) == 4
    assert row["admitted_at_s"] == row["arrival_at_s"]
    assert row["ttft_s"] == pytest.approx(sum(chunks), rel=1e-9)
    p1 = row["first_token_at_s"]
    p0 = p1 - chunks[-1]
    alpha = float(H100["scaleout_latency_us"]) * 1e-6
    wire = SPLIT_PROMPT * KV70 / (TP * float(H100["scaleout_gbps_per_dir"]) * 1e9)
    assert row["kv_transfer_bytes"] == pytest.approx(SPLIT_PROMPT * KV70, rel=1e-12)
    assert row["kv_transfer_s"] == pytest.approx(alpha + wire, rel=1e-12)
    assert row["decode_queue_s"] == 0.0
    layers = int(L70["layers"])
    arrives = (p1 + alpha + wire if transfer == "after_prefill"
               else alpha + max(p0 + (p1 - p0) / layers + wire, p1 + wire / layers))
    assert row["kv_done_at_s"] == pytest.approx(arrives, rel=1e-12)
    decode = sum(hand_iteration_s(0, 0, 1, SPLIT_PROMPT + g) for g in range(1, SPLIT_OUTPUT))
    assert row["done_at_s"] - row["kv_done_at_s"] == pytest.approx(decode, rel=1e-9)


def test_prompts_on_a_chunked_prefill_replica_share_each_iterations_budget(tmp_path):
    """Two 3,000-token prompts at one instant on a 2,048-token budget: iteration 1 is A's
    first 2,048; iteration 2 A's last 952 and B's first 1,096 (oldest first, the rest of
    the budget), priced together; iteration 3 B's last 1,904. A's first token comes at the
    end of iteration 2, B's at the end of 3, each then handed off."""
    trace = tmp_path / "two.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:00:00.2500000,3000,4\n2023-11-16 18:00:00.2500000,3000,4\n")
    side = {"accelerator": "h100-sxm", "replicas": 1, "tp": TP, "precision": "bf16", "max_batch": 8}
    wl = {"chat": {"kind": "autoregressive", "model": "llama-3.1-70b",
                   "arrival": {"kind": "trace", "path": str(trace), "format": "azure_csv"}}}
    sc = make_scenario(wl, [{"name": "prefill", "serves": ["chat:prefill"], "prefill_chunk_tokens": CHUNK, **side},
                            {"name": "decode", "serves": ["chat:decode"], **side}], duration_s=60.0)
    req = simulate(sc).requests.sort_values("request_id")
    a, b = req.iloc[0], req.iloc[1]
    assert (req["status"] == "completed").all()
    it1 = hand_iteration_s(CHUNK, 0, 0, 0)
    # two chunks in one iteration: linear layers and all-reduces over their 2,048 tokens,
    # attention and KV reads summed (the helper's m, c per chunk, recombined)
    m1, c1, m2 = 952, CHUNK, 1096
    both = _two_chunks_s(m1, c1, m2, 0)
    it3 = hand_iteration_s(3000 - m2, m2, 0, 0)
    assert a["ttft_s"] == pytest.approx(it1 + both, rel=1e-9)
    assert b["ttft_s"] == pytest.approx(it1 + both + it3, rel=1e-9)
    assert b["kv_done_at_s"] > a["kv_done_at_s"]


def _two_chunks_s(m1: int, c1: int, m2: int, c2: int) -> float:
    """One prefill-only iteration of two chunks (m1 after c1, m2 after c2), by the same
    roofline as :func:`hand_iteration_s` (70B BF16 on four H100s)."""
    params = float(L70["params_b"]) * 1e9
    layers, heads, head_dim, hidden = (int(L70[k]) for k in ("layers", "heads", "head_dim", "hidden"))
    pair = 4 * layers * heads * head_dim
    tokens = m1 + m2
    flops = 2 * params * tokens + pair * (0.5 * m1 * m1 + m1 * c1 + 0.5 * m2 * m2 + m2 * c2)
    bytes_moved = params * BPP + KV70 * (m1 + c1 + m2 + c2)
    peak = float(H100["peak_bf16_tflops"]) * 1e12 * TP
    bw = float(H100["memory_bw_tbps"]) * 1e12 * TP
    link = float(H100["scaleup_gbps_per_dir"]) * 1e9
    latency = float(H100["scaleup_latency_us"]) * 1e-6 + float(H100["scaleup_latency_log2_us"]) * 1e-6 * math.log2(TP)
    allreduce = latency + 2 * (TP - 1) / TP * tokens * hidden * 2 / (link * float(H100["scaleup_bus_efficiency"]))
    return (max(flops / (peak * float(H100["compute_efficiency"])), bytes_moved / (bw * float(H100["bandwidth_efficiency"])))
            + 2 * layers * allreduce + float(H100["iteration_overhead_us"]) * 1e-6)


# --- with a prefix cache ---------------------------------------------------------------------
CACHE_BLOCK = 512


def _cached_scenario(tmp_path, rows: list, mode: str, model: str, tp: int, chunk: int, cache: dict):
    trace = tmp_path / "conv.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pool = {"name": "p", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1, "tp": tp,
            "precision": "bf16", "max_batch": 8, "prefill_chunk_tokens": chunk,
            "prefix_cache": {"block_tokens": CACHE_BLOCK, **cache}}
    wl = {"chat": {"kind": "autoregressive", "model": model,
                   "arrival": {"kind": "trace", "path": str(trace), "format": "mooncake_jsonl"}}}
    return make_scenario(wl, [pool], duration_s=200.0, drain_s=1000.0, engine={"mode": mode})


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_a_cached_prompt_chunks_only_its_missed_tokens(tmp_path, mode):
    """A (4,096 tokens: 8 hashed blocks, 7 of them cacheable, short of its last token) runs
    alone in two chunks of 2,048; B, later, extends A's conversation to 8,192 tokens and
    finds A's 7 blocks (3,584 tokens): it prefills its 4,608 missed tokens in chunks of
    2,048 after 3,584, 2,048 after 5,632 and 512 after 7,680, each reading the c tokens'
    KV before it (the cached prefix counted in c)."""
    rows = [{"timestamp": 0, "input_length": 4096, "output_length": 2, "hash_ids": list(range(8))},
            {"timestamp": 30_000, "input_length": 8192, "output_length": 2, "hash_ids": list(range(16))}]
    req = simulate(_cached_scenario(tmp_path, rows, mode, "llama-3.1-70b", TP, CHUNK, {})).requests
    a, b = req.sort_values("request_id").iloc[0], req.sort_values("request_id").iloc[1]
    assert (a["cached_tokens"], b["cached_tokens"]) == (0, 3584)
    assert a["ttft_s"] == pytest.approx(hand_iteration_s(CHUNK, 0, 0, 0) + hand_iteration_s(CHUNK, CHUNK, 0, 0), rel=1e-9)
    chunks = [hand_iteration_s(2048, 3584, 0, 0), hand_iteration_s(2048, 5632, 0, 0), hand_iteration_s(512, 7680, 0, 0)]
    assert b["ttft_s"] == pytest.approx(sum(chunks), rel=1e-9)
    uncached = sum(hand_iteration_s(CHUNK, k * CHUNK, 0, 0) for k in range(4))
    assert b["ttft_s"] < uncached


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_a_host_tier_hit_is_copied_under_the_first_chunk(tmp_path, mode):
    """Llama-3.1-8B BF16 on one H100, HBM capped at 22 cached blocks, host tier on: A and B
    (20 whole blocks each) push A's last 18 blocks to host memory; C, A's 20 blocks and 600
    new tokens, hits 10,240 tokens, 9,216 from host. Its first 300-token chunk waits for the
    copy of 9,216 × 131,072 B (2 × 32 layers × 8 KV heads × 128 × 2 B) over the PCIe Gen5
    x16 link's 55.43 GB/s (storage_tiers.csv host-pcie5-x16), longer than its compute; the
    second chunk pays only its compute."""
    x, y = list(range(21)), list(range(100, 121))
    conv = [{"timestamp": t, "input_length": 20 * CACHE_BLOCK + 100, "output_length": 5, "hash_ids": ids}
            for t, ids in ((0, x), (50_000, y))]
    c_row = {"timestamp": 100_000, "input_length": 20 * CACHE_BLOCK + 600, "output_length": 5,
             "hash_ids": x[:20] + [999]}
    sc = _cached_scenario(tmp_path, conv + [c_row], mode, "llama-3.1-8b", 1, 300,
                          {"capacity_blocks": 22, "host_blocks": 100})
    c = simulate(sc).requests.sort_values("request_id").iloc[2]
    assert (c["cached_tokens"], c["host_cached_tokens"]) == (10_240, 9_216)
    kv8 = 2 * int(L8["layers"]) * int(L8["kv_heads"]) * int(L8["head_dim"]) * BPP
    copy_s = 9_216 * kv8 / 55.43e9
    first = hand_iteration_s(300, 10_240, 0, 0, model=L8, tp=1)
    assert copy_s > first  # the copy sets the first chunk's time
    assert c["ttft_s"] == pytest.approx(copy_s + hand_iteration_s(300, 10_540, 0, 0, model=L8, tp=1), rel=1e-9)


@pytest.mark.parametrize("serves,spec,chunk,field_text", [
    (["chat:decode"], None, 512, "serves 'chat:decode'"),
    (["chat"], {"method": "ngram", "draft_tokens": 2, "acceptance": 0.5}, 24,
     "must exceed max_batch × (draft_tokens + 1) (=8 × 3 = 24)"),
    (["chat:draft"], {"method": "draft_model", "draft_tokens": 2, "acceptance": 0.5, "draft_model": "llama-3.1-8b"},
     512, "a draft pool's prefill runs in its target pools' iterations"),
])
def test_chunking_where_it_is_not_modelled_is_refused(tmp_path, serves, spec, chunk, field_text):
    """A decode pool prefills nothing; beside speculation a full batch's verifications take
    max_batch × (k + 1) tokens of the budget, which must leave some for a chunk; a draft
    pool's prefill is charged in its targets' (chunked) iterations: ``dcsim run`` exits 2
    naming the field, no traceback, nothing written."""
    wl = {"kind": "autoregressive", "model": "llama-3.1-70b", "arrival": {"kind": "poisson", "rate_per_s": 1.0},
          "prompt_tokens": {"kind": "constant", "value": 100}, "output_tokens": {"kind": "constant", "value": 10}}
    if spec:
        wl["speculation"] = spec
    pools = [{"name": "p", "accelerator": "h100-sxm", "serves": serves, "replicas": 1, "tp": 4, "max_batch": 8,
              "prefill_chunk_tokens": chunk}]
    if serves == ["chat:decode"]:
        pools.append({"name": "pre", "accelerator": "h100-sxm", "serves": ["chat:prefill"], "replicas": 1, "tp": 4})
    if serves == ["chat:draft"]:
        pools.append({"name": "target", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1, "tp": 4})
    data = {"name": "bad", "seed": 1, "duration_s": 10, "warmup_s": 0, "workloads": {"chat": wl},
            "fleets": [{"name": "f", "pools": pools}]}
    _assert_run_refused(tmp_path, data, "fleets.0.pools.0.prefill_chunk_tokens", field_text)
