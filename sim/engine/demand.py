"""Demand: every workload's arrivals and request shapes, drawn from the scenario seed.

Each workload draws from its own RNG streams, spawned from the scenario seed and the
workload's name (``SeedSequence([seed, crc32(name)])``), so adding a workload does not
shift another's arrivals, and every fleet sees the same requests (common random
numbers make the fleet comparison a paired one).

A workload's requests are drawn in windows: its arrival process yields its arrivals a
chunk at a time (:mod:`traffic.chunks`), and each chunk's token counts, steps, service
times and verifier draws are drawn from the workload's other streams right after. Two
ways to hold them, with identical requests:

- :func:`workload_demand` (in memory): every window concatenated into one
  :class:`WorkloadDemand`;
- :class:`DemandStream` (a streamed run): the windows drawn again as the run consumes
  them, so memory holds one window, not the run's demand. Its length is counted first
  by a pass over the arrivals alone.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, fields, replace
from typing import Iterator

import numpy as np

from fleets.catalog_io import load_catalog

from sim.errors import ScenarioError
from sim.scenario import Scenario
from sim.workloads import kind_of
from sim.workloads.base import Draws, RequestShapes
from sim.workloads.mix import draw_mix


@dataclass(frozen=True, slots=True)
class WorkloadDemand:
    """Arrays of one workload's requests (or of one window of them), aligned, shape (n,):
    ``arrival_s`` sorted seconds in [0, duration_s); token counts; denoising steps;
    service times (s). ``request_id`` (int64) gives each request's id when the run's ids
    are not consecutive from the workload's first (a cell's share of the demand)."""

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
    request_id: np.ndarray | None = None
    variant: np.ndarray | None = None  # model mix (sim.workloads.mix): checkpoint rank per request
    adapter: np.ndarray | None = None  # adapter id, -1 none
    lora: np.ndarray | None = None  # adapters to load
    prefix: np.ndarray | None = None  # object: per request its prompt blocks' chain keys (tuple), for a prefix cache

    def __len__(self) -> int:
        return len(self.arrival_s)

    def subset(self, keep: np.ndarray) -> WorkloadDemand:
        """The requests at indices (or boolean mask) ``keep``, every per-request array
        indexed alike (a field added later cannot be left unaligned)."""
        arrays = {f.name: getattr(self, f.name)[keep] for f in fields(self)
                  if isinstance(getattr(self, f.name), np.ndarray)}
        return replace(self, **arrays)

    def windows(self) -> Iterator[WorkloadDemand]:
        """The requests as consecutive windows: here all of them, at once."""
        yield self

    def most_images(self) -> int:
        """The most images one request asks for (1 when the workload replays none)."""
        return int(self.images.max()) if self.images is not None and len(self.images) else 1


CELL_STREAM = 0xCE11
"""Third word of the seed of a workload's cell-assignment stream (:class:`CellShare`)."""


@dataclass(frozen=True)
class CellShare:
    """Cell ``cell`` of ``cells``' share of a workload's requests (:mod:`sim.studies.cells`):
    every request goes to a cell drawn uniformly, independently, from a stream of its
    own, ``SeedSequence([seed, crc32(name), CELL_STREAM])``, drawn window by window;
    ``first_id`` is the id of the workload's first request in the whole demand."""

    cells: int
    cell: int
    first_id: int

    def rng(self, seed: int, name: str) -> np.random.Generator:
        """A fresh cell-assignment stream of workload ``name`` (the same for every cell)."""
        return np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(name.encode("utf-8")), CELL_STREAM]))


