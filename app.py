"""dcsim what-if dashboard: ``streamlit run app.py``.

Pick a scenario, edit traffic, hardware and prices in the sidebar (or the fleets and
pools as one table in the main panel), press Run, and read latency, utilisation, cost,
energy, why a fleet missed its SLO, and every KPI of N fleets side by side. The logic of the edits lives in
:mod:`sim.dashboard` and the figures in :mod:`sim.results.charts`; this file only lays
them out. Results are cached by the scenario's content, so re-running a scenario seen
before is instant.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import pandas as pd
import streamlit as st

from fleets.catalog_io import load_catalog
from sim.results import charts
from sim import dashboard as ds
from sim import dashboard_checks as checks
from sim import dashboard_cache as cache
from sim import dashboard_curves as curves
from sim import dashboard_rank as rank
from sim import dashboard_sizing as sizing
from sim.errors import ScenarioError, UserError
from sim.results.export import FLOAT_FORMAT
from sim.results.power_series import coarsen, fleet_power_over_time, power_over_time
from sim.results.report_html import load_sweep
from sim.results.tables import Results, run_scenario
from sim.overrides import document
from sim.scenario import parse_scenario, scenario_to_yaml
from sim.studies.headroom import results_planner_table
from sim.studies.tco import tco_tables
from sim.workloads import kind_of

UPLOAD = "upload a scenario…"
TP_CHOICES = [1, 2, 4, 8, 16, 32, 64]
PRECISIONS = ["bf16", "fp8", "fp4"]
SIDEBAR_ERROR_CHARS = 160
POWER_INTERVALS = 300  # points of the power-over-time curve per fleet
POWER_FLEETS = 3  # fleets drawn at once in the power-over-time chart (facility and IT line each)


@st.cache_resource
def catalog():
    return load_catalog()


@st.cache_data(show_spinner=False, max_entries=32)
def simulate(scenario_json: str) -> Results:
    """Run the scenario given as canonical JSON (the cache key: its content), with a
    progress bar (created in here: cached functions may only touch their own elements)."""
    scenario = parse_scenario(json.loads(scenario_json), "dashboard")
    bar = st.progress(0.0, text="starting…")
    try:
        return run_scenario(scenario, progress=progress_factory(bar, len(scenario.fleets), scenario.duration_s))
    finally:
        bar.empty()


def progress_factory(bar, fleets: int, arrivals_s: float):
    """``run_scenario`` progress callbacks driving one ``st.progress`` bar over all fleets:
    each fleet fills its share of the bar as simulated time reaches the end of arrivals
    (``arrivals_s``); the drain after it (up to ``drain_s``, usually much shorter) is
    shown as text."""
    started = {"n": -1}

    def factory(fleet: str, sim_end_s: float, total: int):
        started["n"] += 1
        index, last = started["n"], {"pct": -1, "draining": False}
        span_s = min(arrivals_s, sim_end_s) or sim_end_s

        def callback(sim_time_s: float, finished: int) -> None:
            fraction = (index + min(sim_time_s / span_s, 1.0)) / fleets
            draining = sim_time_s > span_s
            if int(100 * fraction) > last["pct"] or draining != last["draining"]:
                last["pct"], last["draining"] = int(100 * fraction), draining
                phase = "draining" if draining else f"{sim_time_s:,.0f} of {span_s:,.0f} s of arrivals"
                bar.progress(min(fraction, 1.0), text=f"simulating fleet {fleet} ({index + 1}/{fleets}, {phase}): "
                                                      f"{finished:,}/{total:,} requests")

        return callback

    return factory


# --- sidebar ---------------------------------------------------------------------------

def choose_scenario() -> tuple[str, dict | None]:
    """Scenario picker: files in scenarios/ that describe a run, or an upload."""
    files = ds.run_scenarios()
    names = list(files) + [UPLOAD]
    name = st.sidebar.selectbox("scenario", names, index=names.index("default") if "default" in files else 0, key="scenario")
    if name != UPLOAD:
        from sim.scenario import load_scenario

        return name, ds.for_dashboard(document(load_scenario(files[name])))
    upload = st.sidebar.file_uploader("scenario YAML", type=["yaml", "yml"], key="upload")
    if upload is None:
        return name, None
    try:
        data = ds.read_scenario_text(upload.getvalue(), upload.name)
    except ScenarioError as err:
        st.sidebar.error(str(err))
        return name, None
    return f"upload:{upload.name}:{upload.size}", ds.for_dashboard(data)


class Sidebar:
    """Renders the edit widgets, keyed ``<scenario>::<edit key>``, errors beside them."""

    def __init__(self, prefix: str, initial: dict, errors: dict[str, list[str]]) -> None:
        self.prefix, self.initial, self.errors = prefix, initial, errors

    def key(self, edit_key: str) -> str:
        return f"{self.prefix}::{edit_key}"

    def show_errors(self, edit_key: str, where=st.sidebar) -> None:
        for message in self.errors.get(edit_key, []):
            if len(message) > SIDEBAR_ERROR_CHARS:  # the full text is in the main panel
                message = message[:SIDEBAR_ERROR_CHARS].rsplit(" ", 1)[0] + " … (full message in the main panel)"
            where.error(message, icon="⚠️")

    def has_errors(self, *prefixes: str) -> bool:
        return any(k == p or k.startswith(p + ".") for k in self.errors for p in prefixes)

    def widget(self, where, edit_key: str, make: str, label: str, **kwargs) -> None:
        if edit_key in self.initial:
            getattr(where, make)(label, key=self.key(edit_key), **kwargs)
            self.show_errors(edit_key, where)


def values_from_state(prefix: str, initial: dict) -> dict:
    """Current widget values (defaults for widgets not yet shown)."""
    for k, v in initial.items():
        st.session_state.setdefault(f"{prefix}::{k}", v)
    return {k: st.session_state[f"{prefix}::{k}"] for k in initial}


def run_settings(bar: Sidebar) -> None:
    box = st.sidebar.expander("run", expanded=bar.has_errors("run"))
    bar.widget(box, "run.duration_s", "number_input", "arrivals for (s)", step=30.0,
               help=f"the dashboard caps scenarios at {ds.DASHBOARD_MAX_DURATION_S:g} s of arrivals for speed; raise it here")
    bar.widget(box, "run.seed", "number_input", "seed", step=1)


def traffic(bar: Sidebar, data: dict) -> None:
    box = st.sidebar.expander("traffic", expanded=True)
    bar.show_errors("traffic", box)
    bar.widget(box, "traffic.total_rate_per_s", "number_input", "total arrival rate (requests/s)",
               step=1.0, format="%.3f",
               help="mean rate of the synthetic (Poisson, gamma, MMPP) workloads together; no upper cap")
    try:
        traces = ds.trace_rates(data)
    except UserError as err:
        traces = {}
        box.error(str(err))
    for name, wl in data["workloads"].items():
        bar.widget(box, f"traffic.share.{name}", "slider", f"share: {name} ({wl['kind']}) %",
                   min_value=0.0, max_value=100.0, step=0.1)
        if name in traces:
            rate, scale = traces[name]
            box.caption(f"**{name}** replays a trace: {rate:.3f} req/s as written (rate_scale {scale:g})")
        bar.widget(box, f"workloads.{name}.arrival.rate_scale", "number_input",
                   f"{name}: trace rate_scale (×)", step=0.1,
                   help="replay speed: 2 halves every gap between arrivals, doubling the rate")


def workload(bar: Sidebar, name: str, wl: dict) -> None:
    base = f"workloads.{name}"
    box = st.sidebar.expander(f"workload {name} ({wl['kind']})", expanded=bar.has_errors(base))
    bar.show_errors(base, box)
    for field, widget, label, _low in kind_of(wl["kind"]).edit_fields:  # no min: a low value shows its error
        if widget == "distribution":
            bar.widget(box, f"{base}.{field}", "text_input", label)
        else:
            bar.widget(box, f"{base}.{field}", "number_input", label, step=1)
    for bound, label in (("ttft_s", "SLO: TTFT (s, 0 = none)"), ("tpot_s", "SLO: TPOT (s, 0 = none)"),
                         ("e2e_s", "SLO: end-to-end (s, 0 = none)")):
        bar.widget(box, f"{base}.slo.{bound}", "number_input", label, step=0.05, format="%.3f")
    bar.widget(box, f"{base}.slo.target", "number_input", "SLO target (% of requests)", step=0.5)


def hardware(bar: Sidebar, data: dict) -> None:
    accelerators = sorted(catalog().accelerators)
    box = st.sidebar.expander("hardware mix", expanded=bar.has_errors("fleets"))
    bar.widget(box, "fleets.selected", "multiselect", "fleets to run",
               options=[f["name"] for f in data["fleets"]])
    workloads = list(data["workloads"])
    for i, fleet in enumerate(data["fleets"]):
        box.markdown(f"**{fleet['name']}**")
        bar.show_errors(f"fleets.{i}", box)
        for j, pool in enumerate(fleet["pools"]):
            base = f"fleets.{i}.pools.{j}"
            box.caption(f"pool {pool['name']}")
            bar.show_errors(base, box)
            left, right = box.columns(2)
            # full width: in a half column 'h100-sxm' was cut off
            bar.widget(box, f"{base}.accelerator", "selectbox", "accelerator", options=accelerators,
                       on_change=follow_accelerator, args=(bar.prefix, base))
            bar.widget(right, f"{base}.replicas", "number_input", "replicas", step=1)
            bar.widget(left, f"{base}.tp", "selectbox", "TP", options=TP_CHOICES)
            bar.widget(right, f"{base}.price_usd", "number_input", "$/accelerator", step=1000.0,
                       help="defaults to the catalog price of the chosen accelerator")
            bar.widget(left, f"{base}.precision", "selectbox", "precision", options=PRECISIONS)
            bar.widget(right, f"{base}.max_batch", "number_input", "max_batch", step=8)
            bar.widget(box, f"{base}.serves", "multiselect", "serves", options=workloads)


def follow_accelerator(prefix: str, base: str) -> None:
    """On a new accelerator: its catalog price and a precision it supports."""
    state = st.session_state
    chosen = state[f"{prefix}::{base}.accelerator"]
    defaults = ds.accelerator_defaults(chosen, state.get(f"{prefix}::{base}.precision", "fp8"), catalog())
    for field, value in defaults.items():
        state[f"{prefix}::{base}.{field}"] = value


def prices(bar: Sidebar) -> None:
    box = st.sidebar.expander("prices", expanded=bar.has_errors("economics"))
    bar.widget(box, "economics.electricity_usd_per_kwh", "number_input", "electricity ($/kWh)",
               step=0.01, format="%.4f")
    bar.widget(box, "economics.pue", "number_input", "PUE", step=0.05)
    bar.widget(box, "economics.depreciation_years", "number_input", "depreciation (years)", step=0.5)
    bar.widget(box, "economics.ownership", "selectbox", "ownership", options=["own", "rent", "colocate"],
               help="own: capex amortised plus opex; rent: the catalog's $/accelerator-hour; colocate: own the "
                    "IT equipment, rent space and power at $/kW-month (docs/costs.md)")
    bar.widget(box, "economics.colocation_usd_per_kw_month", "number_input", "colocation ($/kW-month)",
               step=5.0, format="%.2f", help="colocate only; default CBRE North America H2 2024 (fleets/data/finance.csv)")
    bar.widget(box, "economics.colocation_power", "selectbox", "colocation power", options=["metered", "included"],
               help="colocate only: metered = billed on top at $/kWh x PUE; included in the $/kW-month")
    for key, label, step, fmt in (
            ("facility_capex_usd_per_mw", "facility capex ($/MW)", 1e6, "%.0f"),
            ("facility_depreciation_years", "facility depreciation (years)", 1.0, "%.1f"),
            ("discount_rate_per_year", "discount rate (per year, 0.08 = 8%)", 0.01, "%.3f"),
            ("network_capex_usd_per_node", "network capex ($/node)", 1000.0, "%.0f"),
            ("maintenance_fraction_per_year", "maintenance (fraction of capex per year)", 0.01, "%.3f"),
            ("staff_usd_per_kw_month", "staff ($/kW-month)", 1.0, "%.2f"),
            ("other_opex_fraction_per_year", "other opex (fraction of capex per year)", 0.01, "%.3f")):
        bar.widget(box, f"economics.{key}", "number_input", label, step=step, format=fmt)


def sidebar() -> tuple[dict | None, object]:
    """Render the sidebar; returns the scenario dict to run (None if invalid) and the
    Run button state."""
    st.sidebar.title("dcsim what-if")
    st.session_state["errors"] = {}
    prefix, data = choose_scenario()
    if data is None:
        return None, False
    prefix, data = with_table_edits(prefix, data)
    st.session_state["all_fleets"] = [f["name"] for f in data["fleets"]]
    st.session_state["table_source"] = (prefix, data)
    initial = ds.initial_values(data, catalog())
    values = values_from_state(prefix, initial)
    scenario, errors = ds.validate(data, values, initial, catalog())
    st.session_state["errors"] = errors
    bar = Sidebar(prefix, initial, errors)
    size_ok = run_size_gate(scenario)
    pressed = st.sidebar.button("Run", type="primary", disabled=scenario is None or not size_ok, key="run",
                                width="stretch")
    bar.show_errors(ds.GENERAL)
    if scenario is None:
        st.sidebar.error("Fix the highlighted inputs to run (details in the main panel).", icon="🛑")
    if st.sidebar.button("reset edits", key="reset"):
        for k in initial:
            st.session_state.pop(bar.key(k), None)
        st.session_state.pop(f"table::{prefix.split('#', 1)[0]}", None)
        st.rerun()
    run_settings(bar)
    traffic(bar, data)
    for name, wl in data["workloads"].items():
        workload(bar, name, wl)
    hardware(bar, data)
    prices(bar)
    return (document(scenario) if scenario is not None else None), pressed


def run_size_gate(scenario) -> bool:
    """Whether the run's expected size lets Run go: a run beyond the memory limit is
    refused, one of more than ``CONFIRM_REQUESTS`` requests needs a tick that shows its
    request count and memory (:mod:`sim.dashboard_checks`)."""
    if scenario is None:
        return True
    size = checks.run_size(scenario)
    if size.refused:
        st.sidebar.error(f"**Run refused**: this run expects {size.text()}, more than "
                         f"{checks.MEMORY_SHARE_LIMIT:.0%} of this machine's memory. Lower the rate, "
                         "the arrivals window or the number of fleets.", icon="🛑")
        return False
    if size.needs_confirmation:
        st.sidebar.warning(f"**Large run**: {size.text()}.", icon="⚠️")
        return st.sidebar.checkbox("run it anyway", key="confirm-size::" + checks.size_key(size))
    return True


# --- fleets and pools as a table ---------------------------------------------------

def with_table_edits(name: str, data: dict) -> tuple[str, dict]:
    """The scenario with the fleets last applied from the table, and the widget-key
    prefix of that version (new pools and fleets get fresh widgets)."""
    override = st.session_state.get(f"table::{name}")
    if override is None:
        return name, data
    return f"{name}#{override['version']}", {**data, "fleets": override["fleets"]}


def apply_fleets(name: str, prefix: str, data: dict, fleets: list[dict]) -> None:
    """Make ``fleets`` the scenario's; carry every non-fleet edit over to the new prefix."""
    version = st.session_state.get(f"table::{name}", {}).get("version", 0) + 1
    new_prefix = f"{name}#{version}"
    for key in list(st.session_state):
        if isinstance(key, str) and key.startswith(prefix + "::") and not key.startswith(prefix + "::fleets."):
            st.session_state[new_prefix + key[len(prefix):]] = st.session_state[key]
    st.session_state[f"table::{name}"] = {"version": version, "fleets": fleets}


