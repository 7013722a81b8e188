"""Plain-text tables of a run and of the catalog, for people at a terminal.

Everything here is a pure function of its input: no timestamps, no terminal width, no
colour, so the same results print the same bytes (the CLI tests rely on it). Numbers are
converted from SI (seconds, USD, W, fractions) to display units only here.
"""

from __future__ import annotations

import math
import textwrap
from typing import Iterable, Sequence

import pandas as pd

from sim.models.economics import finance_line
from sim.results.qualify import SLO_MISSED, UNSTABLE, fleet_verdicts, row_verdict
from sim.results.tables import Results
from sim.workloads import kind_of

MISSING = "—"


# --- numbers ------------------------------------------------------------------------

def _missing(x) -> bool:
    return x is None or x is pd.NA or (isinstance(x, float) and not math.isfinite(x))


def human(x: float) -> str:
    """A number with as many digits as a person reads: 157, 35, 3.5, 0.42, 0.0020."""
    if _missing(x):
        return MISSING
    mag = abs(x)
    if mag >= 10 or mag == 0:
        return f"{x:,.0f}"
    if mag >= 1:
        return f"{x:.1f}"
    decimals = 1 - math.floor(math.log10(mag))
    return f"{x:.{decimals}f}"


def usd(x: float) -> str:
    """Money: $1.2B, $1.2M, $151k, $996, $2.8, $0.00020."""
    if _missing(x):
        return MISSING
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"${human(x / scale)}{suffix}"
    return f"${human(x)}"


def percent(fraction: float, decimals: int | None = None) -> str:
    """A fraction as a percentage: 0.71 -> 71%, 0.041 -> 4.1%."""
    if _missing(fraction):
        return MISSING
    if decimals is not None:
        return f"{100 * fraction:.{decimals}f}%"
    return f"{human(100 * fraction)}%"


def seconds(x: float) -> str:
    """A duration with its unit: 35 ms, 1.6 s, 2.5 min, 3.0 h."""
    if _missing(x):
        return MISSING
    for limit, scale, unit in ((1.0, 1e-3, "ms"), (120.0, 1.0, "s"), (7200.0, 60.0, "min")):
        if abs(x) < limit:
            return f"{human(x / scale)} {unit}"
    return f"{human(x / 3600.0)} h"


# --- tables -------------------------------------------------------------------------

DEFAULT_WIDTH = 120
"""Characters per line of the text tables when the caller does not say (``COLUMNS`` for
the CLI: :func:`text_width`)."""


def text_width(environ=None) -> int:
    """The terminal width the CLI formats for: ``COLUMNS`` when it is a number of at least
    40, else :data:`DEFAULT_WIDTH` (never the terminal's own size: the same command prints
    the same bytes wherever it runs)."""
    import os

    value = (os.environ if environ is None else environ).get("COLUMNS", "")
    return int(value) if value.isdigit() and int(value) >= 40 else DEFAULT_WIDTH


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], right: Sequence[bool] | None = None,
          width: int | None = DEFAULT_WIDTH) -> str:
    """Columns padded to their widest cell; ``right[i]`` right-aligns column i. A table
    wider than ``width`` characters (None: no limit) is split into blocks of consecutive
    columns, each repeating the first (key) column and fitting the width, one below the
    other; a single column wider than the width stays whole."""
    rows = [[str(c) for c in r] for r in rows]
    right = list(right) if right is not None else [i > 0 for i in range(len(headers))]
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]
    blocks = _column_blocks(widths, width)

    def render(cols: list[int]) -> str:
        def line(cells: Sequence[str]) -> str:
            parts = [cells[i].rjust(widths[i]) if right[i] else cells[i].ljust(widths[i]) for i in cols]
            return "  ".join(parts).rstrip()

        rule = "  ".join("-" * widths[i] for i in cols)
        return "\n".join([line([str(h) for h in headers]), rule, *(line(r) for r in rows)])

    return "\n\n".join(render(cols) for cols in blocks)


