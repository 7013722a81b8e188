"""Distributions of request lengths, step counts and service times.

Each distribution is a pydantic model that is both its YAML configuration and its
behaviour (the Ciw pattern): ``sample(rng, n)`` draws ``n`` float64 values with the
numpy Generator it is given (never the global RNG) and ``mean`` is the exact analytic
mean of what ``sample`` draws. The YAML key ``kind`` selects the class::

    prompt_tokens: {kind: lognormal, median: 760, sigma: 0.985, min: 2, max: 14050}
    steps: {kind: choice, values: [8, 16, 32], weights: [1, 2, 1]}
    output_tokens: {kind: empirical, trace: {path: t.csv, format: azure_csv, field: output_tokens}}

All values are non-negative quantities (tokens, steps, seconds).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, TypeAdapter, model_validator
from scipy.special import ndtr

from traffic.traces import FilePath, TraceFormat, load_trace

MAX_SAMPLED_TOKENS = 10_000_000
"""Upper clip of sampled token and step counts (a lognormal tail must not overflow int64)."""


class _Dist(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw ``n`` values; returns float64 of shape (n,)."""
        raise NotImplementedError

    @property
    def mean(self) -> float:
        """Exact mean of the sampled variable."""
        raise NotImplementedError


class ConstantDist(_Dist):
    """Always ``value``."""

    kind: Literal["constant"] = "constant"
    value: NonNegativeFloat

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, dtype=np.float64)

    @property
    def mean(self) -> float:
        return self.value


class UniformDist(_Dist):
    """Uniform on [low, high); requires 0 <= low < high."""

    kind: Literal["uniform"] = "uniform"
    low: NonNegativeFloat
    high: NonNegativeFloat

    @model_validator(mode="after")
    def _check_order(self) -> UniformDist:
        if not self.low < self.high:
            raise ValueError(f"uniform needs low < high, got low={self.low}, high={self.high}")
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.uniform(self.low, self.high, size=n)

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2.0


class ExponentialDist(_Dist):
    """Exponential with the given ``mean`` (> 0)."""

    kind: Literal["exponential"] = "exponential"
    mean_value: float = Field(gt=0, alias="mean")
    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.exponential(self.mean_value, size=n)

    @property
    def mean(self) -> float:
        return self.mean_value


class LognormalDist(_Dist):
    """exp(N(ln median, sigma²)) clipped to [min, max] (``max=None``: no upper clip).

    ``mean`` is the exact mean of the clipped variable X_c = clip(X, a, b):
    E[X_c] = a·P(X<a) + E[X; a<=X<=b] + b·P(X>b), with the lognormal partial expectation
    E[X; a<=X<=b] = exp(mu + sigma²/2)·[Φ((ln b - mu - sigma²)/sigma) - Φ((ln a - mu - sigma²)/sigma)].
    """

    kind: Literal["lognormal"] = "lognormal"
    median: float = Field(gt=0)
    sigma: float = Field(gt=0)
    min: NonNegativeFloat = 1.0
    max: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check_bounds(self) -> LognormalDist:
        if self.max is not None and not self.min < self.max:
            raise ValueError(f"lognormal needs min < max, got min={self.min}, max={self.max}")
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raw = rng.lognormal(math.log(self.median), self.sigma, size=n)
        return np.clip(raw, self.min, math.inf if self.max is None else self.max)

    @property
    def mean(self) -> float:
        mu, s = math.log(self.median), self.sigma
        ln_a = math.log(self.min) if self.min > 0 else -math.inf
        ln_b = math.inf if self.max is None else math.log(self.max)
        below = self.min * ndtr((ln_a - mu) / s)
        above = 0.0 if self.max is None else self.max * ndtr((mu - ln_b) / s)
        inside = math.exp(mu + s * s / 2) * (ndtr((ln_b - mu - s * s) / s) - ndtr((ln_a - mu - s * s) / s))
        return float(below + inside + above)


class ChoiceDist(_Dist):
    """One of ``values`` with probabilities proportional to ``weights`` (equal if None)."""

    kind: Literal["choice"] = "choice"
    values: list[NonNegativeFloat] = Field(min_length=1)
    weights: list[NonNegativeFloat] | None = None

    @model_validator(mode="after")
    def _check_weights(self) -> ChoiceDist:
        if self.weights is None:
            return self
        if len(self.weights) != len(self.values):
            raise ValueError(
                f"choice needs one weight per value: {len(self.values)} values, {len(self.weights)} weights"
            )
        if sum(self.weights) <= 0:
            raise ValueError(f"choice weights must sum to > 0, got {self.weights}")
        return self

    def _probabilities(self) -> np.ndarray:
        weights = np.ones(len(self.values)) if self.weights is None else np.asarray(self.weights, dtype=np.float64)
        return weights / weights.sum()

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(np.asarray(self.values, dtype=np.float64), size=n, p=self._probabilities())

    @property
    def mean(self) -> float:
        return float(np.dot(self.values, self._probabilities()))


