"""Accelerator and model catalogs: frozen records in SI units, loaded from ``fleets/data``.

The CSV files keep human units (TFLOP/s, GB, TB/s, GB/s, us, kW) so that each row can be
checked against its source by eye; :func:`fleets.catalog_io.load_catalog` reads them and converts them to SI (FLOP/s,
bytes, bytes/s, s, W) in one place.  Every row carries its sources and a status (one of
:data:`STATUS_WORDS`); see the ``*_source`` columns for the origin of each number.

The records are plain data. A method or property of a record reads that record's own
fields only, plus at most a precision name (bytes per parameter, the peak at a precision)
or the reference-shape scaling its row documents (:meth:`Model.flops_per_step_at`): facts
of the part or the model themselves. Nothing here takes a layout (tp, pp, ep), a group of
chips or a message size: the layout rules, the sharding of weights and KV cache and the
cost of collectives are :mod:`sim.models.parallelism`'s, costs are
:mod:`sim.models.economics`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from sim.errors import UserError

PRECISIONS = ("bf16", "fp8", "fp4")
BYTES_PER_PARAM = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5}
MODEL_KINDS = ("autoregressive", "diffusion_lm", "image_diffusion", "video_diffusion", "verifier",
               "text_encoder", "vae_decoder", "safety_checker")
# Kinds whose rows name a compound pipeline (text encoders -> denoiser -> safety -> VAE).
PIPELINE_KINDS = ("image_diffusion", "video_diffusion")
# Memory technologies: HBM stacks, on-chip SRAM (wafer/LPU machines, sim.models.sram), and GDDR
# boards (L4, L40S, RTX PRO 6000, Arc Pro B60); only "sram" changes the perf model.
MEMORY_KINDS = ("hbm", "sram", "gddr")
# Attention windows of a model's local layers: "sliding" (each query sees the last W tokens,
# gpt-oss: W = 128 on every other layer) or "chunked" (each query sees the earlier tokens of
# its own W-token chunk, Llama 4: W = 8192 on 3 of every 4 layers).
LOCAL_ATTENTION_KINDS = ("sliding", "chunked")
STATUS_WORDS = ("verified", "secondary", "unverified", "derived", "assumed")
# Status of a row's efficiency factors (``efficiency_status``): fitted on its own measured
# points, transferred from other chips by a stated rule, or taken from the spec alone.
EFFICIENCY_STATUS_WORDS = ("calibrated", "transferred", "spec-only")
# Live bf16 activation values per (token x hidden channel) at the peak of one denoiser
# forward: 46.3, least squares on the HunyuanVideo README's peaks (60 GB at 720x1280x129f,
# 45 GB at 544x960x129f; residuals -0.2%/+0.5%), checked on CogVideoX-2B/5B (+12%/+16%)
# and Wan2.1-1.3B (-5%): fleets/activation_fit.py, fleets/data/video_dit_peak_memory.csv.
ACTIVATION_VALUES_PER_TOKEN_CHANNEL = 46.3
ACTIVATION_BYTES_PER_VALUE = 2.0


def default_kv_precision(weights: str) -> str:
    """KV-cache precision when a scenario does not set one: the weights' precision, except
    FP4 weights keep an FP8 KV cache (production NVFP4 serving, e.g. TensorRT-LLM's FP4
    checkpoints, quantises weights to FP4 and the KV cache to FP8 only)."""
    return "fp8" if weights == "fp4" else weights


def default_attention_precision(kv: str) -> str:
    """Attention-math precision when not set: the KV cache's (FP8 attention kernels read an
    FP8 cache at FP8, e.g. FlashAttention-3 / TensorRT-LLM FP8 FMHA; a BF16 cache runs BF16)."""
    return kv


def check_precision(precision: str, where: str = "") -> str:
    """Return ``precision`` if it is one of :data:`PRECISIONS`, else raise UserError."""
    if precision not in PRECISIONS:
        raise UserError(f"{_prefix(where)}unknown precision {precision!r}; "
                        f"allowed: {', '.join(PRECISIONS)}")
    return precision


def activation_bytes_estimate(latent_tokens: float, hidden: float) -> float:
    """Peak activation bytes of one denoiser forward for one sample (no CFG).

    ``c x latent_tokens x hidden x 2 B`` with c = :data:`ACTIVATION_VALUES_PER_TOKEN_CHANNEL`
    (fitted on published video-DiT peaks, :mod:`fleets.activation_fit`; an extrapolation
    for image models, encoders and verifiers).
    """
    return (ACTIVATION_VALUES_PER_TOKEN_CHANNEL * latent_tokens * hidden
            * ACTIVATION_BYTES_PER_VALUE)


def _prefix(where: str) -> str:
    return f"{where}: " if where else ""


@dataclass(frozen=True, slots=True)
class Accelerator:
    """One accelerator type, in SI units (FLOP/s, bytes, bytes/s, s, W, USD).

    Bandwidths are per accelerator per direction.  ``node_overhead_w`` is the non-accelerator
    power of one node at full load; ``server_cost_usd_per_node`` is the non-accelerator
    server cost, to be added only when ``price_includes_server`` is false (see
    :func:`sim.models.economics.pool_costs`).  The scale-up fields (bandwidth, latency α0,
    latency per doubling of the group α1, bus efficiency η_bus) and the scale-out ones feed
    the collective costs of :mod:`sim.models.parallelism` (``scaleup_fabric`` names the
    fabric whose measured figures they are).  ``compute_efficiency`` /
    ``bandwidth_efficiency`` are the achievable fractions of peak (eta_c of dense
    transformer GEMMs, eta_m) and ``iteration_overhead_s`` the fixed time of every
    iteration, all fitted or transferred by ``dcsim validate`` (``efficiency_status``:
    calibrated / transferred / spec-only); the ``*_efficiency_factor`` fields scale eta_c
    for a kernel class or precision (mixture-of-experts GEMMs, diffusion UNets/DiTs and
    VAEs, fp4 math: :func:`sim.models.perf.compute_efficiency`), fitted across chips;
    ``efficiency_band_pct`` is the ± uncertainty (%) of a prediction on this chip from
    the leave-one-accelerator-out residuals (its own held-out points when it has them,
    else the other chips'; None: not computed).  Sources: the ``*_source`` fields.
    """

    key: str
    name: str
    vendor: str
    peak_bf16_flops: float
    peak_fp8_flops: float | None
    peak_fp4_flops: float | None
    memory_kind: str
    memory_bytes: float
    memory_bw_bytes_per_s: float
    scaleup_bw_bytes_per_s: float
    scaleup_domain_size: int
    scaleup_latency_s: float
    scaleup_latency_log2_s: float
    scaleup_bus_efficiency: float
    scaleout_bw_bytes_per_s: float
    scaleout_latency_s: float
    accelerators_per_node: int
    tdp_w: float
    node_overhead_w: float
    price_usd: float
    price_includes_server: bool
    server_cost_usd_per_node: float
    compute_efficiency: float
    bandwidth_efficiency: float
    iteration_overhead_s: float
    efficiency_band_pct: float | None
    rack_power_budget_w: float
    sram_layer_latency_s: float | None  # fixed latency of one layer on an SRAM part (sim.models.sram)
    sram_hop_latency_s: float | None
    status: str
    spec_source: str
    price_status: str
    price_source: str
    power_status: str
    power_source: str
    network_status: str
    network_source: str
    efficiency_status: str
    efficiency_source: str
    assumptions: str
    scaleup_fabric: str = ""  # key of sim.models.parallelism.FABRICS its collective figures come from
    moe_efficiency_factor: float = 1.0  # x compute_efficiency for mixture-of-experts models
    diffusion_efficiency_factor: float = 1.0  # x compute_efficiency for denoisers and VAE decoders
    fp4_efficiency_factor: float = 1.0  # x compute_efficiency for math at fp4

    @property
    def precisions(self) -> tuple[str, ...]:
        """Precisions this part has a published dense peak for (math runs only at these)."""
        rates = {"bf16": self.peak_bf16_flops, "fp8": self.peak_fp8_flops, "fp4": self.peak_fp4_flops}
        return tuple(p for p in PRECISIONS if rates[p] is not None)

    def peak_flops(self, precision: str) -> float:
        """Dense peak FLOP/s of math at ``precision``.

        Raises UserError for a precision outside :data:`PRECISIONS` and for one this part
        has no published peak for (e.g. fp8 on a TPU v5e or a Cerebras WSE-3): dcsim does
        not invent a rate; run that tensor at one of :attr:`precisions`.
        """
        check_precision(precision, f"accelerator '{self.key}'")
        rates = {"bf16": self.peak_bf16_flops, "fp8": self.peak_fp8_flops,
                 "fp4": self.peak_fp4_flops}
        if rates[precision] is None:
            raise UserError(f"accelerator '{self.key}' has no {precision} peak; "
                            f"allowed precisions: {', '.join(self.precisions)}")
        return rates[precision]

    @property
    def node_power_w(self) -> float:
        """Power of one full node at full load: accelerators x TDP + node overhead (W)."""
        return self.accelerators_per_node * self.tdp_w + self.node_overhead_w


@dataclass(frozen=True, slots=True)
class Model:
    """One model, in SI units (parameter counts, FLOP, bytes, tokens).

    ``flops_per_step`` is FLOP per sample per denoiser forward at the reference shape,
    without CFG (None for autoregressive models: use 2 x active params per token).
    ``expert_params`` is one expert across all layers (MoE only).  Geometry fields that do
    not apply to a model (e.g. KV heads of an image UNet) are None.  Sources: ``source``.

    Pipeline stage rows (kinds ``text_encoder``, ``vae_decoder``, ``safety_checker``) use
    ``flops_per_step`` for FLOP per call (one forward at the reference shape, batch 1) and
    ``latent_tokens`` for tokens (or latent positions) processed per call.

    Image/video denoisers name their pipeline: ``text_encoders`` (model keys, run once per
    prompt), ``vae_decoder`` and ``safety_checker`` (model keys; "" when none), and their
    reference output shape ``ref_height_px`` x ``ref_width_px`` x ``ref_frames``.
    ``latent_bytes_per_sample`` is the latent handed from denoiser to VAE (bytes).
    ``attention_flops_fraction`` a is the share of ``flops_per_step`` that grows with
    tokens squared; at t latent tokens (reference t_ref = ``latent_tokens``) FLOP per step =
    flops_per_step x [(1 - a) (t / t_ref) + a (t / t_ref)^2] (:meth:`flops_per_step_at`);
    activation bytes scale in proportion to t.
    """

    key: str
    name: str
    kind: str
    params: float
    active_params: float
    layers: int | None
    hidden: int | None
    heads: int | None
    kv_heads: int | None
    head_dim: int | None
    n_experts: int | None
    experts_per_token: int | None
    expert_params: float | None
    max_context_tokens: int | None
    flops_per_step: float | None
    latent_tokens: int | None
    activation_bytes_per_sample: float | None
    default_steps: int | None
    default_cfg: bool
    block_tokens: int | None
    source: str
    status: str
    assumptions: str
    text_encoders: tuple[str, ...] = ()
    vae_decoder: str = ""
    safety_checker: str = ""
    ref_height_px: int | None = None
    ref_width_px: int | None = None
    ref_frames: int | None = None
    latent_bytes_per_sample: float | None = None
    attention_flops_fraction: float | None = None
    moe_layers: int | None = None  # layers with routed experts (MoE); None: all of them
    kv_values_per_token_layer: int | None = None  # cached values per token per layer if not 2·kv_heads·head_dim (MLA)
    local_attention_layers: int | None = None  # layers whose attention is bounded by a window or chunk
    local_attention_tokens: int | None = None  # that window (sliding) or chunk (chunked), tokens
    local_attention_kind: str = ""  # "sliding" | "chunked" | "" (LOCAL_ATTENTION_KINDS)
    attention_sinks: bool = False  # one learned sink logit per head and layer (gpt-oss): no KV, no matmul
    expert_bits_per_param: float | None = None  # routed-expert weights' storage width fixed by the checkpoint
    mla_kv_rank: int | None = None  # multi-head latent attention: compressed KV width (DeepSeek-V3: 512)
    mla_rope_dim: int | None = None  # MLA: decoupled RoPE key width (DeepSeek-V3: 64)

    def flops_per_step_at(self, tokens: float) -> float:
        """FLOP per sample per forward at ``tokens`` latent tokens (no CFG).

        ``flops_per_step x [(1 - a) r + a r^2]`` with r = tokens / ``latent_tokens`` and
        a = ``attention_flops_fraction`` (0 when unset).  Raises UserError for a model
        without ``flops_per_step`` or ``latent_tokens``.
        """
        if not self.flops_per_step or not self.latent_tokens:
            raise UserError(f"model '{self.key}': no flops_per_step / latent_tokens to scale")
        a = self.attention_flops_fraction or 0.0
        r = tokens / self.latent_tokens
        return self.flops_per_step * ((1.0 - a) * r + a * r * r)

    def weight_bytes(self, precision: str) -> float:
        """Bytes of all weights (every expert for MoE) at ``precision``; routed experts at
        :meth:`expert_bytes_per_param` when the checkpoint fixes their width (gpt-oss-120b
        at bf16: 2.17B x 2 B + 114.66B x 0.53125 B = 65.2 GB, the checkpoint's size).

        Raises UserError for a precision outside :data:`PRECISIONS`.
        """
        check_precision(precision, f"model '{self.key}'")
        if self.is_moe and self.expert_bits_per_param:
            return self.shared_weight_bytes(precision) + self.n_experts * self.expert_weight_bytes(precision)
        return self.params * BYTES_PER_PARAM[precision]

    def kv_bytes_per_token(self, precision: str) -> float:
        """KV-cache bytes per token of context, over the layers whose cache grows with the
        context: 2 (K and V) x kv_heads x head_dim x bytes per layer, or
        ``kv_values_per_token_layer`` x bytes when set (multi-head latent attention caches
        one compressed latent plus a RoPE key per token and layer: 512 + 64 values for
        DeepSeek-V3), times :attr:`context_attention_layers`.

        Sliding-window layers hold at most their window per sequence: that bounded part is
        :meth:`kv_bytes_per_sequence`, not counted here.  Chunked layers (Llama 4) are
        counted here as if global: exact while a context fits one chunk (8,192 tokens),
        an upper bound beyond it (:meth:`kv_bytes_at_context` is exact).

        The KV cache is stored at ``precision``.  0 for models without a KV cache (image
        and video diffusion, verifiers: no ``kv_heads``).  For a diffusion LM it is the
        cost of a cached prompt prefix (Fast-dLLM style).  Raises UserError for an unknown
        precision.
        """
        check_precision(precision, f"model '{self.key}'")
        if not self._has_kv_cache:
            return 0.0
        return float(self.context_attention_layers * self._kv_values_per_layer * BYTES_PER_PARAM[precision])

    def kv_bytes_per_sequence(self, precision: str) -> float:
        """KV-cache bytes each sequence holds in its sliding-window layers once its context
        reaches the window: ``local_attention_layers`` x window x values per layer x bytes
        (gpt-oss-120b at bf16: 18 x 128 x 1024 x 2 B = 4.72 MB); 0 without sliding layers.
        Exact for contexts >= the window, an upper bound below it.  Raises UserError for an
        unknown precision."""
        check_precision(precision, f"model '{self.key}'")
        if not self._has_kv_cache or self.local_attention_kind != "sliding":
            return 0.0
        return float(self.window_attention_layers * self.local_attention_tokens * self._kv_values_per_layer
                     * BYTES_PER_PARAM[precision])

    def kv_bytes_at_context(self, context_tokens: int, precision: str) -> float:
        """Exact KV-cache bytes of one sequence of ``context_tokens`` tokens: global layers
        hold every token, sliding layers min(c, W), chunked layers the tokens of the current
        chunk ((c - 1) mod W + 1).  Raises UserError for an unknown precision."""
        check_precision(precision, f"model '{self.key}'")
        if not self._has_kv_cache or context_tokens <= 0:
            return 0.0
        return float(self._held_tokens(context_tokens) * self._kv_values_per_layer * BYTES_PER_PARAM[precision])

    def decode_attention_pairs(self, context_tokens: int) -> int:
        """(query, key) pairs summed over layers when one new token attends to a context of
        ``context_tokens`` tokens (itself included): the tokens each layer holds
        (:meth:`kv_bytes_at_context`'s rule), exact per layer kind."""
        return self._held_tokens(context_tokens) if context_tokens > 0 else 0

    def _held_tokens(self, c: int) -> int:
        """Σ over layers of the tokens a layer holds at context c."""
        local, window = self.local_attention_layers or 0, self.local_attention_tokens or 0
        held = (self.layers - local) * c
        if self.local_attention_kind == "sliding":
            held += local * min(c, window)
        elif self.local_attention_kind == "chunked":
            held += local * ((c - 1) % window + 1)
        return held

    @property
    def _has_kv_cache(self) -> bool:
        return self.kind in ("autoregressive", "diffusion_lm") and bool(self.kv_heads)

    @property
    def _kv_values_per_layer(self) -> int:
        return self.kv_values_per_token_layer or 2 * self.kv_heads * self.head_dim

    @property
    def window_attention_layers(self) -> int:
        """Sliding-window layers (their KV and attention are bounded per sequence); 0 when none."""
        return (self.local_attention_layers or 0) if self.local_attention_kind == "sliding" else 0

    @property
    def context_attention_layers(self) -> int:
        """Layers whose KV and attention dcsim's linear cost grows with the whole context:
        global layers plus chunked layers (counted as global; see :meth:`kv_bytes_per_token`)."""
        return (self.layers or 0) - self.window_attention_layers

    def attention_flops_per_pair_layer(self, decode: bool) -> float:
        """FLOP of one (query, key) pair in one layer: QKᵀ and AV over every head, 2 FLOP per
        multiply-add, 2 x heads x (d_qk + d_v).  Standard attention: d_qk = d_v = head_dim,
        4 x heads x head_dim.  Multi-head latent attention (``mla_kv_rank`` set): prefill
        runs the naive form, d_qk = head_dim + rope, d_v = head_dim (DeepSeek-V3: 2 x 128 x
        (192 + 128) = 81,920); decode runs the weight-absorbed form over the cached latent,
        d_qk = rank + rope, d_v = rank (2 x 128 x (576 + 512) = 278,528), as FlashMLA and
        FlashInfer do (FlashMLA docs/20250422-new-kernel-deep-dive.md: FLOPs = 2 h_q s_q s_k
        (d_k + d_v)).  Attention sinks (gpt-oss) add one logit per head, no matmul: 0 here."""
        heads, head_dim = self.heads or 0, self.head_dim or 0
        if self.mla_kv_rank:
            rope = self.mla_rope_dim or 0
            if decode:
                return 2.0 * heads * (self.mla_kv_rank + rope + self.mla_kv_rank)
            return 2.0 * heads * (head_dim + rope + head_dim)
        return 4.0 * heads * head_dim

    def expert_bytes_per_param(self, precision: str) -> float:
        """Bytes per routed-expert parameter at ``precision``: the precision's bytes, or the
        checkpoint's narrower ``expert_bits_per_param`` / 8 when set (gpt-oss MXFP4: 4-bit
        E2M1 values in blocks of 32 with one 8-bit scale, 4.25 bits = 0.53125 B, kept under
        BF16 or FP8 math: W4A16 on Hopper, W4A8 on Blackwell)."""
        full = BYTES_PER_PARAM[check_precision(precision, f"model '{self.key}'")]
        return min(full, self.expert_bits_per_param / 8.0) if self.expert_bits_per_param else full

    def shared_weight_bytes(self, precision: str) -> float:
        """Bytes of the weights outside the routed experts at ``precision`` (all of them for
        a dense model)."""
        return self.shared_params * BYTES_PER_PARAM[check_precision(precision, f"model '{self.key}'")]

    def expert_weight_bytes(self, precision: str) -> float:
        """Bytes of one routed expert across its layers (0 for a dense model)."""
        if not self.is_moe:
            return 0.0
        return self.expert_params * self.expert_bytes_per_param(precision)

    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model (more than one expert)."""
        return (self.n_experts or 0) > 1

    @property
    def shared_params(self) -> float:
        """Parameters outside the experts (all of them for a dense model)."""
        if not self.is_moe:
            return self.params
        return self.params - self.n_experts * self.expert_params

    @property
    def routed_layers(self) -> int:
        """Layers with routed experts (``moe_layers``, else every layer; 0 for a dense model)."""
        if not self.is_moe:
            return 0
        return self.moe_layers or self.layers or 0


@dataclass(frozen=True, slots=True)
class Catalog:
    """Accelerators and models by key.  Lookups are exact-key and strict."""

    accelerators: dict[str, Accelerator]
    models: dict[str, Model]

    def accelerator(self, key: str, where: str = "") -> Accelerator:
        """The accelerator ``key``; UserError naming ``where`` and the allowed keys."""
        return _lookup(self.accelerators, key, "accelerator", where)

    def model(self, key: str, where: str = "") -> Model:
        """The model ``key``; UserError naming ``where`` and the allowed keys."""
        return _lookup(self.models, key, "model", where)

    def band_pct(self, keys) -> float | None:
        """Uncertainty band (±%) of a prediction on accelerators ``keys`` (see
        :func:`perf_band`); None when none of them has a band.  Unknown keys raise UserError."""
        band = perf_band(self.accelerators, keys)
        return None if band is None else band[0]

    def accelerators_table(self) -> pd.DataFrame:
        """Key numbers per accelerator in human units (unit in each column name)."""
        return pd.DataFrame([_accelerator_row(a) for a in self.accelerators.values()]).convert_dtypes()

    def pipeline(self, model_key: str, where: str = "") -> tuple[tuple[str, ...], str, str]:
        """(text_encoder_keys, vae_key, safety_key) of model ``model_key``.

        Empty (``()``, ``""``, ``""``) for a model without a pipeline (e.g. an LLM).  Raises
        UserError naming the row and the missing key when a referenced key is not in the
        catalog, or names a model of the wrong kind.
        """
        model = self.model(model_key, where)
        refs = [("text_encoders", k, "text_encoder") for k in model.text_encoders]
        if model.vae_decoder:
            refs.append(("vae_decoder", model.vae_decoder, "vae_decoder"))
        if model.safety_checker:
            refs.append(("safety_checker", model.safety_checker, "safety_checker"))
        for column, key, kind in refs:
            row = f"{_prefix(where)}model '{model.key}' column '{column}'"
            if key not in self.models:
                raise UserError(f"{row}: unknown model {key!r}; allowed ({kind}): "
                                f"{', '.join(sorted(self._keys_of_kind(kind))) or 'none'}")
            if self.models[key].kind != kind:
                raise UserError(f"{row}: model {key!r} is kind {self.models[key].kind!r}, "
                                f"expected {kind!r}")
        return model.text_encoders, model.vae_decoder, model.safety_checker

    def _keys_of_kind(self, kind: str) -> list[str]:
        return [k for k, m in self.models.items() if m.kind == kind]

    def models_table(self) -> pd.DataFrame:
        """Key numbers per model in human units (unit in each column name)."""
        return pd.DataFrame([_model_row(m) for m in self.models.values()]).convert_dtypes()


def perf_band(accelerators: dict, keys) -> tuple[float, list[str]] | None:
    """The one perf-band rule: a prediction on accelerators ``keys`` (one pool's, or the
    pools that serve a workload) is as uncertain as its least certain chip, so its band
    (±%) is the widest ``efficiency_band_pct`` among them. Returns (band, the keys that
    have a band, in first-seen order), or None when none has one. ``accelerators``: the
    catalog's, by key; unknown keys raise UserError."""
    keys = list(dict.fromkeys(keys))
    moved = [k for k in keys if _lookup(accelerators, k, "accelerator", "").efficiency_band_pct is not None]
    return (max(accelerators[k].efficiency_band_pct for k in moved), moved) if moved else None


def _lookup(items: dict, key: str, what: str, where: str):
    if key in items:
        return items[key]
    hint = ""
    close = [k for k in items if k.lower() == str(key).lower().strip()]
    if close:
        hint = f" (did you mean '{close[0]}'?)"
    raise UserError(f"{_prefix(where)}unknown {what} {key!r}{hint}; "
                    f"allowed: {', '.join(sorted(items))}")


def _opt(value: float | None, scale: float) -> float | None:
    return None if value is None else value / scale


def _accelerator_row(a: Accelerator) -> dict:
    return {
        "key": a.key, "name": a.name, "vendor": a.vendor,
        "peak_bf16_tflops": a.peak_bf16_flops / 1e12,
        "peak_fp8_tflops": _opt(a.peak_fp8_flops, 1e12),
        "peak_fp4_tflops": _opt(a.peak_fp4_flops, 1e12),
        "memory_kind": a.memory_kind, "memory_gb": a.memory_bytes / 1e9,
        "memory_bw_tbps": a.memory_bw_bytes_per_s / 1e12,
        "scaleup_gbps_per_dir": a.scaleup_bw_bytes_per_s / 1e9,
        "scaleup_domain_size": a.scaleup_domain_size,
        "tdp_w": a.tdp_w, "node_power_kw": a.node_power_w / 1e3,
        "price_usd": a.price_usd, "compute_efficiency": a.compute_efficiency,
        "bandwidth_efficiency": a.bandwidth_efficiency,
        "iteration_overhead_us": a.iteration_overhead_s * 1e6,
        "efficiency_band_pct": a.efficiency_band_pct,
        "status": a.status, "price_status": a.price_status,
        "efficiency_status": a.efficiency_status, "efficiency_source": a.efficiency_source,
        "spec_source": a.spec_source,
    }


def _model_row(m: Model) -> dict:
    return {
        "key": m.key, "name": m.name, "kind": m.kind,
        "params_b": m.params / 1e9, "active_params_b": m.active_params / 1e9,
        "weights_bf16_gb": m.weight_bytes("bf16") / 1e9,
        "kv_bytes_per_token_bf16": m.kv_bytes_per_token("bf16"),
        "max_context_tokens": m.max_context_tokens,
        "flops_per_step_tflop": _opt(m.flops_per_step, 1e12),
        "activation_gb_per_sample": _opt(m.activation_bytes_per_sample, 1e9),
        "default_steps": m.default_steps, "default_cfg": m.default_cfg,
        "text_encoders": "+".join(m.text_encoders), "vae_decoder": m.vae_decoder,
        "safety_checker": m.safety_checker, "ref_height_px": m.ref_height_px,
        "ref_width_px": m.ref_width_px, "ref_frames": m.ref_frames,
        "latent_bytes_per_sample": m.latent_bytes_per_sample,
        "attention_flops_fraction": m.attention_flops_fraction,
        "status": m.status, "source": m.source,
    }
