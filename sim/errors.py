"""Errors that mean "the user asked for something wrong", as opposed to a bug.

The CLI catches :class:`UserError`, prints its message as one paragraph on stderr and
exits with code 2, without a traceback. Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake in user input: a scenario field, a trace row, a CLI argument.

    The message must name where the mistake is (file, field path or line), the bad
    value, and what is allowed, so the user can fix it without reading code.
    """


class InputError(UserError):
    """A file that cannot be read as the kind of input expected (:mod:`sim.inputs`). The
    message names the file, the line (and column) and what was expected, never the
    file's content."""


class ScenarioError(UserError):
    """A scenario file that does not parse or does not validate."""


class PlacementError(UserError):
    """A pool that cannot be built: model does not fit, TP exceeds the scale-up domain,
    or a rack exceeds its power budget."""


class TraceError(InputError):
    """A trace file that is missing or has a malformed row."""
