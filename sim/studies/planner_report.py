"""The text ``dcsim plan`` prints: per quarter, the chosen pools, their cost, every
single-type alternative with its cost, and the check run's verdict for each fleet.

Replica counts are always printed with the accelerators they hold ("6 replicas × tp4
= 24 b200"); tables go through :func:`sim.results.report_text.table`, so columns line up
whatever the number of candidates."""

from __future__ import annotations

import textwrap

from sim.results.report_text import DEFAULT_WIDTH, MISSING, table
from sim.studies.planner import PlanResult, QuarterPlan, WorkloadPlan


def _usd(x: float) -> str:
    if x != x:
        return MISSING
    return f"${x:,.0f}" if abs(x) >= 100 else f"${x:,.2f}"


def replicas(n: int, per_replica: int, accelerator: str) -> str:
    """``n`` replicas of ``per_replica`` accelerators: "6 replicas × tp4 = 24 b200"."""
    noun = "replica" if n == 1 else "replicas"
    if per_replica == 1:
        return f"{n} {noun} = {n} {accelerator}"
    return f"{n} {noun} × tp{per_replica} = {n * per_replica} {accelerator}"


def _counts(w: WorkloadPlan) -> str:
    if w.prefill_decode_ratio is not None:
        p, d = w.prefill_decode_ratio
        return f"{_counts_of(w, w.mix)} (split, prefill:decode GPUs {p}:{d})"
    return " + ".join(replicas(n, w.per_replica.get(a, 1), a) for a, n in w.mix.items() if n) or MISSING


def _power_line(q: QuarterPlan, plan) -> str:
    """Packed layout and power of the chosen fleet, own vs rent."""
    limit = q.scenario.economics.facility_power_limit_mw if q.scenario is not None else None
    rent = plan.get("rent_usd_per_hour")
    nodes, racks = int(plan["nodes"]), int(plan["racks"])
    return (f"  packed: {nodes} node{'' if nodes == 1 else 's'}, {racks} rack{'' if racks == 1 else 's'}, "
            f"{plan['facility_power_max_mw']:.3f} MW facility power"
            + ("" if limit is None else f" (limit {limit} MW)")
            + ("" if rent is None or rent != rent else f"; renting instead: {_usd(rent)}/hour"))


def options_table(q: QuarterPlan) -> str:
    """Per workload and candidate type: the lower bound (no fewer replicas keep up with
    the mean rate even at best-case performance), the roofline estimate (where the
    search starts, not a bound), the simulated single-type minimum and its full-load
    $/hour."""
    rows = []
    for w in q.workloads:
        for acc, bound in w.lower_bounds.items():
            n = w.singles.get(acc)
            per = w.per_replica.get(acc, 1)
            chosen = "chosen" if w.mix == {acc: n} else ""
            estimate = w.estimates.get(acc)
            rows.append([w.name, f"{w.rate_per_s:.3g}", acc, str(bound), MISSING if estimate is None else str(estimate),
                         replicas(n, per, acc) if n is not None else "> search cap",
                         _usd(w.single_costs[acc]) if n is not None else MISSING, chosen])
    for w in q.workloads:  # split deployments: the cheapest (prefill, decode) counts per type pair
        for (p_acc, d_acc), counts in w.splits.items():
            ratio = _ratio(w, counts)
            rows.append([w.name, f"{w.rate_per_s:.3g}", f"split {p_acc} / {d_acc}", MISSING, MISSING,
                         f"{_counts_of(w, counts)} (prefill:decode GPUs {ratio[0]}:{ratio[1]})",
                         _usd(w.split_costs[p_acc, d_acc]), "chosen" if w.mix == counts else ""])
    headers = ["workload", "rate (req/s)", "type", "lower bound", "roofline estimate", "single-type minimum",
               "pool $/hour full load", ""]
    return table(headers, rows, right=[False, True, False, True, True, False, True, False])


def _lost(more: float, winner_cost: float, per: str) -> str:
    """Why an option costing ``more`` $/hour than the chosen one lost. Options are costed
    with node costs per slot; the fleet is chosen packed (shared nodes), so an option a
    little cheaper alone can lose once packed with the other workloads' pools."""
    if abs(more) <= 1e-6:
        return "ties the chosen option's cost (the chosen one is kept)"
    if more < 0:
        return f"{_usd(-more)}/{per} cheaper alone, dearer packed into the fleet"
    return f"lost on cost: +{_usd(more)}/{per} (+{more / winner_cost:.0%})" if winner_cost > 0 else "lost on cost"


