"""``dcsim report DIR``: a ``run --out`` or ``sweep --out`` directory as one HTML file.

The file is self-contained: plotly.js is embedded once, every chart is the same figure
the dashboard shows (:mod:`sim.results.charts`), and it opens from disk or an e-mail attachment
with no server and no network. By default it is written beside the directory as
``DIR.html`` (inside it, it would make ``run --out DIR`` refuse to replace the folder).

Readers here are shared with the dashboard: :func:`load_run` rebuilds a
:class:`~sim.results.tables.Results` from the exported files (the time series from
``timeseries.parquet``; empty for result directories written before it existed) and :func:`load_sweep`
reads the tidy sweep table.
"""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from sim.results import charts
from sim.errors import UserError
from sim.engine.core import TIMESERIES_COLUMNS
from sim.results.power_series import coarsen, fleet_power_over_time, power_over_time
from sim.results.tables import Results
from sim.scenario import load_scenario

RUN_FILES = ("requests.parquet", "pools.csv", "summary.csv", "fleets.csv", "scenario.yaml")
SWEEP_FILES = ("sweep.parquet", "sweep.csv")


# --- reading result directories --------------------------------------------------------

def result_kind(directory: str | Path) -> str:
    """'run' or 'sweep'.

    Raises:
        UserError: ``directory`` holds neither kind of result."""
    directory = Path(directory)
    if any((directory / name).is_file() for name in SWEEP_FILES):
        return "sweep"
    if all((directory / name).is_file() for name in RUN_FILES):
        return "run"
    raise UserError(
        f"{directory}: not a dcsim result directory (expected {', '.join(RUN_FILES)} from "
        f"'dcsim run --out', or sweep.parquet / sweep.csv from 'dcsim sweep --out')"
    )


def load_run(directory: str | Path) -> Results:
    """The :class:`Results` of a ``run --out`` directory (time series only if present)."""
    directory = Path(directory)
    series = directory / "timeseries.parquet"
    return Results(
        scenario=load_scenario(directory / "scenario.yaml"),
        requests=pd.read_parquet(directory / "requests.parquet"),
        pools=pd.read_csv(directory / "pools.csv"),
        summary=pd.read_csv(directory / "summary.csv"),
        fleets=pd.read_csv(directory / "fleets.csv"),
        events={},
        end_s={},
        timeseries=pd.read_parquet(series) if series.is_file() else pd.DataFrame(columns=list(TIMESERIES_COLUMNS)),
    )


def load_sweep(directory: str | Path) -> pd.DataFrame:
    """The tidy sweep table (one row per swept values × fleet × workload).

    Raises:
        UserError: no sweep table in ``directory``."""
    directory = Path(directory)
    if (directory / "sweep.parquet").is_file():
        return pd.read_parquet(directory / "sweep.parquet")
    if (directory / "sweep.csv").is_file():
        return pd.read_csv(directory / "sweep.csv")
    raise UserError(f"{directory}: no sweep.parquet or sweep.csv (write one with 'dcsim sweep --out DIR')")


# --- figures -------------------------------------------------------------------------------

def run_figures(results: Results, accelerators) -> list[tuple[str, go.Figure]]:
    """Every chart of one run, titled, in the dashboard's order."""
    colors = charts.fleet_colors(results.fleets["fleet"])
    figs = [(f"Latency: {w}", charts.latency_cdf(results.requests, w, colors)) for w in results.scenario.workloads]
    figs.append(("Utilisation per pool", charts.pool_utilisation(results.pools)))
    if len(results.timeseries):
        for fleet in results.fleets["fleet"]:
            figs.append((f"Utilisation over time: {fleet}", charts.utilisation_over_time(results.timeseries, results.pools, fleet)))
    figs.append(("Hourly cost", charts.cost_breakdown(results.pools, colors)))
    figs.append(("Cost per request", charts.cost_per_request(results.summary, colors)))
    figs.append(("Roofline", charts.roofline(results.pools, accelerators, charts.pool_kinds(results.scenario), colors)))
    figs.append(("Energy and power", charts.energy_chart(results.fleets, results.summary, colors)))
    if len(results.timeseries) and "run_end_s" in results.pools.columns:
        power = power_over_time(results.pools, results.timeseries, results.end_s, results.scenario.economics.pue)
        figs.append(("Power over the run", charts.power_over_time_chart(coarsen(fleet_power_over_time(power), 300), colors)))
    return figs


