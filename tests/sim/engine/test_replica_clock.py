"""The replica clock (:class:`sim.engine.timer.ReplicaClock`: every replica timer in one
indexed heap, one SimPy entry for the earliest) against the implementation it replaced,
kept here as the reference: one SimPy queue entry per timer at (instant, priority), a cut
cancelling the superseded entry.

Generated scripts: a few replicas with distinct priorities, initial timers, and at every
firing (of a replica timer, or of an ordinary SimPy timeout at NORMAL priority, as an
arrival would be) a drawn list of actions: set another replica's timer (often at the
same instant: ties), move one (a cut), or cancel one. Both implementations must fire the
same replicas at the same instants in the same order.
"""

from __future__ import annotations

from heapq import heappush

import simpy
from hypothesis import given
from hypothesis import strategies as st
from simpy.events import NORMAL

from sim.engine.timer import ReplicaClock, TimerDriven

DELAYS = [0.0, 0.0, 0.5, 1.0, 2.5]


class _Entry:
    __slots__ = ("callbacks",)
    _ok = True
    _value = None


class NativeTimers:
    """The reference: each pending timer is its own SimPy entry."""

    def __init__(self, env) -> None:
        self.env, self.owners, self.prios, self.pending = env, [], [], {}

    def register(self, owner, priority: int) -> int:
        self.owners.append(owner)
        self.prios.append(priority)
        return len(self.owners) - 1

    def schedule(self, slot: int, at_s: float) -> None:
        self.cancel(slot)
        entry = _Entry()
        entry.callbacks = [lambda event, s=slot: self._fire(s, event)]
        self.pending[slot] = entry
        heappush(self.env._queue, (at_s, self.prios[slot], next(self.env._eid), entry))  # noqa: SLF001

    def cancel(self, slot: int) -> None:
        old = self.pending.pop(slot, None)
        if old is not None:
            old.callbacks = []

    def _fire(self, slot: int, entry) -> None:
        if self.pending.get(slot) is entry:
            del self.pending[slot]
            self.owners[slot]._fired()


class Owner(TimerDriven):
    """A replica that logs its firings and runs the script's actions for each."""

    def __init__(self, env, timers, index: int, priority: int, script: dict, log: list) -> None:
        self.env = env
        self._timer = None
        self.timers, self.index, self.script, self.log = timers, index, script, log
        self.fired = 0
        self.slot = timers.register(self, priority)

    def _fired(self) -> None:
        self.log.append((self.env.now, self.index))
        act(self.env, self.timers, self.script.get((self.index, self.fired), []))
        self.fired += 1


def act(env, timers, actions) -> None:
    for kind, slot, delay in actions:
        if kind == "cancel":
            timers.cancel(slot)
        else:
            timers.schedule(slot, env.now + delay)


def run(timers_class, script: dict) -> list:
    env = simpy.Environment()
    timers = timers_class(env)
    log: list = []
    for i, priority in enumerate(script["priorities"]):
        Owner(env, timers, i, NORMAL + 1 + priority, script["firings"], log)
    for slot, at_s in script["initial"]:
        timers.schedule(slot, at_s)
    for k, (at_s, actions) in enumerate(script["arrivals"]):
        def arrival(_event, actions=actions, k=k):
            log.append((env.now, f"arrival {k}"))
            act(env, timers, actions)
        env.timeout(at_s).callbacks.append(arrival)
    env.run(until=50.0)
    return log


@st.composite
def scripts(draw) -> dict:
    n = draw(st.integers(1, 6))
    action = st.tuples(st.sampled_from(["set", "set", "cancel"]), st.integers(0, n - 1), st.sampled_from(DELAYS))
    actions = st.lists(action, max_size=3)
    return {
        "priorities": draw(st.permutations(range(n))),
        "initial": draw(st.lists(st.tuples(st.integers(0, n - 1), st.sampled_from([0.0, 1.0, 2.0])), max_size=n)),
        "firings": draw(st.dictionaries(st.tuples(st.integers(0, n - 1), st.integers(0, 5)), actions, max_size=20)),
        "arrivals": draw(st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0]), actions), max_size=5)),
    }


@given(script=scripts())
def test_the_clock_fires_what_one_simpy_entry_per_timer_fired(script):
    assert run(ReplicaClock, script) == run(NativeTimers, script)


def test_a_cut_to_the_same_instant_keeps_priority_order():
    """Two replicas set for the same instant fire by priority whatever order they were
    set in, after an ordinary event at that instant, and a moved timer fires once."""
    script = {"priorities": [1, 0], "initial": [(0, 1.0), (1, 1.0)],
              "firings": {}, "arrivals": [(1.0, [("set", 0, 0.0)])]}
    log = run(ReplicaClock, script)
    assert log == [(1.0, "arrival 0"), (1.0, 1), (1.0, 0)]
    assert log == run(NativeTimers, script)