def fleet_table_editor() -> None:
    """Fleets and pools as one editable table: add or remove rows, rename, duplicate a
    fleet; blank $/accelerator means the catalog's price of the chosen accelerator."""
    prefix, data = st.session_state.get("table_source", (None, None))
    if data is None:
        return
    name = prefix.split("#", 1)[0]
    with st.expander("Fleets and pools as a table: add, remove, rename, duplicate", expanded=False):
        rows = ds.fleets_table(data)
        for row in rows:
            row["catalog $/acc"] = catalog().accelerators[row["accelerator"]].price_usd \
                if row["accelerator"] in catalog().accelerators else None
        config = {
            "accelerator": st.column_config.SelectboxColumn(options=sorted(catalog().accelerators), required=True),
            "precision": st.column_config.SelectboxColumn(options=PRECISIONS),
            "tp": st.column_config.SelectboxColumn(options=TP_CHOICES),
            "replicas": st.column_config.NumberColumn(min_value=1, step=1),
            "max_batch": st.column_config.NumberColumn(min_value=1, step=1),
            "price_usd": st.column_config.NumberColumn("$/accelerator (blank: catalog)", min_value=0.0),
            "serves": st.column_config.TextColumn(help="workloads, comma-separated: " + ", ".join(data["workloads"])),
            "catalog $/acc": st.column_config.NumberColumn(disabled=True),
        }
        shown = pd.DataFrame(rows)
        edited = st.data_editor(shown, num_rows="dynamic", hide_index=True, column_config=config,
                                key=f"table-editor::{prefix}", width="stretch")
        if not edited.astype(str).reset_index(drop=True).equals(shown.astype(str)):
            st.caption("The table has edits not applied yet: press **apply table** to use them.")
        left, middle, right = st.columns([2, 1, 1])
        source = left.selectbox("fleet to duplicate", [f["name"] for f in data["fleets"]], key=f"dup-source::{prefix}")
        if middle.button("duplicate fleet", key="dup-fleet"):
            apply_fleets(name, prefix, data, ds.duplicate_fleet(data["fleets"], source))
            st.rerun()
        if right.button("apply table", type="primary", key="apply-table"):
            records = edited.drop(columns=["catalog $/acc"]).to_dict("records")
            fleets, problems = ds.table_fleets(records, data, catalog())
            if not problems:
                apply_fleets(name, prefix, data, fleets)
                st.rerun()
            # not applied: the editor keeps the user's rows (same widget key); say why beside it
            st.error("**The table was not applied:**\n\n" + "\n".join(f"- {p}" for p in problems), icon="🛑")


