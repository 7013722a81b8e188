"""Fuzz the loading layer with every file in ``scenarios/``: each generated case breaks a
real scenario (or sweep) file in one way, and dcsim must refuse it with exit code 2, one
``dcsim: error:`` paragraph, no traceback, the place of the mistake (field path, or the
line for YAML-level mistakes, or the trace file and line) and no output directory.

Mutation families (one hypothesis test each): wrong types, non-finite and out-of-range
numbers, unknown enum values, broken references, duplicate keys, broken YAML structure,
bad trace rows, and broken sweep specs. The ``slow`` test runs FUZZ_EXAMPLES per family
(>= 500 cases in all per ``make test``); the unmarked one runs a few per family. The CLI
runs in-process (``sim.cli.main``) for speed; tests/sim/test_interrupts.py runs the real
entry point in subprocesses. Under CI the examples are derandomized (fixed seed).
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import string
from pathlib import Path

import pytest
import yaml
from cli_cases import dcsim
from input_cases import check_examples
from hypothesis import strategies as st

from sim.loader import resolve_paths

REPO = Path(__file__).resolve().parents[2]
SCENARIO_DIR = REPO / "scenarios"


def _kind(path: Path) -> str:
    data = yaml.safe_load(path.read_text())
    if "workloads" in data and "fleets" in data:
        return "scenario"
    return "sweep" if "grid" in data else "other"


# JSON round trip: YAML aliases in the files must not make one mutation land in many places
SCENARIOS = {p.name: json.loads(json.dumps(resolve_paths(yaml.safe_load(p.read_text()), p.parent))) for p in sorted(SCENARIO_DIR.glob("*.yaml")) if _kind(p) == "scenario"}
SWEEPS = {p.name: p for p in sorted(SCENARIO_DIR.glob("*.yaml")) if _kind(p) == "sweep"}
FUZZ_EXAMPLES = 70  # per family, slow test: 8 families -> 560 cases
QUICK_EXAMPLES = 4
ENUM_KEYS = ("kind", "precision", "router", "format", "mode", "field")
NOT_WORDS = {"inf", "nan", "true", "false", "yes", "no", "on", "off", "null", "y", "n"}
words = st.text(alphabet=string.ascii_lowercase, min_size=3, max_size=9).filter(lambda w: w not in NOT_WORDS)
_ids = itertools.count()


# --- walking the data ------------------------------------------------------------------

def leaves(node, path=()):
    """(path, value) of every scalar in ``node``."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from leaves(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from leaves(v, path + (i,))
    else:
        yield path, node


def set_at(data, path, value):
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def dotted(path) -> str:
    return ".".join(str(p) for p in path)


# --- running ---------------------------------------------------------------------------

def assert_refused(directory: Path, text: str, expected: list[str], command: str = "run", name: str = "case") -> None:
    n = next(_ids)
    path = directory / f"{name}{n}.yaml"
    path.write_text(text)
    out = directory / f"out{n}"
    code, stdout, stderr = dcsim([command, path, "--out", out] + (["-q"] if command == "run" else []))
    assert code == 2, f"exit {code} for:\n{text}\nstderr: {stderr}"
    assert "Traceback" not in stderr, stderr
    assert stderr.startswith("dcsim: error: "), stderr
    assert "\n\n" not in stderr.strip(), stderr
    for piece in expected:
        assert piece in stderr, f"{piece!r} not in {stderr!r}"
    assert not out.exists(), "an output directory was created for refused input"
    assert stdout == ""


def dump(data) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=10**6)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


# --- strategies: each returns (yaml text, [expected substrings]) -------------------------

scenario_names = st.sampled_from(sorted(SCENARIOS))


def _typed_leaves(data, kinds):
    return [(p, v) for p, v in leaves(data) if type(v) in kinds and p[-1] not in ENUM_KEYS]


@st.composite
def wrong_type(draw):
    data = copy.deepcopy(SCENARIOS[draw(scenario_names)])
    path, value = draw(st.sampled_from(_typed_leaves(data, (int, float, bool, str))))
    if isinstance(value, bool):
        bad = draw(st.sampled_from(["yes", "true", 1, "on"]))
    elif isinstance(value, int):
        bad = draw(st.sampled_from([str(value), True, "two", [value]]))  # 4.0 for an int: see regressions
    elif isinstance(value, float):
        bad = draw(st.sampled_from([str(value), True, "fast", {"value": value}]))
    else:
        bad = draw(st.sampled_from([7, 2.5, True, [value]]))
    set_at(data, path, bad)
    return dump(data), [dotted(path)]


