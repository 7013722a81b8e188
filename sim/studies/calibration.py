"""Published MLPerf Inference results as calibration points for the roofline model.

Reads the results CSVs (one row per system × benchmark × scenario × metric; by default the
precision-bearing MLPerf Inference v4.0/v4.1 file ``calibration_points_with_precision.csv``
and the v5.1 file ``mlperf_v5.1_points.csv``, shipped in ``fleets/data/reference/``, see
NOTICE.md there) and keeps, per system and scenario, the headline metric. Each kept point is
either *expressible* (its accelerator and model map to catalog keys, its scenario is
Offline, Server, Interactive or SingleStream, its precision is one dcsim runs, it is a
closed-division result) or listed in the ``unexpressed`` table with the reason.

A benchmark named ``<name>-interactive-99`` (MLPerf's Interactive variant, run as a Server
scenario with tighter TTFT/TPOT bounds) is read as scenario ``Interactive`` of ``<name>``.
Each point carries its serving stack (:func:`serving_stack`, from the ``software`` column),
so the efficiency fit can separate two stacks measured on one chip.

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
    "NVIDIA L40S": "l40s",
    "NVIDIA L4": "l4",
}
# MLPerf v5.x spellings, matched after :func:`normalise_accelerator` (case-insensitive
# regular expressions, first match wins): B200-SXM-180GB, GB200 (NVL72), MI325X 256GB
# HBM3e, MI355X, H200-NVL-141GB, RTX PRO 6000 Blackwell Server Edition, L4-PCIe-24GB,
# "[MAXSUN] MS-Intel Arc Pro B60 Dual 48G Turbo"; "Virtualized" prefixes are dropped first.
ACCELERATOR_PATTERNS = (
    (r"\bGB300\b", "gb300"),
    (r"\bGB200\b", "gb200"),
    (r"\bB300\b", "b300"),
    (r"\bB200\b", "b200"),
    (r"\bMI325X\b", "mi325x"),
    (r"\bMI355X\b", "mi355x"),
    (r"\bMI350X\b", "mi350x"),
    (r"\bMI300X\b", "mi300x"),
    (r"\bH200-NVL\b|\bH200 NVL\b", "h200-nvl"),
    (r"\bH200\b(?!.*NVL)", "h200"),
    (r"\bH100-SXM\b", "h100-sxm"),
    (r"RTX PRO 6000 Blackwell Server", "rtx-pro-6000-bse"),
    (r"\bL40S\b", "l40s"),
    (r"\bL4\b", "l4"),
    (r"\bArc Pro B60\b", "arc-pro-b60"),
    (r"\bTPU ?v6e?\b|Trillium", "tpu-v6e"),
    (r"\bTPU ?v5e\b", "tpu-v5e"),
)
# Boards that carry more than one accelerator of the catalog: MLPerf counts the board.
# The MAXSUN "Arc Pro B60 Dual 48G" is two B60 GPUs of 24 GB on one card (Intel's v5.1
# system description 1-node-4x-BMG-Pro-B60-Dual: 4 cards, 8 GPUs).
CHIPS_PER_BOARD = ((r"\bArc Pro B60 Dual\b", 2),)
UNKNOWN_ACCELERATORS = {
    "NVIDIA H100-NVL-94GB": "H100 NVL (94 GB, 3.9 TB/s, PCIe card pairs) is not in the catalog",
    "NVIDIA H100-PCIe-80GB": "H100 PCIe (80 GB, 2.0 TB/s, 350 W) is not in the catalog",
    "NVIDIA GH200 Grace Hopper Superchip 144GB": "GH200 144 GB (HBM3e, 4.9 TB/s) is not in the catalog",
    "NVIDIA GH200 Grace Hopper Superchip 96GB": "GH200 96 GB (HBM3, 4.0 TB/s) is not in the catalog",
    "NVIDIA GeForce RTX 4090": "RTX 4090 is not in the catalog",
    "NVIDIA Jetson AGX Orin 64G": "Jetson AGX Orin is not in the catalog",
    "NVIDIA RTX-2000E-Ada-16GB": "RTX 2000E Ada (16 GB edge card) is not in the catalog",
    "Intel Gaudi2": "Gaudi2 is not in the catalog (only Gaudi 3)",
}
# MLPerf benchmark names -> catalog model key. The -99 and -99.9 variants differ only in
# the accuracy target; the same run often serves both. ``-interactive`` variants are the
# Interactive scenario of the same model (:func:`benchmark_and_scenario`).
MODEL_KEYS = {
    "llama2-70b-99": "llama-2-70b",
    "llama2-70b-99.9": "llama-2-70b",
    "mixtral-8x7b": "mixtral-8x7b",
    "stable-diffusion-xl": "sdxl",
    "llama3.1-405b": "llama-3.1-405b",
    "llama3.1-405b-99": "llama-3.1-405b",
    "llama3.1-405b-99.9": "llama-3.1-405b",
    "llama3.1-8b": "llama-3.1-8b",
    "llama3.1-8b-99": "llama-3.1-8b",
    "llama3.1-8b-99.9": "llama-3.1-8b",
    "deepseek-r1": "deepseek-r1",
    "gpt-oss-120b": "gpt-oss-120b",
    "wan-2.2-t2v-a14b": "wan2.2-t2v-a14b",
    # models of vendor throughput tables (trtllm_perf_overview.csv)
    "llama3.3-70b": "llama-3.3-70b",
    "llama4-scout": "llama-4-scout",
    "llama4-maverick": "llama-4-maverick",
    "qwen3-235b-a22b": "qwen3-235b-a22b",
}
# Spellings of the ``precision`` column -> dcsim precision. INT8 runs at the FP8 tensor
# rate and stores 1 byte per value on every catalog chip that has an FP8 peak (NVIDIA H100/
# H200/L40S/L4 and AMD MI300X/MI325X datasheets list equal INT8 TOPS and FP8 TFLOPS), so an
# INT8 UNet (AMD's SDXL) is costed as FP8.
PRECISION_SPELLINGS = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "e4m3": "fp8", "fp8_e4m3": "fp8",
                       "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4", "int8": "fp8"}
# Weight/activation pairs dcsim cannot express with one precision per pool, with the reason.
UNEXPRESSIBLE_PRECISIONS = {
    ("int4", "fp16"): "int4 weights with fp16 activations (W4A16) are not expressible: dcsim runs a "
                      "pool's weights and linear-layer math at one precision",
}
SCENARIOS = ("Offline", "Server", "Interactive", "SingleStream")
# Headline metric per scenario and benchmark family, in order of preference. Server LLM
# results report completed tokens/s (v4.1 headline); SDXL v4.0 reported scheduled samples/s.
# SingleStream reports the 90th-percentile latency of one query (ns in the logs).
HEADLINE_METRICS = {
    ("Offline", "llm"): ("tokens_per_s",),
    ("Server", "llm"): ("completed_tokens_per_s",),
    ("Interactive", "llm"): ("completed_tokens_per_s",),
    ("Offline", "image"): ("samples_per_s",),
    ("Server", "image"): ("completed_samples_per_s", "scheduled_samples_per_s"),
    ("Offline", "video"): ("samples_per_s",),
    ("SingleStream", "llm"): ("latency_p90_s", "latency_p90_ns"),
    ("SingleStream", "image"): ("latency_p90_s", "latency_p90_ns"),
    ("SingleStream", "video"): ("latency_p90_s", "latency_p90_ns"),
}
LATENCY_METRIC_SCALE = {"latency_p90_s": 1.0, "latency_p90_ns": 1e-9}  # -> seconds
# Precision when the ``precision`` column is empty (the original v4.x file). ASSUMED, per
# vendor and benchmark family: NVIDIA (TensorRT-LLM) and AMD (vLLM ROCm) closed LLM
# submissions quantise weights and KV cache to FP8; everything else bf16. The
# precision-bearing files (the default) name each row's precision instead.
DEFAULT_PRECISION = {("nvidia", "llm"): "fp8", ("amd", "llm"): "fp8"}
# Serving stack from the ``software`` column (first match wins; case-insensitive).
STACKS = (
    (r"shark", "shark"), (r"thestage", "thestage"), (r"sglang", "sglang"), (r"vllm", "vllm"),
    (r"tensorrt|cuda", "tensorrt"), (r"flax|jax|xla", "xla"), (r"pytorch", "pytorch"),
)
POINT_COLUMNS = ("point", "system", "mlperf_accelerator", "accelerator", "count", "benchmark", "model",
                 "scenario", "metric", "unit", "measured", "precision", "division", "source", "round", "stack",
                 "origin", "input_tokens", "output_tokens", "tp")
# A row of a vendor throughput table (notes start with this) rather than an MLPerf result.
VENDOR_NOTE = "vendor max-throughput table"


@dataclass(frozen=True, slots=True)
class Point:
    """One published result that dcsim can simulate. ``measured`` is in ``unit`` (tokens/s
    for LLMs, samples/s for SDXL, seconds of 90th-percentile latency for SingleStream), for
    the whole system of ``count`` chips; ``stack`` the serving software (:data:`STACKS`)."""

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
    stack: str = ""  # serving stack from the ``software`` column ("tensorrt", "vllm", ...); "" unknown
    origin: str = "mlperf"  # "mlperf" (an MLPerf result) or "vendor" (a vendor's own throughput table)
    input_tokens: int = 0  # fixed prompt length of a vendor-table row; 0: the benchmark's dataset
    output_tokens: int = 0  # fixed output length of a vendor-table row; 0: the benchmark's dataset
    tp: int = 0  # tensor parallelism the row states; 0: dcsim chooses (sim.studies.mlperf.choose_layout)

    @property
    def is_latency(self) -> bool:
        """True when ``measured`` is a latency (lower is better), not a throughput."""
        return self.scenario == "SingleStream"


def mlperf_round(row) -> str:
    """The MLPerf Inference round of a calibration row: "v4.1" from its notes ("MLPerf
    Inference v4.1 closed; ...") or, failing that, its source
    ("github.com/mlcommons/inference_results_v4.0 ..."); "" when neither names one
    (e.g. a user's own measurements)."""
    found = re.search(r"MLPerf Inference (v\d+(?:\.\d+)*)", str(row.get("notes", ""))) or \
        re.search(r"inference_results_(v\d+(?:\.\d+)*)", str(row.get("source", "")))
    return found.group(1) if found else ""


def family(model_key: str) -> str:
    """"image" for SDXL, "video" for the video DiTs, "llm" for the language models."""
    if model_key == "sdxl":
        return "image"
    return "video" if model_key.startswith("wan") else "llm"


POINTS_REQUIRED = ("system", "accelerator", "count", "model", "scenario", "metric", "value", "source")
POINTS_OPTIONAL = ("unit", "precision", "activation_precision", "notes", "software", "input_tokens",
                   "output_tokens", "tp", "pp")
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


def serving_stack(software: str) -> str:
    """The serving stack of a ``software`` cell ("TensorRT 10.11, CUDA 12.9" -> "tensorrt",
    "vLLM 0.10.0" -> "vllm"); "" when none of :data:`STACKS` matches."""
    for pattern, stack in STACKS:
        if re.search(pattern, software or "", flags=re.I):
            return stack
    return ""


def benchmark_and_scenario(benchmark: str, scenario: str) -> tuple[str, str]:
    """(benchmark without the interactive tag, scenario): MLPerf publishes the Interactive
    variant as benchmark ``llama2-70b-interactive-99`` run in scenario Server."""
    if "-interactive" in benchmark:
        return benchmark.replace("-interactive", ""), "Interactive"
    return benchmark, scenario


def read_points(paths) -> tuple[list[Point], pd.DataFrame]:
    """(expressible points, unexpressed table with a ``reason`` column) from one CSV or a
    sequence of them (read in order by :func:`read_points_table`; extra columns ignored).

    Raises:
        UserError: a file is missing, unreadable or malformed (file, line, field).
    """
    frames = [_read_file(Path(p)) for p in ([paths] if isinstance(paths, (str, Path)) else paths)]
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
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


def _read_file(path: Path) -> pd.DataFrame:
    """One points file (:func:`read_points_table`), the Interactive tag moved from the
    benchmark name to the scenario (:func:`benchmark_and_scenario`)."""
    rows = read_points_table(path)
    tagged = [benchmark_and_scenario(b, sc) for b, sc in zip(rows["model"], rows["scenario"])]
    rows["benchmark_name"] = rows["model"]
    rows["model"] = [b for b, _ in tagged]
    rows["scenario"] = [sc for _, sc in tagged]
    return rows


_SUMMARY = ("system", "mlperf_accelerator", "count", "benchmark", "scenario", "metric", "measured", "source")


def _summary(row: pd.Series) -> dict:
    return {"system": row["system"], "mlperf_accelerator": row["accelerator"], "count": row["count"],
            "benchmark": row["benchmark_name"], "scenario": row["scenario"], "metric": row["metric"],
            "measured": float(row["value"]), "source": row["source"]}


def _headline_row(group: pd.DataFrame) -> pd.Series | None:
    first = group.iloc[0]
    fam = family(MODEL_KEYS.get(first["model"], "")) if first["model"] in MODEL_KEYS else (
        "image" if "diffusion" in first["model"] else "video" if "video" in first["model"] else "llm")
    for metric in HEADLINE_METRICS.get((first["scenario"], fam), ("samples_per_s", "tokens_per_s")):
        hit = group[group["metric"] == metric]
        if not hit.empty:
            return hit.iloc[0]
    return None


def _division(row: pd.Series) -> str:
    return "open" if " open" in row["notes"] or "/open/" in row["source"] or " open/" in row["source"] else "closed"


def _unexpressed_reason(row: pd.Series) -> str:
    if row["scenario"] not in SCENARIOS:
        return f"unsupported scenario {row['scenario']!r} (dcsim expresses {', '.join(SCENARIOS)})"
    if _division(row) == "open":
        return ("open division: the submitter may change the model or method (quantisation scheme, pruning, "
                "sparsity, fewer steps), so the result is not the closed benchmark's workload")
    if row["model"] not in MODEL_KEYS:
        return f"missing model: benchmark {row['model']!r} has no catalog model"
    if accelerator_key(row["accelerator"]) is None:
        return "unknown accelerator: " + UNKNOWN_ACCELERATORS.get(
            normalise_accelerator(row["accelerator"]), f"{row['accelerator']!r} has no catalog key")
    if _count(row) is None:
        return f"accelerator count {row['count']!r} is not a number"
    return _precision_reason(row) or _layout_reason(row)


def _layout_reason(row: pd.Series) -> str:
    """A vendor row whose stated layout dcsim cannot run as stated."""
    if _int(row.get("pp", "")) > 1:
        return ("pipeline parallelism with in-flight micro-batches (pp > 1) is not modelled: dcsim runs a "
                "replica's stages one after another")
    if _int(row.get("tp", "")) > 1 and MODEL_KEYS[row["model"]] in MOE_MODEL_KEYS:
        return "a mixture of experts over tp > 1 with an unstated expert-parallel size and attention data parallelism"
    chunk = CHUNKED_ATTENTION_TOKENS.get(MODEL_KEYS[row["model"]])
    if chunk and _int(row.get("input_tokens", "")) + _int(row.get("output_tokens", "")) > chunk:
        return (f"context beyond the model's {chunk:,}-token attention chunk: dcsim counts chunked layers as global "
                "there (an upper bound on their KV and attention, fleets.catalog.Model.kv_bytes_per_token)")
    return ""


def _int(text: str) -> int:
    return int(float(text)) if str(text).strip() else 0


# Chunked-attention models (Llama 4: attention_chunk_size 8192, models.csv).
CHUNKED_ATTENTION_TOKENS = {"llama-4-scout": 8192, "llama-4-maverick": 8192}
# MoE catalog models (their vendor rows at tp > 1 ran an unstated EP layout).
MOE_MODEL_KEYS = ("mixtral-8x7b", "deepseek-r1", "gpt-oss-120b", "llama-4-scout", "llama-4-maverick", "qwen3-235b-a22b")


def _precision_reason(row: pd.Series) -> str:
    weights = row.get("precision", "").strip().lower()
    activations = row.get("activation_precision", "").strip().lower()
    if (weights, activations) in UNEXPRESSIBLE_PRECISIONS:
        return UNEXPRESSIBLE_PRECISIONS[(weights, activations)]
    if weights and weights not in PRECISION_SPELLINGS:
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


def chips_per_board(name: str) -> int:
    """Catalog accelerators on one MLPerf-counted board (:data:`CHIPS_PER_BOARD`; else 1)."""
    for pattern, chips in CHIPS_PER_BOARD:
        if re.search(pattern, name, flags=re.I):
            return chips
    return 1


def _count(row: pd.Series) -> int | None:
    match = re.match(r"\s*(\d+)", row["count"])
    return int(match.group(1)) * chips_per_board(row["accelerator"]) if match else None


def _precision(row: pd.Series) -> str:
    if row.get("precision", "").strip():
        return PRECISION_SPELLINGS[row["precision"].strip().lower()]
    key = accelerator_key(row["accelerator"])
    vendor = "nvidia" if key in ("h100-sxm", "h200", "b200", "gb200") else "amd" if key.startswith("mi") else ""
    return DEFAULT_PRECISION.get((vendor, family(MODEL_KEYS[row["model"]])), "bf16")


def _measured(row: pd.Series) -> float:
    """The headline value in the point's unit (a SingleStream latency in seconds)."""
    return float(row["value"]) * LATENCY_METRIC_SCALE.get(row["metric"], 1.0)


def _point(row: pd.Series) -> Point:
    benchmark = row["benchmark_name"]
    return Point(
        point=f"{row['system']}|{benchmark}|{row['scenario']}",
        system=row["system"], mlperf_accelerator=row["accelerator"],
        accelerator=accelerator_key(row["accelerator"]), count=_count(row),
        benchmark=benchmark, model=MODEL_KEYS[row["model"]], scenario=row["scenario"],
        metric=row["metric"], unit="s" if row["scenario"] == "SingleStream" else row.get("unit", ""),
        measured=_measured(row), precision=_precision(row), division=_division(row), source=row["source"],
        round=mlperf_round(row), stack=serving_stack(row.get("software", "")),
        origin="vendor" if row["notes"].startswith(VENDOR_NOTE) else "mlperf",
        input_tokens=_int(row["input_tokens"]), output_tokens=_int(row["output_tokens"]), tp=_int(row["tp"]),
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
