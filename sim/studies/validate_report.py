"""The shell side of ``dcsim validate``: text table, CSV files, the plot, and writing the
fitted factors into the accelerator catalog. All file writes are atomic."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pandas as pd

from sim.results.export import write_csv, write_file_atomic
from sim.studies.validate import GROUPS, Validation

CALIBRATION_NAME = "MLPerf Inference v4.x calibration (dcsim validate)"


def summary_text(v: Validation) -> str:
    """Median and max |error| per model × accelerator × scenario, the two groups apart,
    then the fitted factors and the unexpressed points."""
    lines = []
    for group in GROUPS:
        part = v.summary[v.summary["group"] == group]
        lines.append(f"{group} points ({int(part['points'].sum())}): |error| = |predicted - measured| / measured")
        lines.append(f"  {'model':<13} {'accelerator':<10} {'scenario':<8} {'points':>6} {'median':>8} {'max':>8}")
        for r in part.itertuples():
            lines.append(f"  {r.model:<13} {r.accelerator:<10} {r.scenario:<8} {r.points:>6} "
                         f"{r.median_abs_error_pct:>7.1f}% {r.max_abs_error_pct:>7.1f}%")
        lines.append("")
    lines.append("fitted factors (eta_c = compute, eta_m = bandwidth; * = not identifiable, kept at the start value)")
    for r in v.factors.itertuples():
        c = "" if r.compute_identifiable else "*"
        m = "" if r.bandwidth_identifiable else "*"
        lines.append(f"  {r.accelerator:<10} eta_c {r.compute_efficiency:.3f}{c:<1}  eta_m {r.bandwidth_efficiency:.3f}{m:<1}"
                     f"  from {r.calibration_points} calibration point(s)")
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
        part = table[(table["model"] == "sdxl") == (unit == "image")]
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
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle("dcsim vs MLPerf Inference v4.x (filled: calibration, hollow: held-out)")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def write_outputs(v: Validation, out_dir: Path) -> list[Path]:
    """validation.csv, fitted_factors.csv, unexpressed.csv, summary.csv, validation.png."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [
        write_file_atomic(out_dir / "validation.csv", lambda p: write_csv(v.points, p)),
        write_file_atomic(out_dir / "fitted_factors.csv", lambda p: write_csv(v.factors, p)),
        write_file_atomic(out_dir / "unexpressed.csv", lambda p: write_csv(v.unexpressed, p)),
        write_file_atomic(out_dir / "summary.csv", lambda p: write_csv(v.summary, p)),
        write_file_atomic(out_dir / "validation.png", lambda p: plot_png(v.points, p)),
    ]
    return written


def update_catalog(factors: pd.DataFrame, path: Path) -> Path:
    """Write fitted (η_c, η_m) and their provenance into the accelerators CSV at ``path``;
    other rows and columns stay byte-for-byte as they were."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        fields, rows = reader.fieldnames, list(reader)
    by_key = {r.accelerator: r for r in factors.itertuples()}
    for row in rows:
        fit = by_key.get(row["key"])
        if fit is None:
            continue
        row["compute_efficiency"] = f"{fit.compute_efficiency:.3f}"
        row["bandwidth_efficiency"] = f"{fit.bandwidth_efficiency:.3f}"
        kept = [name for name, ok in (("eta_c", fit.compute_identifiable), ("eta_m", fit.bandwidth_identifiable)) if not ok]
        row["efficiency_status"] = "derived: fitted to MLPerf closed results" + (
            f" ({', '.join(kept)} not identifiable: Vidur H100 start value kept)" if kept else "")
        row["efficiency_source"] = (f"{CALIBRATION_NAME}: bounded least squares on log error over "
                                    f"{fit.calibration_points} calibration point(s): {fit.points} "
                                    f"(github.com/mlcommons/inference_results_v4.0/v4.1 via "
                                    f"../shared/data/reference/calibration_points.csv)")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return write_file_atomic(path, lambda p: p.write_text(buffer.getvalue(), encoding="utf-8"))
