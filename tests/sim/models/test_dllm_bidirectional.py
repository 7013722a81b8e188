"""A bidirectional diffusion LM (LLaDA) is charged full n² prompt attention, not the
causal n²/2 of an autoregressive prefill (issue 12, item 8).  Hand arithmetic from the
raw models.csv row."""

from __future__ import annotations

import csv
from pathlib import Path
from types import SimpleNamespace

import pytest

from fleets.catalog_io import load_catalog
from sim.engine.request import Request
from sim.workloads.diffusion_lm import diffusion_lm_phases
from sim.workloads.phases import FLOPS
from sim.models.perf import PerfModel

ROOT = Path(__file__).resolve().parents[3]
ROW = next(r for r in csv.DictReader(open(ROOT / "fleets" / "data" / "models.csv", newline="")) if r["key"] == "llada-8b")


@pytest.mark.parametrize("prompt", [1, 300, 4000])
def test_prompt_prefill_has_full_bidirectional_attention(prompt):
    cat = load_catalog()
    perf = PerfModel(cat.accelerator("h100-sxm"), cat.model("llada-8b"), "bf16")
    phases, _ = diffusion_lm_phases(SimpleNamespace(block_tokens=256), perf,
                                    Request(id=0, workload=0, arrival_at_s=0.0, prompt_tokens=prompt,
                                            output_tokens=256, steps=8))
    layers, heads, head_dim = (int(ROW[k]) for k in ("layers", "heads", "head_dim"))
    expected = 2 * float(ROW["active_params_b"]) * 1e9 * prompt + 4 * layers * heads * head_dim * prompt ** 2
    assert phases[0][FLOPS] == pytest.approx(expected)


def test_default_steps_follow_the_catalog():
    """A diffusion-LM workload without ``steps`` draws the model's catalog default_steps."""
    from scenario_cases import make_scenario

    from sim.engine.demand import workload_demand

    wl = {"d": {"kind": "diffusion_lm", "model": "llada-8b", "arrival": {"kind": "poisson", "rate_per_s": 5.0}}}
    sc = make_scenario(wl, [{"name": "p", "accelerator": "h100-sxm", "serves": ["d"], "replicas": 1,
                             "precision": "bf16"}], duration_s=10)
    steps = workload_demand(sc, "d").steps
    assert len(steps) > 0 and (steps == int(ROW["default_steps"])).all()
