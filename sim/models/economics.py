"""Capex, opex and the cost of each request.

Per pool::

    capex      = accelerators × price + nodes × server share (when the price excludes the
                 server) + facility $/MW × provisioned IT power (MW)
    cost/hour  = IT capex / depreciation life + facility capex / facility life
                 + power × PUE × $/kWh + other opex (fraction of capex per year)
    power      = full-load power × (idle fraction + (1 − idle fraction) × busy fraction)

Full-load IT power of a node is its accelerators' TDP plus the host overhead (catalog).
Per-request cost is *fully loaded*: the pool's cost over the run is split over the
requests it served in proportion to the replica-seconds each held (each iteration's time
split over the tokens or samples in it), so idle time is spread over the requests served
and the costs add up to the pool's bill. The *marginal* cost charges only the
replica-seconds the request held, at the full-load hourly rate.

Hours per month: 730.5 (365.25 × 24 / 12).
"""

from __future__ import annotations

import pandas as pd

from sim.scenario import Economics

HOURS_PER_YEAR = 8766.0
HOURS_PER_MONTH = HOURS_PER_YEAR / 12.0


def pool_costs(pool, econ: Economics, busy_fraction: float) -> dict[str, float]:
    """Capex and hourly costs of one pool (all replicas) at a mean ``busy_fraction``.

    Returns a dict of ``*_usd``, ``*_w`` and ``*_usd_per_hour`` fields."""
    layout = pool.layout
    if layout is None:  # service-time test pools have no hardware
        return {k: 0.0 for k in _COST_KEYS}
    acc = layout.accelerator
    price = pool.config.price_usd if pool.config.price_usd is not None else acc.price_usd
    capex_acc = layout.accelerators * price
    capex_servers = 0.0 if acc.price_includes_server else layout.nodes * acc.server_cost_usd_per_node
    it_power_max_w = layout.it_power_max_w
    capex_facility = econ.facility_capex_usd_per_mw * it_power_max_w / 1e6
    capex = capex_acc + capex_servers + capex_facility
    load = econ.idle_power_fraction + (1.0 - econ.idle_power_fraction) * busy_fraction
    it_power_w = it_power_max_w * load
    depreciation = (capex_acc + capex_servers) / (econ.depreciation_years * HOURS_PER_YEAR)
    depreciation += capex_facility / (econ.facility_depreciation_years * HOURS_PER_YEAR)
    energy = it_power_w * econ.pue / 1e3 * econ.electricity_usd_per_kwh
    energy_full = it_power_max_w * econ.pue / 1e3 * econ.electricity_usd_per_kwh
    other = capex * econ.other_opex_fraction_per_year / HOURS_PER_YEAR
    return {
        "capex_accelerators_usd": capex_acc,
        "capex_servers_usd": capex_servers,
        "capex_facility_usd": capex_facility,
        "capex_usd": capex,
        "it_power_max_w": it_power_max_w,
        "it_power_avg_w": it_power_w,
        "facility_power_avg_w": it_power_w * econ.pue,
        "depreciation_usd_per_hour": depreciation,
        "energy_usd_per_hour": energy,
        "other_opex_usd_per_hour": other,
        "cost_usd_per_hour": depreciation + energy + other,
        "full_load_cost_usd_per_hour": depreciation + energy_full + other,
        "opex_usd_per_month": (energy + other) * HOURS_PER_MONTH,
    }


_COST_KEYS = (
    "capex_accelerators_usd capex_servers_usd capex_facility_usd capex_usd it_power_max_w "
    "it_power_avg_w facility_power_avg_w depreciation_usd_per_hour energy_usd_per_hour "
    "other_opex_usd_per_hour cost_usd_per_hour full_load_cost_usd_per_hour opex_usd_per_month"
).split()


def attribute_costs(
    requests: pd.DataFrame, pools: pd.DataFrame, end_s: float, pool_shares: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Add ``cost_usd`` (fully loaded) and ``marginal_cost_usd`` to request rows.

    Each pool's bill over the run [0, end_s] at its whole-run mean power is split over
    the replica-seconds its requests held: a request pays share × (bill ÷ total shares)
    on every pool it used (``pool_shares`` lists the requests whose journey crossed pools;
    the others used only their ``pool``). Requests never served cost nothing.
    """
    out = requests.copy()
    multi = set() if pool_shares is None or pool_shares.empty else set(pool_shares["request_id"])
    single = (out["pool"] != "") & ~out["request_id"].isin(multi)
    shares = pd.concat(
        [out.loc[single, ["request_id", "pool", "busy_share_s"]], pool_shares if multi else None],
        ignore_index=True,
    )
    pool_rows = pools.set_index("pool")
    totals = shares.groupby("pool")["busy_share_s"].sum()
    run_cost = pool_rows["run_cost_usd_per_hour"] * end_s / 3600.0
    rate = (run_cost / totals).reindex(pool_rows.index).fillna(0.0)
    marginal = pool_rows["full_load_cost_usd_per_hour"] / pool_rows["replicas"].clip(lower=1) / 3600.0
    shares["cost_usd"] = shares["busy_share_s"] * shares["pool"].map(rate)
    shares["marginal_cost_usd"] = shares["busy_share_s"] * shares["pool"].map(marginal)
    per_request = shares.groupby("request_id")[["cost_usd", "marginal_cost_usd"]].sum()
    out["cost_usd"] = out["request_id"].map(per_request["cost_usd"])
    out["marginal_cost_usd"] = out["request_id"].map(per_request["marginal_cost_usd"])
    return out
