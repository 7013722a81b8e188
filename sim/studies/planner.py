"""``dcsim plan``: the cheapest fleet whose simulated SLO attainment meets every target.

Method (see docs/sweeps-and-planning.md, "Capacity planning", for its limits):

1. Each workload gets its own pools, one per candidate accelerator type it uses, so
   workloads do not interact and are planned one at a time.
2. Cost of a pool of n replicas: its full-load hourly cost (capital recovery of IT and
   facility capex, energy at full power × PUE, opex), from
   :func:`sim.models.economics.pool_costs` at busy fraction 1, with node-level costs
   charged per accelerator slot (the pool's nodes are shared with the fleet's other
   pools of its type). It is known before any simulation, so candidates can be ranked.
3. Per type, an analytic starting point ``ceil(rate / capacity)`` (the roofline
   estimate: optimistic per replica, but not a bound on the simulated minimum; the
   report prints the true lower bound ``ceil(rate × fewest replica-seconds per request)``
   beside it, and counts below it are rejected unsimulated: they are overloaded at the
   mean rate even if a short run passes) (see :mod:`sim.studies.planner_capacity`),
   then simulation: if the start meets the SLO, bisect
   down to the fewest replicas that still do; otherwise double until one does, then
   bisect. This is the cheapest single-type pool per type.
4. Mixes: every combination of replica counts (two or more types, each at most its
   single-type answer) cheaper than the best single type, whose summed analytic
   capacity covers the rate, is simulated in increasing cost order; the first that
   meets the SLO wins. A combination is skipped when another that has at least as many
   replicas of every type already failed (attainment assumed monotone in replicas).
5. The fleet: every combination of the workloads' passing options (cheapest mix, each
   passing single type) is costed as one fleet with its pools packed into shared nodes
   and racks (``fleets/packing.py``); the cheapest whose facility power (provisioned IT
   × PUE) fits ``economics.facility_power_limit_mw`` (when set) is chosen.
6. The chosen fleet (all workloads together) is simulated again with ``verify_seed``.

A workload listed under ``split:`` is also planned as a split deployment, prefill and
decode on pools of their own: per (prefill, decode) accelerator pair, each side's layout
and the replicas of each side, so the prefill:decode ratio
(:mod:`sim.studies.planner_split_layouts` over :mod:`sim.studies.planner_split`); its
cheapest passing split joins its options beside the co-located ones in step 5.

A growth curve (``growth:``) plans every quarter with the rates scaled. A horizon
(``horizon_weeks: N``) plans for the demand N weeks ahead: every workload whose arrival
is ``kind: fitted`` (daily and weekly profile with growth, :mod:`traffic.demand_fit`) is
simulated from its model time ``start_s`` + N weeks, i.e. at the end of the horizon,
with the growth, hour of day and weekday there; other arrivals are planned as given.
"""

from __future__ import annotations

import copy
import itertools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Callable, Literal

import pandas as pd
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from sim.errors import ScenarioError, UserError
from sim.models.parallelism import replica_accelerators
from sim.studies.planner_capacity import replica_capacity_rps, replica_seconds_floor
from sim.studies.planner_split import SplitSearch, split_key
from sim.results.outputs import check_name
from sim.results.planner_csv import fleet_workload_rows, planner_table
from sim.studies.headroom import headroom_multiplier, meets_slos, scale_arrival
from sim.overrides import override
from sim.scenario import Economics, Scenario, format_validation_error, parse_scenario
from sim.workloads.base import MAX_SPAN_S
from traffic.arrivals import ARRIVAL_ADAPTER
from traffic.demand_fit import WEEK_S

Counts = dict[str, int]  # accelerator type -> replicas


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Candidate(_Strict):
    """An accelerator type the planner may buy; pool fields (tp, precision, max_batch,
    ...) as defaults for every workload, ``layouts`` per workload name (pool fields,
    checked as a scenario's pools are)."""

    accelerator: str
    price_usd: float | None = Field(None, ge=0, le=1e9, description="override the catalog price per accelerator")
    tp: int = Field(1, ge=1, le=4096)
    precision: Literal["bf16", "fp8", "fp4"] = "fp8"
    precisions: list[Literal["bf16", "fp8", "fp4"]] | None = Field(
        None, max_length=3, description="precisions the layout search may use (default: just `precision`)")
    layouts: dict[str, dict] = Field(default_factory=dict, description="per-workload pool fields")


