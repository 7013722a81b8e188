"""The text table and PNG chart of ``dcsim curves`` (:mod:`sim.studies.curves`)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd

from sim.results.report_text import DEFAULT_WIDTH, MISSING, human, table, usd

SPEEDS = (10.0, 20.0, 50.0, 100.0, 200.0)
"""Per-user speeds (output tokens/s per user) the text table reads each curve at."""


def curves_text(summary: pd.DataFrame, model: str, input_tokens: int, output_tokens: int,
                utilisation: float, tpot_slo_s: float | None) -> str:
    """One row per chip × minimum per-user speed: the best layout, tokens/s per GPU with
    its band, $/1M output tokens and tokens/s per MW (``summary`` from
    :func:`sim.studies.curves.summary_at_speeds`)."""
    rows = []
    for _, r in summary.iterrows():
        if pd.isna(r.get("tokens_per_s_per_gpu")):
            rows.append([r["accelerator"], f"{r['tokens_per_s_per_user_min']:g}", "not reached", MISSING, MISSING,
                         MISSING, MISSING, MISSING])
            continue
        band = "" if pd.isna(r["band_pct"]) else f" ±{r['band_pct']:.0f}%"
        slo = "" if tpot_slo_s is None else ("yes" if r["meets_tpot_slo"] else "no")
        rows.append([r["accelerator"], f"{r['tokens_per_s_per_user_min']:g}",
                     f"TP{int(r['tp'])}" + (f" EP{int(r['ep'])}" if r["ep"] > 1 else "") + f" b={int(r['batch'])}",
                     human(r["tokens_per_s_per_user"]), human(r["tokens_per_s_per_gpu"]) + band,
                     usd(r["usd_per_1m_output_tokens"]), human(r["tokens_per_s_per_mw"]), slo or MISSING])
    headers = ["chip", "≥ tok/s/user", "layout, batch", "tok/s/user", "tok/s per GPU (band)", "$/1M out tokens",
               "tok/s per MW", "meets TPOT SLO"]
    head = (f"Capacity curves: {model}, {input_tokens} prompt / {output_tokens} output tokens; best tokens/s per "
            f"GPU at each per-user speed")
    note = (f"roofline step times (per user = 1/TPOT incl. prefill share; per GPU = batch/(TPOT x GPUs)); "
            f"$ at the catalog's rental price; per MW at {utilisation:.0%} utilisation of full-load node power x PUE")
    body = table(headers, rows, [False, True, False, True, True, True, True, False])
    return "\n".join([*textwrap.wrap(head, DEFAULT_WIDTH), body, *textwrap.wrap(note, DEFAULT_WIDTH)]) + "\n"


def curves_png(curves: pd.DataFrame, front: pd.DataFrame, path: Path, title: str, tpot_slo_s: float | None) -> None:
    """Two panels against tokens/s per user: tokens/s per GPU (each chip's frontier with its
    band shaded) and $/1M output tokens; the TPOT SLO region (per-user speed ≥ 1/TPOT) shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5), dpi=110)
    for i, (acc, g) in enumerate(front.groupby("accelerator", sort=False)):
        color = f"C{i}"
        axes[0].plot(g["tokens_per_s_per_user"], g["tokens_per_s_per_gpu"], "-o", ms=3, color=color, label=acc)
        axes[0].fill_between(g["tokens_per_s_per_user"], g["tokens_per_s_per_gpu_lo"], g["tokens_per_s_per_gpu_hi"],
                             color=color, alpha=0.15)
        axes[1].plot(g["tokens_per_s_per_user"], g["usd_per_1m_output_tokens"], "-o", ms=3, color=color, label=acc)
    for ax, label in ((axes[0], "output tokens/s per GPU"), (axes[1], "$ per 1M output tokens (rented)")):
        if tpot_slo_s is not None:
            ax.axvspan(1.0 / tpot_slo_s, ax.get_xlim()[1], color="green", alpha=0.07,
                       label=f"meets TPOT ≤ {tpot_slo_s * 1e3:g} ms")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("output tokens/s per user (1/TPOT)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
