"""Pure models of a replica: :mod:`~sim.models.parallelism` (which TP/PP/EP a model may
run at, the bytes each accelerator holds, the cost of collectives), :mod:`~sim.models.perf`
(roofline time of prefill, decode and diffusion steps), :mod:`~sim.models.power` and
:mod:`~sim.models.economics` (capex, opex, cost of each request). Functions of the catalog
and a scenario; no SimPy, no I/O.
"""

import sim._build  # noqa: F401 - chooses the compiled or the source build before perf loads
