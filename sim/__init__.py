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
"""

from __future__ import annotations

import importlib

_PUBLIC = {
    "simulate": "sim.engine.core",
    "run_scenario": "sim.results.tables",
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
