"""One hypothesis profile for the whole suite (tests/conftest.py): derandomized under CI,
and no test module overriding that choice or the deadline on its own."""

from __future__ import annotations

import os
import re
from pathlib import Path

from hypothesis import settings

TESTS = Path(__file__).resolve().parent


def test_the_loaded_profile_follows_ci():
    assert settings.default.derandomize == bool(os.environ.get("CI"))
    assert settings.default.deadline is None


def test_no_module_sets_derandomize_or_deadline_itself():
    offenders = [str(p.relative_to(TESTS)) for p in TESTS.rglob("*.py")
                 if p.name != "conftest.py" and p != Path(__file__)
                 and re.search(r"\b(derandomize|deadline)=(?!=)", p.read_text(encoding="utf-8"))]  # a keyword argument
    assert not offenders
