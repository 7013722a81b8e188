"""The SimPy engine: :func:`sim.engine.core.run_fleet` runs one fleet's resolved plan
(:mod:`sim.fleet_plan`) on the scenario's demand; :func:`sim.engine.runner.run_scenario`
resolves a scenario, draws its demand and runs every fleet. ``core`` (one fleet's run),
``runner`` (every fleet), ``demand`` (arrivals and request shapes, drawn from the seed in
windows: held in memory, or drawn as a streamed run reaches them), ``pools`` (a pool's run
state around its plan), ``router`` (dispatch policies), ``replica_ar`` / ``replica_step`` /
``replica_service`` (the serving state machines, on ``timer``: every replica timer of a
run in one ``ReplicaClock``), ``indexed_heap`` (the heap under the clock and the routers'
per-pool indexes), ``journey`` (multi-pool pipelines), ``request`` and ``run`` (the state
one run owns). The modules with a ``.pxd`` beside them are compiled with Cython at
install (``setup.py``); :mod:`sim._build` picks the build that runs.

Imports only ``sim._build``, ``sim.fleet_plan``, ``sim.models``, ``sim.workloads``, ``sim.scenario``,
``fleets``, ``traffic`` and ``sim.errors``.
"""

import sim._build  # noqa: F401 - chooses the compiled or the source build before any module here loads