# --- main area -----------------------------------------------------------------------

CARD_CSS = """<style>
.kpi-card{border:1px solid #ddd;border-radius:8px;padding:8px 12px;margin-bottom:8px}
.kpi-card h4{margin:0 0 2px 0;padding-bottom:2px;overflow-wrap:anywhere}
.kpi-card .acc{color:#666;font-size:.85em;overflow-wrap:anywhere}
.kpi-grid{display:flex;flex-wrap:wrap;gap:6px 16px;margin-top:6px}
.kpi-item{flex:1 1 150px;min-width:0}
.kpi-item span{display:block;color:#666;font-size:.8em;overflow-wrap:anywhere}
.kpi-item b{display:block;font-size:1.15em;overflow-wrap:anywhere}
</style>"""
CARDS_PER_ROW = 3


def kpi_card_html(name: str, accelerators: str, kpis: dict[str, str], color: str) -> str:
    """One fleet's card: name, accelerators, KPIs wrapping onto as many lines as needed."""
    items = "".join(f"<div class='kpi-item' data-testid='kpi'><span>{html.escape(k)}</span><b>{html.escape(v)}</b></div>"
                    for k, v in kpis.items())
    return (f"<div class='kpi-card' data-testid='fleet-card' style='border-top:4px solid {color}'>"
            f"<h4>{html.escape(name)}</h4><div class='acc'>{html.escape(accelerators)}</div>"
            f"<div class='kpi-grid'>{items}</div></div>")