MAX_RATE_SCALE = 1e6


def _check_rate_scale(value: float | dict[str, float]) -> float | dict[str, float]:
    factors = value.items() if isinstance(value, dict) else [("", value)]
    for name, factor in factors:
        if not 0 < factor <= MAX_RATE_SCALE:
            of = f" of {name} ({factor:g})" if name else ""
            raise ValueError(f"the rate factor{of} must be in (0, {MAX_RATE_SCALE:g}]")
    return value


class Quarter(_Strict):
    """One step of a growth curve: its label (part of the file name
    ``scenario-<quarter>.yaml``, so a safe name) and the rate factor(s) over today's demand."""

    quarter: Annotated[str, AfterValidator(lambda v: check_name(v, "quarter"))]
    rate_scale: Annotated[float | dict[str, float], AfterValidator(_check_rate_scale)] = Field(
        1.0, description="one factor, or one per workload, in (0, 1e6]")


class Search(_Strict):
    max_replicas_per_type: int = Field(64, ge=1, le=10_000)
    max_simulations: int = Field(400, ge=1, le=100_000)
    mixes: bool = Field(True, description="consider heterogeneous mixes, not only single types")
    seeds: int = Field(1, ge=1, le=100, description="a candidate must meet the SLOs with seeds seed .. seed+n-1")
    layouts: bool = Field(True, description="search TP (and EP, precision) per chip, not only replicas "
                                            "(sim/studies/planner_layouts.py)")
    time_budget_s: float = Field(900.0, gt=0, le=86_400, description="wall time after which no further layout "
                                                                        "is tried (the replica search of one runs on)")


class SplitSides(_Strict):
    """Candidate accelerators of each side of a split deployment (default: every candidate)."""

    prefill: list[str] | None = None
    decode: list[str] | None = None


class PlanSpec(_Strict):
    name: str = "plan"
    description: str = ""
    seed: int = Field(0, ge=0, lt=2**63 - 1000, description="the search's seeds are seed .. seed + search.seeds - 1")
    verify_seed: int | None = Field(None, ge=0, lt=2**63, description="seed of the check run; default seed + 1")
    duration_s: float = Field(gt=0, le=MAX_SPAN_S)
    warmup_s: float = Field(0.0, ge=0, le=MAX_SPAN_S)
    drain_s: float = Field(300.0, ge=0, le=MAX_SPAN_S)
    router: Literal["round_robin", "least_outstanding", "join_shortest_queue", "central_queue"] = "least_outstanding"
    economics: Economics = Economics()
    demand: dict[str, dict] = Field(min_length=1, max_length=100, description="workloads as in a scenario")
    growth: list[Quarter] | None = Field(None, max_length=400)
    horizon_weeks: float | None = Field(
        None, ge=0, le=520, description="plan for fitted arrivals N weeks ahead (the end of the horizon)"
    )
    candidates: list[Candidate] = Field(min_length=1, max_length=100)
    split: dict[str, SplitSides] = Field(
        default_factory=dict, description="autoregressive workloads to plan also as split prefill/decode deployments")
    search: Search = Search()
    headroom: bool = Field(True, description="find the chosen fleet's load headroom by re-simulation")


# --- loading ------------------------------------------------------------------------

