"""The cost of speculative decoding on one pool: a verification step and its draft.

A decode step of a speculating replica (:class:`SpecPlan`) over ``b`` sequences whose
contexts sum to C tokens::

    t(C) = verify(C) + k · draft(C)

- verify: one forward of the target over b·(k+1) tokens
  (:meth:`sim.models.perf.PerfModel.verify_line`): linear FLOP and weight streaming for
  b·(k+1) tokens (a mixture of experts touches the experts of b·(k+1) tokens), every
  token attending to its sequence's context, the KV cache read once per sequence, TP
  all-reduces of b·(k+1) tokens. Memory-bound at small b, so nearly free tokens there;
  compute-bound at large b, where it costs (k+1)× a decode step and the gain turns into a
  loss (vLLM speculative-decoding blog, 2024-10-17: 1.5–2.8× at QPS 1, 1.4–1.8× slower at
  high QPS on Llama-3-70B / 4×H100).
- draft: k forwards of the drafter over b tokens each, one after the other (each draft
  token needs the one before): a draft model of the catalog, or an MTP / EAGLE head of
  ``head_layers`` decoder layers of the target's shape reading the target's output
  projection (``head_vocab`` × hidden weights), both on the replica's own accelerators
  and layout; an n-gram lookup costs no accelerator time.

Per step each sequence's context grows by the expected tokens a step emits, E[L]
(:func:`sim.workloads.speculation.expected_tokens_per_step`), stored as a multiple of
1/:data:`GROWTH_DEN` (so the replica counts KV tokens in integers: ⌊I·g_num / 1024⌋
after I steps) while each request ends after its own drawn number of steps.

Memory: a draft model's weights and an MTP / EAGLE head's own layers (not the shared
output projection) sit in the replica beside the target's; the drafter's KV cache per
token adds to the target's when the KV capacity is counted.

**A drafter on a pool of its own** (:class:`RemoteDraft`; a pool serving
``<workload>:draft``): the draft model's forwards run on replicas of another pool (other
accelerators, e.g. a small GPU), each draft replica paired with ``targets_per_replica``
target replicas. A step is modelled **serial**, as vLLM's and SGLang's draft-model
speculation runs it and as the SpecInfer / "distributed speculative decoding" designs do
when drafter and verifier sit on different devices: the drafter needs the tokens the
last verification accepted before it can draft the next k, and the verifier needs the k
drafted tokens, so the step is draft, send, verify, send back (no pipelining of one
sequence's consecutive steps)::

    t(C) = verify(C) + k · draft_remote(C) + t_0,draft + 2 · (α + bytes / β)

with ``draft_remote`` the draft model's decode line on the draft pool's accelerators and
layout (its k forwards chained in one call, so the draft pool's per-iteration overhead
t_0,draft once per step), α and β the link between the two pools
(:func:`sim.models.kv_transfer.kv_link`: NVLink in one scale-up domain of one accelerator
type, else the slower side's scale-out NIC, ``fleets/data/fabrics.csv``) and bytes the
token ids (k per sequence out, the accepted count and the target's own token back, 4 B
each). The target's replica holds no draft weights or draft KV; its FLOP and bytes are
the verification's. The draft pool's busy time k · draft_remote(C) + t_0,draft per step
and its FLOP and bytes are added to that pool's statistics by the target replica
(:meth:`RemoteDraft.stretch`), without an event of its own; its memory holds the draft
weights and the draft KV of the sequences of its paired target replicas (the resolver caps
a target replica's KV blocks at its share of the draft replica's).

A mixed iteration (prefill of new prompts while the others verify): the target's
:meth:`~sim.models.perf.PerfModel.mixed_cost` with each decoder counted as k+1 decode
tokens (its context read once per token: an upper bound on the KV bytes; mixed
iterations are compute-bound by their prompts), plus the drafter's prefill of the new
prompts and its k forwards for the decoders. A chunked-prefill iteration is the same with
the chunks as the new tokens (a chunk of m after c: Σ(m² + 2mc) and the c tokens' KV read
by target and drafter alike, ``cached``): the drafter prefills the prompt chunk by chunk.
"""

