"""dcsim tco: tables within COLUMNS, CSVs under --out, byte-identical reruns, and bad
input refused with exit 2 before any simulation."""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import yaml
from typer.testing import CliRunner

from sim.cli import app

SMALL = {
    "name": "small", "seed": 7, "duration_s": 30, "warmup_s": 5, "drain_s": 60,
    "workloads": {"chat": {"kind": "autoregressive", "model": "llama-3-8b", "arrival": {"kind": "poisson", "rate_per_s": 4},
                           "slo": {"ttft_s": 1.0, "tpot_s": 0.1}}},
    "fleets": [
        {"name": "h100", "pools": [{"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1}]},
        {"name": "b200", "pools": [{"name": "chat", "accelerator": "b200", "serves": ["chat"], "replicas": 1}]},
    ],
}


def write_scenario(path: Path, data: dict = SMALL) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_tco_prints_cash_flow_and_sensitivity_and_writes_csvs(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    scenario = write_scenario(tmp_path / "small.yaml")
    result = invoke("tco", scenario, "--out", tmp_path / "tco", "--horizon-years", "3")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "not charged: cost of capital, maintenance, staff" in out and "cash flow over 3 years" in out and "Sensitivity" in out
    assert max(len(line) for line in out.splitlines()) <= 120
    flow = pd.read_csv(tmp_path / "tco" / "cash_flow.csv")
    assert sorted(flow["fleet"].unique()) == ["b200", "h100"] and flow["year"].max() == 3
    sens = pd.read_csv(tmp_path / "tco" / "sensitivity.csv")
    assert set(sens["factor"]) == {"base", "accelerator price", "utilisation", "lifetime", "power price",
                                   "cost of capital"}
    again = invoke("tco", scenario, "--out", tmp_path / "tco2", "--horizon-years", "3")
    for name in ("cash_flow.csv", "npv.csv", "sensitivity.csv"):
        assert (tmp_path / "tco" / name).read_bytes() == (tmp_path / "tco2" / name).read_bytes(), name
    assert again.stdout == result.stdout


def test_tco_bad_input_exits_2_with_a_clear_message(tmp_path):
    scenario = write_scenario(tmp_path / "small.yaml")
    result = invoke("tco", scenario, "--horizon-years", "0", "--out", tmp_path / "never")
    assert result.exit_code == 2 and "--horizon-years must be a whole number of years from 1 to 50" in result.stderr
    assert not (tmp_path / "never").exists()
    for field, value, allowed in (("ownership", "lease", "'own', 'rent' or 'colocate'"),
                                  ("discount_rate_per_year", -0.1, "greater than or equal to 0"),
                                  ("colocation_usd_per_kw_month", -5, "greater than or equal to 0")):
        data = copy.deepcopy(SMALL)
        data["economics"] = {field: value}
        bad = write_scenario(tmp_path / f"bad-{field}.yaml", data)
        result = invoke("tco", bad)
        assert result.exit_code == 2, (field, result.output)
        assert f"economics.{field}" in result.stderr and allowed in result.stderr, result.stderr
        assert "Traceback" not in result.output