def load_plan(path: str | Path) -> PlanSpec:
    """Read and validate a plan file (every workload and candidate checked up front).

    Raises:
        UserError: naming the file, the field path and the bad value."""
    from sim.loader import check_file_kind, load_yaml, resolve_paths

    path = Path(path)
    data = load_yaml(path, "plan").data  # strict YAML with limits (issue 11)
    check_file_kind(data, str(path), "plan", {f.alias or n for n, f in PlanSpec.model_fields.items()})
    if not isinstance(data, dict):
        raise UserError(f"{path}: a plan file must be a YAML mapping")
    data = resolve_paths(data, path.parent, ("demand",))  # trace paths resolve from the plan file
    try:
        spec = PlanSpec.model_validate(data)
    except ValidationError as err:
        raise ScenarioError(format_validation_error(err, str(path), data, model=PlanSpec)) from None
    accelerators = [c.accelerator for c in spec.candidates]
    repeated = sorted({a for a in accelerators if accelerators.count(a) > 1})
    if repeated:
        raise UserError(f"{path}: candidates: {repeated} listed twice; one candidate per accelerator type")
    for i, cand in enumerate(spec.candidates):
        sided = {f"{w}:{side}" for w in spec.split for side in ("prefill", "decode")}
        unknown = sorted(set(cand.layouts) - set(spec.demand) - sided)
        if unknown:
            raise UserError(f"{path}: candidates.{i}.layouts: {unknown} are not workloads of the demand "
                            f"nor sides of a split workload; allowed: {sorted(set(spec.demand) | sided)}")
        scenario_data(spec, spec.demand, {name: {cand.accelerator: 1} for name in spec.demand}, spec.seed, str(path))
    _check_split(spec, path)
    quarters = [q.quarter for q in spec.growth or []]
    repeated = sorted({q for q in quarters if quarters.count(q) > 1})
    if repeated:
        raise UserError(f"{path}: growth: quarter(s) {repeated} appear twice; each quarter is planned and written once")
    for q in spec.growth or []:
        if isinstance(q.rate_scale, dict) and set(q.rate_scale) - set(spec.demand):
            raise UserError(f"{path}: growth {q.quarter}: rate_scale names unknown workloads "
                            f"{sorted(set(q.rate_scale) - set(spec.demand))}; workloads: {sorted(spec.demand)}")
    return spec


def _check_split(spec: PlanSpec, path: Path) -> None:
    """``split:`` names workloads of the demand that can be split, and candidates."""
    from sim.workloads import kind_of

    known = [c.accelerator for c in spec.candidates]
    for name, sides in spec.split.items():
        kind = spec.demand.get(name, {}).get("kind")
        if name not in spec.demand or not kind_of(kind).split_stages:
            raise UserError(f"{path}: split.{name}: not an autoregressive workload of the demand "
                            f"({sorted(spec.demand)}); only those can be split into prefill and decode pools")
        for side in ("prefill", "decode"):
            unknown = [a for a in getattr(sides, side) or [] if a not in known]
            if unknown:
                raise UserError(f"{path}: split.{name}.{side}: {unknown} are not candidates; candidates: {known}")


def pool_fields(spec: PlanSpec, workload: str, accelerator: str, role: str | None = None) -> dict:
    """Pool fields of ``workload`` on ``accelerator``: the candidate's, then its
    ``layouts[workload]``, then (a side of a split deployment) ``layouts["<workload>:<role>"]``."""
    cand = next(c for c in spec.candidates if c.accelerator == accelerator)
    fields = {"tp": cand.tp, "precision": cand.precision}
    if cand.price_usd is not None:
        fields["price_usd"] = cand.price_usd
    fields.update(cand.layouts.get(workload, {}))
    if role is not None:
        fields.update(cand.layouts.get(f"{workload}:{role}", {}))
    return fields


def scenario_data(spec: PlanSpec, demand: dict, plan: dict[str, Counts], seed: int, source: str,
                  fleet: str = "plan", extra_fleets: dict[str, dict[str, Counts]] | None = None,
                  facility_limit: bool = True) -> Scenario:
    """A runnable scenario: ``demand`` workloads on fleet ``plan`` (workload -> counts).
    ``facility_limit=False`` drops ``economics.facility_power_limit_mw`` (the planner
    applies it to whole fleets, not to one workload's pools)."""
    fleets = {fleet: plan, **(extra_fleets or {})}
    economics = spec.economics.model_dump(mode="json", exclude_unset=True)
    if not facility_limit:
        economics["facility_power_limit_mw"] = None
    data = {
        "name": spec.name, "description": spec.description, "seed": seed,
        "duration_s": spec.duration_s, "warmup_s": spec.warmup_s, "drain_s": spec.drain_s,
        "workloads": copy.deepcopy(demand),
        "fleets": [{"name": name, "router": spec.router, "pools": _pools(spec, counts)} for name, counts in fleets.items()],
        "economics": economics,
    }
    return parse_scenario(data, source)


def dense_pool_cost(pool, econ: Economics) -> float:
    """Full-load $/hour of ``pool`` with node-level costs per accelerator slot."""
    from fleets.packing import PoolShare
    from sim.models.economics import pool_costs

    layout = pool.layout
    nodes = layout.accelerators / layout.accelerator.accelerators_per_node
    pool.share = PoolShare(nodes, nodes / layout.nodes_per_rack, 0.0, nodes * layout.accelerator.node_power_w)
    return pool_costs(pool, econ, 1.0)["full_load_cost_usd_per_hour"]


