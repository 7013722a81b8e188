"""The shell side of ``dcsim validate``: text table, CSV files, the plot, and writing the
fitted factors into the accelerator catalog. All file writes are atomic."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pandas as pd

from sim.results.export import write_csv, write_file_atomic
from sim.studies.validate import Validation, rounds_label, summarize

CALIBRATION_NAME = "MLPerf Inference calibration (dcsim validate)"


def _error_lines(summary: pd.DataFrame, title: str) -> list[str]:
    lines = [title, f"  {'origin':<7} {'model':<16} {'accelerator':<17} {'scenario':<12} {'points':>6} {'median':>8} {'max':>8}"]
    for r in summary.itertuples():
        lines.append(f"  {r.origin:<7} {r.model:<16} {r.accelerator:<17} {r.scenario:<12} {r.points:>6} "
                     f"{r.median_abs_error_pct:>7.1f}% {r.max_abs_error_pct:>7.1f}%")
    return lines


def _pooled_lines(table: pd.DataFrame, label: str) -> list[str]:
    """Median and max |error| per origin (MLPerf, vendor table) and family of the Offline
    points, then per scenario of the others."""
    lines = []
    if table.empty:
        return lines
    for (origin, scenario), part in table.groupby(["origin", "scenario"], sort=True):
        families = (("LLM", part[~part["model"].isin(IMAGE_MODELS)]), ("diffusion", part[part["model"].isin(IMAGE_MODELS)]))
        for fam, sub in families:
            if not sub.empty:
                a = sub["error_pct"].abs()
                lines.append(f"  {label} {origin} {fam} {scenario}: median |error| {a.median():.1f}%, "
                             f"max {a.max():.1f}% over {len(sub)} point(s)")
    return lines


IMAGE_MODELS = ("sdxl", "wan2.2-t2v-a14b")


def _pct(value, sign: str = "") -> str:
    return "" if value is None or pd.isna(value) else f"{sign}{value:.0f}%"


def _chip_lines(loao: pd.DataFrame, factors: pd.DataFrame) -> list[str]:
    """Per held-out chip: points, median |error|, its band and coverage, and the transfer
    band built without it with that band's coverage of its points (the independent check)."""
    lines = [f"  {'accelerator':<17} {'points':>6} {'median':>8} {'band':>7} {'covers':>7} "
             f"{'transfer band':>14} {'covers':>7}"]
    bands = factors.set_index("accelerator") if not factors.empty else pd.DataFrame()
    for chip, part in loao.groupby("accelerator", sort=True):
        if chip not in bands.index:
            continue
        r = bands.loc[chip]
        lines.append(f"  {chip:<17} {len(part):>6} {part['error_pct'].abs().median():>7.1f}% "
                     f"{_pct(r['band_pct'], '±'):>7} {_pct(r['band_coverage_pct']):>7} "
                     f"{_pct(r['transfer_band_pct'], '±'):>14} {_pct(r['transfer_band_coverage_pct']):>7}")
    return lines


def summary_text(v: Validation) -> str:
    """In-sample and leave-one-accelerator-out errors, the bands and their coverage per
    held-out chip, the shared factors, the efficiency table (every catalog chip: η's,
    status, band) and the unexpressed points with their reasons."""
    lines = []
    for group, part in v.summary.groupby("group", sort=False):
        lines += _error_lines(part, f"{group} points ({int(part['points'].sum())}): "
                                    f"|error| = |predicted - measured| / measured")
    lines += _pooled_lines(v.points, "all")
    lines.append("")
    if not v.loao_points.empty:
        for group, part in v.loao_points.groupby("group", sort=True):
            lines += _error_lines(summarize(part), f"{group} (fit on every other chip, predict this one):")
            lines += _pooled_lines(part, group)
            lines.append("")
        held = v.loao_points[v.loao_points["group"] == "leave-one-accelerator-out"]
        lines.append("bands per held-out chip: band = q80 of its own held-out |error|s (covers them by "
                     "construction); transfer band = what a chip without points gets, built without this chip, "
                     "and its coverage of this chip's held-out points (the independent check)")
        lines += _chip_lines(held, v.factors)
        lines.append("")
    if not v.terms.empty:
        lines.append("shared factors (fitted across chips; 1 = not determined by these points):")
        lines += [f"  {r.term:<22} {r.value:>10.4g}  {'determined' if r.determined else 'NOT determined'} "
                  f"by {r.points} point(s)" for r in v.terms.itertuples()]
        lines.append("")
    if not v.factors.empty:
        lines.append(f"efficiency table (t_0 = {v.factors['iteration_overhead_us'].iloc[0]:.0f} us per iteration, shared; "
                     "band = +-% from the other chips' leave-one-accelerator-out residuals)")
        lines.append(f"  {'accelerator':<17} {'eta_c':>6} {'eta_m':>6} {'band':>6}  status")
        for r in v.factors.itertuples():
            band = "" if pd.isna(r.band_pct) else f"{r.band_pct:.0f}%"
            lines.append(f"  {r.accelerator:<17} {r.compute_efficiency:>6.3f} {r.bandwidth_efficiency:>6.3f} {band:>6}  "
                         f"{r.status} (eta_c {r.compute_status}, eta_m {r.bandwidth_status})")
        lines.append("")
    reasons = v.unexpressed.groupby("reason").size() if not v.unexpressed.empty else pd.Series(dtype=int)
    lines.append(f"not expressible: {len(v.unexpressed)} point(s) (listed in unexpressed.csv)")
    for reason, n in reasons.items():
        lines.append(f"  {n:>3}  {reason}")
    return "\n".join(lines) + "\n"


