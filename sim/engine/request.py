"""One request as it moves through the engine, and its final status.

Requests are small slotted objects; the engine touches each O(1) times (arrival,
admission, phase changes, completion), never once per token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PENDING, COMPLETED, REJECTED = 0, 1, 2
STATUS_NAMES = {PENDING: "in_flight", COMPLETED: "completed", REJECTED: "rejected"}

NAN = math.nan


@dataclass(slots=True, eq=False)
class Request:
    """A request and its outcome. Times are absolute simulated instants in seconds.

    ``steps`` is the denoising steps per block/trajectory (diffusion kinds; 0 = the
    workload's), ``images`` the samples generated together, ``service_s``
    the sampled service time (service_time kind). ``share_s`` is the replica-seconds
    attributed to this request: each iteration's time split over the tokens (or
    samples) it processed.
    """

    id: int
    workload: int
    arrival_at_s: float
    prompt_tokens: int = 0
    output_tokens: int = 0
    steps: int = 0
    service_s: float = 0.0
    images: int = 1  # samples per prompt (image diffusion trace replay)
    cfg: int = -1  # classifier-free guidance per request: 1 on, 0 off, -1 the workload's
    status: int = PENDING
    reason: str = ""
    pool: int = -1
    replica: int = -1
    admitted_at_s: float = NAN
    first_token_at_s: float = NAN
    done_at_s: float = NAN
    preemptions: int = 0
    share_s: float = 0.0
    sample_steps: int = 0
    denoiser_flops: float = 0.0
    # engine scratch state (meaning depends on the replica type)
    run_seq: int = -1
    acc_mark: float = 0.0
    kv_offset: int = 0
    start_iter: int = 0
    generated: int = 0
    phases: list | tuple = ()
    phase: int = 0
    reserved_bytes: float = 0.0
    # multi-stage journeys (diffusion pipelines, verifier hand-offs)
    journey: list | None = None
    leg: int = 0
    draws: tuple = ()
    leg_dispatched_at_s: float = 0.0
    handoffs: int = 0
    handoff_s: float = 0.0
    handoff_wait_s: float = 0.0
    verifier_calls: int = 0
    branches: int = 1
    memory_wait_s: float = 0.0
    blocked_at_s: float = 0.0
    cur_pool: int = -1
    pool_shares: tuple = ()  # ((pool index, cumulative share_s when it left that pool), ...)


class RouterFacing:
    """What every replica type shows its routers: requests ``queued`` for admission, a
    free batch slot (``has_slot``: outstanding < max_batch), and :meth:`_tell_watchers`,
    called whenever ``outstanding`` or ``queued`` changes so the routers' indexes
    (:mod:`sim.engine.router`) stay current. Subclasses set ``waiting`` (a deque),
    ``outstanding``, ``max_batch`` and ``watchers`` (a list of (router index, position))."""

    __slots__ = ()

    @property
    def queued(self) -> int:
        return len(self.waiting)

    @property
    def has_slot(self) -> bool:
        return self.outstanding < self.max_batch

    def _tell_watchers(self) -> None:
        for index, i in self.watchers:
            index.changed(i)
