"""One request as it moves through the engine, and its final status.

Requests are small slotted objects; the engine touches each O(1) times (arrival,
admission, phase changes, completion), never once per token.
"""

from __future__ import annotations

import math

try:
    import cython
except ImportError:  # installed without Cython: the engine runs from this source
    from sim.engine._no_cython import cython


PENDING, COMPLETED, REJECTED = 0, 1, 2
STATUS_NAMES = {PENDING: "in_flight", COMPLETED: "completed", REJECTED: "rejected"}

NAN = math.nan


@cython.no_gc
@cython.cclass
class Request:
    """A request and its outcome. Times are absolute simulated instants in seconds.

    ``steps`` is the denoising steps per block/trajectory (diffusion kinds; 0 = the
    workload's), ``images`` the samples generated together, ``service_s``
    the sampled service time (service_time kind). ``share_s`` is the replica-seconds
    attributed to this request: each iteration's time split over the tokens (or
    samples) it processed.
    """

    # slots, not a __dict__; compiled (Cython, see ``request.pxd``) the fields are typed
    # C members: Py_ssize_t for the int fields, C double for the float ones.
    #
    # Compiled, a request is not tracked by the cyclic garbage collector (``no_gc``; the
    # ``cclass`` decorator only lets Cython accept it): its object fields hold plain data
    # (strings, tuples of numbers, phase tuples, journeys of router positions), never an
    # engine object, so it can be in no reference cycle. Tracked, every request cost an
    # unlink from the collector's list when freed (touching its neighbours in that list,
    # cold at thousands of replicas) and a visit by the young collection after the chunk
    # of the event loop it arrived in, if still in flight
    # (``tests/sim/engine/test_run_frees_its_engine.py`` checks a run leaks nothing).
    __slots__ = (
        "id", "workload", "arrival_at_s", "prompt_tokens", "output_tokens", "steps", "service_s", "images", "cfg",
        "status", "reason", "pool", "replica", "admitted_at_s", "first_token_at_s", "done_at_s", "preemptions",
        "share_s", "sample_steps", "denoiser_flops", "run_seq", "acc_mark", "kv_offset", "start_iter", "generated",
        "phases", "phase", "reserved_bytes", "journey", "leg", "draws", "leg_dispatched_at_s", "handoffs",
        "handoff_s", "handoff_wait_s", "verifier_calls", "branches", "memory_wait_s", "blocked_at_s", "cur_pool",
        "pool_shares", "variant", "adapter", "lora", "spec_done", "kv_remote", "kv_src_pool", "kv_src_replica",
        "decode_pool", "prefill_at_s", "kv_ready_at_s", "kv_done_at_s", "decode_queue_s", "kv_transfer_bytes",
        "kv_transfer_s", "prefix", "cache_hit", "cache_held", "cached_tokens", "prefill_flops_saved", "cache_host",
        "host_cached_tokens", "cache_last", "cache_ssd", "ssd_cached_tokens", "cache_shared",
        "shared_cached_tokens",
    )

    def __init__(
        self, id: int, workload: int, arrival_at_s: float, prompt_tokens: int = 0, output_tokens: int = 0,
        steps: int = 0, service_s: float = 0.0, images: int = 1, cfg: int = -1,
    ) -> None:
        self.id = id
        self.workload = workload
        self.arrival_at_s = arrival_at_s
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.steps = steps
        self.service_s = service_s
        self.images = images  # samples per prompt (image diffusion trace replay)
        self.cfg = cfg  # classifier-free guidance per request: 1 on, 0 off, -1 the workload's
        self.status = PENDING
        self.reason = ""
        self.pool = -1
        self.replica = -1
        self.admitted_at_s = NAN
        self.first_token_at_s = NAN
        self.done_at_s = NAN
        self.preemptions = 0
        self.share_s = 0.0
        self.sample_steps = 0
        self.denoiser_flops = 0.0
        # engine scratch state (meaning depends on the replica type)
        self.run_seq = -1
        self.acc_mark = 0.0
        self.kv_offset = 0
        self.start_iter = 0
        self.generated = 0
        self.phases = ()
        self.phase = 0
        self.reserved_bytes = 0.0
        # multi-stage journeys (diffusion pipelines, verifier hand-offs)
        self.journey = None
        self.leg = 0
        self.draws = ()
        self.leg_dispatched_at_s = 0.0
        self.handoffs = 0
        self.handoff_s = 0.0
        self.handoff_wait_s = 0.0
        self.verifier_calls = 0
        self.branches = 1
        self.memory_wait_s = 0.0
        self.blocked_at_s = 0.0
        self.cur_pool = -1
        self.pool_shares: tuple = ()  # ((pool index, cumulative share_s when it left that pool), ...)
        # a workload's model mix (sim.workloads.mix): checkpoint rank, adapter id (-1 none), adapters to load
        self.variant = 0
        self.adapter = -1
        self.lora = 0
        # speculative decoding: verification steps done (``steps`` is the total it needs)
        self.spec_done = 0
        # a split (prefill/decode) deployment: where the prompt's KV cache was computed,
        # whether it still sits there, and the hand-off's times
        self.kv_remote = 0
        self.kv_src_pool = -1
        self.kv_src_replica = -1
        self.decode_pool = -1
        nan = NAN
        self.prefill_at_s = nan
        self.kv_ready_at_s = nan
        self.kv_done_at_s = nan
        self.decode_queue_s = nan
        self.kv_transfer_bytes = nan
        self.kv_transfer_s = nan
        # a prefix cache (sim.engine.prefix_cache): the prompt blocks' chain keys (() none),
        # the blocks hit at the current admission and held, and the first prefill's cached
        # tokens and the prefill FLOP they saved
        self.prefix = ()
        self.cache_hit = 0
        self.cache_held = 0
        self.cached_tokens = 0
        self.prefill_flops_saved = 0.0
        self.cache_host = 0  # of the blocks hit at the current admission, those promoted from host memory
        self.host_cached_tokens = 0  # of the first prefill's cached tokens, those that came from host memory
        self.cache_ssd = 0  # of the blocks hit at the current admission, those promoted from the SSD tier
        self.ssd_cached_tokens = 0  # of the first prefill's cached tokens, those that came from the SSD tier
        self.cache_shared = 0  # of the blocks hit at the current admission, those copied from the pool's shared store
        self.shared_cached_tokens = 0  # of the first prefill's cached tokens, those from the pool's shared store
        self.cache_last = -1  # while admitted with a prefix cache: the slot of the run ending with its last block held there (PrefixCache.acquire)

    def __repr__(self) -> str:
        return f"Request(id={self.id}, workload={self.workload}, arrival_at_s={self.arrival_at_s}, status={self.status})"


class RouterFacing:
    """What every replica type shows its routers: requests ``queued`` for admission, a
    free batch slot (``has_slot``: outstanding < max_batch), and :meth:`_tell_watchers`,
    called whenever ``outstanding`` or ``queued`` changes so the routers' indexes
    (:mod:`sim.engine.router`) stay current. Subclasses set ``waiting`` (a deque),
    ``outstanding``, ``max_batch``, ``index`` (the replica's position in its pool) and
    ``pool``, whose ``watchers`` lists the indexes of the routers over the pool (one list
    per pool, not per replica: at thousands of replicas a per-replica list is one more
    object out of cache at every change)."""

    __slots__ = ()

    @property
    def queued(self) -> int:
        return len(self.waiting)

    @property
    def has_slot(self) -> bool:
        return self.outstanding < self.max_batch

    def _tell_watchers(self) -> None:
        for index in self.pool.watchers:
            index.changed(self.index)
