"""Timeout-driven replicas: the plumbing shared by every replica state machine.

A replica acts on one pending timer at a time (``_timer``). To end its current work
earlier it starts a new timer and cancels the superseded one. SimPy cannot take one event
out of its queue, so a cancelled timer's entry stays there with its callbacks emptied;
the cancelled entries are counted per environment (:class:`StaleTimers`) and, once they
are at least a quarter of SimPy's queue, removed all at once (filter + heapify, O(queue), so
O(1) amortised per cancellation): most are never popped at all, and
:func:`sim.engine.run.events_processed` does not count the removed ones. Removing them
changes no result: they run nothing, and every live entry keeps its unique
``(instant, priority, eid)`` key, so the pop order is the same. When the current timer
fires the replica finishes the work in flight (``_finish``) and decides what to do next
at the boundary (``_boundary``).

Timers are scheduled at an absolute instant (not ``now + delay``, whose rounding depends
on when the timer was set) and with a priority of their own, so fast and exact mode
process simultaneous events in the same order: at one instant SimPy's urgent events come
first, then ordinary timeouts (arrivals, hand-offs, the sampler, run control) in the
order they were created, then replica boundaries in replica order (pool index, then
replica index). Without it a tie between two replicas freeing a slot at the same instant
went to whichever had set its timer first, which differs between the modes.
"""

from __future__ import annotations

from heapq import heapify, heappush

from simpy.events import NORMAL, Event

from sim.engine.request import RouterFacing

from sim.scenario import MAX_REPLICAS_PER_POOL  # replica priorities of two pools never overlap



def replica_priority(pool_index: int, replica_index: int) -> int:
    """SimPy priority of a replica's timers: after every ordinary event at the same
    instant, replicas in (pool, replica) order."""
    return NORMAL + 1 + pool_index * (MAX_REPLICAS_PER_POOL + 1) + replica_index


_CANCELLED = ()  # the callbacks of a cancelled timer: SimPy pops it and runs nothing
PURGE_MIN = 16  # cancelled entries below which the queue is never filtered (a quarter of it above)


class _At:
    """A timer entry in SimPy's queue: all ``Environment.step`` reads of an event is its
    ``callbacks`` (a tuple shared between a replica's timers: nothing appends to them)
    and ``_ok``; a slotted object is cheaper to make than an ``Event`` with a __dict__."""

    __slots__ = ("callbacks",)
    _ok = True
    _value = None


class StaleTimers:
    """Cancelled timers still in one environment's queue (``pending``) and those removed
    from it so far (``purged``). One per environment: :func:`stale_timers`."""

    __slots__ = ("pending", "purged")

    def __init__(self) -> None:
        self.pending = 0
        self.purged = 0


def stale_timers(env) -> StaleTimers:
    """The environment's :class:`StaleTimers` (made on first use)."""
    stale = getattr(env, "dcsim_stale_timers", None)
    if stale is None:
        stale = env.dcsim_stale_timers = StaleTimers()
    return stale


def _purge(queue: list, stale: StaleTimers) -> None:
    """Drop every cancelled entry from SimPy's queue (in place: ``Environment.step``
    holds the list) and restore the heap."""
    live = [entry for entry in queue if entry[3].callbacks is not _CANCELLED]
    stale.purged += len(queue) - len(live)
    stale.pending = 0
    queue[:] = live
    heapify(queue)


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


class TimerDriven(RouterFacing):
    """Mixin: subclasses set ``self.env``, ``self._timer = None``, ``self._priority``
    (:func:`replica_priority`), ``self._stale = stale_timers(env)`` and
    ``self._on_timer_callbacks = (self._on_timer,)``, and implement ``_finish()`` and
    ``_boundary()``."""

    __slots__ = ()

    def _start_timer_at(self, at_s: float) -> None:
        env = self.env
        queue = env._queue  # noqa: SLF001 - an absolute instant needs the queue itself
        old = self._timer
        if old is not None:
            old.callbacks = _CANCELLED  # superseded by a cut
            stale = self._stale
            stale.pending += 1
            if stale.pending >= PURGE_MIN and 4 * stale.pending >= len(queue):
                _purge(queue, stale)
        timer = _At()
        timer.callbacks = self._on_timer_callbacks
        heappush(queue, (at_s, self._priority, next(env._eid), timer))  # noqa: SLF001
        self._timer = timer

    def _on_timer(self, timer) -> None:
        if timer is not self._timer:
            return  # cancelled timers run no callback; a guard for settle()'s cleared timer
        self._timer = None
        self._finish()
        self._boundary()
