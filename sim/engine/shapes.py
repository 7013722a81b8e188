"""Request shapes of the step-batched (diffusion-family) workloads: lists of phases.

A phase is ``(steps, width, flops, bytes, tokens, first_output, act_bytes, stage, kernel)``
per sample-step: ``steps`` forwards of ``width`` samples, each costing ``flops`` FLOP,
``bytes`` bytes beyond the weights, ``tokens`` tokens through the interconnect, and
holding ``act_bytes`` of activation memory per sample while it runs. ``stage`` says which
pipeline stage it belongs to (:data:`STAGE_CODES`), which decides the pool it runs on;
``kernel`` is the tuple of catalog model keys the phase runs, whose weights it streams and
whose roofline times it (:class:`sim.models.perf.StagePerfs`): a co-located text encoder,
VAE or safety checker runs at its own arithmetic intensity, not the denoiser's.

- image/video diffusion: text encoder(s) (once, twice with CFG for the negative prompt)
  → denoiser × S steps → safety filter → VAE decode.  CFG is batched (one forward of a
  doubled batch per step: 2x FLOP and activations) or sequential (two forwards per step:
  2x FLOP and weight reads, 1x activations), per :func:`cfg_mode`.
  Resolution and frame count set the latent tokens t; denoiser FLOP per step scales as
  ``flops_ref · ((1 − a)·t/t_ref + a·(t/t_ref)²)`` with a the catalog's attention share;
  activations and VAE cost scale with t/t_ref. ``pipeline: false`` keeps only the denoiser.
- branching search: the shared trunk (s steps, width 1), then the fork (width k) up to
  each verifier checkpoint; at a checkpoint all k candidates are scored (width k); a
  candidate whose check fails is re-noised ``backtrack_steps`` back, denoised again and
  re-scored, up to ``retry_budget`` times (its draws are made per request, up front).
  Without failures the denoiser runs k·N − (k−1)·s sample-steps, i.e. the multiplier
  m = k − (k−1)·s/N of one trajectory; each failure adds r.
- diffusion LM: a prefill phase (one forward over the prompt with bidirectional attention,
  n² query-key pairs, which fills the KV cache),
  then one phase of S steps per block of L tokens, attending to the committed context
  (read from the KV cache) and to the block itself. The first block is the first output.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleets.catalog import Catalog
from sim.models.perf import PerfModel
from sim.engine.request import Request

DENOISE, ENCODE, VERIFY, SAFETY, DECODE, PREFILL = range(6)
STAGE_CODES = {"denoise": DENOISE, "encode": ENCODE, "verify": VERIFY, "safety": SAFETY, "decode": DECODE}

# phase tuple fields
STEPS, WIDTH, FLOPS, BYTES, TOKENS, FIRST_OUTPUT, ACT, STAGE, KERNEL = range(9)
# How each model's reference code runs classifier-free guidance.  "sequential": the
# conditional and unconditional passes are two forwards one after the other (2x FLOP and
# weight reads, 1x peak activations): Wan 2.1, github.com/Wan-Video/Wan2.1
# wan/text2video.py (noise_pred_cond = self.model(...); noise_pred_uncond = self.model(...)).
# "batched" (the default): both passes in one forward of a doubled batch (2x FLOP and
# activations, one weight read): diffusers StableDiffusionXLPipeline
# (torch.cat([latents] * 2) when do_classifier_free_guidance).
REFERENCE_CFG_MODE = {"wan2.1-t2v-14b": "sequential", "wan2.1-t2v-1.3b": "sequential"}
VIDEO_TEMPORAL_COMPRESSION = 4  # latent frames = 1 + (frames − 1)/4 (Wan 2.1 causal 3D VAE, vae_stride (4, 8, 8))


@dataclass(frozen=True, slots=True)
class PictureShape:
    """Per-sample costs of one image/video/search workload at its resolution (derived
    once per scenario from the catalog; hardware independent)."""

    guidance: int
    denoise_flops: float
    denoise_act_bytes: float
    denoise_tokens: float
    encode: tuple | None
    safety: tuple | None
    decode: tuple | None
    verify: tuple | None
    latent_bytes: float
    scale: float
    default_steps: int
    cfg_passes: int = 1  # forwards per denoising step: 2 for sequential CFG, else 1
    kernel: tuple = ()  # the denoiser's model key, as the KERNEL of its phases


def cfg_mode(workload, model) -> str:
    """"batched" or "sequential": the workload's ``cfg_mode``, else the model's reference
    code (:data:`REFERENCE_CFG_MODE`), else batched."""
    return getattr(workload, "cfg_mode", None) or REFERENCE_CFG_MODE.get(model.key, "batched")


def picture_shape(workload, catalog: Catalog) -> PictureShape:
    """Derive the per-sample costs of an image/video/branching-search workload.

    Raises:
        UserError: a model key in the pipeline is unknown.
    """
    model = catalog.model(workload.model)
    cfg = model.default_cfg if workload.cfg is None else workload.cfg
    guidance = 2 if cfg else 1
    x = _token_scale(workload, model)
    a = getattr(model, "attention_flops_fraction", None) or 0.0
    flops = (model.flops_per_step or 0.0) * ((1 - a) * x + a * x * x)
    act = (model.activation_bytes_per_sample or 0.0) * x
    tokens = (model.latent_tokens or 0) * x
    encode = safety = decode = verify = None
    if workload.pipeline:
        encoders, vae, checker = _pipeline_models(catalog, model)
        if encoders:
            encode = _aux_phase(encoders, ENCODE, guidance, 1.0)
        if checker is not None and workload.kind != "video_diffusion":
            safety = _aux_phase([checker], SAFETY, 1, 1.0)
        if vae is not None:
            decode = _aux_phase([vae], DECODE, 1, x)
    if getattr(workload, "verifier", None) is not None:
        verify = _aux_phase([catalog.model(workload.verifier.model)], VERIFY, 1, 1.0)
    latent = (getattr(model, "latent_bytes_per_sample", None) or 0.0) * x
    if guidance == 2 and cfg_mode(workload, model) == "sequential":
        return PictureShape(guidance, flops, act, tokens, encode, safety, decode, verify, latent, x,
                            model.default_steps or 1, cfg_passes=2, kernel=(model.key,))
    return PictureShape(
        guidance, flops * guidance, act * guidance, tokens * guidance, encode, safety, decode, verify, latent, x,
        model.default_steps or 1, kernel=(model.key,),
    )


def _token_scale(workload, model) -> float:
    """Latent tokens at the workload's resolution over the model's reference."""
    h_ref = getattr(model, "ref_height_px", None)
    w_ref = getattr(model, "ref_width_px", None)
    x = 1.0
    if h_ref and w_ref and (workload.height_px or workload.width_px):
        x *= (workload.height_px or h_ref) * (workload.width_px or w_ref) / (h_ref * w_ref)
    f_ref = getattr(model, "ref_frames", None) or 1
    if workload.frames and f_ref > 1:
        lat = 1 + (workload.frames - 1) // VIDEO_TEMPORAL_COMPRESSION
        lat_ref = 1 + (f_ref - 1) // VIDEO_TEMPORAL_COMPRESSION
        x *= lat / lat_ref
    return x


def _pipeline_models(catalog: Catalog, model) -> tuple[list, object, object]:
    encoders = [catalog.model(k) for k in (getattr(model, "text_encoders", None) or ())]
    vae_key = getattr(model, "vae_decoder", None)
    safety_key = getattr(model, "safety_checker", None)
    vae = catalog.model(vae_key) if vae_key else None
    checker = catalog.model(safety_key) if safety_key else None
    return encoders, vae, checker


def _aux_phase(models: list, stage: int, calls: int, scale: float) -> tuple:
    """One forward of each of ``models`` (``calls`` times each), as a single step that
    streams their own weights (kernel: their keys)."""
    flops = sum((m.flops_per_step or 2.0 * m.params * (m.latent_tokens or 1)) for m in models) * calls * scale
    act = max((m.activation_bytes_per_sample or 0.0) for m in models) * calls * scale
    tokens = sum((m.latent_tokens or 0) for m in models) * calls * scale
    return (1, 1, flops, act, tokens, False, act, stage, tuple(m.key for m in models))


def aux_models(workload, catalog: Catalog, stage: str) -> list:
    """The catalog models a pipeline stage runs (for weights and placement)."""
    model = catalog.model(workload.model)
    if stage == "denoise":
        return [model]
    if stage == "verify":
        return [catalog.model(workload.verifier.model)] if getattr(workload, "verifier", None) else []
    if not getattr(workload, "pipeline", False):
        return []
    encoders, vae, checker = _pipeline_models(catalog, model)
    return {"encode": encoders, "decode": [vae] if vae else [], "safety": [checker] if checker else []}[stage]


def picture_phases(workload, shape: PictureShape, failures: tuple = ()) -> list[tuple]:
    """The full phase list of one image/video/search request.

    ``failures`` (branching search): per checkpoint, per candidate, how many times its
    check fails before passing (already capped at the retry budget)."""
    phases: list[tuple] = []
    if shape.encode:
        phases.append(shape.encode)
    den = (shape.denoise_flops, shape.denoise_act_bytes, shape.denoise_tokens, shape.cfg_passes, shape.kernel)
    if workload.kind == "branching_search":
        _search_denoise(workload, shape, den, failures, phases)
    else:
        phases.append(_denoise(workload.steps or shape.default_steps, 1, den))
    if shape.safety:
        phases.append(shape.safety)
    if shape.decode:
        phases.append(shape.decode)
    return phases


def request_phases(workload, shape: PictureShape, steps: int, images: int) -> list[tuple]:
    """Phases of one image/video request of its own: ``steps`` denoising steps (0: the
    workload's) for each of ``images`` samples generated together (a trace row's
    num_images_per_prompt). The text encoder runs once per prompt; the denoiser, safety
    checker and VAE decoder once per sample (width × images), so each sample's FLOP and
    activation memory are counted."""
    own = workload.model_copy(update={"steps": steps}) if steps else workload
    return [ph if ph[STAGE] == ENCODE else (ph[STEPS], ph[WIDTH] * images, *ph[FLOPS:])
            for ph in picture_phases(own, shape)]


def _denoise(steps: int, width: int, den: tuple) -> tuple:
    flops, act, tokens, passes, kernel = den  # sequential CFG: two single-pass forwards per step
    return (steps * passes, width, flops, act, tokens, False, act, DENOISE, kernel)


def _search_denoise(workload, shape: PictureShape, den: tuple, failures: tuple, phases: list) -> None:
    k, s, n = workload.candidates_k, workload.shared_steps, workload.total_steps
    if s:
        phases.append(_denoise(s, 1, den))
    done = s
    r = workload.verifier.backtrack_steps if workload.verifier else 0
    for j, checkpoint in enumerate(workload.checkpoints):
        if checkpoint > done:
            phases.append(_denoise(checkpoint - done, k, den))
            done = checkpoint
        phases.append(_verify(shape, k))
        fails = failures[j] if j < len(failures) else ()
        for round_ in range(1, max(fails, default=0) + 1):
            width = sum(1 for f in fails if f >= round_)
            phases.append(_denoise(r, width, den))
            phases.append(_verify(shape, width))
    if n > done:
        phases.append(_denoise(n - done, k, den))


def _verify(shape: PictureShape, width: int) -> tuple:
    steps, _, flops, bytes_, tokens, first, act, stage, kernel = shape.verify
    return (steps, width, flops, bytes_, tokens, first, act, stage, kernel)


def diffusion_lm_phases(workload, perf: PerfModel, req: Request) -> tuple[list[tuple], float]:
    """Phases of a diffusion-LM request on a replica with ``perf``, and the KV-cache bytes
    it reserves for prompt and output (its activations are per phase)."""
    block = workload.block_tokens
    prompt = req.prompt_tokens
    blocks = -(-req.output_tokens // block)
    kv = perf.kv_bytes_per_token
    pair = perf.attn_flops_per_pair
    linear = perf.linear_flops_per_token
    act = perf.model.activation_bytes_per_sample or 0.0
    # bidirectional attention (LLaDA-style masked diffusion): every prompt token attends to
    # every other, n² pairs, not the causal n²/2 of an autoregressive prefill
    prefill_flops = linear * prompt + pair * float(prompt) ** 2
    kernel = (perf.model.key,)
    phases = [(1, 1, prefill_flops, kv * prompt, prompt, False, act, PREFILL, kernel)]
    for i in range(blocks):
        context = prompt + i * block
        flops = linear * block + pair * block * (context + block)
        phases.append((req.steps, 1, flops, kv * (context + block), block, i == 0, act, DENOISE, kernel))
    return phases, kv * (prompt + blocks * block)

