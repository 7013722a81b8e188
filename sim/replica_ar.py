"""An autoregressive serving replica: continuous batching with paged KV-cache admission.

The serving loop follows vLLM's scheduler (v0, 2024): at each iteration boundary it
finishes completed sequences, preempts the most recently admitted sequence (recompute)
when the KV cache cannot hold the next iteration, admits waiting requests first-come
first-served while the batch, the iteration token budget and the free KV blocks (above a
watermark) allow, and runs one iteration: a mixed iteration that prefills the admitted
prompts and decodes one token for every running sequence, or a decode-only iteration.

Cost grows with requests, not tokens (``fast`` mode): while the batch does not change, a
run of decode iterations is one SimPy timeout whose length is computed in closed form
(:func:`sim.perf.decode_stretch_time_s`, including the KV reads that grow every
iteration). The stretch ends at the first completion or at the first iteration the KV
cache cannot hold; an arrival that could be admitted cuts it at the next iteration
boundary. ``exact`` mode runs one timeout per iteration; both give the same results.

KV bookkeeping is O(block size) per query, not O(batch): every running sequence grows by
one token per iteration, so sequence i holds ``a_i + I`` tokens at iteration counter I
(``a_i`` fixed while it runs) and Σ⌈(a_i+I)/B⌉ follows from Σa_i and a histogram of
``a_i mod B``.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from itertools import count

import simpy

from sim.perf import (
    decode_stretch_bytes,
    decode_stretch_flops,
    decode_stretch_iterations_done,
    decode_stretch_time_s,
)
from sim.request import COMPLETED, Request


class ARReplica:
    """One replica of an autoregressive pool (see module docstring).

    Args:
        run: the :class:`~sim.run.RunContext`.
        pool: the owning pool runtime (perf model, config, KV capacity, stats).
        index: replica index within the pool.
    """

    def __init__(self, run, pool, index: int) -> None:
        self.run = run
        self.env = run.env
        self.pool = pool
        self.index = index
        self.perf = pool.perf
        cfg = pool.config
        self.max_batch = cfg.max_batch
        self.max_prefill_tokens = cfg.max_prefill_tokens
        self.block = cfg.kv_block_tokens
        self.cap_blocks = pool.kv_capacity_blocks
        self.watermark_blocks = math.ceil(cfg.kv_watermark * self.cap_blocks)
        self.block_bytes = self.block * self.perf.kv_bytes_per_token
        self.waiting: deque[Request] = deque()
        self.heap: list[tuple[int, int, Request]] = []
        self.order: list[tuple[int, Request]] = []
        self.n_running = 0
        self.iters = 0
        self.sum_offsets = 0
        self.residues = [0] * self.block
        self.acc = 0.0
        self.seq = count()
        self.listeners: list = []
        self._idle: simpy.Event | None = None
        self._cuttable = False
        self._stretch_free_blocks = 0
        self.process = self.env.process(self._loop())

    # --- queries used by routers ---------------------------------------------------
    @property
    def outstanding(self) -> int:
        return self.n_running + len(self.waiting)

    @property
    def queued(self) -> int:
        return len(self.waiting)

    @property
    def has_slot(self) -> bool:
        return self.outstanding < self.max_batch

    # --- KV cache ------------------------------------------------------------------
    def blocks_used(self, counter: int) -> int:
        """Σ⌈(a_i + counter)/B⌉ over running sequences, in O(B)."""
        if not self.n_running:
            return 0
        b = self.block
        pad = 0
        for rho, n in enumerate(self.residues):
            if n:
                pad += n * ((-(rho + counter)) % b)
        return (self.sum_offsets + self.n_running * counter + pad) // b

    def _kv_fit_iterations(self, limit: int) -> int:
        """How many of the next ``limit`` decode iterations the KV cache can hold."""
        b, blk, last = self.n_running, self.block, self.iters + limit - 1
        upper = (self.sum_offsets + b * last) / blk + b
        if upper <= self.cap_blocks:
            return limit
        lo, hi = 0, limit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.blocks_used(self.iters + mid - 1) <= self.cap_blocks:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _add_running(self, req: Request, tokens_now: int) -> None:
        seq = next(self.seq)
        req.run_seq = seq
        req.kv_offset = tokens_now - self.iters
        req.start_iter = self.iters
        self.sum_offsets += req.kv_offset
        self.residues[req.kv_offset % self.block] += 1
        self.n_running += 1
        heapq.heappush(self.heap, (self.iters + req.output_tokens - req.generated, seq, req))
        self.order.append((seq, req))

    def _remove_running(self, req: Request) -> None:
        self.sum_offsets -= req.kv_offset
        self.residues[req.kv_offset % self.block] -= 1
        self.n_running -= 1
        req.share_s += self.acc - req.acc_mark
        req.run_seq = -1

    # --- arrivals ------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        """Queue ``req``; wake the loop if idle, or cut a decode stretch at the next
        iteration boundary if the request could be admitted there."""
        req.replica = self.index
        self.waiting.append(req)
        if self._idle is not None and not self._idle.triggered:
            self._idle.succeed()
        elif self._cuttable and len(self.waiting) == 1 and self.n_running < self.max_batch:
            need = -(-req.prompt_tokens // self.block)
            if need <= self._stretch_free_blocks - self.watermark_blocks:
                self._cuttable = False
                self.process.interrupt()

    # --- the serving loop ----------------------------------------------------------
    def _loop(self):
        env = self.env
        while True:
            self._finish_completed()
            preempted = self._preempt_if_needed()
            admitted = [] if preempted else self._admit()
            if admitted:
                yield from self._mixed_iteration(admitted)
            elif self.n_running:
                yield from self._decode()
            else:
                self._idle = env.event()
                yield self._idle
                self._idle = None

    def _finish_completed(self) -> None:
        heap, now, freed = self.heap, self.env.now, False
        while heap and heap[0][0] <= self.iters:
            _, seq, req = heapq.heappop(heap)
            if req.run_seq != seq:
                continue
            self._remove_running(req)
            req.generated = req.output_tokens
            req.status = COMPLETED
            req.done_at_s = now
            freed = True
            self.run.request_finished()
        if freed:
            for listener in self.listeners:
                listener.pull(self)
            if len(self.order) > 2 * self.n_running + 64:
                self.order = [(s, r) for s, r in self.order if r.run_seq == s]

    def _preempt_if_needed(self) -> bool:
        """Recompute-preempt the latest admitted sequences until the next iteration fits."""
        preempted = False
        while self.n_running > 1 and self.blocks_used(self.iters) > self.cap_blocks:
            seq, victim = self.order.pop()
            if victim.run_seq != seq:
                continue
            victim.generated += self.iters - victim.start_iter
            self._remove_running(victim)
            victim.preemptions += 1
            self.waiting.appendleft(victim)
            preempted = True
        return preempted

    def _admit(self) -> list[Request]:
        admitted: list[Request] = []
        if not self.waiting:
            return admitted
        free = self.cap_blocks - self.blocks_used(self.iters) - self.watermark_blocks
        budget = self.max_prefill_tokens
        while self.waiting and self.n_running < self.max_batch:
            req = self.waiting[0]
            tokens = req.prompt_tokens + req.generated
            need = -(-tokens // self.block)
            if need > free or (admitted and tokens > budget):
                break
            self.waiting.popleft()
            free -= need
            budget -= tokens
            self._add_running(req, tokens)
            admitted.append(req)
        return admitted

    def _mixed_iteration(self, admitted: list[Request]):
        env, perf = self.env, self.perf
        start = env.now
        n_decode = self.n_running - len(admitted)
        new_tokens = sum(r.prompt_tokens + r.generated for r in admitted)
        new_sq = float(sum((r.prompt_tokens + r.generated) ** 2 for r in admitted))
        admitted_offsets = sum(r.kv_offset for r in admitted)
        context = self.sum_offsets - admitted_offsets + n_decode * self.iters  # of decoders
        t, flops, bytes_moved = perf.mixed_cost(new_tokens, new_sq, n_decode, context)
        hbm = perf.weight_bytes + self.blocks_used(self.iters) * self.block_bytes
        yield env.timeout(t)
        self.iters += 1
        tokens = new_tokens + n_decode
        self.acc += t / tokens
        now = env.now
        for req in admitted:
            req.share_s += (req.prompt_tokens + req.generated) * t / tokens
            req.acc_mark = self.acc
            if req.first_token_at_s != req.first_token_at_s:  # NaN: first run
                req.admitted_at_s = start
                req.first_token_at_s = now
        self.run.account(self.pool.stats, start, now, flops, bytes_moved, hbm)

    def _decode(self):
        if self.run.exact:
            yield from self._decode_one()
            return
        env, perf = self.env, self.perf
        b = self.n_running
        n = self.heap[0][0] - self.iters
        while self.heap[0][1] != self.heap[0][2].run_seq:
            heapq.heappop(self.heap)
            n = self.heap[0][0] - self.iters
        n = self._kv_fit_iterations(n)
        assert n >= 1, "KV cache must hold the next iteration after preemption"
        line = perf.decode_line(b)
        context0 = self.sum_offsets + b * self.iters
        start = env.now
        total = decode_stretch_time_s(line, context0, b, n)
        self._stretch_free_blocks = self.cap_blocks - self.blocks_used(self.iters)
        self._cuttable = True
        try:
            yield env.timeout(total)
        except simpy.Interrupt:
            done = decode_stretch_iterations_done(line, context0, b, n, env.now - start)
            n = min(done + 1, n)
            total = decode_stretch_time_s(line, context0, b, n)
            yield env.timeout(start + total - env.now)
        self._cuttable = False
        self._finish_stretch(start, b, context0, n, total)

    def _decode_one(self):
        env, perf = self.env, self.perf
        b = self.n_running
        context0 = self.sum_offsets + b * self.iters
        start = env.now
        t = perf.decode_time_s(b, context0)
        yield env.timeout(t)
        self._finish_stretch(start, b, context0, 1, t)

    def _finish_stretch(self, start: float, b: int, context0: int, n: int, total: float) -> None:
        perf = self.perf
        kv_end = self.blocks_used(self.iters + n - 1) * self.block_bytes
        self.iters += n
        self.acc += total / b
        self.run.account(
            self.pool.stats,
            start,
            self.env.now,
            decode_stretch_flops(perf, b, context0, n),
            decode_stretch_bytes(perf, b, context0, n),
            perf.weight_bytes + kv_end,
        )
