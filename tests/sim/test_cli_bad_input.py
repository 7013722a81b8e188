"""Broken input reaches the user as ``dcsim: error: ...`` with exit code 2, never a traceback.

Hypothesis applies one mutation to a valid scenario and checks that the message names the
offending field or value. Most examples run in-process (CliRunner); a handful of fixed
cases run the real entry point in a subprocess.
"""

from __future__ import annotations

import copy
import itertools
import os
import string
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from fleets.catalog_io import load_catalog
from sim.cli import app

REPO = Path(__file__).resolve().parents[2]
CATALOG = load_catalog()

BASE = {
    "name": "bad",
    "seed": 3,
    "duration_s": 20,
    "warmup_s": 2,
    "drain_s": 30,
    "workloads": {
        "chat": {
            "kind": "autoregressive",
            "model": "llama-3-8b",
            "arrival": {"kind": "poisson", "rate_per_s": 2},
        }
    },
    "fleets": [{"name": "h100", "pools": [{"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"],
                                           "replicas": 1, "tp": 1}]}],
}

# Where each numeric field lives in BASE: (path, key).
NUMERIC_FIELDS = {
    "duration_s": ((), "duration_s"),
    "warmup_s": ((), "warmup_s"),
    "drain_s": ((), "drain_s"),
    "seed": ((), "seed"),
    "rate_per_s": (("workloads", "chat", "arrival"), "rate_per_s"),
    "replicas": (("fleets", 0, "pools", 0), "replicas"),
    "tp": (("fleets", 0, "pools", 0), "tp"),
}
NEGATIVE_FIELDS = ("duration_s", "warmup_s", "drain_s", "rate_per_s", "replicas", "tp", "seed")
NUMBER_WORDS = {"inf", "nan", "infinity", "e", "true", "false", "yes", "no", "on", "off", "null", "y", "n"}

words = st.text(alphabet=string.ascii_lowercase, min_size=3, max_size=10).filter(lambda w: w not in NUMBER_WORDS)
names = st.from_regex(r"[a-z][a-z0-9]{2,8}-[a-z0-9]{1,4}", fullmatch=True)
_trace_ids = itertools.count()


def _at(data: dict, path: tuple) -> dict:
    for key in path:
        data = data[key]
    return data


def _set(field: str, value) -> dict:
    data = copy.deepcopy(BASE)
    path, key = NUMERIC_FIELDS[field]
    _at(data, path)[key] = value
    return data


@st.composite
def wrong_type(draw):
    field = draw(st.sampled_from(sorted(NUMERIC_FIELDS)))
    return _set(field, draw(words)), f"{field}: Input should be a valid"


@st.composite
def negative(draw):
    field = draw(st.sampled_from(NEGATIVE_FIELDS))
    integer = field in ("replicas", "tp", "seed")
    value = draw(st.integers(-10**6, -1)) if integer else draw(st.floats(-1e6, -1e-3))
    return _set(field, value), f"{field}: Input should be greater than"


@st.composite
def unknown_accelerator(draw):
    name = draw(names.filter(lambda n: n not in CATALOG.accelerators))
    data = copy.deepcopy(BASE)
    data["fleets"][0]["pools"][0]["accelerator"] = name
    return data, f"unknown accelerator '{name}'"


@st.composite
def unknown_model(draw):
    name = draw(names.filter(lambda n: n not in CATALOG.models))
    data = copy.deepcopy(BASE)
    data["workloads"]["chat"]["model"] = name
    return data, f"unknown model '{name}'"


@st.composite
def unknown_workload_kind(draw):
    kind = draw(words)
    data = copy.deepcopy(BASE)
    data["workloads"]["chat"]["kind"] = kind
    return data, f"'{kind}'"


@st.composite
def unknown_arrival_kind(draw):
    kind = draw(words)
    data = copy.deepcopy(BASE)
    data["workloads"]["chat"]["arrival"]["kind"] = kind
    return data, f"'{kind}'"


@st.composite
def model_too_big(draw):
    data = copy.deepcopy(BASE)
    data["workloads"]["chat"]["model"] = "llama-3.1-405b"
    pool = data["fleets"][0]["pools"][0]
    pool.update(precision=draw(st.sampled_from(["bf16", "fp8"])), tp=1)
    return data, "cannot place model 'llama-3.1-405b'"


@st.composite
def tp_beyond_domain(draw):
    tp = draw(st.sampled_from([9, 16, 32, 64]))
    data = copy.deepcopy(BASE)
    data["fleets"][0]["pools"][0]["tp"] = tp
    return data, f"tp={tp}"


@st.composite
def extra_key(draw):
    key = "x_" + draw(words)
    where = draw(st.sampled_from([(), ("workloads", "chat"), ("fleets", 0, "pools", 0), ("workloads", "chat", "arrival")]))
    data = copy.deepcopy(BASE)
    _at(data, where)[key] = 1
    return data, f"{key}: Extra inputs are not permitted"


@st.composite
def warmup_not_before_end(draw):
    data = copy.deepcopy(BASE)
    data["warmup_s"] = data["duration_s"] + draw(st.floats(0, 1e4))
    return data, "warmup_s (="


@st.composite
def malformed_trace_row(draw, directory: Path):
    bad = draw(words)
    line = draw(st.integers(0, 4))
    rows = [f"2023-11-16 18:15:{s:02d}.0000000,{400 + s},{30 + s}" for s in range(5)]
    parts = rows[line].split(",")
    rows[line] = ",".join([parts[0], bad, parts[2]])
    path = directory / f"trace{next(_trace_ids)}.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    data = copy.deepcopy(BASE)
    data["workloads"]["chat"]["arrival"] = {"kind": "trace", "path": str(path), "format": "azure_csv"}
    return data, f"{path.name}:{line + 2}:2: ContextTokens: not a number"  # the bad text is never repeated


