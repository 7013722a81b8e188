"""Model residency: which checkpoint each replica runs, which it holds, and the loads
between (the pool's :class:`~sim.operations.Residency`, priced by :mod:`sim.ops_plan`).

Per replica:

- it *runs* one checkpoint at a time (``active``): a request for another waits
  (``held``, first come first served) until the replica has no request of the active
  one left, then the replica switches to the checkpoint of the oldest held request and
  releases every held request for it. Once a request is held, later requests for the
  active checkpoint queue behind it too, so a switch is never starved;
- a switch costs ``switch_s`` when the checkpoint is among the ``resident_models`` in
  HBM (LRU), the host link's time when it is among the node's ``host_cache_models`` in
  host memory (LRU), else the storage tier's cold load (:func:`fleets.storage.load_time_s`);
- LoRA adapters batch with any request of their checkpoint (S-LoRA, Punica); an adapter
  not in the replica's cache (LRU of ``adapter_cache``) is loaded first, one load at a
  time per replica, without stopping the replica's work; the request enters the replica
  when its adapter is in.

Routing (``routing: affinity``): a request the router sends to a replica that does not
run its checkpoint goes instead to the least-loaded replica that does, if that one has a
free batch slot (the first :data:`AFFINITY_SCAN` such replicas are looked at, so the cost
per request does not grow with the fleet).

Requests the gate holds count in the replica's ``outstanding`` (so routers see them) and
in the pool's ``outstanding_total``. Cost: O(1) per request and per load, plus the scan.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from itertools import islice

from sim.engine.capacity import OFFLINE

AFFINITY_SCAN = 64


class Residency:
    """The residency state of every replica of one pool (module docstring).

    Args:
        env: the SimPy environment.
        pool: the engine pool (:class:`sim.engine.pools.Pool`).
        ops: the pool's :class:`sim.ops_plan.OpsPlan` (load times, limits).
        counters: the pool's operations counters (a dict of ints/floats, updated here).
    """

    def __init__(self, env, pool, ops, counters: dict) -> None:
        self.env, self.pool, self.ops, self.counters = env, pool, ops, counters
        cfg = ops.residency
        self.cfg = cfg
        n = len(pool.replicas)
        self.active = [0] * n
        self.hbm = [OrderedDict.fromkeys(range(cfg.resident_models)) for _ in range(n)]
        self.host: dict[int, OrderedDict] = {}  # node -> checkpoints in its host memory (LRU)
        self.held = [deque() for _ in range(n)]
        self.switching = [False] * n
        self.pending = [0] * n  # requests the gate holds for the replica (held + waiting for an adapter)
        self.adapter_wait = [0] * n
        self.adapters = [OrderedDict() for _ in range(n)]
        self.loading: list[dict] = [{} for _ in range(n)]  # adapter id -> requests waiting for it
        self.loader_free_at = [0.0] * n
        self.epoch = [0] * n  # bumped when a replica is replaced: its loads in flight are void
        # checkpoint -> replicas running it (a dict as an insertion-ordered set: O(1) add and remove)
        self.runners: dict[int, dict[int, None]] = {0: dict.fromkeys(range(n))}
        self.registered = [0] * n  # the checkpoint each replica is listed under (running or switching to); -1 none

    # --- entry ---------------------------------------------------------------------
    def submit(self, replica, req) -> None:
        """``req`` routed to ``replica``: run it, hold it for a switch, or send it to a
        replica running its checkpoint."""
        if self.cfg.routing == "affinity" and self.active[replica.index] != req.variant:
            replica = self._affine(replica, req.variant)
        i = replica.index
        if self.held[i] or self.switching[i] or self.active[i] != req.variant:
            self._hold(replica, req)
            self.held[i].append(req)
            self._maybe_switch(replica)
            return
        self._admit(replica, req)

    def _affine(self, replica, variant: int):
        best = None
        for j in islice(self.runners.get(variant, ()), AFFINITY_SCAN):
            r = self.pool.replicas[j]
            held = self.held[j]
            if held and held[0].variant != variant:
                continue  # it waits to switch away
            if r.outstanding < r.max_batch and (best is None or r.outstanding < best.outstanding):
                best = r
        return replica if best is None else best

    def _hold(self, replica, req) -> None:
        self.pending[replica.index] += 1
        replica.outstanding += 1
        self.pool.outstanding_total += 1
        replica._tell_watchers()

    def _release(self, replica, req) -> None:
        self.pending[replica.index] -= 1
        replica.outstanding -= 1
        self.pool.outstanding_total -= 1

    # --- checkpoints ---------------------------------------------------------------
    def _busy_with_active(self, replica) -> bool:
        i = replica.index
        n = replica.outstanding - self.pending[i]
        return (n - OFFLINE if n >= OFFLINE else n) > 0 or self.adapter_wait[i] > 0

    def _maybe_switch(self, replica) -> None:
        i = replica.index
        if self.switching[i] or not self.held[i] or self._busy_with_active(replica):
            return
        variant = self.held[i][0].variant
        cost = self._switch_cost(i, variant)
        self.switching[i] = True
        self.active[i] = -1
        self._set_runner(i, variant)
        epoch = self.epoch[i]
        self.env.timeout(cost).callbacks.append(lambda _e: self._switched(i, variant, epoch))

    def _switch_cost(self, i: int, variant: int) -> float:
        c, ops = self.counters, self.ops
        hbm = self.hbm[i]
        if variant in hbm:
            c["switches_hbm"] += 1
            return self.cfg.switch_s
        node = i * ops.gpus_per_replica // ops.gpus_per_node
        host = self.host.setdefault(node, OrderedDict())
        if variant in host:
            host.move_to_end(variant)
            c["loads_host"] += 1
            c["load_s"] += ops.host_load_s
            return ops.host_load_s
        if self.cfg.host_cache_models:
            host[variant] = None
            if len(host) > self.cfg.host_cache_models:
                host.popitem(last=False)
        c["loads_storage"] += 1
        c["load_s"] += ops.cold_load_s
        return ops.cold_load_s

    def _switched(self, i: int, variant: int, epoch: int) -> None:
        if epoch != self.epoch[i]:
            return
        hbm = self.hbm[i]
        hbm[variant] = None
        hbm.move_to_end(variant)
        if len(hbm) > self.cfg.resident_models:
            hbm.popitem(last=False)
        self.switching[i] = False
        self.active[i] = variant
        self._set_runner(i, variant)
        replica = self.pool.replicas[i]
        held, keep = self.held[i], deque()
        released = []
        while held:
            req = held.popleft()
            (released if req.variant == variant else keep).append(req)
        self.held[i] = keep
        for req in released:
            self._release(replica, req)
            self._admit(replica, req)
        self._maybe_switch(replica)

    def _set_runner(self, i: int, variant: int) -> None:
        """List replica ``i`` under ``variant`` (the checkpoint it runs or is switching to;
        -1: none) for affinity routing."""
        old = self.registered[i]
        if old >= 0:
            self.runners[old].pop(i, None)
        if variant >= 0:
            self.runners.setdefault(variant, {})[i] = None
        self.registered[i] = variant

    # --- adapters ------------------------------------------------------------------
    def _admit(self, replica, req) -> None:
        if req.adapter < 0:
            replica.submit(req)
            return
        i = replica.index
        cache = self.adapters[i]
        if req.adapter in cache:
            cache.move_to_end(req.adapter)
            self.counters["adapter_hits"] += 1
            replica.submit(req)
            return
        self._hold(replica, req)
        self.adapter_wait[i] += 1
        waiting = self.loading[i].get(req.adapter)
        if waiting is not None:
            waiting.append(req)
            return
        self.loading[i][req.adapter] = [req]
        load_s = max(req.lora, 1) * self.ops.adapter_load_s
        start = max(self.env.now, self.loader_free_at[i])
        self.loader_free_at[i] = start + load_s
        self.counters["adapter_loads"] += max(req.lora, 1)
        self.counters["adapter_load_s"] += load_s
        epoch = self.epoch[i]
        self.env.timeout(start + load_s - self.env.now).callbacks.append(
            lambda _e: self._adapter_in(i, req.adapter, epoch))

    def _adapter_in(self, i: int, adapter: int, epoch: int) -> None:
        if epoch != self.epoch[i]:
            return
        cache = self.adapters[i]
        cache[adapter] = None
        if len(cache) > self.cfg.adapter_cache:
            cache.popitem(last=False)
        replica = self.pool.replicas[i]
        for req in self.loading[i].pop(adapter):
            self.adapter_wait[i] -= 1
            self._release(replica, req)
            replica.submit(req)
        self._maybe_switch(replica)

    # --- the operations layer's calls ----------------------------------------------
    def finished(self, replica) -> None:
        """A request of ``replica`` finished: a held switch may start."""
        if self.held[replica.index]:
            self._maybe_switch(replica)

    def evacuate(self, i: int) -> list:
        """Replica ``i`` failed: the requests the gate holds for it (held and waiting for
        adapters), its loads voided, its memory empty (a fresh replica runs nothing)."""
        out = list(self.held[i])
        for reqs in self.loading[i].values():
            out += reqs
        replica = self.pool.replicas[i]
        self.pool.outstanding_total -= self.pending[i]
        replica.outstanding -= self.pending[i]
        self.pending[i] = self.adapter_wait[i] = 0
        self.held[i], self.loading[i] = deque(), {}
        self.switching[i] = False
        self.active[i] = -1
        self._set_runner(i, -1)
        self.hbm[i] = OrderedDict()
        self.adapters[i] = OrderedDict()
        self.loader_free_at[i] = self.env.now
        self.epoch[i] += 1
        return out
