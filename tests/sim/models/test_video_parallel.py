"""Video DiTs as their reference code runs them (issue 24, item 5): sequence parallel
(Ulysses) with FSDP on several GPUs, CPU offload on one, against the Wan 2.1 and Wan 2.2
"Computational Efficiency on Different GPUs" tables (github.com/Wan-Video/Wan2.1 README /
assets/comp_effic.png @65386b2e03c4, 2025-02-25; Wan2.2 @fa96d0963f1a, 2025-07-28: total
time in s / peak GPU memory in GB, H100/H800, 81 frames, Wan2.1 50 steps, Wan2.2 40).

Fitted: the attention kernel's efficiency, on the two single-GPU 720P times (one each).
Held out: every multi-GPU time, the 480P times and every memory figure.  Hand arithmetic
from the raw catalog CSVs for the communication and the memory components."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
from scenario_cases import make_scenario

from fleets.catalog_io import load_catalog
from sim.errors import PlacementError
from sim.fleet_plan import resolve
from sim.models.video_parallel import VideoScheme, memory_per_gpu, request_memory
from sim.workloads import picture_phases
from sim.workloads.phases import ACT, FLOPS, KERNEL, STEPS, WIDTH

CAT = load_catalog()
ROOT = Path(__file__).resolve().parents[3]
ACC = {r["key"]: r for r in csv.DictReader(open(ROOT / "fleets" / "data" / "accelerators.csv", newline=""))}
MODELS = {r["key"]: r for r in csv.DictReader(open(ROOT / "fleets" / "data" / "models.csv", newline=""))}
SHAPES = {"720P": (720, 1280), "480P": (480, 832)}
# (model, resolution, GPUs, published s, published GB) - the H100/H800 rows of the tables
PUBLISHED = [
    ("wan2.1-t2v-14b", "720P", 1, 1837.9, 69.1), ("wan2.1-t2v-14b", "720P", 2, 945.1, 53.9),
    ("wan2.1-t2v-14b", "720P", 4, 497.0, 37.9), ("wan2.1-t2v-14b", "720P", 8, 287.9, 29.9),
    ("wan2.2-t2v-a14b", "720P", 1, 1041.5, 59.8), ("wan2.2-t2v-a14b", "720P", 4, 288.7, 51.7),
    ("wan2.2-t2v-a14b", "720P", 8, 155.1, 37.1), ("wan2.2-t2v-a14b", "480P", 1, 326.9, 41.3),
    ("wan2.2-t2v-a14b", "480P", 4, 91.7, 40.9), ("wan2.2-t2v-a14b", "480P", 8, 51.5, 26.3),
]
STEPS_OF = {"wan2.1-t2v-14b": 50, "wan2.2-t2v-a14b": 40}


def _plan(model, res, gpus, **pool):
    h, w = SHAPES[res]
    sc = make_scenario({"w": {"kind": "video_diffusion", "model": model, "arrival": {"kind": "poisson", "rate_per_s": 0.01},
                              "height_px": h, "width_px": w, "frames": 81, "steps": STEPS_OF[model]}},
                       [{"name": "p", "accelerator": "h100-sxm", "serves": ["w"], "replicas": 1, "sp": gpus,
                         "precision": "bf16", "memory_utilization": 1.0, **pool}], duration_s=10)
    fleet = resolve(sc).fleets[0]
    return sc.workloads["w"], fleet.routes[0].shape, fleet.pools[0]


def _latency_s(wl, shape, pool) -> float:
    """One request alone: each phase's steps at its kernel's time (the step replica's cost)."""
    total = 0.0
    for ph in picture_phases(wl, shape):
        perf = pool.stage_perfs.get(ph[KERNEL])
        total += ph[STEPS] * perf.time_s(ph[FLOPS] * ph[WIDTH], perf.weight_bytes_read(ph[4]) + ph[ACT] * ph[WIDTH],
                                         ph[4])
    return total


def _peak_gb(wl, shape, pool, model) -> float:
    return request_memory(pool.perf.scheme, wl, shape, CAT.model(model), pool.stages[0], CAT, "bf16").peak / 1e9


@pytest.mark.parametrize("model,res,gpus,seconds,gb", [p for p in PUBLISHED if p[2] == 1 and p[1] == "720P"])
def test_fitted_single_gpu_times_are_reproduced(model, res, gpus, seconds, gb):
    wl, shape, pool = _plan(model, res, gpus)
    assert pool.perf.scheme == VideoScheme(1, "ulysses", False, True)  # the reference: offload on one GPU
    assert _latency_s(wl, shape, pool) == pytest.approx(seconds, rel=0.01)


@pytest.mark.parametrize("model,res,gpus,seconds,gb", [p for p in PUBLISHED if p[2] > 1 and p[1] == "720P"])
def test_held_out_multi_gpu_times_at_720p_within_16_percent(model, res, gpus, seconds, gb):
    """Ulysses + FSDP at 2-8 GPUs, none fitted (the old model, everything / GPUs with a
    GEMM efficiency, was 38-40% fast on every one)."""
    wl, shape, pool = _plan(model, res, gpus)
    assert pool.perf.scheme == VideoScheme(gpus, "ulysses", True, False)
    assert _latency_s(wl, shape, pool) == pytest.approx(seconds, rel=0.16)


@pytest.mark.parametrize("model,res,gpus,seconds,gb", [p for p in PUBLISHED if p[1] == "480P"])
def test_held_out_480p_times_are_under_by_20_to_30_percent(model, res, gpus, seconds, gb):
    """At 480P the model is 17-27% fast (documented in docs/diffusion.md: the smaller
    per-GPU GEMMs run below the catalog's efficiency, not modelled)."""
    wl, shape, pool = _plan(model, res, gpus)
    assert -0.31 <= _latency_s(wl, shape, pool) / seconds - 1 <= -0.15


@pytest.mark.parametrize("model,res,gpus,seconds,gb", PUBLISHED)
def test_peak_memory_per_gpu_within_22_percent(model, res, gpus, seconds, gb):
    wl, shape, pool = _plan(model, res, gpus)
    assert _peak_gb(wl, shape, pool, model) == pytest.approx(gb, rel=0.22)


def test_fsdp_memory_by_hand():
    """Wan2.2-T2V-A14B on 8 GPUs at 720P: the denoise phase holds both experts' fp32 shards,
    the umT5 shard, one gathered bf16 block and 1/8 of the activations; rank 0's decode
    holds the shards plus the fp32 VAE and its fp32 activations (the catalog row's per frame
    area, 480x832)."""
    row, t5, vae = MODELS["wan2.2-t2v-a14b"], MODELS["umt5-xxl-encoder"], MODELS["wan-vae-decoder"]
    shards = (float(row["params_b"]) * 4 + float(t5["params_b"]) * 4) * 1e9 / 8
    block = float(row["active_params_b"]) * 1e9 * 2 / int(row["layers"])
    act = float(row["activation_gb_per_sample"]) * 1e9
    vae_bytes = float(vae["params_b"]) * 1e9 * 4 + float(vae["activation_gb_per_sample"]) * 1e9 * (720 * 1280) / (480 * 832) * 2
    mem = memory_per_gpu(VideoScheme(8, "ulysses", True, False), CAT.model("wan2.2-t2v-a14b"),
                         CAT.model("umt5-xxl-encoder"), CAT.model("wan-vae-decoder"), "bf16", act, 720 * 1280)
    assert mem.denoise == pytest.approx(shards + block + act / 8)
    assert mem.decode == pytest.approx(shards + vae_bytes)


def test_offload_keeps_one_expert_resident():
    """One GPU, offload: one 14.29B expert in bf16 during denoising, the encoder off the GPU."""
    row = MODELS["wan2.2-t2v-a14b"]
    act = float(row["activation_gb_per_sample"]) * 1e9
    mem = memory_per_gpu(VideoScheme(1, "ulysses", False, True), CAT.model("wan2.2-t2v-a14b"),
                         CAT.model("umt5-xxl-encoder"), None, "bf16", act, 720 * 1280)
    assert mem.denoise == pytest.approx(float(row["active_params_b"]) * 1e9 * 2 + act)


def test_ulysses_all_to_alls_by_hand():
    """Four all-to-alls per layer of (T/sp)·hidden·2 B per GPU, each α(sp) + (sp−1)/sp · bytes / (η_bus·β)
    over the H100 scale-up link (raw catalog columns)."""
    _, shape, pool = _plan("wan2.2-t2v-a14b", "720P", 8)
    a = ACC["h100-sxm"]
    alpha = (float(a["scaleup_latency_us"]) + float(a["scaleup_latency_log2_us"]) * math.log2(8)) * 1e-6
    bw = float(a["scaleup_bus_efficiency"]) * float(a["scaleup_gbps_per_dir"]) * 1e9
    tokens = 75_600
    per_gpu = tokens / 8 * 5120 * 2
    expected = 40 * 4 * (alpha + 7 / 8 * per_gpu / bw)
    assert pool.perf.comm_time_s(tokens) == pytest.approx(expected, rel=1e-9)


def test_compute_scales_with_the_sp_group_and_weights_do_not():
    """Every GPU reads the whole gathered expert; FLOP divide over sp."""
    _, _, one = _plan("wan2.2-t2v-a14b", "720P", 1)
    _, _, eight = _plan("wan2.2-t2v-a14b", "720P", 8)
    assert eight.perf.compute_rate == pytest.approx(8 * one.perf.compute_rate)
    assert eight.perf.weight_bytes_read(1) == one.perf.weight_bytes_read(1) == pytest.approx(14.2885e9 * 2)
    assert eight.layout.accelerators == 8


@pytest.mark.parametrize("pool,needle", [
    ({"sp": 3}, "sp=3 does not divide the model's 40 heads"),
    ({"sp": 16}, "must fit one scale-up domain of 8"),
    ({"sp": 2, "tp": 2}, "tp=2 with sp=2"),
])
def test_bad_schemes_are_refused_with_the_allowed_values(pool, needle):
    with pytest.raises(PlacementError, match=needle) as err:
        _plan("wan2.2-t2v-a14b", "720P", pool.pop("sp"), **pool)
    if "heads" in needle:
        assert "[1, 2, 4, 5, 8]" in str(err.value)


def test_scheme_fields_on_an_llm_are_refused():
    sc = make_scenario({"chat": {"kind": "autoregressive", "model": "llama-3.1-8b",
                                 "arrival": {"kind": "poisson", "rate_per_s": 1.0}}},
                       [{"name": "p", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1, "fsdp": True}])
    with pytest.raises(PlacementError, match="fsdp set but model 'llama-3.1-8b' is not a video DiT"):
        resolve(sc)


def test_ring_attention_hides_its_passes_behind_attention():
    """Ring on 4 GPUs at 720P: its K/V passes are far shorter than the attention, so nothing
    is exposed; Ulysses pays its all-to-alls."""
    _, _, ring = _plan("wan2.2-t2v-a14b", "720P", 4, sp_attention="ring")
    _, _, uly = _plan("wan2.2-t2v-a14b", "720P", 4)
    assert ring.perf.comm_time_s(75_600, attention_s=1.0) == 0.0
    assert uly.perf.comm_time_s(75_600) > 0.0


def test_wan22_on_two_gpus_does_not_fit_as_its_table_shows():
    """The reference FSDP keeps fp32 shards: both experts (114 GB) + umT5 over 2 GPUs plus the
    fp32 VAE decode on rank 0 exceed an 80 GB H100; Wan2.2's table has no 2-GPU column."""
    with pytest.raises(PlacementError, match="in its decode phase"):
        _plan("wan2.2-t2v-a14b", "720P", 2)