class DemandStream:
    """One workload's requests drawn window by window as a run consumes them
    (module docstring): ``windows()`` yields the :class:`WorkloadDemand` windows whose
    concatenation is :func:`workload_demand`, drawing afresh from the seed on every call.
    With ``share``, each window keeps only the cell's requests, with their ids in the
    whole demand as ``request_id``. ``len`` counts the requests by a pass over the
    arrivals (and cell draws) alone.
    """

    def __init__(self, scenario: Scenario, name: str, share: CellShare | None = None) -> None:
        self.scenario, self.name, self.share = scenario, name, share
        self.kind = scenario.workloads[name].kind
        self._count: int | None = None

    def __len__(self) -> int:
        if self._count is None:
            rng = _streams(self.scenario.seed, self.name)[0]
            arrival = self.scenario.workloads[self.name].arrival
            sizes = (len(c.times_s) for c in arrival.arrival_chunks(rng, self.scenario.duration_s))
            if self.share is None:
                self._count = sum(sizes)
            else:
                cells = self.share.rng(self.scenario.seed, self.name)
                self._count = sum(int(np.count_nonzero(cells.integers(0, self.share.cells, size=n) == self.share.cell))
                                  for n in sizes)
        return self._count

    def windows(self) -> Iterator[WorkloadDemand]:
        """The windows, drawn from the seed as they are iterated (errors in the arrival
        process's input are raised at this call)."""
        drawn = _windows(self.scenario, self.name)
        return drawn if self.share is None else self._shared(drawn)

    def _shared(self, drawn: Iterator[WorkloadDemand]) -> Iterator[WorkloadDemand]:
        share = self.share
        cells, first = share.rng(self.scenario.seed, self.name), share.first_id
        for window in drawn:
            keep = np.flatnonzero(cells.integers(0, share.cells, size=len(window)) == share.cell)
            yield replace(window.subset(keep), request_id=first + keep)
            first += len(window)

    def most_images(self) -> int:
        """The most images one request asks for (1 when the workload replays none); a
        replay of an image trace draws its windows once more to find it."""
        if getattr(self.scenario.workloads[self.name].arrival, "format", None) != "genai_csv":
            return 1
        return max((w.most_images() for w in self.windows()), default=1)

    def in_memory(self) -> WorkloadDemand:
        """Every window concatenated (one draw held in memory)."""
        return concatenate_windows(list(self.windows()))


def _streams(seed: int, name: str) -> list[np.random.Generator]:
    seq = np.random.SeedSequence([seed, zlib.crc32(name.encode("utf-8"))])
    return [np.random.default_rng(s) for s in seq.spawn(6)]


def _mix_stream(seed: int, name: str) -> np.random.Generator:
    """The model-mix stream of workload ``name``: the seventh child of its seed sequence
    (a child depends only on its index, so the six above are unchanged)."""
    seq = np.random.SeedSequence([seed, zlib.crc32(name.encode("utf-8"))])
    return np.random.default_rng(seq.spawn(7)[6])


def _windows(scenario: Scenario, name: str) -> Iterator[WorkloadDemand]:
    """Workload ``name``'s requests, one window per arrival chunk (module docstring).
    The arrival process is set up (and its input errors raised) at the call."""
    wl = scenario.workloads[name]
    kind = kind_of(wl)
    rng_arrival, *others = _streams(scenario.seed, name)
    draws = Draws(*others)
    chunks = wl.arrival.arrival_chunks(rng_arrival, scenario.duration_s)
    default_steps = kind.default_steps(wl, load_catalog())
    mix = getattr(wl, "mix", None)
    rng_mix = _mix_stream(scenario.seed, name) if mix is not None else None
    prefix_of = getattr(wl.arrival, "prefix_of", None) if _cached(scenario, name) else None
    key_base, key_span = 0, 0
    if prefix_of is not None:
        bases, key_span = prefix_key_ranges(scenario)
        key_base = bases.get(name, 0)
        if mix is not None:
            _check_key_room(name, mix, key_span)

    def draw() -> Iterator[WorkloadDemand]:
        for chunk in chunks:
            arrival_s = np.asarray(chunk.times_s, dtype=float)
            shapes = RequestShapes(len(arrival_s))
            kind.draw(wl, shapes, chunk.rows, draws, default_steps)
            if mix is not None:
                shapes.variant, shapes.adapter, shapes.lora = draw_mix(mix, wl.arrival, chunk.rows, rng_mix,
                                                                       len(arrival_s))
            prefix = prefix_of(chunk.rows) if prefix_of is not None and chunk.rows is not None else None
            if prefix is not None and mix is not None:
                prefix = request_keys(prefix, key_base, key_span, shapes.variant, shapes.adapter, mix.adapters)
            elif prefix is not None:
                prefix = request_keys(prefix, key_base)
            yield WorkloadDemand(name, wl.kind, arrival_s, shapes.prompt, shapes.output, shapes.steps,
                                 shapes.service, shapes.draws, shapes.images, shapes.cfg, None,
                                 shapes.variant, shapes.adapter, shapes.lora, prefix)

    return draw()


def prefix_key_ranges(scenario: Scenario) -> tuple[dict[str, int], int]:
    """Per workload whose requests carry prefix keys (it replays a trace with block hashes
    and a pool with a prefix cache serves it), the number added to its trace's chain keys;
    and the keys all those traces span together.

    A trace's chain keys are 0, 1, ... in first-seen order (:func:`traffic.prefix.chain_keys`)
    and a cache compares keys alone, so two traces' keys must not overlap: block ids of two
    different files do not stand for the same tokens (a Mooncake trace's ``hash_ids`` are its
    own), and without an offset one trace's key 7 would hit the other's. Each distinct trace
    file (by resolved path) gets the next free range, in the scenario's workload order (so
    runs are deterministic); workloads replaying the same file share its range, as they
    replay the same prompts."""
    bases: dict = {}
    by_file: dict = {}
    span = 0
    for name, wl in scenario.workloads.items():
        if getattr(wl.arrival, "prefix_of", None) is None or not _cached(scenario, name):
            continue
        trace = wl.arrival.trace()
        if trace.prefix_keys is None:
            continue
        if trace.source_path not in by_file:
            by_file[trace.source_path] = span
            span += trace.prefix_key_count
        bases[name] = by_file[trace.source_path]
    return bases, span