def kpi_cards(results: Results, colors: dict) -> None:
    """Fleet cards, at most three per row (five fleets: 3 + 2), then one full-width table
    of every workload on every fleet (HTML, so cells wrap instead of clipping). Fleets
    show each pool's performance-model ± band; every workload row carries the band of the
    pools that serve it, and fleet totals the widest pool band, as the text report does."""
    st.markdown(CARD_CSS, unsafe_allow_html=True)
    rows = list(results.fleets.iterrows())
    bands = charts.perf_bands(results.scenario, catalog().accelerators)
    for first in range(0, len(rows), CARDS_PER_ROW):
        columns = st.columns(CARDS_PER_ROW)
        for column, (_, fleet) in zip(columns, rows[first:first + CARDS_PER_ROW]):
            kpis = charts.kpi_fleet(fleet, results.summary, bands[fleet["fleet"]], results.scenario.economics.ownership)
            column.markdown(kpi_card_html(str(fleet["fleet"]), str(fleet["accelerators"]), kpis,
                                          colors.get(fleet["fleet"], "#444")), unsafe_allow_html=True)
    table = pd.concat([charts.kpi_workloads(results.summary, f, bands[f]).assign(fleet=f)
                       for f in results.fleets["fleet"]])
    st.table(table[["fleet", *[c for c in table.columns if c != "fleet"]]].set_index(["fleet", "workload"]))


def csv_bytes(df: pd.DataFrame) -> bytes:
    return df.to_csv(index=False, float_format=FLOAT_FORMAT, lineterminator="\n").encode()


def downloads(results: Results) -> None:
    st.subheader("Downloads (the files `dcsim run --out` writes)")
    files = [("requests.csv", results.requests), ("pools.csv", results.pools),
             ("summary.csv", results.summary), ("fleets.csv", results.fleets)]
    if results.streamed:  # the rows are in a Parquet file, not in memory
        files = files[1:]
    columns = st.columns(len(files) + 2)
    for column, (name, df) in zip(columns, files):  # callables: the CSV is built on click
        column.download_button(name, lambda d=df: csv_bytes(d), file_name=name, mime="text/csv", key=f"dl-{name}")
    columns[len(files)].download_button("scenario.yaml", scenario_to_yaml(results.scenario), file_name="scenario.yaml",
                                        mime="application/yaml", key="dl-scenario")
    table = lambda: csv_bytes(results_planner_table(results, headroom=False))  # noqa: E731
    columns[-1].download_button("planner.csv", table, file_name="planner.csv", mime="text/csv",
                                key="dl-planner", help="without headroom (run `dcsim export --planner` for it)")


def ranked_cost_chart(results: Results, colors: dict, key: str) -> None:
    """$/request per workload; "best" only among fleets that meet their SLOs and are
    stable, the others hatched, marked and explained below (:mod:`sim.dashboard_rank`)."""
    reasons = rank.disqualifications(results.summary)
    eligible = [f for f, why in reasons.items() if not why]
    st.plotly_chart(rank.mark_cost_chart(charts.cost_per_request(results.summary, colors), results.summary, eligible),
                    key=key)
    for line in rank.ranking_note(reasons):
        st.warning(line, icon="⚠️")


def overview(results: Results, colors: dict) -> None:
    kpi_cards(results, colors)
    prefix_cache(results)
    ranked_cost_chart(results, colors, "overview-cost")
    downloads(results)