def _column_blocks(widths: list[int], width: int | None) -> list[list[int]]:
    """Column indices per block: all of them when they fit ``width``, else the key column
    0 followed by as many of the next columns as fit, block after block."""
    if width is None or sum(widths) + 2 * (len(widths) - 1) <= width or len(widths) <= 2:
        return [list(range(len(widths)))]
    blocks, current = [], [0]
    used = widths[0]
    for i in range(1, len(widths)):
        if len(current) > 1 and used + 2 + widths[i] > width:
            blocks.append(current)
            current, used = [0], widths[0]
        current.append(i)
        used += 2 + widths[i]
    blocks.append(current)
    return blocks


def _latency_unit(values: pd.Series) -> tuple[str, float]:
    finite = values[values.map(lambda v: not _missing(v))]
    return ("ms", 1e-3) if finite.empty or finite.abs().max() < 1.0 else ("s", 1.0)


def _tails(row: pd.Series, metric: str, scale: float) -> str:
    cells = [human(row[f"{metric}_p{p}_s"] / scale) for p in (50, 95, 99)]
    censored = metric != "tpot" and bool(row.get("tails_lower_bound", False))  # TPOT: completed only
    bound = "≥ " if censored and not all(c == MISSING for c in cells) else ""
    return bound + " / ".join(cells)


def _has_metric(g: pd.DataFrame, metric: str, kind: str) -> bool:
    """E2E always; TTFT/TPOT for token kinds or whenever some fleet reports them."""
    cols = [f"{metric}_p{p}_s" for p in (50, 95, 99)]
    return metric == "e2e" or kind_of(kind).per_token or bool(g[cols].notna().to_numpy().any())


def _status(row: pd.Series) -> str:
    """The status cell; which rows count as failed is :func:`sim.results.qualify.row_verdict`."""
    verdict = row_verdict(row)
    if verdict.status == UNSTABLE:
        parts = []
        if "backlog_growing" in str(row.get("unstable_reason", "")):
            parts.append(f"backlog +{human(row['backlog_slope_per_s'])}/s")
        if row["in_flight"]:
            parts.append(f"{int(row['in_flight'])} in flight")
        return f"UNSTABLE ({', '.join(parts)})"
    return "SLO missed" if verdict.status == SLO_MISSED else "ok"


REASON_LABELS = {"exceeds_max_context": "context", "exceeds_kv_capacity": "KV", "exceeds_memory": "memory",
                 "other": "other"}


def rejections(row: pd.Series) -> str:
    """Rejected measured requests: count, share of arrivals and reasons."""
    n = int(row.get("rejected", 0))
    if n == 0:
        return "0"
    reasons = [(label, int(row.get(f"rejected_{key}", 0))) for key, label in REASON_LABELS.items()]
    reasons = [(label, k) for label, k in reasons if k]
    why = reasons[0][0] if len(reasons) == 1 else ", ".join(f"{label} {k}" for label, k in reasons)
    return f"{n} ({percent(row['rejected_share'], decimals=1)} {why})"


def _misses(row: pd.Series) -> str:
    counts = [row.get(f"slo_miss_{r}") for r in ("ttft", "tpot", "e2e", "rejected", "unfinished")]
    return " / ".join(MISSING if _missing(c) else str(int(c)) for c in counts)


