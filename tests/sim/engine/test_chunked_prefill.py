"""Chunked prefill (pool ``prefill_chunk_tokens``, docs/serving.md): an 8k-token prompt
prefilled in four 2k-token chunks beside a decoding sequence, timed by hand from the
catalog CSV rows; and the schema's refusal of a budget that decodes could fill."""

from __future__ import annotations

import csv
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


def hand_iteration_s(m: int, c: int, decoders: int, context: int) -> float:
    """One iteration, from the raw CSV numbers: a chunk of m prompt tokens after c
    already prefilled (causal pairs m²/2 + m·c, the c tokens' KV read) beside
    ``decoders`` sequences decoding one token over ``context`` tokens in all. Roofline:
    max(FLOP / (peak·η_c), bytes / (bandwidth·η_m)) + 2 all-reduces per layer of the
    iteration's tokens + the fixed per-iteration overhead."""
    params = float(L70["params_b"]) * 1e9
    layers, heads, kv_heads, head_dim, hidden = (int(L70[k]) for k in ("layers", "heads", "kv_heads", "head_dim", "hidden"))
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
    return (max(flops / (peak * eta_c), bytes_moved / (bw * eta_m)) + 2 * layers * allreduce
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
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    out = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert out.exit_code == 2, out.output
    assert "prefill_chunk_tokens" in out.output and field_text in out.output
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
