"""Roofline numbers computed by hand from the catalog CSV, and the engine's timeline of a
single request on an idle replica built from them."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
from scenario_cases import make_scenario

from fleets.catalog_io import load_catalog
from sim.engine.core import simulate
from sim.models.perf import PerfModel

ROOT = Path(__file__).resolve().parents[3]


def _row(table: str, key: str) -> dict:
    with open(ROOT / "fleets" / "data" / f"{table}.csv", newline="") as f:
        return next(r for r in csv.DictReader(f) if r["key"] == key)


H100 = _row("accelerators", "h100-sxm")
L70 = _row("models", "llama-3-70b")


def hand_decode_time_s(batch: int, context_tokens: int, tp: int, bytes_per_param: float) -> float:
    """Decode iteration of Llama-3-70B on tp H100s, from the raw CSV numbers."""
    params = float(L70["params_b"]) * 1e9
    layers, heads, kv_heads, head_dim, hidden = (int(L70[k]) for k in ("layers", "heads", "kv_heads", "head_dim", "hidden"))
    peak = float(H100["peak_fp8_tflops" if bytes_per_param == 1 else "peak_bf16_tflops"]) * 1e12 * tp
    bw = float(H100["memory_bw_tbps"]) * 1e12 * tp
    eta_c, eta_m = float(H100["compute_efficiency"]), float(H100["bandwidth_efficiency"])
    flops = 2 * params * batch + 4 * layers * heads * head_dim * context_tokens
    kv_per_token = 2 * layers * kv_heads * head_dim * bytes_per_param
    bytes_moved = params * bytes_per_param + kv_per_token * context_tokens
    link = float(H100["scaleup_gbps_per_dir"]) * 1e9
    latency = float(H100["scaleup_latency_us"]) * 1e-6
    latency += float(H100["scaleup_latency_log2_us"]) * 1e-6 * math.log2(tp)
    allreduce = latency + 2 * (tp - 1) / tp * batch * hidden * 2 / (link * float(H100["scaleup_bus_efficiency"]))
    t0 = float(H100["iteration_overhead_us"]) * 1e-6  # fixed per-iteration cost, shared by every chip
    return max(flops / (peak * eta_c), bytes_moved / (bw * eta_m)) + 2 * layers * allreduce + t0


def hand_prefill_time_s(prompt: int, tp: int, bytes_per_param: float) -> float:
    params = float(L70["params_b"]) * 1e9
    layers, heads, head_dim, hidden = (int(L70[k]) for k in ("layers", "heads", "head_dim", "hidden"))
    kv_per_token = 2 * layers * int(L70["kv_heads"]) * head_dim * bytes_per_param
    peak = float(H100["peak_fp8_tflops" if bytes_per_param == 1 else "peak_bf16_tflops"]) * 1e12 * tp
    bw = float(H100["memory_bw_tbps"]) * 1e12 * tp
    flops = 2 * params * prompt + 2 * layers * heads * head_dim * prompt**2
    bytes_moved = params * bytes_per_param + kv_per_token * prompt
    link = float(H100["scaleup_gbps_per_dir"]) * 1e9
    latency = float(H100["scaleup_latency_us"]) * 1e-6
    latency += float(H100["scaleup_latency_log2_us"]) * 1e-6 * math.log2(tp)
    allreduce = latency + 2 * (tp - 1) / tp * prompt * hidden * 2 / (link * float(H100["scaleup_bus_efficiency"]))
    eta_c, eta_m = float(H100["compute_efficiency"]), float(H100["bandwidth_efficiency"])
    t0 = float(H100["iteration_overhead_us"]) * 1e-6
    return max(flops / (peak * eta_c), bytes_moved / (bw * eta_m)) + 2 * layers * allreduce + t0


def perf(precision="bf16", tp=4) -> PerfModel:
    cat = load_catalog()
    return PerfModel(cat.accelerator("h100-sxm"), cat.model("llama-3-70b"), precision, tp=tp)


@pytest.mark.parametrize("batch,context", [(1, 1000), (8, 8 * 2000), (64, 64 * 1500), (256, 256 * 1000)])
@pytest.mark.parametrize("precision,bpp", [("bf16", 2.0), ("fp8", 1.0)])
def test_decode_step_time_matches_hand_roofline(batch, context, precision, bpp):
    expected = hand_decode_time_s(batch, context, 4, bpp)
    assert perf(precision).decode_time_s(batch, context) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("prompt", [128, 1024, 8000])
def test_prefill_time_matches_hand_roofline(prompt):
    assert perf().prefill_time_s(prompt) == pytest.approx(hand_prefill_time_s(prompt, 4, 2.0), rel=1e-9)


def test_decode_is_memory_bound_and_prefill_compute_bound():
    p = perf()
    # batch 1 decode: intensity ~1 FLOP/byte, far below the ridge (~295 for H100 BF16)
    intensity = p.decode_flops(1, 1000) / p.decode_bytes(1, 1000)
    assert intensity < 2 < p.ridge_flops_per_byte
    assert 250 < p.ridge_flops_per_byte < 350
    # a 4k-token prefill is far above the ridge
    t, flops, bytes_moved = p.mixed_cost(4096, 4096.0**2, 0, 0.0)
    assert flops / bytes_moved > p.ridge_flops_per_byte


def test_single_request_timeline_matches_hand_sum():
    """An idle replica: TTFT = prefill time; E2E − TTFT = Σ decode steps as context grows."""
    prompt, output = 700, 40
    sc = make_scenario(
        {
            "chat": {
                "kind": "autoregressive",
                "model": "llama-3-70b",
                "arrival": {"kind": "poisson", "rate_per_s": 0.001},
                "prompt_tokens": {"kind": "constant", "value": prompt},
                "output_tokens": {"kind": "constant", "value": output},
            }
        },
        [{"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1, "tp": 4, "precision": "bf16"}],
        duration_s=3000.0,
        seed=3,
    )
    run = simulate(sc)
    row = run.requests.iloc[0]
    assert row["status"] == "completed"
    assert row["ttft_s"] == pytest.approx(hand_prefill_time_s(prompt, 4, 2.0), rel=1e-9)
    decode = sum(hand_decode_time_s(1, prompt + g, 4, 2.0) for g in range(1, output))
    assert row["e2e_s"] - row["ttft_s"] == pytest.approx(decode, rel=1e-9)
    assert row["tpot_s"] == pytest.approx(decode / (output - 1), rel=1e-9)