MUTATIONS = {
    "wrong_type": wrong_type, "negative": negative, "unknown_accelerator": unknown_accelerator,
    "unknown_model": unknown_model, "unknown_workload_kind": unknown_workload_kind,
    "unknown_arrival_kind": unknown_arrival_kind, "model_too_big": model_too_big,
    "tp_beyond_domain": tp_beyond_domain, "extra_key": extra_key,
    "warmup_not_before_end": warmup_not_before_end, "malformed_trace_row": malformed_trace_row,
}


def broken_scenarios(mutation: str, directory: Path):
    strategy = MUTATIONS[mutation]
    return strategy(directory) if mutation == "malformed_trace_row" else strategy()


def assert_user_error(code: int, stderr: str, expected: str) -> None:
    assert code == 2, stderr
    assert "Traceback" not in stderr
    assert stderr.startswith("dcsim: error: ")
    assert expected in stderr, f"{expected!r} not in {stderr!r}"
    assert "\n\n" not in stderr.strip()  # one paragraph


def test_base_scenario_is_valid(tmp_path):
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(BASE))
    result = CliRunner().invoke(app, ["run", str(path), "-q"])
    assert result.exit_code == 0, result.stderr


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("broken")


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_broken_scenarios_exit_2_naming_the_problem(mutation, work_dir):
    """Three examples per mutation (33 in all): every kind of mistake is exercised."""
    runner = CliRunner()
    counter = itertools.count()

    @settings(max_examples=3)
    @given(case=broken_scenarios(mutation, work_dir))
    def check(case):
        data, expected = case
        path = work_dir / f"{mutation}{next(counter)}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        result = runner.invoke(app, ["run", str(path), "--quiet"])
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        assert_user_error(result.exit_code, result.stderr, expected)

    check()


# --- the real entry point, in a subprocess ------------------------------------------

def run_dcsim(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "sim.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(
    "case",
    ["missing_file", "placement"] + [pytest.param(case, marks=pytest.mark.slow)  # each case runs the CLI once
                                     for case in ("yaml_syntax", "bad_option_value", "unknown_option", "negative_seed_override")],
)
def test_entry_point_exit_codes(case, tmp_path):
    base = _write(tmp_path / "base.yaml", BASE)
    too_big = copy.deepcopy(BASE)
    too_big["workloads"]["chat"]["model"] = "llama-3.1-405b"
    too_big["fleets"][0]["pools"][0]["precision"] = "bf16"
    (tmp_path / "syntax.yaml").write_text("seed: [1, 2\nduration_s: 3\n")
    args, expected = {
        "missing_file": (["run", tmp_path / "absent.yaml"], "absent.yaml"),
        "yaml_syntax": (["run", tmp_path / "syntax.yaml"], "YAML syntax error"),
        "placement": (["run", _write(tmp_path / "big.yaml", too_big)], "cannot place model 'llama-3.1-405b'"),
        "bad_option_value": (["run", base, "--duration-s", "soon"], "--duration-s"),
        "unknown_option": (["run", base, "--colour"], "--colour"),
        "negative_seed_override": (["run", base, "--seed", "-5"], "seed"),
    }[case]
    proc = run_dcsim(*args, cwd=tmp_path)
    assert_user_error(proc.returncode, proc.stderr, expected)
    assert proc.stdout == ""


def test_console_script_reports_user_errors(tmp_path):
    script = Path(sys.executable).with_name("dcsim")
    if not script.exists():
        pytest.skip("dcsim console script not installed in this environment")
    proc = subprocess.run([str(script), "run", str(tmp_path / "absent.yaml")], capture_output=True, text=True,
                          timeout=120)
    assert_user_error(proc.returncode, proc.stderr, "cannot read the scenario file")


def test_bugs_keep_their_traceback(tmp_path, monkeypatch):
    """A non-user exception is not swallowed into exit 2."""
    import sim.results.tables

    def boom(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(sim.results.tables, "run_scenario", boom)
    result = CliRunner().invoke(app, ["run", str(_write(tmp_path / "s.yaml", BASE)), "-q"])
    assert isinstance(result.exception, ZeroDivisionError)
    assert result.exit_code != 2


def test_non_utf8_scenario_is_a_user_error(tmp_path):
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfe\x00not yaml")
    result = CliRunner().invoke(app, ["run", str(path)])
    assert_user_error(result.exit_code, result.stderr, "binary.yaml")


@pytest.mark.parametrize("cells, message", [
    ("2", "--cells 2: fleet 'h100' pool 'chat' has 1 replicas"),  # 1 replica cannot be split in 2
    ("0", "--cells 0: must be a whole number from 1 to"),
])
def test_bad_cells_exit_2_before_any_worker_starts(tmp_path, monkeypatch, cells, message):
    """``--cells`` is checked once, before the executor (here a Dask cluster) is opened."""
    import sim.studies.sweep

    def no_workers(*args, **kwargs):
        raise AssertionError("an executor was opened for a --cells value that is refused")

    monkeypatch.setattr(sim.studies.sweep, "make_executor", no_workers)
    result = CliRunner().invoke(app, ["run", str(_write(tmp_path / "s.yaml", BASE)), "-q", "--cells", cells,
                                      "--dask", "local"])
    assert_user_error(result.exit_code, result.stderr, message)
    assert "allowed" in result.stderr or "whole number from 1" in result.stderr
