"""Demand over weeks: a fitted arrival model with a daily profile, a weekly profile and growth.

The rate at model time τ (seconds after the model's origin, an hour boundary at clock
hour ``start_hour`` of weekday ``start_weekday``, 0 = Monday) is

    λ(τ) = rate_per_s · growth_per_week^(τ / 1 week) · daily[hour of day] · weekly[day of week]

with ``daily`` (24 values) and ``weekly`` (7 values) rescaled to mean 1, so ``rate_per_s``
is the mean rate of the week starting at the origin, before growth. λ is held constant
within each clock hour (growth evaluated at the hour's midpoint). A run of ``duration_s``
covers τ in [start_s, start_s + duration_s): ``start_s`` = N weeks asks for the demand N
weeks after the origin (the planner's horizon).

Arrivals: a renewal process of unit rate with gamma gaps of coefficient of variation
``cv`` (cv = 1: Poisson) in operational time Λ(τ) = ∫λ, mapped back through Λ⁻¹ (time
rescaling; Brown et al., Neural Computation 14(2), 2002). The expected count over a
window is its integral of λ for any cv, up to the renewal start-up term (cv² − 1)/2
(Cox, Renewal Theory, 1962); ``cv`` > 1 adds burstiness within the hour.

The fit (:func:`fit_demand`): hourly request counts y_h of a trace are a Poisson GLM
with log link and the observed part of each hour as exposure,
log E[y_h] = log(exposure_h) + β₀ + g·(h / 24) + α[hour of day] + γ[day of week]
(treatment coding: hour 0 and Monday are the reference), solved by iteratively
reweighted least squares (McCullagh & Nelder, Generalized Linear Models, 2nd ed. 1989,
§2.5). Profiles are exp(α), exp(γ) rescaled to mean 1; ``growth_per_week`` = exp(7g).
``cv`` is the coefficient of variation of the gaps Λ(t_{i+1}) − Λ(t_i) in fitted
operational time (1 s timestamps jittered uniformly with a fixed seed first). A trace
shorter than a week cannot identify the weekly profile (it is left flat); shorter than
two days, neither profile nor growth is fitted, only the level and cv (the Azure LLM
inference traces 2023 span one hour each).

``python -m traffic.demand_fit [GENAI_CSV]`` refits :data:`PRESETS` from the Azure traces
shipped in ``traffic/data`` and the genai trace (default: the optional dataset
``data:alibaba_genai_lora_request_trace.csv``, see :mod:`traffic.datasets`) and prints them
with the genai trace's per-day error.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, field_validator, model_validator

from sim.errors import UserError
from traffic.chunks import ArrivalChunk, concatenate, renewal
from traffic.datasets import ALIBABA_GENAI, DATASET_PREFIX, SHIPPED_TRACES_DIR
from traffic.limits import check_count

HOUR_S = 3600.0
GENAI_DATASET = DATASET_PREFIX + ALIBABA_GENAI.name
DAY_S = 86_400.0
WEEK_S = 7 * DAY_S

# The genai trace's first four days (2024-11-15..18, 63-93 requests/day) precede the
# service's ramp (563 on the 19th, then 1,000-2,700); one log-linear trend cannot carry
# both, so the preset is fitted from this date (see docs/traces.md, "Demand that grows
# over weeks", for the full-trace fit and both errors).
GENAI_FIT_FROM = "2024-11-19"

# Fitted by `python -m traffic.demand_fit` on 2026-11-24 from ../shared/data/traces (the
# same bytes as traffic/data and the optional dataset, sha256 in traffic.datasets):
# alibaba_genai_lora_request_trace.csv (every row from GENAI_FIT_FROM, failed ones too:
# they are demand) and AzureLLMInferenceTrace_conv/_code.csv (one hour each: level and cv).
PRESETS: dict[str, dict] = {
    'genai_image': {'rate_per_s': 0.011802, 'growth_per_week': 1.246033, 'daily': [3.566, 0.9895, 1.0208, 1.0362, 0.5831, 0.3158, 0.2952, 0.2149, 0.1078, 0.035, 0.0315, 0.0017, 0.0, 0.0026, 0.0026, 0.0339, 0.5523, 2.0758, 2.5085, 0.546, 0.9929, 2.9758, 2.9273, 3.185], 'weekly': [1.2857, 1.345, 1.1601, 1.4384, 0.7331, 0.2465, 0.7912], 'start_hour': 1, 'start_weekday': 1, 'cv': 2.359946},
    'azure_conv': {'rate_per_s': 5.530422, 'growth_per_week': 1.0, 'daily': [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], 'weekly': [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], 'start_hour': 18, 'start_weekday': 3, 'cv': 1.090699},
    'azure_code': {'rate_per_s': 2.566686, 'growth_per_week': 1.0, 'daily': [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], 'weekly': [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], 'start_hour': 18, 'start_weekday': 3, 'cv': 13.095449},
}


def _mean_one(values: list[float], name: str) -> list[float]:
    array = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(array)) or np.any(array < 0) or array.sum() <= 0:
        raise ValueError(f"{name} must be non-negative numbers with a positive sum, got {values}")
    return (array / array.mean()).tolist()


class FittedArrivals(BaseModel):
    """``arrival: {kind: fitted, preset: genai_image, start_s: 1209600}`` (see module doc).

    ``preset`` fills every field not given from :data:`PRESETS`; without one,
    ``rate_per_s`` is required and the profiles default to flat, growth to 1, cv to 1.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["fitted"] = "fitted"
    preset: str | None = Field(None, description="fitted parameters to start from (PRESETS keys)")
    rate_per_s: PositiveFloat = Field(description="mean rate of the origin's week before growth, requests/s")
    growth_per_week: PositiveFloat = 1.0
    daily: list[NonNegativeFloat] = Field(default_factory=lambda: [1.0] * 24, min_length=24, max_length=24)
    weekly: list[NonNegativeFloat] = Field(default_factory=lambda: [1.0] * 7, min_length=7, max_length=7)
    start_hour: int = Field(0, ge=0, le=23, description="clock hour at the origin")
    start_weekday: int = Field(0, ge=0, le=6, description="weekday at the origin, 0 = Monday")
    start_s: NonNegativeFloat = Field(0.0, description="model time at which the run starts, s after the origin")
    cv: PositiveFloat = Field(1.0, le=100, description="gap CV in operational time; 1 = Poisson")

    @model_validator(mode="before")
    @classmethod
    def _fill_preset(cls, data):
        if isinstance(data, dict) and data.get("preset") is not None:
            name = data["preset"]
            if isinstance(name, str) and name in PRESETS:
                data = {**PRESETS[name], **data}
        return data

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, v: str | None) -> str | None:
        """An unknown preset is named at its own field (``...arrival.preset``)."""
        if v is not None and v not in PRESETS:
            raise ValueError(f"preset {v!r} is not one of {sorted(PRESETS)}")
        return v

    @field_validator("daily")
    @classmethod
    def _daily_mean_one(cls, v: list[float]) -> list[float]:
        return _mean_one(v, "daily")

    @field_validator("weekly")
    @classmethod
    def _weekly_mean_one(cls, v: list[float]) -> list[float]:
        return _mean_one(v, "weekly")

    def hourly_rates(self, duration_s: float) -> tuple[np.ndarray, np.ndarray]:
        """(edges_s shape (m+1,), rate_per_s shape (m,)): λ on the clock-hour pieces of
        [0, duration_s) in run time (edges 0 and duration_s included)."""
        tau0, tau1 = self.start_s, self.start_s + duration_s
        cuts = np.arange(math.floor(tau0 / HOUR_S) + 1, math.ceil(tau1 / HOUR_S)) * HOUR_S
        edges = np.concatenate(([tau0], cuts, [tau1]))
        index = np.floor(edges[:-1] / HOUR_S)
        hour = index.astype(np.int64) + self.start_hour
        rate = (
            self.rate_per_s * self.growth_per_week ** ((index + 0.5) * HOUR_S / WEEK_S)
            * np.asarray(self.daily)[hour % 24] * np.asarray(self.weekly)[(self.start_weekday + hour // 24) % 7]
        )
        return edges - tau0, rate

    def expected_count(self, duration_s: float) -> float:
        """∫λ over the run's [0, duration_s): the expected arrivals (cv = 1 exactly)."""
        edges, rate = self.hourly_rates(duration_s)
        return float(np.dot(np.diff(edges), rate))

    def arrival_times(self, rng: np.random.Generator, duration_s: float) -> np.ndarray:
        """Sorted arrival instants in [0, duration_s), float64 shape (k,).

        Raises:
            ValueError: duration_s not finite and > 0.
            UserError: more expected arrivals than :data:`traffic.limits.MAX_ARRIVALS`.
        """
        return concatenate(self.arrival_chunks(rng, duration_s)).times_s

    def arrival_chunks(self, rng: np.random.Generator, duration_s: float) -> Iterator[ArrivalChunk]:
        """The arrivals of :meth:`arrival_times` a chunk at a time (:mod:`traffic.chunks`):
        the unit-rate renewal process in operational time, each chunk mapped back
        through Λ⁻¹. Raises as :meth:`arrival_times`, at the call."""
        if not (math.isfinite(duration_s) and duration_s > 0):
            raise ValueError(f"duration_s(={duration_s}) must be finite and > 0")
        edges, rate = self.hourly_rates(duration_s)
        cumulative = np.concatenate(([0.0], np.cumsum(np.diff(edges) * rate)))
        total = float(cumulative[-1])
        check_count(total, "fitted arrivals")
        if total <= 0:  # every hour of the window has rate 0 (e.g. a preset's night hour)
            return iter((ArrivalChunk(np.empty(0)),))
        shape = 1.0 / self.cv**2
        return (ArrivalChunk(np.interp(events, cumulative, edges))
                for events in renewal(rng, shape, 1.0 / shape, total, self.cv, total))

    @property
    def mean_rate_per_s(self) -> float:
        """Mean rate over the first week of the run (requests/s)."""
        return self.expected_count(WEEK_S) / WEEK_S


# --- fitting --------------------------------------------------------------------------


@dataclass(frozen=True)
class DemandFit:
    """A fitted model and how well it reproduces the trace's own daily totals.

    ``daily_totals``: DataFrame with columns date, observed, predicted, whole_day, error
    (predicted/observed − 1). ``wape``: Σ|predicted − observed| / Σ observed over the
    whole days (the first and last calendar days are partly outside the trace).
    """

    params: dict
    daily_totals: pd.DataFrame
    wape: float
    hours: int

    def arrivals(self) -> FittedArrivals:
        return FittedArrivals.model_validate(self.params)


def _design(hours: np.ndarray, hod: np.ndarray, dow: np.ndarray, fit_daily: bool, fit_weekly: bool,
            fit_growth: bool) -> np.ndarray:
    columns = [np.ones(hours.size)]
    if fit_growth:
        columns.append(hours / 24.0)
    if fit_daily:
        columns += [(hod == h).astype(float) for h in range(1, 24)]
    if fit_weekly:
        columns += [(dow == d).astype(float) for d in range(1, 7)]
    return np.column_stack(columns)


def poisson_glm(x: np.ndarray, y: np.ndarray, exposure: np.ndarray, iterations: int = 100,
                tol: float = 1e-10) -> np.ndarray:
    """Coefficients β of log E[y] = log(exposure) + x·β by iteratively reweighted least squares.

    Args:
        x: design matrix, shape (n, p), full column rank, first column the intercept.
        y: non-negative counts, shape (n,).
        exposure: positive observed length of each row (hours), shape (n,).
    """
    beta = np.zeros(x.shape[1])
    beta[0] = math.log(max(y.sum() / exposure.sum(), 1e-12))
    for _ in range(iterations):
        eta = x @ beta
        mu = exposure * np.exp(eta)
        z = eta + (y - mu) / np.maximum(mu, 1e-300)
        w = np.sqrt(mu)
        new = np.linalg.lstsq(x * w[:, None], z * w, rcond=None)[0]
        if np.max(np.abs(new - beta)) < tol:
            return new
        beta = new
    return beta


def fit_demand(created: np.ndarray, jitter_seed: int = 0) -> DemandFit:
    """Fit :class:`FittedArrivals` to request instants (see the module doc).

    Args:
        created: datetime64 instants of the requests, any order, shape (n,), n >= 2.
        jitter_seed: seed of the uniform sub-second jitter used for ``cv``.
    """
    created = np.sort(np.asarray(created, dtype="datetime64[ns]"))
    origin = created[0].astype("datetime64[h]")
    seconds = (created - origin) / np.timedelta64(1, "s")
    n_hours = int(seconds[-1] // HOUR_S) + 1
    counts = np.bincount((seconds // HOUR_S).astype(np.int64), minlength=n_hours).astype(float)
    # the first and last hours are observed only from the first to the last request
    exposure = np.ones(n_hours)
    exposure[0] -= seconds[0] / HOUR_S
    exposure[-1] -= 1.0 - (seconds[-1] - (n_hours - 1) * HOUR_S) / HOUR_S
    exposure = np.maximum(exposure, 1.0 / HOUR_S)
    start = pd.Timestamp(origin)
    hours = np.arange(n_hours)
    hod = (start.hour + hours) % 24
    dow = (start.weekday() + (start.hour + hours) // 24) % 7
    span_days = n_hours / 24.0
    fit_daily = fit_growth = span_days >= 2
    fit_weekly = span_days >= 7
    beta = poisson_glm(_design(hours, hod, dow, fit_daily, fit_weekly, fit_growth), counts, exposure)
    params = _params(beta, start, fit_daily, fit_weekly, fit_growth)
    fitted = FittedArrivals.model_validate({**params, "cv": 1.0})
    rng = np.random.default_rng(jitter_seed)
    params["cv"] = _operational_cv(fitted, np.sort(seconds + rng.random(seconds.size)))
    return _assess(FittedArrivals.model_validate(params), created, origin, n_hours)


def _params(beta: np.ndarray, start: pd.Timestamp, fit_daily: bool, fit_weekly: bool, fit_growth: bool) -> dict:
    i, g = 1, 0.0
    if fit_growth:
        g, i = float(beta[1]), 2
    daily = np.ones(24)
    if fit_daily:
        daily = np.exp(np.concatenate(([0.0], beta[i:i + 23])))
        i += 23
    weekly = np.ones(7)
    if fit_weekly:
        weekly = np.exp(np.concatenate(([0.0], beta[i:i + 6])))
    # E[y_h]/exposure = exp(β0 + g·h/24)·e^α·e^γ; the model evaluates growth at mid-hour
    level_per_hour = math.exp(beta[0] - g * 0.5 / 24.0) * daily.mean() * weekly.mean()
    return {
        "rate_per_s": level_per_hour / HOUR_S,
        "growth_per_week": math.exp(7.0 * g),
        "daily": (daily / daily.mean()).tolist(),
        "weekly": (weekly / weekly.mean()).tolist(),
        "start_hour": int(start.hour),
        "start_weekday": int(start.weekday()),
    }


def _operational_cv(model: FittedArrivals, seconds: np.ndarray) -> float:
    edges, rate = model.hourly_rates(float(seconds[-1]) + 1.0)
    cumulative = np.concatenate(([0.0], np.cumsum(np.diff(edges) * rate)))
    gaps = np.diff(np.interp(seconds, edges, cumulative))
    return float(gaps.std() / gaps.mean()) if gaps.size > 1 and gaps.mean() > 0 else 1.0


def _assess(model: FittedArrivals, created: np.ndarray, origin, n_hours: int) -> DemandFit:
    """Predicted against observed totals per calendar day of the trace."""
    observed = pd.Series(created).dt.floor("D").value_counts().sort_index()
    rows = []
    for day, count in observed.items():
        offset_s = float((day - pd.Timestamp(origin)).total_seconds())
        lo, hi = max(offset_s, 0.0), min(offset_s + DAY_S, n_hours * HOUR_S)
        predicted = model.model_copy(update={"start_s": lo}).expected_count(hi - lo)
        rows.append((day.date(), int(count), predicted, hi - lo == DAY_S))
    table = pd.DataFrame(rows, columns=["date", "observed", "predicted", "whole_day"])
    table["error"] = table["predicted"] / table["observed"] - 1.0
    whole = table[table["whole_day"]]
    wape = float((whole["predicted"] - whole["observed"]).abs().sum() / whole["observed"].sum()) if len(whole) else math.nan
    return DemandFit(model.model_dump(exclude={"kind", "preset", "start_s"}), table, wape, n_hours)


def fit_sources(genai_csv: str | Path = GENAI_DATASET, traces: Path = SHIPPED_TRACES_DIR) -> dict[str, DemandFit]:
    """Fit the presets (see :data:`PRESETS`) from the genai trace ``genai_csv`` (a path, or
    the optional dataset by default) and the Azure traces in ``traces``.

    Raises:
        TraceError: a trace is missing (the optional dataset's message says how to get it)."""
    from traffic.genai_trace import load_genai_trace

    created = load_genai_trace(genai_csv).created
    fits = {"genai_image": fit_demand(created[created >= np.datetime64(GENAI_FIT_FROM)])}
    for preset, name in (("azure_conv", "AzureLLMInferenceTrace_conv.csv"), ("azure_code", "AzureLLMInferenceTrace_code.csv")):
        stamps = pd.to_datetime(pd.read_csv(traces / name, usecols=["TIMESTAMP"])["TIMESTAMP"], format="ISO8601")
        fits[preset] = fit_demand(stamps.to_numpy())
    return fits


def main(argv: list[str] | None = None) -> int:
    """Print the fitted presets (as Python) and the genai trace's per-day error."""
    try:
        fits = fit_sources(argv[0]) if argv else fit_sources()
    except UserError as err:  # a missing trace: its message, no traceback
        print(f"demand_fit: error: {err}", file=sys.stderr)
        return 2
    for name, fit in fits.items():
        params = {k: (np.round(v, 4).tolist() if isinstance(v, list) else round(v, 6) if isinstance(v, float) else v)
                  for k, v in fit.params.items()}
        print(f"    {name!r}: {params},")
    genai = fits["genai_image"]
    print(genai.daily_totals.to_string(index=False), file=sys.stderr)
    print(f"genai_image: WAPE over whole days {genai.wape:.3f}; {genai.hours} hours", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
