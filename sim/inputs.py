"""The one door every input file comes through: scenario, sweep and plan YAML, traces
(Azure CSV, Mooncake JSONL, genai CSV), calibration points, catalog overlays.

Every reader here gives the same guarantees:

- the file is opened without ever blocking and must be a regular file (a FIFO,
  ``/dev/zero``, a directory or a socket is refused before it is read) of at most the
  size limit of its kind (:data:`LIMITS`; a sparse file is refused by its apparent size);
- it must be UTF-8 text: UTF-16/UTF-32, compressed (gzip, bzip2, xz, zstd, zip),
  binary and 8-bit (Latin-1, Windows-1252) files are refused by name, from their first
  bytes or from the first byte that is not UTF-8;
- lines and cells are bounded (:data:`MAX_LINE_BYTES`, :data:`MAX_CELL_CHARS`), numbers
  must be finite and in the range of their field, and CSV rows must have as many fields
  as the header (ragged rows are refused, never padded with defaults);
- every mistake is an :class:`InputError` naming ``file:LINE[:COLUMN]: field: what was
  expected``, with physical line numbers as an editor shows them (blank lines and quoted
  fields that span lines included);
- **no message ever repeats the content of the file**: not a line, not a header, not a
  cell. A value is shown only when it was parsed as a number (``-3 is below 0``), so
  naming a private file as a trace or an overlay reveals nothing of it.

Readers return plain Python values; the modules that know a file's meaning (traffic,
fleets, studies) check the fields. Nothing here imports above :mod:`sim.errors`.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import math
import os
import re
import stat
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from sim.errors import InputError

MiB = 1 << 20
LIMITS = {  # kind of file -> largest size read (bytes)
    "scenario": 2_000_000, "sweep": 2_000_000, "plan": 2_000_000,
    "trace": 2_000 * MiB,  # traces are streamed; a week of Azure 2024 conversation is ~1 GB
    "calibration points": 50 * MiB, "catalog overlay": 5 * MiB, "catalog": 5 * MiB,
}
"""Largest file read per kind (bytes). Real scenario files are a few kB, the shipped
traces up to 3 MB, the MLPerf points 1 MB."""
MAX_LINE_BYTES = 1 << 20
"""Longest line of a CSV or JSONL file (bytes; the longest shipped is ~2 kB)."""
MAX_CELL_CHARS = 64 << 10
"""Longest CSV cell (characters)."""
MAX_JSON_DEPTH = 20
"""Deepest nesting of one JSON line (a Mooncake row has depth 2)."""
MAX_JSON_INT_DIGITS = 19
"""Most digits of a JSON integer (int64)."""
SNIFF_BYTES = 8192

_MAGIC = (  # first bytes -> what the file is, for a refusal by name
    (codecs.BOM_UTF32_LE, "UTF-32 text"), (codecs.BOM_UTF32_BE, "UTF-32 text"),
    (codecs.BOM_UTF16_LE, "UTF-16 text"), (codecs.BOM_UTF16_BE, "UTF-16 text"),
    (b"\x1f\x8b", "gzip-compressed"), (b"BZh", "bzip2-compressed"), (b"\xfd7zXZ\x00", "xz-compressed"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed"), (b"PK\x03\x04", "a zip archive"), (b"PAR1", "a Parquet file"),
    (b"\x7fELF", "an executable"), (b"%PDF", "a PDF document"),
)


@contextmanager
def reraised_as(kind: type[InputError]) -> Iterator[None]:
    """Turn an :class:`InputError` raised inside into ``kind`` (e.g. a TraceError), message kept."""
    try:
        yield
    except InputError as err:
        if isinstance(err, kind):
            raise
        raise kind(str(err)) from None


def where(source: str | Path, line: int | None = None, column: int | None = None) -> str:
    """``file:LINE:COLUMN`` (line and column 1-based, each only when known)."""
    text = str(source)
    if line:
        text += f":{line}"
        if column:
            text += f":{column}"
    return text


# --- opening and decoding -------------------------------------------------------------

def open_regular(path: str | Path, what: str, limit: int | None = None) -> tuple[int, int]:
    """(file descriptor, size) of ``path`` opened read-only without blocking; the caller
    closes the descriptor.

    Raises:
        InputError: missing, unreadable, not a regular file, or larger than ``limit``
            (default: :data:`LIMITS` of ``what``)."""
    limit = LIMITS.get(what, 2_000_000) if limit is None else limit
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise InputError(f"{path}: cannot read the {what} file ({err.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{path}: the {what} file is not a regular file ({file_type(info.st_mode)})")
        if info.st_size > limit:
            raise InputError(f"{path}: the {what} file is {info.st_size:,} bytes; the limit is {limit:,} bytes")
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def file_type(mode: int) -> str:
    """"a directory", "a FIFO", ... for a file mode that is not a regular file's."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


