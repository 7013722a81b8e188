"""The roofline performance model of one replica (a TP×PP group running one model).

Every iteration costs::

    t = max(FLOP / (peak · η_c · tp), bytes / (BW · η_m · tp)) + t_comm(tokens) + t_fixed

- FLOP of a forward over ``n`` tokens: 2 · P_active · n (linear layers) plus attention,
  4 · layers · heads · head_dim FLOP per (query, key) pair (QKᵀ and AV, 2 FLOP per MAC).
- bytes: weights touched (all of them for a dense model; for a mixture of experts the
  expected distinct experts E·(1 − (1 − k/E)^n) of a batch of n tokens) plus the KV cache
  read and written.
- t_comm: tensor parallelism does two all-reduces of ``n · hidden`` 16-bit activations per
  layer over the scale-up link (Megatron-LM: one after attention, one after the MLP), each
  ``α0 + α1·log2(tp) + 2(tp−1)/tp · size / (η_bus·β)``
  (:func:`sim.models.parallelism.allreduce_time_s`, fitted to Vidur's NVLink all-reduce
  tables); pipeline parallelism pays ``pp − 1`` activation hops
  (:func:`~sim.models.parallelism.send_time_s`), over the scale-up link when the whole
  replica fits one domain, else over scale-out.
- The layout rules and the sharding are :mod:`sim.models.parallelism`'s: TP inside one
  scale-up domain and dividing the attention heads, EP as placement allows it (UserError
  otherwise); when TP exceeds the KV heads each shard keeps a copy of one KV head, so KV
  bytes per token grow by tp / kv_heads (:func:`~sim.models.parallelism.kv_replication`).
- Pipeline stages run one after another for a batch (no micro-batch overlap), so ``pp``
  adds memory capacity, not speed.
- SRAM parts (memory_kind ``sram``) add the latency of the layer chain across their chips
  or wafers to every iteration (:mod:`sim.models.sram`).
- Expert parallelism (``ep`` > 1, MoE only; e.g. DeepSeek-V3 over the 72 GPUs of a GB200
  NVL72): each pipeline stage is ``ep`` accelerators; attention and the shared weights run
  TP-``tp`` in ``dp = ep / tp`` data-parallel groups, each holding batch / dp sequences and
  its own KV cache; the routed experts are sharded, n_experts / ep per accelerator. An
  iteration over n tokens costs, one after the other (no overlap of communication with
  compute, no micro-batching)::

      t = roofline_tp(2·P_shared·n/dp + attention/dp, shared bytes + KV/dp)   (attention group)
        + roofline_1(2·P_expert·k·n/ep, E/ep · (1 − (1 − k/E)^n) · expert bytes)   (one GPU's experts)
        + L_moe · 2 · (α(ep) + (ep−1)/ep · (n/ep)·k · hidden · 2 B / (η_bus·β))   (all-to-all
          dispatch and combine per MoE layer, :func:`sim.models.parallelism.alltoall_time_s`)
        + TP all-reduces of n/dp tokens + fixed overhead

  Assumptions: routing is uniform and balanced (each GPU gets the mean load; no straggler
  factor: DeepSeek's auxiliary-loss-free balancing plus redundant experts aim at this);
  the all-to-all latency α(ep) = α0 + α1·log2(ep) is the fitted NVLink all-reduce latency
  (no all-to-all table was available); tokens move in 16-bit (DeepEP dispatches FP8: an
  overestimate of the dispatch bytes by 2×).
- Expected distinct experts touched by n tokens routed top-k of E (uniform, independent
  tokens): each token misses a given expert with probability 1 − k/E, so by linearity of
  expectation E·(1 − (1 − k/E)^n) — the occupancy problem (Feller, *An Introduction to
  Probability Theory and Its Applications* I, ch. II); used for MoE weight streaming.

Arithmetic intensity (FLOP/byte) of AR decode at batch b is ≈ b / bytes-per-param, far
below the ridge point peak/BW (≈ 295 FLOP/byte for an H100 in BF16): the memory wall.

All rates are per replica (summed over its tp chips), in FLOP/s and bytes/s; times in s.
"""

from __future__ import annotations

import math

from fleets.catalog import Accelerator, Model, default_attention_precision, default_kv_precision
from sim.models.parallelism import (
    LayoutError, allreduce_time_s, alltoall_time_s, check_ep, check_tp, kv_replication, link_for,
    replica_weight_bytes, scaleup_link, send_time_s, stage_accelerators, stored_kv_bytes_per_token,
)
from sim.models.sram import pipeline_latency_s

ACTIVATION_BYTES = 2.0  # activations exchanged in 16-bit precision (BF16/FP16)


