"""Throughput against batch size follows the roofline: it grows in proportion to the batch
while the iteration is memory-bound, and saturates once the batch's arithmetic intensity
passes the ridge point (computed by hand from the catalog, then checked on PerfModel).
The fixed per-iteration cost t_0 is taken off each time first: it adds to every
iteration whatever its batch."""

from __future__ import annotations

import pytest

from fleets.catalog_io import load_catalog
from sim.models.perf import PerfModel

BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]


def _check_grows_then_saturates(throughput: dict[int, float], ridge_batch: float, cap: float) -> None:
    values = [throughput[b] for b in BATCHES]
    assert all(b >= a * (1 - 1e-12) for a, b in zip(values, values[1:])), "throughput never falls with batch"
    for b in BATCHES:
        if 2 * b <= ridge_batch:  # memory-bound: doubling the batch doubles the throughput
            assert throughput[2 * b] == pytest.approx(2 * throughput[b], rel=1e-9)
        if b >= ridge_batch:  # compute-bound: the cap
            assert throughput[b] == pytest.approx(cap, rel=1e-9)
    assert throughput[BATCHES[0]] == pytest.approx(cap / ridge_batch, rel=1e-9)  # batch 1: cap / ridge batch


def test_autoregressive_decode_saturates_at_the_ridge_batch():
    cat = load_catalog()
    acc, model = cat.accelerator("h100-sxm"), cat.model("llama-2-70b")
    perf = PerfModel(acc, model, "fp8", tp=1)
    # decode of b tokens (no KV context): FLOP 2·P·b, bytes = weights (1 B/param at fp8)
    compute_rate = acc.peak_fp8_flops * acc.compute_efficiency
    mem_rate = acc.memory_bw_bytes_per_s * acc.bandwidth_efficiency
    ridge_batch = model.weight_bytes("fp8") / mem_rate * compute_rate / (2 * model.active_params)
    cap = compute_rate / (2 * model.active_params)  # tokens/s when compute-bound
    assert 16 < ridge_batch < 1024  # the transition happens inside the sweep
    t0 = acc.iteration_overhead_s
    throughput = {b: b / (perf.decode_time_s(b, 0.0) - t0) for b in BATCHES + [2 * BATCHES[-1]]}
    _check_grows_then_saturates(throughput, ridge_batch, cap)


def test_diffusion_step_saturates_at_the_ridge_batch():
    cat = load_catalog()
    acc, model = cat.accelerator("h100-sxm"), cat.model("sdxl")
    perf = PerfModel(acc, model, "bf16", tp=1)
    tokens = 1024  # 256×256 px: a small image, memory-bound at batch 1 (SDXL at 1024² never is)
    flops = model.flops_per_step_at(tokens)
    compute_rate = acc.peak_bf16_flops * acc.compute_efficiency * acc.diffusion_efficiency_factor  # UNet kernels
    mem_rate = acc.memory_bw_bytes_per_s * acc.bandwidth_efficiency
    ridge_batch = model.weight_bytes("bf16") / mem_rate * compute_rate / flops
    cap = compute_rate / flops  # samples·steps/s when compute-bound
    assert 1 < ridge_batch < 256

    def step_time_s(batch: int) -> float:  # as sim.engine.replica_step prices one step of a batch
        return perf.time_s(batch * flops, perf.weight_bytes_read(batch * tokens), batch * tokens) - acc.iteration_overhead_s

    throughput = {b: b / step_time_s(b) for b in BATCHES + [2 * BATCHES[-1]]}
    _check_grows_then_saturates(throughput, ridge_batch, cap)
