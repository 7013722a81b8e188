"""Parallelism of a video diffusion transformer (DiT) replica: sequence parallelism (SP,
Ulysses or ring attention) with FSDP-sharded weights, and CPU offload, as the reference
codes run them; what each GPU holds (peak memory by phase) and what a denoiser forward
costs.

A video DiT is not served tensor-parallel: Wan 2.1/2.2 ``generate.py`` run
``--dit_fsdp --t5_fsdp --ulysses_size N`` on N GPUs and ``--offload_model True`` on one
(github.com/Wan-Video/Wan2.1 @9737cba9c1c3 and Wan2.2 @42bf4cfaa384, README "Computational
Efficiency on Different GPUs" and ``generate.py``: ``offload_model = world_size == 1``).
One replica = ``sp`` GPUs of one scale-up domain:

- Sequence parallelism splits the latent tokens t over the sp GPUs: every linear layer
  runs t/sp tokens, attention runs all t tokens for heads/sp heads (Ulysses,
  DeepSpeed-Ulysses, Jacobs et al. 2023, arXiv 2309.14509: an all-to-all of Q, K, V before
  each self-attention and of its output after, each of (t/sp)·hidden 16-bit values per
  GPU, :func:`sim.models.parallelism.alltoall_time_s`; sp divides the heads) or, with ring
  attention (Liu et al. 2023, arXiv 2310.01889), each GPU passes its K/V block to the next
  sp − 1 times per self-attention, overlapped with the attention of the block it holds.
- FSDP stores each GPU's 1/sp of the weights and all-gathers one block before it runs
  (PyTorch FSDP, ``wan/distributed/fsdp.py``: one FSDP unit per DiT block; the kept shards
  are the loaded fp32 parameters, the gathered block is cast to bf16 by
  ``MixedPrecision(param_dtype=bf16)``); the gather runs on its own stream, overlapped with
  the previous block's compute, and nothing is reduced at inference.  The text encoder is
  sharded the same way (``--t5_fsdp``) and runs on every GPU for the same prompt; the VAE
  decodes on rank 0 only (``if self.rank == 0: videos = self.vae.decode(x0)``), in fp32.
- CPU offload (one GPU): the text encoder is on the GPU only while it encodes and the DiT
  leaves the GPU for the VAE decode; Wan 2.2's two experts are swapped at the switch from
  the high-noise to the low-noise expert (``_prepare_model_for_timestep``).  Each model
  crosses the host link twice per request, at :data:`HOST_LINKS` bandwidth.
- Time of one denoiser forward over T tokens (CFG passes and steps are the phase's)::

      t = max(F_lin / (sp·peak·η_c) + F_attn / (sp·peak·η_attn), W_active / (BW·η_m),
              FSDP gathers) + Ulysses all-to-alls (or ring exposure) + t_0

  F_lin = flops_per_step·(1 − a)·T/t_ref (linear in tokens) and F_attn the rest (the
  catalog row's attention share a); η_attn is the attention kernel's share of peak in the
  reference code (:data:`REFERENCES`), fitted on one published single-GPU time each.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleets.catalog import BYTES_PER_PARAM, Accelerator, Model
from sim.errors import PlacementError, UserError
from sim.models.parallelism import LayoutError, allgather_time_s, alltoall_time_s, scaleup_link, send_time_s
from sim.models.perf import StagePerfs

GB = 1e9
ACTIVATION_BYTES = 2.0  # SP exchanges 16-bit activations
ULYSSES_ALLTOALLS_PER_LAYER = 4  # Q, K, V before self-attention, its output after
FP32_BYTES = 4.0
WAN_VAE_REF_AREA_PX = 480 * 832  # the wan-vae-decoder row's decode shape (its activation_gb_per_sample)


@dataclass(frozen=True, slots=True)
class HostLink:
    """Host memory to one GPU: bandwidth per direction (bytes/s), source, status."""

    bw_bytes_per_s: float
    source: str
    status: str


PCIE5 = HostLink(55.43e9, "PCIe Gen5 x16, nvbandwidth host_to_device_memcpy_ce on 8x H200: 55.43 GB/s "
                 "(github.com/stas00/ml-engineering network/README.md @744d01e18b79)", "secondary")
C2C = HostLink(359.05e9, "NVLink-C2C Grace to Blackwell, nvbandwidth H2D on a DGX Station GB300: 359.05 GB/s "
               "(github.com/stas00/ml-engineering network/README.md @744d01e18b79; 450 GB/s per direction spec)",
               "secondary")
HOST_LINKS = {"gb200": C2C, "gb300": C2C}
"""Host link per accelerator key; every other part is assumed on PCIe Gen5 x16 (:data:`PCIE5`)."""


def host_link(accelerator: Accelerator) -> HostLink:
    """The host-to-GPU link of ``accelerator`` (:data:`HOST_LINKS`, else PCIe Gen5 x16)."""
    return HOST_LINKS.get(accelerator.key, PCIE5)


@dataclass(frozen=True, slots=True)
class VideoReference:
    """How a video DiT's reference code runs it: SP attention, FSDP on several GPUs, offload
    on one, the bytes per parameter of the kept FSDP shards, the attention kernel's share of
    the attention peak, and (two-expert models) how many of the experts are swapped."""

    attention: str  # "ulysses" | "ring"
    attention_efficiency: float
    attention_source: str
    fsdp_bytes_per_param: float = FP32_BYTES
    experts: int = 1  # whole-forward experts switching by denoising step (Wan 2.2 A14B: 2)


# η_attn fitted on one published single-GPU 720P H100 time each (the rest of the model
# fixed: linear layers at the catalog's η_c, the pipeline's encoder and VAE), so that
# predicted = published there; every other row of the tables is held out (docs/diffusion.md).
# For scale: FlashAttention-2 runs at ~35% of the H100's peak and FlashAttention-3 up to 75%
# (Shah et al. 2024, arXiv 2407.08608, abstract).
REFERENCES = {
    "wan2.1-t2v-14b": VideoReference("ulysses", 0.327, "fitted: Wan2.1-T2V-14B 720P, 1x H100, 1837.9 s "
                                     "(Wan2.1 README table; xDiT USP with FlashAttention-2)"),
    "wan2.1-t2v-1.3b": VideoReference("ring", 0.327, "as wan2.1-t2v-14b (same code); ring: 12 heads, the README "
                                      "runs the 1.3B on 8 GPUs with --ring_size 8 --ulysses_size 1"),
    "wan2.2-t2v-a14b": VideoReference("ulysses", 0.514, "fitted: Wan2.2-T2V-A14B 720P, 1x H100, 1041.5 s "
                                      "(Wan2.2 README table; FlashAttention-3 on Hopper)", experts=2),
}


@dataclass(frozen=True, slots=True)
class VideoScheme:
    """A replica's scheme: ``sp`` GPUs, their attention, FSDP or not, offload or not."""

    sp: int
    attention: str
    fsdp: bool
    offload: bool


