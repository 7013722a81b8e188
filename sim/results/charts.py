"""Plotly figures of a run and of a sweep, shared by the dashboard and ``dcsim report``.

Every function is pure: tidy DataFrames (the tables of :class:`sim.results.tables.Results` or a
sweep table) in, a ``go.Figure`` or a small DataFrame out. Times are seconds and money USD
inside; they become ms / s, $ and % only in axis titles, ticks and hover text here. Each
fleet keeps one colour in every chart: pass the same :func:`fleet_colors` map to all.
"""

from __future__ import annotations

from dataclasses import dataclass

import math
from typing import Iterable, Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from fleets.catalog import perf_band
from sim.results.qualify import fleet_qualifying_rows
from sim.results.report_text import MISSING, human, percent, rejections, seconds, usd
from sim.scenario import split_serves
from sim.workloads import KINDS

PALETTE = qualitative.D3
CDF_POINTS = 400
LATENCY_LABELS = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "E2E"}
UTILISATION_COLUMNS = {
    "busy_fraction": "busy", "mfu": "MFU", "bandwidth_utilisation": "memory-BW utilisation",
    "hbm_mean_fraction": "HBM mean", "hbm_peak_fraction": "HBM peak",
    "batch_fill_fraction": "batch / max_batch", "memory_used_mean_fraction": "KV (or activation) memory in use",
}
COST_PARTS = {
    "depreciation_usd_per_hour": "capex amortisation",
    "energy_usd_per_hour": "power",
    "maintenance_usd_per_hour": "maintenance",
    "staff_usd_per_hour": "staff",
    "other_opex_usd_per_hour": "other opex",
    "rent_usd_per_hour": "rent",
}
OPTIONAL_COST_PARTS = ("maintenance_usd_per_hour", "staff_usd_per_hour")
LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=20, t=60, b=50), legend_title_text="fleet")


def fleet_colors(fleets: Iterable[str]) -> dict[str, str]:
    """One colour per fleet, in the order given (use the scenario's fleet order)."""
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(dict.fromkeys(fleets))}


def _colors(colors: Mapping[str, str] | None, fleets: Iterable[str]) -> Mapping[str, str]:
    return colors if colors is not None else fleet_colors(fleets)


def time_unit(max_s: float) -> tuple[str, float]:
    """Display unit for durations up to ``max_s``: ("ms", 1e-3) below 1 s, else ("s", 1)."""
    return ("ms", 1e-3) if not math.isfinite(max_s) or max_s < 1.0 else ("s", 1.0)


def _fleets(df: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(df["fleet"])) if "fleet" in df.columns else []


# --- KPI cards ----------------------------------------------------------------------

@dataclass(frozen=True)
class FleetBands:
    """The performance model's uncertainty bands (±%) in one fleet: per pool (its
    accelerator's ``efficiency_band_pct``), per workload (the widest band among the pools
    that serve it, with those pools' accelerators), and ``widest`` for the fleet's totals
    (a sum of pools is known no better than its least certain pool)."""

    pools: dict
    workloads: dict
    widest: tuple[float, list[str]] | None

    def workload(self, name: str) -> tuple[float, list[str]] | None:
        return self.workloads.get(name)


def perf_bands(scenario, accelerators: Mapping) -> dict[str, FleetBands]:
    """Per fleet of ``scenario``: its :class:`FleetBands`, from each pool's accelerator
    (``accelerators``: the catalog's, by key; :func:`fleets.catalog.perf_band` for a set of
    pools). The bands come from ``dcsim validate``'s leave-one-accelerator-out residuals."""
    out = {}
    for fleet in scenario.fleets:
        pools = {p.name: perf_band(accelerators, [p.accelerator]) for p in fleet.pools}
        workloads = {}
        for w in {w for p in fleet.pools for w in p.serves}:
            serving = [p.accelerator for p in fleet.pools if w in p.serves]
            workloads[w] = perf_band(accelerators, serving)
        out[fleet.name] = FleetBands({k: None if v is None else v[0] for k, v in pools.items()}, workloads,
                                     perf_band(accelerators, (p.accelerator for p in fleet.pools)))
    return out


def _fleet_band(band) -> tuple[float, list[str]] | None:
    return band.widest if isinstance(band, FleetBands) else band


def _workload_band(band, workload: str) -> tuple[float, list[str]] | None:
    return band.workload(workload) if isinstance(band, FleetBands) else band


def band_text(band) -> str:
    """The fleet card's band line: each pool's band ('a ±28%, b ±27%'), or the one band of
    a (band, accelerators) tuple; 'no band' when none is known."""
    if isinstance(band, FleetBands):
        known = {k: v for k, v in band.pools.items() if v is not None}
        if not known:
            return "no band (dcsim validate gave none)"
        return "per pool: " + ", ".join(f"{k} ±{v:g}%" for k, v in known.items()) + " (held-out residuals)"
    if band is None:
        return "no band (dcsim validate gave none)"
    return f"±{band[0]:g}% on latency, throughput, $ ({', '.join(band[1])})"


def with_band(text: str, band: tuple[float, list[str]] | None) -> str:
    """``text`` followed by ' ±25%' when a band applies and the value is known."""
    return text if band is None or text in (MISSING, "") else f"{text} ±{band[0]:g}%"


