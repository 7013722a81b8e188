"""A step-batched replica for diffusion-family jobs (diffusion LMs, image and video
diffusion pipelines, branching search and its verifier).

Each admitted request runs the phases of its current *leg* (the part of its journey
placed on this pool, see :mod:`sim.workloads.phases`); a phase is ``steps`` forwards of ``width``
samples. Every batch step advances every member by one step, so members at different
steps of different requests share one forward (step-level batching).

The batch only changes at a step boundary where a member finishes a phase (it moves to
its next phase, waits blocked for memory, or leaves), a blocked member fits again, or a
waiting request is admitted. Blocked members and admissions only become possible when a
phase ends (the batch width and reserved memory are fixed in between, and admission is
first come first served behind any blocked member), so with the batch fixed every step
costs the same and the steps up to the first phase end are one SimPy timeout of n·t
(``fast`` mode); an arrival that becomes the head of the queue and fits cuts it at the next
step boundary. When the drain runs out mid-run, :meth:`StepReplica.settle` counts the
steps finished by then. ``exact`` mode runs one timer per step. Both modes time step j
after the last batch change as ``anchor + j·t`` at that absolute instant with the
replica's priority (:mod:`sim.engine.timer`), so every request gets the same timestamps
(checked by ``tests/sim/engine/test_fast_exact_differential.py``).

Memory: a member holds its base reservation (a diffusion LM's KV cache) for the whole
leg, plus ``width × act_bytes`` of its current phase. When the next phase needs more
(a branching fork: ×k activations) and it does not fit, the member waits, blocked and
out of the batch, until running members free memory; blocked members go before new
admissions, first come first served. Reservations never exceed the replica's free
memory, so HBM never overflows.
"""

from __future__ import annotations

from collections import deque

from sim.engine.completion_heap import CompletionHeap
from sim.engine.request import Request, RouterFacing
from sim.workloads.phases import ACT, BYTES, DENOISE, FIRST_OUTPUT, FLOPS, KERNEL, STAGE, STEPS, TOKENS, VERIFY, WIDTH
from sim.engine.timer import TimerDriven, replica_clock, replica_priority


