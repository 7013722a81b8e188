"""Timeout-driven replicas: the plumbing shared by every replica state machine.

A replica acts on one pending timer at a time (``_timer``). To end its current work
earlier it simply starts a new timer; the superseded one still fires (SimPy cannot
cancel an event) but is recognised and ignored. When the current timer fires the
replica finishes the work in flight (``_finish``) and decides what to do next at the
boundary (``_boundary``).

Timers are scheduled at an absolute instant (not ``now + delay``, whose rounding depends
on when the timer was set) and with a priority of their own, so fast and exact mode
process simultaneous events in the same order: at one instant SimPy's urgent events come
first, then ordinary timeouts (arrivals, hand-offs, the sampler, run control) in the
order they were created, then replica boundaries in replica order (pool index, then
replica index). Without it a tie between two replicas freeing a slot at the same instant
went to whichever had set its timer first, which differs between the modes.
"""

from __future__ import annotations

from heapq import heappush

from simpy.events import NORMAL, Event

MAX_REPLICAS_PER_POOL = 100_000  # PoolConfig.replicas upper bound


def replica_priority(pool_index: int, replica_index: int) -> int:
    """SimPy priority of a replica's timers: after every ordinary event at the same
    instant, replicas in (pool, replica) order."""
    return NORMAL + 1 + pool_index * (MAX_REPLICAS_PER_POOL + 1) + replica_index


class _At(Event):
    """An event already triggered, due at an absolute instant (``Timeout`` takes a delay),
    with one callback."""

    def __init__(self, env, at_s: float, priority: int, callback) -> None:
        self.env = env
        self.callbacks = [callback]
        self._value = None
        self._ok = True
        # Environment.schedule adds the delay to now; an absolute instant needs the queue
        heappush(env._queue, (at_s, priority, next(env._eid), self))  # noqa: SLF001


class TimerDriven:
    """Mixin: subclasses set ``self.env``, ``self._timer = None`` and ``self._priority``
    (:func:`replica_priority`) and implement ``_finish()`` and ``_boundary()``."""

    def _start_timer_at(self, at_s: float) -> None:
        self._timer = _At(self.env, at_s, self._priority, self._on_timer)

    def _on_timer(self, timer) -> None:
        if timer is not self._timer:
            return  # superseded by a cut
        self._timer = None
        self._finish()
        self._boundary()
