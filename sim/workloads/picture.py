"""Image and video diffusion: a compound pipeline (text encoder → denoiser × steps →
safety filter → VAE decode) served by step-batched replicas, and the per-sample costs
(:class:`PictureShape`) and phases of its requests.

- CFG is batched (one forward of a doubled batch per step: 2x FLOP and activations) or
  sequential (two forwards per step: 2x FLOP and weight reads, 1x activations), per
  :func:`cfg_mode`. The text encoder runs once per prompt (twice with CFG, for the
  negative prompt).
- Resolution and frame count set the latent tokens t; denoiser FLOP per step scales as
  ``flops_ref · ((1 − a)·t/t_ref + a·(t/t_ref)²)`` with a the catalog's attention share;
  activations and VAE cost scale with t/t_ref. ``pipeline: false`` keeps only the denoiser.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field

from fleets.catalog import Catalog
from sim.workloads.base import PERCENTILES, WorkloadConfig, WorkloadKind
from sim.workloads.phases import ACT, DECODE, DENOISE, ENCODE, FLOPS, SAFETY, STAGE, STEPS, VERIFY, WIDTH

# How each model's reference code runs classifier-free guidance.  "sequential": the
# conditional and unconditional passes are two forwards one after the other (2x FLOP and
# weight reads, 1x peak activations): Wan 2.1, github.com/Wan-Video/Wan2.1
# wan/text2video.py (noise_pred_cond = self.model(...); noise_pred_uncond = self.model(...)).
# "batched" (the default): both passes in one forward of a doubled batch (2x FLOP and
# activations, one weight read): diffusers StableDiffusionXLPipeline
# (torch.cat([latents] * 2) when do_classifier_free_guidance).
REFERENCE_CFG_MODE = {"wan2.1-t2v-14b": "sequential", "wan2.1-t2v-1.3b": "sequential", "wan2.2-t2v-a14b": "sequential"}
VIDEO_TEMPORAL_COMPRESSION = 4  # latent frames = 1 + (frames − 1)/4 (Wan 2.1 causal 3D VAE, vae_stride (4, 8, 8))


class PictureWorkload(WorkloadConfig):
    """Shared fields of image/video generation: resolution, frames and the compound
    pipeline (text encoder → denoiser × steps → safety filter → VAE decode)."""

    cfg: bool | None = Field(None, description="classifier-free guidance; default: the model's")
    cfg_mode: Literal["batched", "sequential"] | None = Field(
        None, description="CFG passes in one doubled batch or one after the other; default: the model's reference code "
        "(Wan 2.1: sequential; others: batched)")
    height_px: int | None = Field(None, ge=64, le=16_384, description="default: the model's reference")
    width_px: int | None = Field(None, ge=64, le=16_384, description="default: the model's reference")
    frames: int | None = Field(None, ge=1, le=10_000, description="video frames; default: the model's reference")
    pipeline: bool = Field(
        True, description="run the text encoder, safety filter and VAE decoder stages, not only the denoiser"
    )


class ImageDiffusionWorkload(PictureWorkload):
    """Image diffusion: a compound pipeline whose denoiser runs ``steps`` forwards (two
    per step with CFG)."""

    kind: Literal["image_diffusion"]
    steps: int | None = Field(None, ge=1, le=10_000, description="default: the model's")


class VideoDiffusionWorkload(ImageDiffusionWorkload):
    kind: Literal["video_diffusion"]  # type: ignore[assignment]


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


def shape_of(kind: "Picture", workload, catalog: Catalog) -> PictureShape:
    """The per-sample costs of an image/video/branching-search workload of ``kind``.

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
        if checker is not None and "safety" in kind.stages:
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


def denoise_phase(steps: int, width: int, den: tuple) -> tuple:
    """``steps`` denoising steps of ``width`` samples; ``den`` = (FLOP, activation bytes,
    tokens, forwards per step, kernel) of one sample-step."""
    flops, act, tokens, passes, kernel = den  # sequential CFG: two single-pass forwards per step
    return (steps * passes, width, flops, act, tokens, False, act, DENOISE, kernel)


def phases_of(kind: "Picture", workload, shape: PictureShape, failures: tuple = ()) -> list[tuple]:
    """The full phase list of one image/video/search request of ``kind``.

    ``failures`` (branching search): per checkpoint, per candidate, how many times its
    check fails before passing (already capped at the retry budget)."""
    phases: list[tuple] = []
    if shape.encode:
        phases.append(shape.encode)
    den = (shape.denoise_flops, shape.denoise_act_bytes, shape.denoise_tokens, shape.cfg_passes, shape.kernel)
    kind.denoise_phases(workload, shape, den, failures, phases)
    if shape.safety:
        phases.append(shape.safety)
    if shape.decode:
        phases.append(shape.decode)
    return phases


def request_phases_of(kind: "Picture", workload, shape: PictureShape, steps: int, images: int) -> list[tuple]:
    """Phases of one image/video request of its own: ``steps`` denoising steps (0: the
    workload's) for each of ``images`` samples generated together (a trace row's
    num_images_per_prompt). The text encoder runs once per prompt; the denoiser, safety
    checker and VAE decoder once per sample (width × images), so each sample's FLOP and
    activation memory are counted."""
    own = workload.model_copy(update={"steps": steps}) if steps else workload
    return [ph if ph[STAGE] == ENCODE else (ph[STEPS], ph[WIDTH] * images, *ph[FLOPS:])
            for ph in phases_of(kind, own, shape)]