class StepReplica(TimerDriven):
    """One replica of a step-batched pool (see module docstring)."""

    # slots, not a __dict__: a 4,096-replica fleet's replica state stays compact in cache
    __slots__ = (
        "_anchor", "_busy", "_cuttable", "_j0", "_clock", "_slot", "_seg_steps",
        "_seg_version", "_start", "_step_bytes", "_step_s", "_steps", "_version", "acc", "blocked",
        "env", "flops", "free_bytes", "heap", "index", "kernels", "listeners", "max_batch", "members",
        "outstanding", "perf", "pool", "reserved", "run", "next_seq", "stage_perfs", "steps_done", "waiting",
        "width"
    )

    def __init__(self, run, pool, index: int) -> None:
        self.run = run
        self.env = run.env
        self.pool = pool
        self.index = index
        self.perf = pool.perf
        self.stage_perfs = pool.stage_perfs
        self.max_batch = pool.config.max_batch
        self.free_bytes = pool.free_bytes
        self.waiting: deque[Request] = deque()
        self.blocked: deque[Request] = deque()
        self.heap = CompletionHeap()  # running phases by (step counter at their end, seq)
        self.outstanding = 0
        self.members = 0
        self.width = 0
        self.flops = 0.0
        # per kernel (the model keys a phase runs): [width, flops, bytes beyond weights, tokens];
        # each kernel streams its own weights at its own roofline every step
        self.kernels: dict[tuple, list] = {}
        self._step_bytes = 0.0
        self.reserved = 0.0
        self.steps_done = 0
        self.acc = 0.0
        self.next_seq = 0  # of the next phase started
        self.listeners: list = []  # central-queue routers, pulled when a slot frees
        self._busy = False
        self._cuttable = False
        self._clock = replica_clock(self.env)
        self._slot = self._clock.register(self, replica_priority(pool.index, index))
        self._start = 0.0
        self._step_s = 0.0
        self._steps = 0
        self._j0 = 0
        self._version = 0  # bumped whenever a member enters or leaves a phase
        self._seg_version = -1
        self._anchor = 0.0
        self._seg_steps = 0


    def _phase_fits(self, ph: tuple, base: float = 0.0) -> bool:
        return (
            self.width + ph[WIDTH] <= self.max_batch
            and self.reserved + base + ph[WIDTH] * ph[ACT] <= self.free_bytes
        )

    def _admissible(self, req: Request) -> bool:
        return not self.blocked and self._phase_fits(req.phases[_first(req)], req.reserved_bytes)

    def submit(self, req: Request) -> None:
        req.replica = self.index
        self.outstanding += 1
        self.waiting.append(req)
        pool = self.pool
        pool.outstanding_total += 1
        pool.queued_total += 1
        self._tell_watchers()
        if not self._busy:
            self._busy = True
            self._start_timer_at(self.env.now)  # same-instant arrivals join one admission
        elif self._cuttable and len(self.waiting) == 1 and self._admissible(req):
            self._cut()

    # --- membership ----------------------------------------------------------------
    def _enter_phase(self, req: Request) -> None:
        self._version += 1
        ph = req.phases[req.phase]
        w = ph[WIDTH]
        self.width += w
        self.flops += w * ph[FLOPS]
        g = self.kernels.get(ph[KERNEL])
        if g is None:
            g = self.kernels[ph[KERNEL]] = [0, 0.0, 0.0, 0.0]
        g[0] += w
        g[1] += w * ph[FLOPS]
        g[2] += w * ph[BYTES]
        g[3] += w * ph[TOKENS]
        self.reserved += w * ph[ACT]
        pool = self.pool
        pool.running_total += w
        pool.reserved_total_bytes += w * ph[ACT]
        req.acc_mark = self.acc
        seq = self.next_seq
        self.next_seq += 1
        req.run_seq = seq
        self.heap.push(self.steps_done + ph[STEPS], seq, req)

    def _leave_phase(self, req: Request) -> None:
        self._version += 1
        ph = req.phases[req.phase]
        w = ph[WIDTH]
        self.width -= w
        self.flops -= w * ph[FLOPS]
        g = self.kernels[ph[KERNEL]]
        g[0] -= w
        if g[0]:
            g[1] -= w * ph[FLOPS]
            g[2] -= w * ph[BYTES]
            g[3] -= w * ph[TOKENS]
        else:  # exact zero: no float residue
            del self.kernels[ph[KERNEL]]
        self.reserved -= w * ph[ACT]
        pool = self.pool
        pool.running_total -= w
        pool.reserved_total_bytes -= w * ph[ACT]
        req.share_s += w * (self.acc - req.acc_mark)
        if ph[STAGE] == DENOISE:
            req.sample_steps += w * ph[STEPS]
            req.denoiser_flops += w * ph[STEPS] * ph[FLOPS]
        elif ph[STAGE] == VERIFY:
            req.verifier_calls += w * ph[STEPS]

    def _advance_phases(self) -> None:
        heap, now = self.heap, self.env.now
        while heap.next_done() <= self.steps_done:  # NO_COMPLETION when empty
            req = heap.pop()
            self._leave_phase(req)
            if req.phases[req.phase][FIRST_OUTPUT] and req.first_token_at_s != req.first_token_at_s:
                req.first_token_at_s = now
            req.phase = _next(req, req.phase + 1)
            if req.phase >= len(req.phases):
                self._leave(req)
            elif self.blocked or not self._phase_fits(req.phases[req.phase]):
                req.blocked_at_s = now
                self.blocked.append(req)  # e.g. a fork whose ×k activations do not fit yet
            else:
                self._enter_phase(req)
        if not self.width:  # exact zero: no float residue between busy periods
            self.flops = 0.0
            if not self.members:
                self.pool.reserved_total_bytes -= self.reserved  # the float residue, if any
                self.reserved = 0.0

    def _leave(self, req: Request) -> None:
        self.members -= 1
        self.outstanding -= 1
        self.pool.outstanding_total -= 1
        self._tell_watchers()
        self.reserved -= req.reserved_bytes
        self.pool.reserved_total_bytes -= req.reserved_bytes
        req.phases = ()
        self.pool.finish_leg(req)
        for listener in self.listeners:
            listener.pull(self)

    def _unblock(self) -> None:
        while self.blocked and self._phase_fits(self.blocked[0].phases[self.blocked[0].phase]):
            req = self.blocked.popleft()
            req.memory_wait_s += self.env.now - req.blocked_at_s
            self._enter_phase(req)

    def _admit(self) -> None:
        now, waiting = self.env.now, len(self.waiting)
        while self.waiting and self._admissible(self.waiting[0]):
            req = self.waiting.popleft()
            if req.leg == 0:
                req.admitted_at_s = now
            else:
                req.handoff_wait_s += now - req.leg_dispatched_at_s
            self.members += 1
            self.reserved += req.reserved_bytes
            self.pool.reserved_total_bytes += req.reserved_bytes
            req.phase = _first(req)
            self._enter_phase(req)
        if len(self.waiting) != waiting:
            self.pool.queued_total -= waiting - len(self.waiting)
            self._tell_watchers()

    # --- steps ---------------------------------------------------------------------
    # While the batch does not change every step costs the same t, and step j of the
    # segment ends at ``anchor + j·t`` in both modes (bit-identical instants).
    def _boundary(self) -> None:
        self._advance_phases()
        self._unblock()
        self._admit()
        if not self.width:
            self._busy = False
            return
        now = self.env.now
        if self._seg_version != self._version:  # the batch changed: new segment
            self._step_s, self._step_bytes = self._step_cost()
            self._anchor = now
            self._seg_steps = self.steps_done
            self._seg_version = self._version
        self._j0 = self.steps_done - self._seg_steps
        self._steps = 1 if self.run.exact else self.heap.next_done() - self.steps_done
        self._start = now
        self._cuttable = not self.run.exact
        self._start_timer_at(self._anchor + (self._j0 + self._steps) * self._step_s)

    def _step_cost(self) -> tuple[float, float]:
        """(time, bytes moved) of one batch step: each kernel's own roofline over its
        members' FLOP, its own weights plus their bytes, and its own interconnect time."""
        t = moved = 0.0
        for key, (_, flops, bytes_, tokens) in self.kernels.items():
            perf = self.stage_perfs.get(key)
            b = perf.weight_bytes_read(tokens) + bytes_
            t += perf.time_s(flops, b, tokens)
            moved += b
        return t, moved

    def _cut(self) -> None:
        """End the running steps at the first step boundary at or after now."""
        t, j0, now = self._step_s, self._j0, self.env.now
        j = min(max(int((now - self._anchor) / t), j0 + 1), j0 + self._steps)
        while j > j0 + 1 and self._anchor + (j - 1) * t >= now:
            j -= 1
        while j < j0 + self._steps and self._anchor + j * t < now:
            j += 1
        self._steps = j - j0
        self._cuttable = False
        self._start_timer_at(self._anchor + j * t)

    def _finish(self, end: float | None = None) -> None:
        if not self._steps:  # the wake-up timer of an idle replica
            return
        n, t = self._steps, self._step_s
        self._steps = 0
        self._cuttable = False
        self.steps_done += n
        self.acc += n * t / self.width
        flops = n * self.flops
        bytes_moved = n * self._step_bytes
        end = self.env.now if end is None else end
        self.run.account(self.pool.stats, self._start, end, flops, bytes_moved, self.pool.resident_bytes + self.reserved)

    def settle(self) -> None:
        """The run stops now (the drain ran out): account for the steps of the run in
        flight whose boundaries came before now, as exact mode would have processed them
        (no phase ends inside a run, so no request changes)."""
        if not self._steps or not self._timer_pending():
            return
        t, j0, now = self._step_s, self._j0, self.env.now
        j = j0
        while j < j0 + self._steps and self._anchor + (j + 1) * t < now:
            j += 1
        self._steps = j - j0
        self._stop_timer()
        self._finish(self._anchor + j * t)


def _next(req: Request, i: int) -> int:
    """Index of the first phase at or after ``i`` with steps to run."""
    phases = req.phases
    while i < len(phases) and phases[i][STEPS] == 0:
        i += 1
    return i


def _first(req: Request) -> int:
    return _next(req, 0)
