"""Small sweep files shared by the sweep and planner-CSV tests (written into tmp dirs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]

BASE = {
    "name": "tiny",
    "seed": 5,
    "duration_s": 20,
    "warmup_s": 4,
    "drain_s": 60,
    "workloads": {
        "chat": {
            "kind": "autoregressive",
            "model": "llama-3-8b",
            "arrival": {"kind": "poisson", "rate_per_s": 4},
            "prompt_tokens": {"kind": "lognormal", "median": 400, "sigma": 0.8, "max": 4000},
            "output_tokens": {"kind": "lognormal", "median": 150, "sigma": 0.8, "max": 2000},
            "slo": {"ttft_s": 1.0, "tpot_s": 0.1},
        }
    },
    "fleets": [
        {"name": "h100", "pools": [{"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 1}]},
        {"name": "b200", "pools": [{"name": "chat", "accelerator": "b200", "serves": ["chat"], "replicas": 1}]},
    ],
}


def write_sweep(directory: Path, grid: dict, seeds=2, fleets="all", set_: dict | None = None) -> Path:
    """A base scenario file and a sweep file naming it; returns the sweep file."""
    (directory / "base.yaml").write_text(yaml.safe_dump(BASE, sort_keys=False), encoding="utf-8")
    sweep = {"base": "base.yaml", "grid": grid, "fleets": fleets, "seeds": seeds}
    if set_:
        sweep["set"] = set_
    path = directory / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False), encoding="utf-8")
    return path


def cli_command(*args) -> list[str]:
    return [sys.executable, "-m", "sim.cli", *map(str, args)]


def cli_env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def run_cli(*args, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cli_command(*args), capture_output=True, text=True, cwd=REPO, env=cli_env(), timeout=timeout)
