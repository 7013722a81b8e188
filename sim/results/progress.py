"""Progress bars for ``run_scenario(progress=...)``: one tqdm bar per fleet, on stderr.

The bar advances in simulated seconds against the horizon (duration + drain) and shows
requests finished out of the total. It is disabled when stderr is not a terminal, so logs
and CI stay silent, and it never writes to stdout (results go there).
"""

from __future__ import annotations

import sys
from typing import Callable

from tqdm import tqdm

Callback = Callable[[float, int], None]


class FleetProgress:
    """A tqdm bar for one fleet's run; call it with ``(sim_time_s, requests_finished)``."""

    def __init__(self, fleet_name: str, sim_end_s: float, total_requests: int) -> None:
        self.total_requests = total_requests
        self.bar = tqdm(
            total=round(sim_end_s, 1),
            desc=f"fleet {fleet_name}",
            unit="sim-s",
            file=sys.stderr,
            disable=not sys.stderr.isatty(),
            leave=False,
            dynamic_ncols=True,
            bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} sim-s{postfix}",
        )

    def __call__(self, sim_time_s: float, requests_finished: int) -> None:
        target = min(round(sim_time_s, 1), self.bar.total)
        if target > self.bar.n:
            self.bar.update(target - self.bar.n)
        self.bar.set_postfix_str(f"{requests_finished}/{self.total_requests} requests", refresh=False)
        if requests_finished >= self.total_requests:
            self.close()

    def close(self) -> None:
        self.bar.close()


class ProgressFactory:
    """``factory(fleet_name, sim_end_s, total_requests) -> callback``; closes the previous
    fleet's bar when the next one starts and on :meth:`close`."""

    def __init__(self) -> None:
        self.current: FleetProgress | None = None

    def __call__(self, fleet_name: str, sim_end_s: float, total_requests: int) -> Callback:
        self.close()
        self.current = FleetProgress(fleet_name, sim_end_s, total_requests)
        return self.current

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None

    def __enter__(self) -> ProgressFactory:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress_bars() -> ProgressFactory:
    """A progress factory to pass to :func:`sim.results.tables.run_scenario`; use as a context
    manager so the last bar closes even when the run fails."""
    return ProgressFactory()
