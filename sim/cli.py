"""``dcsim``: the command-line shell around the simulator.

Results go to stdout, diagnostics (progress, wall time) to stderr. A mistake in user
input (:class:`~sim.errors.UserError`: scenario field, trace row, placement, CLI option)
prints one paragraph ``dcsim: error: ...`` on stderr and exits with code 2, without a
traceback; any other exception is a bug and keeps its traceback.

    dcsim run scenarios/default.yaml --out results/default
    dcsim sweep scenarios/sweep-mix.yaml --out results/sweep --dask local --workers 2
    dcsim export results/default --planner planner.csv
    dcsim plan scenarios/plan-example.yaml --out results/plan
    dcsim catalog --kind models
    dcsim schema > scenario.schema.json
    dcsim validate --out results/validate
    dcsim data

Interrupts: Ctrl-C (SIGINT) or SIGTERM at any point, start-up included, prints one line
``dcsim: interrupted; nothing written`` and exits 130 (SIGINT) or 143 (SIGTERM); outputs
are written atomically, so nothing half-written remains (a sweep keeps the points it
finished, and a rerun resumes them).
"""

from __future__ import annotations

import os
import signal
import sys

INTERRUPTED = "dcsim: interrupted; nothing written"


def _interrupt_hook(kind, value, tb, _previous=sys.excepthook):
    """A Ctrl-C while the modules below are still importing: one line, exit 130."""
    if issubclass(kind, KeyboardInterrupt):
        sys.stderr.write(INTERRUPTED + "\n")
        sys.stderr.flush()
        os._exit(130)
    _previous(kind, value, tb)


def _startup_signal(signum, frame) -> None:
    sys.stderr.write(INTERRUPTED + "\n")
    sys.stderr.flush()
    os._exit(128 + signum)


def _in_worker() -> bool:
    """Whether this is a worker process spawned by dcsim (a sweep's or cells' process
    pool, a Dask worker): it inherits the parent's argv, and must not say "interrupted"
    when the parent stops it (e.g. after a disk-full error the parent reports)."""
    mp = sys.modules.get("multiprocessing")
    return mp is not None and mp.current_process().name != "MainProcess"


if (__name__ == "__main__" or os.path.basename(sys.argv[0] if sys.argv else "") == "dcsim") and not _in_worker():
    sys.excepthook = _interrupt_hook
    signal.signal(signal.SIGTERM, _startup_signal)  # main() installs its own handlers

import json  # noqa: E402 - after the start-up interrupt hook
import time  # noqa: E402
from contextlib import contextmanager
from enum import Enum
from pathlib import Path  # noqa: E402
from typing import Iterator, Optional  # noqa: E402

import typer  # noqa: E402

from sim.errors import UserError  # noqa: E402
from sim.scenario import Scenario, load_scenario, parse_scenario  # noqa: E402

EXIT_USER_ERROR = 2

app = typer.Typer(
    name="dcsim",
    help="Datacenter capacity and economics simulator for AI inference.",
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version_callback(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"dcsim {version('dcsim')}")
        except PackageNotFoundError:  # running from a source tree that was never installed
            typer.echo("dcsim (not installed: version unknown)")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version_callback, is_eager=True,
                                 help="print the installed dcsim version and exit"),
) -> None:
    """Datacenter capacity and economics simulator for AI inference."""


