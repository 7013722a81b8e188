"""The layout rules, sharding and collective costs of :mod:`sim.models.parallelism`.

Expected values are hand calculations written out in each test from the raw catalog CSV
rows (read here with :mod:`csv`, not through the loader) or from textbook cases: the ring
all-reduce moves 2(n−1)/n of the message per chip (Patarasuk & Yuan, J. Parallel Distrib.
Comput. 69(2), 2009), all-gather and all-to-all (n−1)/n."""

from __future__ import annotations

import csv
import itertools
from pathlib import Path

import pytest

from fleets.catalog_io import load_catalog
from sim.errors import UserError
from sim.models.parallelism import (
    LayoutError, Link, allgather_time_s, allowed_ep, allowed_tp, allreduce_time_s, alltoall_time_s, check_degree,
    check_ep, check_pp, check_tp, kv_bytes_per_token_per_accelerator, kv_replication, link_for,
    replica_accelerators, replica_weight_bytes, scaleout_link, scaleup_link, send_time_s, stage_accelerators,
    stored_kv_bytes_per_token, weight_bytes_per_accelerator,
)

ROOT = Path(__file__).resolve().parents[3]
CAT = load_catalog()


def _row(table: str, key: str) -> dict:
    with open(ROOT / "fleets" / "data" / f"{table}.csv", newline="") as f:
        return next(r for r in csv.DictReader(f) if r["key"] == key)


# --- collectives -------------------------------------------------------------------------

TEXTBOOK = Link(latency_s=0.0, latency_log2_s=0.0, bw_bytes_per_s=100e9, bus_efficiency=1.0)


def test_textbook_collectives_of_one_gigabyte_over_four_chips():
    """1 GB over 4 chips at 100 GB/s, no latency: ring all-reduce 2·3/4·1e9/1e11 = 15 ms;
    all-gather and all-to-all 3/4·1e9/1e11 = 7.5 ms; one send 1e9/1e11 = 10 ms."""
    assert allreduce_time_s(TEXTBOOK, 1e9, 4) == pytest.approx(0.015, rel=1e-12)
    assert allgather_time_s(TEXTBOOK, 1e9, 4) == pytest.approx(0.0075, rel=1e-12)
    assert alltoall_time_s(TEXTBOOK, 1e9, 4) == pytest.approx(0.0075, rel=1e-12)
    assert send_time_s(TEXTBOOK, 1e9) == pytest.approx(0.010, rel=1e-12)


@pytest.mark.parametrize("collective", [allreduce_time_s, allgather_time_s, alltoall_time_s])
def test_a_group_of_one_costs_nothing(collective):
    assert collective(scaleup_link(CAT.accelerator("h100-sxm")), 1e9, 1) == 0.0


def test_h100_tp8_all_reduce_of_a_1000_token_prefill_by_hand():
    """Llama-3-70B activations of 1,000 tokens: 1,000 x 8,192 x 2 B = 16,384,000 B over the
    8 GPUs of an HGX H100, fabric nvlink4-hgx8: α0 2.08 us, α1 0.61 us, η_bus 0.569 of
    450 GB/s (accelerators.csv carries the same numbers). α = 2.08 + 0.61·log2(8) = 3.91 us;
    bandwidth term 2·7/8 · 16,384,000 / (0.569 · 450e9) = 111.98 us."""
    a = _row("accelerators", "h100-sxm")
    assert (a["scaleup_fabric"], a["scaleup_latency_us"], a["scaleup_latency_log2_us"], a["scaleup_bus_efficiency"],
            a["scaleup_gbps_per_dir"]) == ("nvlink4-hgx8", "2.08", "0.61", "0.569", "450")
    expected = 3.91e-6 + 1.75 * 16_384_000 / (0.569 * 450e9)  # = 115.89 us
    link = scaleup_link(CAT.accelerator("h100-sxm"))
    assert allreduce_time_s(link, 16_384_000, 8) == pytest.approx(expected, rel=1e-12)
    assert allreduce_time_s(link, 16_384_000, 8) == pytest.approx(115.89e-6, rel=1e-4)
    # all-gather: the same latency, half the bandwidth term
    assert allgather_time_s(link, 16_384_000, 8) == pytest.approx(3.91e-6 + 0.875 * 16_384_000 / (0.569 * 450e9))


