"""Llama-3.1-70B FP8 at TP4, decode at batch 1 and 64, on H100, H200, B200 and MI355X
(issue 24 acceptance): milliseconds per token by hand from the raw catalog rows, against
bytes moved / peak bandwidth.

A decode step of b sequences of c tokens of context each moves the FP8 weights (70.55e9
B) and b·c KV entries of 2 x 80 layers x 8 KV heads x 128 x 1 B; at TP4 each GPU moves a
quarter at its η_m-derated bandwidth. Its FLOP (2 x 70.55e9 per token plus 4 x 80 x 64 x
128 per (query, key) pair) run at η_c of the FP8 peak. Each of the 160 all-reduces (two
per layer) costs α0 + α1·log2(4) + 2·3/4 · b·8,192·2 B / (η_bus · β(4)) on the chip's
fabric (MI355X's xGMI gives a group of four 3 links of 76.8 GB/s). One step gives every
sequence one token, so ms per token = the step time."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from fleets.catalog_io import load_catalog
from sim.models.parallelism import FABRICS
from sim.models.perf import PerfModel

ROOT = Path(__file__).resolve().parents[3]
ACC = {r["key"]: r for r in csv.DictReader(open(ROOT / "fleets" / "data" / "accelerators.csv", newline=""))}
M = next(r for r in csv.DictReader(open(ROOT / "fleets" / "data" / "models.csv", newline="")) if r["key"] == "llama-3.1-70b")
CONTEXT = 1024  # tokens of context per sequence
TP = 4


def _hand(acc: str, batch: int) -> tuple[float, float]:
    """(step time by hand, bytes / peak bandwidth) in seconds."""
    a = ACC[acc]
    params = float(M["params_b"]) * 1e9
    kv_token = 2 * int(M["layers"]) * int(M["kv_heads"]) * int(M["head_dim"]) * 1.0  # fp8 cache
    bytes_moved = params * 1.0 + batch * CONTEXT * kv_token
    bw = float(a["memory_bw_tbps"]) * 1e12 * TP
    memory_s = bytes_moved / (bw * float(a["bandwidth_efficiency"]))
    flops = 2 * params * batch + 4 * int(M["layers"]) * int(M["heads"]) * int(M["head_dim"]) * batch * CONTEXT
    compute_s = flops / (float(a["peak_fp8_tflops"]) * 1e12 * TP * float(a["compute_efficiency"]))
    fabric = FABRICS[a["scaleup_fabric"]]
    beta = min(float(a["scaleup_gbps_per_dir"]) * 1e9, (TP - 1) * fabric.peer_bw_bytes_per_s or math.inf)
    allreduce_s = (fabric.alpha0_s + fabric.alpha_log2_s * math.log2(TP)
                   + 2 * (TP - 1) / TP * batch * int(M["hidden"]) * 2 / (fabric.bus_efficiency * beta))
    step = max(compute_s, memory_s) + 2 * int(M["layers"]) * allreduce_s + float(a["iteration_overhead_us"]) * 1e-6
    return step, bytes_moved / bw


@pytest.mark.parametrize("acc", ["h100-sxm", "h200", "b200", "mi355x"])
@pytest.mark.parametrize("batch", [1, 64])
def test_70b_fp8_tp4_decode_ms_per_token_by_hand(acc, batch):
    cat = load_catalog()
    perf = PerfModel(cat.accelerator(acc), cat.model("llama-3.1-70b"), "fp8", tp=TP)
    step, floor = _hand(acc, batch)
    assert perf.decode_time_s(batch, batch * CONTEXT) == pytest.approx(step, rel=1e-9)
    # the step is memory-bound: at least bytes / peak bandwidth, and within what η_m, the
    # all-reduces and t_0 add to it
    assert step >= floor / 1.0
    assert step <= floor / float(ACC[acc]["bandwidth_efficiency"]) + 0.012


def test_decode_rates_follow_the_memory_bandwidth():
    """At batch 1 the four chips' ms per token order as their bandwidths do (B200 and
    MI355X at 7.7-8 TB/s ahead of H200 at 4.8 and H100 at 3.35), whatever the fabric."""
    times = {acc: _hand(acc, 1)[0] for acc in ("h100-sxm", "h200", "b200", "mi355x")}
    assert times["h100-sxm"] > times["h200"] > max(times["b200"], times["mi355x"])