def reference(model: Model) -> VideoReference:
    """The model's :class:`VideoReference`; a video DiT without one runs Ulysses with the
    FlashAttention-2 figure (35% of peak, arXiv 2407.08608) and nothing swapped."""
    return REFERENCES.get(model.key, VideoReference(
        "ulysses", 0.35, "no reference run in dcsim: FlashAttention-2 on H100, 35% of peak (arXiv 2407.08608)"))


def is_video_dit(model: Model) -> bool:
    return model.kind == "video_diffusion"


def resolve_scheme(cfg, model: Model, accelerator: Accelerator) -> VideoScheme | None:
    """The pool's scheme from its ``sp``, ``sp_attention``, ``fsdp`` and ``offload`` fields,
    each defaulting to the model's reference (SP over the replica, FSDP on more than one
    GPU, offload on one); None for a model that is not a video DiT with none of them set.

    Raises:
        LayoutError: a field set on a model that is not a video DiT, tp > 1 with sp > 1, an
        SP group larger than the scale-up domain, or Ulysses with sp not dividing the heads.
    """
    fields = {k: getattr(cfg, k, None) for k in ("sp", "sp_attention", "fsdp", "offload")}
    if not is_video_dit(model):
        given = [k for k, v in fields.items() if v is not None and not (k == "sp" and v == 1)]
        if given:
            raise LayoutError(f"{', '.join(given)} set but model '{model.key}' is not a video DiT",
                              "Remove them: sequence parallelism, FSDP and offload are modelled for "
                              "video_diffusion models only (use tp/pp/ep otherwise).")
        return None
    ref = reference(model)
    sp = fields["sp"] or 1
    if sp > 1 and cfg.tp > 1:
        raise LayoutError(f"tp={cfg.tp} with sp={sp}", "Use one of them (the reference codes run SP, not TP).")
    if sp > accelerator.scaleup_domain_size:
        raise LayoutError(f"sp={sp} but an SP group must fit one scale-up domain of "
                          f"{accelerator.scaleup_domain_size} accelerators", "Lower sp.")
    attention = fields["sp_attention"] or ref.attention
    heads = model.heads or 0
    if attention == "ulysses" and sp > 1 and heads and heads % sp:
        allowed = [d for d in range(1, min(heads, accelerator.scaleup_domain_size) + 1) if heads % d == 0]
        raise LayoutError(f"sp={sp} does not divide the model's {heads} heads (Ulysses gives each GPU whole heads)",
                          f"Use sp in {allowed}, or sp_attention: ring.")
    fsdp = sp > 1 if fields["fsdp"] is None else fields["fsdp"]
    offload = sp * cfg.tp == 1 if fields["offload"] is None else fields["offload"]
    return VideoScheme(sp, attention, fsdp, offload)