def request_keys(prefix: np.ndarray, key_base: int, key_span: int = 0, variant: np.ndarray | None = None,
                 adapter: np.ndarray | None = None, adapters: int = 0) -> np.ndarray:
    """The prefix keys a cache sees for requests whose trace keys are ``prefix``: each
    key plus its trace file's ``key_base`` (:func:`prefix_key_ranges`), and under a model
    mix (:mod:`sim.workloads.mix`, ``variant`` given) plus the range of the request's
    (checkpoint, adapter) pair.

    The KV of a prompt depends on the weights that computed it, so two checkpoints, or the
    same one with and without a LoRA adapter (whose deltas change the K and V
    projections), never share a block. vLLM puts the request's LoRA adapter in every
    block's hash for this reason (github.com/vllm-project/vllm,
    ``vllm/v1/core/kv_cache_utils.py``: ``_gen_lora_extra_hash_keys``, called by
    ``generate_block_hash_extra_keys``; the adapter's id, later its name; 2025). Request
    i's keys move by ``key_span × (variant × (adapters + 1) + adapter + 1)`` (``adapter``
    −1: none), so checkpoint 0 without an adapter keeps the keys a workload without a mix
    has.

    Args:
        prefix: object array of key tuples, shape (n,), as the trace numbers them.
        key_base: the trace file's first key (:func:`prefix_key_ranges`).
        key_span: the keys the scenario's traces span (:func:`prefix_key_ranges`); with a mix.
        variant: checkpoint rank per request, int shape (n,); None: no mix.
        adapter: adapter id per request, −1 none, int shape (n,); with ``variant``.
        adapters: the mix's adapter count.
    Returns:
        An object array of key tuples, shape (n,): ``prefix`` itself when no key moves."""
    shifts = np.full(len(prefix), key_base, dtype=np.int64)
    if variant is not None:
        shifts += (variant.astype(np.int64) * (adapters + 1) + adapter.astype(np.int64) + 1) * key_span
    if not shifts.any():
        return prefix
    out = np.empty(len(prefix), dtype=object)
    out[:] = [keys if not shift else tuple(k + shift for k in keys)
              for keys, shift in zip(prefix.tolist(), shifts.tolist())]
    return out


def _check_key_room(name: str, mix, key_span: int) -> None:
    """Raise ScenarioError if workload ``name``'s (checkpoint, adapter) key ranges
    (:func:`request_keys`) pass the caches' 63-bit keys."""
    if mix.models * (mix.adapters + 1) * key_span >= 2**63:
        raise ScenarioError(
            f"workloads.{name}.mix: models × (adapters + 1) × the {key_span:,} distinct prefix blocks of the "
            f"scenario's traces is past 2**63, the prefix cache's key range (each checkpoint and adapter "
            f"caches its own blocks); use fewer models or adapters")


def _cached(scenario: Scenario, name: str) -> bool:
    """Does a pool with a prefix cache serve workload ``name`` (its requests then carry
    their prefix keys)?"""
    return any(p.prefix_cache is not None and any(s.split(":")[0] == name for s in p.serves)
               for f in scenario.fleets for p in f.pools)


def workload_demand(scenario: Scenario, name: str) -> WorkloadDemand:
    """Draw the requests of workload ``name``, all at once (module docstring)."""
    return concatenate_windows(list(_windows(scenario, name)))


def concatenate_windows(parts: list[WorkloadDemand]) -> WorkloadDemand:
    """Consecutive windows of one workload as one (``parts`` not empty: every arrival
    process yields at least one chunk, :mod:`traffic.chunks`)."""
    if len(parts) == 1:
        return parts[0]
    merged = {f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(WorkloadDemand)
              if isinstance(getattr(parts[0], f.name), np.ndarray)}
    return replace(parts[0], **merged)


def generate_demand(scenario: Scenario) -> dict[str, WorkloadDemand]:
    """All workloads' requests, in memory, in the scenario's workload order."""
    return {name: workload_demand(scenario, name) for name in scenario.workloads}


def demand_streams(scenario: Scenario) -> dict[str, DemandStream]:
    """All workloads' requests as :class:`DemandStream` s (drawn as a run consumes them),
    in the scenario's workload order."""
    return {name: DemandStream(scenario, name) for name in scenario.workloads}
