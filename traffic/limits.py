"""Bounds every arrival process checks before it allocates: the largest rate and the
most arrivals one process may draw in one call."""

from __future__ import annotations

from sim.errors import UserError

MAX_RATE_PER_S = 1e9
"""Largest arrival rate of any process or state (requests/s)."""
MAX_ARRIVALS = 1_000_000_000
"""Most arrivals one process may generate over a run; checked from the expected count
before anything is drawn. Arrivals are drawn a chunk at a time (:mod:`traffic.chunks`),
so this bounds time, not memory (a scenario's total is capped at the same figure,
:data:`sim.scenario.MAX_EXPECTED_REQUESTS`)."""
MAX_STATE_CHANGES = 20_000_000
"""Most state changes of a Markov-modulated process over a run: its sojourns are drawn
at once (24 bytes each), before its arrivals."""


def check_count(expected: float, what: str, limit: int = MAX_ARRIVALS, unit: str = "arrivals") -> None:
    """Refuse up front when ``expected`` ``unit`` exceed ``limit`` (:data:`MAX_ARRIVALS`).

    Raises:
        UserError: naming ``what``, the expected count and the limit."""
    if not expected <= limit:
        raise UserError(f"{what} would generate about {expected:,.0f} {unit}; the limit is "
                        f"{limit:,} per workload and run: lower the rate or the duration")
