"""`dcsim calibrate POINTS --out OVERLAY` and `--catalog OVERLAY` (issue 12, item 7).

A user's own measurements (here: the shipped MLPerf MI300X rows, written in the same CSV
format) are fitted into an overlay; the overlay replaces only the efficiency columns of
the chips it names, and a bad overlay is a usage error (exit 2) naming the file."""

from __future__ import annotations

import csv

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from fleets.catalog_io import apply_overlay, load_catalog, use_overlay
from sim.cli import app
from sim.studies.calibration import Point
from sim.studies.efficiency_fit import _identifiable, _Layout
from data_files import REFERENCE

CALIBRATION = REFERENCE / "calibration_points.csv"  # shipped (fleets/data/reference/NOTICE.md)


@pytest.fixture
def mi300x_points(tmp_path):
    raw = pd.read_csv(CALIBRATION, dtype=str)
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
    # four points of one model fix one combination of (η_c, η_m): η_m is not fitted but
    # kept from the shipped catalog, and the overlay says so
    assert "eta_m cross-stack" in rows[0]["efficiency_status"]
    assert float(rows[0]["bandwidth_efficiency"]) == pytest.approx(load_catalog().accelerator("mi300x").bandwidth_efficiency)
    assert "shipped catalog's value" in rows[0]["efficiency_source"]
    # η_m still transferred: the shipped band stays with it
    assert float(rows[0]["efficiency_band_pct"]) == load_catalog().accelerator("mi300x").efficiency_band_pct
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
    assert "bad.csv:1:3" in result.output and "not a column" in result.output  # by position: the header is not repeated
    worse = tmp_path / "worse.csv"
    worse.write_text("key,compute_efficiency\nmi300x,1.7\n")
    result = CliRunner().invoke(app, ["run", "scenarios/default.yaml", "--catalog", str(worse), "--quiet"])
    assert result.exit_code == 2 and "compute_efficiency" in result.output
    use_overlay(None)


def _point(chip: str) -> Point:
    return Point(point=f"p-{chip}", system="", mlperf_accelerator="", accelerator=chip, count=1, benchmark="",
                 model="llama-2-70b", scenario="Offline", metric="", unit="", measured=1.0, precision="fp8",
                 division="closed", source="")


@pytest.mark.parametrize("block, expected", [
    ([[0.94, 0.06]], (True, False)),  # one point: one combination, the larger factor fitted
    ([[0.25, 0.75]], (False, True)),
    ([[0.75, 0.25], [0.75, 0.25], [1.5, 0.5]], (True, False)),  # rows in a fixed ratio: rank 1
    ([[1.0, 0.0], [0.4, 0.6]], (True, True)),  # compute-bound and mixed points: rank 2
    ([[1.0, 0.01], [0.9, 0.0]], (True, False)),  # η_m never matters (< IDENTIFIABLE_MIN)
])
def test_a_factor_is_fitted_only_where_the_chips_points_determine_it(block, expected):
    """Identifiability is a rank question: by hand, a 1-row block or proportional rows have
    rank 1 (singular values s, 0), two independent rows rank 2."""
    points = [_point("x") for _ in block]
    jac = np.hstack([np.array(block), np.zeros((len(block), 1))])  # chip x's (η_c, η_m) columns, then t_0
    assert _identifiable(points, _Layout(("x",), ()), jac) == {"x": expected}


def test_an_overlay_that_calibrates_a_chip_clears_its_band(tmp_path):
    """Regression: a blank band in an overlay row was dropped as 'not given', so a chip the
    user fully calibrated kept the shipped ±50 % band."""
    overlay = tmp_path / "overlay.csv"
    overlay.write_text("key,compute_efficiency,bandwidth_efficiency,efficiency_status,efficiency_band_pct\n"
                       "mi300x,0.3,0.4,calibrated: eta_c calibrated; eta_m calibrated (dcsim calibrate),\n")
    assert load_catalog().accelerator("mi300x").efficiency_band_pct is not None
    assert apply_overlay(load_catalog(), overlay).accelerator("mi300x").efficiency_band_pct is None


def test_calibrated_source_names_the_rounds_of_the_points_used(mi300x_points, tmp_path):
    """The provenance names the MLPerf round the fitted points come from (read here from
    the raw rows' notes), and claims none for points that name no round (own measurements)."""
    import re

    points, mine = mi300x_points
    rounds = sorted(set(re.findall(r"MLPerf Inference (v[\d.]+)", " ".join(mine["notes"].fillna("")))))
    assert rounds  # the shared rows say which round they are from
    own = tmp_path / "own.csv"
    mine.assign(notes="", source="our lab, 2026-11").to_csv(own, index=False)
    for path, out, claim in ((points, "mlperf.csv", f"MLPerf Inference {'/'.join(rounds)} Offline point(s)"),
                             (own, "own-overlay.csv", "eta_c fitted on 4 Offline point(s)")):
        result = CliRunner().invoke(app, ["calibrate", str(path), "--out", str(tmp_path / out), "--quiet"])
        assert result.exit_code == 0, result.output
        source = next(csv.DictReader((tmp_path / out).open()))["efficiency_source"]
        assert claim in source
    assert "MLPerf Inference v" not in source  # the own points' overlay
