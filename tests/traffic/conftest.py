"""Fixtures for traffic tests: the public traces shipped in ``traffic/data`` and their
independent summary (``trace_summary.csv``, computed outside dcsim)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from data_files import TRACES


@pytest.fixture
def azure_conv_path() -> Path:
    return TRACES / "AzureLLMInferenceTrace_conv.csv"


@pytest.fixture
def azure_code_path() -> Path:
    return TRACES / "AzureLLMInferenceTrace_code.csv"


@pytest.fixture
def mooncake_path() -> Path:
    return TRACES / "mooncake_conversation_trace.jsonl"


@pytest.fixture
def trace_summary() -> pd.DataFrame:
    """traffic/data/trace_summary.csv, indexed by trace name (computed independently).

    ``rows`` is made numeric: one row (BurstGPT) holds a description there, not a count.
    """
    summary = pd.read_csv(TRACES / "trace_summary.csv").set_index("trace")
    summary["rows"] = pd.to_numeric(summary["rows"], errors="coerce")
    return summary
