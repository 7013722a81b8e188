"""Strict YAML loading with limits: the one door every scenario, sweep and plan file
comes through.

``load_yaml(path, what)`` reads a file through :func:`sim.inputs.read_text` (a regular,
bounded UTF-8 file, read without ever blocking; UTF-16, compressed, binary and 8-bit
files refused by name), parses it with a PyYAML ``SafeLoader`` that refuses what plain
``yaml.safe_load`` silently accepts, and checks the parsed data against the limits
below. ``check_plain_data`` applies the data checks to a mapping from any origin (sweep
overrides, CLI options, tests).

Plain scalars are resolved by the **YAML 1.2 core schema**, not PyYAML's YAML 1.1 rules:
``1e10`` and ``11.7e6`` are numbers; ``true``/``false`` are the only booleans (``on``,
``off``, ``yes``, ``no`` are words, so ``stream: off`` is the word off); ``0o17`` and
``0x1f`` are octal and hex integers, ``0777`` is 777; ``1_000`` and ``1:30`` are
strings; dates such as ``2024-02-30`` stay strings (a field that takes a date parses
it, and says so when it is not a date).

Refused, each with the file, the line and the field path where known:

- a file that is not a regular file, is larger than :data:`MAX_FILE_BYTES`, is not
  UTF-8, or cannot be opened (missing, permission, symlink loop);
- a mapping that repeats a key (naming both lines);
- ``!!set``, ``!!binary``, ``!!omap``, ``!!pairs`` and python or unknown tags (sets
  silently became lists of keys), and a value that its explicit tag cannot read
  (``!!int abc``, ``!!timestamp 2024-02-30``);
- nesting deeper than :data:`MAX_DEPTH`, recursive aliases, and alias expansion
  ("billion laughs") to more than :data:`MAX_NODES` values;
- integers with more than :data:`MAX_INT_DIGITS` digits or outside the int64 range
  (a 5,000-digit integer would otherwise hit Python's int-parsing limit), and
  non-finite floats (``.inf``, ``.nan``) anywhere: no field of a scenario accepts them.

A file that does not parse is never quoted in a message: syntax errors give the line,
the column and the kind of problem, without the text found there (PyYAML's own messages
are stripped of it), and a mapping whose top-level keys are none of the expected
kind's is refused without listing them (:func:`check_file_kind`), so naming a private
file as a scenario, a sweep base or a plan reveals nothing of it.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sim.errors import InputError, ScenarioError
from sim.inputs import LIMITS, read_text
from traffic.datasets import is_dataset_ref

MAX_FILE_BYTES = LIMITS["scenario"]
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
    """SafeLoader with the YAML 1.2 core schema (module docstring) that refuses duplicate
    keys, odd tags and oversized integers."""

    yaml_implicit_resolvers: dict = {}

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
                        None, None, "a mapping key must be a plain value, not a list or a mapping",
                        key_node.start_mark) from None
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None,
                        f"duplicate key: first on line {first}, again on line {key_node.start_mark.line + 1}; "
                        f"a key may appear once per mapping",
                        key_node.start_mark)
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        """A YAML 1.2 integer: decimal (a leading 0 is decimal), 0o octal, 0x hex."""
        text = str(self.construct_scalar(node))
        sign = -1 if text.startswith("-") else 1
        body = text.lstrip("+-")
        base = {"0o": 8, "0x": 16}.get(body[:2].lower(), 10)
        digits = body[2:] if base != 10 else body
        if len(digits.lstrip("0")) > MAX_INT_DIGITS + 1:  # never parsed (Python refuses > 4300 digits)
            return HugeInt(len(digits.lstrip("0")))
        return sign * int(digits, base)  # beyond int64: refused by check_plain_data, with its path

    def construct_yaml_float(self, node):
        """A YAML 1.2 float (``1e10``, ``.5``, ``.inf``; non-finite ones are refused later)."""
        text = str(self.construct_scalar(node)).lower()
        if text.lstrip("+-") == ".inf":
            return -math.inf if text.startswith("-") else math.inf
        if text == ".nan":
            return math.nan
        return float(text)


class HugeInt(int):
    """Stands for an integer literal too long to parse; holds its digit count."""


def _refuse_tag(loader, node):
    problem = _REFUSED_TAGS.get(node.tag, "an explicit tag (!...) is not allowed here; write the plain value")
    raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark)


def _checked(constructor, what: str):
    """``constructor`` with a value it cannot read (``!!int abc``, ``!!timestamp
    2024-02-30``) turned into a YAML error at the value's line."""
    def construct(loader, node):
        try:
            return constructor(loader, node)
        except (ValueError, TypeError, OverflowError):
            raise yaml.constructor.ConstructorError(
                None, None, f"the value cannot be read as {what}", node.start_mark) from None
    return construct


