"""Precision per tensor (issue 12, item 5): weights, KV cache and attention math each have
a precision; FP4 weights keep an FP8 KV cache by default; a part without a peak for a
precision refuses it.  Expected values are hand arithmetic from the raw catalog CSVs."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from fleets.catalog_io import load_catalog
from sim.errors import UserError
from sim.models.perf import PerfModel
from scenario_cases import make_scenario
from sim.fleet_plan import resolve_fleet

CAT = load_catalog()
ROOT = Path(__file__).resolve().parents[3]
ACC = {r["key"]: r for r in csv.DictReader(open(ROOT / "fleets" / "data" / "accelerators.csv", newline=""))}
L70 = next(r for r in csv.DictReader(open(ROOT / "fleets" / "data" / "models.csv", newline="")) if r["key"] == "llama-3-70b")
KV_ELEMENTS = 2 * int(L70["layers"]) * int(L70["kv_heads"]) * int(L70["head_dim"])
BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5}


@pytest.mark.parametrize("weights,kv,attention", [
    ("fp4", None, None), ("fp4", "fp4", "fp4"), ("fp8", None, None), ("bf16", None, None), ("fp4", "bf16", "bf16"),
])
def test_each_tensor_has_its_precision(weights, kv, attention):
    perf = PerfModel(CAT.accelerator("b200"), CAT.model("llama-3-70b"), weights, tp=1,
                     kv_precision=kv, attention_precision=attention)
    expected_kv = kv or ("fp8" if weights == "fp4" else weights)
    expected_attn = attention or expected_kv
    assert perf.kv_precision == expected_kv and perf.attention_precision == expected_attn
    assert perf.kv_bytes_per_token == pytest.approx(KV_ELEMENTS * BYTES[expected_kv])
    assert perf.weight_bytes == pytest.approx(float(L70["params_b"]) * 1e9 * BYTES[weights])
    peak = {p: float(ACC["b200"][f"peak_{p}_tflops"]) * 1e12 for p in BYTES}
    # decode at batch 1: FLOP time = linear at the weights' peak + attention at its own peak
    ctx = 100_000
    eta_c = float(ACC["b200"]["compute_efficiency"])  # dense GEMMs; fp4 math at eta_c x the fp4 factor
    if weights == "fp4":
        eta_c *= float(ACC["b200"]["fp4_efficiency_factor"])
    linear_s = 2 * float(L70["active_params_b"]) * 1e9 / (peak[weights] * eta_c)
    attn_s = 4 * int(L70["layers"]) * int(L70["heads"]) * int(L70["head_dim"]) * ctx / (peak[expected_attn] * eta_c)
    line = perf.decode_line(1)
    assert line.c0 + line.c1 * ctx == pytest.approx(linear_s + attn_s)


@pytest.mark.parametrize("key,precision", [("tpu-v5e", "fp8"), ("cerebras-wse3", "fp8"), ("h100-sxm", "fp4"),
                                           ("mi300x", "fp4"), ("groq-lpu", "fp4")])
def test_a_part_without_a_peak_refuses_the_precision(key, precision):
    assert ACC[key][f"peak_{precision}_tflops"] == ""
    with pytest.raises(UserError, match=f"has no {precision} peak"):
        PerfModel(CAT.accelerator(key), CAT.model("llama-3-8b"), precision)
    with pytest.raises(UserError, match=f"has no {precision} peak"):
        PerfModel(CAT.accelerator(key), CAT.model("llama-3-8b"), "bf16", attention_precision=precision)


def test_scenario_fields_reach_the_engine():
    """An FP4 KV cache holds twice the tokens of the default FP8 one under FP4 weights."""
    wl = {"chat": {"kind": "autoregressive", "model": "llama-3-70b", "arrival": {"kind": "poisson", "rate_per_s": 1.0},
                   "prompt_tokens": {"kind": "constant", "value": 500}, "output_tokens": {"kind": "constant", "value": 50}}}
    pool = {"name": "p", "accelerator": "b200", "serves": ["chat"], "replicas": 1, "precision": "fp4"}
    caps = []
    for extra in ({}, {"kv_precision": "fp4"}):
        sc = make_scenario(wl, [{**pool, **extra}], duration_s=20)
        built = resolve_fleet(sc, 0).pools[0]
        caps.append(built.kv_capacity_blocks)
        assert built.perf.kv_precision == extra.get("kv_precision", "fp8")
    assert caps[1] == pytest.approx(2 * caps[0], rel=0.001)


@pytest.mark.parametrize("model,factor", [("sdxl", True), ("sdxl-vae-decoder", True), ("flux-1-dev", False)])
def test_the_diffusion_factor_is_for_unets_and_vaes(model, factor):
    """SDXL's UNet and the VAE decoders run at η_c × diffusion_efficiency_factor (fitted on
    SDXL); FLUX.1, a DiT of 57 transformer blocks, at η_c (its GEMMs are an LLM's)."""
    row = ACC["h100-sxm"]
    eta = float(row["compute_efficiency"]) * (float(row["diffusion_efficiency_factor"]) if factor else 1.0)
    assert float(row["diffusion_efficiency_factor"]) != 1.0  # else the test could not tell them apart
    perf = PerfModel(CAT.accelerator("h100-sxm"), CAT.model(model), "fp8")
    assert perf.compute_rate == pytest.approx(float(row["peak_fp8_tflops"]) * 1e12 * eta)