def test_full_mesh_fabric_gives_a_pair_one_link():
    """MI355X xGMI: 7 links of 76.8 GB/s per direction, one per peer (vLLM PR 39080): a TP2
    group has 76.8 GB/s, TP4 3 x 76.8 = 230.4, TP8 537.6. All-reduce of 1 MiB at TP2:
    α 4.36 + 0.61 = 4.97 us + 1 · 1,048,576 / (0.776 · 76.8e9) = 17.59 us."""
    link = scaleup_link(CAT.accelerator("mi355x"))
    assert [link.group_bw_bytes_per_s(n) for n in (2, 4, 8)] == pytest.approx([76.8e9, 230.4e9, 537.6e9])
    assert allreduce_time_s(link, 2**20, 2) == pytest.approx(4.97e-6 + 2**20 / (0.776 * 76.8e9), rel=1e-12)


def test_scale_out_link_is_one_latency_and_the_nic_rate():
    """Across HGX nodes: α0 = 50 us, β = 50 GB/s (one 400 Gb/s NIC per GPU), α1 = 0 and
    η_bus = 1 assumed. All-reduce of 8 MB over 2 nodes: 50 us + 2·1/2·8e6/50e9 = 210 us;
    one 8 MB send: 50 us + 160 us."""
    a = _row("accelerators", "h100-sxm")
    assert (a["scaleout_latency_us"], a["scaleout_gbps_per_dir"]) == ("50", "50")
    out = scaleout_link(CAT.accelerator("h100-sxm"))
    assert allreduce_time_s(out, 8e6, 2) == pytest.approx(210e-6, rel=1e-12)
    assert send_time_s(out, 8e6) == pytest.approx(210e-6, rel=1e-12)
    assert allreduce_time_s(out, 0.0, 16) == pytest.approx(50e-6, rel=1e-12)  # no log2 term


def test_deepseek_ep64_all_to_all_by_hand():
    """DeepSeek-V3 dispatch at EP64 on NVL72: each GPU holds 512/64 = 8 tokens and sends
    each to k = 8 experts, 7,168 x 2 B: 8·8·14,336 = 917,504 B; 63/64 of it leaves.
    Fabric nvlink5-nvl72: α = 3.27 + 0.84·log2(64) = 8.31 us; bandwidth 900 GB/s x 0.489."""
    a = _row("accelerators", "gb200")
    assert (a["scaleup_gbps_per_dir"], a["scaleup_domain_size"], a["scaleup_fabric"]) == ("900", "72", "nvlink5-nvl72")
    expected = 8.31e-6 + 63 / 64 * 917_504 / (0.489 * 900e9)
    link = scaleup_link(CAT.accelerator("gb200"))
    assert alltoall_time_s(link, 917_504, 64) == pytest.approx(expected, rel=1e-12)


def test_a_group_talks_over_scale_up_inside_its_domain_and_scale_out_beyond():
    h100 = CAT.accelerator("h100-sxm")
    assert link_for(h100, 8) == scaleup_link(h100)
    assert link_for(h100, 9) == scaleout_link(h100)
    assert scaleup_link(h100).bw_bytes_per_s == pytest.approx(450e9)
    assert scaleout_link(h100).bw_bytes_per_s == pytest.approx(50e9)


# --- sharding ----------------------------------------------------------------------------

