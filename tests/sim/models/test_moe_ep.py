"""Expert parallelism of MoE models over a scale-up domain (issue 12, item 4): experts
sharded n_experts / ep per GPU, attention data-parallel in ep / tp groups, a balanced
all-to-all per MoE layer. Expected values are computed here from the raw catalog CSVs, the
DeepSeek-V3 paper's architecture and, for the expected-experts formula, by enumerating
every routing of a small case."""

from __future__ import annotations

import csv
import itertools
import math
from pathlib import Path

import pytest
from scenario_cases import make_scenario

from fleets.catalog_io import load_catalog
from fleets.placement import place_pool
from sim.fleet_plan import resolve_fleet
from sim.errors import PlacementError
from sim.models.parallelism import weight_bytes_per_accelerator
from sim.models.perf import PerfModel, expected_experts_touched

ROOT = Path(__file__).resolve().parents[3]
CATALOG = load_catalog()


def _row(table, key):
    with open(ROOT / "fleets" / "data" / f"{table}.csv", newline="") as f:
        return next(r for r in csv.DictReader(f) if r["key"] == key)


@pytest.mark.parametrize("n_experts,top_k,tokens", [(6, 2, 3), (4, 1, 4), (5, 3, 2)])
def test_expected_experts_formula_against_enumeration(n_experts, top_k, tokens):
    """Every token picks one of C(E, k) expert sets uniformly; average the distinct experts
    over all C(E, k)^n equally likely routings."""
    choices = list(itertools.combinations(range(n_experts), top_k))
    total = sum(len(set().union(*routing)) for routing in itertools.product(choices, repeat=tokens))
    exact = total / len(choices) ** tokens
    assert n_experts * (1 - (1 - top_k / n_experts) ** tokens) == pytest.approx(exact, rel=1e-12)
    assert expected_experts_touched(n_experts, top_k, tokens) == pytest.approx(exact, rel=1e-12)


def test_mixtral_weight_streaming_by_hand():
    """Mixtral-8x7B at batch 3, FP8: shared weights plus 8·(1 − (6/8)^3) = 4.625 experts."""
    m = _row("models", "mixtral-8x7b")
    expert = float(m["expert_params_b"]) * 1e9
    shared = float(m["params_b"]) * 1e9 - 8 * expert
    perf = PerfModel(CATALOG.accelerator("h200"), CATALOG.model("mixtral-8x7b"), "fp8", 8)
    assert perf.weight_bytes_read(3) == pytest.approx(shared + 4.625 * expert, rel=1e-9)


def _deepseek():
    m = _row("models", "deepseek-v3")
    # DeepSeek-V3 report (arXiv 2412.19437): 671B total, 37B active, 256 routed experts, top-8
    assert (float(m["params_b"]), float(m["active_params_b"]), int(m["n_experts"]), int(m["experts_per_token"])) \
        == (671.0, 37.0, 256, 8)
    expert = float(m["expert_params_b"]) * 1e9
    assert expert == pytest.approx((671e9 - 37e9) / 248, rel=1e-6)
    return m, expert, 671e9 - 256 * expert