@dataclass(frozen=True, slots=True)
class VideoMemory:
    """Peak bytes on the busiest GPU of a replica in each phase of one request."""

    encode: float
    denoise: float
    decode: float

    @property
    def peak(self) -> float:
        return max(self.encode, self.denoise, self.decode)


def _held(model: Model, precision: str, scheme: VideoScheme, ref: VideoReference) -> float:
    """Bytes of ``model``'s weights on one GPU while it is resident: its FSDP shard (kept at
    the reference's bytes per parameter) or the whole model at ``precision``."""
    if scheme.fsdp and scheme.sp > 1:
        return model.params * ref.fsdp_bytes_per_param / scheme.sp
    return model.weight_bytes(precision)


def memory_per_gpu(scheme: VideoScheme, model: Model, encoder: Model | None, vae: Model | None,
                   precision: str, act_bytes: float, area_px: float) -> VideoMemory:
    """Peak bytes per GPU by phase of one request of ``model`` (activations ``act_bytes``
    of one forward at the request's shape, ``area_px`` pixels per frame); module docstring.

    - encode: the DiT if resident, the encoder (sharded under FSDP) and its activations;
    - denoise: the resident DiT (offload with two experts: one), the encoder unless
      offloaded, the gathered block (bf16) and the activations / sp;
    - decode (rank 0): the DiT unless offloaded, the encoder unless offloaded, the VAE and its
      fp32 activations (the catalog row's, per frame area, x2 for fp32).
    """
    ref = reference(model)
    dit = _held(model, precision, scheme, ref)
    if scheme.offload and ref.experts > 1:
        dit /= ref.experts  # one expert on the GPU at a time
    enc = _held(encoder, precision, scheme, ref) if encoder else 0.0
    enc_act = (encoder.activation_bytes_per_sample or 0.0) if encoder else 0.0
    gathered = model.active_params * BYTES_PER_PARAM["bf16"] / model.layers if scheme.fsdp and scheme.sp > 1 else 0.0
    resident_enc = 0.0 if scheme.offload else enc
    vae_bytes = 0.0
    if vae is not None:
        vae_act = (vae.activation_bytes_per_sample or 0.0) * area_px / WAN_VAE_REF_AREA_PX
        vae_bytes = vae.params * FP32_BYTES + vae_act * FP32_BYTES / ACTIVATION_BYTES
    return VideoMemory(
        encode=(0.0 if scheme.offload and ref.experts > 1 else dit) + enc + enc_act,
        denoise=dit + resident_enc + gathered + act_bytes / scheme.sp,
        decode=(0.0 if scheme.offload else dit) + resident_enc + vae_bytes,
    )