def prefix_cache(results: Results) -> None:
    """The prefix-cache columns of workloads and pools that ran with a cache (every
    column named as a cache column, so new tiers show as they appear)."""
    tiers = pd.DataFrame() if results.streamed else cache.tier_tokens(results.requests, cache.kv_bytes_by_pool(results.scenario))
    table = cache.cache_summary(results.summary, tiers)
    if table.empty:
        return
    st.subheader("Prefix cache")
    st.table(table.set_index(["fleet", "workload"]))
    st.caption("Token-weighted over completed measured requests: hit ratio = cached / prompt tokens; tokens served "
               "from each tier (HBM = cached − the lower tiers'); KV bytes moved into HBM = a lower tier's tokens × "
               "the pool's stored KV bytes per token; prefill FLOPs saved versus recomputing every prompt. "
               "kv_demoted / promoted / written / dropped bytes: every tier change inside the measurement window "
               "(a workload's: the pools serving it)."
               + (" (Tier counts need the request rows: not shown for a streamed run.)" if results.streamed else ""))
    pools = cache.pool_cache_table(results.pools)
    if not pools.empty:
        st.table(pools.set_index(["fleet", "pool"]))


def latency(results: Results, colors: dict) -> None:
    if results.streamed:
        st.info("This run streamed its request rows to requests.parquet (engine.stream): no latency CDFs; "
                "the summary's tails come from DDSketch (within 0.5 %).")
        return
    log_x = st.toggle("log latency axis (tails)", key="cdf-log")
    for name, wl in results.scenario.workloads.items():
        slo = {f"{b}": getattr(wl.slo, b, None) for b in ("ttft_s", "tpot_s", "e2e_s")} if wl.slo else None
        st.plotly_chart(charts.latency_cdf(results.requests, name, colors, slo_s=slo, log_x=log_x), key=f"cdf-{name}")


def utilisation(results: Results) -> None:
    st.plotly_chart(charts.pool_utilisation(results.pools), key="pool-util")
    fleet = st.selectbox("fleet", list(results.fleets["fleet"]), key="util-fleet")
    st.plotly_chart(charts.utilisation_over_time(results.timeseries, results.pools, fleet), key="util-time")


def cost(results: Results, colors: dict) -> None:
    # one above the other: side by side, each workload's panel had too little room for its $ ticks
    st.plotly_chart(charts.cost_breakdown(results.pools, colors), key="cost-breakdown")
    ranked_cost_chart(results, colors, "cost-request")


def roofline(results: Results, colors: dict) -> None:
    kinds = charts.pool_kinds(results.scenario)
    st.plotly_chart(charts.roofline(results.pools, catalog().accelerators, kinds, colors), key="roofline")
    st.caption("Each pool's operating point: measured FLOP per byte moved and achieved FLOP/s per accelerator "
               "while busy. Left of an accelerator's ridge a pool is memory-bound (autoregressive decode), "
               "right of it compute-bound (diffusion).")


def compare(results: Results, colors: dict) -> None:
    """Every KPI of every fleet side by side; the best value of each row highlighted, and
    whether the spread exceeds the performance model's uncertainty band."""
    names = list(results.fleets["fleet"])
    if len(names) < 2:
        st.info("Run two or more fleets to compare them.")
        return
    pool_bands = charts.perf_bands(results.scenario, catalog().accelerators)
    table = charts.compare_all(results.summary, results.fleets)
    band_pct = rank.row_bands(table, pool_bands)  # each row judged against its own pools' band
    table["beyond_band"] = rank.beyond_band(table, band_pct)
    reasons = rank.disqualifications(results.summary)
    eligible = [n for n in names if not reasons.get(n)]
    table["best"] = rank.best_among(table, eligible)  # never a fleet that misses its SLOs or is unstable
    per_workload = rank.bands_caption(pool_bands, list(results.scenario.workloads))
    st.caption("Best value per row highlighted in its fleet's colour, among the fleets that meet every SLO and "
               f"are stable ({', '.join(eligible) or 'none'}); columns marked {rank.NOT_RANKED} are shown but "
               "never best. **spread**: worst / best − 1. "
               + (f"**beyond band**: the spread exceeds the band of the pools that serve that row's workload in "
                  f"the fleets compared ({per_workload}; fleet rows: the widest of them). Bands are catalog "
                  "`efficiency_band_pct`, from dcsim validate's held-out residuals." if per_workload
                  else "No pool compared has a band."))
    shown = charts.format_comparison(table, names)
    shown.insert(shown.columns.get_loc("beyond_band"), "band", band_pct.map(lambda b: "—" if pd.isna(b) else f"±{b:g}%"))
    shown = shown.set_index(["scope", "metric"])
    styles = pd.DataFrame("", index=shown.index, columns=shown.columns)
    for i, best in enumerate(table["best"]):
        if best in styles.columns:
            styles.iloc[i, styles.columns.get_loc(best)] = f"background-color: {colors.get(best, '#ddd')}33; font-weight: 600"
    for name in names:
        if reasons.get(name):
            styles[name] = styles[name] + "color: #888;"
    marked = {n: f"{n} {rank.NOT_RANKED}" for n in names if reasons.get(n)}
    st.table(shown.style.apply(lambda _: styles, axis=None).relabel_index(
        [marked.get(c, c) for c in shown.columns], axis=1))
    for line in rank.ranking_note(reasons):
        st.warning(line, icon="⚠️")


def slo_misses(results: Results) -> None:
    """Why each fleet missed its SLO: miss reasons per workload, then saturation signals."""
    serving = {(f.name, w): [p.name for p in f.pools if any(s.split(":")[0] == w for s in p.serves)]
               for f in results.scenario.fleets for w in results.scenario.workloads}
    missed = results.summary[(results.summary["slo_attainment"] < results.summary["slo_target"]) | results.summary["unstable"]]
    if len(missed):
        for _, row in missed.iterrows():
            st.warning(charts.miss_explanation(row, results.pools, serving.get((row["fleet"], row["workload"]), [])))
    else:
        st.success("Every fleet met every workload's SLO target.")
    st.plotly_chart(charts.slo_miss_chart(results.summary), key="slo-miss")
    st.subheader("Saturation signals per pool")
    st.table(charts.saturation_signals(results.pools).set_index(["fleet", "pool"]))


