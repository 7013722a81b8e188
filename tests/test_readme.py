"""The README stays true: its two set-up commands come first, and its worked example is
exactly what `dcsim run scenarios/default.yaml` prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_starts_with_the_two_commands():
    first_block = re.search(r"```sh\n(.*?)```", README, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.splitlines() if line.strip()]
    assert commands == ["make run", "make test"]


@pytest.mark.slow  # the default scenario through the CLI
def test_worked_example_matches_the_default_run():
    shown = re.search(r"```text\n(.*?)```", README, re.S).group(1).rstrip("\n")
    out = subprocess.run(
        [sys.executable, "-m", "sim.cli", "run", "scenarios/default.yaml"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.rstrip("\n")
    assert out == shown, "README worked example is stale: paste the new `dcsim run` output"
