"""The ``dcsim`` shell: run/catalog/schema output, result files, reruns, atomic writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from pandas.testing import assert_frame_equal
from typer.testing import CliRunner

import sim.results.export
from sim.cli import app
from sim.results.export import OUTPUT_FILES
from sim.results.progress import progress_bars
from sim.results.report_text import human, percent, seconds, usd

REPO = Path(__file__).resolve().parents[2]
CSV_FILES = ("pools.csv", "summary.csv", "fleets.csv")

SMALL = {
    "name": "small",
    "seed": 7,
    "duration_s": 30,
    "warmup_s": 5,
    "drain_s": 60,
    "workloads": {
        "chat": {
            "kind": "autoregressive",
            "model": "llama-3-8b",
            "arrival": {"kind": "poisson", "rate_per_s": 4},
            "slo": {"ttft_s": 1.0, "tpot_s": 0.1},
        }
    },
    "fleets": [
        {"name": "h100", "pools": [{"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1}]},
        {"name": "b200", "pools": [{"name": "chat", "accelerator": "b200", "serves": ["chat"], "replicas": 1}]},
    ],
}


def write_scenario(path: Path, data: dict = SMALL) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def run_subprocess(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "sim.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    return write_scenario(tmp_path / "small.yaml")


# --- run ----------------------------------------------------------------------------

def test_run_prints_a_table_per_workload_and_fleet(scenario_file):
    result = invoke("run", scenario_file, "--quiet")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "Workload chat (autoregressive)" in out
    assert "TTFT p50/p95/p99 (ms)" in out and "$/1M output tokens" in out
    assert "Fleet h100" in out and "Fleet b200" in out
    assert "1× h100-sxm" in out and "MFU" in out and "HBM mean/peak" in out
    assert result.stderr == ""  # --quiet: no notes, no progress


def test_run_out_writes_five_files_with_units_in_column_names(scenario_file, tmp_path):
    out = tmp_path / "results"
    result = invoke("run", scenario_file, "--out", out, "--quiet")
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted([*OUTPUT_FILES, ".dcsim"])  # the marker: dcsim wrote it
    requests = pd.read_parquet(out / "requests.parquet")
    assert {"arrival_at_s", "ttft_s", "e2e_s", "cost_usd"} <= set(requests.columns)
    summary = pd.read_csv(out / "summary.csv")
    assert {"ttft_p99_s", "e2e_p50_s", "throughput_rps", "cost_per_request_usd",
            "cost_per_1m_output_tokens_usd"} <= set(summary.columns)
    fleets = pd.read_csv(out / "fleets.csv")
    assert {"capex_usd", "opex_usd_per_month", "it_power_max_kw"} <= set(fleets.columns)
    pools = pd.read_csv(out / "pools.csv")
    assert {"capex_usd", "it_power_max_w", "busy_fraction", "mfu"} <= set(pools.columns)
    saved = yaml.safe_load((out / "scenario.yaml").read_text())
    assert saved["seed"] == 7 and saved["fleets"][0]["pools"][0]["max_batch"] == 256  # defaults resolved


def test_same_seed_gives_identical_files_and_stdout(scenario_file, tmp_path):
    """One run in a subprocess through the real entry point, one in-process: same bytes."""
    first = run_subprocess("run", scenario_file, "--out", tmp_path / "a")
    second = invoke("run", scenario_file, "--out", tmp_path / "b")
    assert first.returncode == 0, first.stderr
    assert second.exit_code == 0, second.stderr
    assert first.stdout == second.stdout
    for name in (*CSV_FILES, "scenario.yaml"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    a, b = (pd.read_parquet(tmp_path / d / "requests.parquet") for d in "ab")
    assert_frame_equal(a, b)
    assert (tmp_path / "a" / "requests.parquet").read_bytes() == (tmp_path / "b" / "requests.parquet").read_bytes()


def test_overrides_change_seed_and_duration(scenario_file, tmp_path):
    result = invoke("run", scenario_file, "--seed", "11", "--duration-s", "20", "--out", tmp_path / "o", "-q")
    assert result.exit_code == 0, result.stderr
    saved = yaml.safe_load((tmp_path / "o" / "scenario.yaml").read_text())
    assert (saved["seed"], saved["duration_s"]) == (11, 20.0)
    assert "seed 11" in result.stdout


def test_trace_option_replaces_trace_paths(tmp_path):
    trace = tmp_path / "trace.csv"
    rows = [f"2023-11-16 18:15:{s:02d}.0000000,{300 + 10 * s},{20 + s}" for s in range(0, 40, 2)]
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    data = json.loads(json.dumps(SMALL))
    data["workloads"]["chat"]["arrival"] = {"kind": "trace", "path": str(tmp_path / "absent.csv"), "format": "azure_csv"}
    scenario = write_scenario(tmp_path / "trace.yaml", data)
    assert invoke("run", scenario, "-q").exit_code == 2  # the YAML's own path is missing
    result = invoke("run", scenario, "--trace", trace, "--out", tmp_path / "o", "-q")
    assert result.exit_code == 0, result.stderr
    saved = yaml.safe_load((tmp_path / "o" / "scenario.yaml").read_text())
    assert saved["workloads"]["chat"]["arrival"]["path"] == str(trace)


def test_trace_option_without_trace_workload_is_a_user_error(scenario_file, tmp_path):
    result = invoke("run", scenario_file, "--trace", tmp_path / "t.csv")
    assert result.exit_code == 2
    assert "dcsim: error: --trace" in result.stderr


# --- atomic output ------------------------------------------------------------------

def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _leftovers(parent: Path, name: str) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}."))


def test_failed_write_leaves_previous_results_untouched(scenario_file, tmp_path, monkeypatch):
    out = tmp_path / "results"
    assert invoke("run", scenario_file, "--out", out, "--seed", "1", "-q").exit_code == 0
    before = _snapshot(out)
    real_write_csv = sim.results.export.write_csv

    def failing_write_csv(df, path):
        if path.name == "summary.csv":  # parquet and pools.csv are already written
            raise OSError(28, "No space left on device")
        real_write_csv(df, path)

    monkeypatch.setattr(sim.results.export, "write_csv", failing_write_csv)
    result = invoke("run", scenario_file, "--out", out, "--seed", "2", "-q")
    assert result.exit_code == 2 and "the disk is full" in result.stderr  # issue 11: a clear user error
    assert _snapshot(out) == before
    assert _leftovers(tmp_path, "results") == []


def test_failed_parquet_write_into_new_directory_leaves_nothing(scenario_file, tmp_path, monkeypatch):
    def failing_parquet(df, path):
        path.write_bytes(b"PAR1 half")
        raise RuntimeError("disk went away")

    monkeypatch.setattr(sim.results.export, "write_parquet", failing_parquet)
    result = invoke("run", scenario_file, "--out", tmp_path / "new", "-q")
    assert isinstance(result.exception, RuntimeError)
    assert not (tmp_path / "new").exists()
    assert _leftovers(tmp_path, "new") == []


def test_rerun_replaces_previous_results(scenario_file, tmp_path):
    out = tmp_path / "results"
    assert invoke("run", scenario_file, "--out", out, "--seed", "1", "-q").exit_code == 0
    assert invoke("run", scenario_file, "--out", out, "--seed", "2", "-q").exit_code == 0
    assert yaml.safe_load((out / "scenario.yaml").read_text())["seed"] == 2
    assert _leftovers(tmp_path, "results") == []


def test_refuses_to_replace_a_directory_with_other_files(scenario_file, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    result = invoke("run", scenario_file, "--out", out, "-q")
    assert result.exit_code == 2
    assert "notes.txt" in result.stderr and "dcsim: error:" in result.stderr
    assert (out / "notes.txt").read_text() == "keep me"


# --- catalog, schema, progress, formatting ------------------------------------------

def test_catalog_lists_accelerators_and_models():
    result = invoke("catalog")
    assert result.exit_code == 0, result.stderr
    assert "h100-sxm" in result.stdout and "llama-3-70b" in result.stdout
    assert "verified" in result.stdout and "Sources" in result.stdout
    only = invoke("catalog", "--kind", "accelerators")
    assert "h100-sxm" in only.stdout and "llama-3-70b" not in only.stdout


def test_schema_is_json_with_workloads_and_fleets():
    result = invoke("schema")
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert {"workloads", "fleets"} <= set(schema["properties"])


def test_progress_bar_is_silent_off_a_terminal(capsys):
    with progress_bars() as bars:
        callback = bars("h100", 90.0, 10)
        for t in range(0, 100, 10):
            callback(float(t), t // 10)
        bars("b200", 90.0, 10)(45.0, 5)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert bars.current is None


@pytest.mark.parametrize(
    "value, fn, expected",
    [
        (0.035, seconds, "35 ms"), (1.57, seconds, "1.6 s"), (0.71, percent, "71%"),
        (0.041, percent, "4.1%"), (1.2e6, usd, "$1.2M"), (151_245, usd, "$151k"),
        (0.000201, usd, "$0.00020"), (float("nan"), human, "—"),
    ],
)
def test_numbers_are_formatted_for_people(value, fn, expected):
    assert fn(value) == expected


def test_version_prints_the_pyproject_version():
    import tomllib

    expected = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"dcsim {expected}\n"


def test_export_reuses_the_headroom_run_planner_found(tmp_path, monkeypatch):
    import sim.studies.headroom

    scenario = write_scenario(tmp_path / "small.yaml")
    out, first = tmp_path / "out", tmp_path / "first.csv"
    result = CliRunner().invoke(app, ["run", str(scenario), "--out", str(out), "--planner", str(first), "-q"])
    assert result.exit_code == 0, result.output
    found = pd.read_csv(first)["headroom_load_multiplier"]
    assert found.notna().all()

    def no_simulation(*args, **kwargs):
        raise AssertionError("export simulated headroom again")

    monkeypatch.setattr(sim.studies.headroom, "headroom_multiplier", no_simulation)
    again = tmp_path / "again.csv"
    result = CliRunner().invoke(app, ["export", str(out), "--planner", str(again)])
    assert result.exit_code == 0, result.output
    # the same table, numbers equal to CSV precision (export rebuilds it from DIR's CSVs)
    assert_frame_equal(pd.read_csv(again), pd.read_csv(first), check_exact=False, rtol=1e-6)
