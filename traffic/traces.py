"""Readers for public LLM-inference request traces.

Two formats are understood:

* ``azure_csv`` -- the Azure LLM inference traces 2023 (``AzureLLMInferenceTrace_conv.csv``
  and ``_code.csv``, github.com/Azure/AzurePublicDataset, Splitwise ISCA 2024): a header
  ``TIMESTAMP,ContextTokens,GeneratedTokens`` and one request per line, ``TIMESTAMP`` as
  ``2023-11-16 18:15:46.6805900`` (7 fractional digits; any ISO 8601 form is accepted).
* ``mooncake_jsonl`` -- the Mooncake FAST'25 traces (github.com/kvcache-ai/Mooncake,
  ``FAST25-release/traces/*.jsonl``): one JSON object per line with ``timestamp`` in
  milliseconds, ``input_length`` and ``output_length``; other keys (``hash_ids``) are ignored.

Decisions (documented here because real data does not force them):

* Rows out of time order are sorted stably by time (the real files are already sorted);
  the token counts move with their row, and errors found later still name the row's own
  line. NaN, unparsable or negative times are rejected.
* Azure timestamps are either all naive (local time of the trace, as in the real files)
  or all carry a UTC offset (``Z`` or ``+01:00``; compared in UTC). A file that mixes the
  two is refused at the first row that differs, since the gap between them is unknown.
* Token counts must be integers from 0 to :data:`MAX_TRACE_TOKENS` (larger values would
  overflow the engine's int64 token arithmetic). Zero is accepted and kept as read (the 2023
  Azure and Mooncake files have none: conv min 2/7, code min 3/6, Mooncake min 891/1, all
  checked 2026-11-21 on the files now in traffic/data); consumers that need at least one
  token clamp it (see ``traffic.arrivals.TraceArrivals.lengths``).
* Blank lines in JSONL are skipped; a blank line inside a CSV is an error (it is a row
  with every field missing); trailing blank lines are ignored in both.

Every malformed input raises :class:`sim.errors.TraceError` whose message names the file,
the 1-based line number as a text editor shows it, the field, the bad value and what is
expected.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import BeforeValidator

import numpy as np
import pandas as pd

from sim.errors import TraceError
from traffic.datasets import is_dataset_ref, resolve_dataset_ref

TraceFormat = Literal["azure_csv", "mooncake_jsonl"]
FilePath = Annotated[Path, BeforeValidator(lambda v: Path(v) if isinstance(v, str) and v else v)]
"""A path field that takes a YAML string even when the scenario is validated strictly."""
TRACE_FORMATS: tuple[str, ...] = get_args(TraceFormat)

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length")
MAX_TRACE_TOKENS = 10_000_000
_TOKEN_EXPECTED = f"expected an integer token count from 0 to {MAX_TRACE_TOKENS:,}"
_TZ_SUFFIX = r"(?:Z|[+-]\d\d:?\d\d)\s*$"


@dataclass(frozen=True, slots=True)
class Trace:
    """A request trace, sorted by arrival time.

    Attributes:
        arrival_s: float64, shape (rows,), seconds after the first request (first is 0).
        prompt_tokens: int64, shape (rows,), prompt (context/input) tokens per request.
        output_tokens: int64, shape (rows,), generated (output) tokens per request.
        source_path: the resolved path the trace was read from.

    The arrays are read-only: traces are cached and shared between callers.
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    source_path: Path
    source_line: np.ndarray | None = None

    def describe_row(self, i: int) -> str:
        """``line N`` of row ``i`` (after sorting) in the file, for error messages."""
        if self.source_line is None:
            return f"row {i + 1}"
        return f"line {int(self.source_line[i])}"

    @property
    def rows(self) -> int:
        """Number of requests."""
        return int(self.arrival_s.size)

    @property
    def span_s(self) -> float:
        """Seconds from the first to the last request (0 for a one-row trace)."""
        return float(self.arrival_s[-1])

    @property
    def mean_rate_per_s(self) -> float:
        """rows / span_s, the convention of traffic/data/trace_summary.csv."""
        return self.rows / self.span_s if self.span_s > 0 else math.inf