def _chip_verdict(acc: str, trials: list, w: WorkloadPlan, winner_cost: float) -> tuple[str, str, str, str, str]:
    """(chip, cheapest passing layout, replicas, $/hour, result) for one chip's trials."""
    passing = [t for t in trials if t.outcome == "meets"]
    if passing:
        best = min(passing, key=lambda t: t.cost_usd_per_hour)
        won = w.mix == {acc: w.singles.get(acc)}
        more = best.cost_usd_per_hour - winner_cost
        result = "winner" if won else _lost(more, winner_cost, "hour")
        return acc, best.layout, str(best.replicas), _usd(best.cost_usd_per_hour), result
    if trials and all(t.outcome == "cannot_hold" for t in trials):
        return acc, MISSING, MISSING, MISSING, f"cannot hold the model: {trials[0].why}"
    missed = [t for t in trials if t.outcome == "slo_missed"]
    why = (f"SLO missed at max replicas in {len(missed)} layout(s) ({', '.join(t.layout for t in missed)})"
           if missed else "no layout searched (budget)")
    untried = [t for t in trials if t.outcome == "budget"]
    if untried:
        why += f"; {len(untried)} layout(s) not tried (budget)"
    return acc, MISSING, MISSING, MISSING, why


def layouts_text(w: WorkloadPlan, trials: list) -> str:
    """Per chip: the cheapest layout (TP, EP, precision) meeting the SLO, its replicas and
    full-load $/hour, and the winner or why the chip lost; then every trial in one line."""
    winner_cost = w.mix_cost_usd_per_hour
    chips = list(dict.fromkeys(t.accelerator for t in trials))
    rows = [_chip_verdict(acc, [t for t in trials if t.accelerator == acc], w, winner_cost) for acc in chips]
    tried = "; ".join(f"{t.accelerator} {t.layout}: {t.why}" for t in trials)
    head = f"{w.name}: layout search per chip (TP, EP, precision; then the fewest replicas meeting the SLO)"
    body = table(["chip", "cheapest layout meeting SLO", "replicas", "$/hour full load", "result"], rows,
                 right=[False, False, True, True, False])
    return "\n".join([head, body, *textwrap.wrap(f"tried: {tried}", DEFAULT_WIDTH - 2, subsequent_indent="  ")])


def _split_verdict(pair: tuple[str, str], trials: list, w: WorkloadPlan) -> list[str]:
    """[prefill / decode chips, cheapest layouts and counts, GPUs, $/hour, result] of one
    chip pair's split trials."""
    passing = [t for t in trials if t.outcome == "meets"]
    if passing:
        best = min(passing, key=lambda t: t.cost_usd_per_hour)
        p, d = best.gpus
        more = best.cost_usd_per_hour - w.mix_cost_usd_per_hour
        won = w.mix == best.counts and abs(more) < 1e-6
        result = "winner" if won else _lost(more, w.mix_cost_usd_per_hour, "h")
        layout = f"{best.prefill_layout} ×{p // best.per_replica[0]} : {best.decode_layout} ×{d // best.per_replica[1]}"
        return [f"{pair[0]} / {pair[1]}", layout, f"{p}:{d}", _usd(best.cost_usd_per_hour), result]
    outcomes = {t.outcome for t in trials}
    if outcomes <= {"cannot_hold"}:
        why = "cannot hold the model (below)"
    elif outcomes <= {"cannot_hold", "side_alone"}:
        why = "a side alone misses the SLO (below)"
    elif "budget" in outcomes and not outcomes & {"slo_missed", "cannot_beat"}:
        why = "not searched: budget spent"
    else:
        why = f"SLO missed up to max replicas in {sum(t.outcome != 'pruned' for t in trials)} layout pair(s)"
    return [f"{pair[0]} / {pair[1]}", MISSING, MISSING, MISSING, why]


def split_text(w: WorkloadPlan, trials: list) -> str:
    """Per (prefill, decode) chip pair: the cheapest split meeting the SLO ("prefill TP2
    fp8 ×6 : decode TP4 fp8 ×2"), its prefill:decode GPUs and full-load $/hour, and the
    winner or why the pair lost; then every layout pair tried and its outcome (what was
    pruned, and why)."""
    pairs = list(dict.fromkeys(t.pair for t in trials))
    rows = [_split_verdict(pair, [t for t in trials if t.pair == pair], w) for pair in pairs]
    head = (f"{w.name}: split search per chip pair (prefill and decode layouts, then the cheapest "
            "prefill:decode replicas meeting the SLO)")
    body = table(["prefill / decode chip", "cheapest passing split p : d", "GPUs p:d",
                  "$/h full load", "result"],
                 rows, right=[False, False, True, True, False])
    lines = [head, body]
    for pair in pairs:
        lines += textwrap.wrap(_tried(pair, [t for t in trials if t.pair == pair]), DEFAULT_WIDTH - 2,
                               subsequent_indent="  ")
    return "\n".join(lines)


def _tried(pair: tuple[str, str], trials: list) -> str:
    """One chip pair's layout pairs in words: each searched one with its outcome, the ones
    pruned on cost (one replica per side already no cheaper than the pair's best) as a list."""
    simulated = [f"{t.label()}: {t.why}" for t in trials if t.outcome != "pruned"]
    pruned = [f"{t.prefill_layout} : {t.decode_layout}" for t in trials if t.outcome == "pruned"]
    text = f"tried {pair[0]} prefill / {pair[1]} decode ({len(trials)} layout pairs): " + "; ".join(simulated)
    if pruned:
        text += (f"; pruned unsimulated, 1 : 1 replicas already no cheaper than the best ({len(pruned)}): "
                 + ", ".join(pruned))
    return text


