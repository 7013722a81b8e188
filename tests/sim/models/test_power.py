"""The power model against a published measurement and hand arithmetic."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from scenario_cases import make_scenario

from fleets.catalog_io import load_catalog
from sim.fleet_plan import resolve_fleet
from sim.models.economics import pool_costs
from sim.results.tables import run_scenario

DATA = Path(__file__).resolve().parents[3] / "fleets" / "data"
H100 = load_catalog().accelerator("h100-sxm")

# ML.ENERGY Leaderboard v3.0 (Dec 2025, vLLM 0.11.1): Llama 3.1 8B on one H100 at batch
# size 64 uses 0.12 J of GPU energy per output token ("LLM Inference Energy: A
# Longitudinal Analysis", ml.energy/blog/measurement/energy/
# llm-inference-energy-a-longitudinal-analysis). v2.0 measured 0.20 J on the same model,
# GPU and batch with older software, so the published figure itself moved by 40%.
ML_ENERGY_J_PER_TOKEN = 0.12
# Stated tolerance: within 30%. The simulated value (~0.088 J at 6.5 req/s, a mean decode
# batch of ~51) is below the measurement mostly because the roofline decode is faster
# than vLLM (the H100's eta_m is fitted on TensorRT-LLM's long-output rows); the power
# drawn (~400 W) sits between the 300 W (batch 1) and 600 W (batch 128) H100 anchors. The
# rate is chosen so the decode batch sits just under the cap of 64 with the calibrated
# H100 efficiencies (issue 24's fit; 5.5 req/s under the earlier one).
TOLERANCE = 0.30


def llama8b_on_one_h100(rate_per_s: float, **top):
    # Text Conversation in ML.ENERGY v3 averages 717 output tokens; batch cap 64
    return make_scenario(
        {"chat": {"kind": "autoregressive", "model": "llama-3-8b", "arrival": {"kind": "poisson", "rate_per_s": rate_per_s},
                  "prompt_tokens": {"kind": "constant", "value": 300},
                  "output_tokens": {"kind": "constant", "value": 700}}},
        [{"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1, "tp": 1,
          "precision": "bf16", "max_batch": 64}],
        **{"duration_s": 300.0, "warmup_s": 60.0, **top},
    )


def test_j_per_token_reproduces_ml_energy_llama_8b_h100_batch_64():
    results = run_scenario(llama8b_on_one_h100(6.5))
    pool, row = results.pools.iloc[0], results.summary.iloc[0]
    assert not row["unstable"]
    mean_batch = row["output_tokens_per_s"] * row["tpot_p50_s"]  # Little's law on the decode batch
    assert 48 <= mean_batch <= 64
    gpu_j_per_token = pool["accelerator_power_avg_w"] / row["output_tokens_per_s"]
    assert abs(gpu_j_per_token - ML_ENERGY_J_PER_TOKEN) / ML_ENERGY_J_PER_TOKEN < TOLERANCE
    # memory-bound decode: below TDP, above the batch-1 anchor of ~300 W
    assert 300 < pool["accelerator_power_avg_w"] < 0.8 * H100.tdp_w


def test_an_idle_pool_draws_idle_power_from_the_csv():
    row = pd.read_csv(DATA / "power.csv").set_index("key").loc["h100-sxm"]
    scenario = llama8b_on_one_h100(1.0)
    (pool,) = resolve_fleet(scenario, 0).pools
    idle = pool_costs(pool, scenario.economics, busy_fraction=0.0, compute_activity=0.5, memory_activity=0.5)
    assert idle["accelerator_power_avg_w"] == pytest.approx(row["idle_w"])
    # alone in the fleet, the pool holds a whole node (7 empty slots): all of the host's idle draw
    assert idle["it_power_avg_w"] == pytest.approx(row["idle_w"] + H100.node_overhead_w * row["host_idle_fraction"])
    full = pool_costs(pool, scenario.economics, busy_fraction=1.0)
    assert full["it_power_avg_w"] == pytest.approx(H100.tdp_w + H100.node_overhead_w)
    # memory-bound decode at the bandwidth roofline: idle + w_m x (TDP - idle)
    decode = pool_costs(pool, scenario.economics, busy_fraction=1.0, compute_activity=0.0, memory_activity=1.0)
    w_m = row["memory_bound_dynamic_fraction"]
    assert decode["accelerator_power_avg_w"] == pytest.approx(row["idle_w"] + w_m * (H100.tdp_w - row["idle_w"]))


def test_energy_per_token_is_the_pool_energy_over_its_tokens():
    results = run_scenario(llama8b_on_one_h100(2.0))
    req, pool, row = results.requests, results.pools.iloc[0], results.summary.iloc[0]
    done = req[req["measured"] & (req["status"] == "completed")]
    assert row["energy_per_output_token_j"] == pytest.approx(done["energy_j"].sum() / done["output_tokens"].sum())
    assert row["energy_per_request_j"] == pytest.approx(done["energy_j"].mean())
    fleet = results.fleets.iloc[0]
    assert fleet["it_energy_kwh_per_day"] == pytest.approx(pool["it_power_avg_w"] * 24 / 1e3)
    assert fleet["facility_power_max_mw"] == pytest.approx((8 * 700 + 4600) * 1.56 / 1e6)
    assert fleet["output_tokens_per_s_per_mw"] == pytest.approx(row["output_tokens_per_s"] / fleet["facility_power_max_mw"])


def test_prefill_draws_near_tdp_and_decode_well_below():
    """Splitwise (ISCA 2024) and POLCA (ASPLOS 2024): prompt phases run near TDP, token
    phases well below it."""
    def busy_power(prompt, output, rate):
        sc = make_scenario(
            {"chat": {"kind": "autoregressive", "model": "llama-3-8b", "arrival": {"kind": "poisson", "rate_per_s": rate},
                      "prompt_tokens": {"kind": "constant", "value": prompt},
                      "output_tokens": {"kind": "constant", "value": output}}},
            [{"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1, "tp": 1,
              "precision": "bf16", "max_batch": 64}],
            duration_s=60.0, warmup_s=10.0)
        pool = run_scenario(sc).pools.iloc[0]
        idle_w = pd.read_csv(DATA / "power.csv").set_index("key").loc["h100-sxm", "idle_w"]
        b = pool["busy_fraction"]  # mean power while busy: idle + (average - idle) / b
        return idle_w + (pool["accelerator_power_avg_w"] - idle_w) / b, b

    prefill_w, busy = busy_power(prompt=4000, output=1, rate=20.0)
    assert busy > 0.5 and prefill_w > 0.9 * H100.tdp_w
    decode_w, busy = busy_power(prompt=50, output=500, rate=1.0)
    assert busy > 0.5 and decode_w < 0.6 * H100.tdp_w


def test_a_type_without_a_power_row_scales_the_h100_idle_fraction_by_tdp():
    """MI300X has no power.csv row: its idle power is h100-sxm idle / h100-sxm TDP × its
    own TDP, every number read here from the raw CSVs (so a TDP edit cannot drift)."""
    import csv

    from sim.models.power import coefficients

    tdp = {r["key"]: float(r["tdp_w"]) for r in csv.DictReader(open(DATA / "accelerators.csv", newline=""))}
    power = {r["key"]: r for r in csv.DictReader(open(DATA / "power.csv", newline=""))}
    assert "mi300x" not in power
    coeff = coefficients(load_catalog().accelerator("mi300x"))
    assert coeff.idle_w == pytest.approx(float(power["h100-sxm"]["idle_w"]) / tdp["h100-sxm"] * tdp["mi300x"])
    assert coeff.status == "assumed"
