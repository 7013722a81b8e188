"""Fit the all-reduce latency model of each scale-up fabric to published measurements.

Model (sim.models.parallelism.allreduce_time_s)::

    t(n, s) = α0 + α1·log2(n) + 2(n−1)/n · s / (η_bus · β)

fitted by non-negative least squares on the relative error (each message size counts alike;
every term is a time, so none may be negative: on PCIe rings the latency grows with the hops
and the fit puts it all in α1) over
the rows of ``fleets/data/reference/collectives/allreduce_latency.csv`` with messages from
:data:`MIN_BYTES` to :data:`MAX_BYTES` (the sizes a decode or prefill TP all-reduce has:
one token of a 4,096-wide model in bf16 is 8 KiB, a 1,536-token prefill chunk of a
16,384-wide model 48 MiB).

SOURCES (file NOTICE.md beside the CSV): NVIDIA's measured TensorRT-LLM custom all-reduce
(the AUTO strategy, CUDA graphs) per system and group size, and vLLM's on Arc Pro B60, from
github.com/ai-dynamo/aiconfigurator ``systems/data/<system>/comm/*/custom_allreduce_perf.parquet``
@095f58a51c4c (Apache-2.0); AMD's aiter custom all-reduce on MI355X TP8 from
github.com/vllm-project/vllm pull 39080 (one group size: α1 cannot be fitted there and is
passed in, see :func:`fit_fabric`).

Run: ``python -m fleets.fabric_fit`` prints every fabric's (α0, α1, η_bus) and errors.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from sim.errors import UserError

DATA = Path(__file__).resolve().parent / "data" / "reference" / "collectives" / "allreduce_latency.csv"
MIN_BYTES = 2048
MAX_BYTES = 64 * 2**20


def measurements(path: Path = DATA) -> pd.DataFrame:
    """The shipped all-reduce measurements (one row per system, group size and message).
    Raises UserError when the file is missing."""
    if not Path(path).is_file():
        raise UserError(f"fabric_fit: file not found: {path}")
    return pd.read_csv(path)


def fit_fabric(rows: pd.DataFrame, link_bw_bytes_per_s: float, alpha_log2_s: float | None = None) -> dict:
    """(α0, α1, η_bus) of one fabric from its ``rows`` (columns num_gpus, message_bytes,
    latency_us), messages within [MIN_BYTES, MAX_BYTES]; ``alpha_log2_s`` fixes α1 when the
    rows hold one group size only.  Returns ``{"alpha0_s", "alpha_log2_s", "bus_efficiency",
    "median_rel_error", "max_rel_error", "groups", "rows"}``.  Raises UserError when no row
    is in range or α1 is not determined."""
    part = rows[(rows["message_bytes"] >= MIN_BYTES) & (rows["message_bytes"] <= MAX_BYTES)]
    if part.empty:
        raise UserError("fabric_fit: no measurement within the fitted message range")
    n = part["num_gpus"].to_numpy(dtype=float)
    t_s = part["latency_us"].to_numpy(dtype=float) * 1e-6
    volume = 2 * (n - 1) / n * part["message_bytes"].to_numpy(dtype=float)
    groups = sorted(int(g) for g in set(n))
    if alpha_log2_s is None and len(groups) < 2:
        raise UserError(f"fabric_fit: one group size ({groups}); pass alpha_log2_s")
    fixed = 0.0 if alpha_log2_s is None else alpha_log2_s * np.log2(n)
    columns = [np.ones_like(n), volume] if alpha_log2_s is not None else [np.ones_like(n), np.log2(n), volume]
    design = np.vstack(columns).T / t_s[:, None]
    coef = nnls(design, 1.0 - fixed / t_s)[0]
    alpha0, per_byte = coef[0], coef[-1]
    alpha1 = alpha_log2_s if alpha_log2_s is not None else coef[1]
    predicted = alpha0 + alpha1 * np.log2(n) + per_byte * volume
    rel = np.abs(predicted / t_s - 1.0)
    return {"alpha0_s": float(alpha0), "alpha_log2_s": float(alpha1),
            "bus_efficiency": float(1.0 / per_byte / link_bw_bytes_per_s),
            "median_rel_error": float(np.median(rel)), "max_rel_error": float(rel.max()),
            "groups": groups, "rows": int(len(part))}


def main(argv: list[str]) -> int:
    """CLI: fit every fabric of the shipped file with the β of a catalog row on that fabric
    (``scaleup_gbps_per_dir``) and, for a fabric measured at one group size, that row's α1."""
    from fleets.catalog_io import load_catalog

    rows_by_fabric = {a.scaleup_fabric: a for a in load_catalog().accelerators.values() if a.scaleup_fabric}
    data = measurements(Path(argv[0]) if argv else DATA)
    for key, rows in data.groupby("fabric", sort=True):
        acc = rows_by_fabric[key]
        fixed = acc.scaleup_latency_log2_s if len(set(rows["num_gpus"])) < 2 else None
        fit = fit_fabric(rows, acc.scaleup_bw_bytes_per_s, fixed)
        print(f"{key:<14} alpha0 {fit['alpha0_s'] * 1e6:6.2f} us  alpha1 {fit['alpha_log2_s'] * 1e6:5.2f} us  "
              f"eta_bus {fit['bus_efficiency']:.3f}  median |err| {fit['median_rel_error']:.0%}  "
              f"max {fit['max_rel_error']:.0%}  groups {fit['groups']}  rows {fit['rows']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