def kpi_fleet(fleet: pd.Series, summary: pd.DataFrame, band=None, ownership: str = "own") -> dict[str, str]:
    """Headline numbers of one fleet, formatted: capex, opex/month, IT power (average and
    max), worst SLO attainment, facility energy per day, output tokens per MW (± the
    widest pool band of :func:`perf_bands`, when given: a fleet total is known no better
    than its least certain pool), own vs rent $/hour, and each pool's band.  Costs per request or token are per workload
    (:func:`kpi_workloads`): an average over chat tokens, images and searches would mean
    nothing. Under ``ownership: rent`` there is no capex (buying's price is shown as such)
    and the opex is the rent."""
    renting = ownership == "rent"
    rows = summary[summary["fleet"] == fleet["fleet"]]
    slo = rows["slo_attainment"].min() if len(rows) else math.nan
    out = {
        "capex": f"none, rented (buying: {usd(fleet['capex_usd'])})" if renting else usd(fleet["capex_usd"]),
        "opex / month": usd(fleet["opex_usd_per_month"]) + (" (rent)" if renting else ""),
        "IT power avg / max": (f"{human(fleet['it_power_avg_kw'])} / {human(fleet['it_power_max_kw'])} kW"
                               if "it_power_avg_kw" in fleet else f"{human(fleet['it_power_max_kw'])} kW"),
        "worst SLO attainment": percent(slo, decimals=1),
        "energy / day": f"{human(fleet['facility_energy_kwh_per_day'])} kWh" if "facility_energy_kwh_per_day" in fleet else "—",
        "output tokens/s per MW": with_band(human(fleet["output_tokens_per_s_per_mw"]), _fleet_band(band))
                                  if "output_tokens_per_s_per_mw" in fleet else "—",
        "own / rent per hour": (f"{usd(fleet['own_cost_usd_per_hour'])} / {usd(fleet['rent_usd_per_hour'])}"
                                if "own_cost_usd_per_hour" in fleet else "—"),
    }
    out["perf model band"] = band_text(band)
    return out


def kpi_workloads(summary: pd.DataFrame, fleet: str, bands=None) -> pd.DataFrame:
    """Per workload of one fleet: p99 TTFT / E2E (≥ when the run is unstable: lower
    bounds), offered / served / goodput rates, rejections, SLO attainment and why
    requests missed, $/request, status. With ``bands`` (:func:`perf_bands`) latency,
    served throughput and costs carry the ± band of the pools serving that workload."""
    rows = []
    for _, r in summary[summary["fleet"] == fleet].iterrows():
        band = _workload_band(bands, r["workload"])
        missed = not pd.isna(r["slo_attainment"]) and r["slo_attainment"] < r["slo_target"]
        bound = "≥ " if r.get("tails_lower_bound", False) else ""
        rows.append({
            "workload": r["workload"],
            "p99 TTFT": with_band(bound + seconds(r["ttft_p99_s"]), band),
            "p99 E2E": with_band(bound + seconds(r["e2e_p99_s"]), band),
            "req/s offered / served / goodput": " / ".join(  # offered is the demand: no band
                [human(r.get("arrival_rate_rps", math.nan))]
                + [with_band(human(r.get(c, math.nan)), band) for c in ("throughput_rps", "goodput_rps")]),
            "rejected (share, reason)": rejections(r),
            "SLO met": percent(r["slo_attainment"], decimals=1),
            "misses TTFT/TPOT/E2E/rejected/unfinished": " / ".join(
                str(int(r.get(f"slo_miss_{k}", 0))) for k in ("ttft", "tpot", "e2e", "rejected", "unfinished")),
            "$/request": with_band(usd(r["cost_per_request_usd"]), band),
            "$/1M output tokens": with_band(usd(r.get("cost_per_1m_output_tokens_usd", math.nan)), band),
            "J/request": human(r["energy_per_request_j"]) if "energy_per_request_j" in r else "—",
            "J/output token": human(r.get("energy_per_output_token_j", math.nan)),
            "status": "UNSTABLE" if r["unstable"] else ("SLO missed" if missed else "ok"),
        })
    return pd.DataFrame(rows)


# --- latency ------------------------------------------------------------------------