def test_70b_fp8_weights_per_gpu_at_tp4():
    """models.csv: Llama-3-70B has 70.55 B parameters; FP8 is 1 byte each. TP4: 70.55e9 / 4
    = 17.64 GB per GPU; with pp=2 as well, 8.82 GB; the replica holds 70.55 GB however it
    is split, 141.1 GB in BF16."""
    assert _row("models", "llama-3-70b")["params_b"] == "70.55"
    model = CAT.model("llama-3-70b")
    assert weight_bytes_per_accelerator(model, "fp8", tp=4) == pytest.approx(17.6375e9, rel=1e-12)
    assert weight_bytes_per_accelerator(model, "fp8", tp=4, pp=2) == pytest.approx(8.81875e9, rel=1e-12)
    assert replica_weight_bytes(model, "fp8", tp=4) == pytest.approx(70.55e9, rel=1e-12)
    assert replica_weight_bytes(model, "bf16", tp=8) == pytest.approx(141.1e9, rel=1e-12)


@pytest.mark.parametrize("tp,copies,per_gpu", [(1, 1, 163_840), (4, 1, 40_960), (8, 1, 20_480),
                                               (16, 2, 20_480), (32, 4, 20_480)])
def test_70b_kv_cache_per_token_is_replicated_beyond_its_8_kv_heads(tp, copies, per_gpu):
    """Llama-3-70B: 80 layers, 8 KV heads of 128 values, FP8 (1 B): 2·80·8·128 = 163,840 B
    per token. Up to tp = 8 the heads are split (40,960 B per GPU at TP4 = 2 heads); past 8
    each GPU keeps one whole KV head, 2·80·128 = 20,480 B, and the group stores tp/8 copies."""
    model = CAT.model("llama-3-70b")
    assert kv_replication(model, tp) == copies
    assert stored_kv_bytes_per_token(model, "fp8", tp) == 163_840 * copies
    assert kv_bytes_per_token_per_accelerator(model, "fp8", tp) == per_gpu
    assert kv_bytes_per_token_per_accelerator(model, "fp8", tp, pp=2) == per_gpu / 2


def test_mixtral_ep8_tp2_weights_by_hand():
    """models.csv: Mixtral-8x7B 46.7 B parameters, 8 experts of 5.636667 B; shared part
    46.7 − 8 x 5.636667 = 1.606664 B. EP8 with TP2 attention: 4 attention groups each hold
    the shared part, the experts once: 4 x 1.606664 + 45.093336 = 51.519992 GB (FP8); each
    GPU holds shared/2 + one expert = 0.803332 + 5.636667 = 6.439999 GB."""
    m = _row("models", "mixtral-8x7b")
    assert (m["params_b"], m["n_experts"], m["expert_params_b"]) == ("46.7", "8", "5.636667")
    model = CAT.model("mixtral-8x7b")
    assert replica_weight_bytes(model, "fp8", tp=2, ep=8) == pytest.approx(51.519992e9, rel=1e-9)
    assert weight_bytes_per_accelerator(model, "fp8", tp=2, ep=8) == pytest.approx(6.439999e9, rel=1e-9)


@pytest.mark.parametrize("key,tp,ep", [("mixtral-8x7b", 1, 8), ("mixtral-8x7b", 2, 4), ("deepseek-v3", 4, 64),
                                       ("llama-3-70b", 8, 1), ("llama-3-70b", 2, 1)])
def test_per_accelerator_weights_add_up_to_the_replica(key, tp, ep):
    """Summed over the replica's accelerators the per-accelerator bytes are the replica's."""
    model = CAT.model(key)
    chips = replica_accelerators(tp, 1, ep)
    total = weight_bytes_per_accelerator(model, "fp8", tp=tp, ep=ep) * chips
    assert total == pytest.approx(replica_weight_bytes(model, "fp8", tp=tp, ep=ep), rel=1e-12)


def test_accelerators_per_stage_and_per_replica():
    assert [stage_accelerators(4), stage_accelerators(2, 8), stage_accelerators(1, 1)] == [4, 8, 1]
    assert [replica_accelerators(4, 2), replica_accelerators(2, 3, 8)] == [8, 24]


# --- layout rules ------------------------------------------------------------------------

