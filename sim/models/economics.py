"""Capex, opex, energy and the cost of each request, owned or rented.

Per pool (its share of the fleet's packed nodes and racks, see ``fleets/packing.py``)::

    IT capex       = accelerators x price + node share x (server cost, when the price
                     excludes the server, + network capex per node)
    facility capex = facility $/MW x provisioned IT power (node share x full-load node W)
    capital/hour   = IT capex x CRF(r, depreciation_years) / 8766
                     + facility capex x CRF(r, facility_depreciation_years) / 8766
    CRF(r, n)      = r / (1 - (1 + r)^-n)   (annuity; 1 / n when r = 0: straight line)
    energy/hour    = mean IT power (sim.models.power) x PUE x $/kWh
    opex/hour      = maintenance fraction x IT capex / 8766 + staff $/kW-month x
                     provisioned IT kW / 730.5 + other fraction x capex / 8766
    own cost/hour  = capital + energy + opex
    rent cost/hour = accelerators x $/accelerator-hour (the rental covers server,
                     network, facility and power)
    colocate       = own, without facility capex, plus colocation $/kW-month x
                     contracted IT kW (provisioned x contract ratio) / 730.5; energy is
                     charged (metered) or not (power included in the kW-month fee)

``ownership: colocate`` is a way of owning the IT equipment: the ``*_own_*`` columns of
the summary and ``own_cost_usd_per_hour`` price it in the colocation facility.

Per-request cost is *fully loaded*: the pool's bill over the run is split over the
requests it served in proportion to the replica-seconds each held (each iteration's time
split over the tokens or samples in it), so idle time is spread over the requests served
and the costs add up to the pool's bill. The *marginal* cost charges only the
replica-seconds the request held, at the hourly rate of a busy replica (power at the
activities measured while busy; for rent, the rental rate). Energy (IT, J) is split the
same way as the fully loaded cost.

Hours per year 8766 (365.25 x 24); per month 730.5.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pandas as pd

import fleets
from sim.errors import UserError
from sim.models.parallelism import replica_accelerators
from sim.models.power import activities, pool_power_w
from sim.scenario import Economics

HOURS_PER_YEAR = 8766.0
HOURS_PER_MONTH = HOURS_PER_YEAR / 12.0
OWNERSHIP_CSV = Path(fleets.__file__).parent / "data" / "ownership.csv"
FINANCE_CSV = Path(fleets.__file__).parent / "data" / "finance.csv"


def capital_recovery_factor(rate: float, years: float) -> float:
    """Fraction of a capex to pay each year to recover it over ``years`` at ``rate``
    (annuity); 1 / years at rate 0 (straight line)."""
    if rate == 0:
        return 1.0 / years
    return rate / (1.0 - (1.0 + rate) ** -years)


@lru_cache(maxsize=4)
def rental_prices(path: Path = OWNERSHIP_CSV) -> dict[str, float]:
    """$/accelerator-hour per type from ``fleets/data/ownership.csv`` (sourced rows)."""
    table = pd.read_csv(path)
    return dict(zip(table["key"], table["rental_usd_per_accelerator_hour"].astype(float)))


def rental_rate(acc_key: str, econ: Economics) -> float:
    """$/accelerator-hour of ``acc_key``: the scenario's override, else the catalog's;
    NaN when neither has one."""
    if acc_key in econ.rental_usd_per_accelerator_hour:
        return float(econ.rental_usd_per_accelerator_hour[acc_key])
    return rental_prices().get(acc_key, float("nan"))


def check_rentable(acc_key: str, econ: Economics, where: str = "") -> None:
    """Raise UserError when ``ownership: rent`` but ``acc_key`` has no rental price."""
    if econ.ownership == "rent" and rental_rate(acc_key, econ) != rental_rate(acc_key, econ):
        known = sorted(set(rental_prices()) | set(econ.rental_usd_per_accelerator_hour))
        raise UserError(
            f"{where + ': ' if where else ''}economics.ownership is 'rent' but accelerator '{acc_key}' has no "
            f"rental price; set economics.rental_usd_per_accelerator_hour.{acc_key} "
            f"(types with a sourced price: {', '.join(known)})")


def pool_costs(pool, econ: Economics, busy_fraction: float, compute_activity: float = 1.0,
               memory_activity: float = 1.0) -> dict[str, float]:
    """Capex, power and hourly costs of one pool (all replicas) at a mean
    ``busy_fraction`` and the chips' activities while busy (see sim.models.power).

    Returns a dict of ``*_usd``, ``*_w`` and ``*_usd_per_hour`` fields; ``cost_usd_per_hour``
    and ``full_load_cost_usd_per_hour`` follow ``econ.ownership``.
    Raises UserError when renting a type without a rental price."""
    layout = pool.layout
    if layout is None:  # service-time test pools have no hardware
        return {k: 0.0 for k in COST_KEYS}
    acc = layout.accelerator
    check_rentable(acc.key, econ, f"pool '{layout.name}'")
    nodes = pool.share.node_share if pool.share is not None else float(layout.nodes)
    it_max_w = pool.share.it_power_max_w if pool.share is not None else layout.it_power_max_w
    capex = _capex(pool, econ, nodes, it_max_w)
    colocating = econ.ownership == "colocate"
    chips_w, host_w = pool_power_w(acc, layout.accelerators, nodes, busy_fraction, compute_activity, memory_activity)
    full_chips_w, full_host_w = pool_power_w(acc, layout.accelerators, nodes, 1.0, 1.0, 1.0)
    capital = (capex["it"] * capital_recovery_factor(econ.discount_rate_per_year, econ.depreciation_years)
               + capex["facility"] * capital_recovery_factor(econ.discount_rate_per_year,
                                                               econ.facility_depreciation_years)) / HOURS_PER_YEAR
    energy = _energy_usd_per_hour(chips_w + host_w, econ)
    energy_full = _energy_usd_per_hour(full_chips_w + full_host_w, econ)
    maintenance = econ.maintenance_fraction_per_year * capex["it"] / HOURS_PER_YEAR
    staff = econ.staff_usd_per_kw_month * it_max_w / 1e3 / HOURS_PER_MONTH
    other = econ.other_opex_fraction_per_year * capex["total"] / HOURS_PER_YEAR
    colocation = colocation_usd_per_hour(it_max_w, econ) if colocating else 0.0
    opex = maintenance + staff + other + colocation
    own, own_full = capital + energy + opex, capital + energy_full + opex
    rent = layout.accelerators * rental_rate(acc.key, econ)
    renting = econ.ownership == "rent"
    return {
        "capex_accelerators_usd": capex["accelerators"],
        "capex_servers_usd": capex["servers"],
        "capex_network_usd": capex["network"],
        "capex_facility_usd": capex["facility"],
        "capex_usd": capex["total"],
        "it_power_max_w": it_max_w,
        "it_power_avg_w": chips_w + host_w,
        "accelerator_power_avg_w": chips_w,
        "facility_power_avg_w": (chips_w + host_w) * econ.pue,
        "depreciation_usd_per_hour": capital,
        "energy_usd_per_hour": energy,
        "maintenance_usd_per_hour": maintenance,
        "staff_usd_per_hour": staff,
        "other_opex_usd_per_hour": other,
        "colocation_usd_per_hour": colocation,
        "own_cost_usd_per_hour": own,
        "own_full_load_cost_usd_per_hour": own_full,
        "rent_usd_per_hour": rent,
        "cost_usd_per_hour": rent if renting else own,
        "full_load_cost_usd_per_hour": rent if renting else own_full,
        "opex_usd_per_month": (rent if renting else energy + opex) * HOURS_PER_MONTH,
    }


def _capex(pool, econ: Economics, nodes: float, it_max_w: float) -> dict[str, float]:
    layout = pool.layout
    acc = layout.accelerator
    price = pool.config.price_usd if pool.config.price_usd is not None else acc.price_usd
    accelerators = layout.accelerators * price
    servers = 0.0 if acc.price_includes_server else nodes * acc.server_cost_usd_per_node
    network = nodes * econ.network_capex_usd_per_node
    # colocation: the provider owns the building, the fee pays for it
    facility = 0.0 if econ.ownership == "colocate" else econ.facility_capex_usd_per_mw * it_max_w / 1e6
    it = accelerators + servers + network
    return {"accelerators": accelerators, "servers": servers, "network": network, "facility": facility,
            "it": it, "total": it + facility}


def _energy_usd_per_hour(it_power_w: float, econ: Economics) -> float:
    if econ.ownership == "colocate" and econ.colocation_power == "included":
        return 0.0
    return it_power_w * econ.pue / 1e3 * econ.electricity_usd_per_kwh


def colocation_usd_per_hour(it_power_max_w: float, econ: Economics) -> float:
    """Colocation fee per hour for ``it_power_max_w`` of provisioned IT power (W):
    $/kW-month x contracted kW (provisioned x ``colocation_contract_ratio``) / 730.5 h."""
    contracted_kw = it_power_max_w / 1e3 * econ.colocation_contract_ratio
    return econ.colocation_usd_per_kw_month * contracted_kw / HOURS_PER_MONTH


@lru_cache(maxsize=2)
def finance_catalog(path: Path = FINANCE_CSV) -> pd.DataFrame:
    """The sourced finance rows of ``fleets/data/finance.csv``, indexed by ``key``:
    ``value`` (the default), ``low`` and ``high`` (the sensitivity range), ``unit``,
    ``date``, ``status``, ``source``, ``notes``."""
    return pd.read_csv(path, dtype={"value": str}).set_index("key")


def finance_assumptions(econ: Economics) -> dict[str, object]:
    """The finance assumptions a cost figure rests on, as planner-CSV columns:
    ``ownership``, ``discount_rate_per_year``, ``maintenance_fraction_per_year``,
    ``staff_usd_per_kw_month``, ``colocation_usd_per_kw_month`` (NaN unless
    colocating), ``colocation_power`` ("" unless colocating)."""
    colocating = econ.ownership == "colocate"
    return {
        "ownership": econ.ownership,
        "discount_rate_per_year": econ.discount_rate_per_year,
        "maintenance_fraction_per_year": econ.maintenance_fraction_per_year,
        "staff_usd_per_kw_month": econ.staff_usd_per_kw_month,
        "colocation_usd_per_kw_month": econ.colocation_usd_per_kw_month if colocating else float("nan"),
        "colocation_power": econ.colocation_power if colocating else "",
    }


def finance_line(econ: Economics) -> str:
    """One line naming the finance assumptions, those at 0 listed as "not charged" (the
    run report and ``dcsim tco`` print it), e.g. "Finance: ownership own; not charged:
    cost of capital, maintenance, staff (docs/costs.md)"."""
    charged, free = [], []
    if econ.ownership != "rent":
        for value, name, text in (
                (econ.discount_rate_per_year, "cost of capital", f"cost of capital {econ.discount_rate_per_year:.1%}/yr"),
                (econ.maintenance_fraction_per_year, "maintenance",
                 f"maintenance {econ.maintenance_fraction_per_year:.1%} of IT capex/yr"),
                (econ.staff_usd_per_kw_month, "staff", f"staff ${econ.staff_usd_per_kw_month:,.2f}/kW-month")):
            (charged if value > 0 else free).append(text if value > 0 else name)
    if econ.ownership == "colocate":
        charged.append(f"colocation ${econ.colocation_usd_per_kw_month:,.2f}/kW-month x "
                       f"{econ.colocation_contract_ratio:g} of provisioned kW, power {econ.colocation_power}")
    parts = [f"ownership {econ.ownership}"] + charged
    tail = f"; not charged: {', '.join(free)} (docs/costs.md)" if free else ""
    return "Finance: " + ", ".join(parts) + tail


