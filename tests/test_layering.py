"""The house rules of ``sim/``, read from the source with ``ast``: imports run downward
only (``cli``/``dashboard``/``app.py`` → ``studies`` → ``results`` → ``engine`` →
``fleet_plan`` → fleet layout (``fleets.placement``, ``fleets.packing``) → ``models`` →
``scenario`` → ``workloads`` → catalog data (the rest of ``fleets``) / ``traffic`` →
``errors``, ``inputs`` → ``_build``), the core never imports a shell or Streamlit, and there is no import circle
anywhere (function-level imports count).

``fleets`` is split in two: its catalog records and their loaders are data that the models
read, while placement and packing check a pool's layout with the rules of
:mod:`sim.models.parallelism`, so they sit above the models and below the plan.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sim", "fleets", "traffic")

# Higher layers may import lower ones (and their own layer), never the reverse.
# A module belongs to the layer of its longest matching prefix (``fleets.placement`` is
# fleet layout, the rest of ``fleets`` catalog data).
LAYERS = [
    ("build", {"sim._build"}),  # which engine build runs: imported by sim.models and sim.engine first
    ("errors, inputs", {"sim.errors", "sim.inputs"}),
    ("catalog/traffic", {"fleets", "traffic"}),
    ("workloads", {"sim.workloads"}),
    ("scenario", {"sim.scenario", "sim.loader", "sim.schema_errors", "sim.operations", "sim.overrides"}),
    ("models", {"sim.models"}),
    ("fleet layout", {"fleets.placement", "fleets.packing"}),
    ("plan", {"sim.fleet_plan", "sim.ops_plan"}),
    ("engine", {"sim.engine"}),
    ("results", {"sim.results"}),
    ("studies", {"sim.studies"}),
    ("shells", {"sim.cli", "sim.dashboard", "sim.dashboard_checks", "sim.dashboard_rank",
                "sim.dashboard_sizing", "sim.dashboard_curves", "sim.dashboard_cache", "app"}),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_files() -> list[Path]:
    files = [ROOT / "app.py"]
    for package in PACKAGES:
        files += sorted((ROOT / package).rglob("*.py"))
    return files


def imports_of(path: Path) -> set[str]:
    """Every module of ours that ``path`` imports, at any depth of the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found |= {n for n in names if n.split(".")[0] in PACKAGES + ("streamlit",)}
    return found


def resolve(name: str, modules: set[str]) -> str | None:
    """The module a dotted import name refers to (``sim.results.charts`` is a module;
    ``sim.engine.core.simulate`` is a name inside ``sim.engine.core``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def layer_of(module: str) -> int:
    """The layer of the longest prefix that ``module`` falls under (``fleets.placement``
    before ``fleets``)."""
    found = [(len(p), rank) for rank, (_, prefixes) in enumerate(LAYERS) for p in prefixes
             if module == p or module.startswith(p + ".")]
    if found:
        return max(found)[1]
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS in {__file__}")


GRAPH = {module_name(p): imports_of(p) for p in source_files()}
MODULES = set(GRAPH)
# ``sim/__init__`` is the public facade: it resolves ``from sim import simulate`` lazily.
FACADE = {"sim", "sim.engine", "sim.models", "sim.results", "sim.studies", "fleets", "traffic"}


def edges() -> list[tuple[str, str]]:
    out = []
    for module, names in GRAPH.items():
        for name in names:
            target = resolve(name, MODULES) if not name.startswith("streamlit") else "streamlit"
            if target and target != module and target not in FACADE - {"traffic"}:
                out.append((module, target))
    return out


def upward(edge_list: list[tuple[str, str]]) -> list[str]:
    """Every edge that imports a higher layer, as a readable line."""
    return [f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
            for m, t in edge_list
            if t != "streamlit" and m not in FACADE and layer_of(t) > layer_of(m)]


def find_circle(edge_list: list[tuple[str, str]]) -> list[str] | None:
    """One import circle as a path ``[a, b, ..., a]``, or None (depth-first search)."""
    graph: dict[str, set[str]] = {}
    for module, target in edge_list:
        graph.setdefault(module, set()).add(target)
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_every_module_sits_in_a_layer():
    for module in MODULES - FACADE:
        layer_of(module)


def test_imports_run_downward():
    assert upward(edges()) == []


def test_only_the_dashboard_imports_streamlit():
    users = {m for m, t in edges() if t == "streamlit"}
    assert users <= {"app"}, users


def test_no_import_circles():
    circle = find_circle([e for e in edges() if e[1] != "streamlit"])
    assert circle is None, "import circle: " + " -> ".join(circle)


def test_the_checker_finds_what_it_looks_for():
    """On made-up graphs: the two circles this layout removed, and an upward import."""
    assert find_circle([("sim.cli", "sim.results.report_html"), ("sim.results.report_html", "sim.cli")])
    assert find_circle([("fleets.catalog", "fleets.catalog_io"), ("fleets.catalog_io", "fleets.catalog")])
    assert find_circle([("a", "b"), ("b", "c")]) is None
    assert upward([("sim.results.planner_csv", "sim.studies.sweep_spec")])
    assert upward([("sim.engine.core", "sim.models.perf")]) == []
    # the split ``fleets`` layer: placement may use the parallelism rules, the catalog may not
    assert upward([("fleets.placement", "sim.models.parallelism")]) == []
    assert upward([("fleets.catalog", "sim.models.parallelism")])
    assert upward([("sim.models.economics", "fleets.packing")])
    assert layer_of("fleets.catalog_io") < layer_of("sim.models.perf") < layer_of("fleets.packing") \
        < layer_of("sim.engine.pools")
    assert resolve("sim.engine.core.simulate", MODULES) == "sim.engine.core"


def test_test_modules_import_helpers_not_other_tests():
    """Shared test code lives in helper modules under tests/ (scenario_cases.py,
    scenario_strategies.py, queueing_theory.py, cli_cases.py, ...), never in a test module."""
    offenders = []
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[-1].startswith("test_")]
    assert not offenders