def error_paragraph(message: str) -> str:
    """``dcsim: error: <message>`` with blank lines removed (one paragraph)."""
    lines = [line.rstrip() for line in str(message).strip().splitlines() if line.strip()]
    return "dcsim: error: " + "\n".join(lines)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn a UserError into its message on stderr and exit code 2."""
    try:
        yield
    except UserError as err:
        typer.echo(error_paragraph(str(err)), err=True)
        raise typer.Exit(EXIT_USER_ERROR) from None


FORCE = typer.Option(False, "--force", help="write even where dcsim did not write before (a directory holding other "
                     "files, an existing file that is not dcsim's output)")


def note(message: str, quiet: bool = False) -> None:
    """A diagnostic line on stderr (never stdout, which carries results)."""
    if not quiet:
        typer.echo(f"dcsim: {message}", err=True)


# --- run ----------------------------------------------------------------------------

def apply_overrides(
    scenario: Scenario, source: str, trace: Optional[Path], seed: Optional[int], duration_s: Optional[float]
) -> Scenario:
    """The scenario with command-line overrides set in its document and validated once
    (:mod:`sim.overrides`): a trace replay keeps its own lengths, and an override equal
    to the file's value changes nothing.

    Raises:
        ScenarioError: an override makes the scenario invalid (e.g. duration <= warmup).
        UserError: ``--trace`` given but no workload replays a trace.
    """
    from sim.overrides import override

    if trace is None and seed is None and duration_s is None:
        return scenario
    changes: list[tuple[str, object]] = []
    if trace is not None:
        replaying = [n for n, w in scenario.workloads.items() if w.arrival.kind == "trace"]
        if not replaying:
            raise UserError(f"--trace {trace}: no workload in {source} has an arrival of kind 'trace' to replace")
        changes += [(("workloads", name, "arrival", "path"), str(trace)) for name in replaying]
    if seed is not None:
        changes.append(("seed", seed))
    if duration_s is not None:
        changes.append(("duration_s", duration_s))
    return override(scenario, changes, f"{source} (with command-line overrides)")


@app.command()
def run(
    scenario_path: Path = typer.Argument(..., metavar="SCENARIO", help="scenario YAML file"),
    out: Optional[Path] = typer.Option(None, "--out", help="write results (parquet, CSV, scenario.yaml) to DIR", metavar="DIR"),
    trace: Optional[Path] = typer.Option(None, "--trace", help="replay this trace in every workload whose arrival kind is trace"),
    seed: Optional[int] = typer.Option(None, "--seed", help="override the scenario seed"),
    duration_s: Optional[float] = typer.Option(None, "--duration-s", help="override the arrival duration, seconds"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar or notes on stderr"),
    planner: Optional[Path] = typer.Option(None, "--planner", metavar="FILE", help="also write the planner CSV (one row per fleet) to FILE"),
    headroom: bool = typer.Option(True, "--headroom/--no-headroom", help="with --planner: find each fleet's load headroom by re-simulation"),
    cells: Optional[int] = typer.Option(None, "--cells", metavar="N", help="split every fleet into N identical cells, each with its own router and 1/N of the demand, and merge them (see docs/scale.md, 'Cells')"),
    dask: Optional[str] = typer.Option(None, "--dask", metavar="ADDRESS", help="with --cells: run the cells on this Dask scheduler, or 'local' for a LocalCluster"),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, max=1024, metavar="N", help="with --cells: worker processes, 1..1024 (default: cores)"),
    catalog_overlay: Optional[Path] = typer.Option(None, "--catalog", metavar="OVERLAY", help="accelerator overlay CSV (dcsim calibrate --out) laid over the shipped catalog"),
    force: bool = FORCE,
) -> None:
    """Simulate every fleet of SCENARIO on the same demand and print the comparison."""
    from sim.results.export import RESULT_NAMES, check_writable, write_results
    from sim.results.outputs import output_dir, output_file, planner_signature
    from sim.results.progress import progress_bars
    from sim.results.report_text import run_report, text_width
    from sim.results.tables import run_scenario

    with user_errors():
        _use_overlay(catalog_overlay)
        scenario = apply_overrides(load_scenario(scenario_path), str(scenario_path), trace, seed, duration_s)
        if out is not None:
            out = output_dir(out, "--out", force=force, replace_files=RESULT_NAMES)
            check_writable(out, "--out")
        if planner is not None:
            planner = output_file(planner, "--planner", force=force, signature=planner_signature)
            check_writable(planner, "--planner", directory=False)
        started = time.perf_counter()
        if cells is not None:
            results = _run_cells(scenario, cells, dask, workers)
        elif dask is not None or workers is not None:
            raise UserError("--dask and --workers go with --cells N (a run of one fleet is one process)")
        elif quiet:
            results = run_scenario(scenario)
        else:
            with progress_bars() as bars:
                results = run_scenario(scenario, progress=bars)
        note(f"simulated {len(scenario.fleets)} fleet(s) in {time.perf_counter() - started:.1f} s wall time", quiet)
        if out is not None:
            note(f"wrote {write_results(results, out, force=force)}", quiet)
        if planner is not None:
            note(f"wrote {write_run_planner(results, planner, headroom, out)}", quiet)
    typer.echo(run_report(results, text_width()), nl=False)


def _run_cells(scenario: Scenario, cells: int, dask: Optional[str], workers: Optional[int]):
    from sim.studies.cells import run_cells
    from sim.studies.sweep import make_executor

    return run_cells(scenario, cells, lambda: make_executor(dask, workers))  # checks --cells before any worker starts


# --- catalog and schema -------------------------------------------------------------

class CatalogKind(str, Enum):
    accelerators = "accelerators"
    models = "models"
    all = "all"


@app.command()
def catalog(
    kind: CatalogKind = typer.Option(CatalogKind.all, "--kind", help="which table to print"),
) -> None:
    """Print the accelerator and model catalogs: key numbers, status and sources."""
    from fleets.catalog_io import load_catalog
    from sim.results.report_text import accelerators_text, efficiency_text, models_text

    with user_errors():
        cat = load_catalog()
    parts = []
    if kind in (CatalogKind.accelerators, CatalogKind.all):
        parts.append(accelerators_text(cat.accelerators_table()))
        parts.append(efficiency_text(cat.accelerators_table()))
    if kind in (CatalogKind.models, CatalogKind.all):
        parts.append(models_text(cat.models_table()))
    typer.echo("\n\n".join(parts))


@app.command()
def schema() -> None:
    """Print the scenario JSON Schema (for editors and validators)."""
    typer.echo(json.dumps(Scenario.model_json_schema(), indent=2))


# --- sweep, export, plan (sim.studies.sweep, sim.results.planner_csv, sim.studies.planner) --------------------

def write_planner(table, path: Path) -> Path:
    """Write a planner table (see :mod:`sim.results.planner_csv`) to ``path`` atomically."""
    from sim.results.export import write_csv, write_file_atomic

    return write_file_atomic(path, lambda p: write_csv(table, p))


def write_run_planner(results, path: Path, headroom: bool, out: Optional[Path] = None) -> Path:
    """The planner CSV of one run; with headroom and a result directory ``out``, the
    headroom is also saved there for ``dcsim export`` to reuse."""
    from sim.studies.headroom import results_planner_table, write_headroom

    table = results_planner_table(results, headroom=headroom)
    written = write_planner(table, path)
    if headroom and out is not None:
        write_headroom(table, out)
    return written


@app.command()
def sweep(
    sweep_path: Path = typer.Argument(..., metavar="SWEEP", help="sweep YAML file (base scenario, grid, fleets, seeds)"),
    out: Path = typer.Option(..., "--out", metavar="DIR", help="results directory; a rerun resumes it"),
    dask: Optional[str] = typer.Option(None, "--dask", metavar="ADDRESS", help="'local' (start a LocalCluster) or tcp://HOST:PORT of a Dask scheduler"),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, max=1024, help="local processes or LocalCluster workers, 1..1024 (default: cores; 2 with --dask local); 1 runs in this process"),
    strict: bool = typer.Option(False, "--strict", help="exit 1 if any point failed"),
    planner: Optional[Path] = typer.Option(None, "--planner", metavar="FILE", help="also write the planner CSV (per point × fleet, with headroom) to FILE"),
    headroom: bool = typer.Option(True, "--headroom/--no-headroom", help="with --planner: find each point's load headroom by re-simulation"),
    catalog_overlay: Optional[Path] = typer.Option(None, "--catalog", metavar="OVERLAY", help="accelerator overlay CSV (dcsim calibrate --out) laid over the shipped catalog"),
    force: bool = FORCE,
) -> None:
    """Run a grid of scenario fields × fleets × seeds; write tidy tables to DIR."""
    from sim.results.export import check_writable
    from sim.results.outputs import output_dir, output_file, planner_signature
    from sim.studies.sweep import check_dask_address, run_sweep
    from sim.studies.sweep_spec import load_sweep

    with user_errors():
        _use_overlay(catalog_overlay)
        if dask is not None:
            check_dask_address(dask)
        spec = load_sweep(sweep_path)
        out = output_dir(out, "--out", force=force)
        check_writable(out, "--out", replace=False)
        if planner is not None:
            planner = output_file(planner, "--planner", force=force, signature=planner_signature)
            check_writable(planner, "--planner", directory=False)
        seeds = f"{len(spec.seeds)} seed(s)" if spec.seeds else "the grid's seeds"
        note(f"{len(spec.points)} points ({_grid_size(spec)} grid values × {len(spec.fleets)} fleet(s) × {seeds})")
        report = run_sweep(spec, out, workers=workers, dask=dask, headroom=planner is not None and headroom)
        rate = report.ran / report.wall_s * 60 if report.wall_s > 0 and report.ran else 0.0
        note(f"ran {report.ran} point(s), skipped {report.skipped} already done, in {report.wall_s:.1f} s ({rate:.0f} points/minute)")
        note(f"wrote {report.out_dir / 'sweep.parquet'} and sweep.csv ({len(report.table)} rows)")
        if planner is not None:
            note(f"wrote {write_dir_planner(out, planner, headroom=False)}")
    from sim.studies.sweep_report import sweep_text

    typer.echo(sweep_text(report.table, spec.swept_fields), nl=False)
    _report_failures(report.failures, strict, every=report.table.empty and len(spec.points) > 0)


def _grid_size(spec) -> int:
    size = 1
    for values in spec.grid.values():
        size *= len(values)
    return size


def _report_failures(failures, strict: bool, every: bool = False) -> None:
    """Notes on the failed points; exit 1 with ``--strict`` if any failed, or when every
    point failed (there is no result at all)."""
    if failures.empty:
        return
    note(f"{len(failures)} point(s) failed (details in failures.csv):")
    for _, f in failures.head(10).iterrows():
        first = str(f["error"]).strip().splitlines()[0] if str(f["error"]).strip() else ""
        note(f"  {f['point_id']} fleet {f['fleet']} seed {f['seed']} {f['overrides']}: {first}")
    if len(failures) > 10:
        note(f"  ... and {len(failures) - 10} more")
    if every:
        note("every point failed: the sweep has no result")
    if strict or every:
        raise typer.Exit(1)


def write_dir_planner(directory: Path, path: Path, headroom: bool) -> Path:
    """The planner CSV of a run or sweep output directory."""
    from sim.studies.headroom import directory_planner_table

    return write_planner(directory_planner_table(directory, headroom=headroom), path)


@app.command()
def export(
    directory: Path = typer.Argument(..., metavar="DIR", help="a result directory from 'run --out' or 'sweep --out'"),
    planner: Path = typer.Option(..., "--planner", metavar="FILE", help="write the planner CSV to FILE"),
    headroom: bool = typer.Option(True, "--headroom/--no-headroom", help="find load headroom by re-simulation when DIR lacks it"),
    force: bool = FORCE,
) -> None:
    """Write the planner CSV (one row per fleet, or per sweep point × fleet) from DIR."""
    from sim.results.export import check_writable
    from sim.results.outputs import output_file, planner_signature

    with user_errors():
        planner = output_file(planner, "--planner", force=force, signature=planner_signature)
        check_writable(planner, "--planner", directory=False)
        note(f"wrote {write_dir_planner(directory, planner, headroom)}")


@app.command()
def plan(
    plan_path: Path = typer.Argument(..., metavar="PLAN", help="plan YAML file (demand, SLOs, candidate accelerators)"),
    out: Optional[Path] = typer.Option(None, "--out", metavar="DIR", help="write plan.csv and the planned scenario(s) to DIR"),
    planner: Optional[Path] = typer.Option(None, "--planner", metavar="FILE", help="write the planner CSV of the chosen and single-type fleets to FILE"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no notes on stderr"),
    horizon_weeks: Optional[float] = typer.Option(
        None, "--horizon-weeks", min=0, max=520, metavar="N",
        help="plan fitted demand (arrival kind: fitted) N weeks ahead; overrides the file's horizon_weeks",
    ),
    catalog_overlay: Optional[Path] = typer.Option(None, "--catalog", metavar="OVERLAY", help="accelerator overlay CSV (dcsim calibrate --out) laid over the shipped catalog"),
    force: bool = FORCE,
) -> None:
    """Find the cheapest fleet whose simulated SLO attainment meets every target."""
    from sim.studies.planner import load_plan, run_plan, write_plan
    from sim.studies.planner_report import plan_text

    from sim.results.export import check_writable
    from sim.results.outputs import output_dir, output_file, planner_signature

    with user_errors():
        _use_overlay(catalog_overlay)
        spec = load_plan(plan_path)
        if horizon_weeks is not None:
            spec = spec.model_copy(update={"horizon_weeks": horizon_weeks})
        if out is not None:
            out = output_dir(out, "--out", force=force)
            check_writable(out, "--out", replace=False)
        if planner is not None:
            planner = output_file(planner, "--planner", force=force, signature=planner_signature)
            check_writable(planner, "--planner", directory=False)
        started = time.perf_counter()
        result = run_plan(spec, log=None if quiet else note)
        note(f"planned in {time.perf_counter() - started:.1f} s wall time ({result.simulations} simulations)", quiet)
        if out is not None:
            note(f"wrote {write_plan(result, out)}", quiet)
        if planner is not None:
            note(f"wrote {write_planner(result.planner, planner)}", quiet)
    typer.echo(plan_text(result), nl=False)


@app.command()
def curves(
    model: str = typer.Option(..., "--model", help="model key from `dcsim catalog`, e.g. llama-3.1-70b"),
    chips: str = typer.Option("h100-sxm,h200,b200,mi300x", "--chips", help="comma-separated accelerator keys"),
    prompt_tokens: int = typer.Option(1024, "--prompt-tokens", min=1, max=1_000_000, help="prompt (input) tokens per request"),
    output_tokens: int = typer.Option(1024, "--output-tokens", min=1, max=1_000_000, help="output tokens per request"),
    precision: Optional[str] = typer.Option(None, "--precision", help="bf16 | fp8 | fp4 (default: fp8 where the chip has it, else bf16)"),
    tp: Optional[int] = typer.Option(None, "--tp", min=1, max=64, help="keep one TP size (default: every allowed TP/EP)"),
    max_gpus: int = typer.Option(8, "--max-gpus", min=1, max=64, help="largest replica (GPUs) to consider"),
    tpot_slo_ms: Optional[float] = typer.Option(None, "--tpot-slo-ms", min=0.1, max=1e5, help="mark the SLO region: TPOT at most this, ms"),
    utilisation: float = typer.Option(0.7, "--utilisation", min=0.01, max=1.0, help="share of time at the curve's throughput, for tokens per MW (0.01..1)"),
    out: Optional[Path] = typer.Option(None, "--out", metavar="DIR", help="write curves.csv, frontier.csv and curves.png to DIR"),
    force: bool = FORCE,
) -> None:
    """Capacity curves: tokens/s per GPU and $/1M tokens vs tokens/s per user, per chip."""
    from fleets.catalog_io import load_catalog
    from sim.results.export import check_writable, write_csv, write_file_atomic
    from sim.results.outputs import output_dir
    from sim.studies.curves import curves_table, frontier, summary_at_speeds
    from sim.studies.curves_report import SPEEDS, curves_png, curves_text

    with user_errors():
        if out is not None:
            out = output_dir(out, "--out", force=force)
            check_writable(out, "--out", replace=False)
        keys = [c.strip() for c in chips.split(",") if c.strip()]
        tpot_s = None if tpot_slo_ms is None else tpot_slo_ms / 1e3
        table_ = curves_table(load_catalog(), model, keys, prompt_tokens, output_tokens, precision=precision, tp=tp,
                              max_gpus=max_gpus, tpot_slo_s=tpot_s, utilisation=utilisation)
        front = frontier(table_)
        if out is not None:
            from sim.results.export import claim_dir

            claim_dir(out, "curves")
            write_file_atomic(out / "curves.csv", lambda p: write_csv(table_, p))
            write_file_atomic(out / "frontier.csv", lambda p: write_csv(front, p))
            title = f"{model}: {prompt_tokens} in / {output_tokens} out"
            write_file_atomic(out / "curves.png", lambda p: curves_png(table_, front, p, title, tpot_s))
            note(f"wrote {out / 'curves.csv'}, frontier.csv and curves.png")
    typer.echo(curves_text(summary_at_speeds(table_, list(SPEEDS)), model, prompt_tokens, output_tokens,
                           utilisation, tpot_s), nl=False)


# --- tco ----------------------------------------------------------------------------

TCO_FILES = ("cash_flow.csv", "npv.csv", "sensitivity.csv")


@app.command()
def tco(
    scenario_path: Path = typer.Argument(..., metavar="SCENARIO", help="scenario YAML file"),
    out: Optional[Path] = typer.Option(None, "--out", metavar="DIR", help="write cash_flow.csv, npv.csv and sensitivity.csv to DIR"),
    horizon_years: Optional[int] = typer.Option(None, "--horizon-years", metavar="N", help="years of cash flow, 1..50 (default: the IT depreciation life, rounded up)"),
    seed: Optional[int] = typer.Option(None, "--seed", help="override the scenario seed"),
    duration_s: Optional[float] = typer.Option(None, "--duration-s", help="override the arrival duration, seconds"),
    force: bool = FORCE,
) -> None:
    """Cash flow, NPV, levelised cost and sensitivity of every fleet: one run repriced, and two more at low
    and high demand for the utilisation rows."""
    from sim.results.export import check_writable, claim_dir, write_csv, write_file_atomic
    from sim.results.outputs import output_dir
    from sim.results.report_text import text_width
    from sim.results.tables import run_scenario
    from sim.studies.tco import check_horizon, load_multipliers, scaled_demand, tco_tables
    from sim.studies.tco_report import tco_report

    with user_errors():
        check_horizon(horizon_years)
        scenario = apply_overrides(load_scenario(scenario_path), str(scenario_path), None, seed, duration_s)
        if out is not None:
            out = output_dir(out, "--out", force=force)
            check_writable(out, "--out", replace=False)
        results = run_scenario(scenario)
        load_runs = {level: run_scenario(scaled_demand(scenario, factor)) for level, factor in load_multipliers().items()}
        tables = tco_tables(results, horizon_years, load_runs)
        if out is not None:
            claim_dir(out, "tco")
            for name, frame in zip(TCO_FILES, (tables.cash_flow, tables.npv, tables.sensitivity)):
                write_file_atomic(out / name, lambda p, frame=frame: write_csv(frame, p))
            note(f"wrote {out / TCO_FILES[0]}, {TCO_FILES[1]} and {TCO_FILES[2]}")
    typer.echo(tco_report(tables, scenario.economics, scenario.name, text_width()), nl=False)


# --- report (HTML) ------------------------------------------------------------------

@app.command()
def report(
    directory: Path = typer.Argument(..., metavar="DIR", help="a 'run --out' or 'sweep --out' directory"),
    out: Optional[Path] = typer.Option(None, "--out", metavar="FILE.html", help="where to write (default: DIR.html beside DIR)"),
    force: bool = FORCE,
) -> None:
    """Turn a run or sweep output directory into one self-contained HTML file."""
    from sim.results.report_html import write_report

    with user_errors():
        path = write_report(directory, out, force=force)
    note(f"wrote {path}")


# --- validate (sim.studies.validate) ---------------------------------------------------------

REFERENCE_DATA = Path(__file__).resolve().parents[1] / "fleets" / "data" / "reference"
DEFAULT_CALIBRATION_DATA = (REFERENCE_DATA / "calibration_points_with_precision.csv",
                            REFERENCE_DATA / "mlperf_v5.1_points.csv",
                            REFERENCE_DATA / "trtllm_perf_overview.csv")
"""MLPerf Inference v4.0/v4.1 (with each row's precision) and v5.1 points and the TensorRT-LLM
max-throughput table shipped with dcsim (fleets/data/reference/NOTICE.md)."""


@app.command()
def validate(
    out: Path = typer.Option(..., "--out", metavar="DIR", help="write validation.csv, fitted_factors.csv, loao.csv, unexpressed.csv, summary.csv and validation.png to DIR"),
    data: Optional[list[Path]] = typer.Option(None, "--data", "--points", metavar="PATH", help="results CSV (MLPerf v4.x/v5.x format; extra columns ignored); repeat for several; default: the shipped MLPerf v4.x + v5.1 points and TensorRT-LLM table"),
    fit: bool = typer.Option(True, "--fit/--no-fit", help="--no-fit: predict every row with the shipped catalog (no fit, no cross-validation)"),
    server: bool = typer.Option(True, "--server/--no-server", help="also predict Server and Interactive points (exact-engine bisection; slower)"),
    compare_rules: bool = typer.Option(False, "--compare-rules", help="also cross-validate the pooled transfer rule (ignore the vendor)"),
    update_catalog: bool = typer.Option(False, "--update-catalog", help="also write the fitted and transferred factors into fleets/data/accelerators.csv"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no notes on stderr"),
    force: bool = FORCE,
) -> None:
    """Fit the efficiency model on MLPerf and vendor Offline results, cross-validate it leave-one-accelerator-out, transfer it to every chip, band every chip."""
    from sim.studies.validate import validate as run_validation
    from sim.studies.validate_report import summary_text, update_catalog as write_catalog, write_outputs

    from sim.results.export import check_writable
    from sim.results.outputs import output_dir

    with user_errors():
        out = output_dir(out, "--out", force=force)
        check_writable(out, "--out", replace=False)
        started = time.perf_counter()
        def progress(stage: str) -> None:
            note(f"[{time.perf_counter() - started:5.1f} s] {stage}", quiet)

        result = run_validation(list(data or DEFAULT_CALIBRATION_DATA), fit=fit, server=server,
                                compare_rules=compare_rules, progress=progress)
        note(f"validated {len(result.points)} point(s) in {time.perf_counter() - started:.1f} s wall time", quiet)
        for path in write_outputs(result, out):
            note(f"wrote {path}", quiet)
        if update_catalog and fit:
            from fleets.catalog_io import DATA_DIR

            note(f"wrote {write_catalog(result.factors, DATA_DIR / 'accelerators.csv')}", quiet)
    typer.echo(summary_text(result), nl=False)


def _use_overlay(path: Optional[Path]) -> None:
    if path is not None:
        from fleets.catalog_io import use_overlay

        use_overlay(path)


@app.command()
def calibrate(
    points: Path = typer.Argument(..., metavar="POINTS", help="your measurements, in the MLPerf results CSV format (extra columns ignored)"),
    out: Path = typer.Option(..., "--out", metavar="OVERLAY", help="write the fitted accelerator rows (an overlay for --catalog) to this CSV"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no notes on stderr"),
    force: bool = FORCE,
) -> None:
    """Fit eta_c, eta_m (and the shared t_0) of the accelerators in POINTS; write a catalog overlay."""
    from sim.results.export import check_writable
    from sim.results.outputs import output_file, overlay_signature
    from sim.studies.validate import calibrate_overlay
    from sim.studies.validate_report import write_overlay

    with user_errors():
        out = output_file(out, "--out", force=force, signature=overlay_signature)
        check_writable(out, "--out", directory=False)
        table, text = calibrate_overlay(points)
        note(f"wrote {write_overlay(table, out)}", quiet)
    typer.echo(text, nl=False)


# --- data (traffic.datasets) --------------------------------------------------------

@app.command()
def data(
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", metavar="DIR", help="check this optional-data directory instead of $DCSIM_DATA_DIR (default ~/.local/share/dcsim)"),
) -> None:
    """List the optional datasets (not shipped): source, sha256, size, where dcsim looks, present or not."""
    from traffic.datasets import datasets_text

    typer.echo(datasets_text(data_dir), nl=False)


# --- entry point --------------------------------------------------------------------

class Interrupted(BaseException):
    """SIGINT or SIGTERM, raised from the signal handler. A BaseException (like
    KeyboardInterrupt) so no ``except Exception`` swallows it, but not a KeyboardInterrupt,
    which click would turn into an Abort after printing a blank line."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_interrupted(signum, frame) -> None:
    raise Interrupted(signum)


def main(argv: Optional[list[str]] = None) -> None:
    """Console entry point: run the app and map usage errors to ``dcsim: error:`` and
    interrupts to one line and exit code 128 + signal number (130 for Ctrl-C)."""
    import threading

    in_main = threading.current_thread() is threading.main_thread()  # signal handlers need the main thread
    previous = {sig: signal.signal(sig, _raise_interrupted) for sig in (signal.SIGINT, signal.SIGTERM)} if in_main else {}
    try:
        code = _main(argv)
    except Interrupted as err:
        _say_interrupted(argv)
        code = 128 + err.signum
    except (KeyboardInterrupt, typer.Abort):
        _say_interrupted(argv)
        code = 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    sys.exit(code)


def _say_interrupted(argv: Optional[list[str]]) -> None:
    args = sys.argv[1:] if argv is None else argv
    sweep = next((a for a in args if not a.startswith("-")), "") == "sweep"
    line = "dcsim: interrupted; nothing half-written (finished sweep points are kept: rerun to resume)" if sweep \
        else INTERRUPTED
    try:
        typer.echo(line, err=True)
    except Interrupted:  # a second signal while printing
        pass


def _main(argv: Optional[list[str]]) -> int:
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="dcsim", standalone_mode=False)
    except typer.TyperException as err:  # usage errors (exit code 2) and other CLI errors
        ctx = getattr(err, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        typer.echo(error_paragraph(err.format_message() + hint), err=True)
        return err.exit_code
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    main()
