"""Root of the test tree (puts tests/ on sys.path so `data_files` is importable) and the
one hypothesis profile every module uses.

``dcsim`` (local runs): random examples, no deadline (simulations on a shared 2-core
machine vary in time), too_slow not a failure. ``dcsim-ci`` (loaded when the ``CI``
environment variable is set to anything): the same, derandomized (examples fixed by each
test's own source, so a failure reproduces) and without the example database. Modules
set only what a test needs beyond it (fewer ``max_examples``, another health check).
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("dcsim", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True)
settings.register_profile("dcsim-ci", settings.get_profile("dcsim"), derandomize=True, database=None)
settings.load_profile("dcsim-ci" if os.environ.get("CI") else "dcsim")