def cdf_points(values: np.ndarray, points: int = CDF_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Empirical CDF (x sorted, y = fraction ≤ x), thinned to at most ``points`` points
    (quantiles at even steps plus the last 1% in full, so the tail stays exact)."""
    x = np.sort(values)
    y = np.arange(1, len(x) + 1) / max(len(x), 1)
    if len(x) <= points:
        return x, y
    keep = np.unique(np.concatenate([np.linspace(0, len(x) - 1, points).astype(int),
                                     np.arange(int(0.99 * len(x)), len(x))]))
    return x[keep], y[keep]


DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def latency_cdf(requests: pd.DataFrame, workload: str, colors: Mapping[str, str] | None = None,
                slo_s: Mapping[str, float | None] | None = None, log_x: bool = False) -> go.Figure:
    """CDFs of TTFT, TPOT and E2E for one workload (measured, completed requests), one
    line per fleet; metrics a workload does not report (TTFT of an image) are left out.

    Each fleet has its own dash style and width, so identical fleets stay visible on top
    of one another.  ``slo_s`` maps a metric (``ttft_s``...) to its SLO bound in seconds,
    drawn as a vertical line; ``log_x`` puts the latencies on a log axis for the tails."""
    g = requests[(requests["workload"] == workload) & (requests["status"] == "completed")]
    if "measured" in g.columns:
        g = g[g["measured"]]
    metrics = [m for m in LATENCY_LABELS if m in g.columns and g[m].notna().any()] or ["e2e_s"]
    colors = _colors(colors, _fleets(requests))
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=[LATENCY_LABELS[m] for m in metrics])
    for col, metric in enumerate(metrics, start=1):
        unit, scale = time_unit(g[metric].max() if len(g) else math.nan)
        shown = g[metric].dropna().to_numpy() / scale
        for i, (fleet, fg) in enumerate(g.groupby("fleet", sort=False)):
            x, y = cdf_points(fg[metric].dropna().to_numpy() / scale)
            fig.add_trace(go.Scatter(
                x=x, y=y, mode="lines", name=str(fleet), legendgroup=str(fleet), showlegend=col == 1,
                line=dict(color=colors.get(fleet), dash=DASHES[i % len(DASHES)], width=max(1.5, 4.0 - 0.6 * i)),
                hovertemplate=f"{fleet}<br>%{{x:.3~g}} {unit}: %{{y:.1%}} of requests<extra></extra>",
            ), row=1, col=col)
        bound = (slo_s or {}).get(metric)
        if bound:
            fig.add_vline(x=bound / scale, line=dict(color="#c0392b", dash="dot", width=1.5), row=1, col=col,
                          annotation_text=f"SLO {seconds(bound)}", annotation_position="bottom right")
        fig.update_xaxes(title_text=f"{LATENCY_LABELS[metric]} ({unit}{', log' if log_x else ''})",
                         type="log" if log_x else "linear", row=1, col=col,
                         range=_log_range(shown, bound / scale if bound else None) if log_x else None)
    fig.update_yaxes(title_text="fraction of requests ≤ x (%)", tickformat=".0%", row=1, col=1)
    fig.update_yaxes(tickformat=".0%", range=[0, 1.02])
    fig.update_layout(title=f"Latency CDFs: {workload}", **LAYOUT)
    return fig


def _log_range(values: np.ndarray, bound: float | None) -> list[float] | None:
    """A log axis's range (decades) spanning the positive ``values`` and the SLO
    ``bound``, padded by 5% of a decade each side; None (autorange) with no positive value."""
    positive = values[values > 0]
    points = ([float(positive.min()), float(positive.max())] if len(positive) else []) + ([bound] if bound and bound > 0 else [])
    if not points:
        return None
    lo, hi = math.log10(min(points)), math.log10(max(points))
    return [lo - 0.05, hi + 0.05]


# --- utilisation --------------------------------------------------------------------

def busy_over_time(timeseries: pd.DataFrame, pools: pd.DataFrame, window: int | None = None) -> pd.DataFrame:
    """Busy fraction per pool over time from the cumulative ``busy_total_s``.

    Busy time is booked when a replica's busy interval ends, so one sample period can
    hold more than one period of work; the fraction is taken over a trailing window of
    ``window`` samples (default: 1/20 of the run) and clipped to [0, 1]."""
    replicas = pools.set_index(["fleet", "pool"])["replicas"]
    frames = []
    for (fleet, pool), g in timeseries.groupby(["fleet", "pool"], sort=False):
        g = g.sort_values("t_s")
        w = window or max(1, len(g) // 20)
        dt = g["t_s"].diff(w)
        busy = g["busy_total_s"].diff(w) / (dt * replicas.get((fleet, pool), 1))
        frames.append(g.assign(busy_fraction=busy.clip(0, 1)))
    return pd.concat(frames, ignore_index=True) if frames else timeseries.assign(busy_fraction=[])


def utilisation_over_time(timeseries: pd.DataFrame, pools: pd.DataFrame, fleet: str) -> go.Figure:
    """Three stacked panels for one fleet: busy fraction per pool, queued requests, and
    the batch in flight against the pool's capacity (replicas × ``max_batch``): busy
    100% with a small batch is not saturation; a full batch with a growing queue is."""
    ts = busy_over_time(timeseries[timeseries["fleet"] == fleet], pools)
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07,
                        subplot_titles=["busy fraction per pool", "queue length per pool",
                                        "batch in flight / (replicas × max_batch)"])
    mine = pools[pools["fleet"] == fleet].set_index("pool")
    for i, (pool, g) in enumerate(ts.groupby("pool", sort=False)):
        color = PALETTE[i % len(PALETTE)]
        fig.add_trace(go.Scatter(x=g["t_s"], y=g["busy_fraction"], name=str(pool), legendgroup=str(pool),
                                 line=dict(color=color), hovertemplate="%{x:.0f} s: %{y:.0%} busy<extra>" + str(pool) + "</extra>"),
                      row=1, col=1)
        queued = g["queued"] + g.get("central_queued", 0)
        fig.add_trace(go.Scatter(x=g["t_s"], y=queued, name=str(pool), legendgroup=str(pool), showlegend=False,
                                 line=dict(color=color, dash="dot"),
                                 hovertemplate="%{x:.0f} s: %{y} queued<extra>" + str(pool) + "</extra>"),
                      row=2, col=1)
        if "running" in g.columns and "max_batch" in mine.columns and pool in mine.index:
            fill = g["running"] / (mine.at[pool, "replicas"] * mine.at[pool, "max_batch"])
            fig.add_trace(go.Scatter(x=g["t_s"], y=fill, name=str(pool), legendgroup=str(pool), showlegend=False,
                                     line=dict(color=color, dash="dash"),
                                     hovertemplate="%{x:.0f} s: batch %{y:.0%} full<extra>" + str(pool) + "</extra>"),
                          row=3, col=1)
    fig.update_yaxes(title_text="busy (%)", tickformat=".0%", range=[0, 1.05], row=1, col=1)
    fig.update_yaxes(title_text="queued requests (count)", rangemode="tozero", row=2, col=1)
    fig.update_yaxes(title_text="batch fill (%)", tickformat=".0%", range=[0, 1.05], row=3, col=1)
    fig.update_xaxes(title_text="simulated time (s)", row=3, col=1)
    fig.update_layout(title=f"Utilisation over time: {fleet}", **{**LAYOUT, "legend_title_text": "pool"})
    return fig


def pool_utilisation(pools: pd.DataFrame) -> go.Figure:
    """Grouped bars per pool (x: fleet / pool): busy, MFU, memory-BW utilisation, HBM,
    batch fill and KV occupancy (saturation: busy 100% with a small batch is not full)."""
    x = [pools["fleet"].astype(str), pools["pool"].astype(str)]
    fig = go.Figure()
    for i, (column, label) in enumerate(UTILISATION_COLUMNS.items()):
        if column not in pools.columns:
            continue
        values = pools[column].astype(float)
        fig.add_trace(go.Bar(x=x, y=values, name=label, marker_color=qualitative.Safe[i],
                             customdata=[percent(v) for v in values],
                             hovertemplate="%{x}: %{customdata}<extra>" + label + "</extra>"))
    fig.update_layout(title="Utilisation per pool (measurement window)", barmode="group",
                      yaxis=dict(title="fraction of capacity (%)", tickformat=".0%", rangemode="tozero"),
                      xaxis=dict(title="fleet / pool"), **{**LAYOUT, "legend_title_text": "metric"})
    return fig


# --- cost ---------------------------------------------------------------------------

def _cost_parts(pools: pd.DataFrame) -> list[str]:
    """The columns that add up to ``cost_usd_per_hour``: the rent when the fleet is
    rented, else capital, power, other opex and (when charged) maintenance and staff."""
    if "rent_usd_per_hour" in pools and pools["rent_usd_per_hour"].notna().all() and \
            pools["cost_usd_per_hour"].equals(pools["rent_usd_per_hour"]) and pools["rent_usd_per_hour"].sum() > 0:
        return ["rent_usd_per_hour"]
    return [c for c in COST_PARTS if c in pools and c != "rent_usd_per_hour"
            and (c not in OPTIONAL_COST_PARTS or pools[c].sum() > 0)]


def cost_breakdown(pools: pd.DataFrame, colors: Mapping[str, str] | None = None) -> go.Figure:
    """Stacked bars of hourly cost per fleet: capex amortisation, power, other opex."""
    parts = _cost_parts(pools)
    by_fleet = pools.groupby("fleet", sort=False)[parts].sum()
    fig = go.Figure()
    shades = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#9d9d9d")
    for (column, label), shade in zip(((c, COST_PARTS[c]) for c in parts), shades):
        values = by_fleet[column]
        fig.add_trace(go.Bar(x=list(by_fleet.index), y=values, name=label, marker_color=shade,
                             text=[usd(v) for v in values], textposition="inside",
                             hovertemplate="%{x}: %{text}/hour<extra>" + label + "</extra>"))
    totals = by_fleet.sum(axis=1)
    fig.add_trace(go.Scatter(x=list(by_fleet.index), y=totals, mode="text", text=[f"{usd(v)}/h" for v in totals],
                             textposition="top center", showlegend=False, hoverinfo="skip"))
    colors = _colors(colors, by_fleet.index)
    ticks = [f"<span style='color:{colors.get(f, '#444')}'><b>{f}</b></span>" for f in by_fleet.index]
    fig.update_xaxes(title_text="fleet", tickvals=list(by_fleet.index), ticktext=ticks)
    fig.update_layout(title="Hourly cost per fleet", barmode="stack",
                      yaxis=dict(title="cost ($/hour)", tickprefix="$", rangemode="tozero"),
                      **{**LAYOUT, "legend_title_text": "cost"})
    return fig


def cost_per_request(summary: pd.DataFrame, colors: Mapping[str, str] | None = None) -> go.Figure:
    """$/request per workload (one panel each, own scale), one bar per fleet."""
    workloads = list(dict.fromkeys(summary["workload"]))
    colors = _colors(colors, _fleets(summary))
    many = len(_fleets(summary)) >= 5  # narrow bars: labels upright would shrink to ~6 px
    cols = max(len(workloads), 1)
    # room between panels for each panel's own $ tick labels ("$0.00015")
    fig = make_subplots(rows=1, cols=cols, subplot_titles=workloads, horizontal_spacing=min(0.12, 0.6 / cols))
    for col, workload in enumerate(workloads, start=1):
        g = summary[summary["workload"] == workload]
        for _, r in g.iterrows():
            v = r["cost_per_request_usd"]
            fig.add_trace(go.Bar(x=[r["fleet"]], y=[v], name=str(r["fleet"]), legendgroup=str(r["fleet"]),
                                 showlegend=col == 1, marker_color=colors.get(r["fleet"]),
                                 text=[usd(v)], textposition="outside", textangle=-90 if many else 0,
                                 textfont=dict(size=11), cliponaxis=False,
                                 hovertemplate=f"{r['fleet']}: {usd(v)} per request<extra>{workload}</extra>"),
                          row=1, col=col)
        fig.update_yaxes(tickprefix="$", tickformat=".2~g", rangemode="tozero", row=1, col=col)
    fig.update_yaxes(title_text="cost per request ($/request)", row=1, col=1)
    fig.update_xaxes(showticklabels=True, tickangle=-45 if many else 0, tickfont=dict(size=11))
    fig.update_layout(title="Fully loaded cost per request", uniformtext=dict(minsize=10, mode="show"), **LAYOUT)
    return fig


# --- roofline -----------------------------------------------------------------------

def kind_label(kind: str | None, default: str) -> str:
    """Short chart label of a workload kind ("AR", "image"; kinds joined by "+" keep the
    "+"); ``default`` when there is none."""
    if not kind:
        return default
    parts = kind.split("+")
    return "+".join(KINDS[k].label for k in parts) if all(k in KINDS for k in parts) else kind


def pool_kinds(scenario) -> dict[tuple[str, str], str]:
    """(fleet, pool) -> workload kind(s) it serves, e.g. 'autoregressive'."""
    kinds = {}
    for fleet in scenario.fleets:
        for pool in fleet.pools:
            served = dict.fromkeys(scenario.workloads[split_serves(w)[0]].kind for w in pool.serves)
            kinds[(fleet.name, pool.name)] = "+".join(served)
    return kinds


def roofline(pools: pd.DataFrame, accelerators: Mapping, kinds: Mapping[tuple[str, str], str] | None = None,
             colors: Mapping[str, str] | None = None) -> go.Figure:
    """Per-accelerator rooflines (peak FLOP/s vs arithmetic intensity, log-log, ridge
    marked) with each pool's measured operating point, per accelerator chip; marker
    symbol and label give the workload kind, colour the fleet.

    ``accelerators`` maps catalog key -> :class:`fleets.catalog.Accelerator`. A pool's
    achieved FLOP/s is per replica (TP × PP chips); it is scaled by the ratio of the chip's
    peak to the replica's peak so points and roofs share one per-chip axis."""
    pools = pools.dropna(subset=["arithmetic_intensity_flop_per_byte", "achieved_flops_per_s"])
    colors = _colors(colors, _fleets(pools))
    kinds = kinds or {}
    fig = go.Figure()
    roofs = pools[["accelerator", "precision"]].drop_duplicates()
    ridges = [accelerators[k].peak_flops(p) / accelerators[k].memory_bw_bytes_per_s for k, p in roofs.itertuples(index=False)]
    ai = pools["arithmetic_intensity_flop_per_byte"]
    lo = min([*ai, *ridges], default=1.0) / 10
    hi = max([*ai, *ridges], default=1e3) * 10
    intensity = np.logspace(math.log10(lo), math.log10(hi), 200)
    for i, (key, precision) in enumerate(roofs.itertuples(index=False)):
        _add_roof(fig, accelerators[key], key, precision, intensity, ("solid", "dash", "dot", "dashdot", "longdash")[i % 5])
    order = _fleets(pools)
    # coinciding points (identical pools in several fleets) stay visible as concentric
    # markers: earlier fleets larger and drawn first, later ones smaller on top
    for _, p in pools.assign(_order=pools["fleet"].map(order.index)).sort_values("_order", kind="stable").iterrows():
        size = max(ROOFLINE_MIN_SIZE, ROOFLINE_MAX_SIZE - 2 * order.index(p["fleet"]))
        _add_operating_point(fig, p, accelerators, kinds.get((p["fleet"], p["pool"]), ""), colors, size)
    for fleet in _fleets(pools):  # legend: one entry per fleet, one per workload kind
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=str(fleet), legendgroup="fleets",
                                 marker=dict(color=colors.get(fleet), size=11)))
    for kind in dict.fromkeys(kinds.get((f, p), "") for f, p in zip(pools["fleet"], pools["pool"])):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=kind_label(kind, "pool"),
                                 legendgroup="kinds", marker=dict(color="#777", size=11, symbol=_symbol(kind))))
    fig.update_xaxes(type="log", dtick=1, title_text="arithmetic intensity (FLOP/byte)")
    fig.update_yaxes(type="log", dtick=1, tickformat="~s", title_text="achieved FLOP/s per accelerator (FLOP/s)")
    fig.update_layout(title=roofline_title(pools, accelerators, kinds),
                      height=560, **{**LAYOUT, "legend_title_text": "fleet / roof / kind"})
    return fig