def sweep_figures(sweep: pd.DataFrame) -> list[tuple[str, go.Figure]]:
    """Pareto front per workload and, with two or more swept parameters, a heatmap of
    $/request over the first two per fleet (first workload)."""
    colors = charts.fleet_colors(sweep["fleet"])
    workloads = list(dict.fromkeys(sweep["workload"]))
    figs = [(f"Pareto: {w}", charts.pareto_front(sweep, w, colors=colors)) for w in workloads]
    params = charts.swept_columns(sweep)
    if len(params) >= 2 and workloads:
        for fleet in dict.fromkeys(sweep["fleet"]):
            fig = charts.sweep_heatmap(sweep, params[0], params[1], fleet=fleet, workload=workloads[0])
            figs.append((f"Heatmap: {fleet}", fig))
    return figs


# --- HTML ----------------------------------------------------------------------------------

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px auto;max-width:1280px;color:#222}
h1{margin-bottom:4px} .muted{color:#666}
.cards{display:flex;flex-wrap:wrap;gap:16px;margin:16px 0}
.fleet{border:1px solid #ddd;border-radius:8px;padding:12px 16px;min-width:300px;flex:1 1 100%;max-width:100%;box-sizing:border-box}
.wide{overflow-x:auto;max-width:100%}
.fleet h3{margin:0 0 8px 0} .kpi{display:flex;justify-content:space-between;gap:12px}
.kpi b{font-size:1.1em} table{border-collapse:collapse;margin-top:8px;font-size:.9em}
td,th{border-bottom:1px solid #eee;padding:2px 8px;text-align:right;white-space:normal;overflow-wrap:anywhere} td:first-child,th:first-child{text-align:left}
"""


def _fleet_card(fleet: pd.Series, summary: pd.DataFrame, color: str, band=None, ownership: str = "own") -> str:
    kpis = "".join(f"<div class='kpi'><span>{html.escape(k)}</span><b>{html.escape(v)}</b></div>"
                   for k, v in charts.kpi_fleet(fleet, summary, band, ownership).items())
    table = charts.kpi_workloads(summary, fleet["fleet"], band).to_html(index=False, border=0)
    name = html.escape(str(fleet["fleet"]))
    return (f"<div class='fleet' style='border-top:4px solid {color}'><h3>{name}</h3>"
            f"<div class='muted'>{html.escape(str(fleet['accelerators']))}</div>{kpis}<div class='wide'>{table}</div></div>")


def _comparison(results: Results, colors: dict, bands: dict) -> str:
    """Every KPI of every fleet side by side, as the dashboard's compare tab
    (:func:`charts.compare_all` over all N fleets; ``bands``: :func:`charts.perf_bands`),
    the best value per row in its fleet's colour; "" with a single fleet."""
    names = list(results.fleets["fleet"])
    if len(names) < 2:
        return ""
    band_pct = {name: None if band.widest is None else band.widest[0] for name, band in bands.items()}
    table = charts.compare_all(results.summary, results.fleets, band_pct)
    shown = charts.format_comparison(table, names)
    columns = ["scope", "metric", *names, "best", "spread", "beyond_band"]
    head = "".join(f"<th>{html.escape(str(c).replace('_', ' '))}</th>" for c in columns)
    rows = []
    for (_, row), best in zip(shown.iterrows(), table["best"]):
        cells = [f"<td style='background:{colors.get(best, '#ddd')}33;font-weight:600'>" if c == best and c in names
                 else "<td>" for c in columns]
        rows.append("<tr>" + "".join(f"{td}{html.escape(str(row[c]))}</td>" for td, c in zip(cells, columns)) + "</tr>")
    known = {k: v for k, v in band_pct.items() if v is not None}
    note = ("Best value per row in its fleet's colour; spread: worst / best − 1; "
            + (f"beyond band: the spread exceeds the performance model's widest uncertainty band "
               f"(±{max(known.values()):g}% on {', '.join(known)})." if known
               else "every accelerator compared is calibrated: no uncertainty band applies."))
    return (f"<h2>Compare fleets</h2><p class='muted'>{html.escape(note)}</p>"
            f"<div class='wide'><table class='compare'><tr>{head}</tr>{''.join(rows)}</table></div>")


def _page(title: str, subtitle: str, body: str) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style><script type='text/javascript'>{get_plotlyjs()}</script></head>"
            f"<body><h1>{html.escape(title)}</h1><p class='muted'>{html.escape(subtitle)}</p>{body}</body></html>")


def _figures_html(figs: list[tuple[str, go.Figure]]) -> str:
    return "".join(f"<h2>{html.escape(t)}</h2>" + f.to_html(full_html=False, include_plotlyjs=False)
                   for t, f in figs)


def run_report_html(results: Results, accelerators) -> str:
    """The report page of one run: KPI cards per fleet, then every chart."""
    sc = results.scenario
    colors = charts.fleet_colors(results.fleets["fleet"])
    bands = charts.perf_bands(sc, accelerators)
    cards = "".join(_fleet_card(f, results.summary, colors[f["fleet"]], bands.get(f["fleet"]), sc.economics.ownership)
                    for _, f in results.fleets.iterrows())
    subtitle = (f"{sc.description.strip() or sc.name} — seed {sc.seed}, {sc.duration_s:g} s of arrivals "
                f"after {sc.warmup_s:g} s warm-up, {len(sc.fleets)} fleet(s)")
    body = f"<div class='cards'>{cards}</div>" + _comparison(results, colors, bands)
    return _page(f"dcsim run: {sc.name}", subtitle, body + _figures_html(run_figures(results, accelerators)))


def sweep_report_html(sweep: pd.DataFrame, name: str) -> str:
    """The report page of one sweep: Pareto fronts and heatmaps."""
    params = charts.swept_columns(sweep)
    subtitle = f"{len(sweep)} rows; swept: {', '.join(params) or 'nothing'}; fleets: {', '.join(map(str, dict.fromkeys(sweep['fleet'])))}"
    return _page(f"dcsim sweep: {name}", subtitle, _figures_html(sweep_figures(sweep)))


def report_html(directory: str | Path) -> str:
    """The HTML report of a ``run`` or ``sweep`` output directory."""
    directory = Path(directory)
    if result_kind(directory) == "sweep":
        return sweep_report_html(load_sweep(directory), directory.name)
    from fleets.catalog_io import load_catalog

    return run_report_html(load_run(directory), load_catalog().accelerators)


def default_report_path(directory: str | Path) -> Path:
    """``DIR.html`` beside ``DIR``."""
    directory = Path(directory).absolute()
    return directory.with_name(directory.name + ".html")


def write_report(directory: str | Path, out: str | Path | None = None, force: bool = False) -> Path:
    """Write the report of ``directory`` to ``out`` (default :func:`default_report_path`),
    atomically; an existing file is replaced only when it is a dcsim report (or ``force``).

    Raises:
        UserError: not a result directory, or ``out`` cannot be written (a link, a
            device, someone else's file: :func:`sim.results.outputs.output_file`)."""
    from sim.results.export import write_file_atomic
    from sim.results.outputs import output_file, report_signature

    path = output_file(out if out is not None else default_report_path(directory), "--out", force=force,
                       signature=report_signature)
    page = report_html(directory)
    return write_file_atomic(path, lambda p: p.write_text(page, encoding="utf-8"))
