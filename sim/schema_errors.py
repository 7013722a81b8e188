"""Pydantic validation errors as one line per problem, in the user's own terms.

``format_validation_error`` turns a :class:`pydantic.ValidationError` into
``source[:line]: field.path: message (got value)`` lines: the path as written in the
YAML (pydantic's union tags and validator labels dropped), the line where the field
starts, and for an unknown field the valid ones beside it.
"""

from __future__ import annotations

from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from sim.loader import LoadedYaml, dotted


def _yaml_path(loc: tuple, data: Any) -> tuple:
    """The path of ``loc`` in the input as written: pydantic inserts union tags (the
    ``kind`` value) and validator names into ``loc``; they are not keys of the input."""
    path, node = [], data
    for part in loc:
        if isinstance(node, dict) and part in node:
            path.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            path.append(part)
            node = node[part]
        elif isinstance(node, dict) and part in (node.get("kind"), node.get("format")) or not isinstance(node, (dict, list)):
            continue  # a union tag: the kind of a workload or arrival, the format of a trace
        elif isinstance(part, str) and ("[" in part or "-" in part):
            continue  # validator labels such as function-after[...]
        else:
            path.append(part)  # a missing required field
            node = None
    return tuple(path)


def _leading_path(msg: str, data: Any) -> tuple:
    """``("workloads", "chat", "steps")`` from a message ``"workloads.chat.steps: ..."``
    whose first word is a dotted path starting at a top-level key of ``data``; else ``()``."""
    head = msg.split(": ", 1)[0] if ": " in msg else ""
    if not head or " " in head or not isinstance(data, dict) or head.split(".")[0] not in data:
        return ()
    return tuple(int(p) if p.isdigit() else p for p in head.split("."))


def _members(annotation) -> list:
    """The types an annotation admits: unions, Optional and Annotated unwrapped."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin in (Union, UnionType):
        return [m for a in get_args(annotation) for m in _members(a)]
    return [annotation]


def _is_model(t) -> bool:
    return isinstance(t, type) and issubclass(t, BaseModel)


def _step(t, part) -> list:
    """The types at ``part`` below type ``t`` (a model field, a dict value, a list item, or
    the member of a tagged union whose ``kind``/``format`` literal is ``part``)."""
    if _is_model(t):
        for name, f in t.model_fields.items():
            if part in (name, f.alias):
                return _members(f.annotation)
            if get_origin(f.annotation) is Literal and part in get_args(f.annotation):
                return [t]  # a union tag in pydantic's loc: stay on this member
        return []
    args = get_args(t)
    if get_origin(t) is dict and len(args) == 2:
        return _members(args[1])
    if get_origin(t) is list and args and isinstance(part, int):
        return _members(args[0])
    return []


def valid_fields(model: type, loc: tuple) -> list[str]:
    """Field names (YAML spelling) allowed beside the unknown field at ``loc`` (its last
    part), found by walking ``model``'s annotations; [] when the walk gets lost."""
    types = [model]
    for part in loc[:-1]:
        types = [n for t in types for n in _step(t, part)]
    names = {f.alias or name for t in types if _is_model(t) for name, f in t.model_fields.items()}
    return sorted(names)


def format_validation_error(err: ValidationError, source: str, data: Any = None,
                            loaded: LoadedYaml | None = None, model: type | None = None) -> str:
    """One line per problem: ``source[:line]: field.path: message (got value)``; an
    unknown field also lists the valid ones (walked from ``model``, the schema ``err``
    is about)."""
    lines = []
    for e in err.errors():
        path = _yaml_path(tuple(e["loc"]), data) if data is not None else tuple(e["loc"])
        if e["type"] in ("union_tag_invalid", "union_tag_not_found"):  # name the discriminating field
            tag = str(e.get("ctx", {}).get("discriminator", "")).strip("'\"")
            if tag and (not path or path[-1] != tag):
                path = (*path, tag)
        msg = str(e["ctx"]["error"]) if e["type"] == "value_error" and "error" in e.get("ctx", {}) else e["msg"]
        if not path:  # a cross-field check: its message starts with the field path when it has one
            path = _leading_path(msg, data)
            msg = msg if not path else msg.split(": ", 1)[1]
        line = loaded.line_of(path) if loaded and path else None
        got = e.get("input")
        shown = "" if isinstance(got, (dict, list)) or not e["loc"] else f" (got {got!r})"
        if e["type"] == "extra_forbidden" and model is not None and (allowed := valid_fields(model, tuple(e["loc"]))):
            shown += f"; valid fields here: {', '.join(allowed)}"
        lines.append(f"{source}{f':{line}' if line else ''}: {dotted(path)}: {msg}{shown}")
    return "\n".join(lines)