def plot_png(table: pd.DataFrame, path: Path) -> None:
    """Predicted vs measured (log-log, normalised per chip) with the y = x line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 5), dpi=110)
    for ax, unit, label in ((axes[0], "llm", "tokens/s per accelerator"), (axes[1], "image", "samples/s per accelerator")):
        part = table[table["model"].isin(IMAGE_MODELS) == (unit == "image")]
        part = part[part["scenario"] != "SingleStream"]
        for i, ((model, scenario, group), g) in enumerate(part.groupby(["model", "scenario", "group"])):
            color = f"C{i}"
            ax.scatter(g["measured"] / g["count"], g["predicted"] / g["count"],
                       marker="o" if scenario == "Offline" else "^", edgecolors=color,
                       facecolors="none" if group == "held-out" else color, alpha=0.8,
                       label=f"{model} {scenario} ({group})")
        if not part.empty:
            values = pd.concat([part["measured"] / part["count"], part["predicted"] / part["count"]])
            lo, hi = values.min() * 0.8, values.max() * 1.25
            ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="y = x")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"measured (MLPerf), {label}")
        ax.set_ylabel(f"predicted (dcsim), {label}")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
    against = rounds_label(table["round"]).strip() if "round" in table else ""
    fig.suptitle(f"dcsim vs {against or 'measured'} (filled: calibration, hollow: held-out)")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def write_outputs(v: Validation, out_dir: Path) -> list[Path]:
    """validation.csv, fitted_factors.csv, shared_factors.csv, loao.csv, loao_summary.csv,
    unexpressed.csv, summary.csv, validation.png (the fit-only files are skipped with
    ``--no-fit``)."""
    from sim.results.export import claim_dir

    claim_dir(out_dir, "validate")
    files = [("validation.csv", v.points), ("unexpressed.csv", v.unexpressed), ("summary.csv", v.summary)]
    if not v.factors.empty:
        files += [("fitted_factors.csv", v.factors), ("loao.csv", v.loao_points), ("loao_summary.csv", v.loao),
                  ("shared_factors.csv", v.terms)]
    written = [write_file_atomic(out_dir / name, lambda p, t=table: write_csv(t, p)) for name, table in files]
    if not v.points.empty:
        written.append(write_file_atomic(out_dir / "validation.png", lambda p: plot_png(v.points, p)))
    return written


def update_catalog(factors: pd.DataFrame, path: Path) -> Path:
    """Write every row's (η_c, η_m), class factors, t_0, band, status and provenance into
    the accelerators CSV at ``path``; other columns stay byte-for-byte as they were."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        fields, rows = reader.fieldnames, list(reader)
    by_key = {r.accelerator: r for r in factors.itertuples()}
    for row in rows:
        fit = by_key.get(row["key"])
        if fit is None or row.get("memory_kind") == "sram":  # SRAM machines: sim.models.sram's, not this fit's
            continue
        row["compute_efficiency"] = f"{fit.compute_efficiency:.3f}"
        row["bandwidth_efficiency"] = f"{fit.bandwidth_efficiency:.3f}"
        for name in ("moe_efficiency_factor", "diffusion_efficiency_factor", "fp4_efficiency_factor"):
            if name in row:
                row[name] = f"{getattr(fit, name):.3f}"
        row["iteration_overhead_us"] = f"{fit.iteration_overhead_us:.1f}"
        row["efficiency_band_pct"] = "" if pd.isna(fit.band_pct) else f"{fit.band_pct:.1f}"
        row["efficiency_status"] = (f"{fit.status}: eta_c {fit.compute_status}, eta_m {fit.bandwidth_status}")
        band = "" if pd.isna(fit.band_pct) else f" | band ±{fit.band_pct:.1f}%: {fit.band_basis}"
        row["efficiency_source"] = (f"{CALIBRATION_NAME}: {fit.source}{band} (each point's mlperf_log_summary.txt in "
                                    f"github.com/mlcommons and the TensorRT-LLM perf-overview table, via "
                                    f"fleets/data/reference/)")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return write_file_atomic(path, lambda p: p.write_text(buffer.getvalue(), encoding="utf-8"))


def write_overlay(rows: pd.DataFrame, path: Path) -> Path:
    """Write ``dcsim calibrate``'s overlay rows (key + efficiency columns) atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_file_atomic(path, lambda p: write_csv(rows, p))