def energy(results: Results, colors: dict) -> None:
    st.plotly_chart(charts.energy_chart(results.fleets, results.summary, colors), key="energy")
    power = power_over_time(results.pools, results.timeseries, results.end_s, results.scenario.economics.pue)
    fleet_power = coarsen(fleet_power_over_time(power), POWER_INTERVALS)
    fleets = list(dict.fromkeys(fleet_power["fleet"])) if "fleet" in fleet_power.columns else []
    if len(fleets) > POWER_FLEETS:  # two lines per fleet: beyond 3 fleets they tangle
        chosen = st.multiselect("fleets in the power chart", fleets, default=fleets[:POWER_FLEETS], key="power-fleets")
        fleet_power = fleet_power[fleet_power["fleet"].isin(chosen)]
    st.plotly_chart(charts.power_over_time_chart(fleet_power, colors), key="power-time")
    step_s = float((fleet_power["t_end_s"] - fleet_power["t_start_s"]).max())
    st.caption(f"Mean power per {step_s:.3g} s: each pool at idle + (busy − idle) × its busy fraction, at the run's "
               "chip activities; the area under the IT curve is the IT energy the requests are charged (`energy_j`).")
    cols = ["fleet", "it_power_avg_kw", "it_power_max_kw", "facility_power_max_mw", "it_energy_kwh_per_day",
            "facility_energy_kwh_per_day", "output_tokens_per_s_per_mw"]
    table = results.fleets[[c for c in cols if c in results.fleets.columns]].copy()
    st.table(table.set_index("fleet").map(lambda v: charts.human(v)))


def tco_view(results: Results) -> None:
    """Cash flow over the horizon, NPV and levelised cost, and the sensitivity table of
    the run (``dcsim tco``'s tables, repriced from this run without re-simulating)."""
    econ = results.scenario.economics
    horizon = st.number_input("horizon (years)", min_value=1, max_value=50, step=1, key="tco-horizon",
                              value=max(1, round(econ.depreciation_years)))
    try:
        tables = tco_tables(results, int(horizon))
    except UserError as err:
        st.error(str(err))
        return
    npv = tables.npv.set_index("fleet")
    npv["meets SLOs"] = npv.pop("qualifies").map({True: "yes", False: "no (not ranked)"})
    st.dataframe(npv, key="tco-npv")
    fleet = st.selectbox("cash flow of fleet", list(npv.index), key="tco-fleet")
    flow = tables.cash_flow[tables.cash_flow["fleet"] == fleet].drop(columns=["fleet", "load_multiplier"])
    st.dataframe(flow.set_index("year"), key="tco-flow")
    sens = tables.sensitivity
    metric = sens["metric"].iloc[0]
    grid = sens.pivot_table(index=["factor", "level", "value"], columns="fleet", values=metric, sort=False, dropna=False)
    grid["winner"] = sens.groupby(["factor", "level", "value"], sort=False, dropna=False)["winner"].first()
    st.caption(f"Sensitivity of {metric} (one factor at a time; the winner is the cheapest fleet that meets every "
               "SLO). Utilisation rows here scale the run's demand without re-simulating; `dcsim tco` re-simulates "
               "them.")
    st.dataframe(grid, key="tco-sensitivity")
    cols = st.columns(3)
    for col, (name, df) in zip(cols, (("cash_flow", tables.cash_flow), ("npv", tables.npv),
                                       ("sensitivity", sens))):
        col.download_button(f"{name}.csv", csv_bytes(df), f"{name}.csv", "text/csv", key=f"tco-{name}")


def sweep_view() -> None:
    st.caption("Load the output directory of `dcsim sweep --out DIR` (sweep.parquet or sweep.csv).")
    path = st.text_input("sweep directory", key="sweep-dir")
    if not path:
        return
    try:
        table = rank.as_aggregated(load_sweep(Path(path)))  # one ranking rule for the chart and the table
    except UserError as err:
        st.error(str(err))
        return
    workloads = list(dict.fromkeys(table["workload"]))
    workload = st.selectbox("workload", workloads, key="sweep-workload")
    st.plotly_chart(charts.pareto_front(table, workload), key="pareto")
    kinds = table.loc[table["workload"] == workload, "kind"] if "kind" in table.columns else []
    latency = charts.pareto_latency(kinds.iloc[0] if len(kinds) else None)
    st.table(rank.sweep_points(table, workload, latency).reset_index(drop=True))
    st.caption(f"Mean over seeds with its 95% interval; below {rank.MIN_SEEDS_FOR_INTERVAL} seeds the mean alone "
               "(an interval from 2-4 seeds is mostly the t quantile). **Pareto**: on the front of its load level "
               "among fleets that qualify (every workload meets its SLO target on the mean, no unstable seed); "
               "*excluded* says why a fleet does not, as `dcsim sweep` prints it.")
    params = charts.swept_columns(table)
    if len(params) < 2:
        st.info("A heatmap needs two swept parameters.")
        return
    cols = st.columns(3)
    x = cols[0].selectbox("x", params, index=0, key="heat-x")
    y = cols[1].selectbox("y", params, index=1, key="heat-y")
    fleet = cols[2].selectbox("fleet", list(dict.fromkeys(table["fleet"])), key="heat-fleet")
    st.plotly_chart(charts.sweep_heatmap(table, x, y, fleet=fleet, workload=workload), key="heatmap")


# --- size to SLO and capacity curves (need no run) ----------------------------------