def roofline_title(pools: pd.DataFrame, accelerators: Mapping, kinds: Mapping[tuple[str, str], str]) -> str:
    """What the plotted points show: which pools sit left of their roof's ridge
    (memory-bound) and which right of it (compute-bound), by workload kind."""
    bound: dict[str, list[str]] = {"memory-bound": [], "compute-bound": []}
    for _, p in pools.iterrows():
        acc = accelerators[p["accelerator"]]
        ridge = acc.peak_flops(p["precision"]) / acc.memory_bw_bytes_per_s
        side = "memory-bound" if p["arithmetic_intensity_flop_per_byte"] < ridge else "compute-bound"
        kind = kinds.get((p["fleet"], p["pool"]), "")
        bound[side].append(kind_label(kind, str(p["pool"])))
    parts = [f"{side}: " + ", ".join(f"{k} ×{n}" if n > 1 else k for k, n in pd.Series(labels).value_counts(sort=False).items())
             for side, labels in bound.items() if labels]
    return "Roofline: " + ("; ".join(parts) if parts else "no pool did work")


def _symbol(kind: str) -> str:
    first = kind.split("+")[0]
    return KINDS[first].marker if first in KINDS else "circle"


def _add_roof(fig: go.Figure, acc, key: str, precision: str, intensity: np.ndarray, dash: str) -> None:
    peak, bw = acc.peak_flops(precision), acc.memory_bw_bytes_per_s
    fig.add_trace(go.Scatter(
        x=intensity, y=np.minimum(peak, intensity * bw), mode="lines", name=f"{key} {precision} roof",
        line=dict(color="#555", dash=dash, width=1.5), legendgroup="roofs",
        hovertemplate=f"{key} {precision}<br>%{{x:.3~g}} FLOP/byte → %{{y:.3~s}}FLOP/s<extra></extra>"))
    ridge = peak / bw
    fig.add_trace(go.Scatter(x=[ridge], y=[peak], mode="markers", marker=dict(color="#555", size=7, symbol="line-ns-open"),
                             showlegend=False, hovertemplate=f"{key} {precision} ridge: {ridge:.0f} FLOP/byte<extra></extra>"))


