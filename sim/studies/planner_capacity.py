"""Analytic per-replica capacity (requests/s) from the roofline, for the planner's
starting point, and a true lower bound on the replicas (:func:`replica_seconds_floor`).

The capacity is an *estimate* (a full batch, no queueing, no stalls, but mean context
and whole-sequence KV), so ``ceil(rate / capacity)`` is where the search starts and can
be above the simulated minimum: on a KV-limited pool it charges each sequence its whole
output's KV while the engine's blocks grow with the tokens generated so far.

- autoregressive: batch b = min(max_batch, sequences whose prompt + output fit the KV
  cache); per request one prefill of the mean prompt P plus O decode iterations shared
  by b sequences at mean context P + O/2: capacity = 1 / (t_prefill(P) + O·t_decode(b)/b).
- image/video diffusion, branching search: b samples per denoiser step (max_batch, or
  fewer if their activations do not fit); m sample-steps per request (S, or
  k·N − (k−1)·s); capacity = b / (m · t_step(b)).
- diffusion LM: blocks of L tokens at mean context, E[steps] steps per block.

Any shape the estimate does not know gives ``inf`` (lower bound of one replica). Each
workload kind's terms live with the kind (:meth:`sim.workloads.base.WorkloadKind.capacity_rps`,
:meth:`~sim.workloads.base.WorkloadKind.floor_terms`).
"""

from __future__ import annotations

import math

from sim.models.perf import PerfModel
from sim.workloads import kind_of


def replica_capacity_rps(workload, pool) -> float:
    """Optimistic requests/s one replica of ``pool`` (an engine Pool) can serve."""
    perf: PerfModel | None = pool.perf
    if perf is None:
        return math.inf
    try:
        value = kind_of(workload).capacity_rps(workload, pool, perf)
    except (AttributeError, TypeError, ValueError, ZeroDivisionError):
        return math.inf
    return value if value > 0 and math.isfinite(value) else math.inf


# --- a true lower bound ------------------------------------------------------------------

def replica_seconds_floor(workload, pool) -> float:
    """The fewest busy replica-seconds one mean request of ``workload`` can cost a replica
    of ``pool`` (an engine Pool), so that ``ceil(rate x floor / pp)`` replicas is a lower
    bound on any pool that keeps up with ``rate`` (at 100% busy, a replica supplies one
    busy replica-second per second).

    Best case everywhere: every iteration carries a full batch of ``max_batch``
    sequences or samples (so it reads the weights once for ``max_batch`` of them), no
    attention FLOP and no KV-cache or activation traffic, no queueing, no preemption,
    no verifier calls; what is left cannot be avoided by the engine's roofline
    (:meth:`sim.models.perf.PerfModel.time_s` = max(compute, memory) + interconnect +
    overhead per iteration, and Σ max(c, m) ≥ max(Σ c, Σ m)):

    - autoregressive: compute 2·N_active·(P + O) FLOP; O iterations per sequence, each
      shared by at most ``max_batch`` sequences and reading at least the weights of one
      token (MoE: the experts one token touches).
    - diffusion LM: blocks·E[steps] forwards of ``block_tokens`` tokens, plus the prompt
      prefill.
    - image/video diffusion, branching search: (sample-steps × CFG passes) denoiser
      forwards, ``max_batch`` samples sharing each.

    Means of the token/step distributions are used; every term is linear in them, so
    the mean request's floor is the mean of the requests' floors. 0 when the shape is
    unknown (a bound of one replica). Units: s."""
    perf: PerfModel | None = pool.perf
    if perf is None:
        return 0.0
    batch = max(int(pool.config.max_batch), 1)
    try:
        flops, forwards = kind_of(workload).floor_terms(workload, perf)
    except (AttributeError, TypeError, ValueError, ZeroDivisionError):
        return 0.0
    compute = flops / perf.compute_rate
    memory = forwards / batch * perf.weight_bytes_read(1.0) / perf.mem_rate
    value = max(compute, memory) + forwards / batch * (perf.overhead_s + perf.comm_time_s(1.0))
    return value if value > 0 and math.isfinite(value) else 0.0
