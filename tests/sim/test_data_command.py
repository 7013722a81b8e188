"""`dcsim data` lists the optional datasets with their source, sha256, size, the place
dcsim looks and whether the file is there; a run that needs a missing one stops with exit
code 2 and says how to get it; `dcsim validate` defaults to the shipped MLPerf points."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from data_files import REFERENCE, REPO
from sim.cli import DEFAULT_CALIBRATION_DATA, app
from traffic.datasets import ALIBABA_GENAI

OTHER_BYTES = b"not the published trace\n"


def test_validate_defaults_to_the_shipped_precision_bearing_points():
    """Issue 24: the precision-bearing v4.x file and the v5.1 file are the default, with the
    vendor max-throughput table whose long-output rows determine the memory efficiency."""
    assert [p.resolve() for p in DEFAULT_CALIBRATION_DATA] == [
        (REFERENCE / name).resolve() for name in
        ("calibration_points_with_precision.csv", "mlperf_v5.1_points.csv", "trtllm_perf_overview.csv")]
    assert all(p.is_file() for p in DEFAULT_CALIBRATION_DATA)


def test_data_lists_the_optional_dataset_and_its_status(tmp_path):
    result = CliRunner().invoke(app, ["data", "--data-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = result.output
    for part in (f"data:{ALIBABA_GENAI.name}", "github.com/alibaba/clusterdata", "7a6c496", "SoCC 2025",
                 ALIBABA_GENAI.sha256, "2,012,418 bytes", f"looked at {tmp_path / ALIBABA_GENAI.name}",
                 "status    missing", ALIBABA_GENAI.url, "traffic/data/", "fleets/data/reference/"):
        assert part in out, part
    (tmp_path / ALIBABA_GENAI.name).write_bytes(OTHER_BYTES)
    out = CliRunner().invoke(app, ["data", "--data-dir", str(tmp_path)]).output
    assert f"status    wrong file: {len(OTHER_BYTES):,} bytes, expected 2,012,418" in out


def test_data_reads_the_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("DCSIM_DATA_DIR", str(tmp_path))
    out = CliRunner().invoke(app, ["data"]).output
    assert f"optional-data directory: {tmp_path} (from DCSIM_DATA_DIR)" in out


def test_a_run_without_the_optional_trace_fails_cleanly(tmp_path):
    """Exit 2, one message naming the file, its sha256, the download and the directory; no
    traceback, nothing written."""
    env = {"PATH": "/usr/bin:/bin", "DCSIM_DATA_DIR": str(tmp_path / "empty"), "HOME": str(tmp_path)}
    out_dir = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "run", "scenarios/genai-image.yaml", "-q", "--out", str(out_dir)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    for part in (ALIBABA_GENAI.name, ALIBABA_GENAI.sha256, ALIBABA_GENAI.url, str(tmp_path / "empty"),
                 "DCSIM_DATA_DIR", "mkdir -p"):
        assert part in proc.stderr, part
    assert not out_dir.exists()