def pool_activities(pool, busy_s: float, flops: float, bytes_moved: float) -> tuple[float, float]:
    """(a_c, a_m) of a pool's chips while busy (0, 0 for pools without hardware)."""
    layout = pool.layout
    if layout is None:
        return 0.0, 0.0
    per_replica = replica_accelerators(layout.tp, layout.pp, layout.ep)
    return activities(layout.accelerator, layout.precision, per_replica, busy_s, flops, bytes_moved)


COST_KEYS = (
    "capex_accelerators_usd capex_servers_usd capex_network_usd capex_facility_usd capex_usd it_power_max_w "
    "it_power_avg_w accelerator_power_avg_w facility_power_avg_w depreciation_usd_per_hour energy_usd_per_hour "
    "maintenance_usd_per_hour staff_usd_per_hour other_opex_usd_per_hour colocation_usd_per_hour own_cost_usd_per_hour "
    "own_full_load_cost_usd_per_hour rent_usd_per_hour cost_usd_per_hour full_load_cost_usd_per_hour "
    "opex_usd_per_month"
).split()

def cost_rates(pools: pd.DataFrame, end_s: float, totals: pd.Series) -> dict[str, pd.Series]:
    """Per pool name, what one replica-second held costs for each column of
    :func:`attribute_costs` (USD, or J for ``energy_j``): a loaded bill over [0, end_s]
    divided by ``totals`` (replica-seconds held per pool), a marginal one per busy
    replica-second. NaN where the pool has no such price (e.g. no rent price)."""
    pool_rows = pools.set_index("pool")
    replicas = pool_rows["replicas"].clip(lower=1)
    rates = {}
    for column, (bill, kind) in _BILLS.items():
        if kind == "marginal":
            rates[column] = pool_rows[bill] / replicas / 3600.0
        else:
            per_s = pool_rows[bill] / (1.0 if kind == "energy" else 3600.0)
            rates[column] = (per_s * end_s / totals).reindex(pool_rows.index).fillna(0.0)
    return rates


