"""Timeout-driven replicas: the plumbing shared by every replica state machine.

A replica acts on one pending timer at a time (``_timer``). To end its current work
earlier it starts a new timer and cancels the superseded one: SimPy cannot take an event
out of its queue, so the entry is still popped at its instant, but with its callbacks
emptied nothing runs for it (before, the replica's callback ran and ignored it). When the current timer fires the
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


_CANCELLED = ()  # the callbacks of a cancelled timer: SimPy pops it and runs nothing


class _At(Event):
    """An event already triggered, due at an absolute instant (``Timeout`` takes a delay),
    with the given callbacks (a tuple shared between a replica's timers: nothing appends
    to them)."""

    def __init__(self, env, at_s: float, priority: int, callbacks: tuple) -> None:
        self.env = env
        self.callbacks = callbacks
        self._value = None
        self._ok = True
        # Environment.schedule adds the delay to now; an absolute instant needs the queue
        heappush(env._queue, (at_s, priority, next(env._eid), self))  # noqa: SLF001


class Rearmable(Event):
    """One event fired again and again, each time at an absolute instant given to
    :meth:`arm`, with one callback: what a ``Timeout`` per firing would do (the same
    queue entry ``(now + delay, NORMAL, eid)``, so the same order among simultaneous
    events) without allocating an event and a callback list each time."""

    def __init__(self, env, callback) -> None:
        self.env = env
        self._callbacks = (callback,)
        self.callbacks = None
        self._value = None
        self._ok = True

    def arm(self, delay_s: float) -> None:
        """Fire ``delay_s`` after now (at ``now + delay_s``, rounded as ``Timeout`` does)."""
        env = self.env
        self.callbacks = self._callbacks
        heappush(env._queue, (env._now + delay_s, NORMAL, next(env._eid), self))  # noqa: SLF001


class TimerDriven:
    """Mixin: subclasses set ``self.env``, ``self._timer = None``, ``self._priority``
    (:func:`replica_priority`) and ``self._on_timer_callbacks = (self._on_timer,)``, and
    implement ``_finish()`` and ``_boundary()``."""

    __slots__ = ()

    def _start_timer_at(self, at_s: float) -> None:
        old = self._timer
        if old is not None:
            old.callbacks = _CANCELLED  # superseded by a cut
        self._timer = _At(self.env, at_s, self._priority, self._on_timer_callbacks)

    def _on_timer(self, timer) -> None:
        if timer is not self._timer:
            return  # cancelled timers run no callback; a guard for settle()'s cleared timer
        self._timer = None
        self._finish()
        self._boundary()
