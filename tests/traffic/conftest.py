"""Fixtures for traffic tests: the shared public traces and their independent summary.

The traces live outside the repository, in ``<repo>/../shared/data``. A test that needs
one FAILS when it is missing and the ``CI`` environment variable is set (CI must have the
data), and is skipped otherwise (a developer clone may not).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from shared_data import SHARED_DATA, TRACES, require_file  # noqa: F401  (re-exported)


@pytest.fixture
def azure_conv_path() -> Path:
    return require_file(TRACES / "AzureLLMInferenceTrace_conv.csv")


@pytest.fixture
def azure_code_path() -> Path:
    return require_file(TRACES / "AzureLLMInferenceTrace_code.csv")


@pytest.fixture
def mooncake_path() -> Path:
    return require_file(TRACES / "mooncake_conversation_trace.jsonl")


@pytest.fixture
def trace_summary() -> pd.DataFrame:
    """shared/data/traces/trace_summary.csv, indexed by trace name (computed independently).

    ``rows`` is made numeric: one row (BurstGPT) holds a description there, not a count.
    """
    summary = pd.read_csv(require_file(TRACES / "trace_summary.csv")).set_index("trace")
    summary["rows"] = pd.to_numeric(summary["rows"], errors="coerce")
    return summary


@pytest.fixture(name="require_file")
def require_file_fixture():
    """The :func:`require_file` helper, for tests that name other shared files."""
    return require_file
