"""Summary rows recomputed by hand from the requests table: rejections by reason (from
the generated lengths against each model's published context), the SLO-miss breakdown,
served throughput and goodput; and the text table that shows them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scenario_cases import make_scenario

from sim.results.summary import MISS_REASONS
from sim.results.planner_csv import fleet_workload_rows, planner_table
from sim.results.report_text import run_report
from sim.results.tables import run_scenario

# Published contexts: Meta Llama 3 model card "Context length 8k" (8,192 tokens);
# Llama 3.1 model card "128k" = max_position_embeddings 131,072 in its config.json.
LLAMA_3_CONTEXT = 8192
LLAMA_31_CONTEXT = 131_072
SLO = {"ttft_s": 0.5, "tpot_s": 0.03, "e2e_s": 8.0}


def chat(model: str, rate_per_s: float = 3.0, drain_s: float = 600.0):
    return make_scenario(
        {"chat": {"kind": "autoregressive", "model": model, "arrival": {"kind": "poisson", "rate_per_s": rate_per_s},
                  "prompt_tokens": {"kind": "lognormal", "median": 3000, "sigma": 1.0, "max": 20000},
                  "output_tokens": {"kind": "lognormal", "median": 200, "sigma": 0.8, "max": 2000},
                  "slo": SLO}},
        [{"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1, "tp": 1, "max_batch": 64}],
        duration_s=200.0, warmup_s=20.0, drain_s=drain_s, seed=11,
    )


@pytest.fixture(scope="module")
def llama3():
    return run_scenario(chat("llama-3-8b"))


def test_rejections_by_hand_from_generated_lengths(llama3):
    req = llama3.requests[llama3.requests["measured"]]
    too_long = (req["prompt_tokens"] + req["output_tokens"]) > LLAMA_3_CONTEXT
    row = llama3.summary.iloc[0]
    assert too_long.sum() > 10  # the case exercises rejections
    assert row["rejected"] == too_long.sum() == row["rejected_exceeds_max_context"]
    assert row["rejected_share"] == pytest.approx(too_long.mean())
    assert (req.loc[too_long, "status"] == "rejected").all()
    assert row["rejected_exceeds_kv_capacity"] == row["rejected_exceeds_memory"] == row["rejected_other"] == 0


def test_llama31_serves_128k_so_nothing_is_rejected():
    results = run_scenario(chat("llama-3.1-8b"))
    req = results.requests
    assert ((req["prompt_tokens"] + req["output_tokens"]) <= LLAMA_31_CONTEXT).all()
    assert results.summary.iloc[0]["rejected"] == 0


def test_slo_misses_by_hand(llama3):
    """Each measured request that missed is counted once, under the first reason in
    (rejected, unfinished, TTFT, TPOT, E2E); the reasons sum to the misses and
    attainment is 1 − misses / arrivals."""
    req = llama3.requests[llama3.requests["measured"]]
    row = llama3.summary.iloc[0]
    left = np.ones(len(req), dtype=bool)
    expected = {}
    tests = {
        "rejected": req["status"] == "rejected",
        "unfinished": req["status"] == "in_flight",
        "ttft": req["ttft_s"] > SLO["ttft_s"],
        "tpot": req["tpot_s"] > SLO["tpot_s"],
        "e2e": req["e2e_s"] > SLO["e2e_s"],
    }
    for reason in MISS_REASONS:
        hit = tests[reason].to_numpy() & left
        expected[reason] = int(hit.sum())
        left &= ~hit
    assert {r: row[f"slo_miss_{r}"] for r in MISS_REASONS} == expected
    assert sum(expected.values()) == row["slo_misses"] == len(req) - left.sum()
    assert row["slo_attainment"] == pytest.approx(left.sum() / len(req))
    assert expected["rejected"] > 0 and expected["ttft"] + expected["tpot"] + expected["e2e"] > 0


def test_throughput_and_goodput_by_hand(llama3):
    """Completions inside [warmup, duration), of any arrival time, over the window."""
    req = llama3.requests
    row = llama3.summary.iloc[0]
    window = 200.0 - 20.0
    inside = req[(req["status"] == "completed") & (req["done_at_s"] >= 20.0) & (req["done_at_s"] < 200.0)]
    good = inside[(inside["ttft_s"] <= SLO["ttft_s"]) & (inside["tpot_s"].isna() | (inside["tpot_s"] <= SLO["tpot_s"]))
                  & (inside["e2e_s"] <= SLO["e2e_s"])]
    assert row["throughput_rps"] == pytest.approx(len(inside) / window, rel=1e-12)
    assert row["goodput_rps"] == pytest.approx(len(good) / window, rel=1e-12)
    assert row["arrival_rate_rps"] == pytest.approx(req["measured"].sum() / window, rel=1e-12)


def test_workload_table_shows_rejections_and_misses(llama3):
    text = run_report(llama3)
    row = llama3.summary.iloc[0]
    assert "rejected" in text and "misses TTFT/TPOT/E2E/rejected/unfinished" in text
    share = f"{100 * row['rejected_share']:.1f}%"
    assert f"{int(row['rejected'])} ({share} context)" in text
    misses = " / ".join(str(int(row[f"slo_miss_{r}"])) for r in ("ttft", "tpot", "e2e", "rejected", "unfinished"))
    assert misses in text
    assert "batch/replica (of max)" in text and "KV or act. mean/peak" in text


def test_unstable_run_prints_unstable_and_lower_bounds():
    results = run_scenario(chat("llama-3.1-8b", rate_per_s=60.0, drain_s=0.0))
    row = results.summary.iloc[0]
    text = run_report(results)
    assert row["unstable"] and "UNSTABLE (backlog +" in text
    assert "≥ " in text and "lower bounds" in text
    assert row["throughput_rps"] < 0.9 * row["arrival_rate_rps"]
    assert bool(results.pools.iloc[0]["unstable"])
    assert isinstance(results.summary, pd.DataFrame)


def test_planner_row_carries_status_and_served_rates():
    """The planner CSV row of an overloaded fleet says ``unstable`` and gives the served
    rate next to the offered one (same numbers as the summary, which the tests above
    check by hand)."""
    results = run_scenario(chat("llama-3.1-8b", rate_per_s=60.0, drain_s=0.0))
    row = planner_table(fleet_workload_rows(results), ["fleet"]).iloc[0]
    summary = results.summary.iloc[0]
    assert row["chat_status"] == "unstable"
    assert row["chat_throughput_rps"] == summary["throughput_rps"] < row["chat_arrival_rate_rps"]
    assert row["chat_goodput_rps"] == summary["goodput_rps"]
    assert row["chat_rejected_share"] == 0.0


def test_tails_tokens_and_costs_by_hand(llama3):
    """Latency tails are numpy's percentiles of the completed measured requests; the
    $/request, $/1M tokens and J/token columns are the costed request rows summed (each
    request's cost is priced row by row by ``attribute_costs``, while the summary prices
    the replica-seconds it accumulated: two ways to the same bill)."""
    req = llama3.requests
    row = llama3.summary.iloc[0]
    assert not row["unstable"]  # stable: the tails are over completed requests only
    done = req[req["measured"] & (req["status"] == "completed")]
    for metric in ("ttft", "tpot", "e2e"):
        values = done[f"{metric}_s"].dropna().to_numpy()
        for p in (50, 95, 99):
            assert row[f"{metric}_p{p}_s"] == pytest.approx(np.percentile(values, p), rel=1e-12), (metric, p)
    assert row["tokens_per_s_per_request_p50"] == pytest.approx(
        np.median(done["output_tokens"] / done["e2e_s"]), rel=1e-12)
    tokens = done["output_tokens"].sum()
    assert row["cost_per_request_usd"] == pytest.approx(done["cost_usd"].sum() / len(done), rel=1e-9)
    assert row["cost_per_1m_output_tokens_usd"] == pytest.approx(done["cost_usd"].sum() / tokens * 1e6, rel=1e-9)
    assert row["marginal_cost_per_request_usd"] == pytest.approx(done["marginal_cost_usd"].mean(), rel=1e-9)
    assert row["energy_per_output_token_j"] == pytest.approx(done["energy_j"].sum() / tokens, rel=1e-9)
    assert row["output_tokens_per_s"] == pytest.approx(
        req.loc[(req["status"] == "completed") & (req["done_at_s"] >= 20.0) & (req["done_at_s"] < 200.0),
                "output_tokens"].sum() / 180.0, rel=1e-12)