class DecodeLine:
    """Decode iteration time as a function of the batch's total context C (tokens), batch
    size fixed: ``t(C) = max(c0 + c1·C, m0 + m1·C) + k`` seconds.

    A speculative-decoding step (:mod:`sim.models.speculation`) is a verification forward
    (this line) plus ``dn`` forwards of a ``draft`` line at the same context, and grows each
    sequence's context by ``g`` tokens (the expected tokens a step emits) instead of one:
    ``t(C) = max(c0 + c1·C, m0 + m1·C) + k + dn · draft.t(C)``.

    Memoised per batch size (:meth:`PerfModel.decode_line`) and shared: never mutated.
    A slotted class, not a dataclass, so that the compiled build can make it an
    extension type with C double fields (``perf.pxd``)."""

    __slots__ = ("c0", "c1", "m0", "m1", "k", "g", "dn", "draft")

    def __init__(self, c0: float, c1: float, m0: float, m1: float, k: float, g: float = 1.0,
                 draft: "DecodeLine | None" = None, dn: float = 0.0) -> None:
        self.c0 = c0
        self.c1 = c1
        self.m0 = m0
        self.m1 = m1
        self.k = k
        self.g = g
        self.draft = draft
        self.dn = dn

    def __repr__(self) -> str:
        extra = "" if self.draft is None and self.g == 1.0 else f", g={self.g!r}, dn={self.dn!r}, draft={self.draft!r}"
        return f"DecodeLine(c0={self.c0!r}, c1={self.c1!r}, m0={self.m0!r}, m1={self.m1!r}, k={self.k!r}{extra})"

    def time_s(self, context_tokens: float) -> float:
        t = max(self.c0 + self.c1 * context_tokens, self.m0 + self.m1 * context_tokens) + self.k
        if self.draft is not None:
            t += self.dn * self.draft.time_s(context_tokens)
        return t


