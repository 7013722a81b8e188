"""An autoregressive serving replica: continuous batching with paged KV-cache admission.

The serving loop follows vLLM's scheduler (v0, 2024): at each iteration boundary it
finishes completed sequences, preempts the most recently admitted sequence (recompute)
when the KV cache cannot hold the next iteration, admits waiting requests first-come
first-served while the batch, the iteration token budget and the free KV blocks (above a
watermark) allow, and runs one iteration: a mixed iteration that prefills the admitted
prompts and decodes one token for every running sequence, or a decode-only iteration.

Cost grows with requests, not tokens (``fast`` mode): while the batch does not change, a
run of decode iterations is one SimPy timeout whose length is computed in closed form
(:func:`sim.models.perf.decode_stretch_time_s`, including the KV reads that grow every
iteration). The run ends exactly where the per-iteration loop would change the batch:

- the first completion (the earliest finishing sequence);
- the first iteration the KV cache cannot hold (a preemption);
- the first boundary where the head of the waiting queue would be admitted (a batch slot
  for each of its branches, its KV blocks within the free blocks above the watermark;
  the first admission of a boundary never waits for the token budget). With the batch
  fixed, used KV blocks only grow, so a head that does not fit at the run's first inner
  boundary fits at none after it and the run continues; one that fits ends the run there;
- an arrival that becomes the head and could fit cuts the run at the next boundary.

Without ``prefill_chunk_tokens`` a prompt is prefilled whole in one mixed iteration, so
there is no chunk boundary to stop at. When the drain runs out mid-run, :meth:`ARReplica.settle`
counts the iterations finished by then. ``exact`` mode runs one timer per iteration.
Both modes time iteration j after the last batch change (the segment's anchor) as
``anchor + decode_stretch_time_s(j)`` and schedule it at that absolute instant with the
replica's priority (:mod:`sim.engine.timer`), so they compute the same instants and break
simultaneous events the same way: every request gets the same timestamps (checked to
1e-9 relative by ``tests/sim/engine/test_fast_exact_differential.py``; the closed form is
checked against a per-iteration sum in ``tests/sim/models/test_decode_stretch.py``).

**Chunked prefill** (``pool.prefill_chunk_tokens`` = budget, Sarathi-Serve, OSDI 2024;
vLLM's chunked prefill): each iteration runs one token for every decoding sequence first,
then chunks of the prompts mid-prefill, oldest first, in what is left of the budget
(admission needs some of it left). A chunk of m tokens after c prefilled ones is priced by
:meth:`sim.models.perf.PerfModel.mixed_cost` with attention pairs m² + 2mc and the c
tokens' KV read (its ``cached`` argument). A prompt's KV blocks are all reserved at
admission, as without chunking, and it counts as a running sequence growing one token per
iteration like the others (a slight over-count, set back to prompt + 1 at its last
chunk, whose end is its first token). While a prompt is mid-prefill both modes run one
iteration per timer; fast mode's closed-form decode runs resume after its last chunk.
On a split deployment's prefill replica (no decodes: the whole budget is chunks) a prompt
is handed off at the end of its last chunk (:meth:`_hand_off`), prepared at that chunk's
start (:meth:`_send_early`: the KV cache is complete at its end). With a prefix cache a
prompt's chunks start after its cached prefix (c counts it), the blocks a chunk completes
join the cache at that chunk's start (an instant both modes reach), and blocks copied
from a lower tier are paid under the first chunk (docs/kv-reuse.md). Under speculation
each decoding sequence takes k + 1 tokens of the budget (its verification), a chunk
iteration is priced by the speculation plan's mixed iteration (the drafter prefills the
chunks and drafts for the decoders) and a prompt's KV grows ⌊I·g⌋ like the others' until
its last chunk (docs/serving.md, "Chunked prefill with speculative decoding").

KV bookkeeping is O(block size) per query, not O(batch): every running sequence grows by
one token per iteration, so sequence i holds ``a_i + I`` tokens at iteration counter I
(``a_i`` fixed while it runs) and Σ⌈(a_i+I)/B⌉ follows from Σa_i and a histogram of
``a_i mod B``.

The replica is a small state machine driven by SimPy events (``Event.callbacks``), not a
generator process: cutting a stretch schedules a new timer for the earlier boundary and
cancels the superseded one (SimPy still pops its queue entry but runs nothing for it),
so a cut costs one event and no generator ``throw``.

**Speculative decoding** (a pool with a :class:`sim.models.speculation.SpecPlan`): an
iteration is a verification step; a request needs its own drawn number of steps after
its first token (``req.steps``, :mod:`sim.workloads.speculation`), so its completion
counter is known at admission as before. Every running sequence's KV grows by the same
g = E[L] tokens per step (⌊I·g_num / 1024⌋ tokens after I steps: still a common shift of
every sequence, so the O(block) bookkeeping holds), and the stretch's closed form takes
the step's verification and draft lines (:func:`sim.models.perf.decode_stretch_time_s`).
A preempted request keeps the steps it has done (``spec_done``) and the tokens they
emitted in proportion (1 + ⌊done·(O−1)/S⌋).

**Split deployments** (``pool.role``): a *prefill* replica runs only mixed iterations of
new prompts; at the end of one each request leaves it with its first token, its KV cache
held here (``pinned`` blocks, counted against the cache: a prefill side whose hand-offs
wait stops admitting) until the transfer ends, and goes to the decode router (at once,
or already when its prefill started: ``decode_choice``). A *decode* replica admits such a
request first come first served by reserving the blocks of its KV cache (``pinned`` too,
and a batch slot: ``n_loading``); the transfer then runs and ends at an instant known at
once (:meth:`sim.models.kv_transfer.KVLink.done_at_s`), after which the request joins the
batch at the first boundary, decoding from its second token with no prefill. No event
is spent on the transfer itself: the decode replica plans its runs to end at the first
boundary at or after the earliest transfer's end, and the prefill replica frees the held
blocks at its first boundary after it (waking for it when it waits for room). An idle
prefill replica that an arrival wakes starts at once when nothing else is due at that
instant (:meth:`ARReplica._alone_now`), not by a wake-up timer at ``now``.

A reservation is made when the request arrives if nothing waits before it, a slot is
free and its blocks fit beside the running sequences' KV cache *at their next
completion* (the most they hold until the batch changes: the same test in both modes);
otherwise at a later boundary, like any admission. Reservations and joins change neither
a run's batch nor its KV fit before its planned end, so the closed form holds; when
pinned blocks leave too little room for the running sequences, even the last one is
preempted (the reserved requests will run).
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from heapq import heappop, heappush

from sim.models.perf import (
    decode_stretch_iterations_done,
    decode_stretch_time_s,
)
from sim.models.speculation import GROWTH_DEN
from sim.engine.completion_heap import NO_COMPLETION, CompletionHeap
from fleets.storage import tier
from sim.engine.prefix_cache import HOST, SHARED, SSD, TRAFFIC, PrefixCache
from sim.engine.request import COMPLETED, Request, RouterFacing
from sim.engine.timer import TimerDriven, replica_clock, replica_priority

PREFILL, DECODE = 1, 2
SPEC_DEN = GROWTH_DEN  # a C constant when compiled (replica_ar.pxd)
_HOST, _SSD, _SHARED, _N_TRAFFIC = HOST, SSD, SHARED, len(TRAFFIC)  # C constants when compiled
ROLES = {"": 0, "prefill": PREFILL, "decode": DECODE, "draft": 0}  # draft: never routed to (its work is in its targets' steps)


class ARReplica(TimerDriven):
    """One replica of an autoregressive pool (see module docstring).

    Args:
        run: the :class:`~sim.engine.run.RunContext`.
        pool: the owning pool runtime (perf model, config, KV capacity, stats).
        index: replica index within the pool.
    """

    # slots, not a __dict__: a 4,096-replica fleet's replica state stays compact in cache
    __slots__ = (
        "_admitted", "_anchor", "_blocks_counter", "_blocks_value", "_blocks_version", "_busy", "_cuttable",
        "_decode_from", "_end_at", "_in_j0", "_in_n", "_inflight", "_kv_half", "_kv_half_cap", "_mix_bytes",
        "_mix_flops", "_mix_hbm", "_mix_t", "_mix_tokens", "_next_done", "_stale", "_clock", "_slot",
        "_seg_b", "_seg_context0", "_seg_iters", "_seg_line", "_seg_version", "_start",
        "_version", "acc", "block", "cap_blocks", "env", "heap", "index", "iters",
        "listeners", "max_batch", "max_prefill_tokens", "n_running", "outstanding", "perf", "pool",
        "residues", "run", "next_seq", "sum_offsets", "waiting", "watermark_blocks",
        "role", "spec", "gnum", "pinned", "n_loading", "loading", "releases", "_wake", "prefix", "cache_block", "host_bytes_per_s", "ssd_bytes_per_s", "ssd_latency_s",
        "shared_bytes_per_s", "shared_latency_s", "_traffic_seen", "_moves_seen", "_prefill_tokens", "_prefill_saved", "_tier_blocks", "linear_flops_per_token", "prefill_attn_flops_per_pair",
        "prefill_window_attn_flops_per_token",
        "chunk", "_pending", "_pending_w"
    )

    def __init__(self, run, pool, index: int) -> None:
        self.run = run
        self.env = run.env
        self.pool = pool
        self.index = index
        self.perf = pool.perf
        # the perf model's prefill FLOP coefficients, read once for _prefill_flops (a prefix cache's FLOP saved);
        # read directly, so a perf model without them fails here rather than saving 0 FLOP
        self.linear_flops_per_token = self.perf.linear_flops_per_token
        self.prefill_attn_flops_per_pair = self.perf.prefill_attn_flops_per_pair
        self.prefill_window_attn_flops_per_token = self.perf.prefill_window_attn_flops_per_token
        cfg = pool.config
        self.max_batch = cfg.max_batch
        self.max_prefill_tokens = cfg.max_prefill_tokens
        self.block = cfg.kv_block_tokens
        self.cap_blocks = pool.kv_capacity_blocks
        self.watermark_blocks = math.ceil(cfg.kv_watermark * self.cap_blocks)
        self._kv_half_cap = 2 * self.cap_blocks * self.block
        self._kv_half = 0  # this replica's part of pool.kv_half_tokens_total
        self.waiting: deque[Request] = deque()
        self.heap = CompletionHeap()  # running sequences by (completion counter, seq)
        self.outstanding = 0  # queued + running; a plain counter so routers can min() fast
        self.n_running = 0
        self.iters = 0
        self.sum_offsets = 0
        self.residues = array("q", [0]) * self.block  # running sequences by kv_offset mod block
        self._blocks_counter = -1  # blocks_used's cache: the state it was computed for, and the value
        self._blocks_version = -1
        self._blocks_value = 0
        # heap.next_done() kept as a plain number (NO_COMPLETION: empty), so a boundary
        # tests it without reading the heap: at thousands of replicas a replica's objects
        # are out of cache each time its timer fires
        self._next_done = NO_COMPLETION
        self._stale = 0  # heap entries of preempted runs (run_seq no longer matches)
        self._version = 0
        self.acc = 0.0
        self.next_seq = 0  # of the next sequence admitted
        self.listeners: list = []  # central-queue routers, pulled when a slot frees
        self._busy = False
        self._cuttable = False
        # the iteration(s) in flight
        self._clock = replica_clock(self.env)
        self._slot = self._clock.register(self, replica_priority(pool.index, index))
        self._start = 0.0
        self._admitted: list[Request] = []
        # the mixed iteration's time, FLOP, bytes, tokens and HBM bytes (fields, not a
        # tuple: one object fewer to fetch per boundary)
        self._mix_t = self._mix_flops = self._mix_bytes = self._mix_hbm = 0.0
        self._mix_tokens = 0
        self._inflight = False  # iterations in flight: decode iterations j0 + 1 … j0 + n of the segment
        self._in_j0 = 0
        self._in_n = 0
        self._decode_from = 0.0  # instant the run's decode iterations start
        self._end_at = 0.0  # instant the run ends
        # the decode segment (batch fixed since the anchor)
        self._anchor = 0.0
        self._seg_iters = 0
        self._seg_context0 = 0
        self._seg_line = None
        self._seg_b = 0
        self._seg_version = -1
        # speculative decoding (None: one token per iteration) and split deployments
        self.role = ROLES[pool.role]
        self.spec = pool.spec
        self.gnum = pool.spec.growth_num if pool.spec is not None else GROWTH_DEN
        self.pinned = 0  # KV blocks outside the running set: held for a transfer (prefill) or reserved (decode)
        self.n_loading = 0  # decode: requests whose blocks are reserved, their KV cache on its way
        self.loading: list = []  # decode: heap of (transfer end, request id, request)
        self.releases: list = []  # prefill: heap of (transfer end, request id, blocks held until then)
        self._wake = 0.0  # instant of the pending timer while no iterations are in flight
        # chunked prefill (prefill_chunk_tokens; 0: off): prompts mid-prefill, oldest first, as
        # [request, tokens prefilled, iteration counter at admission, this iteration's chunk]
        self.chunk = getattr(cfg, "prefill_chunk_tokens", None) or 0
        self._pending: list = []
        self._pending_w = 0  # their sequences (branches): in n_running, not decoding
        # the prefix cache (sim.engine.prefix_cache; None: off, and on a decode replica, which prefills nothing)
        pc = getattr(cfg, "prefix_cache", None)
        self.prefix = None
        self.cache_block = 0
        self.host_bytes_per_s = self.ssd_bytes_per_s = self.ssd_latency_s = 0.0
        self.shared_bytes_per_s = self.shared_latency_s = 0.0
        self._traffic_seen = array("q", [0] * len(TRAFFIC))  # the cache's traffic counters at the last change
        self._moves_seen = 0  # their sum then (PrefixCache.moves)
        stats = pool.stats  # its cache counters, added to in place (sim.engine.run.PoolStats)
        self._prefill_tokens, self._prefill_saved, self._tier_blocks = (stats.prefill_tokens, stats.prefill_saved,
                                                                        stats.kv_tier_blocks)
        if pc is not None and self.role != DECODE:
            self.prefix = PrefixCache(pc.block_tokens, pc.block_tokens // self.block, pc.capacity_blocks, pc.host_blocks,
                                      pc.ssd_blocks, pool.shared_kv)
            self.cache_block = pc.block_tokens
            if pc.host_blocks or pc.ssd_blocks or pool.shared_kv is not None:
                self._cache_links(pc, pool.layout)

    def _cache_links(self, pc, layout) -> None:
        """The lower tiers' read rates: each GPU copies its shard of the KV over its own host
        link; the SSD tier reads at the node's drives' rate (``ssd_drives`` × the drive's,
        a storage_tiers.csv row) in proportion to the replica's share of the node's
        accelerators (or the nodes it spans); the pool's shared store is read over the
        scale-out NIC of each GPU (the accelerator's, or the pool's ``scaleout_fabric``,
        fleets/data/fabrics.csv), after one NIC latency."""
        gpus = layout.accelerators // layout.replicas
        self.host_bytes_per_s = tier(pc.host_link, "host_link").read_bytes_per_s * gpus
        if pc.shared_blocks:
            self.shared_bytes_per_s = layout.accelerator.scaleout_bw_bytes_per_s * gpus
            self.shared_latency_s = layout.accelerator.scaleout_latency_s
        if pc.ssd_blocks:
            drive = tier(pc.ssd, "storage")
            self.ssd_bytes_per_s = drive.read_bytes_per_s * pc.ssd_drives * gpus / layout.accelerator.accelerators_per_node
            self.ssd_latency_s = pc.ssd_latency_s

    def _kv(self, counter: int) -> int:
        """KV tokens every running sequence has gained after ``counter`` iterations:
        ``counter``, or ⌊counter·g_num / 1024⌋ under speculation (module docstring)."""
        if self.spec is None:
            return counter
        return counter * self.gnum // SPEC_DEN

    # --- queries used by routers ---------------------------------------------------

    # --- KV cache ------------------------------------------------------------------
    def blocks_used(self, counter: int) -> int:
        """Σ⌈(a_i + counter)/B⌉ over running sequences, in O(B) (cached per state)."""
        if not self.n_running:
            return 0
        if counter == self._blocks_counter and self._version == self._blocks_version:
            return self._blocks_value
        b = self.block
        c = self._kv(counter)
        pad = 0
        residues = self.residues
        for rho in range(b):
            n = residues[rho]
            if n:
                pad += n * ((-(rho + c)) % b)
        value = (self.sum_offsets + self.n_running * c + pad) // b
        self._blocks_counter, self._blocks_version, self._blocks_value = counter, self._version, value
        return value

    def blocks_used_bounds(self, counter: int) -> tuple[float, float]:
        """O(1) bounds on :meth:`blocks_used`: Σ(a_i+counter)/B ≤ used ≤ that + batch."""
        low = (self.sum_offsets + self.n_running * self._kv(counter)) / self.block
        return low, low + self.n_running

    def kv_bytes_estimate(self, counter: int) -> float:
        """KV bytes resident at ``counter`` for the HBM-occupancy statistics: the tokens
        held plus half a block of paging slack per sequence, and the blocks pinned outside
        the running set (O(1))."""
        tokens = (self.sum_offsets + self.n_running * self._kv(counter) + self.n_running * (self.block - 1) / 2
                  + self.pinned * self.block)
        return min(tokens, self.cap_blocks * self.block) * self.perf.kv_bytes_per_token

    def _kv_sync(self) -> None:
        """Bring the pool's ``kv_half_tokens_total`` up to date after ``sum_offsets``,
        ``n_running`` or ``iters`` changed (called at the end of every boundary and of
        :meth:`settle`, the only places they change; the sampler runs between): twice the tokens :meth:`kv_bytes_estimate`
        counts at ``iters`` (an integer, so the pool total is exact in any order)."""
        n = self.n_running
        half = 2 * (self.sum_offsets + n * self._kv(self.iters) + self.pinned * self.block) + n * (self.block - 1)
        if half > self._kv_half_cap:
            half = self._kv_half_cap
        if half != self._kv_half:
            self.pool.kv_half_tokens_total += half - self._kv_half
            self._kv_half = half

    def _kv_fit_iterations(self, limit: int, first: int) -> int:
        """How many of ``limit`` decode iterations from counter ``first`` the KV cache
        can hold."""
        b, blk, last = self.n_running, self.block, first + limit - 1
        cap = self.cap_blocks - self.pinned
        upper = (self.sum_offsets + b * self._kv(last)) / blk + b
        if upper <= cap:
            return limit
        lo, hi = 0, limit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.blocks_used(first + mid - 1) <= cap:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _add_running(self, req: Request, tokens_now: int) -> None:
        """Start ``req``'s sequences (``req.branches`` of them for best-of-k, each with its
        own copy of the prompt's KV cache)."""
        seq = self.next_seq
        self.next_seq += 1
        w = req.branches
        req.run_seq = seq
        req.kv_offset = tokens_now - self._kv(self.iters)
        req.start_iter = self.iters
        self.sum_offsets += w * req.kv_offset
        self.residues[req.kv_offset % self.block] += w
        self.n_running += w
        self.pool.running_total += w
        self._version += 1
        if self.chunk:  # its prefill runs in chunks; it joins the completion heap after the last
            self._pending.append([req, 0, self.iters, 0])
            self._pending_w += w
            return
        if self.role == PREFILL:  # leaves after its prefill iteration: no completion to wait for
            return
        heap = self.heap
        if self.spec is None:
            heap.push(self.iters + req.output_tokens - req.generated, seq, req)
        else:  # the steps left, and the prefill iteration of a first admission
            heap.push(self.iters + req.steps - req.spec_done + (1 if req.generated == 0 else 0), seq, req)
        self._next_done = heap.next_done()

    def _remove_running(self, req: Request) -> None:
        if req.cache_held:
            self.prefix.release(req.cache_last, req.cache_held)
            req.cache_held = 0
            req.cache_last = -1
        w = req.branches
        self.sum_offsets -= w * req.kv_offset
        self.residues[req.kv_offset % self.block] -= w
        self.n_running -= w
        self.pool.running_total -= w
        self._version += 1
        req.share_s += w * (self.acc - req.acc_mark)
        req.run_seq = -1

    # --- arrivals ------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        """Queue ``req``; wake the replica if idle, or cut a decode stretch at the next
        iteration boundary if the request could be admitted there."""
        req.replica = self.index
        pool = self.pool
        self.outstanding += 1
        pool.outstanding_total += 1
        if self.role == DECODE:
            req.decode_pool = pool.index
            if req.kv_remote and self._reserve_now(req):
                for index in pool.watchers:
                    index.changed(self.index)
                return
        self.waiting.append(req)
        pool.queued_total += 1
        for index in pool.watchers:  # RouterFacing._tell_watchers, inlined (once per arrival)
            index.changed(self.index)
        if not self._busy:
            self._busy = True
            self._wake = self.env._now
            if self.role == PREFILL and self.run.arrival_alone and pool.gate is None and self._alone_now():
                self._boundary()  # what the wake-up timer at now would do, one event sooner
            else:
                self._start_timer_at(self._wake)  # same-instant arrivals join one admission
        elif (self._cuttable and len(self.waiting) == 1
              and self.n_running + self.n_loading + req.branches <= self.max_batch):
            block = self.block
            need = -(-req.prompt_tokens // block) * req.branches
            # an upper bound on free blocks keeps the cut test conservative (never misses):
            # the lower bound of blocks_used_bounds(iters)
            free = (self.cap_blocks - self.pinned
                    - math.ceil((self.sum_offsets + self.n_running * self._kv(self.iters)) / block))
            if need <= free - self.watermark_blocks:
                self._cut()

    def _alone_now(self) -> bool:
        """Nothing else is due at this instant: SimPy's queue holds no event at ``now``
        (the replica clock keeps an entry at or before its earliest timer, so a replica
        timer due now would show). A prefill replica woken by an arrival then starts its
        iteration at once instead of by a timer at ``now``: the timer would have fired next,
        with nothing between it and the arrival, so every instant and order is the same
        (the arrival feed tells whether another arrival of its workload comes at this
        instant: ``run.arrival_alone``)."""
        queue = self.env._queue  # noqa: SLF001
        return not queue or queue[0][0] > self.env._now  # noqa: SLF001

    # --- iteration boundaries ------------------------------------------------------
    def _boundary(self) -> None:
        # the cheap tests of _finish_completed / _preempt_if_needed / _admit first: most
        # boundaries complete nothing, preempt nothing, or admit nothing
        if self._next_done <= self.iters:
            self._finish_completed()
        if self.releases:
            self._release_done()
        n = self.n_running
        preempted = ((self.sum_offsets + n * self._kv(self.iters)) / self.block + n > self.cap_blocks - self.pinned
                     and self._preempt_if_needed())
        if self.loading and self.loading[0][0] <= self.env._now:
            self._join()
        admitted = [] if preempted or not self.waiting else self._admit()
        if self._pending:  # chunked prefill: this iteration's chunks (the requests they belong to)
            admitted = self._plan_chunks()
        if admitted or self.n_running:
            self._begin(admitted)
        else:
            self._busy = False
            if self.loading or self.releases:
                self._sleep()
        self._kv_sync()  # once per boundary: _finish and the steps above moved iters / the batch

    def _finish_completed(self) -> None:
        if self.prefix is not None and self.prefix.evictable:  # the batch changes: the running KV's room first
            self._cache_trim()
        heap, now, freed = self.heap, self.env._now, False
        while heap.next_done() <= self.iters:  # NO_COMPLETION when empty
            seq = heap.first_seq()
            req = heap.pop()
            if req.run_seq != seq:
                self._stale -= 1
                continue
            self._remove_running(req)
            req.generated = req.output_tokens
            req.status = COMPLETED
            req.done_at_s = now
            self.outstanding -= 1
            self.pool.outstanding_total -= 1
            freed = True
            self.run.request_finished(req)
        self._next_done = heap.next_done()
        if freed:
            for index in self.pool.watchers:  # _tell_watchers, inlined (once per completion)
                index.changed(self.index)
            for listener in self.listeners:
                listener.pull(self)

    def _preempt_if_needed(self) -> bool:
        """Recompute-preempt the latest admitted sequences until the next iteration fits
        (never the last one: a sequence alone always fits, the router saw to that).

        The victims, latest admitted (highest ``run_seq``) first, are read off the
        completion heap when a preemption is due, rather than kept in admission order
        all along: preemptions are rare, admissions are not, and a list kept per
        admission was one more cold object per request at thousands of replicas."""
        preempted = False
        n = self.n_running
        cap = self.cap_blocks - self.pinned
        if (self.sum_offsets + n * self._kv(self.iters)) / self.block + n <= cap:  # blocks_used_bounds [1]
            return False
        if self.blocks_used(self.iters) <= cap:
            return False
        if self.prefix is not None and self.prefix.evictable:
            self._cache_trim()
        running = sorted([(seq, req) for seq, req in self.heap.entries() if req.run_seq == seq])  # seqs are unique
        keep = 0 if self.pinned else 1  # pinned blocks: the reserved requests will run
        while len(running) > keep and self.blocks_used(self.iters) > cap:
            seq, victim = running.pop()
            self._note_progress(victim)
            self._remove_running(victim)
            self._stale += 1  # its heap entry stays until popped
            victim.preemptions += 1
            self.waiting.appendleft(victim)
            self.pool.queued_total += 1
            preempted = True
        if preempted:
            self._tell_watchers()
        return preempted

    def _note_progress(self, victim: Request) -> None:
        """A preempted request keeps what it generated (recomputed with its prompt when
        readmitted): one token per iteration run, or under speculation its steps done and
        the tokens they emitted in proportion (module docstring)."""
        run = self.iters - victim.start_iter
        if self.spec is None:
            victim.generated += run
            return
        victim.spec_done += run - 1 if victim.generated == 0 else run
        if victim.steps > 0:
            done = min(victim.spec_done, victim.steps)
            victim.generated = 1 + (victim.output_tokens - 1) * done // victim.steps

    def _admit(self) -> list[Request]:
        admitted: list[Request] = []
        if not self.waiting:
            return admitted
        # exact block count only when the O(1) lower bound on free blocks is not enough
        n = self.n_running  # the upper bound of blocks_used_bounds(iters), inlined (once per admission)
        free = (self.cap_blocks - self.pinned - math.floor((self.sum_offsets + n * self._kv(self.iters)) / self.block + n)
                - self.watermark_blocks)
        exact = False
        budget = self.max_prefill_tokens if not self.chunk else self._chunk_room()
        reserved = 0
        while self.waiting and self.n_running + self.n_loading + self.waiting[0].branches <= self.max_batch:
            req = self.waiting[0]
            remote = req.kv_remote
            tokens = req.prompt_tokens + (1 if remote else req.generated)  # remote: the prompt and its first token
            need = -(-tokens // self.block) * req.branches
            if self.chunk:
                if budget <= 0:  # no token of this iteration's budget left for a new prompt's chunk
                    break
            elif admitted and not remote and tokens > budget:
                break
            if need > free and not exact:
                exact = True
                free = self.cap_blocks - self.pinned - self.blocks_used(self.iters) - self.watermark_blocks
            if need > free:
                break
            if not admitted and not reserved and self.prefix is not None and self.prefix.evictable:
                self._cache_trim()  # the batch changes here: the running KV's room first
            self.waiting.popleft()
            free -= need
            if remote:  # a decode replica of a split deployment: reserve, then the KV cache comes
                self._reserve(req, need)
                reserved += 1
                continue
            budget -= tokens
            self._add_running(req, tokens)
            admitted.append(req)
            if self.prefix is not None:
                self._cache_admit(req)
                if self.chunk:
                    budget += self._chunk_skip_cached(req)
        if admitted or reserved:
            self.pool.queued_total -= len(admitted) + reserved
            for index in self.pool.watchers:  # _tell_watchers, inlined (once per admission)
                index.changed(self.index)
        return admitted

    # --- prefix cache ----------------------------------------------------------------
    def _cache_admit(self, req: Request) -> None:
        """``req`` was admitted: look up its leading prompt blocks and hold the hit ones
        (``cache_hit``); evictable blocks then give way to the running sequences' KV."""
        keys = req.prefix
        hit = 0
        if keys:
            usable = self.prefix.usable(keys, req.prompt_tokens)
            if usable:
                hit = self.prefix.acquire(keys, usable)
                req.cache_last = self.prefix.last
                self._cache_traffic()
            req.cache_host = self.prefix.moved_from(_HOST) if hit else 0
            req.cache_ssd = self.prefix.moved_from(_SSD) if hit else 0
            req.cache_shared = self.prefix.moved_from(_SHARED) if hit else 0
        req.cache_hit = req.cache_held = hit
        if self.prefix.evictable:
            self._cache_trim()

    def _cache_trim(self) -> None:
        """Evict evictable cached blocks the running sequences' KV needs the pages of (the
        O(1) upper bound on the blocks used first: it nearly always leaves room). Called
        where the batch changes (a completion, a preemption, an admission), the boundaries
        both engine modes reach: the running KV only grows in between, so this evicts what
        trimming at every iteration would have by then, and a router looking between
        boundaries sees the same cache in both modes."""
        room = self.cap_blocks - self.pinned
        n = self.n_running
        pages = self.prefix.evictable * self.prefix.pages_per_block
        if pages <= room - ((self.sum_offsets + n * self._kv(self.iters)) // self.block + n):  # ⌊x/B + n⌋, in integers
            return
        self.prefix.trim_pages(room - self.blocks_used(self.iters))
        self._cache_traffic()

    def _cache_commit(self, req: Request) -> None:
        """``req``'s prefill starts: the blocks it computes join the cache, referenced (a
        request admitted in the same iteration did not see them; one admitted later, after
        this prefill, does; a router looking meanwhile counts them, as a radix tree that
        inserts at scheduling would). At the prefill's start, not its end, because fast
        mode accounts for the prefill only when its run ends."""
        keys = req.prefix
        if not keys:
            return
        usable = self.prefix.usable(keys, req.prompt_tokens)
        req.cache_last = self.prefix.commit(keys, req.cache_last, req.cache_hit, usable)  # usable 0: the capacity kept
        self._cache_traffic()
        req.cache_held = usable

    def _prefill_flops(self, new_tokens: float, new_tokens_sq: float) -> float:
        """:meth:`sim.models.perf.PerfModel.prefill_flops` of this replica's perf model, the
        same operations in the same order on its coefficients read once (a Python method
        call per request cost more than the rest of :meth:`_cache_first`)."""
        return self.linear_flops_per_token * new_tokens + (0.5 * self.prefill_attn_flops_per_pair * new_tokens_sq
                                                           + self.prefill_window_attn_flops_per_token * new_tokens)

    def _cache_traffic(self) -> None:
        """After a change of the cache (now): the blocks it moved between tiers (its
        ``traffic`` counters' increase since the last change) join the pool's
        ``kv_tier_blocks`` if now is in the measurement window [start, end) (the window
        of busy time, FLOP and bytes: traffic / window = a mean rate). Both engine modes
        change the cache at the same instants (:meth:`_cache_trim`)."""
        cache = self.prefix
        if cache.moves == self._moves_seen:
            return  # nothing moved since the last change (most admissions of a cache not yet full)
        self._moves_seen = cache.moves
        run = self.run
        now = self.env._now
        counted = run.window_start_s <= now < run.window_end_s
        for i in range(_N_TRAFFIC):  # self._traffic_seen, not a local: a local typed view costs two atomic operations
            v = cache.traffic_blocks(i)
            if v != self._traffic_seen[i]:
                if counted:
                    self._tier_blocks[i] += v - self._traffic_seen[i]
                self._traffic_seen[i] = v

    def _cache_first(self, req: Request, end: float) -> None:
        """Record the first prefill's cached tokens and the prefill FLOP they saved (the
        full prompt's prefill against the missed tokens' over the cached prefix)."""
        c = req.cache_hit * self.cache_block
        n = req.prompt_tokens
        m = n - c
        req.cached_tokens = c
        req.host_cached_tokens = h = req.cache_host * self.cache_block
        req.ssd_cached_tokens = d = req.cache_ssd * self.cache_block
        req.shared_cached_tokens = g = req.cache_shared * self.cache_block
        req.prefill_flops_saved = saved = (self._prefill_flops(n, float(n) * n)
                                           - self._prefill_flops(m, float(m) * m + 2.0 * m * c))
        run = self.run
        if run.window_start_s <= end < run.window_end_s:  # the prefill's end (fast mode reaches it later)
            self._prefill_tokens[0] += n  # the pool's PoolStats.prefill_tokens, by PREFILL_TOKENS
            self._prefill_tokens[1] += c
            self._prefill_tokens[2] += h
            self._prefill_tokens[3] += d
            self._prefill_tokens[4] += g
            self._prefill_saved[0] += saved

    # --- split deployments -----------------------------------------------------------
    def _reserve_now(self, req: Request) -> bool:
        """Decode side, on arrival: reserve at once when nothing waits before ``req``, a
        slot is free and its blocks fit beside the running sequences' KV cache at their
        next completion (module docstring); False to queue it."""
        if self.waiting or self.n_running + self.n_loading + req.branches > self.max_batch:
            return False
        need = -(-(req.prompt_tokens + 1) // self.block) * req.branches
        used = self.blocks_used(self._next_done - 1) if self.n_running else 0
        if need > self.cap_blocks - self.pinned - used - self.watermark_blocks:
            return False
        self._reserve(req, need)
        self._kv_sync()  # pinned changed between boundaries
        ready = self.loading[0][0]
        if not self._busy:
            self._busy = True
            self._wake = ready
            self._start_timer_at(ready)
        elif not self._inflight:
            if ready < self._wake:
                self._wake = ready
                self._start_timer_at(ready)
        elif self._cuttable and ready < self._end_at:
            self._cut_at(ready)
        return True

    def _reserve(self, req: Request, need: int) -> None:
        """Decode side: hold ``need`` blocks and a batch slot for ``req``; its KV cache's
        transfer from its prefill replica (:mod:`sim.models.kv_transfer`) ends at an
        instant known now, when the prefill replica will let its copy go."""
        self.pinned += need
        self.n_loading += 1
        now = self.env._now
        pool = self.pool
        link = pool.kv_in[req.kv_src_pool]
        done, moved, transfer = link.hand_over(req.prompt_tokens, now, req.prefill_at_s, req.kv_ready_at_s,
                                               pool.layerwise[req.workload])
        req.kv_done_at_s = done
        req.decode_queue_s = now - req.kv_ready_at_s if now > req.kv_ready_at_s else 0.0
        req.kv_transfer_bytes = moved
        req.kv_transfer_s = transfer
        req.handoffs = 1  # the summary's hand-off columns: one transfer, and the wait for decode room
        req.handoff_s = req.kv_transfer_s
        req.handoff_wait_s = req.decode_queue_s
        heappush(self.loading, (done, req.id, req))
        self.run.pools[req.kv_src_pool].replicas[req.kv_src_replica].release_at(req)

    def _join(self) -> None:
        """Decode side: the requests whose KV cache has arrived join the running batch
        (their reserved blocks become theirs; no prefill: they decode from their second
        token)."""
        now = self.env._now
        while self.loading and self.loading[0][0] <= now:
            req = heappop(self.loading)[2]
            req.kv_remote = 0
            req.generated = 1
            tokens = req.prompt_tokens + 1
            self.pinned -= -(-tokens // self.block) * req.branches
            self.n_loading -= 1
            self._add_running(req, tokens)
            req.acc_mark = self.acc

    def _sleep(self) -> None:
        """No iterations to run: wake at the next transfer's end (decode) or release of
        held blocks (prefill, when a request waits for room), if any."""
        if self.loading:
            at = self.loading[0][0]
        elif self.releases and self.waiting:
            at = self.releases[0][0]
        else:
            return
        self._busy = True
        self._wake = at
        self._start_timer_at(at)

    def release_at(self, req: Request) -> None:
        """Prefill side: ``req``'s KV cache will have moved at ``req.kv_done_at_s``; its
        blocks are freed at the first boundary at or after then (one is scheduled when
        requests wait for room and nothing runs)."""
        heappush(self.releases, (req.kv_done_at_s, req.id, -(-req.prompt_tokens // self.block)))
        if not self._busy and self.waiting:
            self._sleep()
        elif self._busy and not self._inflight and self.waiting and self.releases[0][0] < self._wake:
            self._wake = self.releases[0][0]
            self._start_timer_at(self._wake)

    def _release_done(self) -> None:
        """Prefill side: free the blocks of every transfer that has ended."""
        now = self.env._now
        while self.releases and self.releases[0][0] <= now:
            self.pinned -= heappop(self.releases)[2]

    def _hand_off(self, admitted: list) -> None:
        """Prefill side, at the end of a prefill iteration: every request leaves with its
        first token; a one-token request is done, the others keep their KV cache here
        (pinned) until it has moved and go to the decode router, now (``at_handoff``) or
        already at the prefill's start (``at_prefill``, :meth:`_send_early`)."""
        pool, now, freed = self.pool, self.env._now, False
        for req in admitted:
            self._remove_running(req)
            self.outstanding -= 1
            pool.outstanding_total -= 1
            freed = True
            req.generated = 1
            if req.output_tokens <= 1:
                req.status = COMPLETED
                req.done_at_s = now
                req.kv_remote = 0
                self.run.request_finished(req)
                continue
            self.pinned += -(-req.prompt_tokens // self.block)  # freed when its transfer ends (release_at)
            if not pool.at_prefill[req.workload]:
                self.run.routers[pool.decode_router[req.workload]].handoff(req)
            elif req.cur_pool != pool.index and req.pool_shares:  # sent at its start: its share here is now known
                req.pool_shares = req.pool_shares[:-1] + ((pool.index, req.share_s),)
        if freed:
            for index in pool.watchers:
                index.changed(self.index)
            for listener in self.listeners:
                listener.pull(self)

    def _send_early(self, admitted: list, end: float) -> None:
        """Prefill side, at the start of a prefill iteration ending at ``end``: mark where
        the KV cache is computed and when it is complete; with ``at_prefill`` the decode
        replica is chosen now, so it can reserve blocks while the prefill runs."""
        pool, now = self.pool, self.env._now
        for req in admitted:
            req.prefill_at_s = now
            req.kv_ready_at_s = end
            req.kv_src_pool = pool.index
            req.kv_src_replica = self.index
            req.kv_remote = 1
            if req.output_tokens > 1 and pool.at_prefill[req.workload]:
                self.run.routers[pool.decode_router[req.workload]].handoff(req)

    def _head_fits(self, counter: int) -> bool:
        """Would :meth:`_admit` at a boundary with iteration counter ``counter`` (no
        completion or preemption there) admit the first waiting request? The same tests:
        a batch slot for every branch, and its KV blocks within the free blocks above the
        watermark (the first admission of a boundary is never held back by the token
        budget)."""
        req = self.waiting[0]
        if self.n_running + self.n_loading + req.branches > self.max_batch:
            return False
        need = -(-(req.prompt_tokens + (1 if req.kv_remote else req.generated)) // self.block) * req.branches
        cap = self.cap_blocks - self.pinned
        if need <= cap - math.floor(self.blocks_used_bounds(counter)[1]) - self.watermark_blocks:
            return True
        return need <= cap - self.blocks_used(counter) - self.watermark_blocks

    # --- a run of iterations: [one mixed prefill+decode iteration] + n decode-only ------
    # Decode iterations are timed from the segment's anchor: while the batch does not
    # change, iteration j of the segment ends at ``anchor + decode_stretch_time_s(j)``,
    # whether it is reached in one run (fast) or one iteration at a time (exact), so the
    # two modes compute bit-identical instants and break ties alike.
    def _begin(self, admitted: list[Request]) -> None:
        """Start the iterations until the next boundary: the mixed iteration that prefills
        ``admitted`` (if any), then, in fast mode, decode iterations up to the first
        completion, KV exhaustion or admissible waiting request, as one timer."""
        perf, heap, now = self.perf, self.heap, self.env._now
        t_mixed = 0.0
        if admitted:
            t_mixed = self._mixed_cost(admitted)
            if self.prefix is not None:  # at the prefill's start: an instant both modes reach
                if self.chunk:
                    self._cache_commit_chunks(len(admitted))
                else:
                    for req in admitted:
                        self._cache_commit(req)
        after = self.iters + (1 if admitted else 0)  # counter when decode-only iterations start
        if self._stale:
            # (only stale entries left: a chunked replica runs with its prompts mid-prefill outside the heap)
            while heap.next_done() != NO_COMPLETION and heap.first_seq() != heap.first().run_seq:
                heap.pop()
                self._stale -= 1
            self._next_done = heap.next_done()
        b = self.n_running
        if admitted or self._seg_version != self._version:  # the batch changed: new segment
            self._anchor = anchor = now + t_mixed
            self._seg_iters = after
            self._seg_context0 = context0 = self.sum_offsets + b * self._kv(after)
            self._seg_line = line = perf.decode_line(b) if self.spec is None else self.spec.line(b)
            self._seg_b = b
            self._seg_version = self._version
        else:
            anchor, context0, line = self._anchor, self._seg_context0, self._seg_line
        j0 = after - self._seg_iters
        remaining = self._next_done - after
        if self.role == PREFILL:  # its requests leave after the prefill iteration
            n = 0
            self._send_early(self._last_chunks(admitted) if self.chunk else admitted, anchor)
        elif self._pending:  # a prompt mid-prefill: one iteration per timer in both modes
            n = 0
        elif self.run.exact:
            n = 0 if admitted else 1
        else:
            n = 0
            if remaining > 0:  # _kv_fit_iterations' O(1) test first: the cache nearly always holds them all
                fits = (self.sum_offsets + b * self._kv(after + remaining - 1)) / self.block + b <= self.cap_blocks - self.pinned
                n = remaining if fits else self._kv_fit_iterations(remaining, after)
            if not admitted and n < 1:
                # preemption keeps the last sequence (or the reserved ones); under
                # speculation its KV bound ⌊I·g⌋ can pass the cache by a block near its end:
                # it runs one iteration at a time, as the exact mode does
                n = 1
            # a waiting request that fits at the first boundary inside the stretch is
            # admitted there; if it does not fit there it fits at no later one (the batch
            # is fixed and its KV blocks only grow), so that boundary is the only check
            inner = after if admitted else after + 1
            if n > inner - after and self.waiting and self._head_fits(inner):
                n = inner - after
            if self.loading and n > inner - after:  # a KV cache arriving: join at the first boundary after it
                n = self._boundary_index_at(self.loading[0][0], anchor, line, context0, b, j0 + (inner - after),
                                            j0 + n) - j0
            self._cuttable = True
        self._start = now
        self._admitted = admitted
        self._inflight = True
        self._in_j0, self._in_n = j0, n
        self._decode_from = anchor if admitted else now  # == boundary j0, exactly
        self._end_at = end = anchor + decode_stretch_time_s(line, context0, b, j0 + n)
        self._start_timer_at(end)

    def _boundary_at(self, j: int) -> float:
        """Instant of the boundary after decode iteration ``j`` of the segment (j = 0: its
        start, the end of the mixed iteration if there was one)."""
        return self._anchor + decode_stretch_time_s(self._seg_line, self._seg_context0, self._seg_b, j)

    def _mixed_cost(self, admitted: list[Request]) -> float:
        """One iteration prefilling ``admitted`` (once per request; best-of-k branches then
        copy the prompt's KV cache, k−1 extra writes) while the others decode a token.
        With a prefix cache, a request computes only its missed tokens m = n − c, whose
        causal attention covers m·c + m²/2 pairs (Σ of m² + 2mc passed as the squares) and
        reads the c cached tokens' KV (without a cache c = 0: the same sums, exactly).
        Blocks promoted from host memory are copied over the host link layer by layer
        under the iteration's compute, those from the SSD tier read after one latency at
        the drives' rate and copied the same way, those from the pool's shared store read
        over the scale-out NICs: the iteration takes the longest of the compute, the copy
        and the reads (:meth:`_cache_copy_s`)."""
        if self.chunk:
            return self._chunk_cost(len(admitted))
        n_decode = self.n_running
        block = self.cache_block  # 0 without a cache
        new_tokens = 0
        new_sq = 0.0
        cached = host = ssd = shared = 0
        admitted_offsets = 0
        copied = 0
        for r in admitted:
            tokens = r.prompt_tokens + r.generated
            c = r.cache_hit * block
            m = tokens - c
            new_tokens += m
            new_sq += float(m) * m + 2.0 * m * c
            cached += c
            host += r.cache_host * block
            ssd += r.cache_ssd * block
            shared += r.cache_shared * block
            admitted_offsets += r.branches * r.kv_offset
            n_decode -= r.branches
            copied += (r.branches - 1) * tokens
        context = self.sum_offsets - admitted_offsets + n_decode * self._kv(self.iters)  # of decoders
        if self.spec is None:
            t, flops, bytes_moved = self.perf.mixed_cost(new_tokens, new_sq, n_decode, context, copied, cached)
            hbm = self.perf.weight_bytes + self.kv_bytes_estimate(self.iters)
        else:
            t, flops, bytes_moved = self.spec.mixed_cost(new_tokens, new_sq, n_decode, context, copied, cached)
            hbm = self.perf.weight_bytes + self.spec.draft_resident_bytes + self.kv_bytes_estimate(self.iters)
            if self.spec.remote is not None:
                self._draft_mixed(new_tokens, new_sq, n_decode, context, cached)
        if host or ssd or shared:
            t = max(t, self._cache_copy_s(host, ssd, shared))
        self._mix_t, self._mix_flops, self._mix_bytes, self._mix_hbm = t, flops, bytes_moved, hbm
        self._mix_tokens = new_tokens + n_decode
        return t

    def _draft_mixed(self, new_tokens: float, new_sq: float, n_decode: int, context: float, cached: float) -> None:
        """A mixed iteration starting now with the drafter on a pool of its own: that pool
        prefills the new prompts and drafts for the decoders (accounted as it starts)."""
        prefill, forwards, d_flops, d_bytes = self.spec.remote_mixed(new_tokens, new_sq, n_decode, context, cached)
        self._draft_account(self.env.now, prefill + forwards, d_flops, d_bytes, context)

    def _draft_account(self, t0: float, busy: float, flops: float, bytes_moved: float, context: float) -> None:
        """Add ``busy`` seconds from ``t0`` of the drafter's work to its pool's statistics
        (:mod:`sim.models.speculation`: a remote drafter has no events of its own)."""
        remote = self.spec.remote
        hbm = remote.perf.weight_bytes + remote.perf.kv_bytes_per_token * context
        self.run.account(self.run.pools[remote.pool_index].stats, t0, t0 + busy, flops, bytes_moved, hbm)

    def _cache_copy_s(self, host: int, ssd: int, shared: int) -> float:
        """Seconds to bring ``host`` tokens' KV from host memory, ``ssd`` tokens' from the
        SSD tier and ``shared`` tokens' from the pool's shared store into HBM: the first
        two cross the host link, the SSD's read first (one latency, then the drives' rate,
        pipelined with the copy); the shared store's arrive over the GPUs' scale-out NICs
        (one latency, then their rate, RDMA into HBM), in parallel with the host link."""
        kv = self.perf.kv_bytes_per_token
        copy_s = (host + ssd) * kv / self.host_bytes_per_s if host or ssd else 0.0
        if ssd:
            copy_s = max(copy_s, self.ssd_latency_s + ssd * kv / self.ssd_bytes_per_s)
        if shared:
            copy_s = max(copy_s, self.shared_latency_s + shared * kv / self.shared_bytes_per_s)
        return copy_s

    def _cut(self) -> None:
        """End the running iterations at the first boundary at or after now."""
        self._cut_at(self.env._now)
        self._cuttable = False

    def _cut_at(self, at: float) -> None:
        """End the running iterations at the first boundary at or after ``at`` (>= now)."""
        j0, n = self._in_j0, self._in_n
        first = j0 if self._admitted else j0 + 1  # the run's first inner boundary
        j = self._boundary_index_at(at, self._anchor, self._seg_line, self._seg_context0, self._seg_b, first, j0 + n)
        self._in_n = j - j0
        self._end_at = end = self._anchor + decode_stretch_time_s(self._seg_line, self._seg_context0, self._seg_b, j)
        self._start_timer_at(end)

    def _boundary_index_at(self, at: float, anchor: float, line, context0: int, b: int, first: int, last: int) -> int:
        """The first boundary index j in [first, last] whose instant anchor + T(j) is at
        or after ``at`` (``last`` if none): the instants both modes reach."""
        elapsed = at - anchor
        j = first
        if elapsed > 0:  # the iteration in progress at ``at`` ends at k + 1
            k = decode_stretch_iterations_done(line, context0, b, last, elapsed)
            j = min(max(first, k + 1), last)
            if j > first and anchor + decode_stretch_time_s(line, context0, b, j - 1) >= at:
                j -= 1  # a boundary exactly at ``at``
        while j < last and anchor + decode_stretch_time_s(line, context0, b, j) < at:  # rounding of ``elapsed``
            j += 1
        return j

    def _finish(self, end: float | None = None) -> None:
        """Account for the iterations that just ended (at ``end``, default now): the mixed
        one (first tokens of the admitted requests) and the decode-only run after it, as
        one busy interval."""
        if not self._inflight:  # the wake-up timer of an idle replica
            return
        self._cuttable = False
        perf = self.perf
        j0, n = self._in_j0, self._in_n
        self._inflight = False
        flops = bytes_moved = hbm = 0.0
        if self._admitted:
            self._finish_mixed(self._anchor)
            flops, bytes_moved, hbm = self._mix_flops, self._mix_bytes, self._mix_hbm
        if n:
            b = self._seg_b
            hbm = perf.weight_bytes + self.kv_bytes_estimate(self.iters + n - 1)
            self.iters += n
            self.acc += (self._end_at - self._decode_from) / b
            if self.spec is None:
                context = self._seg_context0 + b * j0
                # decode_stretch_flops + decode_stretch_bytes (same expressions), their shared
                # Σ contexts computed once
                contexts = n * context + b * n * (n - 1) / 2.0
                flops += perf.linear_flops_per_token * b * n + perf.attn_flops_per_pair * contexts
                bytes_moved += perf.weight_bytes_read(b) * n + perf.kv_bytes_per_token * contexts
            else:
                context = self._seg_context0 + b * self.spec.growth * j0
                spec_flops, spec_bytes = self.spec.stretch_work(b, context, n)
                flops += spec_flops
                bytes_moved += spec_bytes
                hbm += self.spec.draft_resident_bytes
                if self.spec.remote is not None:  # the drafter's pool: busy for these steps' draft forwards
                    busy, d_flops, d_bytes = self.spec.remote_stretch(b, context, n)
                    self._draft_account(self._decode_from, busy, d_flops, d_bytes, context)
        self.run.account(self.pool.stats, self._start, self.env._now if end is None else end, flops, bytes_moved, hbm)

    def settle(self) -> None:
        """The run stops now (the drain ran out): account for the iterations of the run in
        flight whose boundaries came before now, as exact mode would have processed them,
        so first tokens and busy time do not depend on the mode."""
        if not self._inflight or not self._timer_pending():
            return
        j0, n = self._in_j0, self._in_n
        now = self.env._now
        if self._admitted and self._anchor >= now:  # inside the mixed iteration
            self._inflight = False
            self._stop_timer()
            return
        j = j0
        while j < j0 + n and self._boundary_at(j + 1) < now:
            j += 1
        self._in_n = j - j0
        self._stop_timer()
        self._end_at = self._boundary_at(j)
        self._finish(self._end_at)
        self._kv_sync()

    def _finish_mixed(self, end: float) -> None:
        """First tokens of the requests the mixed iteration (ending at ``end``) prefilled."""
        if self.chunk:
            self._finish_chunks(end)
            return
        t, tokens = self._mix_t, self._mix_tokens
        admitted, self._admitted = self._admitted, []
        self.iters += 1
        self.acc += t / tokens
        cached = self.prefix is not None
        for req in admitted:
            req.share_s += (req.prompt_tokens + req.generated - req.cache_hit * self.cache_block) * t / tokens
            req.acc_mark = self.acc
            if req.first_token_at_s != req.first_token_at_s:  # NaN: first run
                req.admitted_at_s = self._start
                req.first_token_at_s = end
                if cached:
                    self._cache_first(req, end)
        if self.role == PREFILL:
            self._hand_off(admitted)


    # --- chunked prefill (pool.prefill_chunk_tokens; module docstring of docs/serving.md) ---
    def _decode_tokens(self) -> int:
        """Tokens of an iteration's budget the decoding sequences take first: one each, or
        under speculation the k + 1 each verifies (vLLM V1's scheduler schedules a running
        request's drafted tokens with its own and takes them all from the token budget:
        docs/serving.md, "Chunked prefill with speculative decoding")."""
        n = self.n_running - self._pending_w
        return n if self.spec is None else n * (self.spec.k + 1)

    def _chunk_room(self) -> int:
        """Tokens of this iteration's budget left for new prompts: the budget less the
        decoding sequences' tokens (:meth:`_decode_tokens`) and the unprefilled tokens of
        the prompts mid-prefill."""
        room = self.chunk - self._decode_tokens()
        for entry in self._pending:
            req = entry[0]
            room -= req.prompt_tokens + req.generated - entry[1]
        return room

    def _plan_chunks(self) -> list:
        """This iteration's chunks: decodes first (one token per decoding sequence, k + 1
        under speculation), then the prompts mid-prefill, oldest first, each taking what is
        left of its prompt or of the budget (``entry[3]``). Returns their requests, in that
        order; the budget left after the decodes is at least 1 (``prefill_chunk_tokens`` >
        ``max_batch``, × (k + 1) under speculation: sim.scenario)."""
        budget = self.chunk - self._decode_tokens()
        chunked: list = []
        for entry in self._pending:
            req = entry[0]
            m = req.prompt_tokens + req.generated - entry[1]
            if m > budget:
                m = budget
            if m <= 0:
                break
            entry[3] = m
            budget -= m
            chunked.append(req)
        return chunked

    def _chunk_cost(self, n_chunks: int) -> float:
        """One iteration of ``n_chunks`` prompt chunks (the first of ``_pending``) beside one
        token for every decoding sequence: a chunk of m tokens after c prefilled or cached
        ones of its prompt computes m·c + m²/2 query-key pairs (Σ of m² + 2mc passed as the
        squares) and reads the c tokens' KV (``cached``), as a prefix-cache hit would
        (:meth:`sim.models.perf.PerfModel.mixed_cost`); best-of-k branches copy the prompt's
        KV after its last chunk. A prompt's cached blocks from host memory, the SSD tier or
        the shared store are brought in under its first chunk, which attends to all of them
        (the iteration takes the longer of its compute and the copies, :meth:`_cache_copy_s`).
        Under speculation the decoding sequences verify instead (k + 1 tokens each) and the
        drafter prefills the chunks and drafts for them, all by the speculation plan's
        mixed iteration (:meth:`sim.models.speculation.SpecPlan.mixed_cost`; a drafter on a
        pool of its own is charged there, :meth:`_draft_mixed`), as a whole prompt's."""
        n_decode = self.n_running - self._pending_w
        block = self.cache_block  # 0 without a prefix cache
        new_tokens = 0
        new_sq = 0.0
        cached = copied = host = ssd = shared = 0
        pending_offsets = 0
        for entry in self._pending:
            pending_offsets += entry[0].branches * entry[0].kv_offset
        for i in range(n_chunks):
            entry = self._pending[i]
            req = entry[0]
            m = entry[3]
            c = entry[1]
            new_tokens += m
            new_sq += float(m) * m + 2.0 * m * c
            cached += c
            tokens = req.prompt_tokens + req.generated
            if c + m == tokens:
                copied += (req.branches - 1) * tokens
            if c == req.cache_hit * block:  # its first chunk
                host += req.cache_host * block
                ssd += req.cache_ssd * block
                shared += req.cache_shared * block
        context = self.sum_offsets - pending_offsets + n_decode * self._kv(self.iters)  # of the decoding sequences
        hbm = self.perf.weight_bytes + self.kv_bytes_estimate(self.iters)
        if self.spec is None:
            t, flops, bytes_moved = self.perf.mixed_cost(new_tokens, new_sq, n_decode, context, copied, cached)
        else:
            t, flops, bytes_moved = self.spec.mixed_cost(new_tokens, new_sq, n_decode, context, copied, cached)
            hbm += self.spec.draft_resident_bytes
            if self.spec.remote is not None:
                self._draft_mixed(new_tokens, new_sq, n_decode, context, cached)
        if host or ssd or shared:
            t = max(t, self._cache_copy_s(host, ssd, shared))
        self._mix_t, self._mix_flops, self._mix_bytes = t, flops, bytes_moved
        self._mix_hbm = hbm
        self._mix_tokens = new_tokens + n_decode
        return t

    def _chunk_skip_cached(self, req: Request) -> int:
        """``req`` was just admitted (the last of ``_pending``) with a prefix-cache hit: its
        chunks start after its c0 cached tokens, which it never prefills. Returns c0."""
        c0 = req.cache_hit * self.cache_block
        self._pending[-1][1] = c0
        return c0

    def _cache_commit_chunks(self, n_chunks: int) -> None:
        """This iteration's chunks start (an instant both engine modes reach: one iteration
        per timer while a prompt is mid-prefill): each prompt's cache blocks that are whole
        by the end of its chunk join the cache, referenced, as vLLM V1 caches a block when
        it schedules the chunk that fills it; a request admitted at a later boundary sees
        them (the whole prompt's, at its last chunk, as :meth:`_cache_commit` at a whole
        prefill's start)."""
        prefix, block = self.prefix, self.cache_block
        for i in range(n_chunks):
            entry = self._pending[i]
            req = entry[0]
            keys = req.prefix
            if not keys:
                continue
            upto = prefix.usable(keys, req.prompt_tokens)
            whole = (entry[1] + entry[3]) // block
            if whole < upto:
                upto = whole
            req.cache_last = prefix.commit(keys, req.cache_last, req.cache_held, upto)  # none new: the capacity kept
            req.cache_held = upto
        self._cache_traffic()  # the blocks the commits moved between tiers, counted now

    def _last_chunks(self, chunked: list) -> list:
        """Of this iteration's ``chunked`` requests, those whose chunk is their last."""
        last: list = []
        for i in range(len(chunked)):
            entry = self._pending[i]
            req = entry[0]
            if entry[1] + entry[3] == req.prompt_tokens + req.generated:
                last.append(req)
        return last

    def _finish_chunks(self, end: float) -> None:
        """The chunk iteration ending at ``end`` is done: each chunk's share of its time goes
        to its request; a prompt whose last chunk it was gets its first token at ``end``:
        on a co-located replica it decodes from the next iteration (:meth:`_prefilled`), on
        a split deployment's prefill replica it is handed off (:meth:`_hand_off`)."""
        t, tokens = self._mix_t, self._mix_tokens
        chunked, self._admitted = self._admitted, []
        self.iters += 1
        self.acc += t / tokens
        block = self.cache_block
        done = 0
        for i in range(len(chunked)):
            entry = self._pending[i]
            req = entry[0]
            req.share_s += entry[3] * t / tokens
            req.acc_mark = self.acc
            if entry[1] == req.cache_hit * block and req.first_token_at_s != req.first_token_at_s:  # NaN: first run
                req.admitted_at_s = self._start
            entry[1] += entry[3]
            if entry[1] == req.prompt_tokens + req.generated:
                done += 1
        if self.role == PREFILL:
            handed: list = []
            for i in range(done):
                req = self._pending.pop(0)[0]
                self._pending_w -= req.branches
                self._first_token(req, end)
                handed.append(req)
            if handed:
                self._hand_off(handed)
            return
        for i in range(done):
            entry = self._pending.pop(0)
            self._prefilled(entry[0], entry[2], end)

    def _first_token(self, req: Request, end: float) -> None:
        """``req``'s prompt is prefilled at ``end``: its first token, on its first run."""
        if req.first_token_at_s != req.first_token_at_s:  # NaN
            req.first_token_at_s = end
            if self.prefix is not None:
                self._cache_first(req, end)

    def _prefilled(self, req: Request, admitted_iter: int, end: float) -> None:
        """``req``'s last chunk ended at ``end`` (iteration counter ``iters``): it holds its
        prompt and first token and decodes from the next iteration. Its KV, counted as
        growing with the others' since its admission, is set back to what a whole prefill
        in the last chunk's iteration leaves (prompt + that iteration's growth: one token,
        or ⌊I·g⌋ − ⌊(I−1)·g⌋ under speculation). Its completion counter is the one
        :meth:`_add_running` gives a whole prefill, that iteration standing for it."""
        w = req.branches
        extra = self._kv(self.iters - 1) - self._kv(admitted_iter)  # KV counted as grown before its last chunk
        if extra:
            self.residues[req.kv_offset % self.block] -= w
            req.kv_offset -= extra
            self.residues[req.kv_offset % self.block] += w
            self.sum_offsets -= w * extra
            self._version += 1
        self._pending_w -= w
        req.start_iter = self.iters - 1  # _note_progress: iters − start_iter tokens generated in this run
        self._first_token(req, end)
        if self.spec is None:
            self.heap.push(self.iters + req.output_tokens - req.generated - 1, req.run_seq, req)
        else:  # the steps left; a rerun's last chunk is one of them (as a whole prefill's iteration is)
            self.heap.push(self.iters + req.steps - req.spec_done - (1 if req.generated else 0), req.run_seq, req)
        self._next_done = self.heap.next_done()