def offload_transfer_s(scheme: VideoScheme, model: Model, encoder: Model | None, precision: str,
                       accelerator: Accelerator) -> float:
    """Host-link time of one request's offload moves, s: the encoder and every expert of the
    DiT in and out once (module docstring); 0 without offload."""
    if not scheme.offload:
        return 0.0
    moved = model.weight_bytes(precision) + (encoder.weight_bytes(precision) if encoder else 0.0)
    return 2.0 * moved / host_link(accelerator).bw_bytes_per_s


class VideoPerf:
    """The denoiser's cost on one SP replica (module docstring): wraps the single-GPU
    :class:`sim.models.perf.PerfModel` ``base`` and answers what the step-batched replica
    and the pool tables ask of a perf model (every other attribute is ``base``'s)."""

    def __init__(self, base, scheme: VideoScheme) -> None:
        self.base = base
        self.scheme = scheme
        model, acc, n = base.model, base.accelerator, scheme.sp
        ref = reference(model)
        self.model = model
        self.sp = n
        self.peak_flops = base.peak_flops * n
        self.peak_bw_bytes_per_s = base.peak_bw_bytes_per_s * n
        self.compute_rate = base.compute_rate * n
        self.mem_rate = base.mem_rate  # every GPU reads the whole gathered weights
        self.attention_rate = acc.peak_flops(base.attention_precision) * ref.attention_efficiency * n
        self.overhead_s = base.overhead_s
        self.weight_bytes = model.active_params * (base.weight_bytes / model.params)  # one expert per forward
        a = model.attention_flops_fraction or 0.0
        self._linear_flops_per_token = (model.flops_per_step or 0.0) * (1.0 - a) / (model.latent_tokens or 1)
        link = scaleup_link(acc)
        layers = model.layers or 0
        width = (model.hidden or 0) * ACTIVATION_BYTES
        self._a2a = (layers * ULYSSES_ALLTOALLS_PER_LAYER, link, width / n) if n > 1 and scheme.attention == "ulysses" else None
        self._ring = (layers, link, 2.0 * width / n) if n > 1 and scheme.attention == "ring" else None
        block = model.active_params * BYTES_PER_PARAM["bf16"] / layers if layers else 0.0
        self.gather_s = layers * allgather_time_s(link, block, n) if scheme.fsdp and n > 1 else 0.0

    def __getattr__(self, name):
        return getattr(self.base, name)

    @property
    def ridge_flops_per_byte(self) -> float:
        return self.peak_flops / self.peak_bw_bytes_per_s

    def weight_bytes_read(self, tokens: float) -> float:
        """Weights one forward streams per GPU: the active expert, gathered whole."""
        return self.weight_bytes

    def split_flops(self, flops: float, tokens: float) -> tuple[float, float]:
        """(linear, attention) FLOP of a forward of ``flops`` over ``tokens`` tokens: the
        linear part is linear in the tokens (the catalog's 1 − a share at t_ref)."""
        linear = min(flops, self._linear_flops_per_token * tokens)
        return linear, flops - linear

    def comm_time_s(self, tokens: float, attention_s: float = 0.0) -> float:
        """SP communication of a forward over ``tokens`` tokens on the critical path, s:
        Ulysses' all-to-alls, or the part of the ring's K/V passes that attention does not
        hide."""
        if self._a2a is not None:
            count, link, per_token = self._a2a
            return count * alltoall_time_s(link, per_token * tokens, self.sp)
        if self._ring is not None:
            layers, link, per_token = self._ring
            ring = layers * (self.sp - 1) * send_time_s(link, per_token * tokens)
            return max(0.0, ring - attention_s)
        return 0.0

    def time_s(self, flops: float, bytes_moved: float, tokens: float) -> float:
        """One denoiser forward (module docstring), s."""
        linear, attention = self.split_flops(flops, tokens)
        attention_s = attention / self.attention_rate
        compute = linear / self.compute_rate + attention_s
        return (max(compute, bytes_moved / self.mem_rate, self.gather_s)
                + self.comm_time_s(tokens, attention_s) + self.overhead_s)


