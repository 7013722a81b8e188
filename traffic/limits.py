"""Bounds every arrival process checks before it allocates: the largest rate and the
most arrivals one process may draw in one call."""

from __future__ import annotations

from sim.errors import UserError

MAX_RATE_PER_S = 1e9
"""Largest arrival rate of any process or state (requests/s)."""
MAX_ARRIVALS = 20_000_000
"""Most arrivals one process may generate in one call; checked from the expected count
before any array is allocated (1e9 req/s would otherwise ask numpy for tens of GB)."""


def check_count(expected: float, what: str) -> None:
    """Refuse up front when ``expected`` arrivals exceed :data:`MAX_ARRIVALS`.

    Raises:
        UserError: naming ``what``, the expected count and the limit."""
    if not expected <= MAX_ARRIVALS:
        raise UserError(f"{what} would generate about {expected:,.0f} arrivals; the limit is "
                        f"{MAX_ARRIVALS:,} per workload and run: lower the rate or the duration")
