"""Request shapes of the step-batched (diffusion-family) workloads as phases.

A phase is ``(steps, width, flops, bytes, tokens, first_output)`` per sample-step (see
:mod:`sim.replica_step`). FLOP per denoiser forward comes from the model catalog
(``Model.flops_per_step``, per sample at the model's reference shape); classifier-free
guidance doubles it (two forwards per step).

- image/video diffusion: one phase of S steps, width 1.
- branching search: the shared trunk (s steps, width 1), then the fork (N − s steps,
  width k): k·N − (k−1)·s sample-steps, i.e. the multiplier m = k − (k−1)·s/N of one
  trajectory.
- diffusion LM: a prefill phase (one forward over the prompt, which fills the KV cache),
  then one phase of S steps per block of L tokens; a block's step is a forward over the
  L block tokens attending to the committed context (prompt and earlier blocks, read from
  the KV cache) and to itself. The first block's completion is the first output (TTFT).

Each shape also gives the bytes a replica must reserve at admission: activations of the
widest phase (plus, for a diffusion LM, the KV cache of prompt and output).
"""

from __future__ import annotations

from sim.perf import PerfModel
from sim.request import Request


def step_shape(workload, perf: PerfModel, req: Request) -> tuple[list[tuple], float]:
    """Phases and reserved bytes of ``req`` of ``workload`` on a replica with ``perf``."""
    kind = workload.kind
    if kind == "diffusion_lm":
        return _diffusion_lm(workload, perf, req)
    model = perf.model
    cfg = model.default_cfg if workload.cfg is None else workload.cfg
    guidance = 2 if cfg else 1
    flops = model.flops_per_step * guidance
    act = model.activation_bytes_per_sample or 0.0
    tokens = (model.latent_tokens or 0) * guidance
    if kind == "branching_search":
        k, s, n = workload.candidates_k, workload.shared_steps, workload.total_steps
        phases = [(s, 1, flops, act, tokens, False), (n - s, k, flops, act, tokens, False)]
        width = k if n > s else 1
        return phases, width * act * guidance
    steps = workload.steps or model.default_steps
    return [(steps, 1, flops, act, tokens, False)], act * guidance


def _diffusion_lm(workload, perf: PerfModel, req: Request) -> tuple[list[tuple], float]:
    block = workload.block_tokens
    prompt = req.prompt_tokens
    blocks = -(-req.output_tokens // block)
    kv = perf.kv_bytes_per_token
    pair = perf.attn_flops_per_pair
    linear = perf.linear_flops_per_token
    phases = [(1, 1, perf.prefill_flops(prompt, float(prompt) ** 2), kv * prompt, prompt, False)]
    for i in range(blocks):
        context = prompt + i * block
        flops = linear * block + pair * block * (context + block)
        phases.append((req.steps, 1, flops, kv * (context + block), block, i == 0))
    act = perf.model.activation_bytes_per_sample or 0.0
    return phases, kv * (prompt + blocks * block) + act
