"""Planner CSV from `run --planner`, `export DIR` (run and sweep directories) and
`plan`: read back with pandas, documented columns, units and arithmetic; the sweep and
plan files in scenarios/ run (shortened)."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml
from sweep_cases import BASE, REPO, run_cli, write_sweep

from sim.models.economics import HOURS_PER_YEAR

FIXED = ["fleet", "racks", "nodes", "accelerators_total", "accelerators_b200", "accelerators_h100_sxm",
         "it_power_max_kw", "facility_power_max_mw", "capex_usd", "opex_usd_per_month", "cost_usd_per_hour",
         "depreciation_years", "tco_usd", "chat_cost_per_request_usd", "chat_cost_per_1m_output_tokens_usd",
         "chat_slo_attainment", "chat_slo_target", "headroom_load_multiplier", "headroom_pct"]


def check_planner(df: pd.DataFrame, pue: float = 1.56) -> None:
    assert FIXED == [c for c in df.columns if c in FIXED]
    for col in FIXED[1:]:
        assert pd.api.types.is_numeric_dtype(df[col]), col
    assert (df["accelerators_total"] == df["accelerators_b200"] + df["accelerators_h100_sxm"]).all()
    assert df["facility_power_max_mw"].tolist() == pytest.approx((df["it_power_max_kw"] * pue / 1e3).tolist())
    tco = df["capex_usd"] + df["opex_usd_per_month"] * 12 * df["depreciation_years"]
    assert df["tco_usd"].tolist() == pytest.approx(tco.tolist())
    assert ((df["chat_slo_attainment"] >= 0) & (df["chat_slo_attainment"] <= 1)).all()


@pytest.mark.slow  # ~3 s: in make test, not the one-minute loop
def test_run_planner_and_export_agree(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(BASE), encoding="utf-8")
    out, direct, exported = tmp_path / "out", tmp_path / "direct.csv", tmp_path / "exported.csv"
    done = run_cli("run", scenario, "--out", out, "--planner", direct, "-q")
    assert done.returncode == 0, done.stderr
    df = pd.read_csv(direct)
    check_planner(df)
    assert df["fleet"].tolist() == ["h100", "b200"]
    assert df["accelerators_h100_sxm"].tolist() == [1, 0]
    assert (df["headroom_load_multiplier"] > 1).all()  # 4 req/s of an 8B model: lots of room
    assert (df["headroom_pct"] == (df["headroom_load_multiplier"] - 1) * 100).all()
    done = run_cli("export", out, "--planner", exported)
    assert done.returncode == 0, done.stderr
    pd.testing.assert_frame_equal(pd.read_csv(exported), df, rtol=1e-8)
    assert "$" not in direct.read_text()


@pytest.mark.slow  # a sweep, then its export, through the CLI
def test_export_sweep_dir_one_row_per_point_and_fleet(tmp_path):
    sweep = write_sweep(tmp_path, {"economics.pue": [1.2, 1.5]}, seeds=1)
    out = tmp_path / "out"
    assert run_cli("sweep", sweep, "--out", out, "--workers", "1").returncode == 0
    csv = tmp_path / "planner.csv"
    done = run_cli("export", out, "--planner", csv, "--no-headroom")
    assert done.returncode == 0, done.stderr
    df = pd.read_csv(csv)
    assert len(df) == 4 and df.columns[:4].tolist() == ["point_id", "economics.pue", "seed", "fleet"]
    for pue, g in df.groupby("economics.pue"):
        check_planner(g, pue)
    assert df["headroom_load_multiplier"].isna().all()


def test_export_rejects_a_foreign_directory(tmp_path):
    done = run_cli("export", tmp_path, "--planner", tmp_path / "x.csv")
    assert done.returncode == 2 and "not a dcsim result directory" in done.stderr


@pytest.mark.slow  # a shipped sweep file through the CLI
def test_sweep_mix_file_runs_shortened(tmp_path):
    data = yaml.safe_load((REPO / "scenarios" / "sweep-mix.yaml").read_text())
    assert len(data["grid"]) == 2 and data["seeds"] == 2  # 4 x 2 grid x 3 fleets x 2 seeds = 48
    data["base"] = str(REPO / "scenarios" / data["base"])
    data["set"].update(duration_s=15, warmup_s=3, drain_s=30)
    data["grid"] = {k: v[:1] for k, v in data["grid"].items()}
    data["seeds"] = 1
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump(data), encoding="utf-8")
    done = run_cli("sweep", sweep, "--out", tmp_path / "out", "--workers", "1",
                   "--planner", tmp_path / "p.csv", "--no-headroom")
    assert done.returncode == 0, done.stderr
    assert len(pd.read_csv(tmp_path / "p.csv")) == 3


@pytest.mark.slow  # a two-quarter plan search through the CLI
def test_plan_example_runs_shortened(tmp_path):
    data = yaml.safe_load((REPO / "scenarios" / "plan-example.yaml").read_text())
    data.update(duration_s=30, warmup_s=5, drain_s=60, headroom=False)
    data["search"]["seeds"] = 1
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(data), encoding="utf-8")
    done = run_cli("plan", plan, "--out", tmp_path / "out", "--planner", tmp_path / "p.csv")
    assert done.returncode == 0, done.stderr
    assert "Quarter 2026Q1" in done.stdout and "single type" in done.stdout
    df = pd.read_csv(tmp_path / "out" / "plan.csv")
    assert set(df["quarter"]) == {"2026Q1", "2026Q2"} and "plan" in set(df["fleet"])
    assert {"full_load_cost_usd_per_hour", "meets_slos", "capex_usd", "tco_usd"} <= set(df.columns)
    assert (tmp_path / "out" / "scenario-2026Q2.yaml").exists()
    assert run_cli("run", tmp_path / "out" / "scenario-2026Q1.yaml", "-q", "--duration-s", "10").returncode == 0
    assert HOURS_PER_YEAR == 8766.0
