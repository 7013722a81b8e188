"""A file given to the wrong command says which command reads it, and an unknown field
lists the valid ones at its place (names taken from the schema classes here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.cli import app
from sim.scenario import Scenario
from sim.workloads.autoregressive import AutoregressiveWorkload
from sim.studies.planner import PlanSpec

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"


def _names(model) -> list[str]:
    return sorted(f.alias or n for n, f in model.model_fields.items())


@pytest.mark.parametrize("command, path, kind, hint", [
    (["run"], "sweep-mix.yaml", "sweep", "use dcsim sweep"),
    (["plan"], "sweep-mix.yaml", "sweep", "use dcsim sweep"),
    (["plan"], "default.yaml", "scenario", "use dcsim run"),
    (["run"], "plan-example.yaml", "plan", "use dcsim plan"),
    (["sweep", "--out", "OUT"], "default.yaml", "scenario", "use dcsim run"),
    (["sweep", "--out", "OUT"], "plan-example.yaml", "plan", "use dcsim plan"),
])
def test_wrong_command_names_the_right_one(tmp_path, command, path, kind, hint):
    args = [a if a != "OUT" else str(tmp_path / "out") for a in command]
    result = CliRunner().invoke(app, [args[0], str(SCENARIOS / path), *args[1:]])
    assert result.exit_code == 2
    first = result.output.strip().splitlines()
    assert len(first) == 1, result.output  # one line, no schema dump
    assert f"this is a {kind} file" in first[0] and hint in first[0]
    assert not (tmp_path / "out").exists()


def test_unknown_fields_list_the_valid_ones(tmp_path):
    text = (SCENARIOS / "default.yaml").read_text(encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("\nseed:", "\nsede: 1\nseed:", 1).replace("\n  chat:\n", "\n  chat:\n    colour: red\n", 1),
                   encoding="utf-8")
    result = CliRunner().invoke(app, ["run", str(bad)])
    assert result.exit_code == 2
    lines = result.output.splitlines()
    top = next(line for line in lines if "sede:" in line)
    assert top.endswith("valid fields here: " + ", ".join(_names(Scenario)))
    chat = next(line for line in lines if "workloads.chat.colour" in line)
    assert chat.endswith("valid fields here: " + ", ".join(_names(AutoregressiveWorkload)))


def test_unknown_plan_field_lists_the_plan_fields(tmp_path):
    bad = tmp_path / "plan.yaml"
    bad.write_text((SCENARIOS / "plan-example.yaml").read_text(encoding="utf-8") + "\nbudget_usd: 5\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["plan", str(bad)])
    assert result.exit_code == 2
    line = next(line for line in result.output.splitlines() if "budget_usd" in line)
    assert line.endswith("valid fields here: " + ", ".join(_names(PlanSpec)))