@st.composite
def bad_number(draw):
    data = copy.deepcopy(SCENARIOS[draw(scenario_names)])
    path, _ = draw(st.sampled_from(_typed_leaves(data, (int, float))))
    bad = draw(st.sampled_from([".inf", "-.inf", ".nan", "1" + "0" * 19, "9" * 5000, "-" + "9" * 25]))
    set_at(data, path, "__BAD__")
    return dump(data).replace("__BAD__", bad), [dotted(path)]


@st.composite
def bad_enum(draw):
    data = copy.deepcopy(SCENARIOS[draw(scenario_names)])
    path, _ = draw(st.sampled_from([(p, v) for p, v in leaves(data) if p[-1] in ENUM_KEYS]))
    word = draw(words)
    set_at(data, path, word)
    # a union tag (`kind`) is reported at its mapping, any other enum at the field
    return dump(data), [dotted(path[:-1]) if path[-1] == "kind" else dotted(path), word]


@st.composite
def bad_reference(draw):
    data = copy.deepcopy(SCENARIOS[draw(scenario_names)])
    name = draw(words.map(lambda w: "zz-" + w))
    choices = [p for p, _ in leaves(data) if p[-1] in ("model", "accelerator")
               or (len(p) >= 2 and p[-2] in ("serves",)) or (len(p) >= 3 and p[-2] == "workloads" and p[0] == "fleets")]
    path = draw(st.sampled_from(choices))
    set_at(data, path, name)
    where = dotted(path[:-1]) if path[-2] == "serves" else dotted(path)
    if path[0] == "fleets" and path[-2] == "workloads":
        where = dotted(path[:-1])
    return dump(data), [where, name]


KEY_LINE = re.compile(r"^(\s*)([A-Za-z_][\w.-]*): (\S.*)$")


@st.composite
def duplicate_key(draw):
    text = dump(SCENARIOS[draw(scenario_names)])
    lines = text.splitlines()
    candidates = [i for i, line in enumerate(lines)  # quoted values may continue on the next line
                  if KEY_LINE.match(line) and KEY_LINE.match(line).group(3)[0] not in "'\""]
    i = draw(st.sampled_from(candidates))
    key = KEY_LINE.match(lines[i]).group(2)
    lines.insert(i + 1, lines[i])
    return "\n".join(lines) + "\n", ["duplicate key", f"line {i + 1}", f"line {i + 2}"]


@st.composite
def broken_yaml(draw):
    text = dump(SCENARIOS[draw(scenario_names)])
    lines = text.splitlines()
    how = draw(st.sampled_from(["unclosed", "tab", "quote", "top_list", "top_scalar", "empty"]))
    if how in ("top_list", "top_scalar", "empty"):
        body = {"top_list": "- " + lines[0] + "\n- seed: 1", "top_scalar": "just words", "empty": ""}[how]
        return body + "\n", ["must be a YAML mapping"]
    indented = [i for i, line in enumerate(lines) if line.startswith("  ") and KEY_LINE.match(line)
                and KEY_LINE.match(line).group(3)[0] not in "'\""]
    i = draw(st.sampled_from(indented))
    if how == "unclosed":
        lines[i] = KEY_LINE.sub(lambda m: f"{m.group(1)}{m.group(2)}: [1, 2", lines[i])
    elif how == "tab":
        lines[i] = "\t" + lines[i].lstrip(" ")
    else:
        lines[i] = KEY_LINE.sub(lambda m: f'{m.group(1)}{m.group(2)}: "{m.group(3)}', lines[i])
    return "\n".join(lines) + "\n", ["YAML syntax error", "line "]


AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
GOOD_AZURE = [f"2023-11-16 18:15:{s:02d}.0000000,{400 + s},{30 + s}" for s in range(6)]
GOOD_MOONCAKE = [f'{{"timestamp": {1000 * s}, "input_length": {400 + s}, "output_length": {30 + s}}}' for s in range(6)]


