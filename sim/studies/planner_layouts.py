"""The planner's layout search (``dcsim plan``, issue 28): per workload and candidate chip,
which (TP, EP, precision) needs the cheapest pool that meets the SLO.

For a token workload (its kind's ``per_token``), each candidate chip's layouts are: TP in
the powers of two up to a node's accelerators that the model allows
(:func:`sim.models.parallelism.allowed_tp`), for a MoE model also EP in
{1} ∪ :func:`~sim.models.parallelism.allowed_ep` (powers of two, at most a node), and the
precisions the candidate lists (``precisions:``, default its one ``precision``) that the
chip has a peak for. The candidate's own layout is tried first. For each layout the
replica search of :class:`sim.studies.planner.WorkloadSearch` finds the fewest replicas
that meet the SLO; a layout is skipped unsimulated when the cost of its lower bound
(:meth:`WorkloadSearch.lower_bound`: fewer replicas cannot keep up at best-case
performance) is already no cheaper than the chip's best so far, and once the search's
time budget (``search.time_budget_s``) or simulation budget is spent. Other workloads
(images, video, ...) keep their candidate layout.

Each trial is kept (:class:`LayoutTrial`) so the report can say per chip which layout won
and why every other one, and every other chip, lost.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from fleets.catalog_io import load_catalog
from sim.errors import UserError
from sim.models.parallelism import allowed_ep, allowed_tp
from sim.workloads import kind_of


@dataclass(frozen=True)
class LayoutTrial:
    """One (chip, layout) tried for one workload. ``replicas``: fewest meeting the SLO
    (None if none within the cap or not simulated); ``cost_usd_per_hour``: full-load cost
    of those replicas (NaN otherwise); ``outcome``: ``meets`` | ``slo_missed`` |
    ``cannot_hold`` | ``pruned`` | ``budget``; ``why``: the reason in words."""

    workload: str
    accelerator: str
    tp: int
    ep: int
    precision: str
    replicas: int | None
    cost_usd_per_hour: float
    outcome: str
    why: str

    @property
    def layout(self) -> str:
        return f"TP{self.tp}" + (f" EP{self.ep}" if self.ep > 1 else "") + f" {self.precision}"


def layouts(spec, name: str, workload: dict, accelerator: str, base: dict) -> list[dict]:
    """The (tp, ep, precision) field sets to try for ``workload`` on ``accelerator``, the
    candidate's own (``base``: its pool fields for this workload) first (see the module
    docstring); only the candidate's for a workload that is not per-token."""
    own = {"tp": int(base.get("tp", 1)), "ep": int(base.get("ep", 1)), "precision": base.get("precision", "fp8")}
    if not kind_of(workload.get("kind", "")).per_token:
        return [own]
    catalog = load_catalog()
    try:
        acc, model = catalog.accelerator(accelerator), catalog.model(workload["model"])
    except UserError:
        return [own]
    cand = next(c for c in spec.candidates if c.accelerator == accelerator)
    precisions = [p for p in (cand.precisions or [own["precision"]]) if p in acc.precisions]
    node = acc.accelerators_per_node
    out = [own]
    for precision in precisions:
        for tp in (t for t in allowed_tp(model, acc) if t <= node and t & (t - 1) == 0):
            for ep in [1] + [e for e in allowed_ep(tp, model, acc) if e <= node and e & (e - 1) == 0]:
                option = {"tp": tp, "ep": ep, "precision": precision}
                if option not in out:
                    out.append(option)
    return out


def with_layout(spec, name: str, accelerator: str, layout: dict):
    """``spec`` with ``layout`` (tp, ep, precision) set in the candidate's ``layouts[name]``
    (an ``ep`` of 1 is left out so dense models stay valid)."""
    fields = {k: v for k, v in layout.items() if not (k == "ep" and v == 1)}
    candidates = []
    for c in spec.candidates:
        if c.accelerator == accelerator:
            merged = {k: v for k, v in c.layouts.get(name, {}).items() if k not in ("tp", "ep", "precision")}
            c = c.model_copy(update={"layouts": {**c.layouts, name: {**merged, **fields}}})
        candidates.append(c)
    return spec.model_copy(update={"candidates": candidates})


def search_layouts(spec, name: str, workload: dict, budget: list[int], deadline: float, make_search, pool_fields):
    """(spec with each chip's cheapest passing layout for ``name``, every trial, the
    searches of the chosen layouts by chip). A chip with no passing layout keeps its
    candidate layout. ``deadline`` is a :func:`time.monotonic` instant; ``make_search``
    is :class:`sim.studies.planner.WorkloadSearch` and ``pool_fields``
    :func:`sim.studies.planner.pool_fields` (passed in: the planner imports this module)."""
    trials: list[LayoutTrial] = []
    chosen: dict[str, tuple] = {}
    for cand in spec.candidates:
        acc = cand.accelerator
        for layout in layouts(spec, name, workload, acc, pool_fields(spec, name, acc)):
            trial_spec = with_layout(spec, name, acc, layout)
            t = dict(workload=name, accelerator=acc, tp=layout["tp"], ep=layout["ep"], precision=layout["precision"])
            search = make_search(trial_spec, name, workload, budget)
            if acc not in search.types:
                trials.append(LayoutTrial(**t, replicas=None, cost_usd_per_hour=math.nan, outcome="cannot_hold",
                                          why=search.dropped.get(acc, "does not fit")))
                continue
            best = chosen.get(acc, (math.inf, None, None))[0]
            floor = search.cost(acc, search.lower_bound(acc))
            if floor >= best:
                trials.append(LayoutTrial(**t, replicas=None, cost_usd_per_hour=math.nan, outcome="pruned",
                                          why=f"lower bound {search.lower_bound(acc)} replicas already cost "
                                              f"${floor:,.2f}/h ≥ ${best:,.2f}/h"))
                continue
            if time.monotonic() > deadline or budget[0] <= 0:
                trials.append(LayoutTrial(**t, replicas=None, cost_usd_per_hour=math.nan, outcome="budget",
                                          why="not tried: search time or simulation budget spent"))
                continue
            try:
                n = search.single(acc)
            except UserError:  # simulation budget exhausted mid-search
                trials.append(LayoutTrial(**t, replicas=None, cost_usd_per_hour=math.nan, outcome="budget",
                                          why="simulation budget spent during its search"))
                continue
            if n is None:
                cap = spec.search.max_replicas_per_type
                trials.append(LayoutTrial(**t, replicas=None, cost_usd_per_hour=math.nan, outcome="slo_missed",
                                          why=f"SLO missed even at {cap} replicas"))
                continue
            cost = search.cost(acc, n)
            trials.append(LayoutTrial(**t, replicas=n, cost_usd_per_hour=cost, outcome="meets",
                                      why=f"meets the SLO with {n} replicas"))
            if cost < best:
                chosen[acc] = (cost, layout, search)
    for acc, (_, layout, _) in chosen.items():
        spec = with_layout(spec, name, acc, layout)
    return spec, trials, {acc: s for acc, (_, _, s) in chosen.items()}
