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
MEMORY_KINDS = ("hbm", "sram")
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
    the collective costs of :mod:`sim.models.parallelism`.  ``compute_efficiency`` /
    ``bandwidth_efficiency`` are the achievable fractions of peak (eta_c, eta_m) and
    ``iteration_overhead_s`` the fixed time of every iteration, all fitted or transferred
    by ``dcsim validate`` (``efficiency_status``: calibrated / transferred / spec-only);
    ``efficiency_band_pct`` is the ± uncertainty (%) of a transferred row from the
    leave-one-accelerator-out residuals (None for a calibrated row).  Sources: the
    ``*_source`` fields.
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
        """Bytes of all weights (every expert for MoE) at ``precision``.

        Raises UserError for a precision outside :data:`PRECISIONS`.
        """
        check_precision(precision, f"model '{self.key}'")
        return self.params * BYTES_PER_PARAM[precision]

    def kv_bytes_per_token(self, precision: str) -> float:
        """KV-cache bytes per token: 2 (K and V) x layers x kv_heads x head_dim x bytes, or
        layers x ``kv_values_per_token_layer`` x bytes when set (multi-head latent attention
        caches one compressed latent plus a RoPE key per token and layer: 512 + 64 values
        for DeepSeek-V3).

        The KV cache is stored at ``precision``.  0 for models without a KV cache (image
        and video diffusion, verifiers: no ``kv_heads``).  For a diffusion LM it is the
        cost of a cached prompt prefix (Fast-dLLM style).  Raises UserError for an unknown
        precision.
        """
        check_precision(precision, f"model '{self.key}'")
        if self.kind not in ("autoregressive", "diffusion_lm") or not self.kv_heads:
            return 0.0
        if self.kv_values_per_token_layer:
            return float(self.layers * self.kv_values_per_token_layer * BYTES_PER_PARAM[precision])
        return 2.0 * self.layers * self.kv_heads * self.head_dim * BYTES_PER_PARAM[precision]

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
        :func:`perf_band`); None when every one is calibrated.  Unknown keys raise UserError."""
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
    """The one perf-band rule: a prediction on accelerators ``keys`` (a fleet's) is as
    uncertain as its least certain chip, so its band (±%) is the widest
    ``efficiency_band_pct`` among them. Returns (band, the keys whose efficiency was
    transferred, in first-seen order), or None when every one is calibrated.
    ``accelerators``: the catalog's, by key; unknown keys raise UserError."""
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
