"""Size to SLO in the dashboard (issue 28, Build item 2), without Streamlit.

For the workloads and fleets on screen, the planner's layout search
(:func:`sim.studies.planner_layouts.search_layouts` over
:class:`sim.studies.planner.WorkloadSearch`: replicas, TP, EP and precision per chip) is
run on every chip the on-screen fleets use, each workload on pools of its own, at the
scenario's own arrivals, SLOs, run window, seed and economics. The dashboard states a
wall-time budget before it starts:

- the budget is split over the workloads (the i-th of n must finish by start + budget ×
  i / n; time left over by one passes to the next);
- the planner stops trying layouts once a workload's deadline passes, and the search
  here (:func:`bounded_search`) refuses to start a simulation after it, so the search
  ends at most one simulation past its budget (a simulation of this scenario, not a
  whole search). Layouts left untried are reported as ``budget``.

The answer, per workload: the cheapest passing layout per chip (full-load $/hour, as
``dcsim plan`` costs pools), the winner (the cheapest of them) and why each other chip
lost: its cost, the SLO missed at the replica cap in every layout tried, the model not
fitting, or the time budget. :func:`sized_fleets` puts the winners into the fleets.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from sim.errors import UserError
from sim.models.parallelism import replica_accelerators
from sim.studies.planner import PlanSpec, WorkloadSearch, pool_fields
from sim.studies.planner_layouts import LayoutTrial, search_layouts

ROUTERS = ("round_robin", "least_outstanding", "join_shortest_queue", "central_queue")
LAYOUT_FIELDS = ("tp", "ep", "pp", "precision", "max_batch", "price_usd")
DEFAULT_BUDGET_S = 60.0
DEFAULT_MAX_REPLICAS = 32
DEFAULT_MAX_SIMULATIONS = 200
SIZED_FLEET = "sized-to-slo"

Progress = Callable[[int, float, str], None]  # (simulations done, seconds elapsed, what runs now)


def chips_on_screen(data: dict) -> list[str]:
    """The accelerators the fleets of ``data`` (a scenario document) use, in order of
    first appearance."""
    return list(dict.fromkeys(p["accelerator"] for f in data["fleets"] for p in f["pools"]))


def _layout_of(data: dict, accelerator: str, workload: str) -> dict:
    """The layout fields of the first on-screen pool on ``accelerator`` that serves
    ``workload`` (else of any pool on it, without its TP/EP: those are the model's), {}
    when none."""
    pools = [p for f in data["fleets"] for p in f["pools"] if p["accelerator"] == accelerator]
    serving = [p for p in pools if any(s.split(":")[0] == workload for s in p["serves"])]
    if serving:
        return {k: serving[0][k] for k in LAYOUT_FIELDS if serving[0].get(k) is not None}
    return {k: pools[0][k] for k in ("precision", "price_usd") if pools and pools[0].get(k) is not None}


def plan_spec(data: dict, max_replicas: int = DEFAULT_MAX_REPLICAS, max_simulations: int = DEFAULT_MAX_SIMULATIONS,
              budget_s: float = DEFAULT_BUDGET_S, catalog=None) -> PlanSpec:
    """A plan of ``data``'s workloads (arrivals and SLOs as on screen) with every on-screen
    chip as a candidate: its layout per workload starts from the on-screen pool's
    (:func:`_layout_of`); the search may use each precision the chip has a peak for.

    Raises:
        UserError / ScenarioError: the plan is invalid (a message naming the field)."""
    from fleets.catalog_io import load_catalog

    catalog = catalog or load_catalog()
    candidates = []
    for acc in chips_on_screen(data):
        precisions = [p for p in ("bf16", "fp8", "fp4") if p in catalog.accelerators[acc].precisions]
        layouts = {w: {k: v for k, v in _layout_of(data, acc, w).items() if k != "price_usd"} for w in data["workloads"]}
        price = next((v for v in (_layout_of(data, acc, w).get("price_usd") for w in data["workloads"]) if v), None)
        candidates.append({"accelerator": acc, "precisions": precisions, "price_usd": price,
                           "precision": "fp8" if "fp8" in precisions else precisions[0], "layouts": layouts})
    router = next((f.get("router") for f in data["fleets"] if f.get("router") in ROUTERS), "least_outstanding")
    spec = {"name": f"size-{data.get('name', 'scenario')}", "seed": int(data.get("seed", 0)),
            "duration_s": data["duration_s"], "warmup_s": data.get("warmup_s", 0.0),
            "drain_s": data.get("drain_s", 300.0), "router": router, "economics": data.get("economics") or {},
            "demand": copy.deepcopy(data["workloads"]), "candidates": candidates, "headroom": False,
            "search": {"max_replicas_per_type": max_replicas, "max_simulations": max_simulations,
                       "mixes": False, "layouts": True, "time_budget_s": budget_s}}
    try:
        return PlanSpec.model_validate(spec)
    except ValueError as err:
        raise UserError(f"Size to SLO: the scenario cannot become a plan: {err}") from None


class BudgetSpent(UserError):
    """Raised inside a search when a simulation would start after its deadline."""


def bounded_search(deadline: float, progress: Progress | None, started: float, done: list[int]):
    """:class:`WorkloadSearch` that refuses to start a simulation after ``deadline`` (a
    :func:`time.monotonic` instant) and reports each one to ``progress``; ``done`` is the
    shared [simulations run]. :func:`search_layouts` records the refused layout as
    ``budget``."""

    class Bounded(WorkloadSearch):
        def meets(self, counts):
            key = tuple(sorted((a, n) for a, n in counts.items() if n > 0))
            fresh = key not in self.cache and self.keeps_up(dict(key))
            if fresh and time.monotonic() > deadline:
                raise BudgetSpent("Size to SLO: the time budget is spent")
            if fresh and progress is not None:
                acc = key[0][0]
                fields = pool_fields(self.spec, self.name, acc)
                layout = f"TP{fields.get('tp', 1)}" + (f" EP{fields['ep']}" if fields.get("ep", 1) > 1 else "")
                progress(done[0], time.monotonic() - started,
                         f"{self.name} on {acc} {layout} {fields.get('precision', '')}, {key[0][1]} replicas")
            ok = super().meets(counts)
            done[0] += fresh
            return ok

    return Bounded


@dataclass
class Sizing:
    """What a Size-to-SLO search found: every trial, per workload the chosen search's
    cost function, the budget (s) stated and the time (s) it took."""

    trials: list[LayoutTrial]
    budget_s: float
    elapsed_s: float
    simulations: int
    max_replicas: int
    workloads: list[str]
    spec: PlanSpec
    errors: dict[str, str] = field(default_factory=dict)  # workload -> why it could not be searched

    @property
    def out_of_budget(self) -> bool:
        return any(t.outcome == "budget" for t in self.trials)


def size_to_slo(data: dict, workloads: list[str], budget_s: float = DEFAULT_BUDGET_S,
                max_replicas: int = DEFAULT_MAX_REPLICAS, max_simulations: int = DEFAULT_MAX_SIMULATIONS,
                progress: Progress | None = None, catalog=None) -> Sizing:
    """Search every on-screen chip for each of ``workloads`` within ``budget_s`` seconds
    of wall time (module docstring).

    Raises:
        UserError: the scenario cannot become a plan."""
    spec = plan_spec(data, max_replicas, max_simulations, budget_s, catalog)
    started, done, budget = time.monotonic(), [0], [max_simulations]
    trials, errors = [], {}
    for i, name in enumerate(workloads, 1):
        deadline = started + budget_s * i / len(workloads)
        make = bounded_search(deadline, progress, started, done)
        try:
            _, found, _ = search_layouts(spec, name, spec.demand[name], budget, deadline, make, pool_fields)
        except UserError as err:  # e.g. the workload has no hardware to plan
            errors[name] = str(err)
            continue
        trials += found
    return Sizing(trials, budget_s, time.monotonic() - started, done[0], max_replicas, list(workloads), spec, errors)


# --- the answer -------------------------------------------------------------------------

def _usd_h(x: float) -> str:
    return f"${x:,.2f}/h" if x < 100 else f"${x:,.0f}/h"


def _why_no_pass(chip_trials: list[LayoutTrial], cap: int) -> str:
    """Why a chip has no passing layout: the SLO missed at the cap, the model not fitting,
    or the budget (in that order of what was learnt)."""
    missed = [t for t in chip_trials if t.outcome == "slo_missed"]
    held = [t for t in chip_trials if t.outcome == "cannot_hold"]
    untried = sum(t.outcome == "budget" for t in chip_trials)
    if missed:
        why = (f"SLO missed even at the replica cap ({cap} replicas) in "
               f"{'every layout' if len(missed) + len(held) == len(chip_trials) else f'{len(missed)} layout(s)'} tried "
               f"({', '.join(t.layout for t in missed)})")
    elif held and not untried:
        why = f"cannot hold the model in any layout tried: {held[0].why}"
    else:
        why = "not sized: the time budget ran out before a layout of this chip met the SLO"
    return why + (f"; {untried} layout(s) not tried: time budget spent" if untried and (missed or held) else "")


def chip_table(sizing: Sizing, workload: str) -> pd.DataFrame:
    """One row per on-screen chip for ``workload``: the cheapest passing layout
    (``layout``, ``replicas``, ``accelerators``, ``cost_usd_per_hour`` at full load),
    ``layouts_tried`` (simulated or ruled out) and ``verdict``: "winner", or why it lost
    (its cost and how much more than the winner, the SLO missed at the replica cap, the
    model not fitting, the time budget)."""
    trials = [t for t in sizing.trials if t.workload == workload]
    best: dict[str, LayoutTrial | None] = {}
    for t in trials:
        current = best.get(t.accelerator)
        if t.outcome == "meets" and (current is None or t.cost_usd_per_hour < current.cost_usd_per_hour):
            best[t.accelerator] = t
        else:
            best.setdefault(t.accelerator, None)
    passing = {a: t for a, t in best.items() if t is not None}
    winner = min(passing, key=lambda a: passing[a].cost_usd_per_hour) if passing else None
    rows = []
    for acc, t in best.items():
        chip_trials = [x for x in trials if x.accelerator == acc]
        tried = sum(x.outcome != "budget" for x in chip_trials)
        if t is None:
            rows.append({"chip": acc, "layout": "—", "replicas": None, "accelerators": None,
                         "cost_usd_per_hour": math.nan, "layouts_tried": tried,
                         "verdict": _why_no_pass(chip_trials, sizing.max_replicas)})
            continue
        if acc == winner:
            verdict = "winner: cheapest layout meeting the SLO"
        else:
            extra = t.cost_usd_per_hour / passing[winner].cost_usd_per_hour - 1
            verdict = (f"loses on cost: {_usd_h(t.cost_usd_per_hour)}, {extra:+.0%} over {winner} "
                       f"({_usd_h(passing[winner].cost_usd_per_hour)})")
        untried = sum(x.outcome == "budget" for x in chip_trials)
        if untried:
            verdict += f"; {untried} layout(s) not tried: time budget spent (a cheaper one may exist)"
        rows.append({"chip": acc, "layout": t.layout, "replicas": t.replicas,
                     "accelerators": t.replicas * replica_accelerators(t.tp, 1, t.ep),
                     "cost_usd_per_hour": t.cost_usd_per_hour, "layouts_tried": tried, "verdict": verdict})
    return pd.DataFrame(rows, columns=["chip", "layout", "replicas", "accelerators", "cost_usd_per_hour",
                                       "layouts_tried", "verdict"])


def winners(sizing: Sizing) -> dict[str, LayoutTrial]:
    """Workload -> the cheapest trial that meets its SLO (workloads with none are left out)."""
    out = {}
    for t in sizing.trials:
        if t.outcome == "meets" and (t.workload not in out or t.cost_usd_per_hour < out[t.workload].cost_usd_per_hour):
            out[t.workload] = t
    return out


def trials_table(sizing: Sizing) -> pd.DataFrame:
    """Every trial as a table (workload, chip, layout, replicas, $/hour, outcome, why)."""
    return pd.DataFrame([{"workload": t.workload, "chip": t.accelerator, "layout": t.layout, "replicas": t.replicas,
                          "cost_usd_per_hour": t.cost_usd_per_hour, "outcome": t.outcome, "why": t.why}
                         for t in sizing.trials])


def sized_pools(sizing: Sizing) -> list[dict]:
    """One pool per workload with a winner: the winner's chip, replicas and layout, and
    the on-screen pool's other fields (``max_batch``, price) on that chip."""
    pools = []
    for name, t in winners(sizing).items():
        fields = {k: v for k, v in pool_fields(sizing.spec, name, t.accelerator).items() if k in LAYOUT_FIELDS}
        fields.update(tp=t.tp, precision=t.precision)
        if t.ep > 1:
            fields["ep"] = t.ep
        else:
            fields.pop("ep", None)
        pools.append({"name": name, "accelerator": t.accelerator, "serves": [name], "replicas": t.replicas, **fields})
    return pools


def sized_fleets(fleets: list[dict], sizing: Sizing, target: str | None) -> list[dict]:
    """``fleets`` with the winners applied: to the fleet named ``target`` (its pools
    serving a sized workload replaced by the winners' pools, the others kept), or, when
    ``target`` is None, as a new fleet (:data:`SIZED_FLEET`, made unique) holding the
    winners' pools plus the first fleet's pools for workloads without a winner. Other
    fleets are untouched."""
    fleets = copy.deepcopy(fleets)
    sized = winners(sizing)
    new = sized_pools(sizing)
    if target is None:
        names = {f["name"] for f in fleets}
        name = SIZED_FLEET if SIZED_FLEET not in names else next(
            f"{SIZED_FLEET}-{i}" for i in range(2, len(names) + 3) if f"{SIZED_FLEET}-{i}" not in names)
        base = copy.deepcopy(fleets[0])
        base.update(name=name, pools=[])
        fleets.append(base)
        target, source = name, fleets[0]
    else:
        source = next(f for f in fleets if f["name"] == target)
    fleet = next(f for f in fleets if f["name"] == target)
    kept = []
    for pool in copy.deepcopy(source["pools"]):  # a pool keeps the workloads without a winner
        pool["serves"] = [s for s in pool["serves"] if s.split(":")[0] not in sized]
        if pool["serves"]:
            kept.append(pool)
    taken = {p["name"] for p in kept}
    for pool in new:
        while pool["name"] in taken:
            pool["name"] += "-sized"
        taken.add(pool["name"])
    fleet["pools"] = kept + new
    return fleets
