"""Published MLPerf Inference results as calibration points for the roofline model.

Reads ``calibration_points.csv`` (one row per system × benchmark × scenario × metric,
MLPerf Inference v4.0/v4.1; shipped in ``fleets/data/reference/``, see NOTICE.md there) and keeps, per system and
scenario, the headline throughput metric. Each kept point is either *expressible* (its
accelerator and model map to catalog keys, its scenario is Offline or Server, it is a
closed-division result) or listed in the ``unexpressed`` table with the reason.

Points are split into a calibration group and a held-out group by a fixed rule
(:func:`assign_groups`): within each accelerator × model of the Offline points, systems
are sorted by name and every other one (the 1st, 3rd, ...) calibrates; every Server point
and every other Offline point is held out.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from sim.errors import UserError
from sim.inputs import parse_number, read_csv, shown_number

# MLPerf accelerator names (``accelerator`` column) -> catalog key; None = not in the
# catalog (the reason is given in UNKNOWN_ACCELERATORS).
ACCELERATOR_KEYS = {
    "NVIDIA H100-SXM-80GB": "h100-sxm",
    "NVIDIA H200-SXM-141GB": "h200",
    "NVIDIA H200-SXM-141GB-CTS": "h200",  # custom thermal solution (1000 W): same chip and memory
    "AMD Instinct MI300X-NPS1-SPX-192GB-750W": "mi300x",
    "AMD MI300X-NPS1-SPX-192GB-750W": "mi300x",
    "TPU v5e": "tpu-v5e",
    "TPU v6": "tpu-v6e",  # Google's v4.1 submission names Trillium "TPU v6"; the catalog's v6e
}
# MLPerf v5.x spellings, matched after :func:`normalise_accelerator` (case-insensitive
# regular expressions, first match wins): B200-SXM-180GB, GB200 (NVL72), MI325X 256GB
# HBM3e, MI355X; "Virtualized" prefixes are dropped first.
ACCELERATOR_PATTERNS = (
    (r"\bGB200\b", "gb200"),
    (r"\bB200\b", "b200"),
    (r"\bMI325X\b", "mi325x"),
    (r"\bMI355X\b", "mi355x"),
    (r"\bMI300X\b", "mi300x"),
    (r"\bH200\b(?!.*NVL)", "h200"),
    (r"\bH100-SXM\b", "h100-sxm"),
    (r"\bTPU ?v6e?\b|Trillium", "tpu-v6e"),
    (r"\bTPU ?v5e\b", "tpu-v5e"),
)
UNKNOWN_ACCELERATORS = {
    "NVIDIA H100-NVL-94GB": "H100 NVL (94 GB, 3.9 TB/s, PCIe card pairs) is not in the catalog",
    "NVIDIA H100-PCIe-80GB": "H100 PCIe (80 GB, 2.0 TB/s, 350 W) is not in the catalog",
    "NVIDIA GH200 Grace Hopper Superchip 144GB": "GH200 144 GB (HBM3e, 4.9 TB/s) is not in the catalog",
    "NVIDIA GH200 Grace Hopper Superchip 96GB": "GH200 96 GB (HBM3, 4.0 TB/s) is not in the catalog",
    "NVIDIA L40S": "L40S is not in the catalog",
    "NVIDIA L4": "L4 is not in the catalog",
    "NVIDIA GeForce RTX 4090": "RTX 4090 is not in the catalog",
    "NVIDIA Jetson AGX Orin 64G": "Jetson AGX Orin is not in the catalog",
    "Intel Gaudi2": "Gaudi2 is not in the catalog (only Gaudi 3)",
}
# MLPerf benchmark names -> catalog model key. The -99 and -99.9 variants of llama2-70b
# differ only in the accuracy target; the same run often serves both.
MODEL_KEYS = {
    "llama2-70b-99": "llama-2-70b",
    "llama2-70b-99.9": "llama-2-70b",
    "mixtral-8x7b": "mixtral-8x7b",
    "stable-diffusion-xl": "sdxl",
    "llama3.1-405b": "llama-3.1-405b",
    "llama3.1-405b-99": "llama-3.1-405b",
    "llama3.1-405b-99.9": "llama-3.1-405b",
    # Llama 3.1 8B has Llama 3 8B's architecture (layers, heads, KV heads, FFN); only the
    # RoPE scaling and context length differ (meta-llama model cards), which do not change
    # the roofline cost at MLPerf's lengths.
    "llama3.1-8b": "llama-3-8b",
    "llama3.1-8b-99": "llama-3-8b",
    "llama3.1-8b-99.9": "llama-3-8b",
    # DeepSeek-R1 has DeepSeek-V3's architecture (catalog row deepseek-r1); its MLPerf
    # dataset lengths and Server bounds are not sourced yet, so validate lists its rows
    # as "no workload statistics" rather than dropping them.
    "deepseek-r1": "deepseek-r1",
}
# Benchmarks recognised but not expressible, with the reason.
UNEXPRESSIBLE_BENCHMARKS = {
    "llama2-70b-interactive-99": "the interactive variant's TTFT/TPOT bounds are not modelled (Server constraints of llama2-70b only)",
    "llama2-70b-interactive-99.9": "the interactive variant's TTFT/TPOT bounds are not modelled (Server constraints of llama2-70b only)",
}
# Spellings of the ``precision`` column -> dcsim precision.
PRECISION_SPELLINGS = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "e4m3": "fp8", "fp8_e4m3": "fp8",
                       "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4"}
SCENARIOS = ("Offline", "Server")
# Headline metric per scenario and benchmark family, in order of preference. Server LLM
# results report completed tokens/s (v4.1 headline); SDXL v4.0 reported scheduled samples/s.
HEADLINE_METRICS = {
    ("Offline", "llm"): ("tokens_per_s",),
    ("Server", "llm"): ("completed_tokens_per_s",),
    ("Offline", "image"): ("samples_per_s",),
    ("Server", "image"): ("completed_samples_per_s", "scheduled_samples_per_s"),
}
# Precision when the ``precision`` column is empty (it is, for every row of the v4.x
# file). ASSUMED, per vendor and benchmark family: NVIDIA (TensorRT-LLM) and AMD (vLLM
# ROCm) closed LLM submissions quantise weights and KV cache to FP8. SDXL is costed at
# bf16 everywhere: NVIDIA quantises only the UNet's GEMMs/convs to INT8/FP8 while
# attention, norms, the text encoders and the VAE run in FP16, and dcsim has one
# precision per pool; Google's TPU results run in bf16.
DEFAULT_PRECISION = {("nvidia", "llm"): "fp8", ("amd", "llm"): "fp8"}
POINT_COLUMNS = ("point", "system", "mlperf_accelerator", "accelerator", "count", "benchmark", "model",
                 "scenario", "metric", "unit", "measured", "precision", "division", "source", "round")


@dataclass(frozen=True, slots=True)
class Point:
    """One published result that dcsim can simulate. ``measured`` is in ``unit``
    (tokens/s for LLMs, samples/s for SDXL), for the whole system of ``count`` chips."""

    point: str
    system: str
    mlperf_accelerator: str
    accelerator: str
    count: int
    benchmark: str
    model: str
    scenario: str
    metric: str
    unit: str
    measured: float
    precision: str
    division: str
    source: str
    round: str = ""  # MLPerf round ("v4.1") from the row's notes or source; "" when neither names one


def mlperf_round(row) -> str:
    """The MLPerf Inference round of a calibration row: "v4.1" from its notes ("MLPerf
    Inference v4.1 closed; ...") or, failing that, its source
    ("github.com/mlcommons/inference_results_v4.0 ..."); "" when neither names one
    (e.g. a user's own measurements)."""
    found = re.search(r"MLPerf Inference (v\d+(?:\.\d+)*)", str(row.get("notes", ""))) or \
        re.search(r"inference_results_(v\d+(?:\.\d+)*)", str(row.get("source", "")))
    return found.group(1) if found else ""


def family(model_key: str) -> str:
    """"image" for SDXL, "llm" for the language models."""
    return "image" if model_key == "sdxl" else "llm"


POINTS_REQUIRED = ("system", "accelerator", "count", "model", "scenario", "metric", "value", "source")
POINTS_OPTIONAL = ("unit", "precision", "notes", "software")
MAX_MEASURED = 1e12
"""Largest measured throughput of one system accepted (tokens or samples per second;
the largest MLPerf result shipped is ~1.1e6 tokens/s)."""
MAX_COUNT = 100_000
"""Most accelerators of one measured system."""


def read_points_table(path: str | Path) -> pd.DataFrame:
    """The rows of a points CSV as text (one column per header field; missing optional
    columns empty), read through :mod:`sim.inputs`: bounded UTF-8 text, one field per
    column in every row, ``value`` a number in (0, :data:`MAX_MEASURED`] and ``count``
    a whole number of accelerators from 1 to :data:`MAX_COUNT` (``8``, ``8.0``; words
    may follow after a space, as in ``8 (HLS-Gaudi2 server)``).

    Raises:
        UserError: ``file:LINE:FIELD: column: what was expected``, never a cell's text."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"calibration data not found: {path} (pass --data PATH)")
    table = read_csv(path, "calibration points", POINTS_REQUIRED, POINTS_OPTIONAL)
    if table.rows == 0:
        raise UserError(f"{path}:2: no data rows after the header; expected one measured point per line")
    table.numbers("value", f"a measured throughput in (0, {MAX_MEASURED:g}]", low=0, low_open=True, high=MAX_MEASURED)
    for i, text in enumerate(table.columns["count"]):
        value = parse_number(text.split("(")[0].split()[0]) if text.split() else None
        if value is None or value != int(value) or not 1 <= value <= MAX_COUNT:
            shown = "not a whole number" if value is None or value != int(value) else f"{shown_number(value)} is out of range"
            raise table.fail(i, "count", f"{shown}; expected the number of accelerators, 1..{MAX_COUNT:,} "
                             f"(words may follow after a space)")
        table.columns["count"][i] = str(int(value))
    return pd.DataFrame(table.columns, dtype=str)


def read_points(path: str | Path) -> tuple[list[Point], pd.DataFrame]:
    """(expressible points, unexpressed table with a ``reason`` column) from the CSV
    (read by :func:`read_points_table`).

    Raises:
        UserError: the file is missing, unreadable or malformed (file, line, field).
    """
    rows = read_points_table(path)
    points, unexpressed = [], []
    for _, group in rows.groupby(["system", "model", "scenario"], sort=True):
        headline = _headline_row(group)
        if headline is None:
            first = group.iloc[0]
            unexpressed.append({**_summary(first), "reason": f"no headline metric (have: "
                                f"{', '.join(sorted(set(group['metric'])))})"})
            continue
        reason = _unexpressed_reason(headline)
        if reason:
            unexpressed.append({**_summary(headline), "reason": reason})
        else:
            points.append(_point(headline))
    return _dedupe(points), pd.DataFrame(unexpressed, columns=[*_SUMMARY, "reason"])


_SUMMARY = ("system", "mlperf_accelerator", "count", "benchmark", "scenario", "metric", "measured", "source")


def _summary(row: pd.Series) -> dict:
    return {"system": row["system"], "mlperf_accelerator": row["accelerator"], "count": row["count"],
            "benchmark": row["model"], "scenario": row["scenario"], "metric": row["metric"],
            "measured": float(row["value"]), "source": row["source"]}


def _headline_row(group: pd.DataFrame) -> pd.Series | None:
    first = group.iloc[0]
    fam = family(MODEL_KEYS.get(first["model"], "")) if first["model"] in MODEL_KEYS else (
        "image" if "diffusion" in first["model"] else "llm")
    for metric in HEADLINE_METRICS.get((first["scenario"], fam), ("samples_per_s", "tokens_per_s")):
        hit = group[group["metric"] == metric]
        if not hit.empty:
            return hit.iloc[0]
    return None


def _division(row: pd.Series) -> str:
    return "open" if " open" in row["notes"] or "/open/" in row["source"] or " open/" in row["source"] else "closed"


def _unexpressed_reason(row: pd.Series) -> str:
    if row["scenario"] not in SCENARIOS:
        return f"unsupported scenario {row['scenario']!r} (dcsim expresses Offline and Server)"
    if _division(row) == "open":
        return "open division (modified model or method: pruned, sparse, LCM, GPTQ); not the closed benchmark"
    if row["model"] in UNEXPRESSIBLE_BENCHMARKS:
        return f"missing model: {UNEXPRESSIBLE_BENCHMARKS[row['model']]}"
    if row["model"] not in MODEL_KEYS:
        return f"missing model: benchmark {row['model']!r} has no catalog model"
    if accelerator_key(row["accelerator"]) is None:
        return "unknown accelerator: " + UNKNOWN_ACCELERATORS.get(
            normalise_accelerator(row["accelerator"]), f"{row['accelerator']!r} has no catalog key")
    if _count(row) is None:
        return f"accelerator count {row['count']!r} is not a number"
    if row.get("precision", "") and row["precision"].strip().lower() not in PRECISION_SPELLINGS:
        return (f"precision {row['precision']!r} is not modelled; allowed: "
                f"{', '.join(sorted(PRECISION_SPELLINGS))}")
    return ""


def normalise_accelerator(name: str) -> str:
    """The MLPerf accelerator name without a "Virtualized" prefix and extra spaces."""
    return re.sub(r"^\s*virtuali[sz]ed\s+", "", name.strip(), flags=re.I)


def accelerator_key(name: str) -> str | None:
    """Catalog key of an MLPerf v4.x/v5.x accelerator name, None when not in the catalog."""
    clean = normalise_accelerator(name)
    if clean in ACCELERATOR_KEYS:
        return ACCELERATOR_KEYS[clean]
    if clean in UNKNOWN_ACCELERATORS:
        return None
    for pattern, key in ACCELERATOR_PATTERNS:
        if re.search(pattern, clean, flags=re.I):
            return key
    return None


def _count(row: pd.Series) -> int | None:
    match = re.match(r"\s*(\d+)", row["count"])
    return int(match.group(1)) if match else None


def _precision(row: pd.Series) -> str:
    if row.get("precision", "").strip():
        return PRECISION_SPELLINGS[row["precision"].strip().lower()]
    key = accelerator_key(row["accelerator"])
    vendor = "nvidia" if key in ("h100-sxm", "h200", "b200", "gb200") else "amd" if key.startswith("mi") else ""
    return DEFAULT_PRECISION.get((vendor, family(MODEL_KEYS[row["model"]])), "bf16")


def _point(row: pd.Series) -> Point:
    benchmark = row["model"]
    return Point(
        point=f"{row['system']}|{benchmark}|{row['scenario']}",
        system=row["system"], mlperf_accelerator=row["accelerator"],
        accelerator=accelerator_key(row["accelerator"]), count=_count(row),
        benchmark=benchmark, model=MODEL_KEYS[benchmark], scenario=row["scenario"],
        metric=row["metric"], unit=row.get("unit", ""), measured=float(row["value"]),
        precision=_precision(row), division=_division(row), source=row["source"], round=mlperf_round(row),
    )


def _dedupe(points: list[Point]) -> list[Point]:
    """Drop a llama2-70b-99.9 point whose system reports the same value for -99 (one run
    scored against both accuracy targets): it would count the same measurement twice."""
    seen = {(p.system, p.model, p.scenario, p.measured) for p in points if not p.benchmark.endswith("99.9")}
    return [p for p in points if not (p.benchmark.endswith("99.9") and (p.system, p.model, p.scenario, p.measured) in seen)]


def assign_groups(points: list[Point]) -> dict[str, str]:
    """point id -> "calibration" or "held-out" (rule in the module docstring)."""
    groups = {p.point: "held-out" for p in points}
    offline: dict[tuple, list[Point]] = {}
    for p in points:
        if p.scenario == "Offline":
            offline.setdefault((p.accelerator, p.model), []).append(p)
    for members in offline.values():
        for i, p in enumerate(sorted(members, key=lambda q: q.point)):
            if i % 2 == 0:
                groups[p.point] = "calibration"
    return groups


def points_frame(points: list[Point]) -> pd.DataFrame:
    return pd.DataFrame([asdict(p) for p in points], columns=list(POINT_COLUMNS))
