"""Derive H100 roofline efficiencies (eta_c, eta_m) and NVLink all-reduce latency from
Vidur's measured operator times.

SOURCE: microsoft/vidur @7d47513 (2024-11-19), ``data/profiling/compute/h100/meta-llama/
Llama-2-70b-hf/mlp.csv`` and ``data/profiling/network/h100_dgx/all_reduce.csv``, copied to
``../shared/data/reference/vidur_profiling/``, now shipped in
``fleets/data/reference/vidur_profiling/`` (MIT; NOTICE.md there). Times in ms, one layer,
one GPU, fp16.

Method (documented so the catalog numbers can be reproduced)::

  GEMMs  = attn_pre_proj, attn_post_proj, mlp_up_proj, mlp_down_proj at TP=1 (whole,
           unsharded shapes; TP>1 shards are smaller and more launch-bound).
  eta_c  = sum(2*M*K*N) / sum(median time) / 989e12 over rows with num_tokens >= 2048
           (compute-bound regime).  989 TFLOP/s = H100 SXM dense BF16/FP16 (NVIDIA, via
           ai-dynamo/aiconfigurator h100_sxm.yaml @095f58a51c4c).
  eta_m  = sum(K*N*2 bytes) / sum(median time) / 3.35e12 over rows with num_tokens <= 8
           (weight-streaming regime; activation bytes < 0.1 % of weight bytes).
  all-reduce latency = median over rows of the per-row median time for the 8-GPU group
           and messages <= 64 KiB (latency-bound regime).

Run: ``python -m fleets.vidur_efficiency PATH_TO_mlp.csv [PATH_TO_all_reduce.csv]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from sim.errors import UserError

H100_PEAK_BF16_FLOPS = 989e12        # NVIDIA H100 SXM dense BF16 (see module docstring)
H100_MEMORY_BW_BYTES_PER_S = 3.35e12  # NVIDIA H100 SXM HBM3 (same source)
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
LARGE_MIN_TOKENS = 2048
SMALL_MAX_TOKENS = 8
FP16_BYTES = 2
SMALL_MESSAGE_MAX_BYTES = 65536
ALL_REDUCE_GROUP = 8


def gemm_shapes(row: pd.Series, tp: int) -> dict[str, tuple[float, float]]:
    """(K, N) of each GEMM's weight matrix per TP shard, from Vidur's mlp_impl.py layout."""
    d, f = row["n_embd"], row["n_expanded_embd"]
    head_dim = d / row["n_head"]
    qkv = (row["n_head"] + 2 * row["n_kv_head"]) * head_dim
    up = 2 * f if bool(row["use_gated_mlp"]) else f
    return {
        "attn_pre_proj": (d, qkv / tp),
        "attn_post_proj": (row["n_head"] * head_dim / tp, d),
        "mlp_up_proj": (d, up / tp),
        "mlp_down_proj": (f / tp, d),
    }


def _totals(rows: pd.DataFrame, tp: int) -> tuple[float, float, float]:
    """Total FLOP, weight bytes and seconds of the four GEMMs over ``rows``."""
    flop = weight_bytes = seconds = 0.0
    for op, (k, n) in gemm_shapes(rows.iloc[0], tp).items():
        t_s = rows[f"time_stats.{op}.median"] * 1e-3
        flop += float((2 * rows["num_tokens"] * k * n).sum())
        weight_bytes += k * n * FP16_BYTES * len(rows)
        seconds += float(t_s.sum())
    return flop, weight_bytes, seconds


A100_PEAK_BF16_FLOPS = 312e12  # NVIDIA A100 SXM4 80GB datasheet (dense BF16); Vidur's A100 assumed 80 GB SXM
A100_MEMORY_BW_BYTES_PER_S = 2.039e12  # same datasheet (HBM2e)


def efficiencies(mlp_csv: str | Path, tp: int = 1, peak_flops: float = H100_PEAK_BF16_FLOPS,
                 memory_bw_bytes_per_s: float = H100_MEMORY_BW_BYTES_PER_S) -> tuple[float, float, dict]:
    """(eta_c, eta_m, details) from a Vidur ``mlp.csv`` of a GPU with the given peaks
    (default H100 SXM); dimensionless fractions.  The A100 tables with the A100 peaks give
    the generation-to-generation change of kernel efficiency (small: see the tests).

    Raises UserError if the file is missing or lacks rows for ``tp`` in either regime.
    """
    path = Path(mlp_csv)
    if not path.is_file():
        raise UserError(f"vidur_efficiency: file not found: {path}")
    data = pd.read_csv(path)
    data = data[data["num_tensor_parallel_workers"] == tp]
    large = data[data["num_tokens"] >= LARGE_MIN_TOKENS]
    small = data[data["num_tokens"] <= SMALL_MAX_TOKENS]
    if large.empty or small.empty:
        raise UserError(f"vidur_efficiency: {path}: no rows for tp={tp}; allowed: 1, 2, 4, 8")
    flop, _, t_large_s = _totals(large, tp)
    _, weight_bytes, t_small_s = _totals(small, tp)
    eta_c = flop / t_large_s / peak_flops
    eta_m = weight_bytes / t_small_s / memory_bw_bytes_per_s
    details = {"tp": tp, "large_rows": len(large), "small_rows": len(small),
               "achieved_flops": float(flop / t_large_s),
               "achieved_bytes_per_s": float(weight_bytes / t_small_s)}
    return eta_c, eta_m, details


def all_reduce_latency_s(all_reduce_csv: str | Path, group: int = ALL_REDUCE_GROUP) -> float:
    """Small-message all-reduce time in seconds for a ``group``-GPU NVLink group."""
    path = Path(all_reduce_csv)
    if not path.is_file():
        raise UserError(f"vidur_efficiency: file not found: {path}")
    data = pd.read_csv(path)
    rows = data[(data["num_workers"] == group) & (data["size"] <= SMALL_MESSAGE_MAX_BYTES)]
    if rows.empty:
        raise UserError(f"vidur_efficiency: {path}: no rows for num_workers={group}")
    return float(rows["time_stats.all_reduce.median"].median()) * 1e-3


NVLINK4_BW_BYTES_PER_S = 450e9  # H100 SXM NVLink 4, per direction (catalog row h100-sxm)


def all_reduce_fit(all_reduce_csv: str | Path, link_bw_bytes_per_s: float = NVLINK4_BW_BYTES_PER_S) -> dict:
    """Fit ``t(n, s) = α0 + α1·log2(n) + 2(n−1)/n · s / (η_bus · link_bw)`` to every
    single-node row (``devices_per_node == num_workers``) of a Vidur ``all_reduce.csv``.

    Median time per (group size n, message s bytes) is fitted by least squares on the
    relative error (each size counts alike from 2 KiB to 64 MiB).  Returns
    ``{"alpha0_s", "alpha_log2_s", "bus_efficiency", "median_rel_error", "max_rel_error",
    "groups"}``.  Raises UserError if the file is missing or has no single-node rows.
    """
    path = Path(all_reduce_csv)
    if not path.is_file():
        raise UserError(f"vidur_efficiency: file not found: {path}")
    data = pd.read_csv(path)
    data = data[data["devices_per_node"] == data["num_workers"]]
    if data.empty:
        raise UserError(f"vidur_efficiency: {path}: no single-node all-reduce rows")
    med = data.groupby(["num_workers", "size"])["time_stats.all_reduce.median"].median().reset_index()
    n = med["num_workers"].to_numpy(dtype=float)
    size = med["size"].to_numpy(dtype=float)
    t_s = med["time_stats.all_reduce.median"].to_numpy() * 1e-3
    design = np.vstack([np.ones_like(n), np.log2(n), 2 * (n - 1) / n * size]).T / t_s[:, None]
    coef = np.linalg.lstsq(design, np.ones_like(t_s), rcond=None)[0]
    rel = np.abs(design @ coef - 1.0)
    return {"alpha0_s": float(coef[0]), "alpha_log2_s": float(coef[1]),
            "bus_efficiency": float(1.0 / coef[2] / link_bw_bytes_per_s),
            "median_rel_error": float(np.median(rel)), "max_rel_error": float(rel.max()),
            "groups": sorted(int(g) for g in set(n))}


def main(argv: list[str]) -> int:
    """CLI: print eta_c, eta_m (and all-reduce latency when a second path is given)."""
    if not argv:
        print("usage: python -m fleets.vidur_efficiency MLP_CSV [ALL_REDUCE_CSV]", file=sys.stderr)
        return 2
    eta_c, eta_m, details = efficiencies(argv[0])
    print(f"compute_efficiency {eta_c:.3f}")
    print(f"bandwidth_efficiency {eta_m:.3f}")
    print(f"details {details}")
    if len(argv) > 1:
        print(f"small-message 8-GPU all-reduce {all_reduce_latency_s(argv[1]) * 1e6:.1f} us")
        fit = all_reduce_fit(argv[1])
        print(f"scaleup_latency_us {fit['alpha0_s'] * 1e6:.1f}")
        print(f"scaleup_latency_log2_us {fit['alpha_log2_s'] * 1e6:.1f}")
        print(f"scaleup_bus_efficiency {fit['bus_efficiency']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
