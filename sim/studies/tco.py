"""TCO over a horizon from one run: cash flow per fleet per year, NPV, levelised cost,
and how the answer moves with price, utilisation, lifetime, power price and cost of capital.

Repricing, not re-simulation: pricing does not feed back into the simulation (latency,
batching and SLOs do not depend on prices), so one run is priced many ways. The load does
feed back, so the utilisation rows of the sensitivity table come from runs of the same
scenario with every arrival rate scaled (the demand, not a busy fraction; ``dcsim tco``
runs them: three runs in all) and are priced at the base pricing; their SLOs and
stability are those measured at that load. Given no such runs (``load_runs`` None), the
rows are *scaled* instead: served output x the multiplier, each pool's busy fraction x
the multiplier (clipped at 1) on its measured idle-to-busy power line, latency and SLOs
not re-checked (the ``utilisation_method`` column says which).

Cash flow (years 0..N, N = ``horizon_years`` or the IT life rounded up), per fleet:

- capex at purchase: IT (accelerators x price factor, servers, network) at year 0 and again
  at each multiple of ``depreciation_years`` before N; the owned facility likewise every
  ``facility_depreciation_years`` (none when colocating or renting). A purchase at instant t
  is booked at the end of the year it falls in (year ceil(t); t = 0 in year 0).
- residual value (a credit in year N): the last purchase's straight-line book value left,
  capex x max(0, 1 - (N - t) / life).
- each year 1..N: energy (mean IT power x PUE x $/kWh x 8766 h; none when renting or when a
  colocation fee includes power), maintenance (fraction x IT capex), staff ($/kW-month x
  provisioned IT kW x 12), colocation ($/kW-month x contracted kW x 12), other opex
  (fraction x capex), rent (accelerator-hours at the rental price x 8766 h).
- discount factor (1 + r)^-year (end-of-year convention), r = ``discount_rate_per_year``.

NPV of the TCO = sum of discounted totals; levelised $/1M output tokens = NPV / (sum of the
discounted output tokens of years 1..N) x 1e6, and $/request likewise, output at the run's
measured rate (completions in the measurement window per second, x 8766 x 3600 per year).
At r = 0 and N = life the undiscounted total is the run's own cost per hour x 8766 x N.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from sim.errors import UserError
from sim.models.economics import HOURS_PER_YEAR, finance_catalog
from sim.overrides import derive
from sim.results.qualify import fleet_verdicts
from sim.scenario import Economics, Scenario
from sim.studies.headroom import scale_arrival

SECONDS_PER_YEAR = HOURS_PER_YEAR * 3600.0
MONTHS_PER_YEAR = 12
MAX_HORIZON_YEARS = 50
# sensitivity factor -> (row of fleets/data/finance.csv, what it changes)
FACTORS = {
    "accelerator price": "accelerator_price_factor",
    "utilisation": "load_multiplier",
    "lifetime": "depreciation_years",
    "power price": "electricity_usd_per_kwh",
    "cost of capital": "discount_rate_per_year",
}
CASH_FLOW_COLUMNS = ("capex_it_usd", "capex_facility_usd", "residual_value_usd", "energy_usd", "maintenance_usd",
                     "staff_usd", "colocation_usd", "rent_usd", "other_opex_usd")


@dataclass(frozen=True)
class Pricing:
    """One way to price a run: its economics and the two factors that are not economics
    fields (accelerator price factor, load multiplier), and the horizon (None: IT life)."""

    econ: Economics
    price_factor: float = 1.0
    load: float = 1.0
    horizon_years: int | None = None

    def horizon(self) -> int:
        return self.horizon_years or max(1, math.ceil(self.econ.depreciation_years - 1e-9))


@dataclass(frozen=True)
class TcoTables:
    """What :func:`tco_tables` returns: ``cash_flow`` (fleet x year), ``npv`` (per fleet)
    and ``sensitivity`` (factor x level x fleet), all pandas DataFrames."""

    cash_flow: pd.DataFrame
    npv: pd.DataFrame
    sensitivity: pd.DataFrame


def check_horizon(horizon_years: int | None) -> None:
    """Raise UserError unless ``horizon_years`` is None or 1..MAX_HORIZON_YEARS."""
    if horizon_years is not None and not 1 <= horizon_years <= MAX_HORIZON_YEARS:
        raise UserError(f"--horizon-years must be a whole number of years from 1 to {MAX_HORIZON_YEARS} "
                        f"(got {horizon_years})")


def _purchases(capex: float, life: float, horizon: int) -> list[tuple[float, float]]:
    """(instant, amount) of each purchase of an asset of ``life`` years over the horizon."""
    if capex == 0:
        return []
    count = max(1, math.ceil(horizon / life - 1e-9))
    return [(k * life, capex) for k in range(count)]


def _capex_rows(capex: float, life: float, horizon: int) -> tuple[dict[int, float], float]:
    """Purchases booked per year and the residual book value credited at the horizon."""
    booked: dict[int, float] = {}
    buys = _purchases(capex, life, horizon)
    for t, amount in buys:
        year = math.ceil(t - 1e-9)
        booked[year] = booked.get(year, 0.0) + amount
    residual = 0.0
    if buys:
        t, amount = buys[-1]
        residual = amount * max(0.0, 1.0 - (horizon - t) / life)
    return booked, residual


def _fleet_year_costs(pools: pd.DataFrame, pricing: Pricing) -> tuple[dict[str, float], float]:
    """Yearly opex lines of one fleet's pools and the served-load multiplier."""
    econ = pricing.econ
    busy = pools["busy_fraction"].fillna(0.0).clip(lower=0.0)
    load = pricing.load
    power_w = pools["it_power_idle_w"] + (pools["it_power_busy_w"] - pools["it_power_idle_w"]) * (busy * load).clip(upper=1.0)
    it_max_kw = float(pools["it_power_max_w"].sum()) / 1e3
    capex_it = _capex_it(pools, pricing.price_factor)
    lines = dict.fromkeys(("energy_usd", "maintenance_usd", "staff_usd", "colocation_usd", "rent_usd", "other_opex_usd"), 0.0)
    if econ.ownership == "rent":
        lines["rent_usd"] = float(pools["rent_usd_per_hour"].sum()) * HOURS_PER_YEAR
        return lines, load
    if not (econ.ownership == "colocate" and econ.colocation_power == "included"):
        lines["energy_usd"] = float(power_w.sum()) / 1e3 * econ.pue * econ.electricity_usd_per_kwh * HOURS_PER_YEAR
    lines["maintenance_usd"] = econ.maintenance_fraction_per_year * capex_it
    lines["staff_usd"] = econ.staff_usd_per_kw_month * it_max_kw * MONTHS_PER_YEAR
    if econ.ownership == "colocate":
        lines["colocation_usd"] = (econ.colocation_usd_per_kw_month * econ.colocation_contract_ratio * it_max_kw
                                   * MONTHS_PER_YEAR)
    lines["other_opex_usd"] = econ.other_opex_fraction_per_year * (capex_it + float(pools["capex_facility_usd"].sum()))
    return lines, load