ROOFLINE_MAX_SIZE, ROOFLINE_MIN_SIZE = 21, 7  # marker sizes (px) of the first and of later fleets


def _add_operating_point(fig: go.Figure, p: pd.Series, accelerators: Mapping, kind: str, colors: Mapping[str, str],
                         size: int = 13) -> None:
    chip = accelerators[p["accelerator"]].peak_flops(p["precision"])
    per_chip = p["achieved_flops_per_s"] * chip / p["peak_flops_per_s"]
    label = kind_label(kind, str(p["pool"]))
    fig.add_trace(go.Scatter(
        x=[p["arithmetic_intensity_flop_per_byte"]], y=[per_chip], mode="markers+text",
        name=str(p["fleet"]), legendgroup="fleets", showlegend=False,
        marker=dict(color=colors.get(p["fleet"]), size=size, symbol=_symbol(kind), line=dict(color="white", width=1.5)),
        text=[label], textposition="bottom center", textfont=dict(size=10, color=colors.get(p["fleet"])),
        hovertemplate=(f"{p['fleet']} / pool {p['pool']} on {p['accelerator']} ({label})<br>"
                       "%{x:.3~g} FLOP/byte, %{y:.3~s}FLOP/s per chip<extra></extra>")))


# --- sweeps -------------------------------------------------------------------------

SWEEP_ID_COLUMNS = {"fleet", "workload", "kind", "point", "point_id", "seed", "seeds", "error", "status", "replications"}


def metric_column(df: pd.DataFrame, metric: str) -> str:
    """The column holding ``metric`` in a sweep table: ``<metric>_mean`` if the table
    aggregates seeds, else ``<metric>`` itself.

    Raises:
        KeyError: neither exists."""
    for column in (f"{metric}_mean", metric):
        if column in df.columns:
            return column
    raise KeyError(f"sweep table has no column {metric!r} or {metric + '_mean'!r}")


def swept_columns(df: pd.DataFrame) -> list[str]:
    """Swept parameters: columns named by a dotted scenario path
    (``workloads.chat.arrival.rate_per_s``) that take more than one value."""
    return [c for c in df.columns if "." in c and c not in SWEEP_ID_COLUMNS and df[c].nunique(dropna=True) > 1]


