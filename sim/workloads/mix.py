"""A workload's model and adapter mix: which checkpoint of its model architecture, and
which LoRA adapter, each request names (``mix:`` on any model-serving workload).

- ``models``: checkpoints of the workload's catalog model (same architecture and cost,
  distinct weights: fine-tunes), drawn with Zipf popularity ``model_zipf_s`` (0: uniform);
  checkpoint 0 is the most popular.
- ``adapters``: LoRA adapters on the checkpoint; a share ``adapter_share`` of requests
  names one, drawn with Zipf popularity ``adapter_zipf_s``.
- ``from_trace``: an image-trace replay (``format: genai_csv``) takes each request's
  checkpoint from ``checkpoint_model_version_id`` (ranked by how often the whole trace
  uses it) and its adapters from ``num_lora``. The trace names no adapter, only how many,
  so every adapter of a trace request is one the replica does not hold (a load per
  request: an upper bound on adapter traffic).

Requests carry ``variant`` (checkpoint rank), ``adapter`` (id, -1: none) and ``lora``
(adapters to load). The draws come from a stream of their own (the workload's seventh),
so turning a mix on shifts no other draw.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

TRACE_ADAPTER_BASE = 1 << 40
"""Adapter ids of trace requests (one fresh id per request: never cached)."""


class ModelMix(BaseModel):
    """A workload's checkpoint and adapter mix (module docstring); unknown fields refused, frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    models: int = Field(1, ge=1, le=1_000_000, description="checkpoints of the workload's model")
    model_zipf_s: float = Field(0.0, ge=0, le=10, description="Zipf exponent of checkpoint popularity; 0 uniform")
    adapters: int = Field(0, ge=0, le=10_000_000, description="LoRA adapters")
    adapter_share: float = Field(0.0, ge=0, le=1, description="fraction of requests naming an adapter")
    adapter_zipf_s: float = Field(1.0, ge=0, le=10)
    adapter_rank: int = Field(16, ge=1, le=4096, description="LoRA rank (adapter bytes from the model's dims)")
    adapter_bytes: float | None = Field(None, gt=0, le=1e12, description="bytes of one adapter; default: rank x "
                                        "(q, k, v, o projections) x layers at bf16, for transformer models")
    from_trace: bool = Field(False, description="checkpoints and adapter counts from an image trace (genai_csv)")

    @model_validator(mode="after")
    def _adapters(self) -> "ModelMix":
        if self.adapter_share > 0 and self.adapters == 0 and not self.from_trace:
            raise ValueError("mix: adapter_share > 0 needs adapters >= 1")
        return self

    @property
    def has_adapters(self) -> bool:
        return self.from_trace or (self.adapters > 0 and self.adapter_share > 0)


def zipf_ranks(rng: np.random.Generator, n: int, count: int, s: float) -> np.ndarray:
    """``n`` ranks in [0, count) with P(rank i) proportional to 1 / (i + 1)^s, int64."""
    if count == 1:
        return np.zeros(n, dtype=np.int64)
    weights = 1.0 / np.arange(1, count + 1, dtype=float) ** s
    cdf = np.cumsum(weights / weights.sum())
    return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), count - 1).astype(np.int64)


def draw_mix(mix: ModelMix, arrival, rows, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(variant, adapter, lora) arrays of shape (n,) for one window (module docstring)."""
    if mix.from_trace:
        variant, lora = arrival.checkpoints_and_loras(rows)
        first = TRACE_ADAPTER_BASE + rng.integers(0, 1 << 40, size=n)  # fresh, never repeated in practice
        return variant, np.where(lora > 0, first, -1).astype(np.int64), lora.astype(np.int64)
    variant = zipf_ranks(rng, n, mix.models, mix.model_zipf_s)
    named = rng.random(n) < mix.adapter_share if mix.adapters else np.zeros(n, dtype=bool)
    adapter = np.where(named, zipf_ranks(rng, n, max(mix.adapters, 1), mix.adapter_zipf_s), -1).astype(np.int64)
    return variant, adapter, named.astype(np.int64)


def adapter_bytes(mix: ModelMix, model) -> float:
    """Bytes of one adapter: ``mix.adapter_bytes``, else rank r on the q, k, v and o
    projections of every layer at bf16 (2 bytes): r × [(h + H·d) + 2(h + K·d) + (H·d + h)]
    × layers × 2, with h the hidden size, H / K the query / KV heads and d the head size
    (the LoRA paper's attention-weights setting, Hu et al. arXiv 2106.09685 section 4).

    Raises:
        ValueError: no ``adapter_bytes`` and the model has no transformer dims."""
    if mix.adapter_bytes is not None:
        return mix.adapter_bytes
    dims = [getattr(model, k, None) for k in ("hidden", "heads", "kv_heads", "head_dim", "layers")]
    if not all(dims):
        raise ValueError(f"mix.adapter_bytes: model '{model.key}' has no layers/heads in the catalog; set adapter_bytes")
    h, heads, kv, d, layers = dims
    per_layer = (h + heads * d) + 2 * (h + kv * d) + (heads * d + h)
    return float(mix.adapter_rank * per_layer * layers * 2)
