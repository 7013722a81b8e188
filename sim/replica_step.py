"""A step-batched replica for diffusion-family jobs (diffusion LMs, image and video
diffusion, branching search).

Each admitted request runs a list of *phases*; a phase is ``steps`` denoiser forwards of
``width`` samples (width k after a branching fork), each sample-step costing ``flops``
FLOP, ``bytes`` bytes beyond the weights and ``tokens`` tokens through the interconnect.
Every batch step advances every member by one step, so members at different steps of
different requests share one forward (step-level batching, as in diffusion servers).

The batch only changes when a member finishes a phase, so with the batch fixed every
step costs the same and a run of n steps is one SimPy timeout of n·t (``fast`` mode);
an arrival that fits cuts it at the next step boundary. ``exact`` mode runs one timeout
per step. Admission is first-come first-served while the batch (in samples) and the
reserved memory (activations for the widest phase, plus the KV cache of a diffusion LM)
fit; a request is admitted only with its whole reservation, so memory never overflows.
"""

from __future__ import annotations

import heapq
from collections import deque
from itertools import count

from sim.request import COMPLETED, Request
from sim.timer import TimerDriven

# phase tuple fields
STEPS, WIDTH, FLOPS, BYTES, TOKENS, FIRST_OUTPUT = range(6)


class StepReplica(TimerDriven):
    """One replica of a step-batched pool (see module docstring). Driven by timeout
    callbacks like :class:`sim.replica_ar.ARReplica`."""

    def __init__(self, run, pool, index: int) -> None:
        self.run = run
        self.env = run.env
        self.pool = pool
        self.index = index
        self.perf = pool.perf
        self.max_batch = pool.config.max_batch
        self.free_bytes = pool.free_bytes
        self.waiting: deque[Request] = deque()
        self.heap: list[tuple[int, int, Request]] = []
        self.outstanding = 0
        self.members = 0
        self.width = 0
        self.flops = 0.0
        self.bytes = 0.0
        self.tokens = 0.0
        self.reserved = 0.0
        self.steps_done = 0
        self.acc = 0.0
        self.seq = count()
        self.listeners: list = []
        self._timer = None
        self._busy = False
        self._cuttable = False
        self._start = 0.0
        self._step_s = 0.0
        self._steps = 0

    @property
    def queued(self) -> int:
        return len(self.waiting)

    @property
    def has_slot(self) -> bool:
        return self.outstanding < self.max_batch

    def _fits(self, req: Request) -> bool:
        max_width = max(p[WIDTH] for p in req.phases)
        return self.width + max_width <= self.max_batch and self.reserved + req.reserved_bytes <= self.free_bytes

    def submit(self, req: Request) -> None:
        req.replica = self.index
        self.outstanding += 1
        self.waiting.append(req)
        if not self._busy:
            self._busy = True
            self._start_timer(0.0)
        elif self._cuttable and len(self.waiting) == 1 and self._fits(req):
            self._cut()

    # --- membership ----------------------------------------------------------------
    def _enter_phase(self, req: Request) -> None:
        ph = req.phases[req.phase]
        w = ph[WIDTH]
        self.width += w
        self.flops += w * ph[FLOPS]
        self.bytes += w * ph[BYTES]
        self.tokens += w * ph[TOKENS]
        req.acc_mark = self.acc
        seq = next(self.seq)
        req.run_seq = seq
        heapq.heappush(self.heap, (self.steps_done + ph[STEPS], seq, req))

    def _leave_phase(self, req: Request) -> None:
        ph = req.phases[req.phase]
        w = ph[WIDTH]
        self.width -= w
        self.flops -= w * ph[FLOPS]
        self.bytes -= w * ph[BYTES]
        self.tokens -= w * ph[TOKENS]
        req.share_s += w * (self.acc - req.acc_mark)
        req.sample_steps += w * ph[STEPS]
        req.denoiser_flops += w * ph[STEPS] * ph[FLOPS]

    def _advance_phases(self) -> None:
        heap, now, freed = self.heap, self.env.now, False
        while heap and heap[0][0] <= self.steps_done:
            _, _, req = heapq.heappop(heap)
            self._leave_phase(req)
            if req.phases[req.phase][FIRST_OUTPUT]:
                req.first_token_at_s = now
            req.phase += 1
            while req.phase < len(req.phases) and req.phases[req.phase][STEPS] == 0:
                req.phase += 1
            if req.phase < len(req.phases):
                self._enter_phase(req)
                continue
            self.members -= 1
            self.outstanding -= 1
            self.reserved -= req.reserved_bytes
            req.status = COMPLETED
            req.done_at_s = now
            req.phases = ()
            freed = True
            self.run.request_finished()
        if freed:
            for listener in self.listeners:
                listener.pull(self)
        if not self.members:  # exact zero: no float residue between busy periods
            self.flops = self.bytes = self.tokens = 0.0

    def _admit(self) -> None:
        now = self.env.now
        while self.waiting and self._fits(self.waiting[0]):
            req = self.waiting.popleft()
            req.admitted_at_s = now
            self.members += 1
            self.reserved += req.reserved_bytes
            req.phase = 0
            while req.phases[req.phase][STEPS] == 0:
                req.phase += 1
            self._enter_phase(req)

    # --- steps ---------------------------------------------------------------------
    def _boundary(self) -> None:
        self._advance_phases()
        self._admit()
        if not self.members:
            self._busy = False
            return
        perf = self.perf
        self._step_s = perf.time_s(self.flops, perf.weight_bytes_read(self.tokens) + self.bytes, self.tokens)
        self._steps = 1 if self.run.exact else self.heap[0][0] - self.steps_done
        self._start = self.env.now
        self._cuttable = not self.run.exact
        self._start_timer(self._steps * self._step_s)

    def _cut(self) -> None:
        t, elapsed = self._step_s, self.env.now - self._start
        done = min(int(elapsed / t), self._steps - 1)
        while done > 0 and done * t > elapsed:
            done -= 1
        self._steps = done + 1
        self._cuttable = False
        self._start_timer(max(self._start + self._steps * t - self.env.now, 0.0))

    def _finish(self) -> None:
        if not self._steps:  # the wake-up timer of an idle replica
            return
        n, t, perf = self._steps, self._step_s, self.perf
        self._steps = 0
        self._cuttable = False
        self.steps_done += n
        self.acc += n * t / self.width
        flops = n * self.flops
        bytes_moved = n * (perf.weight_bytes_read(self.tokens) + self.bytes)
        self.run.account(self.pool.stats, self._start, self.env.now, flops, bytes_moved, perf.weight_bytes + self.reserved)
