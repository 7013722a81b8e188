"""The planner's horizon: fitted demand is planned N weeks ahead."""

from __future__ import annotations

import pytest

from sim.studies.planner import PlanSpec, _rate, scaled_demand
from traffic.demand_fit import WEEK_S, FittedArrivals


def spec(horizon_weeks):
    return PlanSpec.model_validate({
        "duration_s": 600, "horizon_weeks": horizon_weeks,
        "demand": {
            "image": {"kind": "image_diffusion", "model": "sdxl",
                      "arrival": {"kind": "fitted", "rate_per_s": 0.5, "growth_per_week": 1.25}},
            "chat": {"kind": "autoregressive", "model": "llama-3-8b", "arrival": {"kind": "poisson", "rate_per_s": 3}},
        },
        "candidates": [{"accelerator": "h100-sxm"}],
    })


def test_horizon_moves_fitted_arrivals_only():
    demand = scaled_demand(spec(4), None)
    assert demand["image"]["arrival"]["start_s"] == 4 * WEEK_S
    assert demand["chat"]["arrival"] == {"kind": "poisson", "rate_per_s": 3}


def test_planned_rate_grows_with_the_horizon():
    # mean over the first week of the run, growth 1.25/week from week 4: 0.5·1.25⁴·(1.25 − 1)/ln 1.25
    rate = _rate(scaled_demand(spec(4), None)["image"])
    assert rate == pytest.approx(0.5 * 1.25**4 * 0.25 / __import__("math").log(1.25), rel=1e-3)
    assert _rate(scaled_demand(spec(None), None)["image"]) == pytest.approx(rate / 1.25**4)
    assert FittedArrivals.model_validate(scaled_demand(spec(2), None)["image"]["arrival"]).start_s == 2 * WEEK_S


def test_cli_plans_the_genai_preset_weeks_ahead(monkeypatch):
    """`dcsim plan --horizon-weeks N` plans the fitted image demand at week N."""
    from pathlib import Path

    from typer.testing import CliRunner

    from sim.cli import app

    monkeypatch.chdir(Path(__file__).resolve().parents[3])
    result = CliRunner().invoke(app, ["plan", "scenarios/plan-genai-horizon.yaml", "--horizon-weeks", "2", "-q"])
    assert result.exit_code == 0, result.output
    assert "Quarter week2" in result.output
    preset = FittedArrivals.model_validate({"preset": "genai_image", "start_s": 169_200 + 2 * WEEK_S})
    assert f"{preset.mean_rate_per_s:.3g}" in result.output