# The reference VAE decodes in fp32 (WanVAE dtype torch.float), which PyTorch's cuDNN
# convolutions run as TF32 by default (torch.backends.cudnn.allow_tf32): half the 16-bit
# tensor rate on Hopper and Blackwell (H100 datasheet: TF32 494.7 vs BF16 989.4 dense
# TFLOP/s).  A 3D causal-conv decode runs far below a GEMM's efficiency: TensorRT-LLM's
# Wan 2.2 decode at 1280x720x80 frames takes 2.72 s on one B200 (TensorRT-LLM tech blog 25
# "Scaling Video Generation Across NVL72", github.com/NVIDIA/TensorRT-LLM @0658b9343509),
# i.e. 275.4 TFLOP x 2.31 (frame area over the wan-vae-decoder row's 480x832) / 2.72 s /
# 2,250 TFLOP/s = 10.4% of the B200's BF16 peak (derived).
VAE_TF32_RATE = 0.5
VAE_EFFICIENCY = 0.104


class AuxPerf:
    """A pipeline stage next to an SP denoiser (text encoder, VAE): it runs on one GPU
    (FSDP's encoder runs the same prompt on every rank, the VAE decodes on rank 0), plus
    the request's offload moves when it is the encoder; a VAE decoder at the reference's
    fp32 (TF32) rate and the published decode efficiency (:data:`VAE_EFFICIENCY`)."""

    def __init__(self, base, extra_s: float = 0.0) -> None:
        self.base = base
        self.extra_s = extra_s
        self.vae_rate = (base.peak_flops * VAE_TF32_RATE * VAE_EFFICIENCY
                         if getattr(base.model, "kind", "") == "vae_decoder" else 0.0)

    def __getattr__(self, name):
        return getattr(self.base, name)

    def time_s(self, flops: float, bytes_moved: float, tokens: float) -> float:
        if self.vae_rate:
            return flops / self.vae_rate + self.base.overhead_s + self.extra_s
        return self.base.time_s(flops, bytes_moved, tokens) + self.extra_s


class VideoStagePerfs:
    """:class:`sim.models.perf.StagePerfs` for an SP replica: the denoiser's phases at
    :class:`VideoPerf`, the co-located stages at one GPU's rates (:class:`AuxPerf`), the
    offload moves charged to the encode step."""

    def __init__(self, inner, main: VideoPerf, offload_s: float, encode_kernel: tuple) -> None:
        self.inner = inner  # a StagePerfs at tp=1
        self.main = main
        self._perfs: dict[tuple, object] = {(main.model.key,): main}
        self._offload_s = offload_s
        self._encode_kernel = encode_kernel

    def get(self, keys: tuple):
        perf = self._perfs.get(keys)
        if perf is None:
            extra = self._offload_s if keys == self._encode_kernel else 0.0
            perf = self._perfs[keys] = AuxPerf(self.inner.get(keys), extra)
        return perf