from __future__ import annotations

import dataclasses
import math

from fleets.catalog import Model
from sim.models.perf import DecodeLine, PerfModel, _line_stretch_s
from sim.workloads.speculation import Speculation, expected_tokens_per_step

GROWTH_DEN = 1024
"""Denominator of a speculating sequence's KV growth per step (g = g_num / GROWTH_DEN)."""


def head_model(target: Model, layers: int, vocab: int, method: str) -> Model:
    """An MTP / EAGLE draft head: ``layers`` decoder layers of ``target``'s shape plus the
    output projection it reads (vocab × hidden). A layer's share of the parameters outside
    the experts is (shared − 2·vocab·hidden) / layers (the input embedding and the output
    projection taken out); a mixture of experts' head layer has the target's experts at
    their per-layer size (expert_params / routed layers). DeepSeek-V3 (vocab 129,280,
    hidden 7,168, 61 layers, 58 with experts): 0.24 B shared + 256 × 0.044 B experts per
    layer + 0.93 B projection = 12.4 B, of which 1.52 B active (8 experts): the report's
    MTP module is 11.5 B unique parameters, 2.4 B active including the shared 0.9 B
    embedding and 0.9 B output head (DeepSeek-V3 README_WEIGHTS.md)."""
    projection = float(vocab) * (target.hidden or 0)
    per_layer = (target.shared_params - 2.0 * projection) / (target.layers or 1)
    shared = per_layer * layers + projection
    if target.is_moe:
        expert = target.expert_params / target.routed_layers * layers
        params = shared + target.n_experts * expert
        active = shared + target.experts_per_token * expert
    else:
        expert, params, active = target.expert_params, shared, shared
    return dataclasses.replace(
        target, key=f"{target.key}:{method}-head", name=f"{target.name} {method} head", params=params,
        active_params=active, layers=layers, expert_params=expert, moe_layers=layers if target.is_moe else None)


TOKEN_ID_BYTES = 4
"""Bytes of one token id on the wire between a draft pool and its targets (int32 ids, as
vLLM and SGLang send them); the drafted k out, the accepted count and a token back."""


class RemoteDraft:
    """A drafter on a pool of its own (module docstring).

    Args:
        pool_index: the draft pool's index in its fleet (the engine adds the draft busy
            time and work to that pool's statistics).
        perf: the draft model's roofline on the draft pool's accelerators and layout, with
            no per-iteration overhead (``overhead_s`` is charged once per step).
        overhead_s: the draft pool's per-iteration overhead (its accelerator's fitted t_0
            plus the pool's ``iteration_overhead_s``), once per step.
        latency_s, bw_bytes_per_s: the link between the pools (α, s; β of one lane, B/s).
        targets_per_replica: target replicas per draft replica (the pairing ratio).
    """

    def __init__(self, pool_index: int, perf: PerfModel, overhead_s: float, latency_s: float,
                 bw_bytes_per_s: float, targets_per_replica: float) -> None:
        self.pool_index = pool_index
        self.perf = perf
        self.overhead_s = overhead_s
        self.latency_s = latency_s
        self.bw_bytes_per_s = bw_bytes_per_s
        self.targets_per_replica = targets_per_replica

    def link_s(self, batch: int, k: int) -> float:
        """Round trip of one step for ``batch`` sequences: 2α + (k + 2) token ids each over β, s."""
        return 2.0 * self.latency_s + batch * (k + 2) * TOKEN_ID_BYTES / self.bw_bytes_per_s


