"""Autoregressive LLM requests: prefill of the prompt, then token-by-token decode with a
KV cache, served by continuous-batching replicas (:mod:`sim.engine.replica_ar`).

Two serving features are set per workload and apply wherever it is served:

- **Disaggregated prefill and decode** (Splitwise, ISCA 2024; DistServe, OSDI 2024): when
  a fleet places ``<workload>:prefill`` and ``<workload>:decode`` on pools of their own
  (any accelerators, the same model and KV precision), prompts are prefilled on the first,
  their KV cache moves over the link between the two (:mod:`sim.models.kv_transfer`) and
  the second decodes. ``disaggregation:`` sets when the decode replica is chosen and
  whether the transfer overlaps the prefill layer by layer (:class:`Disaggregation`).
- **Speculative decoding** (``speculation:``, :mod:`sim.workloads.speculation`): each
  decode step verifies k drafted tokens in one (k+1)-token forward.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field, model_serializer, model_validator

from sim.workloads.base import RequestShapes, WorkloadConfig, WorkloadKind, mean_of
from sim.workloads.base import Strict
from sim.workloads.checks import check_token_counts
from sim.workloads.speculation import Speculation, expected_tokens_per_step, tokens_per_step_pmf, verification_steps
from traffic.distributions import AZURE_CONV_OUTPUT_LOGNORMAL, AZURE_CONV_PROMPT_LOGNORMAL, Distribution, sample_tokens


SPLIT_STAGES = ("prefill", "decode")
"""The two sides of a disaggregated deployment (``serves: [<workload>:prefill]``)."""
OPTIONAL_BLOCKS = ("disaggregation", "speculation")  # left out of the saved scenario when unset


class Disaggregation(Strict):
    """How a disaggregated deployment of the workload hands a request from its prefill pool
    to its decode pool (used only where a fleet places the two stages on pools of their
    own; :mod:`sim.models.kv_transfer` for the transfer time).

    - ``decode_choice``: ``at_prefill`` picks the decode replica (by the fleet's router
      policy) when the prefill starts, so the decode side can reserve the KV blocks early
      and a ``layerwise`` transfer overlaps the prefill (Splitwise); ``at_handoff`` picks it
      when the prefill ends (the KV cache is complete, DistServe-style pull).
    - ``kv_transfer``: ``layerwise`` streams each layer's KV as soon as it is computed;
      ``after_prefill`` moves the whole cache once the prefill is done. On a prefill pool
      with chunked prefill (``prefill_chunk_tokens``) "the prefill" is the prompt's last
      chunk: the decode replica is picked at its start (``at_prefill``) or end, and the
      layers stream during it (docs/serving.md).

    Either way the decode replica admits the request only once it has reserved the blocks
    for its KV (first come, first served), and joins it to its batch when the transfer
    has ended; until the transfer ends the prefill replica keeps the finished KV cache in
    its own memory (counted against its KV capacity, so a full decode side stops the
    prefill side from admitting: back-pressure, never a drop)."""

    decode_choice: Literal["at_prefill", "at_handoff"] = "at_prefill"
    kv_transfer: Literal["layerwise", "after_prefill"] = "layerwise"


LENGTH_FIELDS = (("prompt_tokens", AZURE_CONV_PROMPT_LOGNORMAL), ("output_tokens", AZURE_CONV_OUTPUT_LOGNORMAL))


def default_lengths(data):
    """A workload's raw fields with the Azure conv fits filled in for the lengths it
    leaves unset (absent or null), unless its arrival replays a token trace: then they
    stay None and the trace rows' own lengths are used (:func:`draw_lengths`). The
    choice is thus a value of the validated model, never whether a field was given, so
    a scenario dumped and validated again (an override, a cell, a sweep point) draws
    exactly what it drew before."""
    if not isinstance(data, dict):
        return data
    arrival = data.get("arrival")
    if isinstance(arrival, dict) and arrival.get("kind") == "trace":
        return data
    missing = {field: dist.model_dump() for field, dist in LENGTH_FIELDS if data.get(field) is None}
    return {**data, **missing} if missing else data


LENGTHS_DEFAULT = ("default: a token trace replay's own per-row lengths; otherwise the Azure conv "
                   "lognormal fit (filled in at validation)")


class AutoregressiveWorkload(WorkloadConfig):
    """LLM requests: prefill of the prompt, then token-by-token decode with a KV cache.

    ``best_of_k`` > 1 samples k branches per request (autoregressive best-of-k): the prompt
    is prefilled once, its KV cache copied to every branch, and k sequences decode
    side by side (k× the KV cache and decode work; the request ends with its last branch).

    Default lengths are lognormals fitted to the Azure LLM inference trace 2023 (conv),
    github.com/Azure/AzurePublicDataset (CC-BY 4.0); see traffic.distributions."""

    kind: Literal["autoregressive"]
    prompt_tokens: Distribution | None = Field(None, description=LENGTHS_DEFAULT)
    output_tokens: Distribution | None = Field(None, description=LENGTHS_DEFAULT)
    best_of_k: int = Field(1, ge=1, le=64, description="branches per request, sharing a copied prompt KV")
    disaggregation: Disaggregation | None = Field(
        None, description="prefill-to-decode hand-off where a fleet serves <workload>:prefill and <workload>:decode "
        "on pools of their own (default: decode chosen at prefill, layer-by-layer KV transfer)")
    speculation: Speculation | None = Field(None, description="speculative decoding (draft model, MTP, EAGLE, n-gram)")

    @model_serializer(mode="wrap")
    def _leave_out_unset(self, handler):
        """The saved scenario lists the optional blocks only when set (so a scenario that
        uses neither saves as it always did)."""
        data = handler(self)
        for key in OPTIONAL_BLOCKS:
            if isinstance(data, dict) and data.get(key) is None:
                data.pop(key, None)
        return data

    @property
    def handoff(self) -> Disaggregation:
        """The hand-off settings (the defaults when ``disaggregation`` is unset)."""
        return self.disaggregation or Disaggregation()

    @model_validator(mode="before")
    @classmethod
    def _default_lengths(cls, data):
        return default_lengths(data)


def draw_lengths(wl, shapes: RequestShapes, rows, draws) -> None:
    """Prompt and output tokens of one window: drawn from the workload's distributions,
    or a trace replay's own per-row lengths where the workload sets none (None: see
    :func:`default_lengths`). Both streams are drawn either way, so setting one length
    does not shift the other's draws."""
    n = len(shapes.prompt)
    shapes.prompt = sample_tokens(wl.prompt_tokens or AZURE_CONV_PROMPT_LOGNORMAL, draws.prompt, n)
    shapes.output = sample_tokens(wl.output_tokens or AZURE_CONV_OUTPUT_LOGNORMAL, draws.output, n)
    if wl.prompt_tokens is None or wl.output_tokens is None:
        trace_prompt, trace_output = wl.arrival.lengths_of(rows)
        if wl.prompt_tokens is None:
            shapes.prompt = np.asarray(trace_prompt, dtype=np.int64)
        if wl.output_tokens is None:
            shapes.output = np.asarray(trace_output, dtype=np.int64)


