"""Checks the dashboard makes before a run, in the user's units, without Streamlit.

- :func:`field_errors`: values a widget lets the user type but a run cannot use (replicas
  0, an arrivals window shorter than the warm-up or than :data:`MIN_DURATION_S`, a
  negative seed, an SLO target outside (0, 100] %). Each message names the value as
  typed and lands on its widget's edit key; the value is never replaced by an old one.
- :func:`table_errors`: rows of the fleets-and-pools table that cannot become a scenario
  (blank names, empty ``serves``, unknown workloads or accelerators, duplicate pools).
- :func:`run_size`: the expected request count and memory of a run, so a huge run is
  refused or confirmed before it starts.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any

MIN_DURATION_S = 1.0
"""Shortest arrivals window the dashboard runs: below a second a default-rate workload
has a handful of requests and no percentile to show."""

PEAK_RSS_BYTES_PER_REQUEST = 1_000
"""Peak resident memory a run holds per request it simulates with its rows in memory
(outcome rows, demand arrays, summaries). Measured 2026-11-26 with
``bench/bench_dashboard_memory.py``: ``default.yaml`` (3 fleets, 300 s of arrivals,
``engine.stream: off``) at 1x, 4x and 16x its rates, each in a fresh process:
peak RSS (``ru_maxrss``) 281 MB at 16,332 requests, 365 MB at 65,181 and
524 MB at 260,775: a slope of 995 bytes per request, rounded to 1,000. (The first
step's slope, 1,720, includes fixed costs; ``sim.scenario.MAX_IN_MEMORY_REQUESTS``
quotes ~1.5 GB per million on another scenario.)"""

CONFIRM_REQUESTS = 1_000_000
"""Above this many requests (over all fleets) Run needs the user's confirmation."""

MEMORY_SHARE_LIMIT = 0.5
"""A run whose estimated memory exceeds this share of the machine's physical memory is
refused (the server also holds the page and the cached results)."""


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def field_errors(values: dict[str, Any], warmup_s: float) -> dict[str, str]:
    """Errors of the sidebar ``values`` (edit keys as in :mod:`sim.dashboard`) a run
    cannot use, by edit key; ``warmup_s`` is the scenario's warm-up (s)."""
    errors: dict[str, str] = {}
    duration = _number(values.get("run.duration_s", MIN_DURATION_S))
    if duration is None or duration < MIN_DURATION_S:
        errors["run.duration_s"] = f"arrivals for must be at least {MIN_DURATION_S:g} s (got {values['run.duration_s']} s)"
    elif duration <= warmup_s:
        errors["run.duration_s"] = (f"arrivals for ({duration:g} s) must be longer than the scenario's warm-up "
                                    f"({warmup_s:g} s): statistics cover only arrivals after it")
    seed = values.get("run.seed", 0)
    if _number(seed) is None or seed < 0 or seed != int(seed):
        errors["run.seed"] = f"seed must be a whole number ≥ 0 (got {seed})"
    for key, value in values.items():
        if key.endswith(".slo.target"):
            target = _number(value)
            if target is None or not 0 < target <= 100:
                errors[key] = f"SLO target must be above 0% and at most 100% of requests (got {value:g}%)"
        elif re.fullmatch(r"fleets\.\d+\.pools\.\d+\.(replicas|max_batch)", key):
            number = _number(value)
            if number is None or number < 1 or number != int(number):
                errors[key] = f"{key.rsplit('.', 1)[1]} must be a whole number ≥ 1 (got {value})"
    return errors


def table_errors(rows: list[dict[str, Any]], workloads: list[str], accelerators: list[str]) -> list[str]:
    """Why table ``rows`` (as :func:`sim.dashboard.fleets_table`) cannot be applied, one
    message per problem naming its row (1-based) and column; [] when they can."""
    problems, seen = [], set()
    for n, row in enumerate(rows, 1):
        fleet, pool = (str(row.get(c) or "").strip() for c in ("fleet", "pool"))
        if not fleet and not pool:
            continue  # the editor's blank new row
        if not fleet or not pool:
            problems.append(f"row {n}: give both a fleet and a pool name")
        if (fleet, pool) in seen:
            problems.append(f"row {n}: fleet '{fleet}' already has a pool '{pool}'")
        seen.add((fleet, pool))
        serves = [s for s in re.split(r"[,\s]+", str(row.get("serves") or "")) if s]
        unknown = [s for s in serves if s.split(":")[0] not in workloads]
        if not serves:
            problems.append(f"row {n} ({fleet}/{pool}): serves is empty; list workloads from: {', '.join(workloads)}")
        elif unknown:
            problems.append(f"row {n} ({fleet}/{pool}): serves names {', '.join(unknown)}, not a workload "
                            f"of this scenario ({', '.join(workloads)})")
        if row.get("accelerator") not in accelerators:
            problems.append(f"row {n} ({fleet}/{pool}): choose an accelerator")
        replicas = _number(row.get("replicas"))
        if replicas is not None and (replicas < 1 or replicas != int(replicas)):
            problems.append(f"row {n} ({fleet}/{pool}): replicas must be a whole number ≥ 1 (got {row['replicas']})")
    return problems


@dataclass(frozen=True)
class RunSize:
    """A run's expected size: ``requests`` over all fleets (each fleet serves the whole
    demand), ``memory_bytes`` at :data:`PEAK_RSS_BYTES_PER_REQUEST`, and the verdict."""

    requests: float
    memory_bytes: float
    limit_bytes: float

    @property
    def refused(self) -> bool:
        return self.memory_bytes > self.limit_bytes

    @property
    def needs_confirmation(self) -> bool:
        return not self.refused and self.requests > CONFIRM_REQUESTS

    def text(self) -> str:
        return (f"about {self.requests:,.0f} requests over all fleets, about {self.memory_bytes / 1e9:,.1f} GB of "
                f"memory ({PEAK_RSS_BYTES_PER_REQUEST:,} bytes per request)")


def physical_memory_bytes() -> float:
    """This machine's physical memory (bytes); infinity where the OS does not say."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return math.inf


def run_size(scenario, memory_bytes: float | None = None) -> RunSize:
    """Expected size of running ``scenario`` (a validated Scenario): per fleet the sum
    over synthetic workloads of mean rate × (1 + diurnal amplitude) × ``duration_s``,
    and for trace replays their mean rate × ``duration_s``; ``memory_bytes`` defaults to
    :func:`physical_memory_bytes`."""
    per_fleet = 0.0
    for wl in scenario.workloads.values():
        diurnal = getattr(wl.arrival, "diurnal", None)
        peak = 1.0 + (diurnal.amplitude if diurnal else 0.0)
        per_fleet += wl.arrival.mean_rate_per_s * peak * scenario.duration_s
    requests = per_fleet * len(scenario.fleets)
    limit = (physical_memory_bytes() if memory_bytes is None else memory_bytes) * MEMORY_SHARE_LIMIT
    return RunSize(requests, requests * PEAK_RSS_BYTES_PER_REQUEST, limit)


def size_key(size: RunSize) -> str:
    """A key that changes with the run's size (a confirmation holds for that size only)."""
    return f"{size.requests:.0f}"