class SpecPlan:
    """Speculative decoding on one pool (module docstring): the verification and draft
    lines per batch size (memoised), their work, the drafter's memory.

    Args:
        spec: the workload's settings.
        perf: the pool's target model roofline.
        draft: the drafter's roofline on the same accelerators and layout (None: n-gram).
        draft_resident_bytes: weights the drafter adds to a replica.
    """

    def __init__(self, spec: Speculation, perf: PerfModel, draft: PerfModel | None,
                 draft_resident_bytes: float) -> None:
        self.spec = spec
        self.k = spec.draft_tokens
        self.acceptance = spec.acceptance_by_position()
        self.tokens_per_step = expected_tokens_per_step(self.acceptance)
        self.growth_num = int(round(self.tokens_per_step * GROWTH_DEN))
        self.growth = self.growth_num / GROWTH_DEN
        self.perf = perf
        self.draft = draft
        self.draft_resident_bytes = draft_resident_bytes
        self.draft_kv_bytes_per_token = draft.kv_bytes_per_token if draft is not None else 0.0
        # per-token constants of the work sums (a replica asks for them at every boundary)
        self.lin, self.attn, self.kv = perf.linear_flops_per_token, perf.attn_flops_per_pair, perf.kv_bytes_per_token
        self.d_lin = draft.linear_flops_per_token if draft is not None else 0.0
        self.d_attn = draft.attn_flops_per_pair if draft is not None else 0.0
        self._lines: dict[int, tuple] = {}  # batch -> (line, weight bytes of a step's verification, of a draft forward)
        self.remote = None  # RemoteDraft: the drafter runs on a pool of its own (with_remote)

    def with_remote(self, remote: RemoteDraft) -> "SpecPlan":
        """This plan with its drafter on another pool (module docstring): the replica holds
        no draft weights or draft KV, and a step adds the link's round trip and the draft
        pool's per-step overhead to the k draft forwards on the draft pool's roofline."""
        plan = SpecPlan(self.spec, self.perf, remote.perf, 0.0)
        plan.draft_kv_bytes_per_token = 0.0
        plan.remote = remote
        return plan

    def _of(self, batch: int) -> tuple:
        entry = self._lines.get(batch)
        if entry is None:
            v = self.perf.verify_line(batch, self.k + 1)
            d = self.draft.decode_line(batch) if self.draft is not None else None
            extra = 0.0 if self.remote is None else self.remote.overhead_s + self.remote.link_s(batch, self.k)
            line = DecodeLine(v.c0, v.c1, v.m0, v.m1, v.k + extra, self.growth, d,
                              float(self.k) if d is not None else 0.0)
            entry = (line, self.perf.weight_bytes_read(batch * (self.k + 1)),
                     self.draft.weight_bytes_read(batch) if self.draft is not None else 0.0)
            self._lines[batch] = entry
        return entry

    def line(self, batch: int) -> DecodeLine:
        """The step of ``batch`` sequences as a :class:`~sim.models.perf.DecodeLine`
        (verification, k draft forwards, growth g per sequence); memoised per batch."""
        return self._of(batch)[0]

    def step_time_s(self, batch: int, context_tokens: float) -> float:
        """One step of ``batch`` sequences whose contexts sum to ``context_tokens``, s."""
        return self.line(batch).time_s(context_tokens)

    def stretch_work(self, batch: int, context0: float, n: int) -> tuple[float, float]:
        """(FLOP, bytes) of ``n`` steps from total context ``context0`` (closed form)."""
        q = self.k + 1
        entry = self._of(batch)
        contexts = n * context0 + batch * self.growth * n * (n - 1) / 2.0
        flops = self.lin * batch * q * n + self.attn * (q * contexts + n * batch * q * (q - 1) / 2.0)
        moved = entry[1] * n + self.kv * contexts
        if self.draft is not None and self.remote is None:
            flops += self.k * (self.d_lin * batch * n + self.d_attn * contexts)
            moved += self.k * (entry[2] * n + self.draft_kv_bytes_per_token * contexts)
        return flops, moved

    def remote_stretch(self, batch: int, context0: float, n: int) -> tuple[float, float, float]:
        """(busy s, FLOP, bytes) on the draft pool of ``n`` steps of ``batch`` sequences from
        total context ``context0``: k draft forwards per step plus the pool's per-step
        overhead (the link's time is on neither pool). Only with a remote drafter."""
        d = self._of(batch)[0].draft
        busy = self.k * _line_stretch_s(d, context0, batch * self.growth, n) + n * self.remote.overhead_s
        contexts = n * context0 + batch * self.growth * n * (n - 1) / 2.0
        kv = self.remote.perf.kv_bytes_per_token
        flops = self.k * (self.d_lin * batch * n + self.d_attn * contexts)
        moved = self.k * (self._of(batch)[2] * n + kv * contexts)
        return busy, flops, moved

    def remote_mixed(self, new_tokens: float, new_sq: float, n_decode: int, context: float,
                     cached: float = 0.0) -> tuple[float, float, float, float]:
        """(draft prefill s, draft forwards s, FLOP, bytes) on the draft pool in a mixed
        iteration: the draft model's prefill of the new prompts (with the pool's
        per-iteration overhead), and for ``n_decode`` verifying sequences (total context
        ``context``) k draft forwards plus that overhead (0 s without decoders)."""
        r = self.remote
        prefill, flops, moved = r.perf.mixed_cost(new_tokens, new_sq, 0, 0.0, 0.0, cached)
        prefill += r.overhead_s
        forwards = 0.0
        if n_decode:
            entry = self._of(n_decode)
            d = entry[0].draft
            forwards = self.k * (max(d.c0 + d.c1 * context, d.m0 + d.m1 * context) + d.k) + r.overhead_s
            flops += self.k * (self.d_lin * n_decode + self.d_attn * context)
            moved += self.k * (entry[2] + r.perf.kv_bytes_per_token * context)
        return prefill, forwards, flops, moved

    def mixed_cost(self, new_tokens: float, new_sq: float, n_decode: int, context: float,
                   copied: float, cached: float = 0.0) -> tuple[float, float, float]:
        """(time_s, FLOP, bytes) of a mixed iteration (module docstring); ``cached``
        prompt tokens come from a prefix cache (target and draft both read their KV)."""
        q = self.k + 1
        t, flops, moved = self.perf.mixed_cost(new_tokens, new_sq, n_decode * q, context * q, copied, cached)
        if self.remote is not None:
            # the draft pool drafts for the decoders, sends, the target runs its forward while
            # the draft pool prefills the new prompts (module docstring)
            prefill, forwards, _, _ = self.remote_mixed(new_tokens, new_sq, n_decode, context, cached)
            link = self.remote.link_s(n_decode, self.k) if n_decode else 0.0
            return forwards + link + max(t, prefill), flops, moved
        if self.draft is not None:
            td, fd, md = self.draft.mixed_cost(new_tokens, new_sq, 0, 0.0, 0.0, cached)
            t, flops, moved = t + td, flops + fd, moved + md
            if n_decode:
                entry = self._of(n_decode)
                d = entry[0].draft
                t += self.k * (max(d.c0 + d.c1 * context, d.m0 + d.m1 * context) + d.k)
                flops += self.k * (self.d_lin * n_decode + self.d_attn * context)
                moved += self.k * (entry[2] + self.draft_kv_bytes_per_token * context)
        return t, flops, moved


