"""Running the ``dcsim`` command line in-process, for the tests of refused input."""

from __future__ import annotations

import contextlib
import io

from sim.cli import main


def dcsim(args: list) -> tuple[int, str, str]:
    """``sim.cli.main(args)`` in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    return code, out.getvalue(), err.getvalue()
