"""``dcsim validate``: fit the efficiency model on MLPerf Offline results, cross-validate it
leave-one-accelerator-out, and transfer it to every chip without results.

The efficiency model (what achievable compute and bandwidth depend on):

- per calibrated chip, η_c (fraction of the dense peak FLOP/s at the run's precision) and
  η_m (fraction of the memory bandwidth);
- one fixed per-iteration overhead t_0 shared by every chip (scheduling, kernel launch,
  sampling: software, not silicon), added to every iteration and denoising step;
- transfer rule for a chip without results, decided from what is known before it ships:
  its vendor's serving stack (TensorRT-LLM, ROCm/vLLM, XLA, ...) carries over within a
  vendor, so η is the geometric mean over the calibrated chips of the same vendor
  (``same-stack``); a chip of a vendor with no calibrated chip gets the geometric mean of
  every calibrated chip (``cross-stack``).  Memory technology and generation are not
  separate terms: the calibrated chips span HBM3 (H100, MI300X) and HBM3e (H200) of one
  generation, too few to fit them, and Vidur's A100 and H100 GEMM tables give kernel
  efficiencies within 15 % of each other (generation matters little at kernel level;
  ``tests/fleets/test_vidur_efficiency.py``).  The ``pooled`` alternative (ignore the
  vendor) is cross-validated beside the chosen rule so the choice is visible in the
  output: LOAO median |error| 10.9 % (LLM) and 7.2 % (SDXL) for the vendor rule against
  20.8 % and 15.8 % pooled.
- no separate attention-kernel efficiency: the shared data hold no H100 attention profile
  and the MLPerf points do not separate attention from the linear layers.

Phases (pure functions; the CLI does the I/O):

1. :func:`sim.studies.calibration.read_points`: headline points and unexpressed points with
   reasons.
2. :func:`fit_model`: bounded least squares (``scipy.optimize.least_squares``) on
   log(predicted / measured) over Offline points, with the closed-form saturated rate
   (:func:`sim.studies.mlperf.analytic_offline_rate`).  A chip whose points do not depend
   on one of its factors (|∂ log prediction / ∂ log η| < :data:`IDENTIFIABLE_MIN` on every
   point, e.g. η_m of a chip with only compute-bound SDXL results) gets that factor by the
   transfer rule; so does the less influential factor of a chip whose points fix only a
   combination of the two (collinear Jacobian columns: one point, or points of one model),
   and the other factor is then refitted given it (:func:`_identifiable`).
3. :func:`leave_one_out`: for each calibrated chip, fit on all the other chips, transfer
   to it, predict its Offline points: the honest accuracy on a chip the fit never saw.
4. :func:`validate`: the in-sample fit, the LOAO table, every point predicted with the
   shipped (or fitted) catalog, and the transferred catalog rows.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from fleets.catalog import Catalog
from fleets.catalog_io import load_catalog
from sim.errors import UserError
from sim.studies.calibration import Point, read_points
from sim.studies.mlperf import BENCHMARKS, predict

ETA_MIN = 0.02
OVERHEAD_MAX_S = 0.02
START_ETA = 0.5
START_OVERHEAD_S = 1e-3
DIFF_STEP = 1e-3
IDENTIFIABLE_MIN = 0.02
IDENTIFIABLE_RANK_MIN = 0.05
RULES = ("same-stack", "cross-stack")


@dataclass(frozen=True, slots=True)
class Factors:
    """Efficiency factors of one chip and where they come from."""

    compute_efficiency: float
    bandwidth_efficiency: float
    compute_status: str  # calibrated | same-stack | cross-stack
    bandwidth_status: str
    compute_from: tuple[str, ...]  # chip keys (transferred) or point ids (calibrated)
    bandwidth_from: tuple[str, ...]

    @property
    def status(self) -> str:
        """calibrated (both fitted), transferred (both transferred) or partly calibrated."""
        if "spec-only" in (self.compute_status, self.bandwidth_status):
            return "spec-only"
        calibrated = [s == "calibrated" for s in (self.compute_status, self.bandwidth_status)]
        if all(calibrated):
            return "calibrated"
        return "transferred" if not any(calibrated) else "calibrated (eta_c), transferred (eta_m)" if calibrated[0] \
            else "calibrated (eta_m), transferred (eta_c)"


@dataclass(frozen=True, slots=True)
class Fit:
    """A fitted efficiency model: factors per chip (calibrated and transferred), t_0."""

    factors: dict[str, Factors]
    overhead_s: float
    rms_log_error: float
    points: int
    pooled: bool = False
    rounds: dict[str, str] = dataclasses.field(default_factory=dict)  # point id -> MLPerf round ("" unknown)


@dataclass
class Validation:
    """Everything ``dcsim validate`` reports."""

    points: pd.DataFrame  # one row per expressible point, predicted with the fitted catalog
    factors: pd.DataFrame  # one row per catalog accelerator: η's, status, source
    unexpressed: pd.DataFrame  # points dcsim cannot express, with the reason
    summary: pd.DataFrame  # in-sample median / max |error| per model × accelerator × scenario
    loao: pd.DataFrame  # leave-one-accelerator-out per held-out chip × model × scenario
    loao_points: pd.DataFrame  # one row per held-out point
    fit: Fit | None = None


def with_fit(catalog: Catalog, fit: Fit) -> Catalog:
    """A copy of ``catalog`` with every chip of ``fit`` given its (η_c, η_m) and t_0."""
    accs = dict(catalog.accelerators)
    for key, f in fit.factors.items():
        if key in accs:
            accs[key] = dataclasses.replace(
                accs[key], compute_efficiency=float(f.compute_efficiency),
                bandwidth_efficiency=float(f.bandwidth_efficiency), iteration_overhead_s=float(fit.overhead_s))
    return Catalog(accelerators=accs, models=catalog.models)


def _geomean(values: list[float]) -> float:
    return float(math.exp(sum(math.log(v) for v in values) / len(values)))


def transfer(catalog: Catalog, fitted: dict[str, tuple[float, float, bool, bool]],
             sources: dict[str, tuple[str, ...]], pooled: bool = False) -> dict[str, Factors]:
    """Factors for every catalog chip: fitted where identifiable, else the transfer rule.

    ``fitted``: chip -> (η_c, η_m, η_c identifiable, η_m identifiable); ``sources``: chip ->
    calibration point ids.  ``pooled`` ignores the vendor (the alternative rule)."""
    out = {}
    for key, acc in catalog.accelerators.items():
        parts = []
        for i in (0, 1):
            if key in fitted and fitted[key][2 + i]:
                parts.append((fitted[key][i], "calibrated", sources[key]))
                continue
            donors = {k: v for k, v in fitted.items() if v[2 + i] and k != key}
            same = {k: v for k, v in donors.items() if catalog.accelerators[k].vendor == acc.vendor}
            chosen, rule = (same, "same-stack") if same and not pooled else (donors, "cross-stack")
            if not chosen:  # nothing calibrated this factor anywhere: keep the row's value
                parts.append(((acc.compute_efficiency, acc.bandwidth_efficiency)[i], "spec-only", ()))
                continue
            parts.append((_geomean([v[i] for v in chosen.values()]), rule, tuple(sorted(chosen))))
        out[key] = Factors(parts[0][0], parts[1][0], parts[0][1], parts[1][1], parts[0][2], parts[1][2])
    return out


def _log_errors(points: list[Point], catalog: Catalog) -> np.ndarray:
    return np.array([math.log(predict(p, catalog)[0] / p.measured) for p in points])


def fit_model(points: list[Point], catalog: Catalog, pooled: bool = False) -> Fit:
    """Fit η_c, η_m per chip and the shared t_0 on the Offline ``points``; transfer the rest.

    Raises:
        ValueError: no Offline point to fit.
    """
    offline = [p for p in points if p.scenario == "Offline"]
    if not offline:
        raise ValueError("no Offline point to fit")
    chips = sorted({p.accelerator for p in offline})
    index = {k: i for i, k in enumerate(chips)}

    free = {k: (True, True) for k in chips}  # pass 1: every factor of every chip is free
    result = _least_squares(offline, catalog, index, free)
    free = _identifiable(offline, index, result.jac)
    if any(not all(f) for f in free.values()):  # pass 2: unidentified factors by the transfer rule
        result = _least_squares(offline, catalog, index, free)
    fitted, sources = {}, {}
    for k, i in index.items():
        fitted[k] = (math.exp(result.x[2 * i]), math.exp(result.x[2 * i + 1]), *free[k])
        sources[k] = tuple(p.point for p in offline if p.accelerator == k)
    rms = float(np.sqrt(np.mean(result.fun ** 2)))
    return Fit(transfer(catalog, fitted, sources, pooled), float(result.x[-1]), rms, len(offline), pooled,
               {p.point: p.round for p in offline})


def _least_squares(offline: list[Point], catalog: Catalog, index: dict[str, int], free: dict[str, tuple[bool, bool]]):
    """Bounded least squares of log(predicted / measured) over the log η's of every chip
    and t_0. A factor marked not free is not a parameter: it takes the transfer rule's
    value from the chips whose factor is free, at every evaluation, so the free factors
    are fitted given it (its column in x stays at the start value)."""
    n = len(index)

    def residuals(x: np.ndarray) -> np.ndarray:
        fitted = {k: (math.exp(x[2 * i]), math.exp(x[2 * i + 1]), *free[k]) for k, i in index.items()}
        fit = Fit(transfer(catalog, fitted, {k: () for k in index}), float(x[-1]), 0.0, len(offline))
        return _log_errors(offline, with_fit(catalog, fit))

    mask = np.array([free[k][j] for k in index for j in (0, 1)] + [True])
    x0 = np.array([math.log(START_ETA)] * (2 * n) + [START_OVERHEAD_S])
    lo = np.array([math.log(ETA_MIN)] * (2 * n) + [0.0])
    hi = np.array([0.0] * (2 * n) + [OVERHEAD_MAX_S])
    scale = np.array([1.0] * (2 * n) + [START_OVERHEAD_S])

    def reduced(z: np.ndarray) -> np.ndarray:
        x = x0.copy()
        x[mask] = z
        return residuals(x)

    result = least_squares(reduced, x0[mask], bounds=(lo[mask], hi[mask]), method="trf",
                           diff_step=DIFF_STEP, x_scale=scale[mask])
    x = x0.copy()
    x[mask] = result.x
    jac = np.zeros((len(offline), len(x0)))
    jac[:, mask] = result.jac
    result.x, result.jac = x, jac
    return result


def _identifiable(offline: list[Point], index: dict[str, int], jac: np.ndarray) -> dict[str, tuple[bool, bool]]:
    """Which of each chip's (η_c, η_m) its own points determine.

    A factor on which no point of the chip depends (max |∂ log prediction / ∂ log η| <
    :data:`IDENTIFIABLE_MIN`) is not determined. When both matter but the chip's points
    move with them in a fixed ratio (the chip's two Jacobian columns are collinear:
    smallest / largest singular value < :data:`IDENTIFIABLE_RANK_MIN`, e.g. one point, or
    points of one model only, as MI300X's four Llama-2-70B results), the points determine
    one combination only: the more influential factor is fitted and the other transferred."""
    out = {}
    for k, i in index.items():
        rows = [j for j, p in enumerate(offline) if p.accelerator == k]
        block = jac[np.ix_(rows, [2 * i, 2 * i + 1])]
        sensitivity = np.abs(block).max(axis=0)
        free = [bool(s >= IDENTIFIABLE_MIN) for s in sensitivity]
        if all(free):
            singular = np.linalg.svd(block, compute_uv=False)
            if len(singular) < 2 or singular[-1] < IDENTIFIABLE_RANK_MIN * singular[0]:
                keep = int(np.argmax(np.linalg.norm(block, axis=0)))
                free = [j == keep for j in (0, 1)]
        out[k] = (free[0], free[1])
    return out


def _prediction_rows(points: list[Point], catalog: Catalog, group: str) -> list[dict]:
    rows = []
    for p in points:
        predicted, layout = predict(p, catalog)
        rows.append({
            "point": p.point, "source": p.source, "round": p.round, "group": group, "system": p.system,
            "accelerator": p.accelerator, "count": p.count, "model": p.model, "benchmark": p.benchmark,
            "scenario": p.scenario, "metric": p.metric, "unit": p.unit, "precision": p.precision,
            "tp": layout.tp, "replicas": layout.replicas, "measured": p.measured,
            "predicted": predicted, "error_pct": 100.0 * (predicted - p.measured) / p.measured,
        })
    return rows


def leave_one_out(points: list[Point], catalog: Catalog, pooled: bool = False) -> pd.DataFrame:
    """One row per Offline point of each chip, predicted by a fit on every other chip
    (columns as :func:`summarize` expects, plus ``rule``: how the chip's η's were
    transferred)."""
    offline = [p for p in points if p.scenario == "Offline"]
    rows = []
    for chip in sorted({p.accelerator for p in offline}):
        others = [p for p in offline if p.accelerator != chip]
        if not others:
            continue
        fit = fit_model(others, catalog, pooled)
        held = [p for p in offline if p.accelerator == chip]
        f = fit.factors[chip]
        for row in _prediction_rows(held, with_fit(catalog, fit), "leave-one-accelerator-out"):
            rows.append({**row, "vendor": catalog.accelerators[chip].vendor, "rule": f.compute_status if f.compute_status == f.bandwidth_status
                         else f"{f.compute_status}/{f.bandwidth_status}",
                         "compute_efficiency": f.compute_efficiency, "bandwidth_efficiency": f.bandwidth_efficiency})
    return pd.DataFrame(rows)


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Median and max |error| (%) per group × model × accelerator × scenario."""
    if table.empty:
        return pd.DataFrame(columns=["group", "model", "accelerator", "scenario", "points",
                                     "median_abs_error_pct", "max_abs_error_pct"])
    t = table.assign(abs_error_pct=table["error_pct"].abs())
    out = (t.groupby(["group", "model", "accelerator", "scenario"], sort=True)["abs_error_pct"]
           .agg(points="count", median_abs_error_pct="median", max_abs_error_pct="max").reset_index())
    return out.sort_values(["group", "model", "accelerator", "scenario"]).reset_index(drop=True)


def band_pct(loao: pd.DataFrame, rule: str, vendor: str | None = None) -> float | None:
    """Uncertainty band (±%) of a chip transferred by ``rule``: the largest median |LOAO
    error| of one held-out chip × model among the chips transferred by that rule (of
    ``vendor`` when given).  None: no such held-out chip."""
    if loao.empty:
        return None
    part = loao[loao["rule"].str.contains(rule, regex=False)]
    if vendor is not None:
        part = part[part["vendor"] == vendor]
    if part.empty:
        return None
    return float(part.assign(a=part["error_pct"].abs()).groupby(["accelerator", "model"])["a"].median().max())


def chip_band_pct(loao: pd.DataFrame, f: Factors, vendor: str) -> float | None:
    """Band of one chip: its vendor's same-stack LOAO band when that vendor has one, else the
    band of the worst rule it was transferred by (see :func:`band_pct`); None if calibrated."""
    rules = [s for s in (f.compute_status, f.bandwidth_status) if s in RULES]
    if not rules:
        return None
    if rules == ["same-stack"] * len(rules):
        own = band_pct(loao, "same-stack", vendor)
        if own is not None:
            return own
    bands = [b for b in (band_pct(loao, r) for r in rules) if b is not None]
    return max(bands) if bands else band_pct(loao, "")


def factors_table(fit: Fit, catalog: Catalog, loao: pd.DataFrame) -> pd.DataFrame:
    """One row per catalog accelerator: η_c, η_m, t_0, status, band, source."""
    rows = []
    for key, f in fit.factors.items():
        acc = catalog.accelerators[key]
        band = chip_band_pct(loao, f, acc.vendor)
        rows.append({
            "accelerator": key, "vendor": acc.vendor, "compute_efficiency": round(f.compute_efficiency, 3),
            "bandwidth_efficiency": round(f.bandwidth_efficiency, 3),
            "iteration_overhead_us": round(fit.overhead_s * 1e6, 1), "status": f.status,
            "compute_status": f.compute_status, "bandwidth_status": f.bandwidth_status,
            "band_pct": None if band is None else round(band, 1),
            "source": _source_text(f, fit),
        })
    return pd.DataFrame(rows)


SHIPPED = "shipped catalog"


def _keep_shipped(f: Factors, shipped_status: str) -> Factors:
    """A user's points that do not determine a factor (and name no other chip to transfer
    from) keep the shipped catalog's value of it: say so, with the shipped row's status
    of that factor (parsed from its ``efficiency_status``, e.g. 'eta_m cross-stack')."""
    changes = {}
    for name, field in (("eta_c", "compute"), ("eta_m", "bandwidth")):
        if getattr(f, f"{field}_status") == "spec-only":
            found = re.search(rf"{name} ([\w-]+)", shipped_status)
            changes[f"{field}_status"] = found.group(1) if found else "spec-only"
            changes[f"{field}_from"] = (SHIPPED,)
    return dataclasses.replace(f, **changes)


def rounds_label(rounds) -> str:
    """"MLPerf Inference v4.0/v4.1 " for the rounds named in ``rounds`` (blank ones
    ignored); "" when none is named, so no round is claimed that the points do not give."""
    named = sorted(set(rounds) - {""}, key=lambda r: tuple(int(x) for x in re.findall(r"\d+", r)))
    return f"MLPerf Inference {'/'.join(named)} " if named else ""


def _source_text(f: Factors, fit: Fit) -> str:
    parts = []
    for name, status, origin in (("eta_c", f.compute_status, f.compute_from), ("eta_m", f.bandwidth_status, f.bandwidth_from)):
        if origin == (SHIPPED,):
            parts.append(f"{name}: not determined by these points; the shipped catalog's value ({status}) kept")
        elif status == "spec-only":
            parts.append(f"{name}: no calibrated chip to transfer from; catalog value kept")
        elif status == "calibrated":
            parts.append(f"{name} fitted on {len(origin)} {rounds_label(fit.rounds.get(o, '') for o in origin)}"
                         f"Offline point(s): {'; '.join(origin)}")
        else:
            rule = "same vendor serving stack" if status == "same-stack" else "all calibrated chips (no chip of this vendor calibrated)"
            parts.append(f"{name} transferred ({status}: geometric mean over {rule}) from {', '.join(origin)}")
    return " | ".join(parts) + f" | t_0 {fit.overhead_s * 1e6:.0f} us shared, fitted on {fit.points} Offline points"


def _unexpressed_row(p: Point, reason: str) -> dict:
    return {"system": p.system, "mlperf_accelerator": p.mlperf_accelerator, "count": p.count,
            "benchmark": p.benchmark, "scenario": p.scenario, "metric": p.metric, "measured": p.measured,
            "source": p.source, "reason": reason}


def split_unsimulated(points: list[Point], unexpressed: pd.DataFrame) -> tuple[list[Point], pd.DataFrame]:
    """Move points whose benchmark has no workload statistics in
    :data:`sim.studies.mlperf.BENCHMARKS` to the unexpressed table, with the reason."""
    keep, extra = [], []
    for p in points:
        if p.model in BENCHMARKS:
            keep.append(p)
        else:
            extra.append(_unexpressed_row(p, f"no workload statistics: benchmark {p.benchmark!r} maps to model "
                                             f"{p.model!r} but its dataset lengths and Server bounds are not in "
                                             f"sim/studies/mlperf.py BENCHMARKS"))
    if extra:
        unexpressed = pd.concat([unexpressed, pd.DataFrame(extra)], ignore_index=True)
    return keep, unexpressed


def validate(data_path: str | Path, catalog: Catalog | None = None, fit: bool = True,
             server: bool = True) -> Validation:
    """In-sample fit, leave-one-accelerator-out table and predictions of every point.

    ``fit=False`` predicts every point with ``catalog`` as shipped (no fit, no LOAO);
    ``server=False`` skips the Server points (each costs a bisection over exact-engine
    runs).

    Raises:
        UserError: the data file is missing or malformed.
    """
    catalog = catalog or load_catalog()
    points, unexpressed = read_points(data_path)
    points, unexpressed = split_unsimulated(points, unexpressed)
    chosen = points if server else [p for p in points if p.scenario == "Offline"]
    skipped = [_unexpressed_row(p, "Server point skipped (--no-server)") for p in points if p not in chosen]
    if skipped:
        unexpressed = pd.concat([unexpressed, pd.DataFrame(skipped)], ignore_index=True)
    if fit and not any(p.scenario == "Offline" for p in points):
        raise UserError(f"{data_path}: no Offline point dcsim can express, so there is nothing to fit; "
                        f"pass --no-fit to predict the points with the shipped catalog")
    if not fit:
        table = pd.DataFrame(_prediction_rows(chosen, catalog, "shipped catalog"))
        return Validation(table, pd.DataFrame(), unexpressed, summarize(table), pd.DataFrame(), pd.DataFrame())
    fitted = fit_model(points, catalog)
    loao_points = leave_one_out(points, catalog)
    pooled = leave_one_out(points, catalog, pooled=True)
    if not pooled.empty:
        loao_points = pd.concat([loao_points, pooled.assign(group="leave-one-accelerator-out (pooled rule)")])
    fitted_catalog = with_fit(catalog, fitted)
    table = pd.DataFrame(_prediction_rows(chosen, fitted_catalog, "in-sample"))
    if not table.empty:  # Server points are predicted with the Offline fit, never fitted
        table.loc[table["scenario"] != "Offline", "group"] = "predicted (Server, not fitted)"
    factors = factors_table(fitted, catalog, loao_points[loao_points["group"] == "leave-one-accelerator-out"]
                            if not loao_points.empty else loao_points)
    return Validation(points=table, factors=factors, unexpressed=unexpressed, summary=summarize(table),
                      loao=summarize(loao_points), loao_points=loao_points, fit=fitted)


def calibrate_overlay(points_path: str | Path, catalog: Catalog | None = None) -> tuple[pd.DataFrame, str]:
    """Fit the chips measured in ``points_path`` (Offline points, same CSV format as
    MLPerf's) and return (overlay rows, text report).  The overlay holds only the fitted
    chips' efficiency columns, to lay over the shipped catalog with ``--catalog``.

    Raises:
        UserError: the file is missing or malformed, or it has no Offline point dcsim can
        express (the reasons are listed)."""
    catalog = catalog or load_catalog()
    points, unexpressed = split_unsimulated(*read_points(points_path))
    offline = [p for p in points if p.scenario == "Offline"]
    if not offline:
        reasons = "; ".join(sorted(set(unexpressed["reason"]))) if not unexpressed.empty else "the file has no rows"
        raise UserError(f"{points_path}: no Offline point dcsim can express ({reasons})")
    fit = fit_model(offline, catalog)
    chips = sorted({p.accelerator for p in offline})
    rows = []
    for key in chips:
        shipped = catalog.accelerators[key]
        f = _keep_shipped(fit.factors[key], shipped.efficiency_status)
        # both factors fitted: no band; a factor kept from the catalog keeps its band
        band = "" if f.status == "calibrated" or shipped.efficiency_band_pct is None else shipped.efficiency_band_pct
        rows.append({"key": key, "compute_efficiency": round(f.compute_efficiency, 3),
                     "bandwidth_efficiency": round(f.bandwidth_efficiency, 3),
                     "iteration_overhead_us": round(fit.overhead_s * 1e6, 1), "efficiency_band_pct": band,
                     "efficiency_status": f"{f.status}: eta_c {f.compute_status}, eta_m {f.bandwidth_status} (dcsim calibrate)",
                     "efficiency_source": f"dcsim calibrate {Path(points_path).name}: " + _source_text(f, fit)})
    table = pd.DataFrame(_prediction_rows(offline, with_fit(catalog, fit), "in-sample"))
    lines = [f"fitted {len(chips)} accelerator(s) on {len(offline)} Offline point(s); t_0 {fit.overhead_s * 1e6:.0f} us"]
    for r in rows:
        lines.append(f"  {r['key']:<14} eta_c {r['compute_efficiency']:.3f}  eta_m {r['bandwidth_efficiency']:.3f}  "
                     f"{r['efficiency_status']}")
    a = table["error_pct"].abs()
    lines.append(f"in-sample |error|: median {a.median():.1f}%, max {a.max():.1f}% over {len(table)} point(s)")
    if not unexpressed.empty:
        lines.append(f"not expressible: {len(unexpressed)} row(s)")
        lines += [f"  {r.system} {r.benchmark} {r.scenario}: {r.reason}" for r in unexpressed.itertuples()]
    return pd.DataFrame(rows), "\n".join(lines) + "\n"
