"""The layout of each side searched with the prefill:decode split (``dcsim plan``, issues
25 and 28): per (prefill chip, decode chip) pair of a workload's ``split:``, which
prefill layout, decode layout and counts make the cheapest split that meets the SLOs.

Per chip pair, every (prefill layout, decode layout) of :func:`sim.studies.planner_layouts.layouts`
(TP in the powers of two up to a node that the model allows, EP for a MoE model, the
candidate's precisions; its own layout first) gets the exact count search of
:func:`sim.studies.planner_split.cheapest_counts` with the chip pair's best cost so far
as its ceiling. Pruned without a full search, each with its reason in the trial:

- ``cannot_hold``: a side's layout does not fit the model (the fleet does not resolve);
- ``side_alone``: analytic, no simulation: the prefill of the mean prompt alone on an
  idle prefill replica exceeds the TTFT SLO, or one sequence's decode step on an idle
  decode replica (per emitted token) exceeds the TPOT SLO: requests near the mean then
  miss whatever the counts;
- ``pruned``: one replica of each side already costs no less than the chip pair's best;
- ``cannot_beat``: inside the count search, one simulation at the most replicas the
  ceiling affords on each side misses, so no affordable ratio of this layout pair passes;
  and every ratio with fewer prefill (decode) replicas than the fewest that pass with
  all the affordable decode (prefill) replicas is skipped (that side alone misses);
- ``budget``: ``search.time_budget_s`` or ``search.max_simulations`` spent.

The chosen layouts of the cheapest split are written into the plan's candidate
``layouts["<workload>:prefill"]`` / ``["<workload>:decode"]`` so its pools are built at them.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from sim.errors import UserError
from sim.models.parallelism import replica_accelerators
from sim.studies.planner_layouts import layouts, with_layout
from sim.studies.planner_split import SIDES, SplitSearch, role_key


@dataclass(frozen=True)
class SplitTrial:
    """One (prefill chip and layout, decode chip and layout) tried for one workload.
    ``counts``: the cheapest passing {side key: replicas} (None otherwise);
    ``outcome``: ``meets`` | ``slo_missed`` | ``cannot_hold`` | ``side_alone`` |
    ``pruned`` | ``cannot_beat`` | ``budget``; ``why``: the reason in words."""

    workload: str
    prefill: str
    prefill_layout: str
    decode: str
    decode_layout: str
    counts: dict | None
    cost_usd_per_hour: float
    outcome: str
    why: str
    per_replica: tuple[int, int] = (1, 1)  # accelerators per prefill, per decode replica

    @property
    def gpus(self) -> tuple[int, int] | None:
        """(prefill, decode) accelerators of the passing counts, else None."""
        if not self.counts:
            return None
        return (self.counts[role_key("prefill", self.prefill)] * self.per_replica[0],
                self.counts[role_key("decode", self.decode)] * self.per_replica[1])

    @property
    def pair(self) -> tuple[str, str]:
        return self.prefill, self.decode

    def label(self, per_replica: dict | None = None) -> str:
        """"h100-sxm prefill TP2 fp8 ×6 : h200 decode TP4 fp8 ×2" (counts when it passed)."""
        n = self.counts or {}
        p = n.get(role_key("prefill", self.prefill))
        d = n.get(role_key("decode", self.decode))
        return (f"{self.prefill} prefill {self.prefill_layout}" + (f" ×{p}" if p else "")
                + f" : {self.decode} decode {self.decode_layout}" + (f" ×{d}" if d else ""))


def _per_replica(fields: dict) -> int:
    return replica_accelerators(int(fields.get("tp", 1)), int(fields.get("pp", 1)), int(fields.get("ep", 1)))


def layout_name(layout: dict) -> str:
    return f"TP{layout['tp']}" + (f" EP{layout['ep']}" if layout["ep"] > 1 else "") + f" {layout['precision']}"


@dataclass
class SplitLayoutResult:
    """The search's answer for one workload: the spec with the winner's side layouts, the
    cheapest split per chip pair ({(prefill, decode): counts} and $/hour), every trial."""

    spec: object
    splits: dict
    costs: dict
    trials: list


def search_split_layouts(spec, name: str, workload: dict, budget: list[int], deadline: float, make_search,
                         pool_fields, pool_cost) -> SplitLayoutResult:
    """Search every chip pair of ``spec.split[name]`` (module docstring). ``make_search``:
    :class:`sim.studies.planner.WorkloadSearch`; ``pool_fields``, ``pool_cost``: the
    planner's (passed in: the planner imports this module)."""
    sides = spec.split[name]
    everyone = [c.accelerator for c in spec.candidates]
    trials, best = [], {}
    for p_acc in sides.prefill or everyone:
        for d_acc in sides.decode or everyone:
            found = _search_pair(spec, name, workload, budget, deadline, make_search, pool_fields, pool_cost,
                                 p_acc, d_acc, trials)
            if found is not None:
                best[p_acc, d_acc] = found
    if not best:
        return SplitLayoutResult(spec, {}, {}, trials)
    pair = min(best, key=lambda k: best[k][1])
    counts, cost, p_layout, d_layout = best[pair]
    spec = with_layout(spec, f"{name}:prefill", pair[0], p_layout)
    spec = with_layout(spec, f"{name}:decode", pair[1], d_layout)
    return SplitLayoutResult(spec, {pair: counts}, {pair: cost}, trials)