class PerfModel:
    """Roofline costs of one replica of ``model`` on ``tp × pp`` ``accelerator`` chips.

    Args:
        accelerator: catalog entry (peak FLOP/s, memory bandwidth, efficiencies η_c, η_m,
            scale-up/scale-out links).
        model: catalog entry (parameters, layers, heads, KV bytes per token).
        precision: "bf16", "fp8" or "fp4": weights and the linear layers' math.
        kv_precision: KV-cache storage (default :func:`fleets.catalog.default_kv_precision`:
            the weights', FP8 under FP4 weights).
        attention_precision: attention math (default: the KV cache's).  A part without a
            peak for the weights' or attention precision raises UserError.
        tp, pp, ep: parallel layout (≥ 1); tp and ep are checked with
            :func:`sim.models.parallelism.check_tp` / :func:`~sim.models.parallelism.check_ep`
            (LayoutError, a UserError, naming the allowed values).
        iteration_overhead_s: extra fixed time per iteration on top of the accelerator's
            fitted ``iteration_overhead_s`` (scheduling, launch), s.
    """

    def __init__(
        self,
        accelerator: Accelerator,
        model: Model,
        precision: str,
        tp: int = 1,
        pp: int = 1,
        iteration_overhead_s: float = 0.0,
        kv_precision: str | None = None,
        attention_precision: str | None = None,
        ep: int = 1,
    ) -> None:
        _check_layout(model, accelerator, tp, ep)
        self.accelerator = accelerator
        self.model = model
        self.precision = precision
        self.tp = tp
        self.pp = pp
        self.kv_precision = kv_precision or default_kv_precision(precision)
        self.attention_precision = attention_precision or default_attention_precision(self.kv_precision)
        self.ep = ep
        group = stage_accelerators(tp, self.ep)  # accelerators per pipeline stage
        self.peak_flops = accelerator.peak_flops(precision) * group
        attention_peak = accelerator.peak_flops(self.attention_precision) * group
        self.peak_bw_bytes_per_s = accelerator.memory_bw_bytes_per_s * group
        self.compute_efficiency = compute_efficiency(accelerator, model, precision)
        self.compute_rate = self.peak_flops * self.compute_efficiency
        self.mem_rate = self.peak_bw_bytes_per_s * accelerator.bandwidth_efficiency
        self.overhead_s = accelerator.iteration_overhead_s + iteration_overhead_s
        if accelerator.memory_kind == "sram":  # layer chain latency of an SRAM machine
            self.overhead_s += sum(pipeline_latency_s(accelerator, model, precision, tp * pp))
        self.weight_bytes = replica_weight_bytes(model, precision, tp, self.ep)
        self.kv_bytes_per_token = stored_kv_bytes_per_token(model, self.kv_precision, tp)
        # sliding-window layers: a bounded cache per sequence (read every decode step) and a
        # bounded number of keys per query (fleets.catalog.Model.kv_bytes_per_sequence)
        self.kv_bytes_per_sequence = model.kv_bytes_per_sequence(self.kv_precision) * kv_replication(model, tp)
        self.linear_flops_per_token = 2.0 * model.active_params
        # per (query, key) pair over the layers that see the whole context: decode (MLA:
        # the weight-absorbed form) and prefill (MLA: the naive form); equal otherwise
        layers = model.context_attention_layers if model.layers else 0
        self.attn_flops_per_pair = model.attention_flops_per_pair_layer(decode=True) * layers
        self.prefill_attn_flops_per_pair = model.attention_flops_per_pair_layer(decode=False) * layers
        window = (model.local_attention_tokens or 0) * model.window_attention_layers
        self.window_attn_flops_per_token = model.attention_flops_per_pair_layer(decode=True) * window
        self.prefill_window_attn_flops_per_token = model.attention_flops_per_pair_layer(decode=False) * window
        # attention FLOP cost time at the attention peak: priced as linear-rate FLOP x this
        self.attn_time_weight = self.peak_flops / attention_peak
        self.expert_bytes = model.expert_weight_bytes(precision)  # one routed expert, all layers
        self._comm = _CommModel(accelerator, model, tp, pp, group)
        if accelerator.memory_kind == "sram":  # the chain latency above has the hops and TP reductions
            self._comm.hops = 0
            self._comm.allreduces = 0
        self._lines: dict[int, DecodeLine] = {}
        self._ep = _ExpertParallel(self, accelerator, model, precision, tp) if self.ep > 1 else None

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity where the roofline turns from memory- to compute-bound."""
        return self.peak_flops / self.peak_bw_bytes_per_s

    def weight_bytes_read(self, tokens: float) -> float:
        """Weight bytes streamed by one forward over ``tokens`` tokens (MoE: expected
        distinct experts touched by that many tokens routed top-k of E)."""
        m = self.model
        if not m.n_experts or m.n_experts <= 1 or tokens <= 0:
            return self.weight_bytes
        shared_bytes = self.weight_bytes - m.n_experts * self.expert_bytes  # × ep/tp groups under EP
        return shared_bytes + expected_experts_touched(m.n_experts, m.experts_per_token, tokens) * self.expert_bytes

    def comm_time_s(self, tokens: float) -> float:
        """TP all-reduces and PP hops for a forward over ``tokens`` tokens, s."""
        return self._comm.time_s(tokens)

    def time_s(self, flops: float, bytes_moved: float, tokens: float) -> float:
        """Roofline time of one iteration: the slower of compute and memory, plus the
        interconnect and fixed overhead, s."""
        return (
            max(flops / self.compute_rate, bytes_moved / self.mem_rate)
            + self._comm.time_s(tokens)
            + self.overhead_s
        )

    # --- autoregressive -------------------------------------------------------------
    def decode_line(self, batch: int) -> DecodeLine:
        """Coefficients of a decode iteration of ``batch`` sequences (one token each)
        (memoised per batch size)."""
        line = self._lines.get(batch)
        if line is None:
            line = self._lines[batch] = self._decode_line(batch)
        return line

    def _decode_line(self, batch: int) -> DecodeLine:
        if self._ep is not None:
            return self._ep.decode_line(batch)
        window_flops = self.window_attn_flops_per_token * self.attn_time_weight * batch
        return DecodeLine(
            c0=(self.linear_flops_per_token * batch + window_flops) / self.compute_rate,
            c1=self.attn_flops_per_pair * self.attn_time_weight / self.compute_rate,
            m0=(self.weight_bytes_read(batch) + self.kv_bytes_per_sequence * batch) / self.mem_rate,
            m1=self.kv_bytes_per_token / self.mem_rate,
            k=self._comm.time_s(batch) + self.overhead_s,
        )

    def verify_line(self, batch: int, tokens_per_sequence: int) -> DecodeLine:
        """Coefficients of one forward over ``tokens_per_sequence`` new tokens of each of
        ``batch`` sequences (a speculative verification: k drafted tokens + 1): linear FLOP
        and weights for batch × tokens tokens, each token attending to its sequence's
        context (c1 × tokens) and to the new tokens before it (q(q−1)/2 pairs per
        sequence, in c0), the KV cache read once per sequence (m1), TP all-reduces of
        batch × tokens tokens. Equal to :meth:`decode_line` at one token."""
        q = tokens_per_sequence
        tokens = batch * q
        within = self.attn_flops_per_pair * self.attn_time_weight * batch * q * (q - 1) / 2.0
        if self._ep is not None:
            ep = self._ep
            return DecodeLine(
                c0=(ep.shared_linear_flops_per_token * tokens + within) / ep.dp / ep.group_compute,
                c1=self.attn_flops_per_pair * self.attn_time_weight * q / ep.dp / ep.group_compute,
                m0=ep.shared_bytes / ep.group_memory,
                m1=self.kv_bytes_per_token / ep.dp / ep.group_memory,
                k=ep.fixed_s(tokens),
            )
        return DecodeLine(
            c0=(self.linear_flops_per_token * tokens + within) / self.compute_rate,
            c1=self.attn_flops_per_pair * self.attn_time_weight * q / self.compute_rate,
            m0=self.weight_bytes_read(tokens) / self.mem_rate,
            m1=self.kv_bytes_per_token / self.mem_rate,
            k=self._comm.time_s(tokens) + self.overhead_s,
        )

    def decode_flops(self, batch: int, context_tokens: float) -> float:
        """FLOP of one decode iteration of ``batch`` sequences with total context ``context_tokens``."""
        return ((self.linear_flops_per_token + self.window_attn_flops_per_token) * batch
                + self.attn_flops_per_pair * context_tokens)

    def decode_bytes(self, batch: int, context_tokens: float) -> float:
        """Bytes one decode iteration moves: weights touched, the context's KV cache and the
        sliding-window caches of every sequence."""
        return (self.weight_bytes_read(batch) + self.kv_bytes_per_sequence * batch
                + self.kv_bytes_per_token * context_tokens)

    def decode_time_s(self, batch: int, context_tokens: float) -> float:
        """One decode iteration: ``batch`` sequences whose contexts sum to ``context_tokens``."""
        if self._ep is not None:
            return self.decode_line(batch).time_s(context_tokens)
        flops_at_linear_rate = (self.linear_flops_per_token * batch
                                + (self.window_attn_flops_per_token * batch + self.attn_flops_per_pair * context_tokens)
                                * self.attn_time_weight)
        return self.time_s(flops_at_linear_rate, self.decode_bytes(batch, context_tokens), batch)

    def prefill_attention_flops(self, new_tokens: float, new_tokens_sq: float) -> float:
        """Attention FLOP of prefilling prompts with Σn = new_tokens and Σn² = new_tokens_sq:
        causal n²/2 pairs per prompt on the context layers, at most the window per token on
        the sliding layers (an upper bound by W²/2 pairs per prompt and layer)."""
        return 0.5 * self.prefill_attn_flops_per_pair * new_tokens_sq + self.prefill_window_attn_flops_per_token * new_tokens

    def prefill_flops(self, new_tokens: float, new_tokens_sq: float) -> float:
        """FLOP of prefilling prompts with Σn = new_tokens and Σn² = new_tokens_sq."""
        return self.linear_flops_per_token * new_tokens + self.prefill_attention_flops(new_tokens, new_tokens_sq)

    def mixed_cost(
        self, new_tokens: float, new_tokens_sq: float, batch: int, context_tokens: float, copied_tokens: float = 0.0,
        cached_tokens: float = 0.0,
    ) -> tuple[float, float, float]:
        """An iteration that prefills prompts (Σn, Σn²) and decodes one token for each of
        ``batch`` running sequences with total context ``context_tokens``;
        ``copied_tokens`` of KV cache are duplicated for best-of-k branches.
        ``cached_tokens`` prompt tokens come from a prefix cache: their KV is read once by
        the prefill's attention (the m·c query-key pairs of m new tokens over c cached
        ones are the caller's: it passes Σ(m² + 2mc) as ``new_tokens_sq``).

        Returns:
            (time_s, flops, bytes)
        """
        tokens = new_tokens + batch
        attn_flops = (self.prefill_attention_flops(new_tokens, new_tokens_sq)
                      + self.attn_flops_per_pair * context_tokens + self.window_attn_flops_per_token * batch)
        flops = self.linear_flops_per_token * tokens + attn_flops
        kv_tokens = context_tokens + new_tokens + 2 * copied_tokens + cached_tokens  # a copy reads and writes
        window_bytes = self.kv_bytes_per_sequence * batch
        bytes_moved = self.weight_bytes_read(tokens) + self.kv_bytes_per_token * kv_tokens + window_bytes
        if self._ep is not None:
            return (self._ep.iteration_s(tokens, attn_flops * self.attn_time_weight, kv_tokens, window_bytes),
                    flops, bytes_moved)
        timed = flops + (self.attn_time_weight - 1.0) * attn_flops
        return self.time_s(timed, bytes_moved, tokens), flops, bytes_moved

    def prefill_time_s(self, prompt_tokens: int) -> float:
        """Prefill of one prompt alone, s (the TTFT floor of an idle replica)."""
        return self.mixed_cost(prompt_tokens, float(prompt_tokens) ** 2, 0, 0.0)[0]


# Kernel class of diffusion_efficiency_factor (fitted on SDXL's UNet: convolutions, FP16
# attention under FP8 GEMMs): convolutional image denoisers (UNets) and conv VAEs, the
# rows of these kinds without a transformer layer count. A DiT (FLUX.1: 57 transformer
# blocks) is transformer GEMMs plus attention, costed at η_c like an LLM prefill (no
# diffusion DiT result to fit it on); video DiTs are costed by sim.models.video_parallel.
DIFFUSION_KINDS = ("image_diffusion", "vae_decoder")


def is_conv_diffusion(model: Model) -> bool:
    """Does ``model`` take ``diffusion_efficiency_factor``: a UNet denoiser or a VAE decoder
    (kind in :data:`DIFFUSION_KINDS`, no transformer ``layers``)?"""
    return model.kind in DIFFUSION_KINDS and not model.layers


def compute_efficiency(accelerator: Accelerator, model: Model, precision: str) -> float:
    """Achievable fraction of the dense peak for ``model``'s math at ``precision`` on
    ``accelerator``: η_c (dense transformer GEMMs) times the kernel-class factor of the
    model (``moe_efficiency_factor`` for a mixture of experts: grouped expert GEMMs and
    routing; ``diffusion_efficiency_factor`` for UNets and VAEs, :func:`is_conv_diffusion`) times
    ``fp4_efficiency_factor`` at fp4, at most 1.  The factors are fitted across chips by
    ``dcsim validate`` (:mod:`sim.studies.validate`; ``efficiency_source``)."""
    eta = accelerator.compute_efficiency
    if model.is_moe:
        eta *= accelerator.moe_efficiency_factor
    if is_conv_diffusion(model):
        eta *= accelerator.diffusion_efficiency_factor
    if precision == "fp4":
        eta *= accelerator.fp4_efficiency_factor
    return min(eta, 1.0)


def expected_experts_touched(n_experts: int, top_k: int, tokens: float) -> float:
    """Expected distinct experts (of ``n_experts``) that ``tokens`` tokens routed top-``top_k``
    touch: E·(1 − (1 − k/E)^n), uniform independent routing (module docstring)."""
    if tokens <= 0:
        return 0.0
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** tokens)


class _ExpertParallel:
    """The expert-parallel iteration of a MoE replica (module docstring): attention in
    ``ep / tp`` data-parallel TP groups, then each GPU's experts, then the all-to-all."""

    def __init__(self, perf: PerfModel, accelerator: Accelerator, model: Model, precision: str, tp: int) -> None:
        self.perf = perf
        self.ep = perf.ep
        self.dp = perf.ep // tp
        chip_compute = accelerator.peak_flops(precision) * perf.compute_efficiency
        chip_memory = accelerator.memory_bw_bytes_per_s * accelerator.bandwidth_efficiency
        self.group_compute = chip_compute * tp
        self.group_memory = chip_memory * tp
        self.chip_compute = chip_compute
        self.chip_memory = chip_memory
        self.shared_linear_flops_per_token = 2.0 * (model.active_params - model.experts_per_token * model.expert_params)
        self.shared_bytes = model.shared_weight_bytes(precision)  # one attention group's copy
        self.expert_bytes = model.expert_weight_bytes(precision)
        self.expert_flops_per_token = 2.0 * model.experts_per_token * model.expert_params
        self.n_experts, self.top_k = model.n_experts, model.experts_per_token
        # per MoE layer: dispatch + combine, each an all-to-all in which every GPU sends its
        # n/ep tokens k times: α(ep) + (ep−1)/ep · (n/ep)·k·hidden·2 B / (η_bus·β)
        link = scaleup_link(accelerator)
        sent_per_token = self.top_k * (model.hidden or 0) * ACTIVATION_BYTES / self.ep
        self.a2a_alpha_s = alltoall_time_s(link, 0.0, self.ep)
        self.a2a_s_per_token = alltoall_time_s(link, sent_per_token, self.ep) - self.a2a_alpha_s
        self.moe_layers = model.routed_layers

    def experts_s(self, tokens: float) -> float:
        """One GPU's share of the routed experts for ``tokens`` tokens (balanced routing)."""
        flops = self.expert_flops_per_token * tokens / self.ep
        touched = expected_experts_touched(self.n_experts, self.top_k, tokens) / self.ep
        return max(flops / self.chip_compute, touched * self.expert_bytes / self.chip_memory)

    def all_to_all_s(self, tokens: float) -> float:
        """Dispatch and combine of ``tokens`` tokens over every MoE layer, s."""
        if tokens <= 0:
            return 0.0
        return self.moe_layers * 2.0 * (self.a2a_alpha_s + self.a2a_s_per_token * tokens)

    def fixed_s(self, tokens: float) -> float:
        """Everything but the attention group's roofline: experts, all-to-all, TP
        all-reduces and PP hops of one group's tokens, fixed overhead."""
        return (self.experts_s(tokens) + self.all_to_all_s(tokens) + self.perf.comm_time_s(tokens / self.dp)
                + self.perf.overhead_s)

    def decode_line(self, batch: int) -> DecodeLine:
        p = self.perf
        window_flops = p.window_attn_flops_per_token * p.attn_time_weight * batch
        return DecodeLine(
            c0=(self.shared_linear_flops_per_token * batch + window_flops) / self.dp / self.group_compute,
            c1=p.attn_flops_per_pair * p.attn_time_weight / self.dp / self.group_compute,
            m0=(self.shared_bytes + p.kv_bytes_per_sequence * batch / self.dp) / self.group_memory,
            m1=p.kv_bytes_per_token / self.dp / self.group_memory,
            k=self.fixed_s(batch),
        )

    def iteration_s(self, tokens: float, attention_flops_timed: float, kv_tokens: float,
                    window_bytes: float = 0.0) -> float:
        """An iteration over ``tokens`` tokens whose attention costs ``attention_flops_timed``
        (at the linear-layer rate) and reads/writes ``kv_tokens`` of KV cache plus
        ``window_bytes`` of sliding-window caches, s."""
        compute = (self.shared_linear_flops_per_token * tokens + attention_flops_timed) / self.dp / self.group_compute
        kv_bytes = self.perf.kv_bytes_per_token * kv_tokens + window_bytes
        memory = (self.shared_bytes + kv_bytes / self.dp) / self.group_memory
        return max(compute, memory) + self.fixed_s(tokens)


