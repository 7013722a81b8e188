"""Headroom: how much more load a fleet takes before it misses an SLO, by re-simulation.

``headroom_load_multiplier`` of the planner CSV (:mod:`sim.results.planner_csv`) is the
largest multiplier m of every workload's arrival rate (all scaled together) at which every
workload still meets its SLO target (and the run stays stable), found by re-simulating the
fleet with the same seed: doubling from 1 up to :data:`HEADROOM_MAX`, then geometric
bisection until the bracket is narrower than :data:`HEADROOM_TOLERANCE` (5%). Below 1 the
fleet misses an SLO at today's load (0 if even :data:`HEADROOM_MIN` × the load fails);
``HEADROOM_MAX`` means "at least that".

It lives in ``studies`` because it is built from many runs; it also builds the planner
table of a ``run`` or of a result directory, since those carry headroom.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Callable

import pandas as pd

from sim.errors import UserError
from sim.results.planner_csv import fleet_workload_rows, planner_table
from sim.results.tables import Results, run_scenario
from traffic.demand_fit import FittedArrivals
from sim.overrides import derive, keep_fleet, override
from sim.scenario import Scenario, load_scenario

HEADROOM_MAX = 4.0
HEADROOM_MIN = 0.25
HEADROOM_TOLERANCE = 0.05


def scale_arrival(arrival: dict, factor: float) -> dict:
    """An arrival mapping with its mean rate multiplied by ``factor``."""
    out = copy.deepcopy(arrival)
    if out["kind"] in ("poisson", "gamma"):
        out["rate_per_s"] = out["rate_per_s"] * factor
    elif out["kind"] == "mmpp":
        out["rates_per_s"] = [r * factor for r in out["rates_per_s"]]
    elif out["kind"] == "trace":
        out["rate_scale"] = out.get("rate_scale", 1.0) * factor
    elif out["kind"] == "fitted":
        if "rate_per_s" not in out:  # a preset's level, made explicit before scaling
            out["rate_per_s"] = FittedArrivals.model_validate(out).rate_per_s
        out["rate_per_s"] = out["rate_per_s"] * factor
    else:
        raise ValueError(f"cannot scale arrivals of kind {out['kind']!r}")
    return out


def scaled_scenario(scenario: Scenario, fleet: str, factor: float) -> Scenario:
    """``scenario`` with only ``fleet`` and every workload's arrival rate × ``factor``,
    changed in its document and validated once (:mod:`sim.overrides`)."""
    def change(doc: dict) -> None:
        keep_fleet(doc, fleet)
        for wl in doc["workloads"].values():
            wl["arrival"] = scale_arrival(wl["arrival"], factor)

    return derive(scenario, change, f"{scenario.name} (load × {factor:.3g})")


def meets_slos(summary: pd.DataFrame) -> bool:
    """Every workload stable, with SLO attainment at or above its target."""
    ok = (~summary["unstable"].astype(bool)) & (summary["slo_attainment"].fillna(0.0) >= summary["slo_target"] - 1e-12)
    return bool(ok.all())


def headroom_multiplier(scenario: Scenario, fleet: str, simulate_fn: Callable | None = None) -> float:
    """See the module docstring. ``simulate_fn(scenario) -> summary DataFrame`` (default:
    :func:`sim.results.tables.run_scenario`)."""
    run = simulate_fn or (lambda sc: run_scenario(sc).summary)

    def passes(m: float) -> bool:
        return meets_slos(run(scaled_scenario(scenario, fleet, m)))

    if passes(1.0):
        lo, hi = 1.0, 2.0
        while hi <= HEADROOM_MAX and passes(hi):
            lo, hi = hi, hi * 2.0
        if lo >= HEADROOM_MAX:
            return HEADROOM_MAX
        hi = min(hi, HEADROOM_MAX * (1 + HEADROOM_TOLERANCE))
    else:
        lo, hi = 0.5, 1.0
        while lo >= HEADROOM_MIN and not passes(lo):
            lo, hi = lo / 2.0, lo
        if lo < HEADROOM_MIN:
            return 0.0
    while hi / lo > 1.0 + HEADROOM_TOLERANCE:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if passes(mid) else (lo, mid)
    return min(lo, HEADROOM_MAX)


def split_headroom(scenario: Scenario, fleet: str, simulate_fn: Callable | None = None) -> pd.DataFrame:
    """The prefill:decode split of a split deployment at the fleet's accelerator count,
    by headroom: fleet ``fleet`` has one pool serving ``<w>:prefill`` and one serving
    ``<w>:decode`` (their accelerators and layouts kept); every maximal split of its
    accelerators between them (n_p·a_p + n_d·a_d ≤ the fleet's count, no room for one more
    replica on either side, both ≥ 1) is simulated for its :func:`headroom_multiplier`.

    Returns:
        One row per split, best first: ``prefill_replicas``, ``decode_replicas``,
        ``prefill_accelerators``, ``decode_accelerators``, ``headroom_load_multiplier``.

    Raises:
        UserError: the fleet is not one prefill pool and one decode pool."""
    from sim.models.parallelism import replica_accelerators

    from sim.overrides import document

    data = document(scenario)  # as scaled_scenario: the scenario's document, validated once per split
    index = next(i for i, f in enumerate(data["fleets"]) if f["name"] == fleet)
    pools = data["fleets"][index]["pools"]
    sides = {e.partition(":")[2]: i for i, p in enumerate(pools) for e in p["serves"]}
    if len(pools) != 2 or set(sides) != {"prefill", "decode"}:
        raise UserError(f"split headroom: fleet '{fleet}' must be one prefill pool and one decode pool")
    per = {side: replica_accelerators(pools[i].get("tp", 1), pools[i].get("pp", 1), pools[i].get("ep", 1))
           for side, i in sides.items()}
    total = sum(pools[i]["replicas"] * per[side] for side, i in sides.items())
    rows = []
    for n_p in range(1, total // per["prefill"] + 1):
        n_d = (total - n_p * per["prefill"]) // per["decode"]
        if n_d < 1:
            break

        def change(doc: dict, n_p: int = n_p, n_d: int = n_d) -> None:
            split = doc["fleets"][index]["pools"]
            split[sides["prefill"]]["replicas"], split[sides["decode"]]["replicas"] = n_p, n_d

        trial = derive(scenario, change, f"{scenario.name} (split {n_p}:{n_d})")
        rows.append({"prefill_replicas": n_p, "decode_replicas": n_d, "prefill_accelerators": n_p * per["prefill"],
                     "decode_accelerators": n_d * per["decode"],
                     "headroom_load_multiplier": headroom_multiplier(trial, fleet, simulate_fn)})
    table = pd.DataFrame(rows)
    return table.sort_values(["headroom_load_multiplier", "prefill_replicas"], ascending=[False, True],
                             kind="stable").reset_index(drop=True)


def results_planner_table(results: Results, headroom: bool = True) -> pd.DataFrame:
    """The planner table of one ``run`` (one row per fleet)."""
    rows = fleet_workload_rows(results)
    marks = {}
    if headroom:
        marks = {(f.name,): headroom_multiplier(results.scenario, f.name) for f in results.scenario.fleets}
    return planner_table(rows, ["fleet"], marks)



# --- from a result directory --------------------------------------------------------

def directory_planner_table(directory: str | Path, headroom: bool = True) -> pd.DataFrame:
    """The planner table of a ``run --out`` or ``sweep --out`` directory.

    Raises:
        UserError: ``directory`` holds neither kind of result."""
    directory = Path(directory)
    if (directory / "runs.parquet").exists() and (directory / "base-scenario.yaml").exists():
        return _sweep_planner_table(directory, headroom)
    needed = ("summary.csv", "fleets.csv", "pools.csv", "scenario.yaml")
    if all((directory / n).exists() for n in needed):
        return _run_planner_table(directory, headroom)
    raise UserError(
        f"{directory}: not a dcsim result directory (expected runs.parquet and base-scenario.yaml "
        f"from 'dcsim sweep --out', or {', '.join(needed)} from 'dcsim run --out')"
    )


HEADROOM_FILE = "headroom.csv"  # fleet, headroom_load_multiplier: written by 'run --out DIR --planner FILE'


def write_headroom(table: pd.DataFrame, directory: str | Path) -> Path:
    """Save the headroom column of a run's planner ``table`` into its result directory,
    so ``dcsim export`` reuses it instead of simulating again (atomic write)."""
    from sim.results.export import write_csv, write_file_atomic

    cols = ["fleet", "headroom_load_multiplier"]
    return write_file_atomic(Path(directory) / HEADROOM_FILE, lambda p: write_csv(table[cols], p))


def saved_headroom(directory: Path, fleets: list[str]) -> dict | None:
    """``{(fleet,): multiplier}`` from the directory's headroom file when it covers
    every fleet with a number; None otherwise (then headroom is found by simulation)."""
    path = directory / HEADROOM_FILE
    if not path.exists():
        return None
    saved = pd.read_csv(path)
    marks = {(str(f),): float(h) for f, h in zip(saved["fleet"], saved["headroom_load_multiplier"]) if h == h}
    return marks if all((f,) in marks for f in fleets) else None


def _run_planner_table(directory: Path, headroom: bool) -> pd.DataFrame:
    scenario = load_scenario(directory / "scenario.yaml")
    summary = pd.read_csv(directory / "summary.csv")
    fleets = pd.read_csv(directory / "fleets.csv")
    pools = pd.read_csv(directory / "pools.csv")
    results = Results(scenario, pd.DataFrame(), pools, summary, fleets, {}, {}, pd.DataFrame())
    marks = saved_headroom(directory, [f.name for f in scenario.fleets])
    if marks is not None:  # 'run --planner' already found it: no second simulation
        return planner_table(fleet_workload_rows(results), ["fleet"], marks)
    return results_planner_table(results, headroom)


def _sweep_planner_table(directory: Path, headroom: bool) -> pd.DataFrame:
    runs = pd.read_parquet(directory / "runs.parquet")
    if runs.empty:
        raise UserError(f"{directory}: the sweep has no finished points")
    cols = list(runs.columns)
    fields = cols[cols.index("point_id") + 1: cols.index("seed")]
    keys = ["point_id", *fields, "seed", "fleet"]
    marks: dict = {}
    if "headroom_load_multiplier" in runs:
        marks = {tuple(k): h for k, h in zip(runs[keys].itertuples(index=False), runs["headroom_load_multiplier"])}
    elif headroom:
        base = load_scenario(directory / "base-scenario.yaml")
        for k, g in runs.groupby(keys, sort=False):
            overrides = list(json.loads(g["overrides_json"].iloc[0]).items()) + [("seed", int(g["seed"].iloc[0]))]
            scenario = override(base, overrides, str(directory / "base-scenario.yaml"))
            marks[k] = headroom_multiplier(scenario, g["fleet"].iloc[0])
    return planner_table(runs, keys, marks)
