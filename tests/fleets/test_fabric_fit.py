"""Collective latency per fabric and group size (issue 24, item 3): the constants of
sim.models.parallelism.FABRICS are what fleets/fabric_fit.py gives on the shipped
measurements, every catalog row carries its fabric's numbers, and the fitted latency
agrees with the raw small-message rows (read here with csv, not through the fit)."""

from __future__ import annotations

import csv
import math
from collections import defaultdict

import pytest

from data_files import REFERENCE
from fleets.catalog_io import load_catalog
from fleets.fabric_fit import fit_fabric, main, measurements
from sim.models.parallelism import FABRICS, allreduce_time_s, scaleup_link

RAW = REFERENCE / "collectives" / "allreduce_latency.csv"
CAT = load_catalog()


@pytest.mark.parametrize("key", sorted(set(measurements()["fabric"])))
def test_fabric_constants_are_the_fit_of_the_shipped_measurements(key):
    rows = measurements()
    rows = rows[rows["fabric"] == key]
    f = FABRICS[key]
    fixed = f.alpha_log2_s if rows["num_gpus"].nunique() < 2 else None
    fit = fit_fabric(rows, f.link_bw_bytes_per_s, fixed)
    assert fit["alpha0_s"] == pytest.approx(f.alpha0_s, abs=0.006e-6)
    assert fit["alpha_log2_s"] == pytest.approx(f.alpha_log2_s, abs=0.006e-6)
    assert fit["bus_efficiency"] == pytest.approx(f.bus_efficiency, abs=6e-4)
    assert fit["median_rel_error"] == pytest.approx(f.median_rel_error, abs=0.006)


def _small_message_median_us() -> dict:
    """Median measured latency of messages <= 8 KiB per (fabric, group), from the raw CSV."""
    values = defaultdict(list)
    with open(RAW, newline="") as handle:
        for row in csv.DictReader(handle):
            if int(row["message_bytes"]) <= 8192:
                values[(row["fabric"], int(row["num_gpus"]))].append(float(row["latency_us"]))
    return {k: sorted(v)[len(v) // 2] for k, v in values.items()}


@pytest.mark.parametrize("key,group", sorted(_small_message_median_us()))
def test_small_message_latency_matches_the_raw_rows(key, group):
    """α(n) = α0 + α1·log2(n) against the measured median of the <= 8 KiB rows of that
    group: NVLink within 25 %, PCIe rings (latency ~ hops, fitted in log2 n) within 40 %. The old one-fit-for-
    every-fabric α(8) was 14.2 + 3 x 5.1 = 29.5 us, against 3.5 us measured on HGX H100."""
    f = FABRICS[key]
    alpha_us = (f.alpha0_s + f.alpha_log2_s * math.log2(group)) * 1e6
    measured = _small_message_median_us()[(key, group)]
    assert alpha_us == pytest.approx(measured, rel=0.40 if key.startswith("pcie") else 0.25)


def test_every_catalog_row_carries_its_fabric_numbers():
    for acc in CAT.accelerators.values():
        if not acc.scaleup_fabric:
            continue
        f = FABRICS[acc.scaleup_fabric]
        assert acc.scaleup_latency_s == pytest.approx(f.alpha0_s, abs=0.006e-6), acc.key
        assert acc.scaleup_latency_log2_s == pytest.approx(f.alpha_log2_s, abs=0.006e-6), acc.key
        assert acc.scaleup_bus_efficiency == pytest.approx(f.bus_efficiency, abs=6e-4), acc.key
        assert acc.scaleup_fabric in acc.network_source


def test_decode_all_reduce_on_nvlink5_and_pcie_by_hand():
    """A batch-64 decode all-reduce of Llama-3.1-70B activations: 64 x 8,192 x 2 B =
    1,048,576 B at TP8. HGX B200 (nvlink5-hgx8): 3.73 + 0.75 x 3 us + 1.75 x 1,048,576 /
    (0.462 x 900e9) = 10.39 us. RTX PRO 6000 over PCIe Gen5 (pcie5-x16): 0 + 7.58 x 3 us +
    1.75 x 1,048,576 / (0.422 x 64e9) = 90.68 us: nine times longer."""
    b200 = allreduce_time_s(scaleup_link(CAT.accelerator("b200")), 1_048_576, 8)
    rtx = allreduce_time_s(scaleup_link(CAT.accelerator("rtx-pro-6000-bse")), 1_048_576, 8)
    assert b200 == pytest.approx((3.73 + 0.75 * 3) * 1e-6 + 1.75 * 1_048_576 / (0.462 * 900e9), rel=1e-3)
    assert rtx == pytest.approx(7.58 * 3 * 1e-6 + 1.75 * 1_048_576 / (0.422 * 64e9), rel=1e-3)


def test_cli_prints_every_fabric(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(key in out for key in set(measurements()["fabric"]))
