"""The dashboard's capacity-curves view (issue 28, Build item 3), without Streamlit: the
tables of ``dcsim curves`` (:mod:`sim.studies.curves`, reused, not re-derived) for a model,
a traffic shape and the chips chosen, drawn with plotly: output tokens/s per GPU and
$/1M output tokens against output tokens/s per user, each chip's frontier with its
performance-model band shaded, and the region that meets a TPOT SLO (per-user speed ≥
1 / TPOT) marked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sim.results.charts import PALETTE
from sim.studies.curves import curves_table, frontier, summary_at_speeds
from sim.studies.curves_report import SPEEDS

DEFAULT_PROMPT_TOKENS = 1000
DEFAULT_OUTPUT_TOKENS = 1000
DEFAULT_UTILISATION = 0.7  # as `dcsim curves --utilisation`
DEFAULT_CHIPS = ("h100-sxm", "h200", "b200", "mi300x")  # as `dcsim curves --chips`


@dataclass(frozen=True)
class CurveInputs:
    """What the view draws: a model key, chips (catalog keys), prompt and output tokens per
    request, the TPOT SLO in seconds (None: no region marked) and the utilisation (0, 1]
    at which tokens per MW are stated."""

    model: str
    chips: tuple[str, ...]
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS
    output_tokens: int = DEFAULT_OUTPUT_TOKENS
    tpot_slo_s: float | None = None
    utilisation: float = DEFAULT_UTILISATION


def token_models(catalog) -> list[str]:
    """Catalog models a curve can be drawn for (autoregressive LLMs), in catalog order."""
    return [key for key, m in catalog.models.items() if m.kind == "autoregressive"]


def defaults_from(data: dict, catalog) -> CurveInputs:
    """Starting inputs from the scenario on screen: the first autoregressive workload's
    model and TPOT SLO, the chips its fleets use (else ``dcsim curves``' default chips)."""
    models = token_models(catalog)
    workload = next((w for w in data["workloads"].values() if w.get("model") in models), None)
    model = workload["model"] if workload else "llama-3.1-70b"
    tpot = (workload.get("slo") or {}).get("tpot_s") if workload else None
    chips = tuple(dict.fromkeys(p["accelerator"] for f in data["fleets"] for p in f["pools"]
                                if p["accelerator"] in catalog.accelerators)) or DEFAULT_CHIPS
    return CurveInputs(model, chips, tpot_slo_s=tpot or None)


def tables(inputs: CurveInputs, catalog) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict[str, str]]:
    """(every point as ``curves.csv``, each chip's frontier as ``frontier.csv``, the best
    point at each of :data:`SPEEDS`, chip -> why it has no curve). A chip that cannot hold
    the model or lacks the precision is left out with its reason, not an error."""
    parts, skipped = [], {}
    for chip in inputs.chips:
        try:
            parts.append(curves_table(catalog, inputs.model, [chip], inputs.prompt_tokens, inputs.output_tokens,
                                      tpot_slo_s=inputs.tpot_slo_s, utilisation=inputs.utilisation))
        except Exception as err:  # UserError from the catalog or the model fitting no layout  # noqa: BLE001
            skipped[chip] = " ".join(str(err).split())
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if table.empty:
        return table, table, table, skipped
    return table, frontier(table), summary_at_speeds(table, list(SPEEDS)), skipped


def _band(fig: go.Figure, g: pd.DataFrame, y: str, color: str, chip: str, row: int) -> None:
    x = list(g["tokens_per_s_per_user"])
    fig.add_trace(go.Scatter(x=x + x[::-1], y=list(g[f"{y}_hi"]) + list(g[f"{y}_lo"])[::-1], fill="toself",
                             fillcolor=color, opacity=0.15, line=dict(width=0), hoverinfo="skip",
                             legendgroup=chip, showlegend=False, name=f"{chip} band"), row=row, col=1)


