"""Request outcomes as NumPy columns, recorded when a request finishes.

The engine keeps a :class:`~sim.engine.request.Request` only while it is in flight. When
it finishes (completed or rejected: :meth:`sim.engine.run.RunContext.request_finished`)
:meth:`Outcomes.record` copies its outcome fields into a small pending batch; every
:data:`CHUNK_ROWS` finished requests the batch becomes NumPy columns and the objects are
gone. Requests still in flight when the run ends are recorded last
(:meth:`Outcomes.finish_in_flight`).

Two sinks:

- in memory (``sink=None``): each batch is written *by request id* into a record table
  preallocated for every id of the demand; :meth:`Outcomes.columns` returns the rows in id
  order. About 190 bytes per request (the raw columns) instead of ~590 for the objects.
- streaming (``sink`` a callable): each batch is handed to ``sink(columns, shares)`` in
  completion order and dropped, so memory does not grow with the request count.

``shares`` lists, for requests whose journey crossed pools, the replica-seconds held on
each pool: columns ``request_id``, ``pool`` (index) and ``busy_share_s``.
"""

from __future__ import annotations

from array import array
from typing import Callable

import numpy as np

from sim.engine.request import Request

CHUNK_ROWS = 1 << 16
"""Finished requests pending in the batch buffers before they become columns (~12 MB)."""

OUTCOME_FIELDS = (
    "id", "workload", "pool", "replica", "status", "reason", "arrival_at_s", "admitted_at_s", "images",
    "first_token_at_s", "done_at_s", "prompt_tokens", "output_tokens", "steps", "sample_steps",
    "denoiser_flops", "preemptions", "share_s", "verifier_calls", "handoffs", "handoff_s",
    "handoff_wait_s", "branches", "memory_wait_s", "decode_pool", "kv_src_replica", "kv_transfer_bytes",
    "kv_transfer_s", "decode_queue_s", "kv_done_at_s", "cached_tokens", "prefill_flops_saved",
    "host_cached_tokens", "ssd_cached_tokens", "shared_cached_tokens",
)
INT_FIELDS = (
    "id", "workload", "pool", "replica", "status", "images", "prompt_tokens", "output_tokens", "steps",
    "sample_steps", "preemptions", "verifier_calls", "handoffs", "branches", "decode_pool", "kv_src_replica",
    "cached_tokens", "host_cached_tokens", "ssd_cached_tokens", "shared_cached_tokens",
)
"""The int64 outcome fields, in the order :meth:`Outcomes.record` writes them in a row."""
FLOAT_FIELDS = (
    "arrival_at_s", "admitted_at_s", "first_token_at_s", "done_at_s", "denoiser_flops", "share_s",
    "handoff_s", "handoff_wait_s", "memory_wait_s", "kv_transfer_bytes", "kv_transfer_s", "decode_queue_s",
    "kv_done_at_s", "prefill_flops_saved",
)
"""The float64 outcome fields, in the order :meth:`Outcomes.record` writes them in a row."""
_N_INT, _N_FLOAT = len(INT_FIELDS), len(FLOAT_FIELDS)
_DTYPES = {f: (np.float64 if f in FLOAT_FIELDS else object if f == "reason" else np.int64) for f in OUTCOME_FIELDS}
_FILL = {np.float64: np.nan, np.int64: 0, object: ""}
_RECORD = np.dtype([(f, _DTYPES[f]) for f in OUTCOME_FIELDS])
"""One outcome row of the in-memory table."""

Sink = Callable[[dict, dict], None]


def empty_shares() -> dict:
    """Pool-share columns with no rows: ``request_id`` and ``pool`` int64, ``busy_share_s``
    float64 (replica-seconds), each of shape (0,)."""
    return {"request_id": np.zeros(0, dtype=np.int64), "pool": np.zeros(0, dtype=np.int64),
            "busy_share_s": np.zeros(0)}