def packed_fleet(spec: PlanSpec, plan: dict[str, Counts]) -> tuple[float, float]:
    """(full-load $/hour, facility MW) of ``plan`` as one fleet, pools packed together."""
    from sim.fleet_plan import resolve_fleet
    from sim.models.economics import pool_costs

    sc = scenario_data(spec, {w: spec.demand[w] for w in plan}, plan, spec.seed, "plan fleet", facility_limit=False)
    pools = resolve_fleet(sc, 0).pools
    cost = sum(pool_costs(p, sc.economics, 1.0)["full_load_cost_usd_per_hour"] for p in pools)
    it_w = sum(p.share.it_power_max_w for p in pools if p.share is not None)
    return cost, it_w * sc.economics.pue / 1e6


def choose_fleet(spec: PlanSpec, plans: list["WorkloadPlan"]) -> tuple[dict[str, Counts], float, float]:
    """The cheapest fleet, packed, from each workload's passing options (its cheapest mix
    and every single type that meets its SLO) whose facility power fits
    ``economics.facility_power_limit_mw``: (plan, full-load $/hour, facility MW).

    Raises:
        UserError: no combination fits the limit (naming the smallest MW found)."""
    options = [_options(p) for p in plans]
    limit = spec.economics.facility_power_limit_mw
    best, smallest = None, math.inf
    for combo in itertools.product(*options):
        plan = {p.name: counts for p, counts in zip(plans, combo)}
        cost, mw = packed_fleet(spec, plan)
        smallest = min(smallest, mw)
        if (limit is None or mw <= limit * (1 + 1e-9)) and (best is None or cost < best[1] - 1e-9):
            best = (plan, cost, mw)
    if best is None:
        raise UserError(f"plan: no fleet meeting every SLO fits economics.facility_power_limit_mw = {limit} MW; "
                        f"the smallest needs {smallest:.3f} MW of facility power. Raise the limit or add "
                        "more power-efficient candidates.")
    return best


def _options(p: "WorkloadPlan") -> list[Counts]:
    out = ([p.mix] if p.mix else []) + [{a: n} for a, n in p.singles.items() if n is not None] + list(p.splits.values())
    unique = []
    for counts in out:
        if counts not in unique:
            unique.append(counts)
    return unique


def _pools(spec: PlanSpec, plan: dict[str, Counts]) -> list[dict]:
    """Pools of ``plan``; a count key ``<side>:<accelerator>`` is a side of a split
    deployment (:mod:`sim.studies.planner_split`)."""
    pools = []
    for w, counts in plan.items():
        for key, n in counts.items():
            role, acc = split_key(key)
            if n > 0:
                name, serves = (f"{w}-{acc}", w) if role is None else (f"{w}-{role}-{acc}", f"{w}:{role}")
                pools.append({"name": name, "accelerator": acc, "serves": [serves], "replicas": n,
                              **pool_fields(spec, w, acc, role)})
    return pools


# --- one workload -------------------------------------------------------------------