def pareto_mask(cost: np.ndarray, latency: np.ndarray) -> np.ndarray:
    """True for points no other point beats on both cost and latency (lower is better)."""
    cost, latency = np.asarray(cost, float), np.asarray(latency, float)
    ok = np.isfinite(cost) & np.isfinite(latency)
    mask = np.zeros(len(cost), dtype=bool)
    for i in np.flatnonzero(ok):
        dominated = ok & (cost <= cost[i]) & (latency <= latency[i]) & ((cost < cost[i]) | (latency < latency[i]))
        mask[i] = not dominated.any()
    return mask


def pareto_latency(kind: str | None) -> str:
    """The latency a sweep's Pareto front trades against $/request, for a workload of
    ``kind``: p99 TTFT for token workloads (autoregressive, diffusion_lm: the wait before
    the first token), p99 E2E for the others (or an unknown kind). The one rule for the
    ``Pareto`` flag ``dcsim sweep`` prints and the Pareto chart."""
    return "ttft_p99_s" if kind in KINDS and KINDS[kind].per_token else "e2e_p99_s"


def pareto_front(sweep: pd.DataFrame, workload: str, latency: str | None = None,
                 colors: Mapping[str, str] | None = None) -> go.Figure:
    """$/request vs p99 latency of every sweep point × fleet for one workload; the
    Pareto-optimal points are joined by a line. ``latency`` (a metric name such as
    ``e2e_p99_s``) defaults to :func:`pareto_latency` of the workload's ``kind`` column."""
    g = sweep[sweep["workload"] == workload] if "workload" in sweep.columns else sweep
    if latency is None:
        latency = pareto_latency(g["kind"].iloc[0] if "kind" in g.columns and len(g) else None)
    x_col, y_col = metric_column(g, latency), metric_column(g, "cost_per_request_usd")
    g = g.dropna(subset=[x_col, y_col])
    unit, scale = time_unit(g[x_col].max() if len(g) else math.nan)
    params = swept_columns(sweep)
    colors = _colors(colors, _fleets(sweep))
    fig = go.Figure()
    for fleet, fg in g.groupby("fleet", sort=False):
        hover = ["<br>".join(f"{p}={r[p]}" for p in params) for _, r in fg.iterrows()]
        fig.add_trace(go.Scatter(x=fg[x_col] / scale, y=fg[y_col], mode="markers", name=str(fleet),
                                 marker=dict(color=colors.get(fleet), size=9), text=hover,
                                 hovertemplate=f"{fleet}<br>%{{x:.3~g}} {unit}, $%{{y:.3~g}}/request<br>%{{text}}<extra></extra>"))
    # one front per set of swept values (never across load levels), among fleets that qualify there
    # (every workload meets its SLO target, no unstable seed): the rule of the printed Pareto flag
    if "slo_attainment_mean" in sweep.columns:
        ok, _ = fleet_qualifying_rows(sweep, params)
        met = g[ok.loc[g.index]]
    else:
        att = metric_column(g, "slo_attainment") if any(c.startswith("slo_attainment") for c in g) else None
        met = g if att is None else g[g[att].fillna(0) > 0]
    for i, (_, pg) in enumerate(met.groupby(params, sort=False, dropna=False) if params else [((), met)]):
        front = pg[pareto_mask(pg[y_col].to_numpy(), pg[x_col].to_numpy())].sort_values(x_col)
        fig.add_trace(go.Scatter(x=front[x_col] / scale, y=front[y_col], mode="lines", name="Pareto front",
                                 legendgroup="pareto", showlegend=i == 0, hoverinfo="skip",
                                 line=dict(color="black", dash="dash", shape="hv")))
    label = LATENCY_LABELS.get(latency.split("_p")[0] + "_s", latency)
    fig.update_layout(title=f"Pareto front: {workload}", xaxis=dict(title=f"p99 {label} latency ({unit})"),
                      yaxis=dict(title="cost per request ($/request)", tickprefix="$"), **LAYOUT)
    return fig


def sweep_heatmap(sweep: pd.DataFrame, x: str, y: str, metric: str = "cost_per_request_usd",
                  fleet: str | None = None, workload: str | None = None) -> go.Figure:
    """Mean of ``metric`` over a grid of two swept parameters (other parameters averaged),
    for one fleet and workload."""
    g = sweep
    if fleet is not None:
        g = g[g["fleet"] == fleet]
    if workload is not None:
        g = g[g["workload"] == workload]
    column = metric_column(g, metric)
    grid = g.pivot_table(index=y, columns=x, values=column, aggfunc="mean").sort_index()
    money = metric.endswith("_usd")
    unit, scale = ("$", 1.0) if money else (("%", 1.0) if metric == "slo_attainment" else time_unit(np.nanmax(grid.to_numpy()) if grid.size else math.nan))
    z = grid.to_numpy() / scale
    fmt = usd if money else (percent if metric == "slo_attainment" else (lambda v: f"{human(v)} {unit}"))
    text = [[fmt(v * scale) for v in row] for row in z]
    fig = go.Figure(go.Heatmap(z=z, x=[str(v) for v in grid.columns], y=[str(v) for v in grid.index], text=text,
                               texttemplate="%{text}", colorscale="Viridis", colorbar=dict(title=unit),
                               hovertemplate=f"{x}=%{{x}}<br>{y}=%{{y}}<br>%{{text}}<extra></extra>"))
    where = " / ".join(str(v) for v in (fleet, workload) if v)
    fig.update_layout(title=f"{metric} ({unit}) {where}", xaxis=dict(title=x, type="category"),
                      yaxis=dict(title=y, type="category"), **LAYOUT)
    return fig


# --- why a fleet missed its SLO -----------------------------------------------------

MISS_LABELS = {"rejected": "rejected", "unfinished": "unfinished at the end", "ttft": "TTFT over bound",
               "tpot": "TPOT over bound", "e2e": "E2E over bound"}


