"""The text ``dcsim plan`` prints: per quarter, the chosen pools, their cost, and the
cheapest single-type fleet for comparison."""

from __future__ import annotations

from sim.studies.planner import PlanResult, QuarterPlan


def _usd(x: float) -> str:
    return f"${x:,.0f}" if abs(x) >= 100 else f"${x:,.2f}"


def _counts(counts: dict[str, int]) -> str:
    return " + ".join(f"{n}× {a}" for a, n in counts.items() if n) or "—"


def _power_line(q: QuarterPlan, plan) -> str:
    """Packed layout and power of the chosen fleet, own vs rent."""
    limit = q.scenario.economics.facility_power_limit_mw if q.scenario is not None else None
    rent = plan.get("rent_usd_per_hour")
    nodes, racks = int(plan["nodes"]), int(plan["racks"])
    return (f"  packed: {nodes} node{'' if nodes == 1 else 's'}, {racks} rack{'' if racks == 1 else 's'}, "
            f"{plan['facility_power_max_mw']:.3f} MW facility power"
            + ("" if limit is None else f" (limit {limit} MW)")
            + ("" if rent is None or rent != rent else f"; renting instead: {_usd(rent)}/hour"))


def quarter_text(q: QuarterPlan) -> str:
    lines = [f"Quarter {q.quarter}"]
    lines.append(f"  {'workload':<12} {'rate (req/s)':>12}  {'replicas (chosen)':<28} {'lower bound':<24} single-type minimum")
    for w in q.workloads:
        bounds = ", ".join(f"{a} {n}" for a, n in w.lower_bounds.items())
        singles = ", ".join(f"{a} {n if n is not None else '>cap'}" for a, n in w.singles.items())
        lines.append(f"  {w.name:<12} {w.rate_per_s:>12.3g}  {_counts(w.mix):<28} {bounds:<24} {singles}")
    table = q.planner.set_index("fleet")
    plan = table.loc["plan"]
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
    best = q.cheapest_single
    if best is None:
        lines.append("  no single accelerator type can serve every workload")
    else:
        acc, cost = best
        saving = cost - q.cost_usd_per_hour
        if all(w.mix == {acc: w.singles.get(acc)} for w in q.workloads):
            lines.append(f"  the chosen fleet is the cheapest single type, all-{acc} (packed: {_usd(cost)}/hour full load)")
            return "\n".join(lines)
        lines.append(
            f"  cheapest single type: all-{acc} at {_usd(cost)}/hour full load, capex "
            f"{_usd(table.loc[f'all-{acc}', 'capex_usd'])}; the chosen fleet saves {_usd(saving)}/hour "
            f"({saving / cost:.1%})"
        )
    return "\n".join(lines)


def plan_text(result: PlanResult) -> str:
    head = f"Plan {result.spec.name}: cheapest fleet meeting every SLO ({result.simulations} simulations)"
    return "\n\n".join([head, *(quarter_text(q) for q in result.quarters)]) + "\n"
