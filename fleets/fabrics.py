"""The scale-out fabrics catalog: per-GPU NIC bandwidth and latency of InfiniBand, RoCE and
Ethernet (``fleets/data/fabrics.csv``, every number with its source and a status).

A pool names one with ``scaleout_fabric:``; its accelerators then talk across nodes at
that fabric's figures instead of the accelerator row's default ``scaleout_gbps_per_dir``
and ``scaleout_latency_us`` (:func:`with_fabric`): the prefill-to-decode KV-cache
transfer (:mod:`sim.models.kv_transfer`), pipeline hops across domains and the hand-offs
of pipelines all use them.

CSV units -> SI: GB/s per direction per GPU x 1e9 -> bytes/s; us x 1e-6 -> s.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path

from fleets.catalog import Accelerator
from sim.errors import UserError

FABRICS_CSV = Path(__file__).resolve().parent / "data" / "fabrics.csv"
FABRIC_KINDS = ("infiniband", "roce", "ethernet")


@dataclass(frozen=True, slots=True)
class Fabric:
    """One scale-out fabric: per-GPU NIC bandwidth per direction (bytes/s) and the
    latency of one transfer (s), with the sources and status of each (``fabrics.csv``)."""

    key: str
    name: str
    kind: str
    bw_bytes_per_s: float
    latency_s: float
    status: str
    bandwidth_source: str
    latency_source: str
    notes: str


def _row(row: dict, line: int, path: Path) -> Fabric:
    where = f"{path}:{line}"
    if row["kind"] not in FABRIC_KINDS:
        raise UserError(f"{where}: kind '{row['kind']}' is not one of {', '.join(FABRIC_KINDS)}")
    try:
        bw, latency = float(row["gbps_per_dir_per_gpu"]) * 1e9, float(row["latency_us"]) * 1e-6
    except ValueError:
        raise UserError(f"{where}: gbps_per_dir_per_gpu and latency_us must be numbers") from None
    if not bw > 0 or not latency >= 0:
        raise UserError(f"{where}: gbps_per_dir_per_gpu must be > 0 and latency_us >= 0")
    if not row["bandwidth_source"] or not row["latency_source"] or not row["status"]:
        raise UserError(f"{where}: every fabric row needs a status, a bandwidth_source and a latency_source")
    return Fabric(row["key"], row["name"], row["kind"], bw, latency, row["status"], row["bandwidth_source"],
                  row["latency_source"], row["notes"])


@functools.lru_cache(maxsize=4)
def load_fabrics(path: Path = FABRICS_CSV) -> dict[str, Fabric]:
    """Every fabric of ``path`` by key (cached).

    Raises:
        UserError: a malformed row (naming the file and line)."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {r["key"]: _row(r, i + 2, path) for i, r in enumerate(rows)}


def fabric(key: str, where: str = "") -> Fabric:
    """The fabric ``key``; UserError naming ``where`` and the allowed keys."""
    fabrics = load_fabrics()
    if key not in fabrics:
        raise UserError(f"{where + ': ' if where else ''}unknown scale-out fabric '{key}'; allowed: "
                        f"{', '.join(fabrics)}")
    return fabrics[key]


def with_fabric(accelerator: Accelerator, key: str | None) -> Accelerator:
    """``accelerator`` with the scale-out NIC of fabric ``key`` (unchanged when None)."""
    if key is None:
        return accelerator
    fab = fabric(key)
    return dataclasses.replace(accelerator, scaleout_bw_bytes_per_s=fab.bw_bytes_per_s,
                               scaleout_latency_s=fab.latency_s)
