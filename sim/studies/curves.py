"""Capacity curves (``dcsim curves``): what buyers compare (SemiAnalysis InferenceMAX, vendor
tables): output tokens/s per GPU against tokens/s per user, and $/1M output tokens against
tokens/s per user, per chip, for one model and traffic shape, across batch sizes.

Formula (steady state, from the performance model's roofline step times: see
:func:`sim.studies.interactivity.step_time_s`): a replica of G chips at layout (TP, EP)
running a batch of b sequences of I prompt and O output tokens takes a mean step time
t(b) = decode of b tokens + the prefill of the b/O prompts admitted per step on average
(the prefill share is inside t). Then

    tokens/s per user   = 1 / t(b)                    (1/TPOT, prefill included)
    tokens/s per GPU    = b / (t(b) · G)
    $/1M output tokens  = rent_usd_per_gpu_hour / (tokens/s per GPU · 3600) · 1e6
    tokens/s per MW     = tokens/s per GPU · utilisation · 1e6 / (node W / GPUs per node · PUE)

for every layout whose KV cache (90% of HBM less the weights) holds the batch. The band
of each chip is its ``efficiency_band_pct`` from ``dcsim validate`` (leave-one-accelerator-
out residuals): throughput × (1 ∓ band), per-user speed likewise. Rental prices are the
sourced rows of ``fleets/data/ownership.csv``; the PUE (1.56, Uptime Institute 2024) is
:class:`sim.scenario.Economics`'s default; node power is the catalog's full-load node
power (provisioned, not measured). No speculative decoding.
"""

from __future__ import annotations

import math

import pandas as pd

from fleets.catalog import Catalog
from sim.errors import UserError
from sim.models.economics import rental_rate
from sim.scenario import Economics
from sim.studies.interactivity import curve

SECONDS_PER_HOUR = 3600.0
COLUMNS = ("accelerator", "precision", "tp", "ep", "gpus", "batch", "tokens_per_s_per_user",
           "tokens_per_s_per_user_lo", "tokens_per_s_per_user_hi", "tokens_per_s_per_gpu",
           "tokens_per_s_per_gpu_lo", "tokens_per_s_per_gpu_hi", "band_pct", "tpot_s", "meets_tpot_slo",
           "usd_per_1m_output_tokens", "tokens_per_s_per_mw", "utilisation")


def _default_precision(catalog: Catalog, accelerator: str) -> str:
    """fp8 where the chip has an fp8 peak, else bf16 (the serving default of the catalog)."""
    return "fp8" if "fp8" in catalog.accelerator(accelerator).precisions else "bf16"


def chip_curve(catalog: Catalog, model: str, accelerator: str, input_tokens: int, output_tokens: int,
               precision: str | None = None, tp: int | None = None, max_gpus: int = 8,
               tpot_slo_s: float | None = None, utilisation: float = 0.7) -> pd.DataFrame:
    """One chip's points (columns :data:`COLUMNS`), one row per (TP, EP, batch), in the
    order of :func:`sim.studies.interactivity.curve`. ``tp`` keeps one TP size;
    ``utilisation`` (0, 1] scales tokens per MW. Raises UserError for unknown keys, a
    precision the chip lacks, or a model that fits no layout."""
    acc = catalog.accelerator(accelerator)
    precision = precision or _default_precision(catalog, accelerator)
    points = [p for p in curve(catalog, accelerator, model, precision, input_tokens, output_tokens, max_gpus)
              if tp is None or p.tp == tp]
    if not points:
        raise UserError(f"--tp {tp}: model '{model}' has no layout at TP {tp} on '{accelerator}' within {max_gpus} GPUs")
    band = acc.efficiency_band_pct
    b = (band or 0.0) / 100.0
    rent = rental_rate(accelerator, Economics())
    mw_per_gpu = acc.node_power_w / acc.accelerators_per_node * Economics().pue / 1e6
    rows = []
    for p in points:
        tpot = 1.0 / p.tokens_per_s_per_user
        rows.append({
            "accelerator": accelerator, "precision": precision, "tp": p.tp, "ep": p.ep, "gpus": p.accelerators,
            "batch": p.batch, "tokens_per_s_per_user": p.tokens_per_s_per_user,
            "tokens_per_s_per_user_lo": p.tokens_per_s_per_user * (1 - b),
            "tokens_per_s_per_user_hi": p.tokens_per_s_per_user * (1 + b),
            "tokens_per_s_per_gpu": p.tokens_per_s_per_accelerator,
            "tokens_per_s_per_gpu_lo": p.tokens_per_s_per_accelerator * (1 - b),
            "tokens_per_s_per_gpu_hi": p.tokens_per_s_per_accelerator * (1 + b),
            "band_pct": math.nan if band is None else band, "tpot_s": tpot,
            "meets_tpot_slo": True if tpot_slo_s is None else tpot <= tpot_slo_s,
            "usd_per_1m_output_tokens": rent / (p.tokens_per_s_per_accelerator * SECONDS_PER_HOUR) * 1e6,
            "tokens_per_s_per_mw": p.tokens_per_s_per_accelerator * utilisation / mw_per_gpu,
            "utilisation": utilisation,
        })
    return pd.DataFrame(rows, columns=list(COLUMNS))


def curves_table(catalog: Catalog, model: str, accelerators: list[str], input_tokens: int, output_tokens: int,
                 **options) -> pd.DataFrame:
    """:func:`chip_curve` of every chip in ``accelerators``, concatenated."""
    return pd.concat([chip_curve(catalog, model, a, input_tokens, output_tokens, **options) for a in accelerators],
                     ignore_index=True)


def frontier(table: pd.DataFrame) -> pd.DataFrame:
    """Per chip, the points no other point of that chip beats on both tokens/s per GPU and
    tokens/s per user (the curve a buyer reads), sorted by tokens/s per user."""
    keep = []
    for _, g in table.groupby("accelerator", sort=False):
        g = g.sort_values("tokens_per_s_per_user", ascending=False, kind="stable")
        best = -math.inf
        for i, r in g.iterrows():
            if r["tokens_per_s_per_gpu"] > best:
                keep.append(i)
                best = r["tokens_per_s_per_gpu"]
    return table.loc[keep].sort_values(["accelerator", "tokens_per_s_per_user"], kind="stable")


def summary_at_speeds(table: pd.DataFrame, speeds: list[float]) -> pd.DataFrame:
    """Per chip and per-user speed S: the best tokens/s per GPU among points with
    tokens/s per user ≥ S (NaN when none is that fast), its layout, $/1M and tokens per MW."""
    rows = []
    for acc, g in table.groupby("accelerator", sort=False):
        for s in speeds:
            fast = g[g["tokens_per_s_per_user"] >= s]
            if fast.empty:
                rows.append({"accelerator": acc, "tokens_per_s_per_user_min": s})
                continue
            r = fast.loc[fast["tokens_per_s_per_gpu"].idxmax()]
            rows.append({"accelerator": acc, "tokens_per_s_per_user_min": s, "tp": int(r["tp"]), "ep": int(r["ep"]),
                         "batch": int(r["batch"]), "tokens_per_s_per_user": r["tokens_per_s_per_user"],
                         "tokens_per_s_per_gpu": r["tokens_per_s_per_gpu"], "band_pct": r["band_pct"],
                         "usd_per_1m_output_tokens": r["usd_per_1m_output_tokens"],
                         "tokens_per_s_per_mw": r["tokens_per_s_per_mw"], "meets_tpot_slo": r["meets_tpot_slo"]})
    return pd.DataFrame(rows)