def size_to_slo_view(scenario: dict | None) -> None:
    """Search replicas, TP/EP and precision per on-screen chip for the workloads chosen,
    within a budget stated before it starts (:mod:`sim.dashboard_sizing`), then offer to
    apply the winners to a fleet."""
    if scenario is None:
        st.warning("Fix the inputs marked in the sidebar first: Size to SLO searches the scenario on screen.", icon="🛑")
        return
    chips = sizing.chips_on_screen(scenario)
    left, middle, right = st.columns([2, 1, 1])
    names = left.multiselect("workloads to size", list(scenario["workloads"]), default=list(scenario["workloads"]),
                             key="size-workloads")
    budget_s = middle.number_input("time budget (s)", min_value=1.0, max_value=3600.0, value=sizing.DEFAULT_BUDGET_S,
                                   step=10.0, key="size-budget")
    cap = right.number_input("replica cap per chip", min_value=1, max_value=1000, value=sizing.DEFAULT_MAX_REPLICAS,
                             step=8, key="size-cap")
    st.caption(f"Searches **{', '.join(chips)}** (the chips of the fleets on screen) for "
               f"{', '.join(names) or 'no workload'}: replicas up to {cap:g} per chip, every TP/EP the model allows "
               f"within a node and every precision the chip has, each workload on pools of its own at its rate and "
               f"SLO, {scenario['duration_s']:g} s of arrivals per simulation. **Budget: {budget_s:g} s** of wall time, "
               "shared over the workloads; no simulation starts after it, so the search ends at most one simulation "
               "later. Costs are full-load $/hour, as `dcsim plan` counts them.")
    key = json.dumps([scenario, names, budget_s, cap], sort_keys=True)
    if st.button("Size to SLO", type="primary", disabled=not names, key="size-run"):
        bar = st.progress(0.0, text=f"sizing: 0 of {budget_s:g} s")

        def progress(done: int, elapsed_s: float, what: str) -> None:
            bar.progress(min(elapsed_s / budget_s, 1.0),
                         text=f"sizing {what}: {done} simulations, {elapsed_s:,.0f} of {budget_s:g} s")

        try:
            found = sizing.size_to_slo(scenario, names, budget_s, int(cap), progress=progress, catalog=catalog())
        except UserError as err:
            st.error(str(err))
            return
        finally:
            bar.empty()
        st.session_state["sizing"] = (key, found)
    stored = st.session_state.get("sizing")
    if stored is not None:
        sizing_result(stored[1], stale=stored[0] != key)


def sizing_result(found, stale: bool) -> None:
    """The answer of a Size-to-SLO search: budget verdict, per workload the chips ranked
    with why each lost, every trial, and the apply action."""
    if stale:
        st.info("These results are for the scenario or settings before your latest edits; press **Size to SLO** "
                "again to size what is on screen.")
    untried = sum(t.outcome == "budget" for t in found.trials)
    short = list(dict.fromkeys(t.workload for t in found.trials if t.outcome == "budget"))
    if found.out_of_budget:
        st.warning(f"**Ran out of budget** for {', '.join(short)} (each workload may use its share, "
                   f"{found.budget_s / len(found.workloads):,.3g} s, plus what the ones before it left): "
                   f"{found.elapsed_s:,.1f} s of the {found.budget_s:g} s budget spent, {found.simulations} "
                   f"simulations, {untried} layout(s) not tried. The answers below are the best found in time: a "
                   "cheaper layout may exist.", icon="⚠️")
    else:
        st.success(f"Searched every layout in {found.elapsed_s:,.1f} s of the {found.budget_s:g} s budget "
                   f"({found.simulations} simulations).")
    for name, why in found.errors.items():
        st.error(f"**{name}** could not be sized: {why}")
    won = sizing.winners(found)
    for name in found.workloads:
        if name in found.errors:
            continue
        st.subheader(f"Size to SLO: {name}")
        winner = won.get(name)
        st.markdown(f"**Winner: {winner.accelerator}**, {winner.replicas} × {winner.layout}, "
                    f"${winner.cost_usd_per_hour:,.2f}/hour at full load" if winner
                    else f"**No chip met the SLO of {name}** within the cap and the budget.")
        table = sizing.chip_table(found, name)
        table["cost_usd_per_hour"] = table["cost_usd_per_hour"].map(lambda v: "—" if pd.isna(v) else f"${v:,.2f}")
        for column in ("replicas", "accelerators"):
            table[column] = table[column].map(lambda v: "—" if pd.isna(v) else f"{int(v):,}")
        st.table(table.rename(columns={"cost_usd_per_hour": "$/hour"}).set_index("chip"))
    with st.expander("every layout tried"):
        st.dataframe(sizing.trials_table(found), hide_index=True)
    if won:
        apply_sizing(found)


def apply_sizing(found) -> None:
    """Put the winners into a fleet of the editor: a new fleet, or an existing one's pools
    for the sized workloads; every other edit is kept."""
    prefix, data = st.session_state.get("table_source", (None, None))
    if data is None:
        return
    new = f"a new fleet '{sizing.SIZED_FLEET}'"
    left, right = st.columns([3, 1])
    target = left.selectbox("apply the winners to", [new] + [f["name"] for f in data["fleets"]], key="size-target")
    if right.button("apply winners", key="size-apply"):
        initial = ds.initial_values(data, catalog())
        values = values_from_state(prefix, initial)
        edited, _ = ds.apply_edits(data, {k: v for k, v in values.items() if k != "fleets.selected"}, catalog())
        fleets = sizing.sized_fleets(edited["fleets"], found, None if target == new else target)
        name = prefix.split("#", 1)[0]
        selected = list(values.get("fleets.selected", []))
        apply_fleets(name, prefix, data, fleets)
        added = [f["name"] for f in fleets if f["name"] not in {g["name"] for g in data["fleets"]}]
        new_prefix = f"{name}#{st.session_state[f'table::{name}']['version']}"
        st.session_state[f"{new_prefix}::fleets.selected"] = selected + added
        st.rerun()


@st.cache_data(show_spinner=False, max_entries=16)
def curve_tables(inputs: curves.CurveInputs):
    return curves.tables(inputs, catalog())


