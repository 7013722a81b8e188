"""Reader and replay of a production image-generation trace (``format: genai_csv``).

The format is the Alibaba GenAI LoRA request trace (github.com/alibaba/clusterdata,
``cluster-trace-v2026-GenAI/lora_request_trace.csv`` @7a6c496; "Understanding Diffusion
Model Serving in Production", SoCC 2025): a header and one request per line with
``gmt_create`` (``2024-11-15 16:57:50``, 1 s resolution), ``predict_type`` (``TXT_2_IMG``,
``IMG_2_IMG``, ``INPAINTING``), ``predict_status`` (``SUCCEED``, ``FAILED``, ``PENDING``,
``PROCESSING``), ``exec_time_seconds``, ``negative_prompt_length`` (characters; empty when
there is none), ``num_images_per_prompt`` and ``num_inference_steps``. Other columns
(``groupId``, ``prompt_length``, ``checkpoint_model_version_id``, ``num_lora``) are ignored.

Decisions (real data does not force them; each is a field of :class:`GenaiTraceArrivals`):

* **Sub-second jitter.** ``gmt_create`` has 1 s resolution, so up to a few requests share
  an instant. Each arrival is moved to ``second + u``, u ~ U[0, 1) drawn from the
  workload's arrival RNG stream (seeded from the scenario seed), then rows are re-sorted
  by time. ``jitter: false`` replays the whole seconds as recorded.
* **Failed rows.** ``failed: keep`` (default) replays every row: a FAILED, PENDING or
  PROCESSING request still arrived and was admitted by the production service, and a
  capacity plan must see demand, not outcomes (398 FAILED, 30 PENDING, 3 PROCESSING of
  26,823 in the shared file). ``failed: drop`` replays ``SUCCEED`` rows only. Rows
  without ``num_images_per_prompt``/``num_inference_steps`` (25 PENDING rows in the
  shared file) take the workload's defaults: one image, its steps, its CFG setting.
* **Images per prompt** are the request's batch of samples: every sample runs the
  denoiser, the safety checker and the VAE decoder (width n), the text encoder once.
* **img2img and inpainting** start from the input image noised to ``strength``; diffusers
  then runs ``min(int(steps·strength), steps)`` denoising steps (``get_timesteps`` in
  every Stable Diffusion img2img/inpaint pipeline). The trace does not record strength,
  so the defaults are diffusers' own defaults for SDXL: 0.3 for
  ``StableDiffusionXLImg2ImgPipeline.__call__`` and 0.9999 for
  ``StableDiffusionXLInpaintPipeline.__call__`` (huggingface/diffusers,
  ``src/diffusers/pipelines/stable_diffusion_xl/pipeline_stable_diffusion_xl_img2img.py``
  and ``..._inpaint.py``; the inpaint default moved from 1.0 to 0.9999 in diffusers PR
  #4858, 2023-09, read 2026-11-24). The VAE encoding of the input image is not
  modelled (about one VAE-decoder pass less than a decode; the decoder dominates).
  At least one step always runs. A workload that sets ``steps`` explicitly runs that
  many for every row instead (a what-if, e.g. a distilled 4-step model on production
  arrivals), as explicit lengths override a token trace's.
* **Negative prompt -> CFG.** A row with ``negative_prompt_length`` > 0 runs
  classifier-free guidance (two denoiser forwards per step); an empty field runs it
  without. This is an assumption: a service may apply CFG with an empty negative prompt
  (diffusers does whenever guidance_scale > 1); ``cfg_from_negative_prompt: false``
  keeps the workload's ``cfg`` for every row instead.
* **Time window.** ``from`` (inclusive) and ``to`` (exclusive) are instants in the
  trace's own clock (``2024-12-01`` is midnight); time 0 of the replay is ``from`` when
  given, else the first kept row. ``start_s``, ``rate_scale`` and ``loop`` then act as
  for ``kind: trace`` (see :class:`traffic.arrivals.TraceArrivals`).

The file is read through :mod:`sim.inputs` (bounded UTF-8 text, one field per column
in every row, physical line numbers across blank lines and quoted fields). Malformed
input raises :class:`sim.errors.TraceError` reading ``file:LINE:FIELD: column: what was
expected``; a cell's text is never repeated (a number only once parsed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, datetime
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Iterator, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from sim.errors import TraceError
from sim.inputs import read_csv, reraised_as
from traffic.chunks import ArrivalChunk, concatenate, replay
from traffic.traces import FilePath, check_stamps, resolve_trace_file


def _instant(value):
    """A window bound as written in YAML: an ISO date or date-time string, or the date /
    date-time YAML itself parses (``from: 2024-11-19``); midnight for a bare date."""
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{value!r} is not an ISO date or date-time such as 2024-11-19 or 2024-11-19T06:00") from None
    if isinstance(value, date) and not isinstance(value, datetime):
        return datetime(value.year, value.month, value.day)
    return value


TraceInstant = Annotated[datetime, BeforeValidator(_instant)]

GENAI_COLUMNS = (
    "gmt_create", "predict_type", "predict_status", "exec_time_seconds",
    "negative_prompt_length", "num_images_per_prompt", "num_inference_steps",
)
OPTIONAL_COLUMNS = ("checkpoint_model_version_id", "num_lora")
"""Read when present (a model mix from the trace, sim/workloads/mix.py): the base checkpoint
and the number of LoRA adapters of each request."""
MAX_LORAS = 64
TASKS = ("TXT_2_IMG", "IMG_2_IMG", "INPAINTING")
STATUSES = ("SUCCEED", "FAILED", "PENDING", "PROCESSING")
TXT2IMG, IMG2IMG, INPAINTING = range(3)
MAX_IMAGES = 64
MAX_STEPS = 10_000
MAX_EXEC_S = 30 * 86400
"""Longest recorded execution time accepted (s; the shared file's longest is 3.3 hours)."""
MAX_PROMPT_CHARS = 10_000_000


@dataclass(frozen=True, slots=True)
class GenaiTrace:
    """Every row of a genai_csv file, sorted stably by ``created``.

    Attributes (arrays of shape (rows,), read-only):
        created: datetime64[ns], the ``gmt_create`` instant.
        task: int8 index into :data:`TASKS`.
        succeeded: bool, ``predict_status == SUCCEED``.
        exec_s: float64, the recorded production execution time (s).
        images: int64 images per prompt; 0 where the row has none.
        steps: int64 requested denoising steps; 0 where the row has none.
        negative_prompt: bool, a non-empty negative prompt.
        source_path: the resolved file.
        checkpoint: int64 rank of the row's ``checkpoint_model_version_id`` by how many
            rows name it (0: the most named; ties by id); 0 when the column is absent.
        loras: int64 ``num_lora``; 0 when empty or absent.
    """

    created: np.ndarray
    task: np.ndarray
    succeeded: np.ndarray
    exec_s: np.ndarray
    images: np.ndarray
    steps: np.ndarray
    negative_prompt: np.ndarray
    source_path: Path
    checkpoint: np.ndarray | None = None
    loras: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return int(self.created.size)

    def frame(self) -> pd.DataFrame:
        """The rows as a DataFrame (task as its name), for reports."""
        return pd.DataFrame({
            "created": self.created, "task": np.asarray(TASKS)[self.task], "succeeded": self.succeeded,
            "exec_s": self.exec_s, "images": self.images, "steps": self.steps,
            "negative_prompt": self.negative_prompt,
        })


def load_genai_trace(path: str | Path) -> GenaiTrace:
    """Read a genai_csv file (cached by resolved path and modification time).

    Raises:
        TraceError: unresolvable path (a symlink loop) or missing file
            (:func:`traffic.traces.resolve_trace_file`), missing column, or a malformed
            row (see module doc).
    """
    resolved = resolve_trace_file(path)
    return _load_cached(resolved, resolved.stat().st_mtime_ns)


@lru_cache(maxsize=4)
def _load_cached(path: Path, mtime_ns: int) -> GenaiTrace:
    with reraised_as(TraceError):
        table = read_csv(path, "trace", GENAI_COLUMNS, MIX_COLUMNS)
        if table.rows == 0:
            raise TraceError(f"{path}:2: no data rows after the header; expected one request per line")
        column = pd.Series(table.columns["gmt_create"], dtype=object)
        created = check_stamps(table, "gmt_create", pd.to_datetime(column, format="%Y-%m-%d %H:%M:%S", errors="coerce"),
                               "a time like 2024-11-15 16:57:50")
        task = pd.Series(table.choices("predict_type", TASKS)).map({t: i for i, t in enumerate(TASKS)})
        status = pd.Series(table.choices("predict_status", STATUSES))
        exec_s = table.numbers("exec_time_seconds", "a non-negative time in seconds", high=MAX_EXEC_S)
        negative = table.numbers("negative_prompt_length", "a non-negative character count or empty",
                                 integer=True, high=MAX_PROMPT_CHARS, empty=True)
        images = table.numbers("num_images_per_prompt", f"an integer 1..{MAX_IMAGES} or empty", integer=True,
                               low=1, high=MAX_IMAGES, empty=True)
        steps = table.numbers("num_inference_steps", f"an integer 1..{MAX_STEPS} or empty", integer=True,
                              low=1, high=MAX_STEPS, empty=True)
        checkpoint, loras = _mix_columns(table)
    order = np.argsort(created.to_numpy(), kind="stable")
    arrays = (
        created.to_numpy()[order], task.to_numpy(dtype=np.int8)[order],
        (status == "SUCCEED").to_numpy()[order], np.nan_to_num(exec_s)[order],
        np.nan_to_num(images).astype(np.int64)[order], np.nan_to_num(steps).astype(np.int64)[order],
        (np.nan_to_num(negative) > 0)[order],
    )
    checkpoint, loras = checkpoint[order], loras[order]
    for array in arrays + (checkpoint, loras):
        array.setflags(write=False)
    return GenaiTrace(*arrays, source_path=path, checkpoint=checkpoint, loras=loras)


MIX_COLUMNS = ("checkpoint_model_version_id", "num_lora")
"""Optional columns of the model mix: the base checkpoint and the number of LoRA adapters."""


def _mix_columns(table) -> tuple[np.ndarray, np.ndarray]:
    """(checkpoint rank, LoRA count) per row in file order (see :class:`GenaiTrace`); an
    absent column reads as empty cells (rank 0, no adapter).

    Raises:
        InputError: a ``num_lora`` cell that is not a whole number 0..MAX_LORAS (line, field)."""
    ids = pd.Series([text.strip() for text in table.columns["checkpoint_model_version_id"]], dtype=object)
    counts = ids.value_counts()
    ranked = sorted(counts.index, key=lambda k: (-counts[k], k))
    checkpoint = ids.map({k: i for i, k in enumerate(ranked)}).to_numpy(dtype=np.int64)
    loras = table.numbers("num_lora", f"an integer 0..{MAX_LORAS} or empty", integer=True, high=MAX_LORAS, empty=True)
    return checkpoint, np.nan_to_num(loras).astype(np.int64)


class GenaiTraceArrivals(BaseModel):
    """``arrival: {kind: trace, format: genai_csv, path: ...}`` for image_diffusion workloads.

    Fields beyond ``kind: trace`` (see the module docstring for each decision): ``jitter``,
    ``failed``, ``from``/``to``, ``img2img_strength``, ``inpainting_strength``,
    ``cfg_from_negative_prompt``. Unlike the token traces, arrivals depend on the rng
    (the sub-second jitter) unless ``jitter: false``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, serialize_by_alias=True)
    kind: Literal["trace"] = "trace"
    format: Literal["genai_csv"]
    path: FilePath
    rate_scale: float = Field(1.0, gt=0, le=1e6, description="replay speed-up, (0, 1e6]")
    start_s: float = Field(0.0, ge=0, le=10 * 365 * 86400)
    loop: bool = False
    jitter: bool = Field(True, description="spread each 1 s timestamp uniformly over its second (seeded)")
    failed: Literal["keep", "drop"] = Field("keep", description="replay FAILED/PENDING/PROCESSING rows or not")
    from_: TraceInstant | None = Field(None, alias="from", description="first instant replayed (trace clock)")
    to: TraceInstant | None = Field(None, description="end of the replayed window, exclusive (trace clock)")
    img2img_strength: float = Field(0.3, gt=0, le=1, description="diffusers SDXL img2img default")
    inpainting_strength: float = Field(0.9999, gt=0, le=1, description="diffusers SDXL inpaint default")
    cfg_from_negative_prompt: bool = True

    def with_path(self, new_path: str | Path) -> GenaiTraceArrivals:
        """A copy reading ``new_path`` instead (the CLI ``--trace`` override)."""
        return self.model_copy(update={"path": Path(new_path)})

    def trace(self) -> GenaiTrace:
        return load_genai_trace(self.path)

    def _window(self) -> tuple[np.ndarray, np.ndarray]:
        """(whole trace-seconds after time 0, row index) of the kept rows in the window."""
        trace = self.trace()
        keep = np.ones(trace.rows, dtype=bool) if self.failed == "keep" else trace.succeeded.copy()
        if self.from_ is not None:
            keep &= trace.created >= np.datetime64(self.from_.replace(tzinfo=None))
        if self.to is not None:
            keep &= trace.created < np.datetime64(self.to.replace(tzinfo=None))
        rows = np.flatnonzero(keep)
        if rows.size == 0:
            raise TraceError(
                f"{trace.source_path}: no rows left after failed={self.failed!r}, from={self.from_}, to={self.to}"
            )
        origin = np.datetime64(self.from_.replace(tzinfo=None)) if self.from_ else trace.created[rows[0]]
        seconds = (trace.created[rows] - origin) / np.timedelta64(1, "s")
        return seconds.astype(np.float64), rows

    def _segment(self, rng: np.random.Generator | None) -> tuple[np.ndarray, np.ndarray]:
        seconds, rows = self._window()
        if self.jitter:
            if rng is None:
                raise ValueError("genai_csv replay with jitter needs an rng")
            seconds = seconds + rng.random(seconds.size)
            order = np.argsort(seconds, kind="stable")
            seconds, rows = seconds[order], rows[order]
        keep = seconds >= self.start_s
        if not keep.any():
            raise TraceError(f"{self.path}: start_s={self.start_s} is beyond the replayed window ({seconds[-1]:.1f} s)")
        return seconds[keep] - self.start_s, rows[keep]

    def _period_s(self, offsets_s: np.ndarray) -> float:
        if offsets_s.size < 2 or offsets_s[-1] <= offsets_s[0]:
            raise TraceError(f"{self.path}: loop needs at least two distinct arrival times after start_s={self.start_s}")
        return float(offsets_s[-1] + (offsets_s[-1] - offsets_s[0]) / (offsets_s.size - 1))

    def arrival_chunks(self, rng: np.random.Generator | None, duration_s: float) -> Iterator[ArrivalChunk]:
        """The replayed arrivals in [0, duration_s) with their trace rows, a chunk at a
        time (:func:`traffic.chunks.replay`; the jitter is drawn for the whole window
        first, at the call).

        Raises (at the call):
            TraceError: bad file, empty window, start_s past the end, loop over < 2 times.
            UserError: more arrivals than :data:`traffic.limits.MAX_ARRIVALS`.
            ValueError: duration_s not finite and > 0, or jitter without an rng.
        """
        if not (math.isfinite(duration_s) and duration_s > 0):
            raise ValueError(f"duration_s(={duration_s}) must be finite and > 0")
        offsets_s, rows = self._segment(rng)
        period_s = self._period_s(offsets_s) if self.loop else None
        return replay(offsets_s, rows, self.rate_scale, period_s, duration_s, f"trace {self.path}")

    def select(self, rng: np.random.Generator | None, duration_s: float) -> tuple[np.ndarray, np.ndarray]:
        """(arrival instants in [0, duration_s) sorted, trace row index of each): the
        chunks of :meth:`arrival_chunks` concatenated (same errors)."""
        whole = concatenate(self.arrival_chunks(rng, duration_s))
        return whole.times_s, whole.rows

    def arrival_times(self, rng: np.random.Generator | None, duration_s: float) -> np.ndarray:
        """Sorted arrival instants in [0, duration_s), float64 shape (k,)."""
        return self.select(rng, duration_s)[0]

    def request_shapes(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Per-request shapes for trace rows ``rows`` (see the module doc for the rules),
        each shape (k,): ``steps`` int64 denoising steps actually run (0: the workload's),
        ``images`` int64 samples, ``cfg`` int8 (1 on, 0 off, -1: the workload's)."""
        trace = self.trace()
        task, steps, images = trace.task[rows], trace.steps[rows], trace.images[rows]
        known = (steps > 0) & (images > 0)
        strength = np.select([task == IMG2IMG, task == INPAINTING],
                             [self.img2img_strength, self.inpainting_strength], 1.0)
        run = np.maximum(np.minimum(np.floor(steps * strength + 1e-9).astype(np.int64), steps), 1)
        cfg = trace.negative_prompt[rows].astype(np.int8) if self.cfg_from_negative_prompt else np.full(rows.size, -1)
        return {
            "steps": np.where(known, run, 0).astype(np.int64),
            "images": np.where(known, images, 1).astype(np.int64),
            "cfg": np.where(known, cfg, -1).astype(np.int8),
        }

    def checkpoints_and_loras(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(checkpoint rank, LoRA adapters) of trace rows ``rows``, int64 shape (k,)."""
        trace = self.trace()
        return trace.checkpoint[rows].astype(np.int64), trace.loras[rows].astype(np.int64)

    @property
    def mean_rate_per_s(self) -> float:
        """Requests/s of the replayed window: rows / span · rate_scale (trace convention),
        whole seconds (the jitter moves each arrival by less than 1 s)."""
        seconds, _ = self._window()
        seconds = seconds[seconds >= self.start_s] - self.start_s
        span_s = self._period_s(seconds) if self.loop else float(seconds[-1]) if seconds.size else 0.0
        return seconds.size * self.rate_scale / span_s if span_s > 0 else math.inf