class WorkloadSearch:
    """Cheapest pools for one workload at one rate (steps 2-4 of the module docstring)."""

    def __init__(self, spec: PlanSpec, name: str, workload: dict, budget: list[int]) -> None:
        self.spec, self.name, self.workload = spec, name, {name: workload}
        self.budget = budget  # shared [simulations left]
        self.cache: dict[tuple, bool] = {}
        self.costs: dict[tuple[str, int], float] = {}
        self.capacity: dict[str, float] = {}
        self.floor_s: dict[str, float] = {}  # fewest busy replica-seconds per request
        self.pp: dict[str, int] = {}
        self.dropped: dict[str, str] = {}  # candidate -> why it cannot hold this workload
        self.rate = _rate(workload)
        self.types = [c.accelerator for c in spec.candidates if self._feasible(c.accelerator)]

    def _scenario(self, counts: Counts) -> Scenario:
        return scenario_data(self.spec, self.workload, {self.name: counts}, self.spec.seed, f"plan {self.name}",
                             facility_limit=False)

    def _feasible(self, acc: str) -> bool:
        from sim.fleet_plan import resolve_fleet

        try:
            sc = self._scenario({acc: 1})
            pool = resolve_fleet(sc, 0).pools[0]
        except UserError as err:  # e.g. tp 3 does not divide the heads: said in the report, not silently dropped
            self.dropped[acc] = " ".join(str(err).split())
            return False
        if pool.layout is None:
            raise UserError(f"plan: workload '{self.name}' ({sc.workloads[self.name].kind}) has no hardware to plan")
        self.capacity[acc] = replica_capacity_rps(sc.workloads[self.name], pool)
        self.floor_s[acc] = replica_seconds_floor(sc.workloads[self.name], pool)
        self.pp[acc] = pool.config.pp if getattr(pool.config, "pp", None) else 1
        return True

    def cost(self, acc: str, n: int) -> float:
        """Full-load hourly cost of ``n`` replicas of type ``acc`` (0 for n = 0), with
        node-level costs charged per accelerator slot (as if the pool's nodes were
        shared with the fleet's other pools of that type; the fleet is costed packed
        in :func:`choose_fleet`)."""
        from sim.fleet_plan import resolve_fleet

        if n == 0:
            return 0.0
        if (acc, n) not in self.costs:
            sc = self._scenario({acc: n})
            pool = resolve_fleet(sc, 0).pools[0]
            self.costs[acc, n] = dense_pool_cost(pool, sc.economics)
        return self.costs[acc, n]

    def meets(self, counts: Counts) -> bool:
        """Simulate ``counts``: every SLO met and the run stable (cached)."""
        from sim.results.tables import run_scenario

        key = tuple(sorted((a, n) for a, n in counts.items() if n > 0))
        if key not in self.cache and not self.keeps_up(dict(key)):
            self.cache[key] = False  # overloaded at the mean rate whatever a finite run shows
        if key not in self.cache:
            if self.budget[0] <= 0:
                raise UserError(f"plan: search.max_simulations exhausted while planning '{self.name}'; raise it")
            self.budget[0] -= 1
            try:
                scenario = self._scenario(dict(key))
                self.cache[key] = all(
                    meets_slos(run_scenario(override(scenario, [("seed", self.spec.seed + i)], f"plan {self.name}")).summary)
                    for i in range(self.spec.search.seeds)
                )
            except UserError:  # e.g. a rack power budget: not a feasible fleet
                self.cache[key] = False
        return self.cache[key]

    def estimate(self, acc: str) -> int:
        """The roofline estimate ``ceil(rate / capacity)``, where the search starts. Not a
        bound: on a KV-limited pool the capacity's batch counts the mean prompt plus the
        WHOLE mean output per sequence (``kv_tokens // (P + O)``), while the engine's KV
        blocks grow with the tokens generated so far, so the simulated batch, and the
        capacity, can be larger. The search bisects below it whenever it already passes."""
        return max(1, math.ceil(self.rate / self.capacity[acc])) if math.isfinite(self.capacity[acc]) else 1

    def lower_bound(self, acc: str) -> int:
        """``ceil(rate x floor / pp)`` with ``floor`` the fewest busy replica-seconds a
        mean request can cost (:func:`sim.studies.planner_capacity.replica_seconds_floor`):
        fewer replicas, even 100% busy at the best-case performance, cannot keep up with
        the mean rate. A short simulated run can still pass below it (its queue has
        not grown enough to miss the SLO or look unstable by the end), so :meth:`meets`
        rejects such counts without simulating: the search never returns fewer."""
        return max(1, math.ceil(self.rate * self.floor_s[acc] / self.pp.get(acc, 1) - 1e-9))

    def keeps_up(self, counts: Counts) -> bool:
        """Whether ``counts`` can keep up with the mean rate at all: Σ n x pp / floor ≥
        rate (each replica, 100% busy at best-case performance, serves at most pp / floor
        requests/s; a floor of 0, an unknown shape, never limits)."""
        supply = 0.0
        for acc, n in counts.items():
            floor = self.floor_s.get(acc, 0.0)
            if n > 0 and floor <= 0:
                return True
            supply += n * self.pp.get(acc, 1) / floor if n > 0 else 0.0
        return supply >= self.rate * (1 - 1e-9)

    def single(self, acc: str) -> int | None:
        """Fewest replicas of ``acc`` alone that meet the SLO (None above the cap)."""
        cap = self.spec.search.max_replicas_per_type
        start = min(self.estimate(acc), cap)
        if self.meets({acc: start}):
            lo, hi = 0, start
        else:
            lo, hi = start, start
            while not self.meets({acc: hi}):
                if hi >= cap:
                    return None
                lo, hi = hi, min(hi * 2, cap)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if mid > 0 and self.meets({acc: mid}) else (mid, hi)
        return hi

    def best_mix(self, singles: dict[str, int]) -> tuple[Counts, float] | None:
        """Cheapest passing mix of two or more types cheaper than every single type."""
        best_single = min(self.cost(a, n) for a, n in singles.items())
        types = list(singles)
        options = []
        for combo in itertools.product(*(range(singles[a] + 1) for a in types)):
            if sum(1 for n in combo if n) < 2:
                continue
            cost = sum(self.cost(a, n) for a, n in zip(types, combo))
            capacity = sum(n * self.capacity[a] for a, n in zip(types, combo))
            if cost < best_single - 1e-9 and capacity >= self.rate:
                options.append((cost, combo))
        failed: list[tuple] = []
        for cost, combo in sorted(options):
            if any(all(c <= f for c, f in zip(combo, fail)) for fail in failed):
                continue
            counts = dict(zip(types, combo))
            if self.meets(counts):
                return counts, cost
            failed.append(combo)
        return None