# Request columns added by attribute_costs: column -> (pool bill column, kind)
_BILLS = {
    "cost_own_usd": ("run_own_cost_usd_per_hour", "loaded"),
    "cost_rent_usd": ("rent_usd_per_hour", "loaded"),
    "marginal_cost_own_usd": ("busy_own_cost_usd_per_hour", "marginal"),
    "marginal_cost_rent_usd": ("rent_usd_per_hour", "marginal"),
    "energy_j": ("run_it_power_avg_w", "energy"),
}


def held_shares(requests: pd.DataFrame, pool_shares: pd.DataFrame | None) -> pd.DataFrame:
    """The replica-seconds each of ``requests`` held, one row per (request, pool):
    columns ``request_id``, ``pool``, ``busy_share_s``. The rows of ``pool_shares``
    (requests whose journey crossed pools) are taken as they are; every other request
    held only its own ``pool`` for its ``busy_share_s``, and a request never served
    (``pool`` "") held nothing. The one cost-split rule: :func:`attribute_costs` and the
    streamed summary (``sim/results/streaming.py``) both bill these rows."""
    crossed = pool_shares is not None and not pool_shares.empty
    single = requests["pool"] != ""
    if crossed:
        single &= ~requests["request_id"].isin(pool_shares["request_id"])
    return pd.concat(
        [requests.loc[single, ["request_id", "pool", "busy_share_s"]], pool_shares if crossed else None],
        ignore_index=True,
    )


