"""The KV-cache transfer of a split deployment whose workload speculates: the decode
replica runs the drafter itself, so the drafter's KV of the prompt (computed on the
prefill pool) moves with the target's. Expected bytes and times by hand from the raw
catalog rows (layers × KV heads × head dim × 2 (K and V) × bytes per value), over both
links; n-gram drafting (no KV) and a drafter on a pool of its own move the target's only."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from scenario_cases import make_scenario

from sim.engine.core import simulate

ROOT = Path(__file__).resolve().parents[3]


def _row(table: str, key: str) -> dict:
    with open(ROOT / "fleets" / "data" / f"{table}.csv", newline="") as f:
        return next(r for r in csv.DictReader(f) if r["key"] == key)


L70, L8 = _row("models", "llama-3.1-70b"), _row("models", "llama-3.1-8b")
H100, NDR, XDR = _row("accelerators", "h100-sxm"), _row("fabrics", "ib-ndr-400"), _row("fabrics", "ib-xdr-800")
FP8 = 1  # bytes per KV value at the pools' default KV precision


def kv_per_token(row: dict, layers: int | None = None) -> int:
    """K and V of every layer and KV head, FP8: 2 × layers × KV heads × head dim × 1 byte."""
    return 2 * (layers or int(row["layers"])) * int(row["kv_heads"]) * int(row["head_dim"]) * FP8


SPECS = {
    "draft_model": {"method": "draft_model", "draft_tokens": 4, "acceptance": 0.7, "draft_model": "llama-3.1-8b"},
    "eagle": {"method": "eagle", "draft_tokens": 3, "acceptance": 0.7, "head_vocab": 128256},
    "ngram": {"method": "ngram", "draft_tokens": 4, "acceptance": 0.4},
}


def split(spec: dict, prefill: dict, decode: dict, extra: list | None = None, prompt: int = 1500):
    chat = {"kind": "autoregressive", "model": "llama-3.1-70b", "arrival": {"kind": "poisson", "rate_per_s": 0.001},
            "prompt_tokens": {"kind": "constant", "value": prompt}, "output_tokens": {"kind": "constant", "value": 3},
            "disaggregation": {"decode_choice": "at_handoff", "kv_transfer": "after_prefill"},
            "speculation": spec}
    pools = [{"name": "prefill", "serves": ["chat:prefill"], "replicas": 1, **prefill},
             {"name": "decode", "serves": ["chat:decode"], "replicas": 1, **decode}] + (extra or [])
    return make_scenario({"chat": chat}, pools, duration_s=3000.0, seed=5)


SCALE_OUT = ({"accelerator": "h100-sxm", "tp": 4, "scaleout_fabric": "ib-ndr-400"},
             {"accelerator": "h200", "tp": 2, "scaleout_fabric": "ib-xdr-800"})
NVLINK = ({"accelerator": "h100-sxm", "tp": 4, "domain": "nvl"}, {"accelerator": "h100-sxm", "tp": 8, "domain": "nvl"})


def _first(scenario):
    run = simulate(scenario)
    done = run.requests[run.requests["status"] == "completed"]
    assert len(done) >= 1
    return done.iloc[0]


def scale_out_s(bytes_moved: float) -> float:
    """NDR sender, XDR receiver: the slower NIC on min(4, 2) = 2 lanes, the larger latency."""
    bw = min(float(NDR["gbps_per_dir_per_gpu"]), float(XDR["gbps_per_dir_per_gpu"])) * 1e9
    return max(float(NDR["latency_us"]), float(XDR["latency_us"])) * 1e-6 + bytes_moved / (2 * bw)


def nvlink_s(bytes_moved: float) -> float:
    """One scale-up domain of H100s: NVLink per GPU and direction on min(4, 8) = 4 lanes."""
    return float(H100["scaleup_latency_us"]) * 1e-6 + bytes_moved / (4 * float(H100["scaleup_gbps_per_dir"]) * 1e9)


def test_draft_model_kv_moves_with_the_target_over_the_scale_out_nic_by_hand():
    """Llama-3.1-8B drafting for Llama-3.1-70B: 163,840 + 65,536 B per token (+40%);
    1,500 tokens over 2 × 50 GB/s: 5 us + 344.064 MB / 100 GB/s = 3.4456 ms."""
    prompt = 1500
    per_token = kv_per_token(L70) + kv_per_token(L8)
    assert (kv_per_token(L70), kv_per_token(L8)) == (163_840, 65_536)
    row = _first(split(SPECS["draft_model"], *SCALE_OUT, prompt=prompt))
    assert row["kv_transfer_bytes"] == pytest.approx(prompt * per_token, rel=1e-12)
    assert row["kv_transfer_s"] == pytest.approx(scale_out_s(prompt * per_token), rel=1e-12)
    assert row["kv_transfer_s"] == pytest.approx(5e-6 + 344.064e6 / 100e9, rel=1e-12)
    assert row["kv_done_at_s"] - row["first_token_at_s"] == pytest.approx(row["kv_transfer_s"], rel=1e-9)


def test_draft_model_kv_moves_with_the_target_over_nvlink_by_hand():
    prompt = 1500
    per_token = kv_per_token(L70) + kv_per_token(L8)  # 8 KV heads each: TP8 keeps one copy of both
    row = _first(split(SPECS["draft_model"], *NVLINK, prompt=prompt))
    assert row["kv_transfer_bytes"] == pytest.approx(prompt * per_token, rel=1e-12)
    assert row["kv_transfer_s"] == pytest.approx(nvlink_s(prompt * per_token), rel=1e-12)


def test_a_one_layer_head_adds_one_layer_of_the_target_shape():
    """An EAGLE head of one layer with the target's attention shape: +1/80 of its KV."""
    prompt = 1500
    per_token = kv_per_token(L70) + kv_per_token(L70, layers=1)
    row = _first(split(SPECS["eagle"], *SCALE_OUT, prompt=prompt))
    assert row["kv_transfer_bytes"] == pytest.approx(prompt * per_token, rel=1e-12)
    assert row["kv_transfer_s"] == pytest.approx(scale_out_s(prompt * per_token), rel=1e-12)


def test_no_draft_kv_moves_for_ngram_or_a_drafter_on_a_pool_of_its_own():
    """n-gram drafting keeps no KV; a draft pool prefilled the prompt and keeps its KV."""
    prompt = 1500
    target_only = prompt * kv_per_token(L70)
    row = _first(split(SPECS["ngram"], *SCALE_OUT, prompt=prompt))
    assert row["kv_transfer_bytes"] == pytest.approx(target_only, rel=1e-12)
    drafter = [{"name": "drafter", "accelerator": "h100-sxm", "serves": ["chat:draft"], "replicas": 1, "tp": 1,
                "scaleout_fabric": "ib-ndr-400"}]
    row = _first(split(SPECS["draft_model"], *SCALE_OUT, extra=drafter, prompt=prompt))
    assert row["kv_transfer_bytes"] == pytest.approx(target_only, rel=1e-12)
    assert row["kv_transfer_s"] == pytest.approx(scale_out_s(target_only), rel=1e-12)