def check_fits(scheme: VideoScheme, memory: VideoMemory, accelerator: Accelerator, memory_utilization: float,
               where: str, model: Model, workload: str = "", act_bytes: float = 0.0) -> None:
    """Raises UserError naming the phase when one request's peak per GPU exceeds the
    usable memory of one GPU."""
    have = accelerator.memory_bytes * memory_utilization
    if memory.peak <= have:
        return
    phase = max(("encode", memory.encode), ("denoise", memory.denoise), ("decode", memory.decode), key=lambda p: p[1])[0]
    raise UserError(
        f"{where}: one request of workload '{workload}' (model {model.key}) needs {memory.peak / GB:.1f} GB on one "
        f"{accelerator.key} in its {phase} phase, with {act_bytes / scheme.sp / GB:.1f} GB of activations per GPU "
        f"(sp={scheme.sp}, fsdp={scheme.fsdp}, offload={scheme.offload}), "
        f"but a GPU has {have / GB:.1f} GB ({accelerator.memory_bytes / GB:.0f} GB x memory_utilization "
        f"{memory_utilization}). Raise sp, set fsdp: true or offload: true, lower the resolution or frames, "
        "or pick an accelerator with more memory.")


def video_scheme(cfg, model: Model, accelerator: Accelerator, where: str) -> VideoScheme | None:
    """:func:`resolve_scheme` for pool ``cfg``; its LayoutError becomes a PlacementError
    naming ``where``, the model and the accelerator."""
    try:
        return resolve_scheme(cfg, model, accelerator)
    except LayoutError as err:
        raise PlacementError(f"{where}: cannot place model '{model.key}' on accelerator '{accelerator.key}': "
                             f"{err.problem}. {err.fix}") from None


def request_memory(scheme: VideoScheme, wl, shape, model: Model, stages: set, catalog, precision: str) -> VideoMemory:
    """:func:`memory_per_gpu` of one request of workload ``wl`` (its per-sample costs
    ``shape``) on a pool running ``stages`` of its pipeline."""
    encoders = [catalog.model(k) for k in (model.text_encoders or ())] if "encode" in stages else []
    vae = catalog.model(model.vae_decoder) if model.vae_decoder and "decode" in stages else None
    area = (wl.height_px or model.ref_height_px or 0) * (wl.width_px or model.ref_width_px or 0)
    act = shape.denoise_act_bytes if "denoise" in stages else 0.0
    return memory_per_gpu(scheme, model, encoders[0] if encoders else None, vae, precision, act, area)


def video_perfs(scheme: VideoScheme, pool, base, catalog, shapes: dict, names: list, where: str):
    """(perf, stage perfs, bytes per GPU held besides activations) of an SP pool whose
    single-GPU denoiser model is ``base``; checks that one request of every workload it
    serves fits one GPU (:func:`check_fits`).

    Raises:
        PlacementError: a request's peak per GPU exceeds one GPU's usable memory.
    """
    cfg, model, acc = pool.config, base.model, base.accelerator
    offload_s, encode_kernel, static = 0.0, (), 0.0
    for w, wl in pool.workloads.items():
        shape = shapes.get(names[w])
        if shape is None:
            continue
        stages = pool.stages.get(w, set())
        memory = request_memory(scheme, wl, shape, model, stages, catalog, cfg.precision)
        try:
            check_fits(scheme, memory, acc, cfg.memory_utilization, where, model, names[w],
                       shape.denoise_act_bytes if "denoise" in stages else 0.0)
        except UserError as err:
            raise PlacementError(str(err)) from None
        act = shape.denoise_act_bytes / scheme.sp if "denoise" in stages else 0.0
        static = max(static, memory.peak - act)  # held bytes per GPU besides one request's activations
        if shape.encode and "encode" in stages:
            encode_kernel = shape.encode[-1]
            encoder = catalog.model(encode_kernel[0])
            offload_s = max(offload_s, offload_transfer_s(scheme, model, encoder, cfg.precision, acc))
    inner = StagePerfs(base, catalog.model, 1, cfg.pp, cfg.iteration_overhead_s, cfg.kv_precision,
                       cfg.attention_precision)
    perf = VideoPerf(base, scheme)
    return perf, VideoStagePerfs(inner, perf, offload_s, encode_kernel), static
