"""A draft model on a pool of its own (issue 25, sim.models.speculation.RemoteDraft): a
verification step computed by hand from the catalog (the draft forwards on the draft
pool's roofline, the link's round trip from fleets/data/fabrics.csv, the verification on
the target), one sequence's TPOT and the draft pool's busy time from an exact-mode run,
the memory and cost the draft pool carries, and refused input."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest
from scenario_cases import make_scenario

from fleets.catalog_io import load_catalog
from sim.engine.core import simulate
from sim.errors import UserError
from sim.fleet_plan import resolve_fleet
from sim.models.perf import PerfModel

K, ALPHA, PROMPT, OUTPUT = 4, 0.7, 1000, 401
FABRICS = Path(__file__).resolve().parents[3] / "fleets" / "data" / "fabrics.csv"
SPEC = {"method": "draft_model", "draft_tokens": K, "acceptance": ALPHA, "draft_model": "llama-3.1-8b"}


def workload(rate: float = 0.002) -> dict:
    return {"chat": {"kind": "autoregressive", "model": "llama-3.1-70b", "arrival": {"kind": "poisson", "rate_per_s": rate},
                     "prompt_tokens": {"kind": "constant", "value": PROMPT},
                     "output_tokens": {"kind": "constant", "value": OUTPUT}, "speculation": SPEC}}


TARGET = {"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1, "tp": 4,
          "scaleout_fabric": "ib-ndr-400"}
DRAFTER = {"name": "drafter", "accelerator": "h100-sxm", "serves": ["chat:draft"], "replicas": 1, "tp": 1,
           "scaleout_fabric": "ib-ndr-400"}


def ndr() -> tuple[float, float]:
    """(latency s, bytes/s per GPU) of the ib-ndr-400 row, read from the CSV itself."""
    row = next(r for r in csv.DictReader(FABRICS.open()) if r["key"] == "ib-ndr-400")
    return float(row["latency_us"]) * 1e-6, float(row["gbps_per_dir_per_gpu"]) * 1e9


def forward_s(perf: PerfModel, tokens: int, context: float) -> float:
    """One forward of one sequence over ``tokens`` new tokens holding ``context`` tokens:
    the roofline of its FLOP and bytes (weights once, its KV cache once)."""
    flops = 2 * perf.model.active_params * tokens + perf.attn_flops_per_pair * (tokens * context + tokens * (tokens - 1) / 2)
    return perf.time_s(flops, perf.weight_bytes + perf.kv_bytes_per_token * context, tokens)


def hand_step_s(context: float) -> float:
    """draft k tokens on the drafter's GPU (its t_0 once), send, verify k + 1 on the
    target, send back: t_verify + k·t_draft + t_0 + 2α + (k + 2)·4 B / β."""
    cat = load_catalog()
    h100 = cat.accelerator("h100-sxm")
    target = PerfModel(h100, cat.model("llama-3.1-70b"), "fp8", tp=4)
    draft = PerfModel(dataclasses.replace(h100, iteration_overhead_s=0.0), cat.model("llama-3.1-8b"), "fp8", tp=1)
    alpha, beta = ndr()
    link = 2 * alpha + (K + 2) * 4 / beta
    return forward_s(target, K + 1, context) + K * forward_s(draft, 1, context) + h100.iteration_overhead_s + link


def test_a_step_is_draft_then_link_then_verify_by_hand():
    plan = resolve_fleet(make_scenario(workload(), [TARGET, DRAFTER]), 0)
    target, drafter = plan.pools
    spec = target.spec
    assert spec.remote is not None and spec.remote.pool_index == drafter.index
    for context in (0.0, 1000.0, 5000.0):
        assert spec.step_time_s(1, context) == pytest.approx(hand_step_s(context), rel=1e-9)
    # the link: 5 µs each way on NDR (fabrics.csv), 50 GB/s per GPU
    assert spec.remote.link_s(1, K) == pytest.approx(2 * 5e-6 + 6 * 4 / 50e9, rel=1e-12)
    # the target holds no draft weights and no draft KV; the drafter holds the 8B model
    assert spec.draft_resident_bytes == 0 and spec.draft_kv_bytes_per_token == 0
    assert drafter.perf.model.key == "llama-3.1-8b"
    assert drafter.resident_bytes == pytest.approx(8.03e9, rel=0.02)  # 8.03 B parameters at 1 byte (FP8)


def test_one_sequence_decodes_at_the_hand_step_over_the_expected_tokens_per_step():
    sc = make_scenario(workload(), [TARGET, DRAFTER], duration_s=6000.0, engine={"mode": "exact"})
    run = simulate(sc)
    done = run.requests[run.requests["status"] == "completed"]
    assert len(done) >= 5
    first = done.iloc[0]
    steps = int(first["steps"])
    g = (1 - ALPHA ** (K + 1)) / (1 - ALPHA)  # E[L] = 2.77 tokens per step (Leviathan et al.)
    decode = sum(hand_step_s(PROMPT + 1 + g * j) for j in range(steps))
    assert first["done_at_s"] - first["first_token_at_s"] == pytest.approx(decode, rel=1e-4)
    tpot = decode / (OUTPUT - 1)
    assert tpot == pytest.approx(hand_step_s(PROMPT + OUTPUT / 2) / g, rel=0.05)  # ≈ step / E[L] on average
    # the draft pool was busy k draft forwards and its t_0 per step, plus the draft
    # model's prefill of each prompt (with its t_0), and did nothing else
    cat = load_catalog()
    h100 = cat.accelerator("h100-sxm")
    draft = PerfModel(dataclasses.replace(h100, iteration_overhead_s=0.0), cat.model("llama-3.1-8b"), "fp8", tp=1)
    per_request = [sum(K * forward_s(draft, 1, PROMPT + 1 + g * j) + h100.iteration_overhead_s for j in range(int(s)))
                   + draft.prefill_time_s(PROMPT) + h100.iteration_overhead_s for s in done["steps"]]
    pools = run.pools.set_index("pool")
    assert pools.loc["drafter", "busy_total_s"] == pytest.approx(sum(per_request), rel=1e-3)
    assert pools.loc["drafter", "flops"] > 0 and pools.loc["chat", "flops"] > 0


def test_the_draft_pool_is_billed_to_the_requests_it_drafted_for():
    from sim.results.tables import run_scenario

    sc = make_scenario(workload(rate=1.0), [TARGET, DRAFTER], duration_s=60.0, drain_s=600.0)
    res = run_scenario(sc)
    pools = res.pools.set_index("pool")
    billed = res.requests["cost_usd"].sum()
    # every pool's bill over the run, both pools: the requests pay all of it
    bill = sum(pools.loc[p, "run_cost_usd_per_hour"] * pools.loc[p, "run_end_s"] / 3600 for p in ("chat", "drafter"))
    assert billed == pytest.approx(bill, rel=1e-6)


@pytest.mark.parametrize("change,words", [
    (lambda w, p: w["chat"].update(speculation={"method": "ngram", "draft_tokens": 2, "acceptance": 0.5}),
     "runs the draft model of speculative decoding"),
    (lambda w, p: p.append({**DRAFTER, "name": "drafter2"}), "one pool per fleet runs 'chat:draft'"),
    (lambda w, p: p[1].update(replicas=1) or p[0].update(replicas=16), "give it at least"),
])
def test_refused_draft_pools(change, words):
    wl, pools = workload(), [dict(TARGET), dict(DRAFTER)]
    change(wl, pools)
    with pytest.raises(UserError, match=words):
        resolve_fleet(make_scenario(wl, pools), 0)
