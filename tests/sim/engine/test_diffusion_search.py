"""Diffusion LMs, image/video pipelines and branching search against independent truth:
the multiplier formula, expected backtracking, hand-computed roofline step times, the
bottleneck inversion on every GPU, memory admission and load-time refusals."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scenario_cases import make_scenario

from fleets.catalog_io import load_catalog
from sim.engine.core import simulate
from sim.errors import PlacementError
from sim.models.perf import PerfModel
from sim.fleet_plan import resolve_fleet
from sim.scenario import parse_scenario

ROOT = Path(__file__).resolve().parents[3]
CATALOG = load_catalog()
GPUS = [k for k, a in CATALOG.accelerators.items() if a.memory_kind == "hbm"]


def search(k=4, s=20, n=28, checkpoints=None, p=0.0, r=4, budget=2, rate=0.5, pools=None, **top):
    verifier = {"model": "verifier", "fail_probability": p, "backtrack_steps": r, "retry_budget": budget}
    if checkpoints is not None:
        verifier["checkpoints"] = checkpoints
    wl = {"search": {"kind": "branching_search", "model": "flux-1-dev", "arrival": {"kind": "poisson", "rate_per_s": rate},
                     "candidates_k": k, "shared_steps": s, "total_steps": n, "verifier": verifier}}
    pools = pools or [{"name": "search", "accelerator": "b200", "serves": ["search"], "replicas": 2, "max_batch": 32}]
    return make_scenario(wl, pools, **{"duration_s": 60.0, **top})


@pytest.mark.parametrize("k,s,n,checkpoints", [(4, 40, 50, [45, 50]), (2, 0, 20, [10, 20]), (8, 10, 30, None), (3, 30, 30, None)])
def test_denoiser_accounting_equals_formula_without_failures(k, s, n, checkpoints):
    req = simulate(search(k, s, n, checkpoints)).requests
    done = req[req["status"] == "completed"]
    assert len(done) > 5
    np.testing.assert_array_equal(done["sample_steps"], k * n - (k - 1) * s)
    per_step = CATALOG.model("flux-1-dev").flops_per_step
    np.testing.assert_allclose(done["denoiser_flops"], (k * n - (k - 1) * s) * per_step, rtol=1e-12)
    assert (done["verifier_calls"] == k * len(checkpoints or [n])).all()


def test_backtracking_adds_expected_steps():
    """Each failed check re-noises r steps; failures per check are geometric with p,
    capped at the budget B: E[extra steps per candidate per checkpoint] = r·Σ_{i=1..B} pⁱ."""
    k, s, n, p, r, budget, checkpoints = 4, 10, 30, 0.3, 5, 2, [20, 30]
    req = simulate(search(k, s, n, checkpoints, p=p, r=r, budget=budget, rate=2.0, duration_s=300.0,
                          pools=[{"name": "search", "accelerator": "b200", "serves": ["search"], "replicas": 8, "max_batch": 64}])).requests
    done = req[req["status"] == "completed"]
    extra = done["sample_steps"] - (k * n - (k - 1) * s)
    per_check = extra.mean() / (k * len(checkpoints))
    expected = r * sum(p**i for i in range(1, budget + 1))
    stderr = extra.std() / np.sqrt(len(done)) / (k * len(checkpoints))
    assert len(done) > 400
    assert abs(per_check - expected) < 4 * stderr, (per_check, expected, stderr)
    # verifier calls: one per candidate per checkpoint plus one per failure
    assert (done["verifier_calls"] == k * len(checkpoints) + extra / r).all()


def _row(table, key):
    with open(ROOT / "fleets" / "data" / f"{table}.csv", newline="") as f:
        return next(r for r in csv.DictReader(f) if r["key"] == key)


@pytest.mark.parametrize("acc", GPUS)
def test_diffusion_step_time_matches_hand_roofline(acc):
    """One SDXL denoising step (CFG: two UNet forwards) at batch 1, from the raw CSV."""
    a, m = _row("accelerators", acc), _row("models", "sdxl")
    precision = "fp8" if a["peak_fp8_tflops"] else "bf16"  # a part without an fp8 peak refuses fp8
    peak = float(a[f"peak_{precision}_tflops"]) * 1e12
    bw = float(a["memory_bw_tbps"]) * 1e12
    flops = 2 * float(m["flops_per_step_tflop"]) * 1e12
    act = 2 * float(m["activation_gb_per_sample"]) * 1e9
    weights = float(m["params_b"]) * 1e9 * (1 if precision == "fp8" else 2)  # bytes per parameter
    eta_c = float(a["compute_efficiency"]) * float(a["diffusion_efficiency_factor"])  # UNet kernels
    expected = max(flops / (peak * eta_c), (weights + act) / (bw * float(a["bandwidth_efficiency"])))
    expected += float(a["iteration_overhead_us"]) * 1e-6
    perf = PerfModel(CATALOG.accelerator(acc), CATALOG.model("sdxl"), precision)
    tokens = 2 * CATALOG.model("sdxl").latent_tokens
    assert perf.time_s(flops, perf.weight_bytes_read(tokens) + act, tokens) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("acc", GPUS)
def test_bottleneck_inversion_on_every_gpu(acc):
    """Diffusion-LM steps are matrix-matrix work: one 256-token block streams the weights
    once for 256 tokens (≈256 FLOP/byte in BF16, at the ridge of an H100 or B200), and a
    step batching 4 requests' blocks is above the ridge (compute-bound) on every GPU. AR
    decode at batch 1 is ~1 FLOP/byte: memory-bound, 100× below, on every GPU."""
    accelerator = CATALOG.accelerator(acc)
    dlm = PerfModel(accelerator, CATALOG.model("llada-8b"), "bf16")
    block, context = 256, 1000

    def intensity(blocks: int) -> float:
        flops = blocks * (dlm.linear_flops_per_token * block + dlm.attn_flops_per_pair * block * (context + block))
        return flops / (dlm.weight_bytes + blocks * dlm.kv_bytes_per_token * (context + block))

    ar = PerfModel(accelerator, CATALOG.model("llama-3-8b"), "bf16")
    decode = ar.decode_flops(1, 1000) / ar.decode_bytes(1, 1000)
    assert intensity(4) > dlm.ridge_flops_per_byte
    assert intensity(1) > 100 * decode
    assert decode < ar.ridge_flops_per_byte / 100


def test_fork_waits_for_memory_and_hbm_never_overflows():
    # memory for only a couple of 8-way forks at a time on one replica
    sc = search(k=8, s=4, n=12, checkpoints=[12], rate=3.0, duration_s=60.0,
                pools=[{"name": "search", "accelerator": "h100-sxm", "serves": ["search"], "replicas": 1, "max_batch": 64,
                        "memory_utilization": 0.5}])
    run = simulate(sc)
    req = run.requests
    assert (req["memory_wait_s"] > 0).any(), "some forks should have waited for activation memory"
    assert set(req["status"]) <= {"completed", "in_flight"}
    pool = run.plan.pools[0]
    assert run.pools["hbm_peak_bytes"].iloc[0] <= pool.layout.replica_memory_bytes * (1 + 1e-12)


def test_video_that_cannot_fit_is_refused_at_load_time():
    sc = make_scenario(
        {"clip": {"kind": "video_diffusion", "model": "wan2.1-t2v-14b", "arrival": {"kind": "poisson", "rate_per_s": 0.01},
                  "height_px": 720, "width_px": 1280, "frames": 161, "cfg_mode": "batched"}},
        [{"name": "video", "accelerator": "h100-sxm", "serves": ["clip"], "replicas": 1}],
    )
    with pytest.raises(PlacementError) as err:
        resolve_fleet(sc, 0).pools
    message = str(err.value)
    assert "'clip'" in message and "wan2.1-t2v-14b" in message and "GB of activations" in message


def test_verifier_on_another_pool_pays_handoffs():
    base = dict(k=4, s=10, n=20, checkpoints=[15, 20], rate=1.0, duration_s=60.0)
    colocated = simulate(search(**base)).requests
    split = simulate(search(**base, pools=[
        {"name": "search", "accelerator": "b200", "serves": ["search"], "replicas": 2, "max_batch": 32},
        {"name": "verify", "accelerator": "mi300x", "serves": ["search:verify"], "replicas": 1, "max_batch": 32},
    ])).requests
    assert (colocated["handoffs"] == 0).all()
    done = split[split["status"] == "completed"]
    assert (done["handoffs"] == 4).all()  # to the verifier and back, twice
    assert (done["handoff_s"] > 0).all()
    assert (done["verifier_calls"] == 8).all()


def test_image_pipeline_stage_on_its_own_pool():
    wl = {"image": {"kind": "image_diffusion", "model": "sdxl", "arrival": {"kind": "poisson", "rate_per_s": 2.0}}}
    sc = make_scenario(wl, [
        {"name": "unet", "accelerator": "h100-sxm", "serves": ["image"], "replicas": 1, "max_batch": 8},
        {"name": "vae", "accelerator": "mi300x", "serves": ["image:decode"], "replicas": 1, "max_batch": 8},
    ], duration_s=30.0)
    run = simulate(sc)
    done = run.requests[run.requests["status"] == "completed"]
    assert (done["handoffs"] == 1).all() and (done["pool"] == "unet").all()
    assert set(run.pool_shares["pool"]) == {"unet", "vae"}


def test_ar_best_of_k_copies_the_prompt_kv():
    """best-of-4 on an idle replica: one prefill (plus three KV copies), then four
    sequences decoding side by side with four times the context."""
    prompt, output, k = 500, 30, 4
    sc = make_scenario(
        {"chat": {"kind": "autoregressive", "model": "llama-3-8b", "arrival": {"kind": "poisson", "rate_per_s": 0.001},
                  "prompt_tokens": {"kind": "constant", "value": prompt}, "output_tokens": {"kind": "constant", "value": output},
                  "best_of_k": k}},
        [{"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1, "precision": "bf16"}],
        duration_s=3000.0, seed=3,
    )
    row = simulate(sc).requests.iloc[0]
    perf = PerfModel(CATALOG.accelerator("h100-sxm"), CATALOG.model("llama-3-8b"), "bf16")
    ttft = perf.mixed_cost(prompt, float(prompt) ** 2, 0, 0.0, copied_tokens=(k - 1) * prompt)[0]
    assert row["ttft_s"] == pytest.approx(ttft, rel=1e-9)
    decode = sum(perf.decode_time_s(k, k * (prompt + g)) for g in range(1, output))
    assert row["e2e_s"] - row["ttft_s"] == pytest.approx(decode, rel=1e-9)


def test_fast_and_exact_agree_on_pipelines_and_search():
    wl = {
        "search": {"kind": "branching_search", "model": "flux-1-dev", "arrival": {"kind": "poisson", "rate_per_s": 1.0},
                   "candidates_k": 4, "shared_steps": 8, "total_steps": 16,
                   "verifier": {"checkpoints": [12, 16], "fail_probability": 0.3, "backtrack_steps": 3}},
        "image": {"kind": "image_diffusion", "model": "sdxl", "arrival": {"kind": "poisson", "rate_per_s": 3.0}},
        "chat": {"kind": "autoregressive", "model": "llama-3-8b", "arrival": {"kind": "poisson", "rate_per_s": 3.0}, "best_of_k": 2},
    }
    pools = [
        {"name": "search", "accelerator": "h100-sxm", "serves": ["search"], "replicas": 1, "max_batch": 16, "memory_utilization": 0.45},
        {"name": "verify", "accelerator": "mi300x", "serves": ["search:verify"], "replicas": 1, "max_batch": 16},
        {"name": "image", "accelerator": "b200", "serves": ["image"], "replicas": 1, "max_batch": 8},
        {"name": "vae", "accelerator": "b200", "serves": ["image:decode"], "replicas": 1, "max_batch": 8},
        {"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1},
    ]
    runs = {}
    for mode in ("fast", "exact"):
        sc = make_scenario(wl, pools, duration_s=60.0, engine={"mode": mode})
        runs[mode] = simulate(sc).requests
    fast, exact = runs["fast"], runs["exact"]
    pd.testing.assert_series_equal(fast["status"], exact["status"])
    for col in ("first_token_at_s", "done_at_s", "busy_share_s", "handoff_wait_s", "memory_wait_s"):
        a, b = fast[col].to_numpy(), exact[col].to_numpy()
        ok = ~np.isnan(a)
        assert np.array_equal(ok, ~np.isnan(b)), col
        np.testing.assert_allclose(a[ok], b[ok], rtol=1e-9, atol=1e-12, err_msg=col)


def test_stage_that_cannot_be_placed_is_a_clear_error():
    with pytest.raises(Exception) as err:
        parse_scenario({"duration_s": 10, "workloads": {"image": {"kind": "image_diffusion", "model": "sdxl",
                        "arrival": {"kind": "poisson", "rate_per_s": 1}}},
                        "fleets": [{"name": "f", "pools": [
                            {"name": "a", "accelerator": "h100-sxm", "serves": ["image"], "replicas": 1},
                            {"name": "b", "accelerator": "h100-sxm", "serves": ["image:verify"], "replicas": 1}]}]})
    assert "stage 'verify'" in str(err.value)


def test_image_steps_default_to_the_models():
    wl = {"image": {"kind": "image_diffusion", "model": "sdxl", "arrival": {"kind": "poisson", "rate_per_s": 1.0}}}
    req = simulate(make_scenario(wl, [{"name": "i", "accelerator": "b200", "serves": ["image"], "replicas": 1}])).requests
    assert (req["sample_steps"] == CATALOG.model("sdxl").default_steps).all()