def mean_lengths(wl) -> tuple[float, float]:
    """(mean prompt tokens, mean output tokens): the distributions' analytic means, or a
    trace replay's own (:meth:`traffic.arrivals.TraceArrivals.mean_lengths`) where the
    workload sets none."""
    trace = wl.arrival.mean_lengths() if wl.prompt_tokens is None or wl.output_tokens is None else (0.0, 0.0)
    return (trace[0] if wl.prompt_tokens is None else mean_of(wl.prompt_tokens),
            trace[1] if wl.output_tokens is None else mean_of(wl.output_tokens))


def beyond_context(pool, tokens: int) -> bool:
    """Whether ``tokens`` exceed the context of the pool's model (unbounded if unknown)."""
    return tokens > (pool.perf.model.max_context_tokens or math.inf)


def kv_fits(pool, tokens: int, branches: int) -> bool:
    """Whether ``branches`` sequences of ``tokens`` tokens fit one replica of ``pool`` (its
    KV blocks and ``max_batch``)."""
    blocks = -(-tokens // pool.config.kv_block_tokens) * branches
    return blocks <= pool.kv_capacity_blocks and branches <= pool.config.max_batch


class Autoregressive(WorkloadKind):
    kind = "autoregressive"
    config = AutoregressiveWorkload
    family = "ar"
    model_kinds = ("autoregressive",)
    split_stages = SPLIT_STAGES
    helper_stages = ("draft",)
    has_ttft = True
    has_tpot = True
    per_token = True
    label = "AR"
    marker = "circle"

    def check(self, name: str, wl) -> None:
        check_token_counts(name, wl)
        if wl.speculation is not None and wl.best_of_k > 1:
            raise ValueError(f"workloads.{name}.speculation: speculative decoding of best_of_k > 1 branches is not "
                             f"modelled; set best_of_k: 1 or leave speculation out")

    def check_helper(self, name: str, wl, stage: str) -> None:
        """A ``<name>:draft`` pool runs the draft model of ``speculation.method: draft_model``
        (:mod:`sim.models.speculation`, a drafter on a pool of its own)."""
        spec = wl.speculation
        if spec is None or spec.method != "draft_model":
            raise ValueError(f"a pool serving '{name}:{stage}' runs the draft model of speculative decoding, but "
                             f"workloads.{name}.speculation.method is "
                             f"{'not set' if spec is None else repr(spec.method)}; allowed: draft_model")

    def draw(self, wl, shapes, rows, draws, default_steps) -> None:
        """Lengths (:func:`draw_lengths`); under speculation, the verification steps each
        request needs after its first token (``steps``, from the workload's steps stream,
        which no other autoregressive draw uses: :func:`sim.workloads.speculation.verification_steps`)."""
        draw_lengths(wl, shapes, rows, draws)
        if wl.speculation is not None:
            pmf = tokens_per_step_pmf(wl.speculation.acceptance_by_position())
            shapes.steps = verification_steps(shapes.output - 1, pmf, draws.steps)

    def reject_reason(self, pool, wl, req) -> str:
        """``exceeds_max_context`` (prompt + output beyond the model's context) or
        ``exceeds_kv_capacity`` (its KV blocks, ×branches, beyond one replica's KV cache,
        or more branches than ``max_batch``). A prefill pool of a split deployment
        (``pool.role``) holds the prompt only, and rejects what no decode pool of the
        workload (``pool.decode_pools``) could hold, so a request is never stranded
        between the two."""
        tokens = req.prompt_tokens + req.output_tokens
        if beyond_context(pool, tokens):
            return "exceeds_max_context"
        if getattr(pool, "role", "") == "prefill":
            fits = False
            if kv_fits(pool, req.prompt_tokens, req.branches):  # a loop, not any(generator): once per arrival
                for d in pool.decode_pools[req.workload]:
                    if kv_fits(d, tokens, req.branches):
                        fits = True
                        break
        else:
            fits = kv_fits(pool, tokens, req.branches)
        return "" if fits else "exceeds_kv_capacity"

    def summary_columns(self, wl, acc, cost_usd, window_s, unstable) -> dict:
        """Under speculation: tokens emitted per verification step (decode tokens over
        steps of the completed measured requests), beside the closed form E[L]
        (:func:`sim.workloads.speculation.expected_tokens_per_step`) and k. In a split
        deployment: mean KV-cache bytes, transfer time and decode-side queue per request
        handed over (:mod:`sim.models.kv_transfer`)."""
        out: dict = {}
        c, s = acc.counts, acc.sums
        if wl.speculation is not None:
            out["draft_tokens"] = wl.speculation.draft_tokens
            out["expected_tokens_per_step"] = expected_tokens_per_step(wl.speculation.acceptance_by_position())
            out["tokens_per_step_mean"] = s["spec_tokens"] / s["spec_steps"] if s["spec_steps"] else math.nan
        if s["prefix_prompt_tokens"]:  # a prefix cache (docs/kv-reuse.md), over the completed measured requests
            out["prefix_hit_ratio"] = s["cached_tokens"] / s["prefix_prompt_tokens"]
            out["prefill_flops_saved"] = s["prefill_flops_saved"]
            out["prefix_host_hit_ratio"] = s["host_cached_tokens"] / s["prefix_prompt_tokens"]
            out["prefix_ssd_hit_ratio"] = s["ssd_cached_tokens"] / s["prefix_prompt_tokens"]
            if "shared_cached_tokens" in s:  # a shared KV tier served this workload's pool
                out["prefix_shared_hit_ratio"] = s["shared_cached_tokens"] / s["prefix_prompt_tokens"]
        n = c["kv_handoffs"]
        if n:
            out["kv_transfer_bytes_mean"] = s["kv_transfer_bytes"] / n
            out["kv_transfer_s_mean"] = s["kv_transfer_s"] / n
            out["decode_queue_s_mean"] = s["decode_queue_s"] / n
        return out

    def report_columns(self, g, fmt, after):
        """Tokens per verification step (closed form in brackets) under speculation; the
        prefix cache's token-weighted hit ratio; KV bytes moved per request in a split
        deployment."""
        if after != "costs":
            return []
        out = []
        if "tokens_per_step_mean" in g and g["tokens_per_step_mean"].notna().any():
            out.append(("tokens/step (E[L])", [
                "-" if r.get("tokens_per_step_mean") != r.get("tokens_per_step_mean")
                else f"{r['tokens_per_step_mean']:.2f} ({r['expected_tokens_per_step']:.2f})" for _, r in g.iterrows()]))
        if "prefix_hit_ratio" in g and g["prefix_hit_ratio"].notna().any():
            out.append(("prefix hit", ["-" if r.get("prefix_hit_ratio") != r.get("prefix_hit_ratio")
                                       else f"{r['prefix_hit_ratio']:.1%}" for _, r in g.iterrows()]))
        if "kv_transfer_bytes_mean" in g and g["kv_transfer_bytes_mean"].notna().any():
            out.append(("KV moved/request", [
                "-" if r.get("kv_transfer_bytes_mean") != r.get("kv_transfer_bytes_mean")
                else f"{r['kv_transfer_bytes_mean'] / 1e6:,.0f} MB" for _, r in g.iterrows()]))
        return out

    def capacity_rps(self, wl, pool, perf) -> float:
        """Batch b = min(max_batch, sequences whose prompt + output fit the KV cache); per
        request one prefill of the mean prompt P plus O decode iterations shared by b
        sequences at mean context P + O/2: 1 / (t_prefill(P) + O·t_decode(b)/b). Under
        speculation (``pool.spec``) O − 1 tokens take (O − 1) / E[L] steps of
        t_step(b). A prefill pool of a split deployment (``pool.role``) runs prompts only,
        as many per iteration as the token budget allows: n / t_prefill(n prompts); a
        decode pool runs the steps only: b / (steps · t_step(b))."""
        prompt, output = mean_lengths(wl)
        output = max(output, 1.0)
        role, spec = getattr(pool, "role", ""), getattr(pool, "spec", None)
        if role == "prefill":
            n = max(1, int(pool.config.max_prefill_tokens // max(prompt, 1.0)))
            cost = spec.mixed_cost if spec is not None else perf.mixed_cost
            return n / cost(n * prompt, n * prompt * prompt, 0, 0.0, 0.0)[0]
        batch = pool.config.max_batch
        if perf.kv_bytes_per_token > 0 and pool.kv_capacity_blocks:
            kv_tokens = pool.kv_capacity_blocks * pool.config.kv_block_tokens
            batch = max(1, min(batch, int(kv_tokens // (prompt + output))))
        context = batch * (prompt + output / 2.0)
        if spec is None:
            decode, steps = perf.decode_time_s(batch, context), output
        else:
            decode, steps = spec.step_time_s(batch, context), 1.0 + (output - 1.0) / spec.tokens_per_step
        if role == "decode":
            return batch / (max(steps - 1.0, 1e-9) * decode)
        return 1.0 / (perf.prefill_time_s(max(int(prompt), 1)) + steps * decode / batch)

    def floor_terms(self, wl, perf) -> tuple[float, float]:
        """(linear FLOP of one request: 2·N_active·(P + O), forwards its sequence is in: O;
        under speculation at least 1 + (O − 1)/(k + 1): every step emits at most k + 1)."""
        prompt, output = mean_lengths(wl)
        output = max(output, 1.0)
        if wl.speculation is not None:
            return perf.linear_flops_per_token * (prompt + output), 1.0 + (output - 1.0) / (wl.speculation.draft_tokens + 1)
        return perf.linear_flops_per_token * (prompt + output), output
