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
``sim.errors`` without loading the engine. Importing this package does no work.

The engine's hot path is compiled with Cython (``setup.py``); which build runs, compiled
or source, is chosen when ``sim.models`` or ``sim.engine`` is first imported
(:mod:`sim._build`). ``sim.ENGINE_BUILD`` and ``sim.ENGINE_BUILD_WHY`` read that choice
(``"compiled"`` or ``"source"``, and why), making it first if nothing has yet.
"""

from __future__ import annotations

import importlib

_PUBLIC = {
    "simulate": "sim.engine.core",
    "run_scenario": "sim.results.tables",
    "resolve": "sim.fleet_plan",
    "Results": "sim.results.tables",
    "load_scenario": "sim.scenario",
    "parse_scenario": "sim.scenario",
    "Scenario": "sim.scenario",
    "ENGINE_BUILD": "sim._build",
    "ENGINE_BUILD_WHY": "sim._build",
}

__all__ = sorted(name for name, module in _PUBLIC.items() if module != "sim._build")


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'sim' has no attribute {name!r}")
