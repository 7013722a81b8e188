"""The SimPy engine: :func:`sim.engine.core.simulate` runs one fleet on the scenario's
demand. ``core`` (the run), ``demand`` (arrivals and request shapes, drawn from the
seed in windows: held in memory, or drawn as a streamed run reaches them), ``pools`` (catalog lookups, placement, memory checks), ``router`` (dispatch
policies), ``replica_ar`` / ``replica_step`` / ``replica_service`` (the serving state
machines, on ``timer``: every replica timer of a run in one ``ReplicaClock``),
``indexed_heap`` (the heap under the clock and the routers' per-pool indexes),
``journey`` (multi-pool pipelines), ``shapes`` (phases of the step-batched jobs),
``request`` and ``run`` (the state one run owns). The modules with a ``.pxd`` beside
them are compiled with Cython (``setup.py``); :mod:`sim._build` picks the build that runs.

Imports only ``sim._build``, ``sim.models``, ``sim.scenario``, ``fleets``, ``traffic`` and ``sim.errors``.
"""

import sim._build  # noqa: F401 - chooses the compiled or the source build before any module here loads