def workload_table(name: str, g: pd.DataFrame, width: int | None = DEFAULT_WIDTH) -> str:
    """One workload across fleets: latency tails, throughput, SLO, costs, status."""
    kind = str(g["kind"].iloc[0])
    spec = kind_of(kind)
    headers, columns = ["fleet"], [list(g["fleet"].astype(str))]
    for metric, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "E2E")):
        if not _has_metric(g, metric, kind):
            continue
        values = pd.concat([g[f"{metric}_p{p}_s"] for p in (50, 95, 99)])
        unit, scale = _latency_unit(values)
        headers.append(f"{label} p50/p95/p99 ({unit})")
        columns.append([_tails(r, metric, scale) for _, r in g.iterrows()])
    for header, values in spec.report_columns(g, FORMATS, after="tails"):
        headers.append(header)
        columns.append(values)
    target = percent(g["slo_target"].iloc[0], decimals=None)
    headers += ["req/s offered / served / goodput", "rejected", f"SLO met (target {target})",
                "misses TTFT/TPOT/E2E/rejected/unfinished", "$/request"]
    columns += [
        [" / ".join(human(r.get(c)) for c in ("arrival_rate_rps", "throughput_rps", "goodput_rps")) for _, r in g.iterrows()],
        [rejections(r) for _, r in g.iterrows()],
        [percent(v, decimals=1) for v in g["slo_attainment"]],
        [_misses(r) for _, r in g.iterrows()],
        [usd(v) for v in g["cost_per_request_usd"]],
    ]
    if spec.per_token:
        headers.append("$/1M output tokens")
        columns.append([usd(v) for v in g["cost_per_1m_output_tokens_usd"]])
    elif spec.item:
        headers.append(f"$/{spec.item}")
        per_item = g[spec.cost_per_item_column] if spec.cost_per_item_column in g else g["cost_per_request_usd"]
        columns.append([usd(v) for v in per_item])
    if "energy_per_request_j" in g:
        unit = "J/output token" if spec.per_token else f"J/{spec.item or 'request'}"
        headers.append(f"IT energy ({unit})")
        columns.append([human(v) for v in g["energy_per_output_token_j" if spec.per_token else "energy_per_request_j"]])
    extra = spec.report_columns(g, FORMATS, after="costs")
    for header, values in extra:
        headers.append(header)
        columns.append(values)
    if not any(h.startswith("hand-offs") for h, _ in extra) and (
            g.get("handoffs_per_request", pd.Series(dtype=float)).fillna(0) > 0).any():
        headers.append("hand-offs (transfer / queue)")
        columns.append([handoffs(r) for _, r in g.iterrows()])
    headers.append("status")
    columns.append([_status(r) for _, r in g.iterrows()])
    right = [0 < i < len(headers) - 1 for i in range(len(headers))]
    title = f"Workload {name} ({kind}): {int(g['requests'].iloc[0])} measured requests"
    text = f"{title}\n{table(headers, zip(*columns), right, width)}"
    if g.get("tails_lower_bound", pd.Series(dtype=bool)).fillna(False).astype(bool).any():
        text += ("\n  ≥ lower bounds: the backlog of an unstable run grows, so its unfinished requests count"
                 "\n    with the time they had waited when the run ended")
    return text


def handoffs(row: pd.Series) -> str:
    """Mean hand-offs per request, with the mean time in transfer and in the receiving
    pools' queues."""
    n = row.get("handoffs_per_request")
    if _missing(n) or n == 0:
        return "none"
    return f"{human(n)} ({seconds(row['handoff_transfer_s_mean'])} / {seconds(row['handoff_queue_s_mean'])})"


class _Formats:
    """The text formats a workload kind's own report columns use
    (:meth:`sim.workloads.base.WorkloadKind.report_columns`)."""

    human = staticmethod(lambda x: human(x))
    usd = staticmethod(lambda x: usd(x))
    handoffs = staticmethod(lambda row: handoffs(row))
    tails = staticmethod(lambda row, metric, scale: _tails(row, metric, scale))
    latency_unit = staticmethod(lambda values: _latency_unit(values))


FORMATS = _Formats()


def _count(n, noun: str) -> str:
    n = int(n)
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _pool_row(p: pd.Series) -> list[str]:
    shape = (f"{int(p['replicas'])} × tp{int(p['tp'])}" + (f" pp{int(p['pp'])}" if int(p["pp"]) > 1 else "")
             + (f" ep{int(p['ep'])}" if int(p.get("ep", 1)) > 1 else ""))
    band = p.get("perf_band_pct")
    return [
        str(p["pool"]), str(p["accelerator"]), MISSING if _missing(band) else f"±{band:.0f}%",
        str(p["model"]), str(p["precision"]), shape,
        percent(p["busy_fraction"]), percent(p.get("mfu")), percent(p.get("bandwidth_utilisation")),
        f"{percent(p.get('hbm_mean_fraction'))} / {percent(p.get('hbm_peak_fraction'))}",
        _intensity(p),
        *_saturation(p),
    ]