class StagePerf:
    """Roofline of one co-located pipeline stage that runs several models one after the other
    in a step (e.g. SDXL's CLIP-L and OpenCLIP-bigG text encoders): their weights are summed,
    their FLOP come summed in the phase, and each model's TP all-reduces are charged at its
    own share of the stage's tokens (the phase's tokens are Σ latent_tokens × calls × scale,
    so a model's share is its latent_tokens over the sum).

    The stage is timed as one roofline over the summed FLOP and bytes, not as a sum of one
    roofline per model: equal when the models sit on the same side of the ridge point
    (true of the text encoders at batch ≤ a few hundred prompts), a lower bound otherwise.
    """

    def __init__(self, perfs: list[PerfModel]) -> None:
        first = perfs[0]
        self.perfs = perfs
        self.model = first.model
        self.compute_rate = first.compute_rate
        self.mem_rate = first.mem_rate
        self.overhead_s = first.overhead_s
        self.weight_bytes = sum(p.weight_bytes for p in perfs)
        tokens = [float(p.model.latent_tokens or 0) for p in perfs]
        total = sum(tokens)
        self._shares = [t / total if total else 1.0 / len(perfs) for t in tokens]

    def weight_bytes_read(self, tokens: float) -> float:
        return self.weight_bytes

    def comm_time_s(self, tokens: float) -> float:
        return sum(p.comm_time_s(tokens * share) for p, share in zip(self.perfs, self._shares))

    def time_s(self, flops: float, bytes_moved: float, tokens: float) -> float:
        return max(flops / self.compute_rate, bytes_moved / self.mem_rate) + self.comm_time_s(tokens) + self.overhead_s


