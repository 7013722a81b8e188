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

The clock never cancels a SimPy entry: it keeps the (instant, priority) keys of its
entries still in SimPy's queue (``pending``, a small heap) and pushes a new one only when
its earliest timer comes before all of them (a cut, or a replica woken now). An entry
whose timer has moved on fires for nothing and the clock arms the earliest timer again;
since every entry's key is at or before the earliest timer's, no timer fires late. After
an interloper fires, the entry of the timer it overtook is still queued and is used as
is: one SimPy event per replica boundary, and nothing to purge.

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
from heapq import heappop, heappush

from simpy.events import NORMAL, Event

from sim.engine.indexed_heap import IndexedHeap
from sim.engine.request import RouterFacing

from sim.scenario import MAX_REPLICAS_PER_POOL  # replica priorities of two pools never overlap



def replica_priority(pool_index: int, replica_index: int) -> int:
    """SimPy priority of a replica's timers: after every ordinary event at the same
    instant, replicas in (pool, replica) order."""
    return NORMAL + 1 + pool_index * (MAX_REPLICAS_PER_POOL + 1) + replica_index


class _At:
    """The clock's entry in SimPy's queue: all ``Environment.step`` reads of an event is its
    ``callbacks`` (a tuple shared by the clock's entries: nothing appends to them) and
    ``_ok``; a slotted object is cheaper to make than an ``Event`` with a __dict__."""

    __slots__ = ("callbacks",)
    _ok = True
    _value = None


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

    __slots__ = ("env", "owners", "times", "prios", "pending", "_callbacks")

    def __init__(self, env) -> None:
        self.env = env
        self.owners: list = []
        self.times = array("d")  # per slot: the instant of its pending timer
        self.prios = array("q")  # per slot: its SimPy priority (replica_priority)
        self.pending: list[tuple[float, int]] = []  # heap of the keys of this clock's entries in SimPy's queue
        self._callbacks = (self._fire,)
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
        pos = self.where[slot]
        self.times[slot] = at_s
        if pos < 0:
            self._push(slot)
        else:
            self._restore(pos)
        if self.heap[0] == slot:
            self._arm()

    def cancel(self, slot: int) -> None:
        """Drop ``slot``'s pending timer, if any (its SimPy entry, if it has one, will
        fire for nothing)."""
        pos = self.where[slot]
        if pos >= 0:
            self._remove(pos)

    def _arm(self) -> None:
        """Keep an entry in SimPy's queue at or before the earliest timer: push one at its
        (instant, priority) unless an entry of this clock already comes no later."""
        if not self.size:
            return
        top = self.heap[0]
        key = (self.times[top], self.prios[top])
        if self.pending and self.pending[0] <= key:
            return
        heappush(self.pending, key)
        entry = _At()
        entry.callbacks = self._callbacks
        heappush(self.env._queue, (key[0], key[1], next(self.env._eid), entry))  # noqa: SLF001

    def _fire(self, _entry) -> None:
        """SimPy popped this clock's earliest entry: if the earliest timer is due at its
        key, run that replica; then arm the next."""
        key = heappop(self.pending)
        if self.size:
            slot = self.heap[0]
            if self.times[slot] == key[0] and self.prios[slot] == key[1]:
                self._remove(0)
                owner = self.owners[slot]
                owner._fired()
        self._arm()


def replica_clock(env) -> ReplicaClock:
    """The environment's :class:`ReplicaClock` (made on first use)."""
    clock = getattr(env, "dcsim_replica_clock", None)
    if clock is None:
        clock = env.dcsim_replica_clock = ReplicaClock(env)
    return clock


class TimerDriven(RouterFacing):
    """Base of the replica state machines: subclasses set ``self.env``, ``self._clock =
    replica_clock(env)`` and ``self._slot = self._clock.register(self,
    replica_priority(pool, index))``, and implement ``_finish()`` and ``_boundary()``."""

    __slots__ = ()

    def _start_timer_at(self, at_s: float) -> None:
        """Act at ``at_s`` (replacing the pending timer: a cut)."""
        self._clock.schedule(self._slot, at_s)

    def _stop_timer(self) -> None:
        self._clock.cancel(self._slot)

    def _timer_pending(self) -> bool:
        """Has this replica a timer on the clock? (The clock took it off before ``_fired``.)"""
        return self._clock.where[self._slot] >= 0

    def _fired(self) -> None:
        self._finish()
        self._boundary()
