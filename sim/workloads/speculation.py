"""Speculative decoding of an autoregressive workload: its config, how many tokens one
verification step emits, and the verification steps each request needs.

A step drafts ``k`` tokens (a draft model, DeepSeek-style multi-token-prediction heads, an
EAGLE-style head, or an n-gram lookup in the context) and verifies them with one forward
of the target model over k + 1 tokens per sequence. Draft token j is accepted with
probability α_j given that tokens 1 … j−1 were (``acceptance``: one α for every position,
i.i.d., or one per position); the step emits the accepted prefix plus one token of the
target's own (the correction at the first rejection, or the bonus token after k
acceptances), so it emits L ∈ {1, …, k+1} tokens with

    P(L ≥ j + 1) = α_1 ⋯ α_j,     E[L] = 1 + Σ_{j=1..k} α_1 ⋯ α_j

which for i.i.d. acceptance α is (1 − α^(k+1)) / (1 − α) (Leviathan, Kalman & Matias,
"Fast Inference from Transformers via Speculative Decoding", ICML 2023, eq. 1 with γ = k).

A request of O output tokens gets its first token from the prefill, then needs the fewest
steps S whose emitted tokens reach O − 1 (the last step's surplus is discarded).
:func:`verification_steps` draws S per request from L's distribution (one draw per step,
vectorised over requests), so a replica's event cost stays per request: the engine only
needs S (:mod:`sim.engine.replica_ar`).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from sim.workloads.base import Strict

METHODS = ("draft_model", "mtp", "eagle", "ngram")
MAX_DRAFT_TOKENS = 16
BLOCK_STEPS = 32  # steps drawn per request and round in verification_steps


class Speculation(Strict):
    """Speculative decoding of one workload (module docstring). The method sets what
    drafts: ``draft_model`` a smaller catalog model (``draft_model``) run on the same
    replica, its weights and KV cache in the replica's memory; ``mtp`` / ``eagle`` a head
    of ``head_layers`` decoder layers of the target's shape that shares the target's
    output projection (``head_vocab`` rows x hidden); ``ngram`` a lookup in the context
    (no accelerator work)."""

    method: Literal["draft_model", "mtp", "eagle", "ngram"]
    draft_tokens: int = Field(ge=1, le=MAX_DRAFT_TOKENS, description="k: tokens drafted per verification step")
    acceptance: float | list[float] = Field(
        description="probability a drafted token is accepted given the ones before it were: one value (i.i.d.) "
        "or one per draft position (a list of draft_tokens values)")
    draft_model: str | None = Field(None, description="method draft_model: the catalog model that drafts")
    head_layers: int = Field(1, ge=1, le=16, description="method mtp / eagle: decoder layers in the draft head")
    head_vocab: int | None = Field(None, ge=1, le=10_000_000,
                                   description="method mtp / eagle: the target's vocabulary (rows of the shared "
                                   "output projection the head reads per drafted token)")

    @model_validator(mode="after")
    def _fields_of_method(self) -> "Speculation":
        values = self.acceptance if isinstance(self.acceptance, list) else [self.acceptance]
        if any(not 0.0 <= a <= 1.0 for a in values):
            raise ValueError(f"acceptance must lie in [0, 1], got {self.acceptance}")
        if isinstance(self.acceptance, list) and len(self.acceptance) != self.draft_tokens:
            raise ValueError(f"acceptance lists one value per draft position: {len(self.acceptance)} values "
                             f"for draft_tokens = {self.draft_tokens}")
        if (self.method == "draft_model") != (self.draft_model is not None):
            raise ValueError("draft_model names the drafting model of method draft_model, and only of it "
                             f"(method {self.method}, draft_model {self.draft_model!r})")
        heads = self.method in ("mtp", "eagle")
        if heads and self.head_vocab is None:
            raise ValueError(f"method {self.method} needs head_vocab: the target's vocabulary size (e.g. 129280 for "
                             "DeepSeek-V3, 128256 for Llama 3), for the output projection the head reads")
        if not heads and self.head_vocab is not None:
            raise ValueError(f"head_vocab is for methods mtp and eagle, not {self.method}")
        return self

    def acceptance_by_position(self) -> tuple[float, ...]:
        """α_1 … α_k."""
        if isinstance(self.acceptance, list):
            return tuple(float(a) for a in self.acceptance)
        return (float(self.acceptance),) * self.draft_tokens


def tokens_per_step_pmf(acceptance: tuple[float, ...]) -> np.ndarray:
    """P(L = j) for j = 1 … k + 1 (module docstring), shape (k + 1,)."""
    survive = np.concatenate([[1.0], np.cumprod(acceptance)])  # P(L >= j) for j = 1 … k+1
    return survive - np.concatenate([survive[1:], [0.0]])


def expected_tokens_per_step(acceptance: tuple[float, ...]) -> float:
    """E[L] = 1 + Σ_j α_1⋯α_j (module docstring)."""
    return float(1.0 + np.cumprod(acceptance).sum())


def verification_steps(tokens: np.ndarray, pmf: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Steps each request needs to emit ``tokens`` tokens (int64, shape (n,); 0 where
    tokens <= 0): the first step count whose summed L reaches its tokens, L drawn i.i.d.
    from ``pmf`` (over 1 … k+1). Draws :data:`BLOCK_STEPS` steps per unfinished request
    per round, so the work is O(Σ steps) array operations."""
    remaining = np.asarray(tokens, dtype=np.int64).copy()
    steps = np.zeros(len(remaining), dtype=np.int64)
    cdf = np.cumsum(pmf)
    cdf[-1] = 1.0
    active = np.flatnonzero(remaining > 0)
    while len(active):
        u = rng.random((len(active), BLOCK_STEPS))
        emitted = np.cumsum(np.searchsorted(cdf, u, side="right") + 1, axis=1)
        reached = emitted >= remaining[active, None]
        done = reached[:, -1]
        first = np.argmax(reached, axis=1)
        steps[active[done]] += first[done] + 1
        steps[active[~done]] += BLOCK_STEPS
        remaining[active[~done]] -= emitted[~done, -1]
        active = active[~done]
    return steps