_CORE_RESOLVERS = (  # YAML 1.2 core schema, in the order they are tried
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", list("-+0123456789")),
    ("tag:yaml.org,2002:float",
     r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
     list("-+.0123456789")),
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:merge", r"^(?:<<)$", ["<"]),
)
for _tag, _pattern, _first in _CORE_RESOLVERS:
    _StrictLoader.add_implicit_resolver(_tag, re.compile(_pattern), _first)
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _checked(_StrictLoader.construct_yaml_int, "an integer"))
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _checked(_StrictLoader.construct_yaml_float, "a number"))
_StrictLoader.add_constructor("tag:yaml.org,2002:bool", _checked(yaml.SafeLoader.construct_yaml_bool, "true or false"))
_StrictLoader.add_constructor("tag:yaml.org,2002:timestamp",
                              _checked(yaml.SafeLoader.construct_yaml_timestamp, "a date or time"))
for _tag in _REFUSED_TAGS:
    _StrictLoader.add_constructor(_tag, _refuse_tag)
_StrictLoader.add_constructor(None, _refuse_tag)  # any unknown or python tag


def read_text_file(path: str | Path, what: str) -> str:
    """The UTF-8 text of a regular file of at most :data:`MAX_FILE_BYTES`, read without
    blocking on special files (:func:`sim.inputs.read_text`).

    Raises:
        ScenarioError: missing, unreadable, not a regular file, too large, not UTF-8
            (UTF-16, compressed, binary and 8-bit files named as such)."""
    try:
        return read_text(path, what, MAX_FILE_BYTES)
    except InputError as err:
        raise ScenarioError(str(err)) from None


_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


def _clean_problem(problem: str) -> str:
    """PyYAML's problem text without what it quotes from the file (an alias or tag
    name, the text of a token); token kinds (``'<block end>'``) and a single
    punctuation or space character (``'\\t'``, ``':'``) are kept."""
    def keep(match: re.Match) -> str:
        inner = match.group(0)[1:-1]
        if inner.startswith("<") and inner.endswith(">"):
            return match.group(0)
        if len(inner) <= 2 and not any(c.isalnum() for c in inner.encode().decode("unicode_escape", "ignore")):
            return match.group(0)
        return "(text not shown)"
    return _QUOTED.sub(keep, problem)


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
        problem = getattr(err, "problem", None) or "unreadable YAML"
        constructing = isinstance(err, yaml.constructor.ConstructorError)
        kind = "YAML error" if constructing else "YAML syntax error"
        raise ScenarioError(f"{source}:{where} {kind}: {problem if constructing else _clean_problem(problem)}") from None
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


def check_file_kind(data: Any, source: str, expected: str, allowed: set[str] | frozenset[str] = frozenset()) -> None:
    """Refuse a file of another kind with the command that reads it, before schema
    errors; and a mapping none of whose top-level keys is one of ``allowed`` (the
    expected kind's fields), without naming its keys: it is some other file, and its
    content is not repeated (module docstring).

    Raises:
        ScenarioError: e.g. "this is a sweep file (it has 'base', 'grid'): use dcsim sweep"."""
    kind = file_kind(data)
    if kind is not None and kind != expected:
        keys = sorted(FILE_KINDS[kind][0] & set(data))
        raise ScenarioError(f"{source}: this is a {kind} file (it has {', '.join(repr(k) for k in keys)}), "
                            f"not a {expected} file: use {FILE_KINDS[kind][1]}")
    if allowed and isinstance(data, dict) and data and not any(isinstance(k, str) and k in allowed for k in data):
        raise ScenarioError(f"{source}: not a {expected} file: none of its {len(data)} top-level key(s) is a "
                            f"{expected} field ({', '.join(sorted(allowed))})")


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