def _capex_it(pools: pd.DataFrame, price_factor: float) -> float:
    return float(pools["capex_accelerators_usd"].sum() * price_factor + pools["capex_servers_usd"].sum()
                 + pools["capex_network_usd"].sum())


def fleet_cash_flow(pools: pd.DataFrame, output_tokens_per_s: float, requests_per_s: float,
                    pricing: Pricing) -> pd.DataFrame:
    """Cash flow of one fleet (rows of its ``pools`` table) over the horizon: one row per
    year 0..N with the module docstring's columns, USD, output tokens and requests."""
    econ, horizon = pricing.econ, pricing.horizon()
    lines, load = _fleet_year_costs(pools, pricing)
    owning = econ.ownership != "rent"
    it_buys, it_residual = _capex_rows(_capex_it(pools, pricing.price_factor) if owning else 0.0,
                                       econ.depreciation_years, horizon)
    facility = float(pools["capex_facility_usd"].sum()) if econ.ownership == "own" else 0.0
    fac_buys, fac_residual = _capex_rows(facility, econ.facility_depreciation_years, horizon)
    rows = []
    for year in range(horizon + 1):
        row = {"year": year, "capex_it_usd": it_buys.get(year, 0.0), "capex_facility_usd": fac_buys.get(year, 0.0),
               "residual_value_usd": -(it_residual + fac_residual) if year == horizon else 0.0}
        running = year > 0
        row.update({k: v if running else 0.0 for k, v in lines.items()})
        row["output_tokens"] = output_tokens_per_s * load * SECONDS_PER_YEAR if running else 0.0
        row["requests"] = requests_per_s * load * SECONDS_PER_YEAR if running else 0.0
        rows.append(row)
    table = pd.DataFrame(rows)
    table["total_usd"] = table[list(CASH_FLOW_COLUMNS)].sum(axis=1)
    table["discount_factor"] = (1.0 + econ.discount_rate_per_year) ** -table["year"].astype(float)
    table["discounted_usd"] = table["total_usd"] * table["discount_factor"]
    table["cumulative_discounted_usd"] = table["discounted_usd"].cumsum()
    table["load_multiplier"] = load
    return table


