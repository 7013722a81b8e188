"""Which replicas of a pool serve, and the bookkeeping of taking one out and putting it back.

A replica is taken out of routing by adding :data:`OFFLINE` to its ``outstanding``
count: every keyed router policy minimises a key that grows with ``outstanding``
(:mod:`sim.engine.router`), so an offline replica is chosen only when no replica of the
pool serves, and ``has_slot`` is false for it (the central queue never pulls to it). The
replica's own logic never reads ``outstanding`` beyond adding and subtracting, so nothing
else changes; the pool's totals (what the sampler reads) are kept apart.

A failed replica is *replaced*: its work in flight stops, its requests are taken out
(:func:`evacuate`) and a fresh replica object takes its index (:func:`replace`), offline
until it is restored.
"""

from __future__ import annotations

import math

from sim.engine.request import PENDING

SERVING, STARTING, DRAINING, OFF, FAILED = range(5)
"""Replica states of an operated pool (:mod:`sim.engine.operations`)."""

OFFLINE = 1 << 40
"""Added to an offline replica's ``outstanding`` (far above any real count)."""


def is_offline(replica) -> bool:
    return replica.outstanding >= OFFLINE


def set_offline(replica) -> None:
    if not is_offline(replica):
        replica.outstanding += OFFLINE
        replica._tell_watchers()


def set_online(replica) -> None:
    """Back in routing; a central queue is pulled at once."""
    if is_offline(replica):
        replica.outstanding -= OFFLINE
        replica._tell_watchers()
        for listener in replica.listeners:
            listener.pull(replica)


def real_outstanding(replica) -> int:
    """Requests queued or running at the replica (its OFFLINE mark taken off)."""
    n = replica.outstanding
    return n - OFFLINE if n >= OFFLINE else n


def freeze(replica) -> None:
    """Stop the replica's work now (a failure): iterations whose boundary has passed are
    counted (``settle``), the one in progress is lost, and no timer fires again."""
    replica.settle()
    replica._stop_timer()
    replica._busy = False


def evacuate(replica) -> list:
    """Take every request out of a frozen replica (queued, running, blocked), in request-id
    order, and remove the replica's share from its pool's totals. Returns the requests."""
    found = {}
    for req in list(replica.waiting) + list(getattr(replica, "blocked", ())):
        found[req.id] = req
    for seq, req in replica.heap.entries():
        if req.run_seq == seq and req.status == PENDING:
            found[req.id] = req
    for entry in getattr(replica, "_pending", ()):  # prompts mid-prefill in chunks: outside the heap until prefilled
        found[entry[0].id] = entry[0]
    pool = replica.pool
    pool.outstanding_total -= real_outstanding(replica)
    pool.queued_total -= len(replica.waiting)
    if pool.family == "ar":
        pool.running_total -= replica.n_running
        pool.kv_half_tokens_total -= replica._kv_half
    else:
        pool.running_total -= replica.width
        pool.reserved_total_bytes -= replica.reserved
    return [found[k] for k in sorted(found)]


def reset_for_retry(req) -> None:
    """A request taken out of a failed replica starts over elsewhere: its progress and
    first token are gone; the replica-seconds it used stay in ``share_s``."""
    req.generated = 0
    req.run_seq = -1
    req.kv_offset = 0
    req.start_iter = 0
    req.phases = ()
    req.phase = 0
    req.reserved_bytes = 0.0
    req.replica = -1
    req.admitted_at_s = math.nan
    req.first_token_at_s = math.nan


def replace(run, pool, index: int, routers: list, cls) -> object:
    """A fresh replica of ``cls`` at ``index`` of ``pool``, offline, in every router's
    lists in place of the old one (which keeps its clock slot, never armed again). With
    a prefix cache kept in a block index (the ``prefix_aware`` router's), the old cache's
    blocks leave the index and the fresh, empty cache reports at the same position."""
    old = pool.replicas[index]
    new = cls(run, pool, index)
    new.listeners = old.listeners
    new.outstanding = OFFLINE
    cache = getattr(old, "prefix", None)
    if cache is not None and cache.holders is not None:
        holders = cache.holders
        cache.leave_index()
        new.prefix.index_into(holders, index)
    pool.replicas[index] = new  # the routers' per-pool indexes hold this same list
    for router in routers:  # its flat list: the pool's replicas start after the earlier pools'
        slot = router.pools.index(pool)
        base = sum(len(p.replicas) for p in router.pools[:slot])
        router.replicas[base + index] = new
    new._tell_watchers()
    return new
