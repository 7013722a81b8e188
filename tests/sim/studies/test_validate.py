"""`dcsim validate` on the shared MLPerf file: the model's error on points it was not
fitted to stays within 20 % (median |error|) for Llama-2-70B Offline and SDXL Offline.

Held-out points exist for both (H100, H200 and MI300X for Llama-2-70B; H100 and H200 for
SDXL), pooled over accelerators and checked per accelerator too."""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from sim.studies.calibration import assign_groups, read_points
from sim.cli import app
from shared_data import SHARED_DATA, require_file

CALIBRATION = SHARED_DATA / "reference" / "calibration_points.csv"
LIMIT_PCT = 20.0


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    data = require_file(CALIBRATION)
    out = tmp_path_factory.mktemp("validate")
    result = CliRunner().invoke(app, ["validate", "--data", str(data), "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    return out, result.output


@pytest.mark.slow
@pytest.mark.parametrize("model", ["llama-2-70b", "sdxl"])
def test_held_out_offline_error_within_20_percent(validated, model):
    out, _ = validated
    table = pd.read_csv(out / "validation.csv")
    held = table[(table["group"] == "held-out") & (table["model"] == model) & (table["scenario"] == "Offline")]
    assert len(held) >= 3, f"no held-out {model} Offline points to check"
    assert held["error_pct"].abs().median() <= LIMIT_PCT
    for accelerator, part in held.groupby("accelerator"):
        assert part["error_pct"].abs().median() <= LIMIT_PCT, accelerator


@pytest.mark.slow
def test_outputs_name_their_points_factors_and_reasons(validated):
    out, printed = validated
    for name in ("validation.csv", "fitted_factors.csv", "unexpressed.csv", "summary.csv", "validation.png"):
        assert (out / name).stat().st_size > 0
    factors = pd.read_csv(out / "fitted_factors.csv")
    assert factors["compute_efficiency"].between(0, 1, inclusive="right").all()
    assert factors["bandwidth_efficiency"].between(0, 1, inclusive="right").all()
    assert factors["points"].str.len().gt(0).all()
    unexpressed = pd.read_csv(out / "unexpressed.csv")
    assert unexpressed["reason"].str.len().gt(0).all()
    assert "held-out points" in printed and "calibration points" in printed


def test_reading_maps_names_lists_reasons_and_splits_groups(tmp_path):
    src = "github.com/mlcommons/inference_results_v4.1 closed/X/results/{}/perf @abc"
    rows = [
        ("A/8xH100", "NVIDIA H100-SXM-80GB", "8", "llama2-70b-99", "Offline", "tokens_per_s", "24000", "MLPerf v4.1 closed"),
        ("A/8xH100", "NVIDIA H100-SXM-80GB", "8", "llama2-70b-99.9", "Offline", "tokens_per_s", "24000", "MLPerf v4.1 closed"),
        ("B/8xH100", "NVIDIA H100-SXM-80GB", "8", "llama2-70b-99", "Offline", "tokens_per_s", "25000", "MLPerf v4.1 closed"),
        ("B/8xH100", "NVIDIA H100-SXM-80GB", "8", "llama2-70b-99", "Server", "completed_tokens_per_s", "21000", "MLPerf v4.1 closed"),
        ("C/4xL40S", "NVIDIA L40S", "4", "stable-diffusion-xl", "Offline", "samples_per_s", "2", "MLPerf v4.1 closed"),
        ("D/1xH200", "NVIDIA H200-SXM-141GB", "1", "gptj-99", "Offline", "tokens_per_s", "9", "MLPerf v4.1 closed"),
    ]
    lines = ["system,accelerator,count,model,scenario,metric,value,unit,precision,software,source,notes"]
    lines += [f"{s},{a},{c},{m},{sc},{me},{v},u,,sw,{src.format(s)},{n}" for s, a, c, m, sc, me, v, n in rows]
    path = tmp_path / "points.csv"
    path.write_text("\n".join(lines) + "\n")
    points, unexpressed = read_points(path)
    assert [(p.system, p.accelerator, p.model, p.scenario, p.precision) for p in points] == [
        ("A/8xH100", "h100-sxm", "llama-2-70b", "Offline", "fp8"),  # -99.9 duplicate dropped
        ("B/8xH100", "h100-sxm", "llama-2-70b", "Offline", "fp8"),
        ("B/8xH100", "h100-sxm", "llama-2-70b", "Server", "fp8"),
    ]
    reasons = dict(zip(unexpressed["system"], unexpressed["reason"]))
    assert reasons["C/4xL40S"].startswith("unknown accelerator")
    assert reasons["D/1xH200"].startswith("missing model")
    groups = assign_groups(points)
    assert [groups[p.point] for p in points] == ["calibration", "held-out", "held-out"]