def spec_plan(spec: Speculation, perf: PerfModel, model_of, iteration_overhead_s: float = 0.0) -> SpecPlan:
    """The :class:`SpecPlan` of ``spec`` on a pool whose target roofline is ``perf``
    (``model_of``: catalog model key -> Model, for a draft model).

    Raises:
        UserError / LayoutError: the drafter cannot run at the pool's layout (e.g. TP not
            dividing a draft model's heads), naming the model and accelerator."""
    if spec.method == "ngram":
        return SpecPlan(spec, perf, None, 0.0)
    acc, precision = perf.accelerator, perf.precision
    if spec.method == "draft_model":
        model = model_of(spec.draft_model)
        shared = 0.0
    else:
        model = head_model(perf.model, spec.head_layers, spec.head_vocab, spec.method)
        per_param = perf.model.weight_bytes(precision) / perf.model.params
        shared = float(spec.head_vocab) * (perf.model.hidden or 0) * per_param
    ep = perf.ep if model.is_moe else 1
    # The drafter's forwards run inside the verification's engine iteration (one schedule,
    # one sampling pass, captured in the same CUDA graph in vLLM, SGLang and TensorRT-LLM),
    # so they pay their roofline time and all-reduces but not the accelerator's fitted
    # per-iteration overhead t_0 (1.5 ms, docs/accuracy.md), which the verification pays once.
    draft = PerfModel(dataclasses.replace(acc, iteration_overhead_s=0.0), model, precision, perf.tp, perf.pp, iteration_overhead_s, perf.kv_precision,
                      perf.attention_precision, ep=ep)
    copies = ep // perf.tp if ep > 1 else 1  # under EP each attention group holds its own projection
    return SpecPlan(spec, perf, draft, max(draft.weight_bytes - shared * copies, 0.0))


