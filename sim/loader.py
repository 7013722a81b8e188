"""Strict YAML loading with limits: the one door every scenario, sweep and plan file
comes through.

``load_yaml(path, what)`` reads a file without ever blocking (a FIFO, ``/dev/zero`` or
any other special file is refused before it is read), parses it with a PyYAML
``SafeLoader`` that refuses what plain ``yaml.safe_load`` silently accepts, and checks
the parsed data against the limits below. ``check_plain_data`` applies the data checks
to a mapping from any origin (sweep overrides, CLI options, tests).

Refused, each with the file, the line and the field path where known:

- a file that is not a regular file, is larger than :data:`MAX_FILE_BYTES`, is not
  UTF-8, or cannot be opened (missing, permission, symlink loop);
- a mapping that repeats a key (naming the key and both lines);
- ``!!set``, ``!!binary``, ``!!omap``, ``!!pairs`` and python tags (sets silently became
  lists of keys);
- nesting deeper than :data:`MAX_DEPTH`, recursive aliases, and alias expansion
  ("billion laughs") to more than :data:`MAX_NODES` values;
- integers with more than :data:`MAX_INT_DIGITS` digits or outside the int64 range
  (a 5,000-digit integer would otherwise hit Python's int-parsing limit), and
  non-finite floats (``.inf``, ``.nan``) anywhere: no field of a scenario accepts them.
"""

from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sim.errors import ScenarioError
from traffic.datasets import is_dataset_ref

MAX_FILE_BYTES = 2_000_000
"""Largest scenario/sweep/plan file read (bytes); real ones are a few kB."""
MAX_DEPTH = 40
"""Deepest nesting of mappings and lists accepted."""
MAX_NODES = 200_000
"""Most values a file may hold once YAML aliases are expanded."""
MAX_INT_DIGITS = 19
"""Most digits of an int64 (literals longer than this are refused without being parsed)."""
INT64_MAX = 2**63 - 1

_REFUSED_TAGS = {
    "tag:yaml.org,2002:set": "a set (!!set) is not allowed; write a list [a, b] instead",
    "tag:yaml.org,2002:binary": "binary data (!!binary) is not allowed",
    "tag:yaml.org,2002:omap": "an ordered map (!!omap) is not allowed; write a plain mapping",
    "tag:yaml.org,2002:pairs": "pairs (!!pairs) are not allowed; write a plain mapping",
}


@dataclass
class LoadedYaml:
    """Parsed data and, for every field path (tuple of keys / list indices), the
    1-based line where it starts in ``source``."""

    data: Any
    source: str
    lines: dict[tuple, int] = field(default_factory=dict)
    text: str = ""

    def line_of(self, path: tuple) -> int | None:
        """Line of the deepest prefix of ``path`` that the file spells out."""
        for end in range(len(path), -1, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return None


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, odd tags and oversized integers."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"a mapping key must be a plain value, got {type(key).__name__}",
                        key_node.start_mark) from None
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None,
                        f"duplicate key {key!r}: first on line {first}, again on line "
                        f"{key_node.start_mark.line + 1}; a key may appear once per mapping",
                        key_node.start_mark)
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        text = str(node.value).replace("_", "").lstrip("+-")
        if text.startswith(("0x", "0o", "0b")):
            text = text[2:]
        if len(text.lstrip("0")) > MAX_INT_DIGITS + 1:  # never parsed (Python refuses > 4300 digits)
            return HugeInt(len(text.lstrip("0")))
        return super().construct_yaml_int(node)  # beyond int64: refused by check_plain_data, with its path


class HugeInt(int):
    """Stands for an integer literal too long to parse; holds its digit count."""


def _refuse_tag(loader, node):
    raise yaml.constructor.ConstructorError(
        None, None, _REFUSED_TAGS.get(node.tag, f"tag {node.tag} is not allowed"), node.start_mark)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)
for _tag in _REFUSED_TAGS:
    _StrictLoader.add_constructor(_tag, _refuse_tag)
