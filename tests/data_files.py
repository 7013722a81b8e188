"""Where the tests find data: the copies shipped in the repository, and the optional
datasets (:mod:`traffic.datasets`) that live outside it.

Shipped files (:data:`TRACES`, :data:`REFERENCE`) are always there, so tests read them
directly. An optional dataset is looked for where dcsim looks (``DCSIM_DATA_DIR``, else
``~/.local/share/dcsim``); a test that needs one FAILS when it is missing or is not the
published file and the ``CI`` environment variable is set (``.ci/run`` exports
``DCSIM_DATA_DIR``), and is skipped otherwise (a developer clone may not have it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from traffic.datasets import OPTIONAL_DATASETS, check, data_dir, how_to_get

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO / "traffic" / "data"
REFERENCE = REPO / "fleets" / "data" / "reference"
GENAI_TRACE = "alibaba_genai_lora_request_trace.csv"


def optional_file(name: str) -> Path:
    """The optional dataset ``name`` in the optional-data directory, checked against its
    registered size and sha256; otherwise fail under CI, skip elsewhere."""
    dataset = OPTIONAL_DATASETS[name]
    directory, chosen = data_dir()
    problem = check(dataset, directory)
    if problem is not None:
        message = how_to_get(dataset, directory, chosen, problem)
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return directory / name


def require_scenario_data(scenario: Path) -> None:
    """Every optional dataset that the shipped ``scenario`` file names (by file name),
    through :func:`optional_file`: skipped, or failed under CI, when one is missing."""
    text = Path(scenario).read_text(encoding="utf-8")
    for name in OPTIONAL_DATASETS:
        if name in text:
            optional_file(name)
