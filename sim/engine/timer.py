"""Timeout-driven replicas: the plumbing shared by every replica state machine.

A replica acts on one pending timer at a time. To end its current work earlier it moves
that timer (a cut). Every replica timer of one environment lives in one
:class:`ReplicaClock`: an indexed binary heap ordered by (instant, priority), in typed
arrays, where moving or cancelling a timer is a sift in place. SimPy's queue holds a
single entry for the clock, at its earliest timer's (instant, priority); when SimPy pops
it the clock runs that replica (``_fired``: it finishes the work in flight, ``_finish``,
and decides what to do next at the boundary, ``_boundary``) and arms the next. Replica
priorities are unique and above every other event's, so events pop in exactly the order
one SimPy entry per timer gave (the implementation this replaced, kept as the reference
in ``tests/sim/engine/test_replica_clock.py``), while SimPy's queue stays a few entries
long whatever the fleet size.

When the clock's earliest timer changes, its SimPy entry is superseded: SimPy cannot take
one event out of its queue, so the old entry stays there with its callbacks emptied. The
cancelled entries are counted per environment (:class:`StaleTimers`) and, once they are
at least a quarter of SimPy's queue, removed all at once (filter + heapify, O(queue), so
O(1) amortised per cancellation); :func:`sim.engine.run.events_processed` does not count
the removed ones. Removing them changes no result: they run nothing, and every live entry
keeps its unique ``(instant, priority, eid)`` key, so the pop order is the same.

Timers are scheduled at an absolute instant (not ``now + delay``, whose rounding depends
on when the timer was set) and with a priority of their own, so fast and exact mode
process simultaneous events in the same order: at one instant SimPy's urgent events come
first, then ordinary timeouts (arrivals, hand-offs, the sampler, run control) in the
order they were created, then replica boundaries in replica order (pool index, then
replica index). Without it a tie between two replicas freeing a slot at the same instant
went to whichever had set its timer first, which differs between the modes.
"""

from __future__ import annotations

from array import array
from heapq import heapify, heappush

from simpy.events import NORMAL, Event

from sim.engine.indexed_heap import IndexedHeap
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


class ReplicaClock(IndexedHeap):
    """Every replica timer of one environment, in one indexed heap ordered by (instant,
    priority), with a single entry in SimPy's queue: the earliest timer's (module
    docstring). One per environment: :func:`replica_clock`.

    A replica owns one slot (:meth:`register`) and has at most one pending timer:
    :meth:`schedule` sets or moves it (a cut), :meth:`cancel` drops it. Instants and
    priorities live in typed arrays (C doubles and int64 in the compiled build,
    ``timer.pxd``), so the heap order is decided without Python objects.
    """

    __slots__ = ("env", "owners", "times", "prios", "armed", "armed_time", "armed_prio", "_callbacks", "_stale")

    def __init__(self, env) -> None:
        self.env = env
        self.owners: list = []
        self.times = array("d")  # per slot: the instant of its pending timer
        self.prios = array("q")  # per slot: its SimPy priority (replica_priority)
        self.armed = None  # the _At in SimPy's queue standing for the earliest timer
        self.armed_time = 0.0
        self.armed_prio = 0
        self._callbacks = (self._fire,)
        self._stale = stale_timers(env)
        self._init_heap(0)

    def register(self, owner, priority: int) -> int:
        """A slot for ``owner`` (a :class:`TimerDriven`), whose timers fire at SimPy
        ``priority``; priorities of two slots must differ."""
        slot = len(self.owners)
        if slot == self.capacity:
            capacity = max(16, 2 * self.capacity)
            times, prios = array("d", [0.0]) * capacity, array("q", [0]) * capacity
            for i in range(slot):
                times[i], prios[i] = self.times[i], self.prios[i]
            self.times, self.prios = times, prios
            self._grow_heap(capacity)
        self.owners.append(owner)
        self.prios[slot] = priority
        return slot

    def _before(self, a: int, b: int) -> bool:
        ta, tb = self.times[a], self.times[b]
        return ta < tb or (ta == tb and self.prios[a] < self.prios[b])

    def schedule(self, slot: int, at_s: float) -> None:
        """Set ``slot``'s pending timer to fire at ``at_s`` (replacing any)."""
        top = self.heap[0] if self.size else -1
        self.times[slot] = at_s
        pos = self.where[slot]
        if pos < 0:
            self._push(slot)
        else:
            self._restore(pos)
        if slot == top or self.heap[0] == slot:
            self._arm()

    def cancel(self, slot: int) -> None:
        """Drop ``slot``'s pending timer, if any."""
        pos = self.where[slot]
        if pos >= 0:
            self._remove(pos)
            if pos == 0:
                self._arm()

    def _arm(self) -> None:
        """Make SimPy's queue hold one live entry, at the earliest timer's (instant,
        priority); a superseded entry is cancelled (``_CANCELLED``, purged in bulk)."""
        at_s, priority = 0.0, 0
        if self.size:
            top = self.heap[0]
            at_s, priority = self.times[top], self.prios[top]
            if self.armed is not None and self.armed_time == at_s and self.armed_prio == priority:
                return
        queue = self.env._queue  # noqa: SLF001 - an absolute instant needs the queue itself
        if self.armed is not None:
            self.armed.callbacks = _CANCELLED
            self.armed = None
            stale = self._stale
            stale.pending += 1
            if stale.pending >= PURGE_MIN and 4 * stale.pending >= len(queue):
                _purge(queue, stale)
        if self.size:
            entry = _At()
            entry.callbacks = self._callbacks
            heappush(queue, (at_s, priority, next(self.env._eid), entry))  # noqa: SLF001
            self.armed, self.armed_time, self.armed_prio = entry, at_s, priority

    def _fire(self, entry) -> None:
        """SimPy popped the armed entry: run the earliest timer's owner, then arm the next."""
        if entry is not self.armed:
            return  # cancelled entries run no callback; a guard all the same
        self.armed = None
        slot = self.heap[0]
        self._remove(0)
        owner = self.owners[slot]
        owner._fired()
        if self.armed is None and self.size:
            self._arm()


def replica_clock(env) -> ReplicaClock:
    """The environment's :class:`ReplicaClock` (made on first use)."""
    clock = getattr(env, "dcsim_replica_clock", None)
    if clock is None:
        clock = env.dcsim_replica_clock = ReplicaClock(env)
    return clock


class TimerDriven(RouterFacing):
    """Base of the replica state machines: subclasses set ``self.env``, ``self._timer =
    None``, ``self._clock = replica_clock(env)`` and ``self._slot =
    self._clock.register(self, replica_priority(pool, index))``, and implement
    ``_finish()`` and ``_boundary()``."""

    __slots__ = ()

    def _start_timer_at(self, at_s: float) -> None:
        """Act at ``at_s`` (replacing the pending timer: a cut)."""
        self._timer = True
        self._clock.schedule(self._slot, at_s)

    def _stop_timer(self) -> None:
        self._timer = None
        self._clock.cancel(self._slot)

    def _fired(self) -> None:
        self._timer = None
        self._finish()
        self._boundary()
