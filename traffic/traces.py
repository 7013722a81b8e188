"""Readers for public LLM-inference request traces.

Two formats are understood:

* ``azure_csv`` -- the Azure LLM inference traces 2023 (``AzureLLMInferenceTrace_conv.csv``
  and ``_code.csv``, github.com/Azure/AzurePublicDataset, Splitwise ISCA 2024): a header
  ``TIMESTAMP,ContextTokens,GeneratedTokens`` and one request per line, ``TIMESTAMP`` as
  ``2023-11-16 18:15:46.6805900`` (7 fractional digits; any ISO 8601 form is accepted).
* ``mooncake_jsonl`` -- the Mooncake FAST'25 traces (github.com/kvcache-ai/Mooncake,
  ``FAST25-release/traces/*.jsonl``): one JSON object per line with ``timestamp`` in
  milliseconds, ``input_length`` and ``output_length``, and ``hash_ids`` (one hash per
  512-token prompt block, read as the rows' prefix keys, :mod:`traffic.prefix`; a row
  without it has none); other keys are ignored.

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
* Timestamps must fall in the years 1970..2199 (:data:`FIRST_YEAR`); Mooncake times are
  at most ten years of milliseconds.

Files are read through :mod:`sim.inputs` (regular UTF-8 files of bounded size, lines
and cells bounded, rows with one field per column, JSON nesting and integers bounded).
Every malformed input raises :class:`sim.errors.TraceError` whose message reads
``file:LINE[:FIELD]: column: what was expected``, with the 1-based line as a text
editor shows it; it never repeats the file's content (a value only when it parsed as a
number), so naming a private file as a trace reveals nothing of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import BeforeValidator

import numpy as np
import pandas as pd

from sim.errors import TraceError
from traffic.prefix import chain_keys
from sim.inputs import CsvTable, file_type, read_csv, read_jsonl, reraised_as, shown_number
from traffic.datasets import is_dataset_ref, resolve_dataset_ref

TraceFormat = Literal["azure_csv", "mooncake_jsonl"]
FilePath = Annotated[Path, BeforeValidator(lambda v: Path(v) if isinstance(v, str) and v else v)]
"""A path field that takes a YAML string even when the scenario is validated strictly."""
TRACE_FORMATS: tuple[str, ...] = get_args(TraceFormat)

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length")
MAX_TRACE_TOKENS = 10_000_000
_TOKEN_EXPECTED = f"an integer token count from 0 to {MAX_TRACE_TOKENS:,}"
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
    prefix_keys: tuple | None = None  # per row (sorted order): its prompt blocks' chain keys (traffic.prefix)
    prefix_key_count: int = 0  # distinct chain keys in prefix_keys: they are 0 .. prefix_key_count - 1

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
    if resolved.exists() and not resolved.is_file():
        raise TraceError(f"{path}: the trace is not a regular file ({file_type(resolved.stat().st_mode)}); "
                         f"give the path of a trace file")
    if not resolved.is_file():
        raise TraceError(
            f"trace file not found: {path} (resolved to {resolved}; relative paths are "
            f"resolved from the current directory {Path.cwd()})"
        )
    return resolved


@lru_cache(maxsize=16)
def _load_cached(path: Path, mtime_ns: int, format: str) -> Trace:
    hashes = None
    if format == "azure_csv":
        times_s, prompt, output, lines = _read_azure_csv(path)
    else:
        times_s, prompt, output, lines, hashes = _read_mooncake_jsonl(path)
    return _build_trace(path, times_s, prompt, output, lines, hashes)


def _build_trace(path: Path, times_s: np.ndarray, prompt: np.ndarray, output: np.ndarray,
                 lines: np.ndarray, hashes: list | None = None) -> Trace:
    order = np.argsort(times_s, kind="stable")
    times_s = times_s[order]
    arrays = (times_s - times_s[0], prompt[order].astype(np.int64), output[order].astype(np.int64),
              lines[order].astype(np.int64))
    for array in arrays:
        array.setflags(write=False)
    keys = None
    table: dict = {}
    if hashes is not None:
        keys = tuple(chain_keys(hashes[i], table) for i in order.tolist())
    return Trace(*arrays[:3], source_path=path, source_line=arrays[3], prefix_keys=keys,
                 prefix_key_count=len(table))


# --- Azure CSV -------------------------------------------------------------------------

FIRST_YEAR, LAST_YEAR = 1970, 2200
"""Timestamps must fall in [1970, 2200): a year-0001 row would stretch the trace over two
thousand years and replay nothing but itself."""


def _read_azure_csv(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    with reraised_as(TraceError):
        table = read_csv(path, "trace", AZURE_COLUMNS, blank="refuse")
        if table.rows == 0:
            raise TraceError(f"{path}:2: no data rows after the header; expected one request per line")
        times_s = _seconds(table, "TIMESTAMP", _azure_stamps(table))
        prompt = table.numbers("ContextTokens", _TOKEN_EXPECTED, integer=True, high=MAX_TRACE_TOKENS)
        output = table.numbers("GeneratedTokens", _TOKEN_EXPECTED, integer=True, high=MAX_TRACE_TOKENS)
    return times_s, prompt, output, table.lines


def _azure_stamps(table: CsvTable) -> pd.Series:
    """Timestamps, all naive or all with a UTC offset (see module docstring).

    Raises:
        TraceError: at the first row that is not a timestamp, mixes the two forms, or
            falls outside [FIRST_YEAR, LAST_YEAR)."""
    column = pd.Series(table.columns["TIMESTAMP"], dtype=object)
    aware = column.str.contains(_TZ_SUFFIX, regex=True).to_numpy(dtype=bool)
    kinds = ("without a UTC offset", "with a UTC offset")
    if (aware != aware[0]).any():
        row = int(np.flatnonzero(aware != aware[0])[0])
        raise table.fail(row, "TIMESTAMP", f"the first row has a timestamp {kinds[int(aware[0])]} and this one "
                         f"{kinds[int(not aware[0])]}; use one form for the whole file")
    stamps = _parse_stamps(column, bool(aware[0]))
    return check_stamps(table, "TIMESTAMP", stamps, "a timestamp like 2023-11-16 18:15:46.6805900")


def _parse_stamps(column: pd.Series, utc: bool) -> pd.Series:
    try:
        return pd.to_datetime(column, format="ISO8601", errors="coerce", utc=utc)
    except (ValueError, OverflowError):  # one out-of-bounds stamp fails the vectorised parse
        return pd.Series([pd.to_datetime(t, format="ISO8601", errors="coerce", utc=utc) for t in column])


def check_stamps(table: CsvTable, name: str, stamps: pd.Series, expected: str) -> pd.Series:
    """``stamps`` (one per row of ``table``), every one parsed and in [FIRST_YEAR, LAST_YEAR).

    Raises:
        TraceError: at the first row that is not (the cell is not repeated)."""
    missing = stamps.isna().to_numpy()
    if missing.any():
        raise table.fail(int(np.flatnonzero(missing)[0]), name, f"not a timestamp; expected {expected}")
    years = stamps.dt.year.to_numpy()
    outside = (years < FIRST_YEAR) | (years >= LAST_YEAR)
    if outside.any():
        row = int(np.flatnonzero(outside)[0])
        raise table.fail(row, name, f"year {int(years[row])} is outside {FIRST_YEAR}..{LAST_YEAR - 1}; "
                         f"expected {expected}")
    return stamps


def _seconds(table: CsvTable, name: str, stamps: pd.Series) -> np.ndarray:
    return (stamps - stamps.min()).dt.total_seconds().to_numpy(dtype=np.float64)


# --- Mooncake JSONL --------------------------------------------------------------------


def _read_mooncake_jsonl(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list]:
    rows: list[tuple[float, float, float, int]] = []
    hashes: list[tuple] = []
    with reraised_as(TraceError):
        for line_no, obj in read_jsonl(path, "trace"):
            rows.append((*_mooncake_row(path, line_no, obj), line_no))
            hashes.append(_hash_ids(path, line_no, obj))
    if not rows:
        raise TraceError(
            f"{path}:1: the file has no requests; expected one JSON object per line with "
            f"keys {', '.join(MOONCAKE_FIELDS)}"
        )
    table = np.asarray(rows, dtype=np.float64)
    return table[:, 0] / 1000.0, table[:, 1], table[:, 2], table[:, 3], hashes


MAX_HASH_IDS = MAX_TRACE_TOKENS
"""Most ``hash_ids`` one Mooncake row may list (one per block of at least one token)."""


def _hash_ids(path: Path, line_no: int, obj: dict) -> tuple:
    """A row's ``hash_ids``: a list of non-negative integers (empty when absent)."""
    value = obj.get("hash_ids", [])
    expected = f"a list of at most {MAX_HASH_IDS:,} non-negative integers"
    if not isinstance(value, list) or len(value) > MAX_HASH_IDS:
        raise TraceError(f"{path}:{line_no}: hash_ids: not a list; expected {expected}")
    for h in value:
        if not isinstance(h, int) or isinstance(h, bool) or h < 0:
            raise TraceError(f"{path}:{line_no}: hash_ids: an entry is not a non-negative integer; expected {expected}")
    return tuple(value)