def slo_miss_breakdown(summary: pd.DataFrame) -> pd.DataFrame:
    """Per fleet and workload: SLO attainment, its target, and the share of all measured
    requests that missed for each reason (``slo_miss_<reason>`` / ``requests``; each miss
    is counted once under its first reason, so the shares add up to 1 − attainment)."""
    rows = []
    for _, r in summary.iterrows():
        row = {"fleet": r["fleet"], "workload": r["workload"], "requests": int(r["requests"]),
               "slo_attainment": r["slo_attainment"], "slo_target": r["slo_target"]}
        for reason in MISS_LABELS:
            row[f"miss_{reason}_share"] = r.get(f"slo_miss_{reason}", 0) / r["requests"] if r["requests"] else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def slo_miss_chart(summary: pd.DataFrame) -> go.Figure:
    """Stacked bars, one per fleet / workload: share of requests that missed the SLO, by
    reason (rejected, unfinished, TTFT, TPOT, E2E)."""
    table = slo_miss_breakdown(summary)
    labels = [f"{f} / {w}" for f, w in zip(table["fleet"], table["workload"])]
    fig = go.Figure()
    for i, (reason, label) in enumerate(MISS_LABELS.items()):
        fig.add_trace(go.Bar(y=labels, x=table[f"miss_{reason}_share"], name=label, orientation="h",
                             marker_color=PALETTE[(i + 3) % len(PALETTE)],
                             hovertemplate=f"%{{y}}<br>{label}: %{{x:.1%}} of requests<extra></extra>"))
    fig.update_layout(title="Why requests missed the SLO (share of measured requests)", barmode="stack",
                      xaxis=dict(title="requests missing the SLO (%)", tickformat=".0%", rangemode="tozero"),
                      yaxis=dict(title="fleet / workload", automargin=True, autorange="reversed"),
                      height=max(320, 30 * len(labels) + 140), **{**LAYOUT, "legend_title_text": "reason"})
    return fig


def saturation_signals(pools: pd.DataFrame) -> pd.DataFrame:
    """Per pool, formatted: busy fraction, mean batch against ``max_batch``, KV (or
    activation) memory in use mean / peak, queue mean / max / at the end, and whether its
    backlog grew (unstable).  A pool near 100% on batch or memory with a queue is the
    bottleneck of the workloads it serves."""
    rows = []
    for _, p in pools.iterrows():
        rows.append({
            "fleet": p["fleet"], "pool": p["pool"], "accelerator": p["accelerator"],
            "busy": percent(p["busy_fraction"]),
            "batch mean / max_batch": f"{human(p.get('batch_mean', math.nan))} / {int(p['max_batch'])} "
                                      f"({percent(p.get('batch_fill_fraction', math.nan))})",
            "KV memory mean / peak": f"{percent(p.get('memory_used_mean_fraction', math.nan))} / "
                                     f"{percent(p.get('memory_used_peak_fraction', math.nan))}",
            "queue mean / max / end": " / ".join(human(p.get(c, math.nan)) for c in ("queue_mean", "queue_max", "queue_end")),
            "backlog": "growing" if bool(p.get("unstable", False)) else "steady",
        })
    return pd.DataFrame(rows)


def miss_explanation(row: pd.Series, pools: pd.DataFrame, serving: Iterable[str]) -> str:
    """One sentence on why ``row`` (a summary row) missed its SLO: attainment against
    target, the largest miss reason, and the most saturated pool among ``serving``."""
    shares = {k: row.get(f"slo_miss_{k}", 0) / row["requests"] for k in MISS_LABELS if row["requests"]}
    top = max(shares, key=shares.get) if shares else None
    text = (f"{row['workload']} on {row['fleet']}: {percent(row['slo_attainment'], 1)} met against a "
            f"{percent(row['slo_target'], 1)} target")
    if top and shares[top] > 0:
        text += f"; mostly {MISS_LABELS[top]} ({percent(shares[top], 1)} of requests)"
    mine = pools[(pools["fleet"] == row["fleet"]) & pools["pool"].isin(list(serving))]
    if len(mine):
        worst = mine.assign(pressure=mine[["batch_fill_fraction", "memory_used_peak_fraction", "busy_fraction"]]
                            .max(axis=1)).sort_values("pressure").iloc[-1]
        text += (f"; pool {worst['pool']} is the tightest: batch {percent(worst['batch_fill_fraction'])} full, "
                 f"KV peak {percent(worst['memory_used_peak_fraction'])}, mean queue {human(worst['queue_mean'])}")
    return text + "."


# --- comparing N fleets -------------------------------------------------------------

# (column, label, formatter, higher is better)
FLEET_KPIS = (("capex_usd", "capex", usd, False), ("opex_usd_per_month", "opex / month", usd, False),
              ("cost_usd_per_hour", "cost / hour", usd, False), ("it_power_avg_kw", "IT power avg (kW)", human, False),
              ("it_power_max_kw", "IT power max (kW)", human, False),
              ("output_tokens_per_s_per_mw", "output tokens/s per MW", human, True))
WORKLOAD_KPIS = (("ttft_p50_s", "p50 TTFT", seconds, False), ("ttft_p99_s", "p99 TTFT", seconds, False),
                 ("tpot_p50_s", "p50 TPOT", seconds, False), ("tpot_p99_s", "p99 TPOT", seconds, False),
                 ("e2e_p99_s", "p99 E2E", seconds, False), ("slo_attainment", "SLO attainment", percent, True),
                 ("goodput_rps", "goodput (req/s)", human, True), ("rejected_share", "rejected", percent, False),
                 ("cost_per_request_usd", "$/request", usd, False),
                 ("cost_per_1m_output_tokens_usd", "$/1M output tokens", usd, False),
                 ("energy_per_output_token_j", "J/output token", human, False),
                 ("energy_per_request_j", "J/request", human, False))


def compare_all(summary: pd.DataFrame, fleets: pd.DataFrame, bands_pct: Mapping[str, float | None] | None = None
                ) -> pd.DataFrame:
    """Every KPI of every fleet and workload side by side: one row per (scope, metric),
    one raw-value column per fleet, ``best`` (the fleet with the best value), ``spread``
    (the size of worst / best − 1) and ``beyond_band`` (True when the spread exceeds the widest
    performance-model uncertainty band of the fleets compared, ``bands_pct`` in %, so the
    difference is not within what the model can tell apart; NaN when no band is known)."""
    names = list(fleets["fleet"])
    band = max((b for b in (bands_pct or {}).values() if b is not None), default=math.nan)
    rows = []
    by_fleet = fleets.set_index("fleet")
    for column, label, fmt, higher in FLEET_KPIS:
        if column in by_fleet.columns:
            rows.append(_kpi_row("fleet", label, {n: by_fleet.loc[n, column] for n in names}, higher, band))
    for workload in dict.fromkeys(summary["workload"]):
        per = summary[summary["workload"] == workload].set_index("fleet")
        for column, label, fmt, higher in WORKLOAD_KPIS:
            if column in per.columns and per[column].notna().any():
                rows.append(_kpi_row(workload, label, {n: per[column].get(n, math.nan) for n in names}, higher, band))
    return pd.DataFrame(rows)