def _counts_of(w: WorkloadPlan, counts: dict) -> str:
    return " + ".join(f"{key.split(':')[0]} {replicas(n, w.per_replica.get(key, 1), key.split(':')[-1])}"
                      for key, n in counts.items())


def _ratio(w: WorkloadPlan, counts: dict) -> tuple[int, int]:
    gpus = {"prefill": 0, "decode": 0}
    for key, n in counts.items():
        gpus[key.split(":")[0]] += n * w.per_replica.get(key, 1)
    return gpus["prefill"], gpus["decode"]


def fleets_table(q: QuarterPlan) -> str:
    """The chosen fleet and every all-<type> alternative: cost and the check run's verdict."""
    seed = q.scenario.seed if q.scenario is not None else "?"
    rows = []
    for _, r in q.planner.iterrows():
        verdict = "meets every SLO" if bool(r["meets_slos"]) else "FAILED check run"
        rows.append([str(r["fleet"]), _usd(r["full_load_cost_usd_per_hour"]), _usd(r["cost_usd_per_hour"]),
                     _usd(r["capex_usd"]), verdict])
    headers = ["fleet", "$/hour full load", "$/hour as simulated", "capex", f"check run (seed {seed})"]
    return table(headers, rows, right=[False, True, True, True, False])


def quarter_text(q: QuarterPlan) -> str:
    lines = [f"Quarter {q.quarter}"]
    for w in q.workloads:
        lines.append(f"  {w.name}: {_counts(w)}")
        for acc, why in w.dropped.items():
            lines.append(f"    not a candidate for {w.name}: {acc}: {why}")
    lines.append(_indent(options_table(q)))
    for w in q.workloads:
        trials = [t for t in q.layout_trials if t.workload == w.name]
        if trials:
            lines.append(_indent(layouts_text(w, trials)))
        split = [t for t in q.split_trials if t.workload == w.name]
        if split:
            lines.append(_indent(split_text(w, split)))
    table_ = q.planner.set_index("fleet")
    plan = table_.loc["plan"]
    lines.append(
        f"  chosen fleet: capex {_usd(plan['capex_usd'])}, opex {_usd(plan['opex_usd_per_month'])}/month, "
        f"{_usd(plan['cost_usd_per_hour'])}/hour as simulated ({_usd(q.cost_usd_per_hour)}/hour at full load)"
    )
    lines.append(_power_line(q, plan))
    verdict = "meets every SLO" if bool(plan["meets_slos"]) else "MISSES an SLO"
    seed = q.scenario.seed if q.scenario is not None else "?"
    attained = ", ".join(
        f"{r['workload']} {r['slo_attainment']:.1%} (target {r['slo_target']:.0%})"
        for _, r in q.verified[q.verified["fleet"] == "plan"].iterrows()
    )
    lines.append(f"  check run (seed {seed}): {verdict}: {attained}")
    if plan["headroom_load_multiplier"] == plan["headroom_load_multiplier"]:
        lines.append(f"  headroom: load × {plan['headroom_load_multiplier']:.2f} still meets every SLO")
    lines.append(_indent(fleets_table(q)))
    failed = [str(f) for f, ok in zip(q.planner["fleet"], q.planner["meets_slos"]) if not bool(ok)]
    if failed:
        lines.append(f"  FAILED the check run (seed {seed}): {', '.join(failed)}: passed the search seeds only; "
                     "treat as marginal")
    best = q.cheapest_single
    if best is None:
        lines.append("  no single accelerator type can serve every workload")
    else:
        acc, cost = best
        saving = cost - q.cost_usd_per_hour
        if all(w.mix == {acc: w.singles.get(acc)} for w in q.workloads):
            lines.append(f"  the chosen fleet is the cheapest single type, all-{acc}")
        else:
            lines.append(f"  the chosen fleet saves {_usd(saving)}/hour ({saving / cost:.1%}) against the cheapest "
                         f"single type, all-{acc}")
    return "\n".join(lines)


def _indent(text: str) -> str:
    return "\n".join("  " + line if line else line for line in text.splitlines())


def plan_text(result: PlanResult) -> str:
    head = (f"Plan {result.spec.name}: cheapest fleet meeting every SLO ({result.simulations} simulations)\n"
            "lower bound: ceil(rate × fewest busy replica-seconds per request at best-case performance); no fewer "
            "replicas keep up with the mean rate\n"
            "roofline estimate: ceil(rate / analytic per-replica capacity), where the search starts; "
            "the simulated minimum can be lower or higher"
            + (f"\nlayout search: TP/EP/precision per chip within a time budget of {result.spec.search.time_budget_s:g} s "
               "(search.time_budget_s) and the simulation budget; layouts left untried are listed as such"
               if result.spec.search.layouts else ""))
    return "\n\n".join([head, *(quarter_text(q) for q in result.quarters)]) + "\n"
