"""Classifier-free guidance batched vs sequential (issue 12, item 8): Wan 2.1's reference
text2video.py runs the conditional and unconditional passes one after the other, so CFG
doubles FLOP and weight reads but not peak activations; diffusers' SDXL pipeline batches
them (doubled batch).  Expected values from the raw models.csv rows."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from scenario_cases import make_scenario

from fleets.catalog_io import load_catalog
from sim.workloads.phases import ACT, DENOISE, FLOPS, STAGE, STEPS
from sim.workloads import picture_phases, picture_shape

ROOT = Path(__file__).resolve().parents[3]
MODELS = {r["key"]: r for r in csv.DictReader(open(ROOT / "fleets" / "data" / "models.csv", newline=""))}


def _denoise_phase(kind: str, model: str, **extra):
    sc = make_scenario({"w": {"kind": kind, "model": model, "arrival": {"kind": "poisson", "rate_per_s": 0.1},
                              "cfg": True, "steps": 10, **extra}},
                       [{"name": "p", "accelerator": "h200", "serves": ["w"], "replicas": 1}], duration_s=10)
    wl = sc.workloads["w"]
    phases = picture_phases(wl, picture_shape(wl, load_catalog()))
    return next(ph for ph in phases if ph[STAGE] == DENOISE)


@pytest.mark.parametrize("mode,passes,per_pass", [(None, 2, 1), ("sequential", 2, 1), ("batched", 1, 2)])
def test_wan_defaults_to_sequential_cfg(mode, passes, per_pass):
    row = MODELS["wan2.1-t2v-14b"]
    extra = {"cfg_mode": mode} if mode else {}
    ph = _denoise_phase("video_diffusion", "wan2.1-t2v-14b", **extra)
    assert ph[STEPS] == 10 * passes
    assert ph[FLOPS] == pytest.approx(float(row["flops_per_step_tflop"]) * 1e12 * per_pass)
    assert ph[ACT] == pytest.approx(float(row["activation_gb_per_sample"]) * 1e9 * per_pass)


def test_sdxl_defaults_to_batched_cfg():
    row = MODELS["sdxl"]
    ph = _denoise_phase("image_diffusion", "sdxl")
    assert ph[STEPS] == 10
    assert ph[FLOPS] == pytest.approx(2 * float(row["flops_per_step_tflop"]) * 1e12)
