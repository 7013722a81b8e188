"""Storage tiers and the time to load model weights through them.

A replica's weights come from a *storage* tier (local NVMe, network storage) into host
memory, then over the *host link* (PCIe, NVLink-C2C) into HBM. The tiers' read rates are
rows of ``fleets/data/storage_tiers.csv``, each with its source, date and status; GB/s
there are decimal (1e9 bytes/s).

Two ways a loader uses the tiers (:func:`load_time_s`):

- staged (``pipelined=False``): the whole file is read into host memory, then copied to
  the GPUs: ``bytes / storage_bw + bytes_per_gpu / link_bw`` (a plain safetensors load);
- pipelined: chunks stream through both tiers at once and the slower one sets the pace:
  ``max(bytes / storage_bw, bytes_per_gpu / link_bw)`` (ServerlessLLM's multi-tier
  loader, OSDI 2024, arXiv 2401.14351).

A model already in host memory (a host-cache hit) only crosses the host link.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from pathlib import Path

from sim.errors import UserError

STORAGE_CSV = Path(__file__).resolve().parent / "data" / "storage_tiers.csv"
TIERS = ("storage", "host_link")
PER = ("drive", "node", "gpu")
GIGA = 1e9


@dataclass(frozen=True)
class StorageTier:
    """One row of ``storage_tiers.csv``: ``read_bytes_per_s`` per ``per`` (a drive, a
    node or a GPU), with its source and status."""

    key: str
    tier: str
    read_bytes_per_s: float
    per: str
    source: str
    status: str


@functools.lru_cache(maxsize=2)
def storage_tiers(path: Path = STORAGE_CSV) -> dict[str, StorageTier]:
    """The tiers by key.

    Raises:
        UserError: a row with an unknown tier or ``per`` word, or a read rate that is not
            a positive number (naming the file, the row and the field)."""
    tiers = {}
    with open(path, newline="", encoding="utf-8") as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            where = f"{path}:{line} ({row.get('key')})"
            if row["tier"] not in TIERS or row["per"] not in PER:
                raise UserError(f"{where}: tier must be one of {TIERS} and per one of {PER}")
            try:
                rate = float(row["read_gbps"]) * GIGA
            except ValueError:
                raise UserError(f"{where}: read_gbps must be a number of GB/s") from None
            if not rate > 0:
                raise UserError(f"{where}: read_gbps must be > 0")
            tiers[row["key"]] = StorageTier(row["key"], row["tier"], rate, row["per"], row["source"], row["status"])
    return tiers


def tier(key: str, kind: str) -> StorageTier:
    """The tier ``key``, which must be of ``kind`` (``storage`` or ``host_link``).

    Raises:
        UserError: unknown key or wrong kind, naming the allowed keys."""
    tiers = storage_tiers()
    allowed = sorted(k for k, t in tiers.items() if t.tier == kind)
    if key not in tiers or tiers[key].tier != kind:
        raise UserError(f"unknown {kind} tier '{key}'; allowed: {', '.join(allowed)}")
    return tiers[key]


def storage_rate(t: StorageTier, gpus: int, nodes: int, devices: int) -> float:
    """Bytes/s a replica of ``gpus`` accelerators on ``nodes`` nodes reads from storage
    tier ``t``: a drive's rate × ``devices`` drives per node, a node's rate, or a GPU's
    rate × ``gpus``; node rates add over the nodes the replica spans."""
    if t.per == "drive":
        return t.read_bytes_per_s * devices * nodes
    if t.per == "node":
        return t.read_bytes_per_s * nodes
    return t.read_bytes_per_s * gpus


def load_time_s(weight_bytes: float, storage_bytes_per_s: float | None, link_bytes_per_s: float, gpus: int,
                pipelined: bool) -> float:
    """Seconds to bring ``weight_bytes`` (a replica's whole copy, sharded evenly over
    ``gpus`` accelerators, each behind its own host link of ``link_bytes_per_s``) into
    HBM; ``storage_bytes_per_s`` None: the bytes are already in host memory."""
    link_s = weight_bytes / gpus / link_bytes_per_s
    if storage_bytes_per_s is None:
        return link_s
    storage_s = weight_bytes / storage_bytes_per_s
    return max(storage_s, link_s) if pipelined else storage_s + link_s