def _kpi_row(scope: str, label: str, values: Mapping[str, float], higher: bool, band_pct: float) -> dict:
    known = {k: float(v) for k, v in values.items() if not pd.isna(v)}
    best = (max if higher else min)(known, key=known.get) if known else None
    worst = (min if higher else max)(known, key=known.get) if known else None
    spread = math.nan
    if best is not None and known[best] != 0:
        spread = abs(known[worst] / known[best] - 1)
    beyond = math.nan if math.isnan(band_pct) or math.isnan(spread) else spread > band_pct / 100
    differs = best is not None and known[best] != known[worst]
    return {"scope": scope, "metric": label, **values, "best": best if differs else None,
            "spread": spread, "beyond_band": beyond}


def format_comparison(table: pd.DataFrame, fleets: list[str]) -> pd.DataFrame:
    """``compare_all``'s table with every value formatted with its unit."""
    formats = {label: fmt for _, label, fmt, _ in FLEET_KPIS + WORKLOAD_KPIS}
    out = table.copy()
    for name in fleets:
        out[name] = [formats[m](v) if not pd.isna(v) else "—" for m, v in zip(table["metric"], table[name])]
    out["spread"] = table["spread"].map(lambda s: "—" if pd.isna(s) else f"{100 * s:.0f}%")
    out["beyond_band"] = table["beyond_band"].map(lambda b: "—" if pd.isna(b) else ("yes" if b else "within band"))
    out["best"] = table["best"].fillna("—")
    return out


# --- energy and power ---------------------------------------------------------------

def energy_chart(fleets: pd.DataFrame, summary: pd.DataFrame, colors: Mapping[str, str] | None = None) -> go.Figure:
    """Three panels: IT power average and max per fleet (kW), output tokens/s per MW of
    facility power, and energy per output token per workload (J/token)."""
    colors = _colors(colors, _fleets(fleets))
    fig = make_subplots(rows=1, cols=3, subplot_titles=["IT power avg (bar) / max (tick)", "output tokens/s per MW",
                                                        "energy per output token"])
    for _, f in fleets.iterrows():
        c = colors.get(f["fleet"])
        fig.add_trace(go.Bar(x=[f["fleet"]], y=[f["it_power_avg_kw"]], marker_color=c, name=str(f["fleet"]),
                             legendgroup=str(f["fleet"]),
                             hovertemplate=f"{f['fleet']}: %{{y:.4~s}} kW average<extra></extra>"), row=1, col=1)
        fig.add_trace(go.Scatter(x=[f["fleet"]], y=[f["it_power_max_kw"]], mode="markers", showlegend=False,
                                 marker=dict(symbol="line-ew-open", size=30, color=c, line=dict(width=3)),
                                 hovertemplate=f"{f['fleet']}: %{{y:.4~s}} kW max<extra></extra>"), row=1, col=1)
        fig.add_trace(go.Bar(x=[f["fleet"]], y=[f.get("output_tokens_per_s_per_mw", math.nan)], marker_color=c,
                             showlegend=False, hovertemplate="%{y:.4~s} tokens/s per MW<extra></extra>"), row=1, col=2)
    for _, r in summary.dropna(subset=["energy_per_output_token_j"]).iterrows():
        fig.add_trace(go.Bar(x=[r["workload"]], y=[r["energy_per_output_token_j"]], marker_color=colors.get(r["fleet"]),
                             showlegend=False, offsetgroup=str(r["fleet"]),
                             hovertemplate=f"{r['fleet']} / {r['workload']}: %{{y:.3~g}} J/token<extra></extra>"),
                      row=1, col=3)
    fig.update_yaxes(title_text="IT power (kW)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="output tokens/s per MW (tokens/s/MW)", rangemode="tozero", row=1, col=2)
    fig.update_yaxes(title_text="energy per output token (J/token)", rangemode="tozero", row=1, col=3)
    fig.update_xaxes(title_text="fleet", row=1, col=1)
    fig.update_xaxes(title_text="fleet", row=1, col=2)
    fig.update_xaxes(title_text="workload", row=1, col=3)
    fig.update_layout(title="Energy and power", barmode="group", height=460, **LAYOUT)
    return fig


def power_over_time_chart(fleet_power: pd.DataFrame, colors: Mapping[str, str] | None = None) -> go.Figure:
    """Facility (solid) and IT (dotted) power of each fleet over the run, in kW, as steps
    over the sampled intervals (``fleet_power``: :func:`sim.results.power_series.fleet_power_over_time`)."""
    colors = _colors(colors, list(dict.fromkeys(fleet_power["fleet"])))
    fig = go.Figure()
    for fleet, g in fleet_power.groupby("fleet", sort=False):
        x = list(g["t_start_s"]) + [g["t_end_s"].iloc[-1]]
        for column, label, dash in (("facility_power_kw", "facility", "solid"), ("it_power_kw", "IT", "dot")):
            y = list(g[column]) + [g[column].iloc[-1]]
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line=dict(color=colors.get(fleet), dash=dash, shape="hv"),
                                     name=f"{fleet}: {label}", legendgroup=str(fleet),
                                     hovertemplate=f"{fleet} {label}: %{{y:.4~s}} kW at %{{x:.0f}} s<extra></extra>"))
    fig.update_yaxes(title_text="power (kW)", rangemode="tozero")
    fig.update_xaxes(title_text="simulated time (s)")
    fig.update_layout(title="Power over the run: facility (solid) = IT (dotted) × PUE", height=420, **LAYOUT)
    return fig
