"""`dcsim calibrate POINTS --out OVERLAY` and `--catalog OVERLAY` (issue 12, item 7).

A user's own measurements (here: the shared MLPerf MI300X rows, written in the same CSV
format) are fitted into an overlay; the overlay replaces only the efficiency columns of
the chips it names, and a bad overlay is a usage error (exit 2) naming the file."""

from __future__ import annotations

import csv

import pandas as pd
import pytest
from typer.testing import CliRunner

from fleets.catalog_io import apply_overlay, load_catalog, use_overlay
from sim.cli import app
from shared_data import SHARED_DATA, require_file

CALIBRATION = SHARED_DATA / "reference" / "calibration_points.csv"


@pytest.fixture
def mi300x_points(tmp_path):
    raw = pd.read_csv(require_file(CALIBRATION), dtype=str)
    mine = raw[raw["accelerator"].str.contains("MI300X") & (raw["scenario"] == "Offline")]
    path = tmp_path / "mine.csv"
    mine.assign(my_note="extra column, ignored").to_csv(path, index=False)
    return path, mine


def test_calibrate_writes_an_overlay_that_run_sweep_plan_can_use(mi300x_points, tmp_path):
    points, mine = mi300x_points
    overlay = tmp_path / "overlay.csv"
    result = CliRunner().invoke(app, ["calibrate", str(points), "--out", str(overlay), "--quiet"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(overlay.open()))
    assert [r["key"] for r in rows] == ["mi300x"]
    assert rows[0]["efficiency_status"].startswith("calibrated")
    shipped = load_catalog()
    laid = apply_overlay(shipped, overlay)
    acc = laid.accelerator("mi300x")
    assert acc.compute_efficiency == pytest.approx(float(rows[0]["compute_efficiency"]))
    assert acc.bandwidth_efficiency == pytest.approx(float(rows[0]["bandwidth_efficiency"]))
    assert acc.memory_bw_bytes_per_s == shipped.accelerator("mi300x").memory_bw_bytes_per_s  # other columns kept
    assert laid.accelerator("h100-sxm") == shipped.accelerator("h100-sxm")
    # the measured system rows it fitted are named in its report
    assert "in-sample |error|" in result.output
    try:
        use_overlay(overlay)
        assert load_catalog().accelerator("mi300x").compute_efficiency == acc.compute_efficiency
    finally:
        use_overlay(None)
    assert load_catalog().accelerator("mi300x") == shipped.accelerator("mi300x")


def test_a_bad_overlay_is_a_usage_error(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("key,compute_efficiency,warp_factor\nmi300x,0.5,9\n")
    result = CliRunner().invoke(app, ["run", "scenarios/default.yaml", "--catalog", str(bad), "--quiet"])
    assert result.exit_code == 2
    assert "warp_factor" in result.output and "bad.csv" in result.output
    worse = tmp_path / "worse.csv"
    worse.write_text("key,compute_efficiency\nmi300x,1.7\n")
    result = CliRunner().invoke(app, ["run", "scenarios/default.yaml", "--catalog", str(worse), "--quiet"])
    assert result.exit_code == 2 and "compute_efficiency" in result.output
    use_overlay(None)
