"""``dcsim validate``: fit η_c, η_m per accelerator on MLPerf calibration points, then
report the model's error on every expressible point.

Phases (each a pure function; the CLI does the I/O):

1. :func:`sim.studies.calibration.read_points` — headline points, unexpressed points with reasons.
2. :func:`fit_factors` — per accelerator with calibration points, bounded least squares
   (``scipy.optimize.least_squares``, trust-region reflective) on
   ``log(predicted / measured)`` over its calibration points, from the Vidur H100
   values (0.688, 0.877) for every chip, within [:data:`ETA_MIN`, 1]. The same two factors
   serve every model on that chip. A factor whose residuals do not depend on it (e.g. η_m
   when only compute-bound SDXL points calibrate a chip) keeps its start value and is
   marked ``not identifiable``.
3. :func:`validate` — predict every point with the fitted catalog; error % = 100 ·
   (predicted − measured) / measured.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from fleets.catalog import Catalog

from fleets.catalog_io import load_catalog
from sim.studies.calibration import Point, assign_groups, read_points
from sim.studies.mlperf import predict

START = (0.688, 0.877)  # Vidur H100 η_c, η_m (fleets/vidur_efficiency.py)
ETA_MIN = 0.02
DIFF_STEP = 0.03  # relative finite-difference step: simulated throughput is piecewise smooth
IDENTIFIABLE_MIN = 0.02  # |∂ log prediction / ∂ log η| below this on every point: not identifiable
GROUPS = ("calibration", "held-out")


@dataclass
class Validation:
    """Everything ``dcsim validate`` reports."""

    points: pd.DataFrame  # one row per expressible point, with group, predicted and error %
    factors: pd.DataFrame  # one row per fitted accelerator
    unexpressed: pd.DataFrame  # points dcsim cannot express, with the reason
    summary: pd.DataFrame  # median / max |error| per group × model × accelerator × scenario


def with_factors(catalog: Catalog, factors: dict[str, tuple[float, float]]) -> Catalog:
    """A copy of ``catalog`` whose accelerators ``factors`` keys have (η_c, η_m) replaced."""
    accs = dict(catalog.accelerators)
    for key, (eta_c, eta_m) in factors.items():
        accs[key] = dataclasses.replace(accs[key], compute_efficiency=float(eta_c), bandwidth_efficiency=float(eta_m))
    return Catalog(accelerators=accs, models=catalog.models)


def _log_errors(points: list[Point], catalog: Catalog) -> np.ndarray:
    return np.array([np.log(predict(p, catalog)[0] / p.measured) for p in points])


def fit_accelerator(key: str, points: list[Point], catalog: Catalog) -> dict:
    """Fit (η_c, η_m) of accelerator ``key`` to ``points`` (its calibration points)."""
    def residuals(x: np.ndarray) -> np.ndarray:
        return _log_errors(points, with_factors(catalog, {key: tuple(x)}))

    result = least_squares(residuals, np.array(START), bounds=([ETA_MIN, ETA_MIN], [1.0, 1.0]),
                           method="trf", diff_step=DIFF_STEP, x_scale=np.array(START))
    sensitivity = np.abs(result.jac * np.array(result.x)).max(axis=0)  # d log pred / d log η
    eta = [float(v) if s >= IDENTIFIABLE_MIN else START[i] for i, (v, s) in enumerate(zip(result.x, sensitivity))]
    return {
        "accelerator": key, "compute_efficiency": round(eta[0], 3), "bandwidth_efficiency": round(eta[1], 3),
        "compute_identifiable": bool(sensitivity[0] >= IDENTIFIABLE_MIN),
        "bandwidth_identifiable": bool(sensitivity[1] >= IDENTIFIABLE_MIN),
        "calibration_points": len(points), "rms_log_error": float(np.sqrt(np.mean(result.fun ** 2))),
        "points": "; ".join(p.point for p in points),
        "sources": "; ".join(p.source.split(" @")[0].split(" ", 1)[-1] for p in points),
    }


def fit_factors(points: list[Point], groups: dict[str, str], catalog: Catalog) -> pd.DataFrame:
    """One row per accelerator with calibration points (see module docstring)."""
    by_acc: dict[str, list[Point]] = {}
    for p in points:
        if groups[p.point] == "calibration":
            by_acc.setdefault(p.accelerator, []).append(p)
    return pd.DataFrame([fit_accelerator(k, v, catalog) for k, v in sorted(by_acc.items())])


def factors_dict(factors: pd.DataFrame) -> dict[str, tuple[float, float]]:
    return {r.accelerator: (r.compute_efficiency, r.bandwidth_efficiency) for r in factors.itertuples()}


def _predict_all(points: list[Point], groups: dict[str, str], catalog: Catalog) -> pd.DataFrame:
    rows = []
    for p in points:
        predicted, layout = predict(p, catalog)
        rows.append({
            "point": p.point, "source": p.source, "group": groups[p.point], "system": p.system,
            "accelerator": p.accelerator, "count": p.count, "model": p.model, "benchmark": p.benchmark,
            "scenario": p.scenario, "metric": p.metric, "unit": p.unit, "precision": p.precision,
            "tp": layout.tp, "replicas": layout.replicas, "measured": p.measured,
            "predicted": predicted, "error_pct": 100.0 * (predicted - p.measured) / p.measured,
        })
    return pd.DataFrame(rows)


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Median and max |error| (%) per group × model × accelerator × scenario."""
    t = table.assign(abs_error_pct=table["error_pct"].abs())
    out = (t.groupby(["group", "model", "accelerator", "scenario"], sort=True)["abs_error_pct"]
           .agg(points="count", median_abs_error_pct="median", max_abs_error_pct="max").reset_index())
    out["group"] = pd.Categorical(out["group"], categories=list(GROUPS), ordered=True)
    return out.sort_values(["group", "model", "accelerator", "scenario"]).reset_index(drop=True)


def validate(data_path: str | Path, catalog: Catalog | None = None) -> Validation:
    """Fit on the calibration subset, then predict every expressible point.

    Raises:
        UserError: the data file is missing or malformed.
    """
    catalog = catalog or load_catalog()
    points, unexpressed = read_points(data_path)
    groups = assign_groups(points)
    factors = fit_factors(points, groups, catalog)
    table = _predict_all(points, groups, with_factors(catalog, factors_dict(factors)))
    return Validation(points=table, factors=factors, unexpressed=unexpressed, summary=summarize(table))
