"""Trace paths resolve from the file that names them (scenario, plan, a sweep's inline
base), as a sweep's ``base:`` already did; a path that only exists relative to the
current directory (the old rule) still loads."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from sim.scenario import load_scenario
from sim.studies.sweep_spec import load_sweep

ROWS = "".join(f"2023-11-16 18:00:{s:02d}.0,100,20\n" for s in range(0, 40, 2))


def write_trace(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + ROWS, encoding="utf-8")
    return path


def scenario(trace: str) -> dict:
    return {
        "name": "t", "seed": 1, "duration_s": 30, "warmup_s": 0, "drain_s": 30,
        "workloads": {"chat": {"kind": "autoregressive", "model": "llama-3-8b",
                               "arrival": {"kind": "trace", "path": trace, "format": "azure_csv"},
                               "slo": {"ttft_s": 1.0, "tpot_s": 0.1}}},
        "fleets": [{"name": "f", "pools": [{"name": "p", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1}]}],
    }


def test_scenario_trace_resolves_beside_the_file(tmp_path, monkeypatch):
    write_trace(tmp_path / "data" / "t.csv")
    path = tmp_path / "scenarios" / "s.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(scenario("../data/t.csv")), encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    loaded = load_scenario(path)
    resolved = Path(loaded.workloads["chat"].arrival.path)
    assert resolved.resolve() == (tmp_path / "data" / "t.csv").resolve()


def test_a_path_relative_to_the_working_directory_still_loads(tmp_path, monkeypatch):
    write_trace(tmp_path / "cwd" / "traces" / "t.csv")
    path = tmp_path / "scenarios" / "s.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(scenario("traces/t.csv")), encoding="utf-8")
    monkeypatch.chdir(tmp_path / "cwd")
    assert os.fspath(load_scenario(path).workloads["chat"].arrival.path) == "traces/t.csv"


def test_inline_sweep_base_resolves_from_the_sweep_file(tmp_path, monkeypatch):
    write_trace(tmp_path / "sweeps" / "t.csv")
    sweep = tmp_path / "sweeps" / "sw.yaml"
    sweep.write_text(yaml.safe_dump({"base": scenario("t.csv"), "grid": {"seed": [1, 2]}}), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    spec = load_sweep(sweep)
    assert Path(spec.base.workloads["chat"].arrival.path).resolve() == (tmp_path / "sweeps" / "t.csv").resolve()


def test_repository_trace_scenarios_name_shipped_or_optional_files():
    """azure-conv and mooncake-conv replay the copies shipped in traffic/data (a clone
    needs nothing beside it); genai-image names the optional dataset, never a path."""
    from traffic.datasets import OPTIONAL_DATASETS

    repo = Path(__file__).resolve().parents[2]
    expected = {"azure-conv.yaml": "AzureLLMInferenceTrace_conv.csv",
                "mooncake-conv.yaml": "mooncake_conversation_trace.jsonl"}
    for name, file in expected.items():
        data = yaml.safe_load((repo / "scenarios" / name).read_text(encoding="utf-8"))
        (path,) = [wl["arrival"]["path"] for wl in data["workloads"].values() if wl["arrival"].get("path")]
        resolved = os.path.normpath(repo / "scenarios" / path)
        assert resolved == os.path.normpath(repo / "traffic" / "data" / file) and Path(resolved).is_file()
    data = yaml.safe_load((repo / "scenarios" / "genai-image.yaml").read_text(encoding="utf-8"))
    assert data["workloads"]["image"]["arrival"]["path"] == "data:alibaba_genai_lora_request_trace.csv"
    assert "alibaba_genai_lora_request_trace.csv" in OPTIONAL_DATASETS


def test_plan_demand_trace_resolves_from_the_plan_file(tmp_path, monkeypatch):
    from sim.studies.planner import load_plan

    write_trace(tmp_path / "plans" / "t.csv")
    chat = scenario("t.csv")["workloads"]["chat"]
    plan = tmp_path / "plans" / "p.yaml"
    plan.write_text(yaml.safe_dump({"duration_s": 30, "demand": {"chat": chat},
                                    "candidates": [{"accelerator": "h100-sxm"}]}), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    spec = load_plan(plan)
    assert Path(spec.demand["chat"]["arrival"]["path"]).resolve() == (tmp_path / "plans" / "t.csv").resolve()