class StagePerfs:
    """The roofline model each phase of a step-batched replica runs at, by the tuple of model
    keys the phase names (:data:`sim.workloads.phases.KERNEL`).

    The replica's own model (the denoiser, or the stage a stage pool was placed for) uses
    the pool's :class:`PerfModel`; a co-located stage (text encoders, VAE decoder, safety
    checker, verifier) gets a model of its own on the same chips and layout, so it streams
    its own weights and runs at its own arithmetic intensity
    (FLOP / (own weights + own activations)) instead of the denoiser's. Built lazily, once
    per stage.
    """

    def __init__(self, main: PerfModel, model_of, tp: int, pp: int, iteration_overhead_s: float = 0.0,
                 kv_precision: str | None = None, attention_precision: str | None = None) -> None:
        self.main = main
        self._model_of = model_of  # key -> fleets.catalog.Model
        self._args = (tp, pp, iteration_overhead_s, kv_precision, attention_precision)
        self._perfs: dict[tuple, PerfModel | StagePerf] = {(main.model.key,): main}

    def get(self, keys: tuple) -> PerfModel | StagePerf:
        perf = self._perfs.get(keys)
        if perf is None:
            tp, pp, overhead, kv, attn = self._args
            parts = [PerfModel(self.main.accelerator, self._model_of(k), self.main.precision, tp, pp, overhead, kv, attn)
                     for k in keys]
            perf = self._perfs[keys] = parts[0] if len(parts) == 1 else StagePerf(parts)
        return perf