def _saturation(p: pd.Series) -> list[str]:
    """Batch against max_batch, KV/activation memory in use, queue, backlog trend."""
    batch = p.get("batch_mean")
    if _missing(batch):
        return [MISSING] * 4
    fill = f"{human(batch)} ({percent(p['batch_fill_fraction'])})"
    memory = f"{percent(p['memory_used_mean_fraction'])} / {percent(p['memory_used_peak_fraction'])}"
    if _missing(p["memory_used_mean_fraction"]):
        memory = MISSING
    queue = f"{human(p['queue_mean'])} / {human(p['queue_end'])}"
    trend = f"UNSTABLE +{human(p['backlog_slope_per_s'])}/s" if p["unstable"] else "stable"
    return [fill, memory, queue, trend]


def _intensity(p: pd.Series) -> str:
    """Arithmetic intensity of the pool's work against its ridge point: below the ridge
    the pool is memory-bound, above it compute-bound."""
    ai, ridge = p.get("arithmetic_intensity_flop_per_byte"), p.get("ridge_flop_per_byte")
    if _missing(ai) or _missing(ridge):
        return MISSING
    return f"{human(ai)} / {human(ridge)} ({'compute' if ai >= ridge else 'memory'})"


def _band_line(pools: pd.DataFrame) -> str:
    """How sure each pool's latency, throughput and cost are: its accelerator's band from
    dcsim validate's held-out residuals (the pool table's ``perf_band_pct``)."""
    if "perf_band_pct" not in pools.columns:
        return "no band (dcsim validate gave none)"
    known = [(str(p["pool"]), p["perf_band_pct"]) for _, p in pools.iterrows() if not _missing(p["perf_band_pct"])]
    if not known:
        return "no band (dcsim validate gave none)"
    bands = sorted({round(band) for _, band in known})
    spread = f"±{bands[0]}%" if len(bands) == 1 else f"±{bands[0]}-{bands[-1]}% (band column)"
    return f"{spread} on latency, throughput and cost (q80 of held-out errors, dcsim validate)"


def fleet_table(fleet: pd.Series, pools: pd.DataFrame, ownership: str = "own",
                width: int | None = DEFAULT_WIDTH) -> str:
    """One fleet: hardware and money on top, then a row per pool. Under ``ownership:
    rent`` the fleet has no capex (the purchase price is shown as what buying would cost)
    and opex is the rent."""
    renting = ownership == "rent"
    capex = (f"none: rented (buying would cost {usd(fleet['capex_usd'])})" if renting else usd(fleet["capex_usd"]))
    lines = [
        f"Fleet {fleet['fleet']}",
        f"  accelerators   {fleet['accelerators'] or MISSING}  ({_count(fleet['nodes'], 'node')}, "
        f"{_count(fleet['racks'], 'rack')}, {_count(fleet.get('empty_slots', 0), 'empty slot')})",
        f"  capex          {capex}",
        f"  opex           {usd(fleet['opex_usd_per_month'])}/month" + (" (rent)" if renting else ""),
        f"  IT power       {human(fleet['it_power_max_kw'])} kW max, {human(fleet['it_power_avg_kw'])} kW average",
        *_energy_lines(fleet),
        f"  perf model     {_band_line(pools)}",
    ]
    headers = ["pool", "accelerator", "band", "model", "precision", "replicas", "busy", "MFU", "mem-BW util",
               "HBM mean/peak", "FLOP/byte vs ridge", "batch/replica (of max)", "KV or act. mean/peak",
               "queue mean/end", "backlog"]
    rows = [_pool_row(p) for _, p in pools.iterrows()]
    right = [6 <= i < len(headers) - 1 for i in range(len(headers))]
    return "\n".join(lines) + "\n" + table(headers, rows, right, width)


