"""The prefix-cache columns of a run for the dashboard (issue 26, item 5), without Streamlit.

Which columns are cache columns is decided by their names, not by a fixed list, so a
tier added later (SSD, a shared pool) shows without a change here:

- summary and pool columns: every name starting with one of :data:`CACHE_PREFIXES`
  (``prefix_hit_ratio``, ``prefix_host_hit_ratio``, ``prefill_flops_saved``, and the KV
  traffic between tiers in the measurement window: ``kv_demoted_host_bytes``,
  ``kv_promoted_ssd_bytes``, ``kv_written_shared_bytes``, ``kv_dropped_bytes`` ...);
  ratios (names ending ``_ratio``) are shown as percentages, bytes in engineering notation;
- request columns: ``cached_tokens`` (prompt tokens served from any cache tier at the
  request's first prefill) and ``<tier>_cached_tokens`` (the part of them served from
  the lower tier ``<tier>``, e.g. ``host_cached_tokens``). Tokens served from HBM are
  cached_tokens − Σ the lower tiers'; the KV bytes moved between tiers are each lower
  tier's tokens × the serving pool's stored KV bytes per token (docs/kv-reuse.md: a hit
  in a lower tier is copied back into HBM).

The request sums are over the completed measured requests, as the summary's ratios are;
the ``kv_<move>_bytes`` columns count every tier change inside the measurement window
(docs/kv-reuse.md), so ``kv_promoted_host_bytes`` also holds promotions of requests
readmitted after a preemption or not yet completed.
"""

from __future__ import annotations

import re

import pandas as pd

CACHE_PREFIXES = ("prefix_", "prefill_flops_saved", "kv_demoted_", "kv_promoted_", "kv_written_", "kv_dropped_",
                  "kv_tier_", "tier_")
TIER_TOKENS = re.compile(r"^(?P<tier>[a-z0-9]+)_cached_tokens$")
HBM = "hbm"


def cache_columns(table: pd.DataFrame) -> list[str]:
    """The cache columns of a summary or pools ``table`` that hold a value in some row."""
    return [c for c in table.columns if c.startswith(CACHE_PREFIXES) and table[c].notna().any()]


def lower_tiers(requests: pd.DataFrame) -> list[str]:
    """Tiers below HBM that the request rows count tokens for (``host`` for
    ``host_cached_tokens``), in column order."""
    return [m["tier"] for c in requests.columns if (m := TIER_TOKENS.match(c))]


def tier_tokens(requests: pd.DataFrame, kv_bytes_per_token: dict[tuple[str, str], float]) -> pd.DataFrame:
    """Per fleet and workload, over completed measured requests of pools with a cache:
    ``tokens_from_<tier>`` for HBM and each lower tier, and ``kv_bytes_moved_<tier>_to_hbm``
    (each lower tier's tokens × the serving pool's KV bytes per token, from
    ``kv_bytes_per_token`` keyed by (fleet, pool); NaN for a pool not in it). Empty when
    no row has a cache."""
    if "cached_tokens" not in requests.columns or requests.empty:
        return pd.DataFrame()
    done = requests[requests["measured"].astype(bool) & (requests["status"] == "completed")
                    & requests["cached_tokens"].notna()]
    if done.empty:
        return pd.DataFrame()
    tiers = lower_tiers(done)
    per_token = pd.Series([kv_bytes_per_token.get((f, p), float("nan")) for f, p in zip(done["fleet"], done["pool"])],
                          index=done.index, dtype=float)
    frame = pd.DataFrame({"fleet": done["fleet"], "workload": done["workload"]})
    lower = sum((done[f"{t}_cached_tokens"].fillna(0) for t in tiers), pd.Series(0, index=done.index))
    frame[f"tokens_from_{HBM}"] = done["cached_tokens"] - lower
    for t in tiers:
        frame[f"tokens_from_{t}"] = done[f"{t}_cached_tokens"].fillna(0)
    for t in tiers:
        frame[f"kv_bytes_moved_{t}_to_{HBM}"] = frame[f"tokens_from_{t}"] * per_token
    return frame.groupby(["fleet", "workload"], sort=False).sum(min_count=1).reset_index()


def kv_bytes_by_pool(scenario) -> dict[tuple[str, str], float]:
    """(fleet, pool) -> stored KV bytes per token of every pool with a prefix cache (its
    performance model's, at its KV precision and TP)."""
    from sim.fleet_plan import resolve_fleet

    out = {}
    for i, fleet in enumerate(scenario.fleets):
        if not any(getattr(p, "prefix_cache", None) is not None for p in fleet.pools):
            continue
        for pool in resolve_fleet(scenario, i).pools:
            if getattr(pool.config, "prefix_cache", None) is not None and pool.perf is not None:
                out[fleet.name, pool.name] = float(pool.perf.kv_bytes_per_token)
    return out


def cache_summary(summary: pd.DataFrame, tiers: pd.DataFrame) -> pd.DataFrame:
    """Per fleet and workload with a cache: the summary's cache columns beside the tier
    token and byte counts of :func:`tier_tokens` (formatted for the page). Empty when no
    workload ran with a cache."""
    columns = cache_columns(summary)
    if not columns:
        return pd.DataFrame()
    rows = summary.loc[summary[columns].notna().any(axis=1), ["fleet", "workload", *columns]]
    if not tiers.empty:
        rows = rows.merge(tiers, on=["fleet", "workload"], how="left")
    return formatted(rows)


def formatted(table: pd.DataFrame) -> pd.DataFrame:
    """Ratios as percentages, FLOPs and bytes in engineering notation, tokens as integers."""
    out = table.copy()
    for c in out.columns:
        if c in ("fleet", "workload", "pool"):
            continue
        if c.endswith("_ratio"):
            out[c] = out[c].map(lambda v: "—" if pd.isna(v) else f"{v:.1%}")
        elif "flops" in c or "bytes" in c:
            out[c] = out[c].map(lambda v: "—" if pd.isna(v) else f"{v:.3g}")
        elif c.startswith("tokens_from_"):
            out[c] = out[c].map(lambda v: "—" if pd.isna(v) else f"{int(v):,}")
    return out


def pool_cache_table(pools: pd.DataFrame) -> pd.DataFrame:
    """Per pool with a cache: its cache columns (formatted); empty when none has one."""
    columns = cache_columns(pools)
    if not columns:
        return pd.DataFrame()
    rows = pools.loc[pools[columns].notna().any(axis=1), ["fleet", "pool", *columns]]
    return formatted(rows)
