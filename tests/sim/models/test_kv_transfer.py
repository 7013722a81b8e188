"""The KV-cache transfer of a split (prefill/decode) deployment, computed by hand from the
raw catalog rows: bytes = prompt tokens × KV bytes per token at the KV precision,
time = latency + bytes / (lanes × per-GPU bandwidth), over NVLink inside a scale-up
domain and over the scale-out NIC (a fabric row) across nodes; then one request's
hand-off in the engine, timed from the same hand calculation."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from scenario_cases import make_scenario

from fleets.catalog_io import load_catalog
from fleets.fabrics import with_fabric
from sim.engine.core import simulate
from sim.models.kv_transfer import KVEnd, kv_link
from sim.models.perf import PerfModel

ROOT = Path(__file__).resolve().parents[3]


def _row(table: str, key: str) -> dict:
    with open(ROOT / "fleets" / "data" / f"{table}.csv", newline="") as f:
        return next(r for r in csv.DictReader(f) if r["key"] == key)


L70 = _row("models", "llama-3.1-70b")
DSV3 = _row("models", "deepseek-v3")
H100 = _row("accelerators", "h100-sxm")
NDR = _row("fabrics", "ib-ndr-400")
XDR = _row("fabrics", "ib-xdr-800")


def llama_kv_bytes_per_token(bytes_per_value: float) -> float:
    """K and V, every layer, every KV head: 2 × 80 × 8 × 128 × bytes (Llama-3.1-70B)."""
    return 2 * int(L70["layers"]) * int(L70["kv_heads"]) * int(L70["head_dim"]) * bytes_per_value


def end(acc: str, tp: int, domain=None, fabric=None, pp: int = 1) -> KVEnd:
    return KVEnd(with_fabric(load_catalog().accelerator(acc), fabric), tp, pp, 1, domain)


def test_kv_bytes_per_token_of_llama_70b_by_hand():
    assert llama_kv_bytes_per_token(1) == 163_840  # FP8: 160 KiB per token
    assert llama_kv_bytes_per_token(2) == 327_680


def test_scale_out_transfer_by_hand():
    """Prefill H100 TP4 on InfiniBand NDR, decode H200 TP2 on XDR: the slower NIC (NDR,
    50 GB/s per GPU) on min(4, 2) = 2 lanes, the larger latency (5 us on both)."""
    model = load_catalog().model("llama-3.1-70b")
    link = kv_link(end("h100-sxm", 4, fabric="ib-ndr-400"), end("h200", 2, fabric="ib-xdr-800"), model, "fp8")
    prompt = 1500
    bytes_moved = prompt * llama_kv_bytes_per_token(1)  # 245,760,000 B
    bw = min(float(NDR["gbps_per_dir_per_gpu"]), float(XDR["gbps_per_dir_per_gpu"])) * 1e9  # 50 GB/s
    latency = max(float(NDR["latency_us"]), float(XDR["latency_us"])) * 1e-6
    expected = latency + bytes_moved / (2 * bw)
    assert link.link == "scale-out" and link.lanes == 2
    assert link.bytes_of(prompt) == pytest.approx(bytes_moved, rel=1e-12)
    assert link.transfer_s(prompt) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(5e-6 + 245.76e6 / 100e9, rel=1e-12)  # 2.4626 ms


def test_nvlink_transfer_inside_a_domain_by_hand():
    """Both pools of H100s in one scale-up domain (same ``domain`` label): NVLink at the
    catalog's 450 GB/s per direction per GPU, min(4, 8) = 4 lanes, the fitted α0."""
    model = load_catalog().model("llama-3.1-70b")
    link = kv_link(end("h100-sxm", 4, domain="nvl"), end("h100-sxm", 8, domain="nvl"), model, "bf16")
    prompt = 3000
    bytes_moved = prompt * llama_kv_bytes_per_token(2)
    expected = float(H100["scaleup_latency_us"]) * 1e-6 + bytes_moved / (4 * float(H100["scaleup_gbps_per_dir"]) * 1e9)
    assert link.link == "scale-up" and link.lanes == 4
    assert link.transfer_s(prompt) == pytest.approx(expected, rel=1e-12)
    # without the shared label the same pools talk over the scale-out NIC (50 GB/s, 50 us)
    out = kv_link(end("h100-sxm", 4), end("h100-sxm", 8), model, "bf16")
    expected_out = float(H100["scaleout_latency_us"]) * 1e-6 + bytes_moved / (4 * float(H100["scaleout_gbps_per_dir"]) * 1e9)
    assert out.link == "scale-out" and out.transfer_s(prompt) == pytest.approx(expected_out, rel=1e-12)


def test_layout_conversion_replicates_a_latent_cache_on_every_decode_shard():
    """DeepSeek-V3 caches one latent per token and layer (576 values, MLA): every TP shard
    of the decode side needs all of it, so decode TP8 receives 8 copies, over min(TP4, TP8)
    = 4 lanes."""
    model = load_catalog().model("deepseek-v3")
    per_token_fp8 = int(DSV3["layers"]) * 576 * 1  # 61 layers × (512 latent + 64 RoPE) × 1 byte
    link = kv_link(end("h200", 4, fabric="ib-ndr-400"), end("h200", 8, fabric="ib-ndr-400"), model, "fp8")
    assert link.bytes_per_token == pytest.approx(8 * per_token_fp8, rel=1e-12)
    prompt = 4096
    assert link.transfer_s(prompt) == pytest.approx(5e-6 + 8 * per_token_fp8 * prompt / (4 * 50e9), rel=1e-12)


