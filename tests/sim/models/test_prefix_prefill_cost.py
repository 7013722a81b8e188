"""A prefill over a cached prefix (sim.models.perf.PerfModel.mixed_cost with
``cached_tokens``; docs/kv-reuse.md), by hand from the raw catalog row of Llama-3.1-70B.

A prompt of n tokens whose first c come from a prefix cache computes m = n − c tokens:
2·params FLOP per token in the linear layers, and causal attention over m·c + m²/2
(query, key) pairs at 4 · layers · heads · head_dim FLOP per pair (QKᵀ and PV, 2 FLOP per
multiply-add). It reads the c cached tokens' KV once: 2 · layers · kv_heads · head_dim
bytes per token at FP8. The same pair count is the full prompt's n²/2 minus the prefix's
c²/2, which is the check that the caller's Σ(m² + 2mc) is the right square term."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from fleets.catalog_io import load_catalog
from sim.models.perf import PerfModel

ROOT = Path(__file__).resolve().parents[3]
M = next(r for r in csv.DictReader(open(ROOT / "fleets" / "data" / "models.csv", newline="")) if r["key"] == "llama-3.1-70b")


@pytest.mark.parametrize(("n", "c"), [(8192, 0), (8192, 4096), (30_000, 29_696), (513, 512)])
def test_cached_prefill_flops_and_kv_reads_by_hand(n, c):
    perf = PerfModel(load_catalog().accelerator("h100-sxm"), load_catalog().model("llama-3.1-70b"), "fp8", tp=4)
    m = n - c
    params, layers = float(M["params_b"]) * 1e9, int(M["layers"])
    per_pair = 4 * layers * int(M["heads"]) * int(M["head_dim"])
    kv_token = 2 * layers * int(M["kv_heads"]) * int(M["head_dim"]) * 1.0
    flops_hand = 2 * params * m + per_pair * (m * c + m * m / 2)
    _, flops, moved = perf.mixed_cost(m, float(m) * m + 2.0 * m * c, 0, 0.0, 0.0, c)
    _, _, moved_uncached = perf.mixed_cost(m, float(m) * m + 2.0 * m * c, 0, 0.0, 0.0, 0.0)
    assert flops == pytest.approx(flops_hand, rel=1e-12)
    assert moved - moved_uncached == pytest.approx(kv_token * c, rel=1e-12)
    # the attention pairs are the full prompt's minus the prefix's
    full = perf.prefill_flops(n, float(n) * n)
    prefix = perf.prefill_flops(c, float(c) * c)
    assert flops == pytest.approx(full - prefix, rel=1e-12)
    # and a cached prefill is never slower than the full one
    assert perf.mixed_cost(m, float(m) * m + 2.0 * m * c, 0, 0.0, 0.0, c)[0] <= perf.prefill_time_s(n)
