"""dcsim's simulator, laid out by role; imports run downward only:

- ``cli``, ``dashboard``: the shells (the ``dcsim`` command; the dashboard's logic
  without Streamlit, used by ``app.py``).
- ``studies``: what is built from many runs: sweeps, the capacity planner, headroom,
  validation and calibration against MLPerf.
- ``results``: one run's tables: metrics, exports, the planner CSV, text and HTML
  reports, charts, progress bars.
- ``engine``: ``simulate()``: the SimPy model of routers, replicas, pools, journeys.
- ``models``: the performance (roofline time) and economics (money) models, pure
  functions of the catalog and a scenario.
- ``scenario``: the schema; ``errors``: the shared error vocabulary.

``from sim import simulate, run_scenario, load_scenario`` is the public entry point;
the names are resolved on first use, so that ``fleets`` and ``traffic`` can import
``sim.errors`` without loading the engine.

The engine's hot path is compiled with Cython at install (``setup.py``: every
``sim/**/X.py`` with an ``X.pxd`` beside it; the ``.py`` is the only source of the logic).
:data:`ENGINE_BUILD` says which runs: ``"compiled"``, or ``"source"`` when
``DCSIM_PURE_PYTHON`` is set (to a value other than ``0``), when nothing was compiled (no
C compiler at install), when only some modules were compiled, or, in a source tree
(``setup.py`` beside ``sim/``), when a compiled module is older than its ``.py`` or
``.pxd``: an edit since the build, which Python would otherwise ignore, importing the
stale extension in preference to the edited source (a warning says so; ``make build``
rebuilds). An installed wheel's file times say nothing about edits and are not compared.
The switch is all or none: a compiled class and a source subclass would disagree on where
their attributes live. Both builds give byte-identical results (``tests/sim/engine/test_compiled_engine.py``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from pathlib import Path

_PUBLIC = {
    "simulate": "sim.engine.core",
    "run_scenario": "sim.results.tables",
    "resolve": "sim.fleet_plan",
    "Results": "sim.results.tables",
    "load_scenario": "sim.scenario",
    "parse_scenario": "sim.scenario",
    "Scenario": "sim.scenario",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'sim' has no attribute {name!r}")


def _compiled_sources() -> dict[str, Path]:
    """Module name -> ``.py`` path of every module that setup.py compiles."""
    root = Path(__file__).resolve().parent
    return {
        ".".join(("sim",) + pxd.relative_to(root).with_suffix("").parts): pxd.with_suffix(".py")
        for pxd in sorted(root.rglob("*.pxd"))
    }


def _extension_of(source: Path) -> Path | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = source.with_suffix(suffix)
        if candidate.is_file():
            return candidate
    return None


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Imports the compiled modules from their ``.py`` files (ahead of the extensions)."""

    def __init__(self, sources: dict[str, Path]) -> None:
        self.sources = sources

    def find_spec(self, fullname, path=None, target=None):
        source = self.sources.get(fullname)
        return None if source is None else importlib.util.spec_from_file_location(fullname, source)


def _choose_build() -> tuple[str, str]:
    """(``ENGINE_BUILD``, why), installing the source finder unless compiled."""
    sources = _compiled_sources()
    built = {name: _extension_of(py) for name, py in sources.items()}
    why = ""
    if os.environ.get("DCSIM_PURE_PYTHON", "0") not in ("", "0"):
        why = "DCSIM_PURE_PYTHON is set"
    elif not any(built.values()):
        why = "the engine was not compiled (no C compiler or Cython at install)"
    else:
        in_tree = (Path(__file__).resolve().parents[1] / "setup.py").is_file()  # not a wheel's copy
        for name, py in sources.items():
            ext = built[name]
            if ext is None:
                why = f"{py.name} was not compiled"
            elif in_tree and ext.stat().st_mtime < max(py.stat().st_mtime, py.with_suffix(".pxd").stat().st_mtime):
                why = f"{py.name} changed after the engine was compiled"
            if why:
                warnings.warn(
                    f"dcsim: {why}; running the Python source (same results, slower). "
                    "Rebuild with `make build`.",
                    RuntimeWarning,
                    stacklevel=2,
                )
                break
    if not why:
        return "compiled", "every module with a .pxd is compiled and up to date"
    sys.meta_path.insert(0, _SourceFinder(sources))
    return "source", why


ENGINE_BUILD, ENGINE_BUILD_WHY = _choose_build()
"""``"compiled"`` or ``"source"`` (module docstring), and why."""