def attach_drafters(pools: list, kv_end, where: str) -> None:
    """Give every pool whose workload drafts on a pool of its own (a pool of role
    ``draft``, serving ``<workload>:draft``) its :class:`RemoteDraft` (module docstring).

    ``pools``: the fleet's placed :class:`sim.fleet_plan.PoolPlan` list (changed in place:
    the targets' ``spec`` and ``kv_capacity_blocks``); ``kv_end(pool)``: its
    :class:`sim.models.kv_transfer.KVEnd`. The pairing ratio r is the workload's target
    replicas (every other pool serving it, either side of a split) per draft replica. A
    target replica's KV blocks are capped at its share 1/r of a draft replica's KV tokens
    (the draft KV of its sequences lives there).

    Raises:
        PlacementError: a draft replica could not keep up with its r targets even at their
            full batch and empty contexts (r × the draft's share of a step ≥ 1), naming the
            pools and the replicas needed."""
    from sim.errors import PlacementError
    from sim.models.kv_transfer import kv_link

    for draft in (p for p in pools if p.role == "draft"):
        d_perf = draft.perf
        bare = PerfModel(dataclasses.replace(d_perf.accelerator, iteration_overhead_s=0.0), d_perf.model,
                         d_perf.precision, d_perf.tp, d_perf.pp, 0.0, d_perf.kv_precision,
                         d_perf.attention_precision, ep=d_perf.ep)
        for w in draft.workloads:
            targets = [p for p in pools if p is not draft and w in p.workloads and p.spec is not None]
            ratio = sum(p.config.replicas for p in targets) / draft.config.replicas
            share_tokens = draft.kv_capacity_blocks * draft.config.kv_block_tokens / ratio
            for t in targets:
                link = kv_link(kv_end(draft), kv_end(t), d_perf.model, d_perf.kv_precision)
                remote = RemoteDraft(draft.index, bare, d_perf.overhead_s, link.latency_s, link.bw_bytes_per_s, ratio)
                t.spec = t.spec.with_remote(remote)
                t.kv_capacity_blocks = min(t.kv_capacity_blocks, int(share_tokens // t.config.kv_block_tokens))
                _check_keeps_up(t, draft, ratio, where, PlacementError)


def _check_keeps_up(target, draft, ratio: float, where: str, error) -> None:
    """Refuse a draft pool whose replicas would be busy more than all the time drafting for
    their ``ratio`` targets at the targets' full batch (contexts empty)."""
    spec, b = target.spec, target.config.max_batch
    line = spec.line(b)
    busy = spec.k * line.draft.time_s(0.0) + spec.remote.overhead_s
    share = ratio * busy / line.time_s(0.0)
    if share >= 1.0:
        need = math.ceil(draft.config.replicas * share)
        raise error(f"{where}: draft pool '{draft.name}' ({draft.config.replicas} replicas) drafts for "
                    f"{ratio:g} replicas of '{target.name}' each: at their full batch ({b}) a draft replica would "
                    f"be busy {share:.0%} of the time; give it at least {need} replicas")
