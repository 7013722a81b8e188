"""Demand: every workload's arrivals and request shapes, drawn once per scenario.

Each workload draws from its own RNG streams, spawned from the scenario seed and the
workload's name (``SeedSequence([seed, crc32(name)])``), so adding a workload does not
shift another's arrivals, and every fleet sees the same requests (common random
numbers make the fleet comparison a paired one).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, fields, replace

import numpy as np

from fleets.catalog_io import load_catalog

from sim.scenario import Scenario
from traffic.distributions import sample_tokens


@dataclass(frozen=True, slots=True)
class WorkloadDemand:
    """Arrays of one workload's requests, aligned, shape (n,): ``arrival_s`` sorted
    seconds in [0, duration_s); token counts; denoising steps; service times (s)."""

    name: str
    kind: str
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    steps: np.ndarray
    service_s: np.ndarray
    draws: np.ndarray | None = None  # branching search: failures per (request, checkpoint, candidate)
    images: np.ndarray | None = None  # image diffusion trace replay: samples per request
    cfg: np.ndarray | None = None  # image diffusion trace replay: int8 CFG 1/0, -1 the workload's

    def __len__(self) -> int:
        return len(self.arrival_s)

    def subset(self, keep: np.ndarray) -> WorkloadDemand:
        """The requests at indices (or boolean mask) ``keep``, every per-request array
        indexed alike (a field added later cannot be left unaligned)."""
        arrays = {f.name: getattr(self, f.name)[keep] for f in fields(self)
                  if isinstance(getattr(self, f.name), np.ndarray)}
        return replace(self, **arrays)


def _streams(seed: int, name: str) -> list[np.random.Generator]:
    seq = np.random.SeedSequence([seed, zlib.crc32(name.encode("utf-8"))])
    return [np.random.default_rng(s) for s in seq.spawn(6)]


def workload_demand(scenario: Scenario, name: str) -> WorkloadDemand:
    """Draw the requests of workload ``name`` (see module docstring)."""
    wl = scenario.workloads[name]
    rng_arrival, rng_prompt, rng_output, rng_steps, rng_service, rng_verify = _streams(scenario.seed, name)
    rows = None
    if getattr(wl.arrival, "format", None) == "genai_csv":
        arrival_s, rows = wl.arrival.select(rng_arrival, scenario.duration_s)
    else:
        arrival_s = np.asarray(wl.arrival.arrival_times(rng_arrival, scenario.duration_s), dtype=float)
    n = len(arrival_s)
    zeros = np.zeros(n, dtype=np.int64)
    prompt, output, steps, service = zeros, zeros, zeros, np.zeros(n)
    if wl.kind in ("autoregressive", "diffusion_lm"):
        prompt = sample_tokens(wl.prompt_tokens, rng_prompt, n)
        output = sample_tokens(wl.output_tokens, rng_output, n)
        if wl.arrival.kind == "trace":
            trace_prompt, trace_output = wl.arrival.lengths(scenario.duration_s)
            if "prompt_tokens" not in wl.model_fields_set:
                prompt = np.asarray(trace_prompt, dtype=np.int64)
            if "output_tokens" not in wl.model_fields_set:
                output = np.asarray(trace_output, dtype=np.int64)
    if wl.kind == "diffusion_lm":
        if wl.steps is None:  # the catalog's default steps for this model
            steps = np.full(n, load_catalog().model(wl.model).default_steps or 1, dtype=np.int64)
        else:
            steps = sample_tokens(wl.steps, rng_steps, n)
    if wl.kind == "service_time":
        service = np.asarray(wl.service_s.sample(rng_service, n), dtype=float)
    draws = _verifier_failures(wl, rng_verify, n)
    images = cfg = None
    if rows is not None:  # a genai_csv replay: per-request steps (unless the workload sets them), images, CFG
        shapes = wl.arrival.request_shapes(rows)
        steps = np.zeros(n, dtype=np.int64) if "steps" in wl.model_fields_set else shapes["steps"]
        images, cfg = shapes["images"], shapes["cfg"]
    return WorkloadDemand(name, wl.kind, arrival_s, prompt, output, steps, service, draws, images, cfg)


def _verifier_failures(wl, rng: np.random.Generator, n: int) -> np.ndarray | None:
    """Branching search with a fallible verifier: for every request, checkpoint and
    candidate, how many checks fail before one passes (geometric with failure
    probability p), capped at the retry budget. Shape (n, checkpoints, k), int16."""
    verifier = getattr(wl, "verifier", None)
    if wl.kind != "branching_search" or verifier is None or verifier.fail_probability == 0:
        return None
    shape = (n, len(wl.checkpoints), wl.candidates_k)
    failures = rng.geometric(1.0 - verifier.fail_probability, size=shape) - 1
    return np.minimum(failures, verifier.retry_budget).astype(np.int16)


def generate_demand(scenario: Scenario) -> dict[str, WorkloadDemand]:
    """All workloads' requests, in the scenario's workload order."""
    return {name: workload_demand(scenario, name) for name in scenario.workloads}