def sniff(head: bytes, source: str | Path, what: str) -> None:
    """Refuse, by name, a file whose first bytes show it is not UTF-8 text: a byte-order
    mark of UTF-16/32, a compressed or binary format, or NUL bytes (UTF-16 without a
    mark has one in every other byte). A UTF-8 byte-order mark is allowed.

    Raises:
        InputError: naming the file and what it looks like."""
    for magic, name in _MAGIC:
        if head.startswith(magic):
            raise InputError(f"{source}: the {what} file is {name}, not UTF-8 text; "
                             f"{'save it as UTF-8' if 'text' in name else 'give the uncompressed text file'}")
    if b"\x00" in head:
        nuls = head.count(b"\x00")
        name = "UTF-16 text (no byte-order mark)" if nuls >= len(head) // 3 and _alternate_nuls(head) else "binary data"
        raise InputError(f"{source}: the {what} file holds NUL bytes: {name}, not UTF-8 text")


def _alternate_nuls(head: bytes) -> bool:
    even, odd = head[0::2], head[1::2]
    return even.count(b"\x00") > 0.8 * len(even) or odd.count(b"\x00") > 0.8 * len(odd)


def decode_error(source: str | Path, what: str, line: int | None, err: UnicodeDecodeError) -> InputError:
    """The refusal of a byte that is not UTF-8 (a Latin-1 or Windows-1252 file, most likely)."""
    return InputError(f"{where(source, line)}: the {what} file is not UTF-8 text (byte 0x{err.object[err.start]:02x} "
                      f"cannot start a UTF-8 character: Latin-1 or another 8-bit encoding?); save it as UTF-8")


def read_text(path: str | Path, what: str, limit: int | None = None) -> str:
    """The whole UTF-8 text of a small input file (scenario, sweep, plan, overlay),
    checked as the module docstring says (a UTF-8 byte-order mark is dropped).

    Raises:
        InputError: see :func:`open_regular`, :func:`sniff`, :func:`decode_error`."""
    limit = LIMITS.get(what, 2_000_000) if limit is None else limit
    fd, _ = open_regular(path, what, limit)
    try:
        with os.fdopen(fd, "rb", closefd=True) as handle:
            raw = handle.read(limit + 1)  # not the stated size: /proc files state 0
    except OSError as err:
        raise InputError(f"{path}: cannot read the {what} file ({err.strerror})") from None
    if len(raw) > limit:
        raise InputError(f"{path}: the {what} file grew over the limit while being read")
    return _utf8_text(raw, path, what)


def decode_upload(raw: bytes, source: str, what: str, limit: int | None = None) -> str:
    """The UTF-8 text of an uploaded file's bytes (the dashboard), with the checks of
    :func:`read_text` (size, encodings refused by name).

    Raises:
        InputError: naming ``source``; never the content."""
    limit = LIMITS.get(what, 2_000_000) if limit is None else limit
    if len(raw) > limit:
        raise InputError(f"{source}: the {what} file is {len(raw):,} bytes; the limit is {limit:,} bytes")
    return _utf8_text(raw, source, what)


