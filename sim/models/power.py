"""Power drawn by a pool: idle power plus a dynamic part that follows what the chips do.

Per accelerator, over a window in which a replica is busy a fraction ``b`` of the time::

    a_c   = achieved FLOP/s while busy / (peak FLOP/s x compute_efficiency)     (<= 1)
    a_m   = achieved bytes/s while busy / (peak HBM bytes/s x bandwidth_efficiency) (<= 1)
    P_acc = idle_w + (tdp_w - idle_w) x b x min(1, a_c + w_m x a_m)
    P_host (per node) = node_overhead_w x (h + (1 - h) x b x min(1, a_c + w_m x a_m))

``a_c`` = 1 when a phase runs at the compute roofline the perf model uses (prefill,
diffusion denoising), so compute-bound work draws TDP; memory-bound decode (``a_c`` small,
``a_m`` near 1) draws ``idle + w_m x (TDP - idle)``. Coefficients per accelerator type
(``idle_w``, ``w_m`` = ``memory_bound_dynamic_fraction``, ``h`` = ``host_idle_fraction``)
are in ``fleets/data/power.csv`` with their sources: ML.ENERGY Benchmark v3.0 H100 draws
(~300 W at batch 1 decode, ~600 W at batch 128), measured idle power, and the phase
behaviour reported by Splitwise (Patel et al., ISCA 2024) and POLCA (Patel et al.,
ASPLOS 2024: inference power stays below TDP except in prompt phases). A type without a
row uses the h100-sxm fractions scaled to its TDP (status ``assumed``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pandas as pd

import fleets
from fleets.catalog import Accelerator

POWER_CSV = Path(fleets.__file__).parent / "data" / "power.csv"
ACCELERATORS_CSV = POWER_CSV.with_name("accelerators.csv")
REFERENCE_TYPE = "h100-sxm"


@dataclass(frozen=True, slots=True)
class PowerCoefficients:
    """Power model inputs of one accelerator type (W, fractions) and their status."""

    idle_w: float
    memory_bound_dynamic_fraction: float
    host_idle_fraction: float
    status: str


@lru_cache(maxsize=4)
def load_power_table(path: Path = POWER_CSV) -> dict[str, dict]:
    """Rows of ``fleets/data/power.csv`` keyed by accelerator key."""
    return {r["key"]: r for r in pd.read_csv(path).to_dict("records")}


@lru_cache(maxsize=4)
def reference_tdp_w(path: Path = ACCELERATORS_CSV) -> float:
    """TDP (W) of :data:`REFERENCE_TYPE` as shipped in ``fleets/data/accelerators.csv``
    (700 W for the H100 SXM; the source is in that row), the denominator of the
    reference idle fraction."""
    return float(pd.read_csv(path).set_index("key").loc[REFERENCE_TYPE, "tdp_w"])


def coefficients(acc: Accelerator, table: dict[str, dict] | None = None) -> PowerCoefficients:
    """The power coefficients of ``acc`` (its own row, else the reference type's
    fractions scaled to its TDP, marked ``assumed``)."""
    table = load_power_table() if table is None else table
    row = table.get(acc.key)
    if row is not None:
        return PowerCoefficients(float(row["idle_w"]), float(row["memory_bound_dynamic_fraction"]),
                                 float(row["host_idle_fraction"]), str(row["status"]))
    ref = table[REFERENCE_TYPE]
    idle_fraction = float(ref["idle_w"]) / reference_tdp_w()  # h100-sxm TDP (fleets/data/accelerators.csv)
    return PowerCoefficients(idle_fraction * acc.tdp_w, float(ref["memory_bound_dynamic_fraction"]),
                             float(ref["host_idle_fraction"]), "assumed")


def dynamic_fraction(coeff: PowerCoefficients, compute_activity: float, memory_activity: float) -> float:
    """min(1, a_c + w_m x a_m) with the activities clipped to [0, 1]."""
    a_c = min(max(compute_activity, 0.0), 1.0)
    a_m = min(max(memory_activity, 0.0), 1.0)
    return min(1.0, a_c + coeff.memory_bound_dynamic_fraction * a_m)


def pool_power_w(acc: Accelerator, accelerators: int, node_share: float, busy_fraction: float,
                 compute_activity: float, memory_activity: float,
                 coeff: PowerCoefficients | None = None) -> tuple[float, float]:
    """Mean (accelerator W, host W) of a pool of ``accelerators`` chips holding
    ``node_share`` nodes, busy ``busy_fraction`` of the time at the given activities."""
    coeff = coeff or coefficients(acc)
    load = min(max(busy_fraction, 0.0), 1.0) * dynamic_fraction(coeff, compute_activity, memory_activity)
    chip_w = coeff.idle_w + (acc.tdp_w - coeff.idle_w) * load
    host_w = acc.node_overhead_w * (coeff.host_idle_fraction + (1.0 - coeff.host_idle_fraction) * load)
    return accelerators * chip_w, node_share * host_w


def activities(acc: Accelerator, precision: str, accelerators_per_replica: int, busy_s: float,
               flops: float, bytes_moved: float) -> tuple[float, float]:
    """(a_c, a_m) of one replica's chips while busy, from the FLOP and bytes it did over
    ``busy_s`` replica-seconds (see the module docstring); (0, 0) when never busy."""
    if busy_s <= 0:
        return 0.0, 0.0
    peak_c = acc.peak_flops(precision) * acc.compute_efficiency * accelerators_per_replica
    peak_m = acc.memory_bw_bytes_per_s * acc.bandwidth_efficiency * accelerators_per_replica
    return flops / (busy_s * peak_c), bytes_moved / (busy_s * peak_m)