class Outcomes:
    """Collects finished requests' outcomes (see module docstring).

    A finished request's fields are written as C values into two row-major batch buffers,
    ``array("q")`` for the int fields and ``array("d")`` for the float ones (typed views
    in the compiled build, ``outcomes.pxd``), and its ``reason`` into a list: no tuple,
    no boxed number, nothing for the garbage collector to visit. A row of tuples (the
    previous design) was 24 boxed values per request; at 4,096 replicas the pending rows
    were cold when the young collections between event-loop chunks visited them.

    Args:
        ids: number of request ids of the demand (ids are 0 … ids − 1), or the sorted
            ids themselves when they are not consecutive (int64 shape (n,), a cell's
            share); sizes the in-memory columns, unused when streaming.
        sink: ``sink(columns, shares)`` receives each batch when streaming; None keeps
            every row in memory.
    """

    def __init__(self, ids: int | np.ndarray, sink: Sink | None = None) -> None:
        self.sink = sink
        self._ids = None if isinstance(ids, int) else ids  # row of id x: searchsorted(ids, x)
        if self._ids is not None:
            ids = len(self._ids)
        self.live: dict[int, Request] = {}
        self._n = 0  # rows in the batch buffers
        self._capacity = 0  # rows they hold: doubled from 1,024 up to CHUNK_ROWS as needed
        self._int_buffer, self._float_buffer = array("q"), array("d")
        self._ints, self._floats = self._int_buffer, self._float_buffer  # typed views of them, compiled
        self._reasons: list[str] = []
        # pool-share rows of the batch (request id, pool, busy share), as typed columns: a
        # split deployment gives every request two rows, and a list of tuples cost ~3 µs
        # per request to build and convert
        self._share_ids, self._share_pools, self._share_s = array("q"), array("q"), array("d")
        self.drafted: tuple = ()  # per pool index: the pool drafting for it (a drafter on its own pool), else -1
        self._written = None
        self._table = None
        if sink is None:
            self._table = np.zeros(ids, dtype=_RECORD)  # one record per request id
            for f in OUTCOME_FIELDS:
                self._table[f] = _FILL[_DTYPES[f]]
            self._written = np.zeros(ids, dtype=bool)
            self._share_parts: list[dict] = []

    def arrived(self, req: Request) -> None:
        """``req`` entered the system (kept until it finishes)."""
        self.live[req.id] = req

    def record(self, req: Request) -> None:
        """``req`` finished: copy its outcome and forget the object."""
        self.live.pop(req.id, None)
        n = self._n
        if n == self._capacity:
            self._grow()
        i = n * _N_INT  # INT_FIELDS, in order
        ints = self._ints
        ints[i] = req.id
        ints[i + 1] = req.workload
        ints[i + 2] = req.pool
        ints[i + 3] = req.replica
        ints[i + 4] = req.status
        ints[i + 5] = req.images
        ints[i + 6] = req.prompt_tokens
        ints[i + 7] = req.output_tokens
        ints[i + 8] = req.steps
        ints[i + 9] = req.sample_steps
        ints[i + 10] = req.preemptions
        ints[i + 11] = req.verifier_calls
        ints[i + 12] = req.handoffs
        ints[i + 13] = req.branches
        ints[i + 14] = req.decode_pool
        ints[i + 15] = req.kv_src_replica
        ints[i + 16] = req.cached_tokens
        ints[i + 17] = req.host_cached_tokens
        ints[i + 18] = req.ssd_cached_tokens
        ints[i + 19] = req.shared_cached_tokens
        f = n * _N_FLOAT  # FLOAT_FIELDS, in order
        floats = self._floats
        floats[f] = req.arrival_at_s
        floats[f + 1] = req.admitted_at_s
        floats[f + 2] = req.first_token_at_s
        floats[f + 3] = req.done_at_s
        floats[f + 4] = req.denoiser_flops
        floats[f + 5] = req.share_s
        floats[f + 6] = req.handoff_s
        floats[f + 7] = req.handoff_wait_s
        floats[f + 8] = req.memory_wait_s
        floats[f + 9] = req.kv_transfer_bytes
        floats[f + 10] = req.kv_transfer_s
        floats[f + 11] = req.decode_queue_s
        floats[f + 12] = req.kv_done_at_s
        floats[f + 13] = req.prefill_flops_saved
        self._reasons.append(req.reason)
        self._n = n + 1
        draft = self.drafted[req.cur_pool] if self.drafted and req.cur_pool >= 0 else -1
        if req.pool_shares or draft >= 0:
            before = 0.0
            ids, pools, share = self._share_ids, self._share_pools, self._share_s
            for index, cumulative in req.pool_shares:
                ids.append(req.id)
                pools.append(index)
                share.append(cumulative - before)
                before = cumulative
            last = req.share_s - before
            ids.append(req.id)
            pools.append(req.cur_pool)
            share.append(last)
            if draft >= 0:  # its drafter's pool, billed in proportion to its replica-seconds on the target
                ids.append(req.id)
                pools.append(draft)
                share.append(last)
        if self._n >= CHUNK_ROWS:
            self.flush()

    def finish_in_flight(self) -> None:
        """Record the requests still in flight (the run has ended), in id order."""
        for rid in sorted(self.live):
            self.record(self.live[rid])
        self.flush()

    def _grow(self) -> None:
        """Batch buffers for twice the rows (new buffers: the compiled build holds typed
        views of them)."""
        capacity = min(max(1024, 2 * self._capacity), CHUNK_ROWS)
        ints, floats = array("q", [0]) * (capacity * _N_INT), array("d", [0.0]) * (capacity * _N_FLOAT)
        ints[: self._n * _N_INT] = self._int_buffer[: self._n * _N_INT]
        floats[: self._n * _N_FLOAT] = self._float_buffer[: self._n * _N_FLOAT]
        self._int_buffer, self._float_buffer, self._capacity = ints, floats, capacity
        self._ints, self._floats = ints, floats

    def flush(self) -> None:
        """Turn the pending batch into columns and hand it on."""
        n = self._n
        if not n:
            return
        ints = np.frombuffer(self._int_buffer, dtype=np.int64, count=n * _N_INT).reshape(n, _N_INT)
        floats = np.frombuffer(self._float_buffer, dtype=np.float64, count=n * _N_FLOAT).reshape(n, _N_FLOAT)
        batch = {f: ints[:, j].copy() for j, f in enumerate(INT_FIELDS)}
        batch.update((f, floats[:, j].copy()) for j, f in enumerate(FLOAT_FIELDS))
        batch["reason"] = np.array(self._reasons, dtype=object)
        shares = empty_shares()
        if len(self._share_ids):
            shares = {"request_id": np.frombuffer(self._share_ids, dtype=np.int64).copy(),
                      "pool": np.frombuffer(self._share_pools, dtype=np.int64).copy(),
                      "busy_share_s": np.frombuffer(self._share_s, dtype=np.float64).copy()}
            self._share_ids, self._share_pools, self._share_s = array("q"), array("q"), array("d")
        self._n, self._reasons = 0, []
        if self.sink is not None:
            self.sink({f: batch[f] for f in OUTCOME_FIELDS}, shares)
            return
        rows = batch["id"] if self._ids is None else np.searchsorted(self._ids, batch["id"])
        for f in OUTCOME_FIELDS:
            self._table[f][rows] = batch[f]
        self._written[rows] = True
        if len(shares["request_id"]):
            self._share_parts.append(shares)

    def columns(self) -> tuple[dict, dict]:
        """In memory: (outcome columns of every recorded request in id order, pool-share
        rows sorted by request id, in the order each journey crossed its pools)."""
        self.flush()
        keep = np.flatnonzero(self._written)
        cols = {f: self._table[f][keep] for f in OUTCOME_FIELDS}
        self._table = None
        parts = self._share_parts or [empty_shares()]
        shares = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        order = np.argsort(shares["request_id"], kind="stable")
        return cols, {k: v[order] for k, v in shares.items()}