def _check_layout(model: Model, accelerator: Accelerator, tp: int, ep: int) -> None:
    """The TP and EP rules of :mod:`sim.models.parallelism`, the error naming the model and
    the accelerator (placement checks the same rules first and names the pool)."""
    try:
        check_tp(tp, model, accelerator)
        check_ep(ep, tp, model, accelerator)
    except LayoutError as err:
        raise LayoutError(f"model '{model.key}' on accelerator '{accelerator.key}': {err.problem}", err.fix) from None


class _CommModel:
    """Interconnect time of one forward, linear in its tokens: two TP all-reduces per layer
    and ``pp − 1`` PP activation hops (costs from :mod:`sim.models.parallelism`)."""

    def __init__(self, accelerator: Accelerator, model: Model, tp: int, pp: int, group: int = 0) -> None:
        self.tp = tp
        self.pp = pp
        width = (model.hidden or 0) * ACTIVATION_BYTES
        self.allreduces = 2 * model.layers if tp > 1 and model.layers else 0
        scaleup = scaleup_link(accelerator)
        self.ar_alpha_s = allreduce_time_s(scaleup, 0.0, tp)
        self.ar_s_per_token = allreduce_time_s(scaleup, width, tp) - self.ar_alpha_s if tp > 1 else 0.0
        self.hops = pp - 1
        self.hop_alpha_s = self.hop_s_per_token = 0.0
        if pp > 1:  # over scale-up when the whole replica fits one domain, else scale-out
            hop = link_for(accelerator, (group or tp) * pp)
            self.hop_alpha_s = send_time_s(hop, 0.0)
            self.hop_s_per_token = width / hop.bw_bytes_per_s  # send_time_s's bandwidth term, per token

    def time_s(self, tokens: float) -> float:
        t = 0.0
        if self.allreduces:
            t += self.allreduces * (self.ar_alpha_s + self.ar_s_per_token * tokens)
        if self.hops:
            t += self.hops * (self.hop_alpha_s + self.hop_s_per_token * tokens)
        return t