def attribute_costs(
    requests: pd.DataFrame, pools: pd.DataFrame, end_s: float, pool_shares: pd.DataFrame | None = None,
    ownership: str = "own", totals: pd.Series | None = None,
) -> pd.DataFrame:
    """Add per-request ``cost_usd`` (fully loaded), ``marginal_cost_usd`` (both under
    ``ownership``), their own/rent variants ``cost_own_usd``, ``cost_rent_usd``,
    ``marginal_cost_own_usd``, ``marginal_cost_rent_usd``, and ``energy_j`` (IT energy).

    Each pool's bill over the run [0, end_s] at its whole-run mean power is split over
    the replica-seconds its requests held: a request pays share × (bill ÷ total shares)
    on every pool it used (``pool_shares`` lists the requests whose journey crossed pools;
    the others used only their ``pool``). Requests never served cost nothing. The
    marginal cost is share × busy-replica rate ÷ replicas. ``totals`` (replica-seconds
    held per pool name over the whole run) is summed from ``requests`` if None; a
    streaming run passes it to cost one batch of rows at a time.
    """
    out = requests.copy(deep=False)  # new columns only: the request columns stay shared
    shares = held_shares(out, pool_shares)
    if totals is None:
        totals = shares.groupby("pool")["busy_share_s"].sum()
    for column, rate in cost_rates(pools, end_s, totals).items():
        shares[column] = shares["busy_share_s"] * shares["pool"].map(rate)
    per_request = shares.groupby("request_id")[list(_BILLS)].sum(min_count=1)
    for column in _BILLS:
        out[column] = out["request_id"].map(per_request[column])
    out["cost_usd"] = out["cost_rent_usd" if ownership == "rent" else "cost_own_usd"]
    out["marginal_cost_usd"] = out["marginal_cost_rent_usd" if ownership == "rent" else "marginal_cost_own_usd"]
    return out
