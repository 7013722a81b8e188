"""Architectures the single KV and FLOP columns cannot express (issue 24): gpt-oss's
alternating sliding-window attention (window 128), attention sinks and MXFP4 expert
weights; DeepSeek's multi-head latent attention, naive in prefill and weight-absorbed in
decode; Llama 4's chunked attention. Every expected value is computed here from the
model's config numbers (typed in, with their source), not from the code under test."""

from __future__ import annotations

import dataclasses

import pytest

from fleets.catalog_io import load_catalog
from sim.models.perf import PerfModel

CAT = load_catalog()

# gpt-oss-120b (github.com/openai/gpt-oss gpt_oss/torch/model.py @7b583341fe16): 36 layers,
# even layers banded to 128 tokens, odd layers dense; 8 KV heads x head_dim 64; 64 query heads.
OSS_DENSE_LAYERS, OSS_BANDED_LAYERS, OSS_WINDOW = 18, 18, 128
OSS_KV_VALUES = 2 * 8 * 64  # K and V per token and layer
OSS_PAIR_FLOP = 4 * 64 * 64  # QK^T and AV, 2 FLOP per multiply-add, per (query, key) pair and layer


def test_gpt_oss_kv_cache_is_dense_layers_per_token_plus_a_bounded_window():
    """At an fp8 cache and a 4,096-token context: 18 x 1,024 x 4,096 B on the dense layers
    + 18 x 1,024 x 128 B on the banded ones; at a 100-token context the banded layers hold
    100 tokens, not 128."""
    m = CAT.model("gpt-oss-120b")
    assert m.kv_bytes_per_token("fp8") == OSS_DENSE_LAYERS * OSS_KV_VALUES
    assert m.kv_bytes_per_sequence("fp8") == OSS_BANDED_LAYERS * OSS_KV_VALUES * OSS_WINDOW
    assert m.kv_bytes_at_context(4096, "fp8") == (OSS_DENSE_LAYERS * 4096 + OSS_BANDED_LAYERS * 128) * OSS_KV_VALUES
    assert m.kv_bytes_at_context(100, "bf16") == 36 * 100 * OSS_KV_VALUES * 2
    # the 512-value "long-context average" column would give 36 x 512 = 18,432 B/token at fp8:
    # the same slope, without the window's 2.36 MB per sequence
    assert m.kv_values_per_token_layer is None


def test_gpt_oss_decode_step_reads_and_computes_the_window_once_per_sequence():
    """One H100, bf16 math (W4A16), fp8 KV cache, 8 sequences of 2,000 tokens each.
    Bytes: weights (shared 2.127632e9 x 2 B + 128 experts touched by 8 tokens top-4 of 128 x
    0.896106e9 x 0.53125 B) + 8 x 2.36 MB of windows + 16,000 x 18,432 B of dense-layer KV.
    FLOP: 2 x 5.1328e9 x 8 + attention 16,384 FLOP per pair x (18 layers x 16,000 context
    tokens + 18 layers x 128 x 8 sequences); sinks add no pair."""
    m = CAT.model("gpt-oss-120b")
    perf = PerfModel(CAT.accelerator("h100-sxm"), m, "bf16", kv_precision="fp8")
    experts_touched = 128 * (1 - (1 - 4 / 128) ** 8)
    weights = 2.127632e9 * 2 + experts_touched * 0.896106e9 * 0.53125
    window = OSS_BANDED_LAYERS * OSS_WINDOW * OSS_KV_VALUES
    assert perf.decode_bytes(8, 16_000) == pytest.approx(weights + 8 * window + 16_000 * 18 * OSS_KV_VALUES, rel=1e-9)
    flops = 2 * 5.1328e9 * 8 + OSS_PAIR_FLOP * (OSS_DENSE_LAYERS * 16_000 + OSS_BANDED_LAYERS * OSS_WINDOW * 8)
    assert perf.decode_flops(8, 16_000) == pytest.approx(flops, rel=1e-9)
    assert m.attention_sinks and dataclasses.replace(m, attention_sinks=False).attention_flops_per_pair_layer(True) \
        == m.attention_flops_per_pair_layer(True) == OSS_PAIR_FLOP


