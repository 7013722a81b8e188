"""One validated scenario (issue 23): a scenario derived from another is its document
changed and validated once (:mod:`sim.overrides`), so overriding a field with its own
value changes nothing, on every path that derives scenarios.

The truth here is the original scenario itself: a derived scenario must have the same
resolved fields (``full``) and draw the very same demand (arrival instants, prompt and
output tokens, steps, images, CFG), array for array. Before the fix, re-validating a
dump marked every field as set, and a trace replay's own lengths and steps were replaced
by the defaults (Mooncake prompts 6758, 7322, 7236 became 185, 772, 686).

The hypothesis tests draw a shipped scenario and any field of it (leaves and whole
sub-mappings); the slow test runs the CLI on every shipped trace scenario and compares
the output files byte for byte.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.engine.demand import generate_demand
from sim.overrides import document, full, keep_fleet, override
from sim.scenario import load_scenario, parse_scenario, scenario_to_yaml

REPO = Path(__file__).resolve().parents[2]
SCENARIO_DIR = REPO / "scenarios"
RUN_SCENARIOS = sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml")
                       if "workloads" in (yaml.safe_load(p.read_text()) or {}))
OPTIONAL = {"genai-image"}  # replays the optional Alibaba trace (DCSIM_DATA_DIR)
TRACE_SCENARIOS = ("azure-conv", "mooncake-conv", "genai-image")
HEAVY = {"azure-autoscale", "fleet-failures"}  # a week / two days of demand: drawn in the slow set
PER_SCENARIO = [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n for n in RUN_SCENARIOS]


def available(name: str) -> bool:
    if name not in OPTIONAL:
        return True
    from data_files import GENAI_TRACE
    from traffic.datasets import OPTIONAL_DATASETS, check, data_dir

    return check(OPTIONAL_DATASETS[GENAI_TRACE], data_dir()[0]) is None


def require(name: str) -> None:
    """Skip (fail under CI) a scenario whose optional data is missing."""
    if name in OPTIONAL:
        from data_files import GENAI_TRACE, optional_file

        optional_file(GENAI_TRACE)


@functools.cache
def scenario(name: str):
    return load_scenario(SCENARIO_DIR / f"{name}.yaml")


@functools.cache
def demand_of(name: str) -> dict:
    return generate_demand(scenario(name))


def assert_same_demand(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for name in a:
        for field in ("arrival_s", "prompt_tokens", "output_tokens", "steps", "service_s", "images", "cfg", "draws"):
            x, y = getattr(a[name], field), getattr(b[name], field)
            assert (x is None) == (y is None), (name, field)
            if x is not None:
                np.testing.assert_array_equal(x, y, err_msg=f"{name}.{field}")


def assert_unchanged(name: str, derived, fleet: str | None = None) -> None:
    """``derived`` is scenario ``name`` (only ``fleet`` when given): same resolved fields,
    same demand."""
    expected = full(scenario(name))
    if fleet is not None:
        keep_fleet(expected, fleet)
    assert full(derived) == expected
    assert_same_demand(generate_demand(derived), demand_of(name))


def fields_of(node, path=()) -> list[tuple[tuple, object]]:
    """(path, value) of every field below ``node``: leaves and whole mappings/lists."""
    out = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        out.append((path + (key,), value))
        out += fields_of(value, path + (key,))
    return out


def names() -> list[str]:
    return [n for n in RUN_SCENARIOS if available(n)]


@st.composite
def own_field(draw):
    """(scenario name, path, its own value) over every shipped scenario and field."""
    name = draw(st.sampled_from(names()))
    path, value = draw(st.sampled_from(fields_of(full(scenario(name)))))
    return name, path, value


PROPERTY = settings(max_examples=52, suppress_health_check=list(HealthCheck))
SMOKE = settings(max_examples=8, suppress_health_check=list(HealthCheck))
"""The fast loop draws SMOKE examples of each property; make test draws PROPERTY more."""


# --- the document ------------------------------------------------------------------

@pytest.mark.parametrize("name", PER_SCENARIO)
def test_document_and_full_dump_validate_back_to_the_same_scenario(name):
    """Both the document and the full dump (the saved scenario.yaml) rebuild the scenario:
    same fields, same fields set, same demand."""
    require(name)
    original = scenario(name)
    for data in (document(original), full(original), yaml.safe_load(scenario_to_yaml(original))):
        again = parse_scenario(data, name)
        assert full(again) == full(original)
        assert_same_demand(generate_demand(again), demand_of(name))
    assert document(parse_scenario(document(original), name)) == document(original)


def test_no_behaviour_depends_on_which_fields_were_given():
    """The root cause of the trace bug: code that asked ``model_fields_set``. A default
    that depends on other fields must be a value (None: the trace's own)."""
    for package in ("sim", "traffic", "fleets"):
        for path in (REPO / package).rglob("*.py"):
            assert "model_fields_set" not in path.read_text(encoding="utf-8"), path


def test_trace_replay_lengths_are_the_rows_own():
    """Hand check on the Mooncake file: the first three replayed prompts are its first
    three rows' input_length (read here from the raw JSON lines), with any override."""
    rows = [json.loads(line) for line in (REPO / "traffic/data/mooncake_conversation_trace.jsonl").open()][:3]
    expected = [row["input_length"] for row in rows]
    base = scenario("mooncake-conv")
    for derived in (base, override(base, [("seed", base.seed)], "t"), override(base, [("duration_s", 120.0)], "t")):
        assert generate_demand(derived)["chat"].prompt_tokens[:3].tolist() == expected
    assert base.workloads["chat"].prompt_tokens is None


# --- every override path, property-tested ---------------------------------------------

def check_override_with_own_value(case):
    """sim.overrides.override (the CLI, plans and headroom use it): any field, its own value."""
    name, path, value = case
    assert_unchanged(name, override(scenario(name), [(path, value)], "test"))


@SMOKE
@given(case=own_field())
def test_override_with_own_value_changes_nothing_smoke(case):
    check_override_with_own_value(case)


@pytest.mark.slow
@PROPERTY
@given(case=own_field())
def test_override_with_own_value_changes_nothing(case):
    check_override_with_own_value(case)


@SMOKE
@given(case=own_field())
def test_sweep_value_equal_to_the_base_changes_nothing_smoke(case):
    check_sweep_value_equal_to_the_base(case)


@pytest.mark.slow
@PROPERTY
@given(case=own_field())
def test_sweep_value_equal_to_the_base_changes_nothing(case):
    check_sweep_value_equal_to_the_base(case)


def check_sweep_value_equal_to_the_base(case):
    """A sweep point (grid value = the base's own, the base's seed): the point's scenario
    is the base with only the point's fleet."""
    from sim.studies.sweep import PointTask, point_scenario
    from sim.studies.sweep_spec import Point

    name, path, value = case
    base = scenario(name)
    if any(isinstance(p, str) and "." in p for p in path):
        return  # a dotted grid path cannot name a key holding a dot
    fleet = base.fleets[-1].name
    point = Point("p", ((".".join(map(str, path)), value),), fleet, base.seed)
    derived = point_scenario(PointTask(point, document(base), name, resolved=full(base)))
    assert_unchanged(name, derived, fleet)


@pytest.mark.parametrize("name", PER_SCENARIO)
def test_cli_overrides_with_own_values_change_nothing(name):
    from sim.cli import apply_overrides

    require(name)
    base = scenario(name)
    traces = {w.arrival.path for w in base.workloads.values() if w.arrival.kind == "trace"}
    assert_unchanged(name, apply_overrides(base, name, None, base.seed, base.duration_s))
    if len(traces) == 1:  # --trace replaces every replay's file: its own only when they share one
        (trace,) = traces
        assert_unchanged(name, apply_overrides(base, name, trace, None, None))


@pytest.mark.parametrize("name", PER_SCENARIO)
def test_one_cell_and_unit_headroom_are_the_fleet_itself(name):
    """``--cells 1``'s cell scenario and headroom's load × 1 are the fleet as in the
    whole run, with the same demand."""
    from sim.studies.cells import cell_scenario
    from sim.studies.headroom import scaled_scenario

    require(name)
    base = scenario(name)
    for fleet in base.fleets:
        assert_unchanged(name, cell_scenario(base, fleet.name, 1), fleet.name)
        assert_unchanged(name, scaled_scenario(base, fleet.name, 1.0), fleet.name)


@pytest.mark.parametrize("name", PER_SCENARIO)
def test_untouched_dashboard_runs_the_file_as_written(name):
    """The dashboard's sidebar at its initial values (every edit applied as shown) gives
    the scenario of the file (its duration capped for the dashboard)."""
    from fleets.catalog_io import load_catalog
    from sim import dashboard as ds

    require(name)
    data = ds.for_dashboard(document(scenario(name)))
    initial = ds.initial_values(data, load_catalog())
    edited, errors = ds.validate(data, initial, initial, load_catalog())
    assert errors == {}
    capped = parse_scenario(data, name)
    assert full(edited) == full(capped)
    assert_same_demand(generate_demand(edited), generate_demand(capped))


def test_plan_seed_override_keeps_the_scenario():
    """The planner re-seeds candidate scenarios through ``override``: the plan's own seed
    changes nothing (plan-example's candidate for one H100 pool)."""
    from sim.studies.planner import load_plan, scenario_data

    spec = load_plan(SCENARIO_DIR / "plan-example.yaml")
    sc = scenario_data(spec, {"chat": spec.demand["chat"]}, {"chat": {"h100-sxm": 2}}, spec.seed, "plan")
    again = override(sc, [("seed", spec.seed)], "plan")
    assert full(again) == full(sc)
    assert_same_demand(generate_demand(again), generate_demand(sc))


# --- the acceptance check: byte-identical outputs of every shipped trace scenario -------

def _files(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("name", TRACE_SCENARIOS)
def test_overrides_of_trace_scenarios_are_byte_identical(name, tmp_path):
    """``--cells 1``, ``--seed <own>``, ``--duration-s <own>`` give the plain run's files
    byte for byte, and a one-point sweep (its trace's own rate_scale) the plain run's
    per-fleet rows."""
    from cli_cases import dcsim

    from sim.results.export import write_csv
    from sim.results.planner_csv import fleet_workload_rows
    from sim.results.tables import run_scenario

    require(name)
    path, base = SCENARIO_DIR / f"{name}.yaml", scenario(name)
    runs = {"plain": [], "seed": ["--seed", base.seed], "duration": ["--duration-s", base.duration_s],
            "cells": ["--cells", 1, "--workers", 1]}
    outputs = {}
    for label, extra in runs.items():
        code, stdout, stderr = dcsim(["run", path, "-q", "--out", tmp_path / label, *extra])
        assert code == 0, stderr
        outputs[label] = (stdout, _files(tmp_path / label))
    for label in ("seed", "duration", "cells"):
        assert outputs[label] == outputs["plain"], label

    workload = next(n for n, w in base.workloads.items() if w.arrival.kind == "trace")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"base": str(path), "grid": {
        f"workloads.{workload}.arrival.rate_scale": [base.workloads[workload].arrival.rate_scale]}}))
    code, _, stderr = dcsim(["sweep", sweep, "--out", tmp_path / "sweep", "--workers", 1])
    assert code == 0, stderr
    import pandas as pd

    points = pd.read_csv(tmp_path / "sweep" / "runs.csv")
    plain = fleet_workload_rows(run_scenario(base))
    columns = [c for c in plain.columns if c in points.columns]
    write_csv(plain[columns], tmp_path / "plain.csv")
    write_csv(points[columns], tmp_path / "point.csv")
    assert (tmp_path / "plain.csv").read_bytes() == (tmp_path / "point.csv").read_bytes()