MAX_TIMESTAMP_MS = 10 * 365 * 86400 * 1000
"""Largest Mooncake timestamp (ms after the trace's start: ten years)."""


def _mooncake_row(path: Path, line_no: int, obj: dict) -> tuple[float, float, float]:
    timestamp = _json_number(path, line_no, obj, "timestamp",
                             f"a time in milliseconds from 0 to {MAX_TIMESTAMP_MS:,}", top=MAX_TIMESTAMP_MS)
    prompt = _json_number(path, line_no, obj, "input_length", _TOKEN_EXPECTED, integer=True)
    output = _json_number(path, line_no, obj, "output_length", _TOKEN_EXPECTED, integer=True)
    return timestamp, prompt, output


def _json_number(path: Path, line_no: int, obj: dict, field: str, expected: str, integer: bool = False,
                 top: float = MAX_TRACE_TOKENS) -> float:
    """A JSON field that must be a finite number in [0, top] (whole if ``integer``); the
    value is shown only when it is a number (never a string of the file)."""
    if field not in obj:
        raise TraceError(f"{path}:{line_no}: {field}: missing; expected {expected}")
    value = obj[field]
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TraceError(f"{path}:{line_no}: {field}: not a number; expected {expected}")
    if not (math.isfinite(value) and 0 <= value <= top) or (integer and value != math.floor(value)):
        raise TraceError(f"{path}:{line_no}: {field}: {shown_number(value)} is out of range; expected {expected}")
    return float(value)
