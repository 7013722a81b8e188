"""``dcsim validate``: fit the efficiency model on published Offline results (MLPerf
Inference and the vendor's max-throughput table), cross-validate it
leave-one-accelerator-out, transfer it to every chip without results, and give every chip
an uncertainty band from the held-out residuals.

The efficiency model (per-chip η_c and η_m, kernel-class and serving-stack factors shared
by every chip, one t_0) and its identifiability rule are :mod:`sim.studies.efficiency_fit`'s.

Phases (pure functions; the CLI does the I/O):

1. :func:`sim.studies.calibration.read_points`: headline points and unexpressed points with
   reasons; :func:`split_unsimulated` moves points whose benchmark has no workload
   statistics to the unexpressed table.
2. :func:`sim.studies.efficiency_fit.fit_model` on the Offline points.
3. :func:`leave_one_out`: for each chip with at least :data:`LOAO_MIN_POINTS` Offline
   points, fit on every other chip, transfer to it, predict its Offline points: the
   honest accuracy on a chip the fit never saw (the class and stack terms are refitted
   without it too).
4. :func:`chip_band`: a chip that was held out gets the :data:`BAND_QUANTILE` quantile of
   its own held-out |errors| (so it covers those points by construction); a chip without
   points gets :func:`transfer_band`, the same quantile over the *other* held-out chips
   (its vendor's when at least two were held out, else all; each chip weighs the same).
   The rule for transferred chips is checked where it can be: for every held-out chip, the
   transfer band built without it is compared with its own held-out points
   (``transfer_band_coverage_pct``).
5. :func:`validate`: the in-sample fit, the LOAO table, every point predicted with the
   fitted catalog (Server, Interactive and SingleStream points predicted, never fitted),
   the transferred catalog rows and the bands.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from fleets.catalog import Catalog
from fleets.catalog_io import load_catalog
from sim.errors import UserError
from sim.studies.calibration import Point, read_points
from sim.studies.efficiency_fit import RULES, Factors, Fit, fit_model, predict_with, with_fit  # noqa: F401 (re-exported)
from sim.studies.mlperf import BENCHMARKS, benchmark_of

LOAO_MIN_POINTS = 2  # a chip is held out in turn when it has at least this many Offline points
BAND_QUANTILE = 0.8  # a band claims this share of predictions within ±band
BAND_MIN_SAME_VENDOR = 2  # held-out chips of the vendor needed for a vendor band


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
    terms: pd.DataFrame = dataclasses.field(default_factory=pd.DataFrame)  # shared factors of the fit


def _prediction_rows(points: list[Point], catalog: Catalog, group: str, fit: Fit | None = None) -> list[dict]:
    """One row per point: measured, predicted (with ``fit`` and its stack terms applied to
    ``catalog``, else ``catalog`` as it is) and the error."""
    from sim.studies.mlperf import predict

    predictions = predict_with(points, catalog, fit) if fit is not None else [predict(p, catalog) for p in points]
    rows = []
    for p, (predicted, layout) in zip(points, predictions):
        rows.append({
            "point": p.point, "source": p.source, "round": p.round, "origin": p.origin, "group": group,
            "system": p.system, "accelerator": p.accelerator, "count": p.count, "model": p.model,
            "benchmark": p.benchmark, "scenario": p.scenario, "metric": p.metric, "unit": p.unit,
            "precision": p.precision, "stack": p.stack, "tp": layout.tp, "replicas": layout.replicas,
            "input_tokens": p.input_tokens, "output_tokens": p.output_tokens, "measured": p.measured,
            "predicted": predicted, "error_pct": 100.0 * (predicted - p.measured) / p.measured,
            "assumed": benchmark_of(p).assumed,
        })
    return rows


def leave_one_out(points: list[Point], catalog: Catalog, pooled: bool = False,
                  progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """One row per Offline point of each chip with at least :data:`LOAO_MIN_POINTS` of them,
    predicted by a fit on every other chip (columns as :func:`summarize` expects, plus
    ``rule``: how the chip's η's were transferred)."""
    offline = [p for p in points if p.scenario == "Offline"]
    counts = pd.Series([p.accelerator for p in offline]).value_counts()
    rows = []
    chips = sorted(counts[counts >= LOAO_MIN_POINTS].index)
    for i, chip in enumerate(chips, 1):
        if progress is not None:
            progress(f"leave-one-accelerator-out{' (pooled rule)' if pooled else ''}: {chip} ({i}/{len(chips)})")
        others = [p for p in offline if p.accelerator != chip]
        if not others:
            continue
        fit = fit_model(others, catalog, pooled)
        held = [p for p in offline if p.accelerator == chip]
        f = fit.factors[chip]
        for row in _prediction_rows(held, catalog, "leave-one-accelerator-out", fit):
            rows.append({**row, "vendor": catalog.accelerators[chip].vendor,
                         "rule": f.compute_status if f.compute_status == f.bandwidth_status
                         else f"{f.compute_status}/{f.bandwidth_status}",
                         "compute_efficiency": f.compute_efficiency, "bandwidth_efficiency": f.bandwidth_efficiency})
    return pd.DataFrame(rows)


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Median and max |error| (%) per group × origin (MLPerf or vendor table) × model ×
    accelerator × scenario."""
    keys = ["group", "origin", "model", "accelerator", "scenario"]
    if table.empty:
        return pd.DataFrame(columns=[*keys, "points", "median_abs_error_pct", "max_abs_error_pct"])
    t = table.assign(abs_error_pct=table["error_pct"].abs())
    out = (t.groupby(keys, sort=True)["abs_error_pct"]
           .agg(points="count", median_abs_error_pct="median", max_abs_error_pct="max").reset_index())
    return out.sort_values(keys).reset_index(drop=True)


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The ``q`` quantile of ``values`` with ``weights`` (the smallest value whose
    cumulative weight reaches q of the total)."""
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order]) / weights.sum()
    return float(values[order][np.searchsorted(cumulative, q - 1e-12)])


def chip_band(loao: pd.DataFrame, chip: str, vendor: str) -> tuple[float | None, str]:
    """(band ±%, basis) of ``chip``: the :data:`BAND_QUANTILE` quantile of its own held-out
    |errors| when it was held out (the fit had never seen it), else :func:`transfer_band`."""
    own = loao[loao["accelerator"] == chip] if not loao.empty else loao
    if not own.empty:
        values = own["error_pct"].abs().to_numpy()
        band = _weighted_quantile(values, np.ones_like(values), BAND_QUANTILE)
        return band, f"q{round(100 * BAND_QUANTILE)} of its own {len(own)} held-out |error|s"
    return transfer_band(loao, chip, vendor)


def transfer_band(loao: pd.DataFrame, chip: str, vendor: str) -> tuple[float | None, str]:
    """(band ±%, basis) for a chip whose efficiencies are transferred: the
    :data:`BAND_QUANTILE` quantile of the held-out |error| of every other held-out chip of
    ``vendor`` (when at least :data:`BAND_MIN_SAME_VENDOR` were held out), else of every
    other held-out chip; each chip's points weigh 1 / its point count. (None, "") when no
    other chip was held out."""
    if loao.empty:
        return None, ""
    others = loao[loao["accelerator"] != chip]
    same = others[others["vendor"] == vendor]
    pool, basis = (same, f"{vendor} chips") if same["accelerator"].nunique() >= BAND_MIN_SAME_VENDOR else (others, "all chips")
    if pool.empty:
        return None, ""
    weights = 1.0 / pool.groupby("accelerator")["accelerator"].transform("count").to_numpy(dtype=float)
    band = _weighted_quantile(pool["error_pct"].abs().to_numpy(), weights, BAND_QUANTILE)
    chips = ", ".join(sorted(pool["accelerator"].unique()))
    return band, f"q{round(100 * BAND_QUANTILE)} of the held-out |error| of {basis} ({chips})"


def band_coverage(loao: pd.DataFrame, chip: str, band: float | None) -> tuple[float | None, int]:
    """(share in % of ``chip``'s own held-out points within ±band, their count); (None, 0)
    when the chip was not held out or has no band."""
    own = loao[loao["accelerator"] == chip] if not loao.empty else loao
    if band is None or own.empty:
        return None, 0
    return float(100.0 * (own["error_pct"].abs() <= band).mean()), int(len(own))


def factors_table(fit: Fit, catalog: Catalog, loao: pd.DataFrame) -> pd.DataFrame:
    """One row per catalog accelerator: η_c, η_m, the class factors, t_0, status, band
    (with its basis and its coverage of the chip's own held-out points), source."""
    rows = []
    for key, f in fit.factors.items():
        acc = catalog.accelerators[key]
        band, basis = chip_band(loao, key, acc.vendor)
        if acc.memory_kind == "sram":  # not this fit's: the row's own band
            band, basis = acc.efficiency_band_pct, "the catalog row's (sim.models.sram)"
        coverage, held = band_coverage(loao, key, band)
        # the independent check: the band the transfer rule would give this chip, built
        # without it, against the chip's own held-out points
        rule_band, _ = transfer_band(loao, key, acc.vendor) if held else (None, "")
        rule_coverage, _ = band_coverage(loao, key, rule_band)
        rows.append({
            "accelerator": key, "vendor": acc.vendor, "compute_efficiency": round(f.compute_efficiency, 3),
            "bandwidth_efficiency": round(f.bandwidth_efficiency, 3),
            "moe_efficiency_factor": round(_class_factor(fit, catalog, key, "moe"), 3),
            "diffusion_efficiency_factor": round(_class_factor(fit, catalog, key, "diffusion"), 3),
            "fp4_efficiency_factor": round(_class_factor(fit, catalog, key, "fp4"), 3),
            "iteration_overhead_us": round((acc.iteration_overhead_s if acc.memory_kind == "sram" else fit.overhead_s)
                                           * 1e6, 1), "status": "own model (sim.models.sram)" if acc.memory_kind == "sram"
            else f.status,
            "compute_status": f.compute_status, "bandwidth_status": f.bandwidth_status,
            "band_pct": None if band is None else round(band, 1), "band_basis": basis,
            "band_coverage_pct": None if coverage is None else round(coverage, 1), "held_out_points": held,
            "transfer_band_pct": None if rule_band is None else round(rule_band, 1),
            "transfer_band_coverage_pct": None if rule_coverage is None else round(rule_coverage, 1),
            "source": _source_text(f, fit),
        })
    return pd.DataFrame(rows)


def _class_factor(fit: Fit, catalog: Catalog, key: str, term: str) -> float:
    """The fitted class factor when the fit determined it, else the catalog row's."""
    t = fit.terms.get(term)
    return t.value if t is not None and t.determined else getattr(catalog.accelerators[key], f"{term}_efficiency_factor")


def terms_table(fit: Fit) -> pd.DataFrame:
    """One row per shared term of ``fit``: value, whether the points determined it, how many
    points depend on it."""
    rows = [{"term": name, "value": round(t.value, 3), "determined": t.determined, "points": len(t.points)}
            for name, t in fit.terms.items()]
    rows.append({"term": "t_0 (s)", "value": fit.overhead_s, "determined": True, "points": fit.points})
    return pd.DataFrame(rows, columns=["term", "value", "determined", "points"])


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
            vendor = sum(1 for o in origin if o in fit.vendor_points)
            parts.append(f"{name} fitted on {len(origin)} {rounds_label(fit.rounds.get(o, '') for o in origin)}"
                         f"Offline point(s)" + (f" ({vendor} of them vendor max-throughput rows)" if vendor else "")
                         + f": {'; '.join(origin)}")
        else:
            rule = "same vendor serving stack" if status == "same-stack" else "all calibrated chips (no chip of this vendor calibrated)"
            parts.append(f"{name} transferred ({status}: geometric mean over {rule}) from {', '.join(origin)}")
    terms = ", ".join(f"{name} {t.value:.3f}" + ("" if t.determined else " (not determined: 1)")
                      for name, t in fit.terms.items())
    return (" | ".join(parts) + (f" | shared factors fitted across chips: {terms}" if terms else "")
            + f" | t_0 {fit.overhead_s * 1e6:.0f} us shared, fitted on {fit.points} Offline points")


def _unexpressed_row(p: Point, reason: str) -> dict:
    return {"system": p.system, "mlperf_accelerator": p.mlperf_accelerator, "count": p.count,
            "benchmark": p.benchmark, "scenario": p.scenario, "metric": p.metric, "measured": p.measured,
            "source": p.source, "reason": reason}


def split_unsimulated(points: list[Point], unexpressed: pd.DataFrame) -> tuple[list[Point], pd.DataFrame]:
    """Move points whose benchmark has no workload statistics in
    :data:`sim.studies.mlperf.BENCHMARKS` to the unexpressed table, with the reason."""
    keep, extra = [], []
    for p in points:
        if p.model in BENCHMARKS or (p.input_tokens and p.output_tokens):
            keep.append(p)
        else:
            extra.append(_unexpressed_row(p, f"no workload statistics: benchmark {p.benchmark!r} maps to model "
                                             f"{p.model!r} but its dataset lengths and Server bounds are not in "
                                             f"sim/studies/mlperf.py BENCHMARKS"))
    if extra:
        unexpressed = pd.concat([unexpressed, pd.DataFrame(extra)], ignore_index=True)
    return keep, unexpressed


def validate(data_path, catalog: Catalog | None = None, fit: bool = True, server: bool = True,
             compare_rules: bool = False, progress: Callable[[str], None] | None = None) -> Validation:
    """In-sample fit, leave-one-accelerator-out table, bands and predictions of every point.

    ``data_path``: one results CSV or a sequence of them. ``fit=False`` predicts every
    point with ``catalog`` as shipped (no fit, no LOAO); ``server=False`` skips the
    Server and Interactive points (each costs a bisection over exact-engine runs);
    ``compare_rules`` also cross-validates the pooled transfer rule (ignore the vendor).
    ``progress``, when given, is called with a one-line description as each stage starts
    (the fit, each held-out chip, the predictions), so a caller can show that work goes on.

    Raises:
        UserError: a data file is missing or malformed.
    """
    catalog = catalog or load_catalog()
    points, unexpressed = read_points(data_path)
    points, unexpressed = split_unsimulated(points, unexpressed)
    chosen = points if server else [p for p in points if p.scenario not in ("Server", "Interactive")]
    skipped = [_unexpressed_row(p, f"{p.scenario} point skipped (--no-server)") for p in points if p not in chosen]
    if skipped:
        unexpressed = pd.concat([unexpressed, pd.DataFrame(skipped)], ignore_index=True)
    if fit and not any(p.scenario == "Offline" for p in points):
        raise UserError(f"{data_path}: no Offline point dcsim can express, so there is nothing to fit; "
                        f"pass --no-fit to predict the points with the shipped catalog")
    say = progress or (lambda _msg: None)
    servers = sum(p.scenario in ("Server", "Interactive") for p in chosen)
    predicting = f"predicting {len(chosen)} point(s) ({servers} Server/Interactive by bisection over engine runs)"
    if not fit:
        say(predicting)
        table = pd.DataFrame(_prediction_rows(chosen, catalog, "shipped catalog"))
        return Validation(table, pd.DataFrame(), unexpressed, summarize(table), pd.DataFrame(), pd.DataFrame())
    say(f"fitting the efficiency model on {sum(p.scenario == 'Offline' for p in points)} Offline point(s)")
    fitted = fit_model(points, catalog)
    loao_points = leave_one_out(points, catalog, progress=progress)
    if compare_rules:
        pooled = leave_one_out(points, catalog, pooled=True, progress=progress)
        if not pooled.empty:
            loao_points = pd.concat([loao_points, pooled.assign(group="leave-one-accelerator-out (pooled rule)")])
    say(predicting)
    table = pd.DataFrame(_prediction_rows(chosen, catalog, "in-sample", fitted))
    if not table.empty:  # Server, Interactive and SingleStream points are predicted with the Offline fit
        table.loc[table["scenario"] != "Offline", "group"] = "predicted (" + table["scenario"] + ", not fitted)"
    held = loao_points[loao_points["group"] == "leave-one-accelerator-out"] if not loao_points.empty else loao_points
    factors = factors_table(fitted, catalog, held)
    return Validation(points=table, factors=factors, unexpressed=unexpressed, summary=summarize(table),
                      loao=summarize(loao_points), loao_points=loao_points, fit=fitted, terms=terms_table(fitted))


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
        # the band comes from leave-one-accelerator-out residuals over many chips, which a
        # user's own points do not provide: the shipped row's band is kept
        band = "" if shipped.efficiency_band_pct is None else shipped.efficiency_band_pct
        rows.append({"key": key, "compute_efficiency": round(f.compute_efficiency, 3),
                     "bandwidth_efficiency": round(f.bandwidth_efficiency, 3),
                     "iteration_overhead_us": round(fit.overhead_s * 1e6, 1), "efficiency_band_pct": band,
                     "efficiency_status": f"{f.status}: eta_c {f.compute_status}, eta_m {f.bandwidth_status} (dcsim calibrate)",
                     "efficiency_source": f"dcsim calibrate {Path(points_path).name}: " + _source_text(f, fit)})
    table = pd.DataFrame(_prediction_rows(offline, catalog, "in-sample", fit))
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