def _energy_lines(fleet: pd.Series) -> list[str]:
    """Facility power and energy per day, tokens per provisioned MW, own vs rent."""
    if "facility_power_max_mw" not in fleet:
        return []
    tokens = fleet.get("output_tokens_per_s_per_mw")
    lines = [f"  facility       {human(fleet['facility_power_max_mw'])} MW provisioned, "
             f"{human(fleet['facility_energy_kwh_per_day'])} kWh/day"
             + ("" if _missing(tokens) else f", {human(tokens)} output tokens/s per MW")]
    rent = fleet.get("rent_usd_per_hour")
    lines.append(f"  cost/hour      own {usd(fleet['own_cost_usd_per_hour'])}, rent "
                 + (MISSING + " (no rental price for a type)" if _missing(rent) else usd(rent)))
    return lines


def _wrap(text: str, width: int | None) -> list[str]:
    """``text`` wrapped to ``width`` (continuation lines indented by 2); one line if None."""
    return textwrap.wrap(text, width, subsequent_indent="  ") if width else [text]


def run_report(results: Results, width: int | None = DEFAULT_WIDTH) -> str:
    """The whole stdout report of ``dcsim run``: scenario line, workloads, fleets, every
    table within ``width`` characters (None: unlimited)."""
    sc = results.scenario
    head = (f"Scenario {sc.name}: seed {sc.seed}, {seconds(sc.duration_s)} of arrivals, "
            f"measured after {seconds(sc.warmup_s)} warm-up, {len(sc.fleets)} fleet(s)")
    parts = [head + "\n" + "\n".join(_wrap(finance_line(sc.economics), width))]
    summary = results.summary
    for name, wl in sc.workloads.items():
        g = summary[summary["workload"] == name] if "workload" in summary.columns else summary
        if g.empty:
            parts.append(f"Workload {name} ({wl.kind}): no requests arrived in the measurement window")
        else:
            parts.append(workload_table(name, g, width))
    for _, fleet in results.fleets.iterrows():
        parts.append(fleet_table(fleet, results.pools[results.pools["fleet"] == fleet["fleet"]],
                                 sc.economics.ownership, width))
    if "workload" in summary.columns and not summary.empty and results.fleets.shape[0] > 1:
        parts.append(ranking_text(summary, width))
    if results.operations is not None:
        parts.append(operations_table(results.operations))
    return "\n\n".join(parts) + "\n"


def ranking_text(summary: pd.DataFrame, width: int | None = DEFAULT_WIDTH) -> str:
    """Per workload, the fleets ranked by $/request, only those that qualify
    (:func:`sim.results.qualify.fleet_verdicts`: every workload meets its SLO target and
    the backlog is stable); the others listed after them as "not ranked" with the reason,
    wrapped to ``width``."""
    verdicts = fleet_verdicts(summary)
    lines = ["Ranking by $/request: only fleets meeting every SLO target with a stable backlog"]
    indent = " " * 6
    for name, g in summary.groupby("workload", sort=False):
        lines.append(f"  {name}")
        ok = g[g["fleet"].map(lambda f: verdicts[str(f)].qualifies)].sort_values("cost_per_request_usd", kind="stable")
        for rank, (_, r) in enumerate(ok.iterrows(), 1):
            lines.append(f"    {rank}. {r['fleet']}  {usd(r['cost_per_request_usd'])}")
        for _, r in g[~g.index.isin(ok.index)].iterrows():
            text = f"    -  {r['fleet']}  not ranked: {verdicts[str(r['fleet'])].reason}"
            lines += textwrap.wrap(text, width, subsequent_indent=indent) if width else [text]
        if ok.empty:
            lines.append("    (no fleet qualifies)")
    return "\n".join(lines)