def _rate(workload: dict) -> float:
    """Mean arrival rate (requests/s) of a workload's ``arrival`` block: each process's own
    ``mean_rate_per_s`` (traces included, which used to count as 0 and so escaped the
    lower bound and the keeps-up check)."""
    return float(ARRIVAL_ADAPTER.validate_python(workload["arrival"]).mean_rate_per_s)


# --- the whole plan -----------------------------------------------------------------

@dataclass
class WorkloadPlan:
    name: str
    rate_per_s: float
    mix: Counts
    mix_cost_usd_per_hour: float
    singles: dict[str, int | None]
    single_costs: dict[str, float]
    lower_bounds: dict[str, int]  # ceil(rate × fewest replica-seconds per request): no fewer replicas keep up
    per_replica: dict[str, int] = field(default_factory=dict)  # accelerators per replica (tp × pp) per type
    estimates: dict[str, int] = field(default_factory=dict)  # roofline estimate ceil(rate / capacity): search start
    splits: dict[tuple[str, str], Counts] = field(default_factory=dict)  # (prefill, decode) type -> passing split
    split_costs: dict[tuple[str, str], float] = field(default_factory=dict)

    @property
    def prefill_decode_ratio(self) -> tuple[int, int] | None:
        """(prefill, decode) accelerators of the chosen plan when it is split, else None."""
        sides = {"prefill": 0, "decode": 0}
        for key, n in self.mix.items():
            role, _ = split_key(key)
            if role is None:
                return None
            sides[role] += n * self.per_replica.get(key, 1)
        return sides["prefill"], sides["decode"]
    dropped: dict[str, str] = field(default_factory=dict)  # candidates that cannot hold it, and why


@dataclass
class QuarterPlan:
    quarter: str
    workloads: list[WorkloadPlan]
    cost_usd_per_hour: float  # full-load
    single_type: dict[str, float]  # accelerator -> full-load cost of an all-<type> fleet (packed)
    facility_power_mw: float = math.nan  # the chosen fleet's provisioned facility power
    scenario: Scenario | None = None
    planner: pd.DataFrame = field(default_factory=pd.DataFrame)
    verified: pd.DataFrame = field(default_factory=pd.DataFrame)
    layout_trials: list = field(default_factory=list)  # sim.studies.planner_layouts.LayoutTrial
    split_trials: list = field(default_factory=list)  # sim.studies.planner_split_layouts.SplitTrial

    @property
    def plan(self) -> dict[str, Counts]:
        return {w.name: w.mix for w in self.workloads}

    @property
    def cheapest_single(self) -> tuple[str, float] | None:
        return min(self.single_type.items(), key=lambda kv: kv[1]) if self.single_type else None


@dataclass
class PlanResult:
    spec: PlanSpec
    quarters: list[QuarterPlan]
    simulations: int

    @property
    def planner(self) -> pd.DataFrame:
        return pd.concat([q.planner for q in self.quarters], ignore_index=True)