def test_layerwise_overlap_by_hand():
    """L layers of a prefill from p0 to p1 stream one by one: the last leaves at
    max(max(ready, p0 + T_p/L) + T_wire, p1 + T_wire/L) + α; after_prefill waits for p1."""
    model = load_catalog().model("llama-3.1-70b")
    link = kv_link(end("h100-sxm", 4), end("h100-sxm", 4), model, "fp8")
    prompt, layers = 2000, 80
    wire = prompt * llama_kv_bytes_per_token(1) / (4 * 50e9)
    alpha = 50e-6
    p0, p1 = 10.0, 10.4
    # decode reserved before the prefill: the link keeps pace with the layers (slower here)
    assert link.done_at_s(prompt, 9.0, p0, p1, True) == pytest.approx(alpha + max(p0 + 0.4 / layers + wire, p1 + wire / layers))
    # reserved after the prefill: the whole cache goes then
    assert link.done_at_s(prompt, 11.0, p0, p1, True) == pytest.approx(11.0 + wire + alpha)
    assert link.done_at_s(prompt, 9.0, p0, p1, False) == pytest.approx(p1 + wire + alpha)
    # the engine's one call per reservation: the same three figures, to the bit
    for ready, layerwise in ((9.0, True), (11.0, True), (9.0, False)):
        assert link.hand_over(prompt, ready, p0, p1, layerwise) == (
            link.done_at_s(prompt, ready, p0, p1, layerwise), link.bytes_of(prompt), link.transfer_s(prompt))
    assert link.hand_over(prompt, 11.0, p0, p1, True)[0] == pytest.approx(11.0 + wire + alpha)


def split_scenario(decode_choice: str, kv_transfer: str, prompt: int = 1500, output: int = 3):
    return make_scenario(
        {"chat": {"kind": "autoregressive", "model": "llama-3.1-70b", "arrival": {"kind": "poisson", "rate_per_s": 0.001},
                  "prompt_tokens": {"kind": "constant", "value": prompt},
                  "output_tokens": {"kind": "constant", "value": output},
                  "disaggregation": {"decode_choice": decode_choice, "kv_transfer": kv_transfer}}},
        [{"name": "prefill", "accelerator": "h100-sxm", "serves": ["chat:prefill"], "replicas": 1, "tp": 4,
          "scaleout_fabric": "ib-ndr-400"},
         {"name": "decode", "accelerator": "h200", "serves": ["chat:decode"], "replicas": 1, "tp": 2,
          "scaleout_fabric": "ib-xdr-800"}],
        duration_s=3000.0, seed=5)


def _first(run):
    done = run.requests[run.requests["status"] == "completed"]
    assert len(done) >= 1
    return done.iloc[0]


def test_one_request_hand_off_after_prefill_by_hand():
    """An idle split fleet, decode chosen at hand-off, whole-cache transfer: the first
    token comes from the prefill pool; the KV cache arrives the transfer time after it;
    then the decode pool runs the remaining tokens from its second, with no prefill."""
    prompt, output = 1500, 3
    row = _first(simulate(split_scenario("at_handoff", "after_prefill", prompt, output)))
    transfer = 5e-6 + prompt * llama_kv_bytes_per_token(1) / (2 * 50e9)
    assert row["pool"] == "prefill" and row["decode_pool"] == "decode"
    assert row["kv_transfer_bytes"] == pytest.approx(prompt * llama_kv_bytes_per_token(1))
    assert row["kv_transfer_s"] == pytest.approx(transfer, rel=1e-12)
    assert row["decode_queue_s"] == 0.0
    assert row["kv_done_at_s"] - row["first_token_at_s"] == pytest.approx(transfer, rel=1e-9)
    cat = load_catalog()
    prefill = PerfModel(cat.accelerator("h100-sxm"), cat.model("llama-3.1-70b"), "fp8", tp=4)
    decode = PerfModel(cat.accelerator("h200"), cat.model("llama-3.1-70b"), "fp8", tp=2)
    assert row["ttft_s"] == pytest.approx(prefill.prefill_time_s(prompt), rel=1e-9)
    steps = sum(decode.decode_time_s(1, prompt + g) for g in range(1, output))
    assert row["done_at_s"] - row["kv_done_at_s"] == pytest.approx(steps, rel=1e-9)


def test_one_request_layerwise_transfer_overlaps_its_prefill():
    """Decode chosen when the prefill starts: the idle decode replica reserves at once and
    the layers stream during the prefill, so the cache arrives T_wire/L + α after the
    prefill ends (the link outpaces the layers here) instead of T after it."""
    prompt = 1500
    row = _first(simulate(split_scenario("at_prefill", "layerwise", prompt)))
    wire = prompt * llama_kv_bytes_per_token(1) / (2 * 50e9)
    p0, p1 = row["admitted_at_s"], row["first_token_at_s"]
    expected = 5e-6 + max(p0 + (p1 - p0) / 80 + wire, p1 + wire / 80)
    assert row["kv_done_at_s"] == pytest.approx(expected, rel=1e-12)
    assert row["kv_done_at_s"] - p1 < row["kv_transfer_s"]