@st.composite
def bad_trace(draw, directory: Path):
    name = draw(st.sampled_from([n for n, d in SCENARIOS.items()
                                 if any(w["kind"] == "autoregressive" for w in d["workloads"].values())]))
    data = copy.deepcopy(SCENARIOS[name])
    workload = draw(st.sampled_from([w for w, v in data["workloads"].items() if v["kind"] == "autoregressive"]))
    fmt = draw(st.sampled_from(["azure_csv", "mooncake_jsonl"]))
    row = draw(st.integers(0, len(GOOD_AZURE) - 1))
    if fmt == "azure_csv":
        rows = list(GOOD_AZURE)
        stamp, prompt, output = rows[row].split(",")
        how = draw(st.sampled_from(["stamp", "tz", "negative", "huge", "fraction", "word"]))
        if how == "stamp":
            stamp = draw(st.sampled_from(["yesterday", "2023-13-45 99:00:00", "-5", ""]))
        elif how == "tz":
            stamp, row = stamp + "+02:00", max(row, 1)
            rows[row] = ",".join([stamp] + rows[row].split(",")[1:])
        prompt = {"negative": "-3", "huge": "1" + "0" * 21, "fraction": "3.5", "word": "many"}.get(how, prompt)
        if how != "tz":
            rows[row] = ",".join([stamp, prompt, output])
        body = AZURE_HEADER + "\n" + "\n".join(rows) + "\n"
    else:
        rows = list(GOOD_MOONCAKE)
        bad = draw(st.sampled_from(['"timestamp": -5', '"input_length": -1', '"input_length": 1e30',
                                    '"output_length": 2.5', '"timestamp": "noon"']))
        key = bad.split(":")[0]
        rows[row] = re.sub(key + r': [^,}]+', bad, rows[row])
        body = "\n".join(rows) + "\n"
    path = directory / f"trace{next(_ids)}.{'csv' if fmt == 'azure_csv' else 'jsonl'}"
    path.write_text(body)
    data["workloads"][workload]["arrival"] = {"kind": "trace", "path": str(path), "format": fmt}
    return dump(data), [f"{path.name}:{row + (2 if fmt == 'azure_csv' else 1)}"]


SWEEP_TEXT = {name: path.read_text() for name, path in SWEEPS.items()}


@st.composite
def bad_sweep(draw, directory: Path):
    name = draw(st.sampled_from(sorted(SWEEPS)))
    data = yaml.safe_load(SWEEP_TEXT[name])
    data["base"] = str(SCENARIO_DIR / data["base"]) if isinstance(data.get("base"), str) else data.get("base")
    how = draw(st.sampled_from(["grid_type", "grid_path", "seeds", "fleets", "huge_grid", "extra_key", "grid_inf"]))
    fields = list(data.get("grid", {}))
    if how == "grid_type":
        field = draw(st.sampled_from(fields))
        data["grid"][field] = [draw(words)]
        expected = [field]
    elif how == "grid_inf":
        field = draw(st.sampled_from(fields))
        data["grid"][field] = ["__BAD__"]
        expected = [f"grid.{field}"]
    elif how == "grid_path":
        # "zz-" prefix: a drawn word such as "search" must not name a real workload
        field = "workloads.zz-" + draw(words) + ".arrival.rate_per_s"
        data["grid"][field] = [1.0]
        expected = [field]
    elif how == "seeds":
        data["seeds"] = draw(st.sampled_from([0, -1, "3", True, 10**6, [1, 1], [-2]]))
        expected = ["seeds"]
    elif how == "fleets":
        bad = "zz-" + draw(words)
        data["fleets"] = [bad]
        expected = [bad]
    elif how == "huge_grid":
        for i in range(4):
            data["grid"][f"economics.pue_{i}"] = list(range(1, 1001))
        data["grid"] = {k: v for k, v in data["grid"].items()}
        expected = ["limit is 100,000 points"]
    else:
        key = "x_" + draw(words)
        data[key] = 1
        expected = [key]
    text = dump(data).replace("__BAD__", ".inf")
    return text, expected + [directory.name]


FAMILIES = {
    "wrong_type": lambda d: wrong_type(),
    "bad_number": lambda d: bad_number(),
    "bad_enum": lambda d: bad_enum(),
    "bad_reference": lambda d: bad_reference(),
    "duplicate_key": lambda d: duplicate_key(),
    "broken_yaml": lambda d: broken_yaml(),
    "bad_trace": bad_trace,
    "bad_sweep": bad_sweep,
}


def _check_family(family: str, directory: Path, examples: int) -> None:
    command = "sweep" if family == "bad_sweep" else "run"
    check_examples(FAMILIES[family](directory),
                   examples, lambda case: assert_refused(directory, *case, command, family))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fuzz_quick(family, work):
    """A few cases per family on every test run (not slow)."""
    _check_family(family, work, QUICK_EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fuzz_full(family, work):
    """FUZZ_EXAMPLES cases per family: 8 x 70 = 560 per `make test`."""
    _check_family(family, work, FUZZ_EXAMPLES)


def test_every_scenario_file_is_fuzzed_and_valid():
    """The fuzz bases are the real files, and they load (so a refusal is the mutation's)."""
    assert {"default.yaml", "azure-conv.yaml", "search-verifier.yaml"} <= set(SCENARIOS)
    assert SWEEPS
    from sim.scenario import load_scenario

    for name in SCENARIOS:
        load_scenario(SCENARIO_DIR / name)
