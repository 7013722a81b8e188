"""Arrival processes: when requests reach the fleet.

Each process is a pydantic model (its YAML configuration) with
``arrival_chunks(rng, duration_s)`` -> its arrivals in [0, duration_s) as sorted,
consecutive :class:`traffic.chunks.ArrivalChunk` s (a long run is drawn a chunk at a
time, see :mod:`traffic.chunks`), ``arrival_times(rng, duration_s)`` -> all of them,
sorted float64 seconds (the chunks concatenated), drawn only from the numpy Generator it
is given, and an analytic ``mean_rate_per_s``. The YAML key ``kind`` selects the class::

    arrivals: {kind: poisson, rate_per_s: 5.5, diurnal: {amplitude: 0.4}}
    arrivals: {kind: gamma, rate_per_s: 2.6, cv: 3.0}
    arrivals: {kind: mmpp, rates_per_s: [2, 10], mean_dwell_s: [600, 60]}
    arrivals: {kind: trace, path: traces/conv.csv, format: azure_csv, rate_scale: 2.0}

Synthetic processes (poisson, gamma, mmpp) accept an optional ``diurnal`` modulation
applied by thinning (Lewis & Shedler 1979): the base process is generated at its peak
rate base·(1 + a) and each arrival at t is kept with probability
(1 + a·sin(2π(t - phase_s)/period_s)) / (1 + a). Over whole periods the sine averages to
zero, so ``mean_rate_per_s`` is the base rate. Thinning preserves Poisson and MMPP
structure; a thinned gamma renewal process is no longer exactly gamma (its CV moves
towards 1 as the amplitude grows).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Iterator, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from sim.errors import TraceError
from traffic.chunks import ArrivalChunk, concatenate, piecewise_poisson, renewal, replay
from traffic.demand_fit import FittedArrivals
from traffic.genai_trace import GenaiTraceArrivals
from traffic.limits import MAX_RATE_PER_S, MAX_STATE_CHANGES, check_count
from traffic.traces import FilePath, Trace, TraceFormat, load_trace

Rate = Annotated[float, Field(gt=0, le=MAX_RATE_PER_S)]
Seconds = Annotated[float, Field(gt=0, le=10 * 365 * 86400)]


def _check_duration(duration_s: float) -> None:
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ValueError(f"duration_s(={duration_s}) must be finite and > 0")


class Diurnal(BaseModel):
    """Sinusoidal day/night modulation: rate(t) = base·(1 + amplitude·sin(2π(t - phase_s)/period_s))."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    amplitude: float = Field(ge=0, lt=1)
    period_s: Seconds = 86400.0
    phase_s: float = Field(0.0, ge=-10 * 365 * 86400, le=10 * 365 * 86400)

    def factor(self, at_s: np.ndarray) -> np.ndarray:
        """Rate multiplier at instants ``at_s`` (seconds); same shape as ``at_s``."""
        return 1.0 + self.amplitude * np.sin(2.0 * np.pi * (at_s - self.phase_s) / self.period_s)