def operations_table(ops: pd.DataFrame) -> str:
    """Operated pools (residency, autoscale, failures): what the operations cost and caused."""
    headers = ["fleet", "pool", "GPU-h powered", "powered $", "cold starts", "loads (storage/host/HBM)",
               "adapter loads", "interruptions", "replica-h failed", "retried", "lost"]
    rows = [[r.fleet, r.pool, f"{r.gpu_hours_powered:,.1f}", _cell(r.powered_cost_usd, lambda x: f"${x:,.2f}"),
             str(r.cold_starts), f"{r.loads_storage}/{r.loads_host}/{r.switches_hbm}", str(r.adapter_loads),
             str(r.interruptions), f"{r.failed_replica_s / 3600:,.1f}", str(r.requests_retried),
             str(r.requests_lost)] for r in ops.itertuples()]
    return "Operations (residency, autoscaling, failures)\n" + table(headers, rows, right=[False, False] + [True] * 9)


# --- catalog ------------------------------------------------------------------------

def _cell(x, fmt=human) -> str:
    return MISSING if _missing(x) else fmt(x)


def accelerators_text(df: pd.DataFrame) -> str:
    headers = ["key", "name", "bf16 TFLOP/s", "fp8 TFLOP/s", "fp4 TFLOP/s", "memory GB", "mem BW TB/s",
               "scale-up", "TDP W", "price", "status", "price status"]
    rows = [
        [r["key"], r["name"], _cell(r["peak_bf16_tflops"]), _cell(r["peak_fp8_tflops"]),
         _cell(r["peak_fp4_tflops"]), _cell(r["memory_gb"]), _cell(r["memory_bw_tbps"]),
         _cell(r["scaleup_domain_size"], lambda v: str(int(v))), _cell(r["tdp_w"]), _cell(r["price_usd"], usd),
         str(r["status"]), str(r["price_status"])]
        for _, r in df.iterrows()
    ]
    right = [2 <= i <= 9 for i in range(len(headers))]
    sources = "\n".join(f"  {r['key']}: {r['spec_source']}" for _, r in df.iterrows())
    return f"Accelerators\n{table(headers, rows, right)}\n\nSources\n{sources}"


def efficiency_text(df: pd.DataFrame) -> str:
    """Per accelerator: eta_c, eta_m, fixed iteration overhead, uncertainty band and how
    they were obtained (calibrated / transferred / spec-only), then each row's source."""
    headers = ["key", "eta_c", "eta_m", "t0 us", "band", "efficiency status"]
    rows = [
        [r["key"], f"{r['compute_efficiency']:.3f}", f"{r['bandwidth_efficiency']:.3f}",
         f"{r['iteration_overhead_us']:.0f}", _cell(r["efficiency_band_pct"], lambda v: f"±{v:.0f}%"),
         str(r["efficiency_status"])]
        for _, r in df.iterrows()
    ]
    right = [1 <= i <= 4 for i in range(len(headers))]
    sources = "\n".join(f"  {r['key']}: {r['efficiency_source']}" for _, r in df.iterrows())
    return f"Efficiency (dcsim validate)\n{table(headers, rows, right)}\n\nEfficiency sources\n{sources}"


def models_text(df: pd.DataFrame) -> str:
    headers = ["key", "name", "kind", "params B", "active B", "weights bf16 GB", "KV B/token bf16",
               "context", "status"]
    rows = [
        [r["key"], r["name"], r["kind"], _cell(r["params_b"]), _cell(r["active_params_b"]),
         _cell(r["weights_bf16_gb"]), _cell(r["kv_bytes_per_token_bf16"], lambda v: f"{int(v):,}"),
         _cell(r["max_context_tokens"], lambda v: f"{int(v):,}"), str(r["status"])]
        for _, r in df.iterrows()
    ]
    right = [3 <= i <= 7 for i in range(len(headers))]
    sources = "\n".join(f"  {r['key']}: {r['source']}" for _, r in df.iterrows())
    return f"Models\n{table(headers, rows, right)}\n\nSources\n{sources}"