def test_gpt_oss_weights_match_the_checkpoint_size():
    """MXFP4 experts (4.25 bits) and BF16 elsewhere: 2.127632e9 x 2 B + 128 x 0.896106e9 x
    4.25/8 B = 65.19 GB, within 0.2 % of the published checkpoint, 65,248,815,744 B (derived
    in /work/research/models/models_2026.md from the config; the 20b derivation matches its
    safetensors index byte for byte). FP8 math keeps the experts at 4.25 bits."""
    m = CAT.model("gpt-oss-120b")
    assert m.weight_bytes("bf16") == pytest.approx(2.127632e9 * 2 + 128 * 0.896106e9 * 0.53125, rel=1e-9)
    assert m.weight_bytes("bf16") == pytest.approx(65_248_815_744, rel=2e-3)
    assert m.weight_bytes("fp8") == pytest.approx(2.127632e9 + 128 * 0.896106e9 * 0.53125, rel=1e-9)
    assert CAT.model("gpt-oss-20b").weight_bytes("bf16") == pytest.approx(13_761_264_768, rel=2e-3)


def test_deepseek_mla_decode_is_absorbed_and_prefill_naive():
    """DeepSeek-R1 (config_671B.json: 61 layers, 128 heads, kv_lora_rank 512, rope 64,
    nope/v 128). Decode pair: 2 x 128 x (576 + 512) = 278,528 FLOP per layer; prefill
    pair: 2 x 128 x (192 + 128) = 81,920. A decode step of 1 sequence at 1,000 tokens of
    context: 2 x 37e9 + 61 x 278,528 x 1,000 FLOP; a 1,000-token prefill: 2 x 37e9 x 1,000
    + 61 x 81,920 x 1,000^2 / 2. KV: 61 x 576 B per token at fp8."""
    m = CAT.model("deepseek-r1")
    assert m.attention_flops_per_pair_layer(decode=True) == 278_528
    assert m.attention_flops_per_pair_layer(decode=False) == 81_920
    perf = PerfModel(CAT.accelerator("b200"), m, "fp8", tp=8)
    assert perf.decode_flops(1, 1000) == pytest.approx(2 * 37e9 + 61 * 278_528 * 1000, rel=1e-12)
    assert perf.prefill_flops(1000, 1000.0**2) == pytest.approx(2 * 37e9 * 1000 + 61 * 81_920 * 1000**2 / 2, rel=1e-12)
    assert m.kv_bytes_per_token("fp8") == 61 * 576


def test_llama4_chunked_layers_hold_the_current_chunk_only():
    """Llama 4 Scout: 48 layers, 36 chunked at 8,192 tokens, 12 global; 2 x 8 x 128 = 2,048
    KV values per token and layer. At a 10,000-token context a chunked layer holds
    (10,000 - 1) mod 8,192 + 1 = 1,808 tokens: (12 x 10,000 + 36 x 1,808) x 2,048 x 2 B at
    bf16; below one chunk every layer holds the context. The linear cost counts the
    chunked layers as global (an upper bound past 8,192 tokens)."""
    m = CAT.model("llama-4-scout")
    assert m.kv_bytes_at_context(10_000, "bf16") == (12 * 10_000 + 36 * 1_808) * 2_048 * 2
    assert m.kv_bytes_at_context(5_000, "bf16") == 48 * 5_000 * 2_048 * 2
    assert m.decode_attention_pairs(10_000) == 12 * 10_000 + 36 * 1_808
    assert m.kv_bytes_per_token("bf16") == 48 * 2_048 * 2 and m.kv_bytes_per_sequence("bf16") == 0
