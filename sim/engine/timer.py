"""Timeout-driven replicas: the plumbing shared by every replica state machine.

A replica acts on one pending timeout at a time (``_timer``). To end its current work
earlier it simply starts a new timer; the superseded one still fires (SimPy cannot
cancel an event) but is recognised and ignored. When the current timer fires the
replica finishes the work in flight (``_finish``) and decides what to do next at the
boundary (``_boundary``).
"""

from __future__ import annotations


class TimerDriven:
    """Mixin: subclasses set ``self.env`` and ``self._timer = None`` and implement
    ``_finish()`` and ``_boundary()``."""

    def _start_timer(self, delay: float) -> None:
        timer = self.env.timeout(delay)
        timer.callbacks.append(self._on_timer)
        self._timer = timer

    def _on_timer(self, timer) -> None:
        if timer is not self._timer:
            return  # superseded by a cut
        self._timer = None
        self._finish()
        self._boundary()