def load_trace(path: str | Path, format: str) -> Trace:
    """Read a trace file; relative paths are resolved from the current directory.

    Args:
        path: the trace file.
        format: ``"azure_csv"`` or ``"mooncake_jsonl"``.

    Returns:
        A :class:`Trace`, cached by (resolved path, modification time, format), so a
        file rewritten on disk is read again.

    Raises:
        TraceError: unknown format, missing file, or malformed content (see module doc).
    """
    if format not in TRACE_FORMATS:
        raise TraceError(f"{path}: trace format {format!r} is not one of {list(TRACE_FORMATS)}")
    resolved = resolve_trace_file(path)
    return _load_cached(resolved, resolved.stat().st_mtime_ns, format)


def resolve_trace_file(path: str | Path) -> Path:
    """The absolute, symlink-free path of the trace file ``path`` (``~`` expanded,
    relative to the current directory), shared by every trace reader. ``data:NAME``
    names an optional dataset in the optional-data directory (:mod:`traffic.datasets`).

    Raises:
        TraceError: the path cannot be resolved (a symlink loop) or is not a file; an
            optional dataset is unknown, missing or not the published file."""
    if is_dataset_ref(path):
        return resolve_dataset_ref(path)
    try:
        resolved = Path(path).expanduser().resolve()
    except (OSError, RuntimeError) as err:  # a symlink loop
        raise TraceError(f"{path}: cannot resolve the trace path ({err})") from None
    if not resolved.is_file():
        raise TraceError(
            f"trace file not found: {path} (resolved to {resolved}; relative paths are "
            f"resolved from the current directory {Path.cwd()})"
        )
    return resolved


@lru_cache(maxsize=16)
def _load_cached(path: Path, mtime_ns: int, format: str) -> Trace:
    if format == "azure_csv":
        times_s, prompt, output, lines = _read_azure_csv(path)
    else:
        times_s, prompt, output, lines = _read_mooncake_jsonl(path)
    return _build_trace(path, times_s, prompt, output, lines)


def _build_trace(path: Path, times_s: np.ndarray, prompt: np.ndarray, output: np.ndarray,
                 lines: np.ndarray) -> Trace:
    order = np.argsort(times_s, kind="stable")
    times_s = times_s[order]
    arrays = (times_s - times_s[0], prompt[order].astype(np.int64), output[order].astype(np.int64),
              lines[order].astype(np.int64))
    for array in arrays:
        array.setflags(write=False)
    return Trace(*arrays[:3], source_path=path, source_line=arrays[3])


def _error(path: Path, line: int, field: str, value: object, expected: str, column: int | None = None) -> TraceError:
    col = f", column {column}" if column else ""
    return TraceError(f"{path}: line {line}{col}: field {field!r} has value {value!r}; {expected}")


# --- Azure CSV -------------------------------------------------------------------------


def _read_azure_csv(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    frame = _read_csv_frame(path)
    missing = [c for c in AZURE_COLUMNS if c not in frame.columns]
    if missing:
        raise TraceError(
            f"{path}: line 1: header is missing column(s) {missing}; found {list(frame.columns)}, "
            f"expected {','.join(AZURE_COLUMNS)}"
        )
    frame = _drop_trailing_blank_rows(frame)
    if frame.empty:
        raise TraceError(f"{path}: line 2: no data rows after the header; expected one request per line")
    stamps = _azure_stamps(path, frame)
    times_s = (stamps - stamps.min()).dt.total_seconds().to_numpy(dtype=np.float64)
    prompt = _azure_tokens(path, frame["ContextTokens"], frame)
    output = _azure_tokens(path, frame["GeneratedTokens"], frame)
    return times_s, prompt, output, np.arange(len(frame), dtype=np.int64) + 2


def _azure_stamps(path: Path, frame: pd.DataFrame) -> pd.Series:
    """Timestamps, all naive or all with a UTC offset (see module docstring)."""
    column = frame["TIMESTAMP"]
    aware = column.str.contains(_TZ_SUFFIX, regex=True).to_numpy()
    mixed = aware != aware[0]
    kinds = ("without a UTC offset", "with a UTC offset")
    _check_column(path, column, mixed, f"row 1 has a timestamp {kinds[int(aware[0])]} and this one "
                  f"{kinds[int(not aware[0])]}; use one form for the whole file", frame)
    try:
        stamps = pd.to_datetime(column, format="ISO8601", errors="coerce", utc=bool(aware[0]))
    except (ValueError, OverflowError):
        stamps = pd.Series([pd.NaT] * len(column))
        for i, text in enumerate(column):
            try:
                stamps.iloc[i] = pd.to_datetime(text, format="ISO8601", utc=bool(aware[0]))
            except (ValueError, OverflowError):
                break
    _check_column(path, column, stamps.isna().to_numpy(), "a timestamp like 2023-11-16 18:15:46.6805900", frame)
    return stamps


def _read_csv_frame(path: Path) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skip_blank_lines=False)
    except pd.errors.EmptyDataError:
        raise TraceError(f"{path}: line 1: file is empty; expected the header {','.join(AZURE_COLUMNS)}") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: not a readable CSV ({exc}); expected {','.join(AZURE_COLUMNS)} rows") from None
    return frame.fillna("")