def test_deepseek_weights_per_gpu_and_kv_at_ep64_on_nvl72():
    m, expert, shared = _deepseek()
    # config: 3·7168·2048 per expert per layer × 58 MoE layers agrees within 0.1%
    assert expert == pytest.approx(3 * 7168 * 2048 * 58, rel=1e-3)
    model, acc = CATALOG.model("deepseek-v3"), CATALOG.accelerator("gb200")
    layout = place_pool(name="ds", accelerator=acc, model=model, precision="fp8", tp=1, pp=1, replicas=1, ep=64)
    assert layout.accelerators == 64
    assert layout.replica_weight_bytes == pytest.approx(64 * shared + 256 * expert, rel=1e-9)  # FP8: 1 B/param
    assert weight_bytes_per_accelerator(model, "fp8", 1, 64) == pytest.approx(shared + 4 * expert, rel=1e-9)
    assert weight_bytes_per_accelerator(model, "fp8", 4, 64) == pytest.approx(shared / 4 + 4 * expert, rel=1e-9)
    # MLA cache: 512 latent + 64 RoPE values per token and layer, 61 layers, FP8
    assert model.kv_bytes_per_token("fp8") == 61 * (512 + 64) * 1
    sc = make_scenario({"chat": {"kind": "autoregressive", "model": "deepseek-v3",
                                 "arrival": {"kind": "poisson", "rate_per_s": 1.0}}},
                       [{"name": "ds", "accelerator": "gb200", "serves": ["chat"], "replicas": 1, "tp": 1, "ep": 64,
                         "precision": "fp8", "kv_precision": "fp8", "memory_utilization": 0.9, "kv_block_tokens": 16}],
                       duration_s=5)
    pool = resolve_fleet(sc, 0, CATALOG).pools[0]
    free = 64 * float(_row("accelerators", "gb200")["memory_gb"]) * 1e9 * 0.9 - (64 * shared + 256 * expert)
    assert pool.kv_capacity_blocks == int(free // (61 * 576 * 16))


def _decode_by_hand(acc_key, model_row, expert, shared, tp, ep, batch, context):
    a = _row("accelerators", acc_key)
    chip_c = float(a["peak_fp8_tflops"]) * 1e12 * float(a["compute_efficiency"])
    chip_m = float(a["memory_bw_tbps"]) * 1e12 * float(a["bandwidth_efficiency"])
    dp = ep // tp
    active = float(model_row["active_params_b"]) * 1e9
    k, n_exp = int(model_row["experts_per_token"]), int(model_row["n_experts"])
    layers, heads, head_dim = int(model_row["layers"]), int(model_row["heads"]), int(model_row["head_dim"])
    # FP8 KV: 1 B per value; MLA's one latent is read in full by each of the tp ranks
    kv_token = layers * int(model_row["kv_values_per_token_layer"]) * max(1, tp // int(model_row["kv_heads"]))
    # attention group of tp GPUs, batch/dp sequences, context/dp tokens of KV
    attn_flops = 2 * (active - k * expert) * batch / dp + 4 * layers * heads * head_dim * context / dp
    attn_bytes = shared + kv_token * context / dp
    t_attn = max(attn_flops / (tp * chip_c), attn_bytes / (tp * chip_m))
    # one GPU's experts: k·batch/ep expert-tokens, E/ep·(1 − (1 − k/E)^B) experts streamed
    touched = n_exp / ep * (1 - (1 - k / n_exp) ** batch)
    t_exp = max(2 * expert * k * batch / ep / chip_c, touched * expert / chip_m)
    # all-to-all per MoE layer: dispatch + combine of batch/ep tokens × k × (ep−1)/ep × hidden × 2 B
    alpha = (float(a["scaleup_latency_us"]) + float(a["scaleup_latency_log2_us"]) * math.log2(ep)) * 1e-6
    beta = float(a["scaleup_gbps_per_dir"]) * 1e9 * float(a["scaleup_bus_efficiency"])
    volume = batch / ep * k * (ep - 1) / ep * int(model_row["hidden"]) * 2
    t_a2a = int(model_row["moe_layers"]) * 2 * (alpha + volume / beta)
    # TP inside each attention group: two all-reduces per layer of batch/dp tokens × hidden × 2 B
    t_tp = 0.0
    if tp > 1:
        alpha_tp = (float(a["scaleup_latency_us"]) + float(a["scaleup_latency_log2_us"]) * math.log2(tp)) * 1e-6
        message = batch / dp * int(model_row["hidden"]) * 2
        t_tp = 2 * layers * (alpha_tp + 2 * (tp - 1) / tp * message / beta)
    return t_attn + t_exp + t_a2a + t_tp + float(a["iteration_overhead_us"]) * 1e-6


@pytest.mark.parametrize("tp,ep,batch,context", [(1, 64, 1, 2000), (1, 64, 512, 512 * 2000), (1, 8, 128, 128 * 4000),
                                                 (4, 64, 256, 256 * 3000)])
def test_deepseek_decode_step_by_hand_on_gb200(tp, ep, batch, context):
    m, expert, shared = _deepseek()
    # the attention group holds shared/tp per GPU, so its roofline divides by tp below
    expected = _decode_by_hand("gb200", m, expert, shared, tp, ep, batch, context)
    perf = PerfModel(CATALOG.accelerator("gb200"), CATALOG.model("deepseek-v3"), "fp8", tp, 1, kv_precision="fp8", ep=ep)
    assert perf.decode_time_s(batch, context) == pytest.approx(expected, rel=1e-9)
    assert perf.decode_line(batch).time_s(context) == pytest.approx(expected, rel=1e-9)
    assert perf.mixed_cost(0, 0, batch, context)[0] == pytest.approx(expected, rel=1e-9)


def test_ep_shrinks_per_gpu_weights_and_grows_kv_capacity_against_h200_tp8():
    """Same model, same FP8: a TP8 H200 replica keeps 8 copies of nothing and 1/8 of every
    weight per GPU; EP64 on NVL72 keeps 4 experts per GPU and, with attention data-parallel,
    no TP replication of the single MLA latent (TP8 replicates it 8×)."""
    model = CATALOG.model("deepseek-v3")
    tp8 = PerfModel(CATALOG.accelerator("h200"), model, "fp8", 8, kv_precision="fp8")
    ep64 = PerfModel(CATALOG.accelerator("gb200"), model, "fp8", 1, kv_precision="fp8", ep=64)
    assert tp8.kv_bytes_per_token == 8 * 61 * 576 and ep64.kv_bytes_per_token == 61 * 576
    assert weight_bytes_per_accelerator(model, "fp8", 8) == pytest.approx(671e9 / 8)
    assert weight_bytes_per_accelerator(model, "fp8", 1, 64) < 0.35 * 671e9 / 8


def _pool_error(model, accelerator, tp, ep):
    sc = make_scenario({"chat": {"kind": "autoregressive", "model": model, "arrival": {"kind": "poisson", "rate_per_s": 1.0}}},
                       [{"name": "moe", "accelerator": accelerator, "serves": ["chat"], "replicas": 1, "tp": tp, "ep": ep}],
                       duration_s=5)
    with pytest.raises(PlacementError) as err:
        resolve_fleet(sc, 0, CATALOG).pools
    return str(err.value)


@pytest.mark.parametrize("model,accelerator,tp,ep,message", [
    ("mixtral-8x7b", "gb200", 1, 3, "ep=3 does not divide the model's 8 routed experts. Allowed ep with tp=1 on this part: 2, 4, 8"),
    ("deepseek-v3", "gb200", 1, 72, "ep=72 does not divide the model's 256 routed experts. Allowed ep with tp=1 on this part: 2, 4, 8, 16, 32, 64"),
    ("deepseek-v3", "h200", 1, 16, "ep=16 but an expert-parallel group must fit one scale-up domain of 8 accelerators"),
    ("mixtral-8x7b", "gb200", 4, 2, "ep=2 is not a multiple of tp=4"),
    ("llama-3-70b", "gb200", 1, 8, "ep=8 but the model is dense"),
])
def test_ep_validation_names_pool_value_and_allowed(model, accelerator, tp, ep, message):
    text = _pool_error(model, accelerator, tp, ep)
    assert "pools[0] 'moe'" in text and message in text


def _ep_chat_scenario():
    """Mixtral chat (200-token prompts, 20-token outputs, 5 req/s for 20 s) on 2 GB200
    replicas of tp=1, ep=8: 16 GPUs."""
    return make_scenario({"chat": {"kind": "autoregressive", "model": "mixtral-8x7b",
                                   "arrival": {"kind": "poisson", "rate_per_s": 5.0},
                                   "prompt_tokens": {"kind": "constant", "value": 200},
                                   "output_tokens": {"kind": "constant", "value": 20}}},
                         [{"name": "moe", "accelerator": "gb200", "serves": ["chat"], "replicas": 2, "tp": 1, "ep": 8}],
                         duration_s=20)


def test_an_ep_pool_runs_in_the_engine_and_counts_its_gpus():
    from sim.engine.core import simulate
    sc = _ep_chat_scenario()
    run = simulate(sc)
    done = run.requests[run.requests["status"] == "completed"]
    assert len(done) > 50 and (done["output_tokens"] == 20).all()
    pool = resolve_fleet(sc, 0, CATALOG).pools[0]
    assert pool.layout.accelerators == 16 and pool.layout.ep == 8
    # 4 GPUs per GB200 node: each 8-GPU EP group takes two whole nodes
    assert pool.layout.nodes == 4 and pool.share.node_share == 4
    exact = simulate(sc.model_copy(update={"engine": sc.engine.model_copy(update={"mode": "exact"})})).requests
    fast = run.requests
    for col in ("admitted_at_s", "first_token_at_s", "done_at_s"):
        assert (exact[col] - fast[col]).abs().max() < 1e-9  # fast stretches = per-iteration loop


def test_an_ep_pool_is_costed_and_reported_over_its_ep_gpus():
    """Power activities, pool rows and the text report see an EP replica as ep GPUs, not
    tp: by hand, a_c = FLOP / (busy_s x peak x eta_c x 8) for tp=1, ep=8 on GB200."""
    from sim.models.economics import pool_activities
    from sim.results.report_text import run_report
    from sim.results.tables import run_scenario
    sc = _ep_chat_scenario()
    pool = resolve_fleet(sc, 0, CATALOG).pools[0]
    acc = CATALOG.accelerator("gb200")
    a_c, a_m = pool_activities(pool, 2.0, 1e15, 1e12)
    precision = pool.layout.precision
    assert a_c == pytest.approx(1e15 / (2.0 * acc.peak_flops(precision) * acc.compute_efficiency * 8))
    assert a_m == pytest.approx(1e12 / (2.0 * acc.memory_bw_bytes_per_s * acc.bandwidth_efficiency * 8))
    results = run_scenario(sc)
    row = results.pools.iloc[0]
    assert row["ep"] == 8 and row["accelerators"] == 16
    assert "2 × tp1 ep8" in run_report(results)