MAX_ITERATIONS = float(2**53)
"""Cap on an iteration count solved in floating point (:func:`_quadratic_count`): callers
clamp to the stretch's length anyway, and the cap keeps it an exact 64-bit integer."""


def decode_stretch_time_s(line: DecodeLine, context0: float, batch: int, n: int) -> float:
    """Total time of ``n`` decode iterations with a fixed batch whose total context starts
    at ``context0`` and grows by ``batch`` × ``line.g`` tokens per iteration (closed form,
    O(1)).

    Iteration j costs ``max(a1 + b1·j, a2 + b2·j) + k``; the two lines cross at most once,
    so the sum splits into two arithmetic series at the crossing. A speculative step adds
    ``dn`` forwards of its draft line, summed the same way.
    """
    if n <= 0:
        return 0.0
    if line.draft is not None:
        growth = batch * line.g
        return _line_stretch_s(line, context0, growth, n) + line.dn * _line_stretch_s(line.draft, context0, growth, n)
    # one max() line (the common case, inlined): _line_stretch_s with growth = batch·g
    growth = batch * line.g
    a1, b1 = line.c0 + line.c1 * context0, line.c1 * growth
    a2, b2 = line.m0 + line.m1 * context0, line.m1 * growth
    if a1 < a2:
        a1, b1, a2, b2 = a2, b2, a1, b1  # (a1, b1): the line ahead at j = 0
    if b2 <= b1:  # the line ahead stays ahead: one series
        return n * (a1 + line.k) + b1 * (n - 1) * n / 2.0
    split = _first_index_where_second_wins(a1, b1, a2, b2, n)
    return _series(a1, b1, 0, split) + _series(a2, b2, split, n) + n * line.k


def _line_stretch_s(line: DecodeLine, context0: float, growth: float, n: int) -> float:
    """Σ_{j<n} max(c0 + c1·C_j, m0 + m1·C_j) + k with C_j = context0 + growth·j (n >= 1)."""
    a1, b1 = line.c0 + line.c1 * context0, line.c1 * growth
    a2, b2 = line.m0 + line.m1 * context0, line.m1 * growth
    if a1 < a2:
        a1, b1, a2, b2 = a2, b2, a1, b1  # (a1, b1): the line ahead at j = 0
    if b2 <= b1:  # the line ahead stays ahead: one series
        return n * (a1 + line.k) + b1 * (n - 1) * n / 2.0
    split = _first_index_where_second_wins(a1, b1, a2, b2, n)
    return _series(a1, b1, 0, split) + _series(a2, b2, split, n) + n * line.k


def decode_stretch_iterations_done(
    line: DecodeLine, context0: float, batch: int, n: int, elapsed_s: float
) -> int:
    """How many of ``n`` decode iterations have finished ``elapsed_s`` after the stretch
    began: the largest k ≤ n with stretch_time(k) ≤ elapsed_s.

    Within one branch of the max() the stretch time is quadratic in k, so k comes from
    the quadratic formula; the result is then checked against the exact sum (so float
    rounding can never make it disagree with :func:`decode_stretch_time_s`).
    """
    if line.draft is not None:  # a sum of two max() lines: piecewise quadratic, three pieces at most
        guess = _solve_spec_iterations(line, context0, batch * line.g, n, elapsed_s)
    else:
        guess = _solve_iterations(line, context0, batch * line.g, n, elapsed_s)
    k = min(max(guess, 0), n)
    while k > 0 and decode_stretch_time_s(line, context0, batch, k) > elapsed_s:
        k -= 1
    while k < n and decode_stretch_time_s(line, context0, batch, k + 1) <= elapsed_s:
        k += 1
    return k


def _solve_iterations(line: DecodeLine, context0: float, growth: float, n: int, elapsed_s: float) -> int:
    """Approximate inverse of the stretch time (see decode_stretch_iterations_done);
    ``growth``: context tokens added per iteration."""
    a1, b1 = line.c0 + line.c1 * context0 + line.k, line.c1 * growth
    a2, b2 = line.m0 + line.m1 * context0 + line.k, line.m1 * growth
    split = _first_index_where_second_wins(a1 - line.k, b1, a2 - line.k, b2, n)
    if a1 >= a2:
        first_a, first_b, second_a, second_b = a1, b1, a2, b2
    else:
        first_a, first_b, second_a, second_b = a2, b2, a1, b1
    head = _series(first_a, first_b, 0, split)
    if elapsed_s < head or split >= n:
        return _quadratic_count(first_a, first_b, 0, elapsed_s)
    return split + _quadratic_count(second_a + second_b * split, second_b, 0, elapsed_s - head)