def _fleet_output(summary: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """Per fleet: (output tokens/s, completed requests/s) summed over its workloads."""
    out = {}
    for fleet, g in summary.groupby("fleet", sort=False):
        tokens = g["output_tokens_per_s"].fillna(0.0).sum() if "output_tokens_per_s" in g else 0.0
        out[str(fleet)] = (float(tokens), float(g["throughput_rps"].fillna(0.0).sum()))
    return out


def cash_flow_table(pools: pd.DataFrame, summary: pd.DataFrame, pricing: Pricing) -> pd.DataFrame:
    """Every fleet's :func:`fleet_cash_flow`, stacked with a ``fleet`` column first."""
    output = _fleet_output(summary)
    frames = []
    for fleet, g in pools.groupby("fleet", sort=False):
        tokens, requests = output.get(str(fleet), (0.0, 0.0))
        frames.append(fleet_cash_flow(g, tokens, requests, pricing).assign(fleet=fleet))
    table = pd.concat(frames, ignore_index=True)
    return table[["fleet"] + [c for c in table.columns if c != "fleet"]]


def npv_table(cash_flow: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """Per fleet: ``npv_tco_usd``, ``tco_usd`` (undiscounted), ``horizon_years``,
    ``discounted_output_tokens``, ``discounted_requests``,
    ``levelised_usd_per_1m_output_tokens`` (NaN without output tokens),
    ``levelised_usd_per_request`` and ``qualifies`` (every SLO met, stable)."""
    verdicts = fleet_verdicts(summary)
    rows = []
    for fleet, g in cash_flow.groupby("fleet", sort=False):
        npv = float(g["discounted_usd"].sum())
        tokens = float((g["output_tokens"] * g["discount_factor"]).sum())
        requests = float((g["requests"] * g["discount_factor"]).sum())
        verdict = verdicts.get(str(fleet))
        rows.append({"fleet": fleet, "horizon_years": int(g["year"].max()), "npv_tco_usd": npv,
                     "tco_usd": float(g["total_usd"].sum()), "discounted_output_tokens": tokens,
                     "discounted_requests": requests,
                     "levelised_usd_per_1m_output_tokens": npv / tokens * 1e6 if tokens > 0 else math.nan,
                     "levelised_usd_per_request": npv / requests if requests > 0 else math.nan,
                     "qualifies": bool(verdict.qualifies) if verdict is not None else False})
    return pd.DataFrame(rows)


def metric_of(npv: pd.DataFrame) -> str:
    """The levelised column the answer is given in: $/1M output tokens when every fleet
    produced output tokens, else $/request."""
    tokens = npv["levelised_usd_per_1m_output_tokens"]
    return "levelised_usd_per_1m_output_tokens" if tokens.notna().all() else "levelised_usd_per_request"


def winner(npv: pd.DataFrame, metric: str) -> str:
    """The cheapest fleet by ``metric`` among those that qualify ("" when none does)."""
    ok = npv[npv["qualifies"] & npv[metric].notna()]
    return "" if ok.empty else str(ok.sort_values(metric, kind="stable").iloc[0]["fleet"])


def _level_pricing(base: Pricing, factor: str, value: float) -> Pricing:
    key = FACTORS[factor]
    if key == "accelerator_price_factor":
        return Pricing(base.econ, value, base.load, base.horizon_years)
    if key == "load_multiplier":
        return Pricing(base.econ, base.price_factor, value, base.horizon_years)
    econ = Economics.model_validate({**base.econ.model_dump(), key: value})
    return Pricing(econ, base.price_factor, base.load, base.horizon_years)


def sensitivity_table(pools: pd.DataFrame, summary: pd.DataFrame, base: Pricing,
                      load_runs: dict | None = None) -> pd.DataFrame:
    """Levelised cost of every fleet at the base pricing and at the low and high value of
    each of :data:`FACTORS` (from fleets/data/finance.csv), one factor at a time.

    ``load_runs`` maps "low" and "high" to the (pools, summary) tables of runs at the
    catalog's low and high load multipliers (module docstring); None: scaled.

    Rows: factor ("base" first), level (base | low | high), value, fleet, the two levelised
    columns, npv_tco_usd, qualifies, load_multiplier, utilisation_method (re-simulated |
    scaled | "" for other factors), winner (cheapest qualifying fleet by
    :func:`metric_of`) and winner_changes (against the base winner)."""
    catalog = finance_catalog()
    cases = [("base", "base", math.nan, base, pools, summary, "")]
    for factor, key in FACTORS.items():
        for level in ("low", "high"):
            value = float(catalog.loc[key, level])
            if factor == "utilisation" and load_runs is not None:
                run_pools, run_summary = load_runs[level]
                cases.append((factor, level, value, base, run_pools, run_summary, "re-simulated"))
            else:
                method = "scaled" if factor == "utilisation" else ""
                cases.append((factor, level, value, _level_pricing(base, factor, value), pools, summary, method))
    frames, metric, base_winner = [], None, None
    for factor, level, value, pricing, case_pools, case_summary, method in cases:
        npv = npv_table(cash_flow_table(case_pools, case_summary, pricing), case_summary)
        metric = metric or metric_of(npv)
        best = winner(npv, metric)
        base_winner = best if base_winner is None else base_winner
        loads = value if method == "re-simulated" else pricing.load
        frames.append(npv[["fleet", "levelised_usd_per_1m_output_tokens", "levelised_usd_per_request",
                           "npv_tco_usd", "qualifies"]].assign(
            factor=factor, level=level, value=value, load_multiplier=loads, utilisation_method=method,
            winner=best, winner_changes=best != base_winner, metric=metric))
    table = pd.concat(frames, ignore_index=True)
    first = ["factor", "level", "value", "fleet"]
    return table[first + [c for c in table.columns if c not in first]]


def load_multipliers() -> dict[str, float]:
    """The utilisation sensitivity's low and high demand multipliers (fleets/data/finance.csv)."""
    row = finance_catalog().loc["load_multiplier"]
    return {"low": float(row["low"]), "high": float(row["high"])}


def scaled_demand(scenario: Scenario, factor: float) -> Scenario:
    """``scenario`` with every workload's arrival rate x ``factor`` (all fleets kept),
    changed in its document and validated once (:mod:`sim.overrides`)."""
    def change(doc: dict) -> None:
        for wl in doc["workloads"].values():
            wl["arrival"] = scale_arrival(wl["arrival"], factor)

    return derive(scenario, change, f"{scenario.name} (demand x {factor:g})")


def tco_tables(results, horizon_years: int | None = None, load_runs: dict | None = None) -> TcoTables:
    """The cash flow, NPV and sensitivity tables of a run's ``results``
    (:class:`sim.results.tables.Results`: its ``pools``, ``summary`` and scenario
    economics), repriced without re-simulating (module docstring). ``load_runs``: "low"
    and "high" -> the Results of :func:`scaled_demand` runs at :func:`load_multipliers`
    (None: the utilisation rows are scaled). For ``dcsim tco`` and the dashboard.

    Raises:
        UserError: ``horizon_years`` outside 1..MAX_HORIZON_YEARS."""
    check_horizon(horizon_years)
    base = Pricing(results.scenario.economics, horizon_years=horizon_years)
    flow = cash_flow_table(results.pools, results.summary, base)
    loads = None if load_runs is None else {k: (r.pools, r.summary) for k, r in load_runs.items()}
    return TcoTables(flow, npv_table(flow, results.summary),
                     sensitivity_table(results.pools, results.summary, base, loads))
