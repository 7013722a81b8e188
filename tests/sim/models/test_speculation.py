"""Speculative decoding: tokens per verification step against Leviathan et al.'s closed
form, the per-request step draws against it, a draft head's size against DeepSeek-V3's
published MTP module, and a verification step's cost against a roofline built by hand."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from fleets.catalog_io import load_catalog
from sim.models.perf import PerfModel
from sim.models.speculation import head_model, spec_plan
from sim.workloads.speculation import (Speculation, expected_tokens_per_step, tokens_per_step_pmf,
                                       verification_steps)


def leviathan(alpha: float, k: int) -> float:
    """Expected tokens per step with i.i.d. acceptance (Leviathan et al., ICML 2023, eq. 1)."""
    return (1 - alpha ** (k + 1)) / (1 - alpha)


@pytest.mark.parametrize("k", range(1, 9))
@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.85, 0.95])
def test_expected_tokens_per_step_is_leviathans_closed_form(k, alpha):
    assert expected_tokens_per_step((alpha,) * k) == pytest.approx(leviathan(alpha, k), rel=1e-12)


def test_per_position_acceptance_by_hand():
    """α = (0.9, 0.8, 0.6): P(L ≥ 2) = 0.9, P(L ≥ 3) = 0.72, P(L = 4) = 0.432."""
    pmf = tokens_per_step_pmf((0.9, 0.8, 0.6))
    assert pmf == pytest.approx([0.1, 0.18, 0.288, 0.432], abs=1e-12)
    assert expected_tokens_per_step((0.9, 0.8, 0.6)) == pytest.approx(1 + 0.9 + 0.72 + 0.432, rel=1e-12)


def test_steps_are_exact_at_the_extremes():
    rng = np.random.default_rng(0)
    tokens = np.array([0, 1, 7, 100, 1999])
    # nothing accepted: one token per step; everything accepted: k + 1 per step
    assert verification_steps(tokens, tokens_per_step_pmf((0.0,) * 3), rng).tolist() == [0, 1, 7, 100, 1999]
    assert verification_steps(tokens, tokens_per_step_pmf((1.0,) * 3), rng).tolist() == [0, 1, 2, 25, 500]


@pytest.mark.parametrize("k", [1, 3, 8])
def test_drawn_steps_emit_the_closed_form_tokens_per_step(k):
    """20,000 requests of 400 tokens: tokens / steps within 1% of (1 − α^(k+1)) / (1 − α)
    (the standard error is ~0.2%; each request's last step is truncated, a bias of
    about half a step's surplus per request, < 0.5% here)."""
    alpha = 0.75
    tokens = np.full(20_000, 400)
    steps = verification_steps(tokens, tokens_per_step_pmf((alpha,) * k), np.random.default_rng(11))
    assert tokens.sum() / steps.sum() == pytest.approx(leviathan(alpha, k), rel=0.01)


def test_deepseek_v3_mtp_head_matches_the_published_module():
    """README_WEIGHTS.md (DeepSeek-V3): the MTP module has 11.5 B unique parameters
    (without the shared 0.9 B embedding and 0.9 B output head) and activates 2.4 B per
    token including both; vocabulary 129,280 (config.json)."""
    target = load_catalog().model("deepseek-v3")
    head = head_model(target, 1, 129_280, "mtp")
    projection = 129_280 * 7168
    assert head.params - projection == pytest.approx(11.5e9, rel=0.02)
    # the head's active parameters plus the shared input embedding (a lookup, no FLOP: not in
    # the head's compute) against the published 2.4 B (given to one decimal)
    assert head.active_params + 129_280 * 7168 == pytest.approx(2.4e9, rel=0.025)
    assert head.kv_bytes_per_token("fp8") == pytest.approx(target.kv_bytes_per_token("fp8") / 61)


def hand_verify_time_s(perf: PerfModel, batch: int, k: int, context: float) -> float:
    """One forward over k + 1 tokens of each of ``batch`` sequences (dense model): linear
    FLOP and weights for b(k+1) tokens, each token attending to its context and to the new
    tokens before it, the KV cache read once."""
    q = k + 1
    flops = 2 * perf.model.active_params * batch * q + perf.attn_flops_per_pair * (q * context + batch * q * (q - 1) / 2)
    bytes_moved = perf.weight_bytes + perf.kv_bytes_per_token * context
    return perf.time_s(flops, bytes_moved, batch * q)


@pytest.mark.parametrize("batch", [1, 32, 256])
def test_verification_and_draft_cost_by_hand(batch):
    cat = load_catalog()
    perf = PerfModel(cat.accelerator("h100-sxm"), cat.model("llama-3.1-70b"), "fp8", tp=4)
    context = batch * 3000.0
    ngram = spec_plan(Speculation(method="ngram", draft_tokens=4, acceptance=0.6), perf, cat.model)
    assert ngram.step_time_s(batch, context) == pytest.approx(hand_verify_time_s(perf, batch, 4, context), rel=1e-12)
    drafted = spec_plan(Speculation(method="draft_model", draft_tokens=4, acceptance=0.6, draft_model="llama-3.1-8b"),
                        perf, cat.model)
    # the draft's forwards run in the verification's iteration: no second t_0 per forward
    no_overhead = dataclasses.replace(cat.accelerator("h100-sxm"), iteration_overhead_s=0.0)
    draft = PerfModel(no_overhead, cat.model("llama-3.1-8b"), "fp8", tp=4)
    expected = hand_verify_time_s(perf, batch, 4, context) + 4 * draft.decode_time_s(batch, context)
    assert drafted.step_time_s(batch, context) == pytest.approx(expected, rel=1e-12)
    assert drafted.draft_resident_bytes == pytest.approx(8.03e9)  # the 8B draft's FP8 weights
    assert drafted.draft_kv_bytes_per_token == pytest.approx(2 * 32 * 8 * 128)


def test_the_gain_shrinks_as_decode_becomes_compute_bound():
    """Llama-3.1-70B, EAGLE k = 3, α = 0.7 on 4× H100: the verification is nearly free
    while decode is memory-bound and costs (k+1)× once compute-bound, so the tokens/s
    gain E[L] · t_decode / t_step falls with the batch (vLLM blog 2024-10-17: speedups at
    QPS 1, slowdowns at high QPS)."""
    cat = load_catalog()
    perf = PerfModel(cat.accelerator("h100-sxm"), cat.model("llama-3.1-70b"), "fp8", tp=4)
    plan = spec_plan(Speculation(method="eagle", draft_tokens=3, acceptance=0.7, head_vocab=128_256), perf, cat.model)
    by_context = {}
    for context in (200, 2000):
        gains = [plan.tokens_per_step * perf.decode_time_s(b, b * context) / plan.step_time_s(b, b * context)
                 for b in (1, 32, 256, 1024)]
        assert all(a > b for a, b in zip(gains, gains[1:]))
        assert gains[0] > 2.0 and not math.isnan(sum(gains))
        by_context[context] = gains
    # a long context keeps decode bound by its KV reads longer: more gain at every batch > 1
    assert all(long > short for short, long in zip(by_context[200][1:], by_context[2000][1:]))
    short = plan.tokens_per_step * perf.decode_time_s(1024, 1024 * 200) / plan.step_time_s(1024, 1024 * 200)
    assert short < 1.0  # 200-token contexts: compute-bound, speculation loses
