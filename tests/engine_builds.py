"""The engine run from its Python source in a second process, to check the compiled
build against it (``tests/sim/engine/test_compiled_engine.py``).

``SourceEngine`` starts ``python tests/engine_builds.py`` with ``DCSIM_PURE_PYTHON=1``
once; each :meth:`SourceEngine.digest` sends it one scenario mapping (a JSON line) and
reads back :func:`digest` of that run, computed there from the source build.
:func:`digest` is a SHA-256 over every table of every fleet's run (requests, pools,
pool shares, time series, written as CSV with round-trip float repr), the simulated end
and the SimPy event count, so equal digests mean byte-identical results.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def digest(data: dict) -> str:
    """SHA-256 of the outcome of every fleet of scenario mapping ``data``."""
    from sim.engine.core import simulate
    from sim.engine.demand import generate_demand
    from sim.scenario import parse_scenario

    scenario = parse_scenario(data, "engine-builds")
    demand = generate_demand(scenario)
    h = hashlib.sha256()
    for i in range(len(scenario.fleets)):
        run = simulate(scenario, i, demand=demand)
        h.update(f"{run.fleet} end_s={run.end_s!r} events={run.events}\n".encode())
        for table in (run.requests, run.pools, run.pool_shares, run.timeseries):
            h.update(table.to_csv(index=False, float_format=repr).encode())
    return h.hexdigest()


class SourceEngine:
    """A process running the engine from source; ``close()`` when done."""

    def __init__(self) -> None:
        env = dict(os.environ, DCSIM_PURE_PYTHON="1", PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve())], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env=env, text=True, cwd=ROOT,
        )
        self.build = self._ask({"hello": True})

    def _ask(self, message: dict) -> str:
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"source-build worker died (exit {self.proc.wait()})")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"source-build worker: {answer['error']}")
        return answer["result"]

    def digest(self, data: dict) -> str:
        return self._ask({"scenario": data})

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _serve() -> None:
    import sim
    import sim.engine.replica_ar as replica_ar

    for line in sys.stdin:
        message = json.loads(line)
        try:
            if "hello" in message:
                result = f"{sim.ENGINE_BUILD} {Path(replica_ar.__file__).name}"
            else:
                result = digest(message["scenario"])
            answer = {"result": result}
        except Exception as err:  # noqa: BLE001 - reported to the test, which fails on it
            answer = {"error": f"{type(err).__name__}: {err}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve()
