"""IT and facility power over a run, per pool and fleet, from the sampled busy time.

The power model (:mod:`sim.models.power`) is linear in a pool's busy fraction ``b`` at
the run's chip activities::

    P_it(b) = it_power_idle_w + (it_power_busy_w - it_power_idle_w) x b
    P_facility = P_it x PUE

(``it_power_idle_w`` and ``it_power_busy_w`` are columns of the pools table: the whole
pool, chips plus its share of host power, at ``b`` = 0 and 1.) Over each interval
between two samples of the engine's time series, ``b`` = the busy time booked in the
interval / (interval x replicas x slots). The engine books a busy span when it ends, so
one interval can hold more busy time than it has capacity for; the excess is moved to the
intervals before it (the work was done then), which keeps every ``b`` in [0, 1] and
keeps the total. The last interval ends at the run's end, where the pool's final
``busy_total_s`` is known, so the integral of ``P_it`` over [0, end_s] equals the pool's
whole-run IT energy, ``run_it_power_avg_w`` x ``end_s``, the energy the request table
attributes (``energy_j``).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

POWER_COLUMNS = ("fleet", "pool", "t_start_s", "t_end_s", "busy_fraction", "it_power_kw", "facility_power_kw")


def busy_per_interval(t_s: np.ndarray, busy_total_s: np.ndarray, slots: float) -> np.ndarray:
    """Busy fraction of each interval [t_s[i], t_s[i+1]) of a pool with ``slots``
    replica slots, from its cumulative busy time at the instants ``t_s`` (s, increasing).

    Busy time above an interval's capacity (booked late) is carried back to the intervals
    before it, so every fraction is in [0, 1] and the busy time in total is kept; what
    cannot fit (only when the input books more busy time than replica-time elapsed) stays
    in the first interval. Returns ``len(t_s) - 1`` fractions (0 where an interval is empty)."""
    dt = np.diff(t_s)
    work = np.maximum(np.diff(busy_total_s), 0.0)
    capacity = dt * slots
    carry = 0.0
    for i in range(len(work) - 1, -1, -1):
        done = work[i] + carry
        work[i] = min(done, capacity[i])
        carry = done - work[i]
    if len(work) and carry > 0:
        work[0] += carry
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(capacity > 0, work / np.where(capacity > 0, capacity, 1.0), 0.0)


def power_over_time(pools: pd.DataFrame, timeseries: pd.DataFrame, end_s: Mapping[str, float] | None,
                    pue: float) -> pd.DataFrame:
    """Per pool and interval: :data:`POWER_COLUMNS` (times in s, power in kW).

    Args:
        pools: the pools table (``fleet``, ``pool``, ``busy_total_s``, ``busy_slots``,
            ``it_power_idle_w``, ``it_power_busy_w``).
        timeseries: the sampled time series (``fleet``, ``pool``, ``t_s``, ``busy_total_s``).
        end_s: the instant each fleet's run ended (s); None or empty: the pools table's
            ``run_end_s`` (a run read back from its output files).
        pue: facility power / IT power.
    """
    frames = []
    by_pool = dict(iter(timeseries.groupby(["fleet", "pool"], sort=False))) if len(timeseries) else {}
    for _, p in pools.iterrows():
        fleet, pool = p["fleet"], p["pool"]
        end = float(end_s[fleet]) if end_s else float(p["run_end_s"])
        g = by_pool.get((fleet, pool))
        t = [] if g is None else list(g["t_s"])
        busy = [] if g is None else list(g["busy_total_s"])
        pairs = [(ti, bi) for ti, bi in zip(t, busy) if ti < end]
        if not pairs or pairs[0][0] > 0:
            pairs.insert(0, (0.0, 0.0))
        pairs.append((end, float(p["busy_total_s"])))
        t_s, total = np.array(pairs).T
        b = busy_per_interval(t_s, total, float(p["busy_slots"]))
        it_kw = (p["it_power_idle_w"] + (p["it_power_busy_w"] - p["it_power_idle_w"]) * b) / 1e3
        frames.append(pd.DataFrame({"fleet": fleet, "pool": pool, "t_start_s": t_s[:-1], "t_end_s": t_s[1:],
                                    "busy_fraction": b, "it_power_kw": it_kw, "facility_power_kw": it_kw * pue}))
    if not frames:
        return pd.DataFrame(columns=list(POWER_COLUMNS))
    return pd.concat(frames, ignore_index=True)[list(POWER_COLUMNS)]


def fleet_power_over_time(power: pd.DataFrame) -> pd.DataFrame:
    """The fleet's IT and facility kW per interval: its pools' power summed (the pools of
    one fleet are sampled on the same instants)."""
    return (power.groupby(["fleet", "t_start_s", "t_end_s"], sort=False, as_index=False)
            [["it_power_kw", "facility_power_kw"]].sum())


def coarsen(fleet_power: pd.DataFrame, intervals: int) -> pd.DataFrame:
    """``fleet_power`` (:func:`fleet_power_over_time`) averaged onto at most ``intervals``
    equal intervals per fleet over [0, end]: each new interval's kW is the energy of the
    fine curve inside it / its length (the cumulative energy is piecewise linear, so this
    is exact and keeps the integral). Fleets already coarser are returned as they are."""
    frames = []
    for fleet, g in fleet_power.groupby("fleet", sort=False):
        if len(g) <= intervals:
            frames.append(g)
            continue
        t = np.append(g["t_start_s"].to_numpy(), g["t_end_s"].iloc[-1])
        edges = np.linspace(t[0], t[-1], intervals + 1)
        out = {"fleet": fleet, "t_start_s": edges[:-1], "t_end_s": edges[1:]}
        for column in ("it_power_kw", "facility_power_kw"):
            cumulative = np.append(0.0, np.cumsum(g[column].to_numpy() * np.diff(t)))
            out[column] = np.diff(np.interp(edges, t, cumulative)) / np.diff(edges)
        frames.append(pd.DataFrame(out))
    return pd.concat(frames, ignore_index=True) if frames else fleet_power


def energy_kwh(power: pd.DataFrame, column: str = "it_power_kw") -> pd.Series:
    """The integral of ``column`` (kW) over time per fleet (kWh)."""
    hours = (power["t_end_s"] - power["t_start_s"]) / 3600.0
    return (power[column] * hours).groupby(power["fleet"], sort=False).sum()