def _search_pair(spec, name, workload, budget, deadline, make_search, pool_fields, pool_cost, p_acc, d_acc, trials):
    """The cheapest (counts, $/hour, prefill layout, decode layout) of one chip pair (None
    if no layout pair passes); appends a :class:`SplitTrial` per layout pair."""
    p_options = layouts(spec, name, workload, p_acc, pool_fields(spec, name, p_acc, "prefill"))
    d_options = layouts(spec, name, workload, d_acc, pool_fields(spec, name, d_acc, "decode"))
    memo: dict = {}
    best = None
    for p_layout in p_options:
        for d_layout in d_options:
            trial_spec = with_layout(with_layout(spec, f"{name}:prefill", p_acc, p_layout),
                                     f"{name}:decode", d_acc, d_layout)
            t = dict(workload=name, prefill=p_acc, prefill_layout=layout_name(p_layout), decode=d_acc,
                     decode_layout=layout_name(d_layout),
                     per_replica=tuple(_per_replica(pool_fields(trial_spec, name, a, r))
                                       for r, a in zip(SIDES, (p_acc, d_acc))))
            splitter = SplitSearch(make_search(trial_spec, name, workload, budget), pool_cost)
            reason = _cannot_run(splitter, p_acc, d_acc, memo, p_layout, d_layout)
            if reason is not None:
                trials.append(SplitTrial(**t, counts=None, cost_usd_per_hour=math.nan, outcome=reason[0],
                                         why=reason[1]))
                continue
            if time.monotonic() > deadline or budget[0] <= 0:
                trials.append(SplitTrial(**t, counts=None, cost_usd_per_hour=math.nan, outcome="budget",
                                         why="not tried: search time or simulation budget spent"))
                continue
            ceiling = math.inf if best is None else best[1]
            floor = splitter.cost(role_key("prefill", p_acc), 1) + splitter.cost(role_key("decode", d_acc), 1)
            if floor >= ceiling - 1e-9:
                trials.append(SplitTrial(**t, counts=None, cost_usd_per_hour=math.nan, outcome="pruned",
                                         why=f"1 : 1 replicas already cost ${floor:,.2f}/h ≥ ${ceiling:,.2f}/h"))
                continue
            why: list[str] = []
            try:
                found = splitter.best(p_acc, d_acc, ceiling, why)
            except UserError:  # simulation budget exhausted mid-search
                trials.append(SplitTrial(**t, counts=None, cost_usd_per_hour=math.nan, outcome="budget",
                                         why="simulation budget spent during its search"))
                continue
            if found is None:
                outcome = "slo_missed" if math.isinf(ceiling) else "cannot_beat"
                trials.append(SplitTrial(**t, counts=None, cost_usd_per_hour=math.nan, outcome=outcome,
                                         why="; ".join(why) or "SLO missed"))
                continue
            counts, cost = found
            trials.append(SplitTrial(**t, counts=counts, cost_usd_per_hour=cost, outcome="meets",
                                     why=f"meets the SLO at {counts[role_key('prefill', p_acc)]} : "
                                         f"{counts[role_key('decode', d_acc)]} replicas"))
            best = (counts, cost, p_layout, d_layout)
    return best


def _cannot_run(splitter: SplitSearch, p_acc: str, d_acc: str, memo: dict, p_layout: dict,
                d_layout: dict) -> tuple[str, str] | None:
    """(outcome, why) when the pair's pools cannot hold the model at these layouts (the
    fleet does not resolve: the message names the pool) or a side misses its SLO on an
    idle replica (module docstring), else None; ``memo`` keeps each side layout's verdict."""
    counts = {role_key("prefill", p_acc): 1, role_key("decode", d_acc): 1}
    for role, acc, layout in (("prefill", p_acc, p_layout), ("decode", d_acc, d_layout)):
        key = (role, acc, layout_name(layout))
        if key not in memo:
            try:
                sc, pool = splitter._pool(counts, role)
            except UserError as err:
                return "cannot_hold", " ".join(str(err).split())
            memo[key] = _side_alone(sc.workloads[splitter.search.name], role, pool)
        if memo[key] is not None:
            return "side_alone", f"{role} {layout_name(layout)}: {memo[key]}"
    return None


def _side_alone(wl, role: str, pool) -> str | None:
    """Why one idle replica of side ``role`` already misses the workload's TTFT (prefill of
    the mean prompt) or TPOT (one sequence's decode step per emitted token at the mean
    prompt's context), or None."""
    from sim.workloads.autoregressive import mean_lengths

    prompt, _ = mean_lengths(wl)
    slo = wl.slo
    if role == "prefill" and slo is not None and slo.ttft_s is not None:
        t = pool.perf.prefill_time_s(max(int(prompt), 1))
        if t > slo.ttft_s:
            return (f"the mean prompt ({prompt:,.0f} tokens) alone takes {t:.2f} s to prefill on an idle replica "
                    f"> TTFT SLO {slo.ttft_s:g} s")
    if role == "decode" and slo is not None and slo.tpot_s is not None:
        spec = pool.spec
        t = pool.perf.decode_time_s(1, prompt) if spec is None else spec.step_time_s(1, prompt) / spec.tokens_per_step
        if t > slo.tpot_s:
            return (f"one sequence alone decodes at {t * 1e3:.0f} ms/token on an idle replica "
                    f"> TPOT SLO {slo.tpot_s * 1e3:g} ms")
    return None