_StrictLoader.add_constructor(None, _refuse_tag)  # any unknown or python tag


def read_text_file(path: str | Path, what: str) -> str:
    """The UTF-8 text of a regular file of at most :data:`MAX_FILE_BYTES`, read without
    blocking on special files.

    Raises:
        ScenarioError: missing, unreadable, not a regular file, too large, not UTF-8.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise ScenarioError(f"{path}: cannot read {what} file ({err.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ScenarioError(f"{path}: {what} file is not a regular file ({_file_type(info.st_mode)}); "
                                f"give the path of a YAML file")
        if info.st_size > MAX_FILE_BYTES:
            raise ScenarioError(f"{path}: {what} file is {info.st_size:,} bytes; the limit is "
                                f"{MAX_FILE_BYTES:,} bytes")
        with os.fdopen(fd, "rb", closefd=True) as handle:
            fd = -1
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise ScenarioError(f"{path}: cannot read {what} file ({err.strerror})") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(raw) > MAX_FILE_BYTES:
        raise ScenarioError(f"{path}: {what} file is over the limit of {MAX_FILE_BYTES:,} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ScenarioError(f"{path}: not a UTF-8 text file (byte {err.start}: {err.reason})") from None


def _file_type(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


def parse_yaml(text: str, source: str) -> LoadedYaml:
    """Parse YAML ``text`` strictly (see module docstring) and check its data.

    Raises:
        ScenarioError: naming ``source``, the line and column, and the problem.
    """
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}:" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        kind = "YAML error" if isinstance(err, yaml.constructor.ConstructorError) else "YAML syntax error"
        raise ScenarioError(f"{source}:{where} {kind}: {problem}") from None
    except RecursionError:
        raise ScenarioError(f"{source}: YAML nesting is too deep; at most {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()
    loaded = LoadedYaml(data, source, text=text)
    _record_lines(node, (), loaded.lines, 0, set())
    check_plain_data(data, source, loaded)
    return loaded


def load_yaml(path: str | Path, what: str = "scenario") -> LoadedYaml:
    """Read ``path`` with :func:`read_text_file` and parse it with :func:`parse_yaml`."""
    return parse_yaml(read_text_file(path, what), str(path))


def _record_lines(node, path: tuple, lines: dict, depth: int, seen: set) -> None:
    """Line of every path, each node visited once (an alias is not expanded again)."""
    if node is None or depth > MAX_DEPTH or id(node) in seen:
        return
    seen.add(id(node))
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                lines[path + (key_node.value,)] = key_node.start_mark.line + 1
                _record_lines(value_node, path + (key_node.value,), lines, depth + 1, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _record_lines(item, path + (i,), lines, depth + 1, seen)


def dotted(path: tuple) -> str:
    """``("fleets", 0, "pools")`` → ``fleets.0.pools`` (list indices as numbers, the
    form sweep grids and the dashboard use)."""
    return ".".join(str(p) for p in path) or "(top level)"


def check_plain_data(data: Any, source: str, loaded: LoadedYaml | None = None) -> None:
    """Refuse recursive, too deep or too large structures, non-finite floats and
    integers beyond int64, anywhere in ``data``.

    Raises:
        ScenarioError: naming ``source``, the field path (and line when known).
    """
    sizes: dict[int, int] = {}

    def where(path: tuple) -> str:
        line = loaded.line_of(path) if loaded else None
        return f"{source}{f':{line}' if line else ''}: {dotted(path)}"

    def walk(value: Any, path: tuple, active: set) -> int:
        if isinstance(value, bool) or value is None or isinstance(value, str):
            return 1
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ScenarioError(f"{where(path)}: {value} is not a finite number; every number must be finite")
            return 1
        if isinstance(value, HugeInt):
            raise ScenarioError(f"{where(path)}: an integer of {int(value):,} digits is outside the int64 range "
                                f"(|value| <= {INT64_MAX}, {MAX_INT_DIGITS} digits)")
        if isinstance(value, int):
            if abs(value) > INT64_MAX:
                raise ScenarioError(f"{where(path)}: integer with {len(str(abs(value)))} digits is outside "
                                    f"the int64 range (|value| <= {INT64_MAX})")
            return 1
        if not isinstance(value, (dict, list, tuple)):
            return 1
        key = id(value)
        if key in active:
            raise ScenarioError(f"{where(path)}: a recursive YAML alias refers to itself")
        if key in sizes:
            return sizes[key]
        if len(path) >= MAX_DEPTH:
            raise ScenarioError(f"{where(path)}: nesting is deeper than {MAX_DEPTH} levels")
        active.add(key)
        items = value.items() if isinstance(value, dict) else enumerate(value)
        total = 1
        for k, v in items:
            total += walk(v, path + (k,), active)
            if total > MAX_NODES:
                raise ScenarioError(f"{where(path)}: holds more than {MAX_NODES:,} values once YAML "
                                    f"aliases are expanded; is this a YAML alias bomb?")
        active.discard(key)
        sizes[key] = total
        return total

    walk(data, (), set())


# --- which kind of file -------------------------------------------------------------

FILE_KINDS = {  # kind -> (top-level keys only it has, the command that reads it)
    "scenario": ({"workloads"}, "dcsim run SCENARIO"),
    "sweep": ({"base", "grid", "set", "seeds"}, "dcsim sweep SWEEP --out DIR"),
    "plan": ({"demand", "candidates", "growth", "horizon_weeks"}, "dcsim plan PLAN"),
}


def file_kind(data: Any) -> str | None:
    """``"scenario"``, ``"sweep"`` or ``"plan"`` from the top-level keys that only that
    kind of file has (None when no kind's keys are present)."""
    if not isinstance(data, dict):
        return None
    found = [kind for kind, (keys, _) in FILE_KINDS.items() if keys & set(data)]
    return found[0] if len(found) == 1 else None


def check_file_kind(data: Any, source: str, expected: str) -> None:
    """Refuse a file of another kind with the command that reads it, before schema errors.

    Raises:
        ScenarioError: e.g. "this is a sweep file (it has 'base', 'grid'): use dcsim sweep"."""
    kind = file_kind(data)
    if kind is None or kind == expected:
        return
    keys = sorted(FILE_KINDS[kind][0] & set(data))
    raise ScenarioError(f"{source}: this is a {kind} file (it has {', '.join(repr(k) for k in keys)}), "
                        f"not a {expected} file: use {FILE_KINDS[kind][1]}")


# --- paths inside a file ------------------------------------------------------------

def resolve_paths(data: Any, base_dir: str | Path, sections: tuple[str, ...] = ("workloads",)) -> Any:
    """``data`` with every relative ``path:`` (trace files) under ``sections`` resolved
    from ``base_dir``, the directory of the file that names it.

    Backward compatibility: a path that does not exist beside the file but does exist
    relative to the current directory (the rule before) is kept as written. The result
    is normalised (``scenarios/../traffic/data/x`` -> ``traffic/data/x``). An optional
    dataset (``data:NAME``, :mod:`traffic.datasets`) is kept as written: it is resolved
    from the optional-data directory when the trace is read."""
    if not isinstance(data, dict):
        return data
    base_dir = Path(base_dir)
    out = dict(data)
    for section in sections:
        if section in out:
            out[section] = _resolve(out[section], base_dir)
    return out


def _resolve(node: Any, base_dir: Path) -> Any:
    if isinstance(node, list):
        return [_resolve(v, base_dir) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _resolve(v, base_dir) for k, v in node.items()}
    value = out.get("path")
    if is_dataset_ref(value):  # an optional dataset: resolved when read (traffic.datasets)
        return out
    if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
        beside = os.path.normpath(base_dir / value)
        if Path(beside).exists() or not Path(value).exists():
            out["path"] = beside
    return out