class TraceRef(BaseModel):
    """A column of a trace file; ``path`` is relative to the current directory unless absolute."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    path: FilePath
    format: TraceFormat
    field: Literal["prompt_tokens", "output_tokens"]

    def values(self) -> np.ndarray:
        """The column as float64; raises TraceError for a missing or malformed file."""
        trace = load_trace(self.path, self.format)
        return getattr(trace, self.field).astype(np.float64)


class EmpiricalDist(_Dist):
    """Resampling (with replacement) of observed values: exactly one of ``trace``/``values``.

    ``mean`` is the sample mean of the values, which is the exact mean of the resampling.
    """

    kind: Literal["empirical"] = "empirical"
    trace: TraceRef | None = None
    values: list[NonNegativeFloat] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _check_one_source(self) -> EmpiricalDist:
        if (self.trace is None) == (self.values is None):
            raise ValueError("empirical needs exactly one of 'trace' or 'values'")
        return self

    def observed(self) -> np.ndarray:
        """The observed values, float64 shape (k,); raises TraceError when read from a bad trace."""
        return self.trace.values() if self.trace is not None else np.asarray(self.values, dtype=np.float64)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        observed = self.observed()
        return observed[rng.integers(0, observed.size, size=n)]

    @property
    def mean(self) -> float:
        return float(self.observed().mean())


Distribution = Annotated[
    Union[ConstantDist, UniformDist, ExponentialDist, LognormalDist, ChoiceDist, EmpiricalDist],
    Field(discriminator="kind"),
]
DISTRIBUTION_ADAPTER: TypeAdapter[Distribution] = TypeAdapter(Distribution)


def sample_tokens(dist: Distribution, rng: np.random.Generator, n: int) -> np.ndarray:
    """Draw ``n`` token counts: values rounded to nearest, clipped to [1, MAX_SAMPLED_TOKENS]
    (so no draw overflows int64); int64 shape (n,)."""
    return np.clip(np.rint(dist.sample(rng, n)), 1, MAX_SAMPLED_TOKENS).astype(np.int64)


def fit_lognormal(values: np.ndarray | list[float]) -> tuple[float, float]:
    """Maximum-likelihood lognormal fit: (median, sigma) = (exp(mean ln x), std ln x, ddof=0).

    Note the fitted median is the geometric mean of the data, which equals the sample
    median only when ln x is symmetric; the Azure conv prompts are left-skewed in log
    space, so their fit median (760) is 25% below the sample median (1020).

    Raises:
        ValueError: fewer than two values, or any value not finite and > 0.
    """
    data = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(data) | (data <= 0)
    if data.size < 2 or bad.any():
        raise ValueError(
            f"fit_lognormal needs >= 2 finite values > 0; got {data.size} values, {int(bad.sum())} invalid"
        )
    logs = np.log(data)
    return float(np.exp(logs.mean())), float(logs.std())


# Fitted 2026-11-21 with `python -m traffic.fit ../shared/data/traces/AzureLLMInferenceTrace_conv.csv`
# (the same bytes as the shipped traffic/data/AzureLLMInferenceTrace_conv.csv;
# fit_lognormal on ContextTokens / GeneratedTokens of all 19,366 rows; min/max are the
# trace's observed extremes). Source trace: github.com/Azure/AzurePublicDataset
# data/AzureLLMInferenceTrace_conv.csv @b469a11 (CC-BY; Splitwise, ISCA 2024).
# Sample medians are 1020 / 129 and means 1154.7 / 211.1 (trace_summary.csv); these fits
# have medians 760.0 (-25%) / 151.3 (+17%) and exact clipped means 1226.5 (+6.2%) /
# 213.0 (+0.9%): the mean load is close, the shape is not (the data are not lognormal).
AZURE_CONV_PROMPT_LOGNORMAL = LognormalDist(median=759.996, sigma=0.9852, min=2, max=14050)
AZURE_CONV_OUTPUT_LOGNORMAL = LognormalDist(median=151.259, sigma=0.8590, min=7, max=1000)
