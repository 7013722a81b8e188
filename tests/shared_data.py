"""Where the shared data lives, and how a test that needs it behaves without it.

The traces and reference tables live outside the repository, in ``<repo>/../shared/data``.
A test that needs a file FAILS when it is missing and the ``CI`` environment variable is
set (CI must have the data), and is skipped otherwise (a developer clone may not).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
TRACES = SHARED_DATA / "traces"


def require_file(path: Path) -> Path:
    """Return ``path`` if it exists; otherwise fail under CI, skip elsewhere."""
    if not path.is_file():
        message = f"shared data file missing: {path}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path