def curves_view(data: dict | None) -> None:
    """``dcsim curves`` for a model and chips (:mod:`sim.dashboard_curves`)."""
    if data is None:
        st.info("Choose a scenario first.")
        return
    start = curves.defaults_from(data, catalog())
    state = st.session_state
    for k, v in (("curves-model", start.model), ("curves-chips", list(start.chips)),
                 ("curves-tpot", (start.tpot_slo_s or 0.0) * 1e3)):
        state.setdefault(k, v)
    top = st.columns([2, 3])
    model = top[0].selectbox("model", curves.token_models(catalog()), key="curves-model")
    chips = top[1].multiselect("chips", sorted(catalog().accelerators), key="curves-chips")
    row = st.columns(4)
    prompt = row[0].number_input("prompt tokens", 1, 1_000_000, curves.DEFAULT_PROMPT_TOKENS, key="curves-prompt")
    output = row[1].number_input("output tokens", 1, 1_000_000, curves.DEFAULT_OUTPUT_TOKENS, key="curves-output")
    tpot_ms = row[2].number_input("TPOT SLO (ms, 0 = none)", 0.0, 1e5, step=5.0, key="curves-tpot")
    util = row[3].number_input("utilisation for tokens per MW (%)", 1.0, 100.0, 100 * curves.DEFAULT_UTILISATION,
                               step=5.0, key="curves-util")
    if not chips:
        st.info("Choose at least one chip.")
        return
    inputs = curves.CurveInputs(model, tuple(chips), int(prompt), int(output), tpot_ms / 1e3 or None, util / 100)
    table, front, summary, skipped = curve_tables(inputs)
    for chip, why in skipped.items():
        st.warning(f"**{chip}** has no curve: {why}", icon="⚠️")
    if table.empty:
        return
    st.plotly_chart(curves.curves_figure(front, inputs), key="curves-chart")
    st.caption("Roofline step times of the performance model at every batch the KV cache holds (`dcsim curves`, "
               "docs/curves.md): per user = 1/TPOT with the prefill share included; per GPU = batch / (TPOT × GPUs); "
               "$ at the catalog's rental price per GPU-hour; each chip's frontier, its band shaded (the chip's "
               "`efficiency_band_pct`). No speculative decoding.")
    st.table(curves.speeds_table(summary, inputs.utilisation, inputs.tpot_slo_s).set_index(["chip", "≥ tok/s/user"]))
    st.caption(f"Tokens per MW at {inputs.utilisation:.0%} utilisation of full-load node power × PUE (provisioned "
               "facility power), not the offered load of a run.")
    columns = st.columns(2)
    columns[0].download_button("curves.csv", lambda: csv_bytes(table), file_name="curves.csv", mime="text/csv",
                               key="dl-curves")
    columns[1].download_button("frontier.csv", lambda: csv_bytes(front), file_name="frontier.csv", mime="text/csv",
                               key="dl-frontier")


def results_for(scenario: dict | None, pressed: bool) -> Results | None:
    """Run on Run; otherwise the last run's (cached) results."""
    if pressed and scenario is not None:
        st.session_state["last_run"] = json.dumps(scenario, sort_keys=True)
    key = st.session_state.get("last_run")
    if key is None:
        return None
    try:
        return simulate(key)
    except UserError as err:
        st.error(str(err))
        return None


def why_run_is_disabled(errors: dict[str, list[str]]) -> None:
    """Every error that blocks Run, full-width, with the input it belongs to."""
    st.error("**Run is disabled** until these inputs are fixed:", icon="🛑")
    for key, messages in errors.items():
        for message in messages:
            st.error(f"**{key or 'scenario'}**: {message}", icon="⚠️")


def main() -> None:
    st.set_page_config(page_title="dcsim what-if", page_icon="🏭", layout="wide")
    scenario, pressed = sidebar()
    st.title("AI-inference datacenter what-if")
    fleet_table_editor()
    if scenario is None and st.session_state.get("errors"):
        why_run_is_disabled(st.session_state["errors"])
    results = results_for(scenario, pressed)
    data = st.session_state.get("table_source", (None, None))[1]
    planning = {"Size to SLO": lambda: size_to_slo_view(scenario), "Curves": lambda: curves_view(data),
                "Sweep": sweep_view}
    if results is None:
        st.info("Edit the scenario in the sidebar and press **Run**. Without running: size the fleets to the SLO, "
                "draw capacity curves, or load a sweep directory.")
        views, default, key = planning, "Sweep", "view-early"
    else:
        stale = scenario is not None and json.dumps(scenario, sort_keys=True) != st.session_state["last_run"]
        sc = results.scenario
        st.caption(f"scenario **{sc.name}**: seed {sc.seed}, {sc.duration_s:g} s of arrivals after {sc.warmup_s:g} s "
                   f"warm-up, {len(sc.fleets)} fleet(s)" + (" — *the sidebar has edits not yet run*" if stale else ""))
        colors = charts.fleet_colors(st.session_state.get("all_fleets", []) + list(results.fleets["fleet"]))
        views = {
            "Overview": lambda: overview(results, colors),
            "Latency": lambda: latency(results, colors),
            "Utilisation": lambda: utilisation(results),
            "Cost": lambda: cost(results, colors),
            "Roofline": lambda: roofline(results, colors),
            "SLO misses": lambda: slo_misses(results),
            "Compare": lambda: compare(results, colors),
            "Energy": lambda: energy(results, colors),
            "TCO": lambda: tco_view(results),
            **planning,
        }
        default, key = "Overview", "view"
    # one view at a time (not st.tabs, which builds and ships every chart on each rerun)
    view = st.segmented_control("view", list(views), default=default, key=key, label_visibility="collapsed")
    shown = view or default
    views[shown]()
    # the end of the view, for the browser test: it waits for this marker, as Streamlit's own
    # status widget shows only after a delay and the previous view stays on screen until then
    st.markdown(f"<div data-testid='view-shown' data-view='{html.escape(shown)}' style='display:none'></div>",
                unsafe_allow_html=True)

main()
