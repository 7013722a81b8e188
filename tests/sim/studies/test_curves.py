"""Capacity curves (`dcsim curves`): the formulas worked by hand from a point's step time,
and one published max-throughput point predicted within its chip's band."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleets.catalog_io import load_catalog
from sim.cli import app
from sim.studies.curves import chip_curve, frontier

CAT = load_catalog()
ROOT = Path(__file__).resolve().parents[3]


def test_per_gpu_cost_and_power_columns_follow_from_the_step_time():
    t = chip_curve(CAT, "llama-3.1-70b", "h100-sxm", 1000, 1000, precision="fp8", tpot_slo_s=0.05, utilisation=0.5)
    rent = {r["key"]: float(r["rental_usd_per_accelerator_hour"]) for r in csv.DictReader(open(ROOT / "fleets/data/ownership.csv"))}
    acc = CAT.accelerator("h100-sxm")
    for _, r in t.sample(5, random_state=1).iterrows():
        per_gpu = r["batch"] / (r["tpot_s"] * r["gpus"])  # b / (TPOT · GPUs)
        assert r["tokens_per_s_per_gpu"] == pytest.approx(per_gpu)
        assert r["tokens_per_s_per_user"] == pytest.approx(1 / r["tpot_s"])
        assert r["usd_per_1m_output_tokens"] == pytest.approx(rent["h100-sxm"] / (per_gpu * 3600) * 1e6)
        gpu_mw = (8 * acc.tdp_w + acc.node_overhead_w) / 8 * 1.56 / 1e6  # node at full load / 8 GPUs x PUE 1.56
        assert r["tokens_per_s_per_mw"] == pytest.approx(per_gpu * 0.5 / gpu_mw)
        assert r["meets_tpot_slo"] == (r["tpot_s"] <= 0.05)
        assert r["tokens_per_s_per_gpu_lo"] == pytest.approx(per_gpu * (1 - acc.efficiency_band_pct / 100))


def test_frontier_trades_per_user_speed_for_throughput():
    f = frontier(chip_curve(CAT, "llama-3.1-70b", "b200", 1000, 1000))
    speed, per_gpu = f["tokens_per_s_per_user"].to_numpy(), f["tokens_per_s_per_gpu"].to_numpy()
    assert (speed[1:] > speed[:-1]).all() and (per_gpu[1:] < per_gpu[:-1]).all()


def test_published_llama_70b_h200_max_throughput_within_band():
    """TensorRT-LLM perf-overview (github.com/NVIDIA/TensorRT-LLM docs/source/performance/
    perf-overview.md @00f37686aa85): Llama 3.3 70B, H200, TP1, FP8, ISL 1000 / OSL 1000,
    trtllm-bench at infinite request rate: 2,909 output tokens/s per GPU. Llama 3.3 70B has
    Llama 3.1 70B's architecture (same config: 80 layers, hidden 8192, 8 KV heads). The
    max-throughput point is the curve's highest tokens/s per GPU at TP1. This table is
    among `dcsim validate`'s calibration data, so the check is in-sample."""
    t = chip_curve(CAT, "llama-3.1-70b", "h200", 1000, 1000, precision="fp8", tp=1)
    band = CAT.accelerator("h200").efficiency_band_pct
    assert t["tokens_per_s_per_gpu"].max() == pytest.approx(2909.0, rel=band / 100)


def test_cli_writes_the_table_csv_and_chart(tmp_path):
    res = CliRunner().invoke(app, ["curves", "--model", "llama-3.1-70b", "--chips", "h200,mi300x",
                                   "--tpot-slo-ms", "50", "--out", str(tmp_path / "c")])
    assert res.exit_code == 0, res.output
    assert "h200" in res.output and "mi300x" in res.output and "tok/s per GPU (band)" in res.output
    assert all(len(line) <= 120 for line in res.output.splitlines() if not line.startswith("dcsim: "))  # not the notes
    assert (tmp_path / "c" / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert {"h200", "mi300x"} == {r["accelerator"] for r in csv.DictReader(open(tmp_path / "c" / "curves.csv"))}


def test_cli_refuses_an_unknown_chip_without_writing(tmp_path):
    res = CliRunner().invoke(app, ["curves", "--model", "llama-3.1-70b", "--chips", "h900", "--out", str(tmp_path / "c")])
    assert res.exit_code == 2 and "h900" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "c").exists()
