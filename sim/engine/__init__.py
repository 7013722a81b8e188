"""The SimPy engine: :func:`sim.engine.core.simulate` runs one fleet on the scenario's
demand. ``core`` (the run), ``demand`` (arrivals and request shapes, drawn once per
scenario), ``pools`` (catalog lookups, placement, memory checks), ``router`` (dispatch
policies), ``replica_ar`` / ``replica_step`` / ``replica_service`` (the serving state
machines, on ``timer``), ``journey`` (multi-pool pipelines), ``shapes`` (phases of the
step-batched jobs), ``request`` and ``run`` (the state one run owns).

Imports only ``sim.models``, ``sim.scenario``, ``fleets``, ``traffic`` and ``sim.errors``.
"""
