"""``dcsim``: the command-line shell around the simulator.

Results go to stdout, diagnostics (progress, wall time) to stderr. A mistake in user
input (:class:`~sim.errors.UserError`: scenario field, trace row, placement, CLI option)
prints one paragraph ``dcsim: error: ...`` on stderr and exits with code 2, without a
traceback; any other exception is a bug and keeps its traceback.

    dcsim run scenarios/default.yaml --out results/default
    dcsim catalog --kind models
    dcsim schema > scenario.schema.json
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Iterator, Optional

import typer

from sim.errors import UserError
from sim.scenario import Scenario, load_scenario, parse_scenario

EXIT_USER_ERROR = 2

app = typer.Typer(
    name="dcsim",
    help="Datacenter capacity and economics simulator for AI inference.",
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


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


def note(message: str, quiet: bool = False) -> None:
    """A diagnostic line on stderr (never stdout, which carries results)."""
    if not quiet:
        typer.echo(f"dcsim: {message}", err=True)


# --- run ----------------------------------------------------------------------------

def apply_overrides(
    scenario: Scenario, source: str, trace: Optional[Path], seed: Optional[int], duration_s: Optional[float]
) -> Scenario:
    """The scenario with command-line overrides, validated again through the schema.

    Raises:
        ScenarioError: an override makes the scenario invalid (e.g. duration <= warmup).
        UserError: ``--trace`` given but no workload replays a trace.
    """
    if trace is None and seed is None and duration_s is None:
        return scenario
    data = scenario.model_dump(mode="json")
    if trace is not None:
        replaying = [n for n, w in data["workloads"].items() if w["arrival"]["kind"] == "trace"]
        if not replaying:
            raise UserError(f"--trace {trace}: no workload in {source} has an arrival of kind 'trace' to replace")
        for name in replaying:
            data["workloads"][name]["arrival"]["path"] = str(trace)
    if seed is not None:
        data["seed"] = seed
    if duration_s is not None:
        data["duration_s"] = duration_s
    return parse_scenario(data, f"{source} (with command-line overrides)")


@app.command()
def run(
    scenario_path: Path = typer.Argument(..., metavar="SCENARIO", help="scenario YAML file"),
    out: Optional[Path] = typer.Option(None, "--out", help="write results (parquet, CSV, scenario.yaml) to DIR", metavar="DIR"),
    trace: Optional[Path] = typer.Option(None, "--trace", help="replay this trace in every workload whose arrival kind is trace"),
    seed: Optional[int] = typer.Option(None, "--seed", help="override the scenario seed"),
    duration_s: Optional[float] = typer.Option(None, "--duration-s", help="override the arrival duration, seconds"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar or notes on stderr"),
) -> None:
    """Simulate every fleet of SCENARIO on the same demand and print the comparison."""
    from sim.export import check_replaceable, write_results
    from sim.progress import progress_bars
    from sim.report_text import run_report
    from sim.results import run_scenario

    with user_errors():
        scenario = apply_overrides(load_scenario(scenario_path), str(scenario_path), trace, seed, duration_s)
        if out is not None:
            check_replaceable(out.absolute())
        started = time.perf_counter()
        if quiet:
            results = run_scenario(scenario)
        else:
            with progress_bars() as bars:
                results = run_scenario(scenario, progress=bars)
        note(f"simulated {len(scenario.fleets)} fleet(s) in {time.perf_counter() - started:.1f} s wall time", quiet)
        if out is not None:
            note(f"wrote {write_results(results, out)}", quiet)
    typer.echo(run_report(results), nl=False)


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
    from fleets.catalog import load_catalog
    from sim.report_text import accelerators_text, models_text

    with user_errors():
        cat = load_catalog()
    parts = []
    if kind in (CatalogKind.accelerators, CatalogKind.all):
        parts.append(accelerators_text(cat.accelerators_table()))
    if kind in (CatalogKind.models, CatalogKind.all):
        parts.append(models_text(cat.models_table()))
    typer.echo("\n\n".join(parts))


@app.command()
def schema() -> None:
    """Print the scenario JSON Schema (for editors and validators)."""
    typer.echo(json.dumps(Scenario.model_json_schema(), indent=2))


# --- entry point --------------------------------------------------------------------

def main(argv: Optional[list[str]] = None) -> None:
    """Console entry point: run the app and map usage errors to ``dcsim: error:``."""
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="dcsim", standalone_mode=False)
    except typer.TyperException as err:  # usage errors (exit code 2) and other CLI errors
        ctx = getattr(err, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        typer.echo(error_paragraph(err.format_message() + hint), err=True)
        sys.exit(err.exit_code)
    except typer.Abort:
        typer.echo("dcsim: aborted", err=True)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