def curves_figure(front: pd.DataFrame, inputs: CurveInputs) -> go.Figure:
    """Two panels, one above the other, log axes: output tokens/s per GPU and $/1M output
    tokens (rented) against tokens/s per user; each chip's frontier (:func:`frontier`)
    with its ± band shaded on throughput; the TPOT SLO region shaded green."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("output tokens/s per GPU", "$ per 1M output tokens (rented)"))
    drawn = [c for c in inputs.chips if c in set(front["accelerator"])]  # in the user's order, colours stable
    for i, chip in enumerate(drawn):
        g = front[front["accelerator"] == chip]
        color = PALETTE[i % len(PALETTE)]
        band = g["band_pct"].iloc[0]
        label = chip + ("" if pd.isna(band) else f" (±{band:g}%)")
        hover = [f"TP{int(r.tp)}" + (f" EP{int(r.ep)}" if r.ep > 1 else "") + f" batch {int(r.batch)}"
                 for r in g.itertuples()]
        _band(fig, g, "tokens_per_s_per_gpu", color, chip, 1)
        fig.add_trace(go.Scatter(x=g["tokens_per_s_per_user"], y=g["tokens_per_s_per_gpu"], mode="lines+markers",
                                 name=label, legendgroup=chip, line=dict(color=color), marker=dict(size=5),
                                 text=hover, hovertemplate="%{text}<br>%{x:.3~g} tok/s/user, %{y:,.0f} tok/s/GPU"
                                                           "<extra>" + chip + "</extra>"), row=1, col=1)
        fig.add_trace(go.Scatter(x=g["tokens_per_s_per_user"], y=g["usd_per_1m_output_tokens"], mode="lines+markers",
                                 name=label, legendgroup=chip, showlegend=False, line=dict(color=color),
                                 marker=dict(size=5), text=hover,
                                 hovertemplate="%{text}<br>%{x:.3~g} tok/s/user, $%{y:.3~g} per 1M"
                                               "<extra>" + chip + "</extra>"), row=2, col=1)
    if inputs.tpot_slo_s:
        # a shape on a log axis takes data values, an annotation log10 of them (plotly)
        fig.add_vrect(x0=1 / inputs.tpot_slo_s, x1=max(front["tokens_per_s_per_user"].max(), 1 / inputs.tpot_slo_s) * 1.5,
                      fillcolor="green", opacity=0.08, line_width=0, row="all", col=1)
        fig.add_annotation(x=math.log10(1 / inputs.tpot_slo_s), y=1.0, yref="paper", xanchor="left", showarrow=False,
                           text=f"meets TPOT ≤ {inputs.tpot_slo_s * 1e3:g} ms", font=dict(color="green", size=13))
    fig.update_xaxes(type="log", title_text="output tokens/s per user (1/TPOT)", row=2, col=1)
    fig.update_xaxes(type="log", row=1, col=1)
    fig.update_yaxes(type="log", title_text="tokens/s per GPU", row=1, col=1)
    fig.update_yaxes(type="log", title_text="$/1M tokens", tickprefix="$", row=2, col=1)
    fig.update_layout(template="plotly_white", height=760, margin=dict(l=70, r=20, t=70, b=50),
                      legend=dict(title_text="chip (band)", font=dict(size=13)), font=dict(size=13),
                      title=f"{inputs.model}: {inputs.prompt_tokens} in / {inputs.output_tokens} out")
    return fig


def speeds_table(summary: pd.DataFrame, utilisation: float, tpot_slo_s: float | None) -> pd.DataFrame:
    """The text table of ``dcsim curves`` as a frame for the page: per chip and minimum
    per-user speed, the best layout and its tokens/s per GPU (band), $/1M, tokens/s per
    MW at ``utilisation`` and whether it meets the TPOT SLO ("—" without one)."""
    rows = []
    for _, r in summary.iterrows():
        reached = not pd.isna(r.get("tokens_per_s_per_gpu"))
        band = "" if not reached or pd.isna(r["band_pct"]) else f" ±{r['band_pct']:.0f}%"
        rows.append({
            "chip": r["accelerator"], "≥ tok/s/user": f"{r['tokens_per_s_per_user_min']:g}",
            "layout, batch": (f"TP{int(r['tp'])}" + (f" EP{int(r['ep'])}" if r["ep"] > 1 else "")
                              + f" b={int(r['batch'])}") if reached else "not reached",
            "tok/s/user": f"{r['tokens_per_s_per_user']:,.0f}" if reached else "—",
            "tok/s per GPU (band)": f"{r['tokens_per_s_per_gpu']:,.0f}{band}" if reached else "—",
            "$/1M out tokens": f"${r['usd_per_1m_output_tokens']:.2f}" if reached else "—",
            f"tok/s per MW at {utilisation:.0%}": f"{r['tokens_per_s_per_mw']:,.0f}" if reached else "—",
            "meets TPOT SLO": ("yes" if r["meets_tpot_slo"] else "no") if reached and tpot_slo_s else "—",
        })
    return pd.DataFrame(rows)