def _utf8_text(raw: bytes, source, what: str) -> str:
    """``raw`` as UTF-8 text without a leading BOM, after :func:`sniff` refused the
    encodings it names.

    Raises:
        InputError: naming ``source`` and the line of the first bad byte; never the content."""
    sniff(raw[:SNIFF_BYTES], source, what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise decode_error(source, what, raw.count(b"\n", 0, err.start) + 1, err) from None
    return text[1:] if text.startswith("\ufeff") else text


class _Lines(io.TextIOBase):
    """A text stream over a binary file, UTF-8 strict, that counts physical lines and
    refuses over-long ones (so a one-line 1 GB file is not read whole)."""

    def __init__(self, handle, source, what: str) -> None:
        self.handle, self.source, self.what, self.line = handle, source, what, 0
        self.decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.first = True

    def readline(self, size: int = -1) -> str:  # the csv module iterates lines
        raw = self.handle.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return ""
        self.line += 1
        if len(raw) > MAX_LINE_BYTES:
            raise InputError(f"{where(self.source, self.line)}: the line is longer than {MAX_LINE_BYTES:,} bytes")
        try:
            text = self.decoder.decode(raw)
        except UnicodeDecodeError as err:
            raise decode_error(self.source, self.what, self.line, err) from None
        if self.first:
            self.first = False
            text = text[1:] if text.startswith("\ufeff") else text
        return text

    def __iter__(self):
        return self

    def __next__(self) -> str:
        line = self.readline()
        if not line:
            raise StopIteration
        return line


def text_lines(path: str | Path, what: str, limit: int | None = None, source: str | None = None
               ) -> Iterator[tuple[int, str]]:
    """(line number, text with its line end) of every line of a large input file
    (traces), read as a stream; checked as the module docstring says.

    Raises:
        InputError: see :func:`open_regular`, :func:`sniff`; a line longer than
            :data:`MAX_LINE_BYTES`; a byte that is not UTF-8 (with its line)."""
    source = str(path) if source is None else source
    fd, _ = open_regular(path, what, limit)
    with os.fdopen(fd, "rb", closefd=True) as handle:
        sniff(handle.read(SNIFF_BYTES), source, what)
        handle.seek(0)
        lines = _Lines(handle, source, what)
        for text in lines:
            yield lines.line, text


# --- CSV -----------------------------------------------------------------------------

@dataclass
class CsvTable:
    """A CSV file read strictly: the header, one list of strings per column (cells with
    surrounding spaces stripped), and the physical line where each data row starts.

    Attributes:
        source: the file as named in messages.
        header: the column names, in file order.
        columns: name -> cells, one per data row.
        lines: int64 shape (rows,), the 1-based line where each row starts.
    """

    source: str
    header: list[str]
    columns: dict[str, list[str]]
    lines: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def rows(self) -> int:
        return int(self.lines.size)

    def column_of(self, name: str) -> int:
        """1-based field number of column ``name`` (for messages)."""
        return self.header.index(name) + 1

    def fail(self, row: int, name: str, message: str) -> InputError:
        """The error of data row ``row`` (0-based) in column ``name``."""
        return InputError(f"{where(self.source, int(self.lines[row]), self.column_of(name))}: {name}: {message}")

    def numbers(self, name: str, expected: str, *, integer: bool = False, low: float = 0.0,
                high: float = math.inf, low_open: bool = False, empty: bool = False) -> np.ndarray:
        """Column ``name`` as float64 (NaN for an empty cell where ``empty`` allows one),
        every value finite, in [low, high] (``low_open``: > low) and whole if ``integer``.

        Raises:
            InputError: at the first bad cell: its line and field, ``expected``, and the
                value only when it parsed as a number."""
        cells = self.columns[name]
        values = np.full(len(cells), np.nan)
        for i, text in enumerate(cells):
            if text == "":
                if not empty:
                    raise self.fail(i, name, f"empty; expected {expected}")
                continue
            value = parse_number(text)
            if value is None:
                raise self.fail(i, name, f"not a number; expected {expected}")
            bad_low = value <= low if low_open else value < low
            if not math.isfinite(value) or bad_low or value > high or (integer and value != math.floor(value)):
                raise self.fail(i, name, f"{shown_number(value)} is out of range; expected {expected}")
            values[i] = value
        return values

    def choices(self, name: str, allowed: tuple[str, ...]) -> list[str]:
        """Column ``name``, every cell one of ``allowed`` (the cell is not repeated when it is not).

        Raises:
            InputError: at the first other cell."""
        accepted = set(allowed)
        for i, text in enumerate(self.columns[name]):
            if text not in accepted:
                raise self.fail(i, name, f"{'empty' if text == '' else 'not an allowed value'}; expected one of "
                                f"{', '.join(allowed)}")
        return self.columns[name]


_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def parse_number(text: str) -> float | None:
    """A decimal number (``12``, ``-3.5``, ``1e6``, at most 400 characters); None for
    anything else (``inf``, ``nan``, hex, words, thousands separators)."""
    text = text.strip()
    if len(text) > 400 or not _NUMBER.fullmatch(text):
        return None
    return float(text)


def shown_number(value: float) -> str:
    """A parsed number as a message shows it (``-3``, ``1e+30``, ``2.5``)."""
    return f"{value:.12g}"


def read_csv(path: str | Path, what: str, required: tuple[str, ...], optional: tuple[str, ...] = (), *,
             extra: str = "ignore", blank: str = "skip", source: str | None = None,
             limit: int | None = None) -> CsvTable:
    """Read a CSV input strictly (module docstring): a header naming every column of
    ``required`` (``optional`` columns may be absent; their cells are then empty), and
    rows with as many fields as the header.

    Args:
        extra: ``"ignore"`` other columns, or ``"refuse"`` them (by position: the name
            is not repeated).
        blank: ``"skip"`` blank lines, or ``"refuse"`` a blank line before the last row
            (a row with every field missing); trailing blank lines are always ignored.
        source: the file as messages name it (default: ``path``).

    Raises:
        InputError: any rule above, naming the file, line, field and what was expected."""
    source = str(path) if source is None else source
    header: list[str] | None = None
    cells: list[list[str]] = []
    lines: list[int] = []
    blank_at: int | None = None
    fd, _ = open_regular(path, what, limit)
    with os.fdopen(fd, "rb", closefd=True) as handle:
        sniff(handle.read(SNIFF_BYTES), source, what)
        handle.seek(0)
        stream = _Lines(handle, source, what)
        reader = csv.reader(stream, strict=True)
        while True:
            start = stream.line + 1
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as err:
                raise InputError(f"{where(source, start)}: not a well-formed CSV row ({_csv_reason(err)}); "
                                 f"quote a field that holds a comma, a quote or a line break") from None
            if not row or all(not c.strip() for c in row) and len(row) <= 1:
                blank_at = blank_at or start
                continue
            if header is None:
                header = _check_header(row, source, what, required, optional, extra)
                if blank == "refuse":
                    blank_at = None
                continue
            if blank == "refuse" and blank_at is not None:
                raise InputError(f"{where(source, blank_at)}: a blank line inside the {what} file (a row with "
                                 f"every field missing); remove it")
            blank_at = None
            if len(row) != len(header):
                raise InputError(f"{where(source, start)}: {len(row)} field(s), but the header has {len(header)}; "
                                 f"every row needs one field per column")
            if any(len(c) > MAX_CELL_CHARS for c in row):
                raise InputError(f"{where(source, start)}: a field is longer than {MAX_CELL_CHARS:,} characters")
            cells.append(row)
            lines.append(start)
    if header is None:
        raise InputError(f"{where(source, 1)}: the {what} file is empty; expected a header naming "
                         f"{', '.join(required)}")
    columns = {name: [row[i].strip() for row in cells] for i, name in enumerate(header)}
    for name in optional:
        columns.setdefault(name, [""] * len(cells))
    return CsvTable(source, header, columns, np.asarray(lines, dtype=np.int64))


def _csv_reason(err: csv.Error) -> str:
    text = str(err)
    if "field larger than field limit" in text:
        return f"a field is longer than {csv.field_size_limit():,} characters"
    if "NUL" in text:
        return "a NUL byte"
    return "an unclosed or misplaced quote" if "quote" in text or "EOF" in text or "delimiter" in text \
        else "unreadable"


def _check_header(row: list[str], source: str, what: str, required: tuple[str, ...], optional: tuple[str, ...],
                  extra: str) -> list[str]:
    header = [c.strip() for c in row]
    if any(len(c) > MAX_CELL_CHARS for c in header):
        raise InputError(f"{where(source, 1)}: a header field is longer than {MAX_CELL_CHARS:,} characters")
    seen: dict[str, int] = {}
    for i, name in enumerate(header, start=1):
        if name in seen and (name in required or name in optional or extra == "refuse"):
            raise InputError(f"{where(source, 1, i)}: the header names column {seen[name]} again "
                             f"(a column may appear once)")
        seen.setdefault(name, i)
    missing = [c for c in required if c not in seen]
    if missing:
        raise InputError(f"{where(source, 1)}: the header of the {what} file lacks the column(s) {', '.join(missing)}; "
                         f"expected a header naming {', '.join(required)}")
    if extra == "refuse":
        known = set(required) | set(optional)
        for i, name in enumerate(header, start=1):
            if name not in known:
                raise InputError(f"{where(source, 1, i)}: header field {i} is not a column of a {what}; "
                                 f"allowed: {', '.join((*required, *optional))}")
    return header


# --- JSON lines ------------------------------------------------------------------------

def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a finite number")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise ValueError(f"an integer of {len(text.lstrip('-')):,} digits is beyond int64")
    return int(text)


def json_depth(text: str) -> int:
    """Deepest nesting of ``[``/``{`` in a JSON text, outside strings (checked before
    parsing, so 100,000 nested brackets are refused without recursion)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def read_jsonl(path: str | Path, what: str, *, source: str | None = None) -> Iterator[tuple[int, dict]]:
    """(line number, object) of every non-blank line of a JSON-lines file, each a JSON
    object of finite numbers, integers within int64, nested at most :data:`MAX_JSON_DEPTH`.

    Raises:
        InputError: ``file:LINE:COLUMN: not valid JSON (reason)``, never the line itself."""
    source = str(path) if source is None else source
    for line_no, text in text_lines(path, what, source=source):
        if not text.strip():
            continue
        if text.count("[") + text.count("{") > MAX_JSON_DEPTH:
            if json_depth(text) > MAX_JSON_DEPTH:
                raise InputError(f"{where(source, line_no)}: JSON nested deeper than {MAX_JSON_DEPTH} levels; "
                                 f"expected one flat JSON object per line")
        try:
            obj = json.loads(text, parse_int=_bounded_int, parse_constant=_refuse_constant)
        except json.JSONDecodeError as err:
            raise InputError(f"{where(source, line_no, err.colno)}: not valid JSON ({err.msg}); "
                             f"expected one JSON object per line") from None
        except (ValueError, RecursionError) as err:
            reason = str(err) if isinstance(err, ValueError) else "nested too deep"
            raise InputError(f"{where(source, line_no)}: not valid JSON ({reason}); expected one JSON object "
                             f"per line") from None
        if not isinstance(obj, dict):
            raise InputError(f"{where(source, line_no)}: a JSON {_JSON_TYPES.get(type(obj), 'value')}; "
                             f"expected one JSON object per line")
        yield line_no, obj