def test_allowed_tp_lists_head_divisors_inside_the_domain():
    llama, deepseek, sdxl = CAT.model("llama-3-70b"), CAT.model("deepseek-v3"), CAT.model("sdxl")
    h100, gb200 = CAT.accelerator("h100-sxm"), CAT.accelerator("gb200")
    assert allowed_tp(llama, h100) == [1, 2, 4, 8]  # 64 heads, 8-GPU domain
    assert allowed_tp(llama, gb200) == [1, 2, 4, 8, 16, 32, 64]  # 72-GPU domain
    assert allowed_tp(deepseek, gb200) == [1, 2, 4, 8, 16, 32, 64]  # 128 heads: 128 > 72
    assert allowed_tp(sdxl, h100) == list(range(1, 9))  # no attention heads to divide


def test_tp_rule_errors_name_the_problem_and_the_allowed_values():
    llama, h100 = CAT.model("llama-3-70b"), CAT.accelerator("h100-sxm")
    with pytest.raises(LayoutError) as err:
        check_tp(3, llama, h100)
    assert err.value.problem == "tp=3 does not divide the model's 64 attention heads (each TP shard runs whole heads)"
    assert err.value.fix == "Use tp in: 1, 2, 4, 8."
    with pytest.raises(LayoutError, match="tp=16 but TP must fit one scale-up domain of 8 accelerators"):
        check_tp(16, llama, h100)
    for bad in (0, -2, True, 2.0):
        with pytest.raises(LayoutError, match=f"tp={bad!r} is not allowed. Use an integer tp >= 1."):
            check_tp(bad, llama, h100)
    check_tp(16, llama, CAT.accelerator("gb200"))  # 8 KV heads < 16: replicated, not refused
    assert issubclass(LayoutError, UserError)


def test_pp_rule():
    llama = CAT.model("llama-3-70b")
    check_pp(80, llama)
    with pytest.raises(LayoutError, match="pp=81 exceeds the model's 80 layers. Use pp <= 80."):
        check_pp(81, llama)
    check_pp(200, CAT.model("sdxl"))  # no layer count in the catalog: nothing to check
    with pytest.raises(LayoutError, match="replicas=0 is not allowed"):
        check_degree("replicas", 0)


def test_allowed_ep_by_hand():
    """Divisors of the routed experts, > 1, inside the domain, multiples of tp."""
    mixtral, deepseek = CAT.model("mixtral-8x7b"), CAT.model("deepseek-v3")
    gb200, h200 = CAT.accelerator("gb200"), CAT.accelerator("h200")
    assert allowed_ep(1, mixtral, gb200) == [2, 4, 8]
    assert allowed_ep(4, mixtral, gb200) == [4, 8]
    assert allowed_ep(1, deepseek, gb200) == [2, 4, 8, 16, 32, 64]  # 256 experts; 128 > 72
    assert allowed_ep(1, deepseek, h200) == [2, 4, 8]
    assert allowed_ep(1, CAT.model("llama-3-70b"), gb200) == []


@pytest.mark.parametrize("key,acc,tp,ep,problem", [
    ("llama-3-70b", "gb200", 1, 8, "ep=8 but the model is dense (no routed experts)"),
    ("deepseek-v3", "h200", 1, 16, "ep=16 but an expert-parallel group must fit one scale-up domain of 8"),
    ("mixtral-8x7b", "gb200", 1, 3, "ep=3 does not divide the model's 8 routed experts"),
    ("mixtral-8x7b", "gb200", 4, 2, "ep=2 is not a multiple of tp=4"),
])
def test_ep_rule_errors(key, acc, tp, ep, problem):
    with pytest.raises(LayoutError) as err:
        check_ep(ep, tp, CAT.model(key), CAT.accelerator(acc))
    assert err.value.problem.startswith(problem)


def test_ep_rule_accepts_exactly_the_allowed_list():
    mixtral, gb200 = CAT.model("mixtral-8x7b"), CAT.accelerator("gb200")
    for tp, ep in itertools.product((1, 2, 4), range(2, 20)):
        try:
            check_ep(ep, tp, mixtral, gb200)
            ok = True
        except LayoutError:
            ok = False
        assert ok == (ep in {2: [2, 4, 8], 4: [4, 8], 1: [2, 4, 8]}[tp]), (tp, ep)