def scaled_demand(spec: PlanSpec, quarter: Quarter | None) -> dict[str, dict]:
    demand = copy.deepcopy(spec.demand)
    if spec.horizon_weeks:
        for wl in demand.values():
            if wl["arrival"].get("kind") == "fitted":
                wl["arrival"]["start_s"] = wl["arrival"].get("start_s", 0.0) + spec.horizon_weeks * WEEK_S
    if quarter is None:
        return demand
    for name, wl in demand.items():
        scale = quarter.rate_scale.get(name, 1.0) if isinstance(quarter.rate_scale, dict) else quarter.rate_scale
        wl["arrival"] = scale_arrival(wl["arrival"], scale)
    return demand


def plan_workload(spec: PlanSpec, name: str, workload: dict, budget: list[int],
                  warm: dict[str, "WorkloadSearch"] | None = None, split=None) -> WorkloadPlan:
    """Cheapest pools for one workload (raises UserError when no type can meet it).
    ``warm``: per chip, a search at the same layout whose single-type results are reused;
    ``split``: the split deployment's layout search already run
    (:class:`sim.studies.planner_split_layouts.SplitLayoutResult`; None: search the
    split's counts at the candidates' layouts)."""
    search = WorkloadSearch(spec, name, workload, budget)
    for acc, done in (warm or {}).items():
        search.cache.update({k: v for k, v in done.cache.items() if len(k) == 1 and k[0][0] == acc})
    if not search.types:
        reasons = "; ".join(f"{acc}: {why}" for acc, why in search.dropped.items())
        raise UserError(f"plan: no candidate accelerator can hold workload '{name}': {reasons}")
    singles = {a: search.single(a) for a in search.types}
    feasible = {a: n for a, n in singles.items() if n is not None}
    splits, split_costs = (split.splits, split.costs) if split is not None else _plan_splits(spec, name, search)
    if not feasible and not splits:
        raise UserError(f"plan: workload '{name}' misses its SLO even with "
                        f"{spec.search.max_replicas_per_type} replicas of every candidate")
    costs = {a: search.cost(a, n) for a, n in feasible.items()}
    options = [({a: n}, costs[a]) for a, n in feasible.items()]
    if spec.search.mixes and len(feasible) > 1:
        found = search.best_mix(feasible)
        if found is not None:
            options.append(found)
    options += [(splits[pair], split_costs[pair]) for pair in splits]
    mix, cost = min(options, key=lambda option: option[1])
    per_replica = {a: _accelerators_per_replica(spec, name, a) for a in search.types}
    for counts in splits.values():
        per_replica.update({key: _accelerators_per_replica(spec, name, split_key(key)[1], split_key(key)[0])
                            for key in counts})
    return WorkloadPlan(name, search.rate, {a: n for a, n in mix.items() if n}, cost, singles, costs,
                        {a: search.lower_bound(a) for a in search.types}, per_replica,
                        {a: search.estimate(a) for a in search.types}, splits, split_costs,
                        dict(search.dropped))


def _plan_splits(spec: PlanSpec, name: str, search: "WorkloadSearch") -> tuple[dict, dict]:
    """Every passing split deployment of workload ``name`` per (prefill, decode) type
    pair (:class:`sim.studies.planner_split.SplitSearch`), and their full-load $/hour."""
    sides = spec.split.get(name)
    if sides is None:
        return {}, {}
    everyone = [c.accelerator for c in spec.candidates]
    found, costs = {}, {}
    splitter = SplitSearch(search, dense_pool_cost)
    for p_acc in sides.prefill or everyone:
        for d_acc in sides.decode or everyone:
            best = splitter.best(p_acc, d_acc)
            if best is not None:
                found[p_acc, d_acc], costs[p_acc, d_acc] = best
    return found, costs


def _accelerators_per_replica(spec: PlanSpec, workload: str, accelerator: str, role: str | None = None) -> int:
    fields = pool_fields(spec, workload, accelerator, role)
    return replica_accelerators(int(fields.get("tp", 1)), int(fields.get("pp", 1)), int(fields.get("ep", 1)))


