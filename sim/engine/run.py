"""The state one run owns: SimPy environment, mode, measurement window, per-pool stats.

Nothing here is module- or class-level: two runs in one process cannot interfere.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import simpy

from sim.engine.prefix_cache import TRAFFIC


def events_processed(env: simpy.Environment) -> int:
    """Events the environment has processed so far: events scheduled (SimPy numbers
    every scheduled event from its ``_eid`` counter) minus those still queued. Reads
    SimPy internals instead of overriding ``step`` (which costs ~0.5 µs per event)."""
    scheduled = next(env._eid)  # noqa: SLF001 - the counter advances; harmless
    return scheduled - len(env._queue)  # noqa: SLF001


PREFILL_TOKENS = ("prompt", "cached", "host", "ssd", "shared")
"""The entries of ``PoolStats.prefill_tokens``: the first prefills' prompt tokens, their
cached tokens, and of those the ones copied from host memory, read from the SSD tier and
read from the pool's shared store."""


@dataclass(slots=True)
class PoolStats:
    """Accumulated over the measurement window [window_start_s, window_end_s) for one pool
    (all replicas summed). Units: seconds, FLOP, bytes, byte·seconds."""

    busy_s: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0
    hbm_byte_s: float = 0.0
    hbm_peak_bytes: float = 0.0
    iterations: int = 0
    busy_total_s: float = 0.0  # over the whole run, for energy/cost
    # a prefix cache: first prefills ending in the window, their tokens by PREFILL_TOKENS and the
    # prefill FLOP they saved (C arrays the pool's replicas add to: ARReplica._cache_first)
    prefill_tokens: array = field(default_factory=lambda: array("q", [0] * len(PREFILL_TOKENS)))
    prefill_saved: array = field(default_factory=lambda: array("d", [0.0]))
    # a prefix cache: blocks moved between its tiers at instants in the window, by
    # sim.engine.prefix_cache.TRAFFIC (all replicas; ARReplica._cache_traffic)
    kv_tier_blocks: array = field(default_factory=lambda: array("q", [0] * len(TRAFFIC)))


class RunContext:
    """Owns one run: ``env``, ``exact`` mode flag, the measurement window, a counter of
    requests not yet finished (to stop draining early), ``outcomes``, which records
    each request when it finishes (:class:`sim.engine.outcomes.Outcomes`; None: not kept),
    and ``routers``, the run's routers by position: a request's journey names its legs'
    routers by position in this list, so a request never refers to an engine object
    (:class:`sim.engine.request.Request` is not tracked by the cyclic garbage collector)."""

    def __init__(self, window_start_s: float, window_end_s: float, exact: bool) -> None:
        self.env = simpy.Environment()
        self.exact = exact
        self.window_start_s = window_start_s
        self.window_end_s = window_end_s
        self.outstanding = 0
        self.arrivals_done = False
        # set by an arrival feed around one dispatch: no other arrival of its workload comes
        # at the same instant (a prefill replica may then start at once: ARReplica.submit)
        self.arrival_alone = False
        self.drained = self.env.event()
        self.outcomes = None
        self.routers: list = []
        self.on_finished = None  # the operations layer's hook (sim.engine.operations), when a pool has one
        self.pools: list = []  # the run's pools by index (a split deployment's hand-offs find their prefill replica)

    def request_finished(self, req) -> None:
        """``req`` completed or was rejected: its outcome is final."""
        if self.outcomes is not None:
            self.outcomes.record(req)
        if self.on_finished is not None:
            self.on_finished(req)
        self.outstanding -= 1
        if self.outstanding == 0 and self.arrivals_done and not self.drained.triggered:
            self.drained.succeed()

    def account(
        self, stats: PoolStats, t0: float, t1: float, flops: float, bytes_moved: float, hbm_bytes: float
    ) -> None:
        """Add a busy interval [t0, t1) that did ``flops`` and moved ``bytes_moved`` with
        ``hbm_bytes`` resident, clipped to the measurement window (pro rata)."""
        span = t1 - t0
        if span <= 0:
            return
        stats.busy_total_s += span
        stats.iterations += 1
        overlap = min(t1, self.window_end_s) - max(t0, self.window_start_s)
        if overlap <= 0:
            return
        frac = overlap / span
        stats.busy_s += overlap
        stats.flops += flops * frac
        stats.bytes += bytes_moved * frac
        stats.hbm_byte_s += hbm_bytes * overlap
        if hbm_bytes > stats.hbm_peak_bytes:
            stats.hbm_peak_bytes = hbm_bytes