class Picture(WorkloadKind):
    """Image/video diffusion: the compound pipeline above, on step-batched replicas."""

    family = "step"
    edit_fields = (("steps", "steps", "denoising steps (0 = model default)", 0),)

    def prepare(self, pool, wl, req) -> None:
        """The phases of the request's current journey leg (planned at arrival:
        :class:`sim.engine.journey.JourneyPlanner`); no memory reserved beyond them."""
        req.phases, req.reserved_bytes = req.journey[req.leg][1], 0.0

    def denoise_phases(self, wl, shape: PictureShape, den: tuple, failures: tuple, phases: list) -> None:
        """Append the denoiser's phases of one request to ``phases``: ``steps`` steps of one
        sample."""
        phases.append(denoise_phase(wl.steps or shape.default_steps, 1, den))

    def stage_footprints(self, wl, shape: PictureShape, stages: set[str]) -> list[tuple[float, int]]:
        """(activation bytes, samples) of the largest phase of each of ``stages`` run on one
        pool (what its replica must hold at once)."""
        k = self.fork_width(wl)
        out = []
        if "denoise" in stages:
            out.append((shape.denoise_act_bytes * k, k))
        for stage, phase, width in (("encode", shape.encode, 1), ("safety", shape.safety, 1),
                                    ("decode", shape.decode, 1), ("verify", shape.verify, self.verify_width(wl))):
            if stage in stages and phase is not None:
                out.append((phase[ACT] * width, width))
        return out

    def verify_width(self, wl) -> int:
        """Samples scored at once by the verifier."""
        return 1

    def sample_steps(self, wl, model) -> int:
        """Denoiser sample-steps of one request without backtracking."""
        return wl.steps or model.default_steps

    def picture_work(self, wl, model) -> tuple[int, int, int]:
        """(samples per forward for guidance, CFG passes per step, sample-steps per request)."""
        cfg = model.default_cfg if getattr(wl, "cfg", None) is None else wl.cfg
        passes = 2 if cfg and cfg_mode(wl, model) == "sequential" else 1
        guidance = (2 if cfg else 1) // passes  # sequential CFG: single-pass forwards, twice per step
        return guidance, passes, self.sample_steps(wl, model)

    def capacity_rps(self, wl, pool, perf) -> float:
        """b samples per denoiser step (max_batch, or fewer if their activations do not
        fit); m sample-steps per request: b / (m · t_step(b))."""
        model = perf.model
        guidance, passes, sample_steps = self.picture_work(wl, model)
        act = (model.activation_bytes_per_sample or 0.0) * guidance
        tokens = (model.latent_tokens or 0) * guidance
        batch = pool.config.max_batch
        if act > 0:
            batch = max(1, min(batch, int(pool.free_bytes // act)))
        flops = model.flops_per_step * guidance
        step = perf.time_s(batch * flops, perf.weight_bytes_read(batch * tokens) + batch * act, batch * tokens)
        return batch / (sample_steps * passes * step)

    def floor_terms(self, wl, perf) -> tuple[float, float]:
        """(denoiser FLOP of one request, denoiser forwards it takes part in)."""
        model = perf.model
        guidance, passes, sample_steps = self.picture_work(wl, model)
        return sample_steps * passes * model.flops_per_step * guidance, sample_steps * passes

    def samples_at_once(self, wl, stages: set[str]) -> int:
        """The most samples one request runs at once on a pool running ``stages`` (the
        pool's ``max_batch`` must hold them)."""
        return 1


class ImageDiffusion(Picture):
    kind = "image_diffusion"
    config = ImageDiffusionWorkload
    model_kinds = ("image_diffusion",)
    stages = ("encode", "denoise", "safety", "decode")
    label = "image"
    marker = "square"
    item = "image"
    cost_per_item_column = "cost_per_image_usd"
    replays_images = True

    def draw(self, wl, shapes, rows, draws, default_steps) -> None:
        """An image-trace replay (``format: genai_csv``) sets each request's steps (unless
        the workload sets ``steps``: not None), images and CFG."""
        if getattr(wl.arrival, "format", None) == "genai_csv":
            replayed = wl.arrival.request_shapes(rows)
            n = len(shapes.prompt)
            shapes.steps = np.zeros(n, dtype=np.int64) if wl.steps is not None else replayed["steps"]
            shapes.images, shapes.cfg = replayed["images"], replayed["cfg"]

    def summary_columns(self, wl, acc, cost_usd, window_s, unstable) -> dict:
        """Images (samples) per second and per dollar, and queueing delay percentiles
        (arrival to first admission on a replica) of image requests, which may each ask
        for several images (trace replay)."""
        images = acc.sums["images"]
        out = {"images_per_s": images / window_s, "cost_per_image_usd": cost_usd / images if images else math.nan}
        for p in PERCENTILES:
            out[f"queue_p{p}_s"] = acc.tails["queue_s"].percentile(p) if not unstable else math.nan
        return out


    def report_columns(self, g, fmt, after):
        """Queueing delay tails (images may queue behind multi-image requests) and images/s."""
        if after != "tails":
            return []
        values = pd.concat([g[f"queue_p{p}_s"] for p in PERCENTILES])
        unit, scale = fmt.latency_unit(values)
        return [(f"queue p50/p95/p99 ({unit})", [fmt.tails(r, "queue", scale) for _, r in g.iterrows()]),
                ("images/s", [fmt.human(v) for v in g["images_per_s"]])]


class VideoDiffusion(Picture):
    kind = "video_diffusion"
    config = VideoDiffusionWorkload
    model_kinds = ("video_diffusion",)
    stages = ("encode", "denoise", "decode")
    label = "video"
    marker = "triangle-up"
    item = "video"