class _Synthetic(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    diurnal: Diurnal | None = None

    def arrival_times(self, rng: np.random.Generator, duration_s: float) -> np.ndarray:
        """Sorted arrival instants in [0, duration_s), float64 shape (k,), k random.

        Raises:
            ValueError: duration_s not finite and > 0.
        """
        return concatenate(self.arrival_chunks(rng, duration_s)).times_s

    def arrival_chunks(self, rng: np.random.Generator, duration_s: float) -> Iterator[ArrivalChunk]:
        """The arrivals of :meth:`arrival_times`, a chunk at a time (:mod:`traffic.chunks`);
        the diurnal thinning draws its uniforms for each base chunk right after it.

        Raises (at the call, before any draw):
            ValueError: duration_s not finite and > 0.
            UserError: more expected arrivals than :data:`traffic.limits.MAX_ARRIVALS`.
        """
        _check_duration(duration_s)
        peak = 1.0 + (self.diurnal.amplitude if self.diurnal else 0.0)
        check_count(self.mean_rate_per_s * peak * duration_s, f"{self.kind} arrivals")
        return self._thinned(rng, self._base_chunks(rng, duration_s, peak), peak)

    def _thinned(self, rng: np.random.Generator, base: Iterator[np.ndarray], peak: float) -> Iterator[ArrivalChunk]:
        for times in base:
            if self.diurnal is not None:
                keep = rng.random(times.size) * peak < self.diurnal.factor(times)
                times = times[keep]
            yield ArrivalChunk(times)

    def _base_chunks(self, rng: np.random.Generator, duration_s: float, scale: float) -> Iterator[np.ndarray]:
        """Arrivals of the process with every rate multiplied by ``scale``, in chunks
        (anything drawn up front, such as MMPP sojourns, is drawn at the call)."""
        raise NotImplementedError

    @property
    def mean_rate_per_s(self) -> float:
        """Long-run mean arrival rate (requests/s); the diurnal factor averages to 1."""
        raise NotImplementedError


class PoissonArrivals(_Synthetic):
    """Poisson process: exponential inter-arrivals of mean 1/rate_per_s."""

    kind: Literal["poisson"] = "poisson"
    rate_per_s: Rate

    def _base_chunks(self, rng: np.random.Generator, duration_s: float, scale: float) -> Iterator[np.ndarray]:
        return piecewise_poisson(rng, np.array([0.0]), np.array([duration_s]), np.array([self.rate_per_s * scale]))

    @property
    def mean_rate_per_s(self) -> float:
        return self.rate_per_s


class GammaArrivals(_Synthetic):
    """Renewal process with gamma inter-arrivals of mean 1/rate_per_s and CV ``cv``.

    Shape k = 1/cv², scale = 1/(rate·k); cv = 1 is Poisson, cv > 1 is bursty. It is an
    ordinary renewal process: the first arrival is one inter-arrival after t = 0, so the
    expected count over T is rate·T + (cv² - 1)/2 + o(1) (Cox, Renewal Theory, 1962).
    """

    kind: Literal["gamma"] = "gamma"
    rate_per_s: Rate
    cv: float = Field(gt=0, le=100, description="coefficient of variation of inter-arrivals, (0, 100]")

    def _base_chunks(self, rng: np.random.Generator, duration_s: float, scale: float) -> Iterator[np.ndarray]:
        shape = 1.0 / self.cv**2
        gap_scale_s = 1.0 / (self.rate_per_s * scale * shape)
        return renewal(rng, shape, gap_scale_s, self.rate_per_s * scale * duration_s, self.cv, duration_s)

    @property
    def mean_rate_per_s(self) -> float:
        return self.rate_per_s


class MMPPArrivals(_Synthetic):
    """Markov-modulated Poisson process.

    State i emits Poisson arrivals at ``rates_per_s[i]`` for an exponential dwell of mean
    ``mean_dwell_s[i]``, then moves to state (i + 1) mod n (a cycle; with two states this
    is the usual on/off MMPP). The start state is drawn with probability proportional to
    its mean dwell, which with memoryless dwells makes the process stationary from t = 0.
    Mean rate = Σ rate_i·dwell_i / Σ dwell_i (time-weighted; holds for any routing whose
    embedded chain visits states equally often, the cycle included).
    """

    kind: Literal["mmpp"] = "mmpp"
    rates_per_s: list[Annotated[float, Field(ge=0, le=MAX_RATE_PER_S)]] = Field(min_length=2, max_length=64)
    mean_dwell_s: list[Annotated[float, Field(gt=0, le=10 * 365 * 86400)]] = Field(min_length=2, max_length=64)

    @model_validator(mode="after")
    def _check_states(self) -> MMPPArrivals:
        if len(self.rates_per_s) != len(self.mean_dwell_s):
            raise ValueError(
                f"mmpp needs one mean_dwell_s per state: {len(self.rates_per_s)} rates_per_s, "
                f"{len(self.mean_dwell_s)} mean_dwell_s"
            )
        if max(self.rates_per_s) <= 0:
            raise ValueError(f"mmpp rates_per_s must have at least one rate > 0, got {self.rates_per_s}")
        return self

    def _sojourns(self, rng: np.random.Generator, duration_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(state, start_s, length_s) of every sojourn overlapping [0, duration_s)."""
        dwell = np.asarray(self.mean_dwell_s)
        n_states = dwell.size
        state0 = int(rng.choice(n_states, p=dwell / dwell.sum()))
        check_count(n_states * duration_s / dwell.sum(), "mmpp (short mean_dwell_s)", MAX_STATE_CHANGES, "state changes")
        chunk = int(n_states * duration_s / dwell.sum()) + 2 * n_states + 8
        states, lengths, total_s = [], [], 0.0
        while total_s < duration_s:
            chunk_states = (state0 + sum(s.size for s in states) + np.arange(chunk)) % n_states
            chunk_lengths = rng.exponential(dwell[chunk_states])
            states.append(chunk_states)
            lengths.append(chunk_lengths)
            total_s += float(chunk_lengths.sum())
        state, length_s = np.concatenate(states), np.concatenate(lengths)
        start_s = np.concatenate(([0.0], np.cumsum(length_s)[:-1]))
        inside = start_s < duration_s
        state, start_s = state[inside], start_s[inside]
        return state, start_s, np.minimum(length_s[inside], duration_s - start_s)

    def _base_chunks(self, rng: np.random.Generator, duration_s: float, scale: float) -> Iterator[np.ndarray]:
        state, start_s, length_s = self._sojourns(rng, duration_s)  # O(state changes), drawn first
        return piecewise_poisson(rng, start_s, length_s, np.asarray(self.rates_per_s)[state] * scale)

    @property
    def mean_rate_per_s(self) -> float:
        return float(np.dot(self.rates_per_s, self.mean_dwell_s) / np.sum(self.mean_dwell_s))


class TraceArrivals(BaseModel):
    """Replay of a recorded trace (see :mod:`traffic.traces`).

    Trace instant t (seconds after the trace's first request) with t >= ``start_s`` arrives
    at (t - start_s) / rate_scale; rate_scale = 2 replays twice as fast. Without ``loop``
    the replay ends with the trace; with ``loop`` the segment repeats with period
    P = (last - start_s) + g trace-seconds, g being the segment's mean inter-arrival gap,
    so the join looks like any other gap. ``path`` is relative to the current directory
    unless absolute. ``arrival_times`` ignores its rng: a replay is deterministic.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["trace"] = "trace"
    path: FilePath
    format: TraceFormat
    rate_scale: float = Field(1.0, gt=0, le=1e6, description="replay speed-up, (0, 1e6]")
    start_s: float = Field(0.0, ge=0, le=10 * 365 * 86400)
    loop: bool = False

    def with_path(self, new_path: str | Path) -> TraceArrivals:
        """A copy reading ``new_path`` instead (the CLI ``--trace`` override)."""
        return self.model_copy(update={"path": Path(new_path)})

    def trace(self) -> Trace:
        """The loaded trace; raises TraceError for a missing or malformed file."""
        return load_trace(self.path, self.format)

    def _segment(self) -> tuple[np.ndarray, np.ndarray]:
        """(trace-seconds after start_s, row index) of the rows at or after start_s."""
        trace = self.trace()
        first = int(np.searchsorted(trace.arrival_s, self.start_s, side="left"))
        if first == trace.rows:
            raise TraceError(
                f"{trace.source_path}: start_s={self.start_s} is beyond the trace span ({trace.span_s:.1f} s)"
            )
        return trace.arrival_s[first:] - self.start_s, np.arange(first, trace.rows)

    def _period_s(self, offsets_s: np.ndarray) -> float:
        if offsets_s.size < 2 or offsets_s[-1] <= offsets_s[0]:
            raise TraceError(
                f"{self.path}: loop needs at least two distinct arrival times after start_s={self.start_s}"
            )
        return float(offsets_s[-1] + (offsets_s[-1] - offsets_s[0]) / (offsets_s.size - 1))

    def arrival_chunks(self, rng: np.random.Generator | None, duration_s: float) -> Iterator[ArrivalChunk]:
        """The replayed arrivals in [0, duration_s) with their trace rows, a chunk at a
        time (:func:`traffic.chunks.replay`); ``rng`` is unused.

        Raises (at the call):
            TraceError: bad trace file, start_s past the end, or loop over < 2 distinct times.
            ValueError: duration_s not finite and > 0.
            UserError: more arrivals than :data:`traffic.limits.MAX_ARRIVALS`.
        """
        _check_duration(duration_s)
        offsets_s, rows = self._segment()
        period_s = self._period_s(offsets_s) if self.loop else None
        return replay(offsets_s, rows, self.rate_scale, period_s, duration_s, f"trace {self.path}")

    def arrival_times(self, rng: np.random.Generator | None, duration_s: float) -> np.ndarray:
        """Sorted arrival instants in [0, duration_s), float64 shape (k,); ``rng`` is unused.

        Raises:
            TraceError: bad trace file, start_s past the end, or loop over < 2 distinct times.
            ValueError: duration_s not finite and > 0.
        """
        return concatenate(self.arrival_chunks(rng, duration_s)).times_s

    def lengths(self, duration_s: float) -> tuple[np.ndarray, np.ndarray]:
        """(prompt_tokens, output_tokens), int64 shape (k,), aligned with ``arrival_times``."""
        return self.lengths_of(concatenate(self.arrival_chunks(None, duration_s)).rows)

    def lengths_of(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(prompt_tokens, output_tokens) of trace rows ``rows``, int64 shape (k,).

        Zero counts in the trace are raised to 1 (as ``sample_tokens`` does): every request
        has a prompt and produces at least its first token.
        """
        trace = self.trace()
        return np.maximum(trace.prompt_tokens[rows], 1), np.maximum(trace.output_tokens[rows], 1)

    def prefix_of(self, rows: np.ndarray) -> np.ndarray | None:
        """The prompt blocks' chain keys (:mod:`traffic.prefix`) of trace rows ``rows``, as
        the trace numbers them (a scenario moves them to a range of the trace file's own:
        :func:`sim.engine.demand.request_keys`): an object array of tuples, shape (k,), or
        None when the trace carries no hashes."""
        keys = self.trace().prefix_keys
        if keys is None:
            return None
        out = np.empty(len(rows), dtype=object)
        out[:] = [keys[i] for i in rows.tolist()]
        return out

    def mean_lengths(self) -> tuple[float, float]:
        """(mean prompt tokens, mean output tokens) of the replayed rows (those at or
        after ``start_s``), zero counts raised to 1 as in :meth:`lengths_of`."""
        prompt, output = self.lengths_of(self._segment()[1])
        return float(prompt.mean()), float(output.mean())

    @property
    def mean_rate_per_s(self) -> float:
        """Requests/s: rows/(last - start_s)·rate_scale (trace_summary.csv convention), or
        rows/P·rate_scale when looping."""
        offsets_s, _ = self._segment()
        span_s = self._period_s(offsets_s) if self.loop else float(offsets_s[-1])
        return offsets_s.size * self.rate_scale / span_s if span_s > 0 else math.inf


AnyTraceArrivals = Annotated[Union[TraceArrivals, GenaiTraceArrivals], Field(discriminator="format")]
ArrivalProcess = Annotated[
    Union[PoissonArrivals, GammaArrivals, MMPPArrivals, AnyTraceArrivals, FittedArrivals],
    Field(discriminator="kind"),
]
ARRIVAL_ADAPTER: TypeAdapter[ArrivalProcess] = TypeAdapter(ArrivalProcess)
