"""Co-located pipeline stages run at their own arithmetic intensity (issue 12, item 8): the
text encoders, safety checker and VAE decoder that share the denoiser's replica stream
their own weights, not the denoiser's. One SDXL request alone on an H100: its E2E is the
sum over phases of steps × max(FLOP / (peak·η_c), (own weights + activations) / (BW·η_m)),
each stage computed here by hand from the raw catalog CSVs."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from scenario_cases import make_scenario

from sim.engine.core import simulate

ROOT = Path(__file__).resolve().parents[3]


def _rows(table):
    with open(ROOT / "fleets" / "data" / f"{table}.csv", newline="") as f:
        return {r["key"]: r for r in csv.DictReader(f)}


MODELS, ACCS = _rows("models"), _rows("accelerators")


def _stage_s(keys, calls, acc, act_scale=1.0):
    """One forward of each model in ``keys`` (``calls`` times): own FLOP, own bf16 weights,
    the stage's activations (the largest model's, × calls), as one roofline; denoisers and
    VAE decoders at η_c × the row's diffusion_efficiency_factor (text encoders at η_c)."""
    a = ACCS[acc]
    compute = float(a["peak_bf16_tflops"]) * 1e12 * float(a["compute_efficiency"])
    if MODELS[keys[0]]["kind"] in ("image_diffusion", "video_diffusion", "vae_decoder"):  # UNet / VAE kernels
        compute *= float(a["diffusion_efficiency_factor"])
    memory = float(a["memory_bw_tbps"]) * 1e12 * float(a["bandwidth_efficiency"])
    flops = sum(float(MODELS[k]["flops_per_step_tflop"]) * 1e12 for k in keys) * calls
    act = max(float(MODELS[k]["activation_gb_per_sample"]) * 1e9 for k in keys) * calls * act_scale
    weights = sum(float(MODELS[k]["params_b"]) * 1e9 * 2 for k in keys)
    return max(flops / compute, (weights + act) / memory) + float(a["iteration_overhead_us"]) * 1e-6


def _one_sdxl_request(acc="h100-sxm"):
    sc = make_scenario({"img": {"kind": "image_diffusion", "model": "sdxl", "arrival": {"kind": "poisson", "rate_per_s": 0.01}}},
                       [{"name": "p", "accelerator": acc, "serves": ["img"], "replicas": 1, "precision": "bf16"}],
                       duration_s=300)
    req = simulate(sc).requests
    done = req[req["status"] == "completed"]
    assert len(done) >= 1
    return done


@pytest.mark.parametrize("acc", ["h100-sxm", "mi300x"])
def test_sdxl_pipeline_e2e_is_the_sum_of_each_stage_own_roofline(acc):
    steps = int(MODELS["sdxl"]["default_steps"])
    encode = _stage_s(["clip-l-text", "openclip-bigg-text"], 2, acc)  # CFG: prompt and negative prompt
    denoise = _stage_s(["sdxl"], 2, acc)  # batched CFG: one forward of two samples
    safety = _stage_s(["sd-safety-checker"], 1, acc)
    decode = _stage_s(["sdxl-vae-decoder"], 1, acc)
    expected = encode + steps * denoise + safety + decode
    done = _one_sdxl_request(acc)
    assert done["e2e_s"].to_numpy() == pytest.approx(expected, rel=1e-9)


def test_encoder_stage_no_longer_streams_the_denoiser_weights():
    """The encode step of SDXL is memory-bound: its own 1.6 GB of weights, not the UNet's
    5.1 GB; the old (denoiser-intensity) time would be 3x longer and is not what runs."""
    a = ACCS["h100-sxm"]
    memory = float(a["memory_bw_tbps"]) * 1e12 * float(a["bandwidth_efficiency"])
    own = _stage_s(["clip-l-text", "openclip-bigg-text"], 2, "h100-sxm")
    act = 2 * float(MODELS["openclip-bigg-text"]["activation_gb_per_sample"]) * 1e9
    as_denoiser = (float(MODELS["sdxl"]["params_b"]) * 2e9 + act) / memory
    t0 = float(a["iteration_overhead_us"]) * 1e-6  # the same fixed cost either way
    assert as_denoiser > 2.5 * (own - t0)
    steps = int(MODELS["sdxl"]["default_steps"])
    rest = steps * _stage_s(["sdxl"], 2, "h100-sxm") + _stage_s(["sd-safety-checker"], 1, "h100-sxm") \
        + _stage_s(["sdxl-vae-decoder"], 1, "h100-sxm")
    e2e = _one_sdxl_request()["e2e_s"].iloc[0]
    assert e2e == pytest.approx(rest + own, rel=1e-9)
    assert e2e != pytest.approx(rest + as_denoiser, rel=1e-6)