def _solve_spec_iterations(line: DecodeLine, context0: float, growth: float, n: int, elapsed_s: float) -> int:
    """Approximate inverse of a speculative stretch's time (verification line plus ``dn``
    draft lines): per iteration a + b·j on at most three pieces between the two lines'
    crossings, each piece's count from the quadratic formula."""
    d = line.draft
    # each max(): the line ahead at j = 0, the other, and where the other takes over
    va1, vb1 = line.c0 + line.c1 * context0, line.c1 * growth
    va2, vb2 = line.m0 + line.m1 * context0, line.m1 * growth
    if va1 < va2:
        va1, vb1, va2, vb2 = va2, vb2, va1, vb1
    vs = _first_index_where_second_wins(va1, vb1, va2, vb2, n) if vb2 > vb1 else n
    da1, db1 = d.c0 + d.c1 * context0, d.c1 * growth
    da2, db2 = d.m0 + d.m1 * context0, d.m1 * growth
    if da1 < da2:
        da1, db1, da2, db2 = da2, db2, da1, db1
    ds = _first_index_where_second_wins(da1, db1, da2, db2, n) if db2 > db1 else n
    fixed = line.k + line.dn * d.k
    first_cut, second_cut = min(vs, ds), max(vs, ds)
    spent = 0.0
    start = 0
    for stop in (first_cut, second_cut, n):
        if stop <= start:
            continue
        a = (va1 if start < vs else va2) + line.dn * (da1 if start < ds else da2) + fixed
        b = (vb1 if start < vs else vb2) + line.dn * (db1 if start < ds else db2)
        piece = _series(a, b, start, stop)
        if elapsed_s < spent + piece:
            return start + _quadratic_count(a + b * start, b, 0, elapsed_s - spent)
        spent += piece
        start = stop
    return n


def _quadratic_count(a: float, b: float, _start: int, budget: float) -> int:
    """Largest k with Σ_{j<k} (a + b·j) = k·a + b·k(k−1)/2 ≤ budget (a > 0, b ≥ 0)."""
    if budget <= 0:
        return 0
    if b <= 0:
        return int(min(budget / a, MAX_ITERATIONS))
    # b/2·k² + (a − b/2)·k − budget = 0
    half = b / 2.0
    lin = a - half
    return int(min((-lin + math.sqrt(lin * lin + 4.0 * half * budget)) / (2.0 * half), MAX_ITERATIONS))


def _first_index_where_second_wins(a1: float, b1: float, a2: float, b2: float, n: int) -> int:
    """The first integer j in [0, n] where the line that loses at j=0 overtakes the other
    (n if never): where max() switches branch."""
    if a1 >= a2:
        ahead_a, ahead_b, behind_a, behind_b = a1, b1, a2, b2
    else:
        ahead_a, ahead_b, behind_a, behind_b = a2, b2, a1, b1
    if behind_b <= ahead_b:
        return n
    # a crossing past n + 1 gives n below, so it is capped there before it becomes an
    # integer (two nearly equal slopes put it beyond any integer type)
    j = math.floor(min((ahead_a - behind_a) / (behind_b - ahead_b), n + 1.0)) + 1
    # guard the float boundary so the split agrees with a per-iteration max()
    while j > 0 and behind_a + behind_b * (j - 1) > ahead_a + ahead_b * (j - 1):
        j -= 1
    while j < n and not (behind_a + behind_b * j > ahead_a + ahead_b * j):
        j += 1
    return min(max(j, 0), n)


def _series(a: float, b: float, start: int, stop: int) -> float:
    """Σ_{j=start}^{stop-1} (a + b·j)."""
    count = stop - start
    if count <= 0:
        return 0.0
    return count * a + b * (start + stop - 1) * count / 2.0


def decode_stretch_flops(perf: PerfModel, batch: int, context0: float, n: int) -> float:
    """FLOP of ``n`` decode iterations (closed form)."""
    contexts = n * context0 + batch * n * (n - 1) / 2.0
    return ((perf.linear_flops_per_token + perf.window_attn_flops_per_token) * batch * n
            + perf.attn_flops_per_pair * contexts)


def decode_stretch_bytes(perf: PerfModel, batch: int, context0: float, n: int) -> float:
    """Bytes moved by ``n`` decode iterations (closed form)."""
    contexts = n * context0 + batch * n * (n - 1) / 2.0
    return ((perf.weight_bytes_read(batch) + perf.kv_bytes_per_sequence * batch) * n
            + perf.kv_bytes_per_token * contexts)