def run_plan(spec: PlanSpec, log: Callable[[str], None] | None = None) -> PlanResult:
    """Plan every quarter (or the demand as given), then verify each plan by simulation."""
    from sim.studies.planner_layouts import search_layouts
    from sim.studies.planner_split_layouts import search_split_layouts

    budget = [spec.search.max_simulations]
    quarters = []
    deadline = time.monotonic() + spec.search.time_budget_s
    for quarter in spec.growth or [None]:
        label = quarter.quarter if quarter else f"week{spec.horizon_weeks:g}" if spec.horizon_weeks else "now"
        demand = scaled_demand(spec, quarter)
        spec_q, trials, plans = spec, [], []
        split_trials: list = []
        for name, wl in demand.items():
            warm, split = None, None
            if spec.search.layouts:
                spec_q, found, warm = search_layouts(spec_q, name, wl, budget, deadline, WorkloadSearch, pool_fields)
                trials += found
                if name in spec.split:
                    split = search_split_layouts(spec_q, name, wl, budget, deadline, WorkloadSearch, pool_fields,
                                                 dense_pool_cost)
                    spec_q, split_trials = split.spec, split_trials + split.trials
            plans.append(plan_workload(spec_q, name, wl, budget, warm, split))
        q = _quarter(spec_q, label, demand, plans)
        q.layout_trials, q.split_trials = trials, split_trials
        if log:
            log(f"{label}: planned {len(plans)} workload(s); verifying with seed {_verify_seed(spec)}")
        quarters.append(q)
    return PlanResult(spec, quarters, spec.search.max_simulations - budget[0])


def _verify_seed(spec: PlanSpec) -> int:
    return spec.verify_seed if spec.verify_seed is not None else spec.seed + 1


def _quarter(spec: PlanSpec, label: str, demand: dict, plans: list[WorkloadPlan]) -> QuarterPlan:
    from sim.results.tables import run_scenario

    single_type = {}
    extra = {}
    for cand in spec.candidates:
        acc = cand.accelerator
        if all(p.singles.get(acc) for p in plans):
            extra[f"all-{acc}"] = {p.name: {acc: p.singles[acc]} for p in plans}
            single_type[acc] = packed_fleet(spec, extra[f"all-{acc}"])[0]
    chosen, cost, mw = choose_fleet(spec, plans)
    for p in plans:
        p.mix = {a: n for a, n in chosen[p.name].items() if n}
        if len(p.mix) == 1 and p.singles.get(next(iter(p.mix))) == next(iter(p.mix.values())):
            p.mix_cost_usd_per_hour = p.single_costs[next(iter(p.mix))]
        for pair, counts in p.splits.items():
            if p.mix == counts:
                p.mix_cost_usd_per_hour = p.split_costs[pair]
    q = QuarterPlan(label, plans, cost, single_type, facility_power_mw=mw)
    q.scenario = scenario_data(spec, demand, q.plan, _verify_seed(spec), f"plan {label}", extra_fleets=extra)
    results = run_scenario(q.scenario)
    q.verified = results.summary
    rows = fleet_workload_rows(results)
    rows.insert(0, "quarter", label)
    marks = {}
    if spec.headroom:
        marks = {(label, "plan"): headroom_multiplier(q.scenario, "plan")}
    q.planner = planner_table(rows, ["quarter", "fleet"], marks)
    full_load = {"plan": q.cost_usd_per_hour, **{f"all-{a}": c for a, c in single_type.items()}}
    q.planner.insert(2, "full_load_cost_usd_per_hour", q.planner["fleet"].map(full_load))
    q.planner.insert(3, "meets_slos", [meets_slos(results.summary[results.summary["fleet"] == f]) for f in q.planner["fleet"]])
    return q


def write_plan(result: PlanResult, out_dir: str | Path) -> Path:
    """``plan.csv`` and one runnable ``scenario-<quarter>.yaml`` per quarter, atomically."""
    from sim.results.export import write_csv, write_file_atomic
    from sim.scenario import scenario_to_yaml

    from sim.results.export import claim_dir
    from sim.results.outputs import inside

    out_dir = Path(out_dir)
    claim_dir(out_dir, "plan")
    write_file_atomic(inside(out_dir, "plan.csv"), lambda p: write_csv(result.planner, p))
    for q in result.quarters:
        text = scenario_to_yaml(q.scenario)
        write_file_atomic(inside(out_dir, f"scenario-{q.quarter}.yaml"), lambda p, t=text: p.write_text(t, encoding="utf-8"))
    return out_dir