def _drop_trailing_blank_rows(frame: pd.DataFrame) -> pd.DataFrame:
    filled = (frame.to_numpy() != "").any(axis=1)
    last = np.flatnonzero(filled)
    return frame.iloc[: last[-1] + 1] if last.size else frame.iloc[:0]


def _azure_tokens(path: Path, column: pd.Series, frame: pd.DataFrame) -> np.ndarray:
    values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values) | (values < 0) | (values != np.floor(values)) | (values > MAX_TRACE_TOKENS)
    _check_column(path, column, bad, _TOKEN_EXPECTED, frame)
    return values.astype(np.int64)


def _check_column(path: Path, column: pd.Series, bad: np.ndarray, expected: str, frame: pd.DataFrame) -> None:
    """Raise for the first bad row; data row i (0-based) is on line i + 2 (header is line 1)."""
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        col = list(frame.columns).index(column.name) + 1
        raise _error(path, i + 2, str(column.name), column.iloc[i], expected, col)


# --- Mooncake JSONL --------------------------------------------------------------------


def _read_mooncake_jsonl(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows: list[tuple[float, float, float, int]] = []
    with path.open("r", encoding="utf-8", errors="replace") as handle:
        for line_no, text in enumerate(handle, start=1):
            if text.strip():
                rows.append((*_mooncake_row(path, line_no, text), line_no))
    if not rows:
        raise TraceError(
            f"{path}: line 1: file has no requests; expected one JSON object per line with "
            f"keys {list(MOONCAKE_FIELDS)}"
        )
    table = np.asarray(rows, dtype=np.float64)
    return table[:, 0] / 1000.0, table[:, 1], table[:, 2], table[:, 3]


def _mooncake_row(path: Path, line_no: int, text: str) -> tuple[float, float, float]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        expected = f"not valid JSON ({exc.msg}); expected one object per line"
        raise _error(path, line_no, "<line>", text.strip()[:80], expected) from None
    if not isinstance(obj, dict):
        expected = f"expected a JSON object with keys {list(MOONCAKE_FIELDS)}"
        raise _error(path, line_no, "<line>", text.strip()[:80], expected)
    timestamp = _json_number(path, line_no, obj, "timestamp", "expected a non-negative time in milliseconds")
    prompt = _json_number(path, line_no, obj, "input_length", _TOKEN_EXPECTED, integer=True)
    output = _json_number(path, line_no, obj, "output_length", _TOKEN_EXPECTED, integer=True)
    return timestamp, prompt, output


def _json_number(path: Path, line_no: int, obj: dict, field: str, expected: str, integer: bool = False) -> float:
    if field not in obj:
        raise TraceError(f"{path}: line {line_no}: field {field!r} is missing; {expected}")
    value = obj[field]
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    if not ok or (integer and (value != math.floor(value) or value > MAX_TRACE_TOKENS)):
        raise _error(path, line_no, field, value, expected)
    return float(value)
