"""The activation-memory constant of video DiTs, fitted to published peak-memory figures.

Law (per sample, one denoiser forward, flash attention: linear in tokens)::

    peak_bytes = resident_weight_bytes + c · tokens · hidden · 2 B · cfg_factor

- ``tokens``: latent tokens after the VAE (temporal stride 4, spatial stride 8) and the 2×2
  patchify, ``(1 + (F − 1)/4) · (H/16) · (W/16)``, plus the text tokens the DiT attends to
  jointly (HunyuanVideo 256, CogVideoX 226; Wan cross-attends, 0).
- ``cfg_factor``: 2 when classifier-free guidance runs as one forward of a doubled batch, 1
  for guidance-distilled (HunyuanVideo) or sequential CFG (Wan 2.1).
- ``resident_weight_bytes``: the weights on the GPU at the peak, per the row's settings
  (``resident_note`` says what is assumed).
- ``c`` (live 16-bit values per token × hidden channel): least squares through the origin
  of ``peak − resident`` on ``tokens · hidden · 2 · cfg_factor`` over the ``fit`` rows of
  ``fleets/data/video_dit_peak_memory.csv``; the ``check`` rows are never used in the fit.

Result (2026-11-24 data, GB = 1e9 B): c = 46.3 from HunyuanVideo at 720×1280×129f (60 GB)
and 544×960×129f (45 GB); fit residuals −0.2% and +0.5%. Checks: CogVideoX-2B SAT 18 GB
predicted 20.3 GB (+12.5%), CogVideoX-5B SAT 26 GB predicted 30.0 GB (+15.5%),
Wan2.1-T2V-1.3B 8.19 GB predicted 7.8 GB (−5.2%). The checks carry the assumptions of
their rows (T5 resident under SAT, batched CFG) and must stay within 20% (tested); the
catalog uses the rounded
:data:`fleets.catalog.ACTIVATION_VALUES_PER_TOKEN_CHANNEL`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from sim.errors import UserError

POINTS_CSV = Path(__file__).parent / "data" / "video_dit_peak_memory.csv"
GB = 1e9
BYTES_PER_VALUE = 2.0


@dataclass(frozen=True, slots=True)
class PeakPoint:
    """One published peak-memory figure of a video DiT (bytes; tokens per sample)."""

    model: str
    role: str  # "fit" or "check"
    tokens: float
    hidden: float
    cfg_factor: float
    resident_bytes: float
    peak_bytes: float

    @property
    def unit_bytes(self) -> float:
        """Bytes of one live 16-bit value per token × hidden channel (× CFG batch)."""
        return self.tokens * self.hidden * BYTES_PER_VALUE * self.cfg_factor


def load_points(path: Path = POINTS_CSV) -> list[PeakPoint]:
    """Read the sourced points.

    Raises:
        UserError: a ``tokens`` value that disagrees with the row's geometry, or a role
            other than fit/check (naming the file, row and column).
    """
    df = pd.read_csv(path)
    points = []
    for i, r in df.iterrows():
        latent = (1 + (r.frames - 1) // r.vae_temporal_stride) * (r.height_px // (r.vae_spatial_stride * r.patch)) \
            * (r.width_px // (r.vae_spatial_stride * r.patch))
        if latent + r.text_tokens != r.tokens:
            raise UserError(f"{path}: row {i + 2} ({r.model}) tokens: {r.tokens} but the geometry gives "
                            f"{latent} latent + {r.text_tokens} text = {latent + r.text_tokens}")
        if r.role not in ("fit", "check"):
            raise UserError(f"{path}: row {i + 2} ({r.model}) role: {r.role!r}; allowed: fit, check")
        points.append(PeakPoint(r.model, r.role, float(r.tokens), float(r.hidden), float(r.cfg_factor),
                                float(r.resident_gb) * GB, float(r.peak_gb) * GB))
    return points


def fit_activation_constant(points: list[PeakPoint]) -> float:
    """Least-squares c (values per token-channel) over the ``fit`` points, through 0."""
    fit = [p for p in points if p.role == "fit"]
    return sum(p.unit_bytes * (p.peak_bytes - p.resident_bytes) for p in fit) / sum(p.unit_bytes ** 2 for p in fit)


def predicted_peak_bytes(point: PeakPoint, c: float) -> float:
    """Resident weights plus c live values per token-channel, bytes."""
    return point.resident_bytes + c * point.unit_bytes


def residuals(points: list[PeakPoint], c: float) -> pd.DataFrame:
    """Per point: role, predicted and published peak (GB) and relative error."""
    rows = [{"model": p.model, "role": p.role, "tokens": int(p.tokens),
             "predicted_gb": predicted_peak_bytes(p, c) / GB, "published_gb": p.peak_bytes / GB,
             "error": predicted_peak_bytes(p, c) / p.peak_bytes - 1.0} for p in points]
    return pd.DataFrame(rows)
