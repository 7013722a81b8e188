"""Changes to a validated scenario: applied to the document it was validated from, and
validated once.

A :class:`~sim.scenario.Scenario` is frozen. Every scenario derived from another (the
CLI's ``--seed``, ``--duration-s`` and ``--trace``, a sweep point, a cell of
``--cells N``, a headroom load factor, a plan's seeds, a dashboard edit) is made here
the same way: take the scenario's :func:`document` (the fields its author set, as JSON
values, without the defaults the schema filled in), change fields of that document, and
validate the result once with :func:`sim.scenario.parse_scenario`. No field is derived
a second time from a dump of derived values, so a change that sets a field to its own
value changes nothing (tests/sim/test_overrides.py checks this for every field of every
shipped scenario and every path above).

Two rules make that hold:

- every default that depends on other fields is a value of the validated model, never
  "whether the field was given" (a token trace's own lengths are ``prompt_tokens:
  None``, :func:`sim.workloads.autoregressive.default_lengths`; an image trace's own
  steps ``steps: None``), so even a full dump validates back to the same scenario;
- the document is ``model_dump(mode="json", exclude_unset=True)``, which validates back
  to a model equal to the original with the same fields set.

Dotted paths (sweep grids and ``set``, :func:`set_field`) walk the scenario as YAML:
mapping keys, list elements by ``name`` (``fleets.all-h100.pools.chat.replicas``) or by
index (``fleets.0.pools.1.tp``). A path may name a field the author left to its default
(``economics.pue``): it must exist in the full scenario, and the default is copied into
the document before the change.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Iterable

from sim.errors import UserError
from sim.scenario import Scenario, parse_scenario


def document(scenario: Scenario) -> dict:
    """The fields ``scenario``'s author set, as JSON values (paths as strings, instants
    in ISO form): what :func:`~sim.scenario.parse_scenario` rebuilds it from exactly."""
    return scenario.model_dump(mode="json", exclude_unset=True)


def full(scenario: Scenario) -> dict:
    """Every field of ``scenario``, defaults included, as JSON values (what paths are
    checked against and what the resolved ``scenario.yaml`` shows)."""
    return scenario.model_dump(mode="json")


def _step(node: Any, key: str) -> Any:
    """The dict key or list index that ``key`` names inside ``node``.

    Raises:
        KeyError: naming the part and what exists there."""
    if isinstance(node, dict):
        if key not in node:
            raise KeyError(f"'{key}' is not a field here; fields: {sorted(node)}")
        return key
    if isinstance(node, list):
        for i, item in enumerate(node):
            if isinstance(item, dict) and item.get("name") == key:
                return i
        if key.isdigit() and int(key) < len(node):
            return int(key)
        names = [item.get("name") for item in node if isinstance(item, dict)]
        raise KeyError(f"no element named '{key}' (names: {names}) and not an index < {len(node)}")
    raise KeyError(f"'{key}' goes below a plain value")


def set_field(doc: dict, path: str | tuple, value: Any, resolved: dict | None = None) -> None:
    """Set ``value`` at the dotted ``path`` (or tuple of keys: a name may hold a dot) of
    the document ``doc`` (in place; the value is copied). ``resolved`` is the same scenario with its defaults (:func:`full`): a
    part of the path that ``doc`` leaves to its default is looked up there and its
    default copied into ``doc`` first.

    Raises:
        KeyError: a part of the path exists in neither (the message names it and lists
            what exists at that place)."""
    node, known = doc, doc if resolved is None else resolved
    parts = path.split(".") if isinstance(path, str) else [str(p) for p in path]
    for depth, part in enumerate(parts):
        at = _step(known, part)
        if isinstance(node, dict) and at not in node:
            node[at] = copy.deepcopy(known[at])
        if depth == len(parts) - 1:
            node[at] = copy.deepcopy(value)
            return
        node, known = node[at], known[at]


def override(scenario: Scenario, changes: Iterable[tuple[str | tuple, Any]], source: str) -> Scenario:
    """``scenario`` with each (dotted path or key tuple, value) of ``changes`` set,
    validated once.

    Raises:
        UserError: a path that does not exist; ScenarioError: the changed scenario is
            invalid (the message names ``source``)."""
    doc, resolved = document(scenario), full(scenario)
    for path, value in changes:
        try:
            set_field(doc, path, value, resolved)
        except KeyError as err:
            shown = path if isinstance(path, str) else ".".join(map(str, path))
            raise UserError(f"{source}: field '{shown}': {err.args[0]}") from None
    return parse_scenario(doc, source)


def derive(scenario: Scenario, change: Callable[[dict], None], source: str) -> Scenario:
    """``scenario`` with ``change(document)`` applied to its document, validated once."""
    doc = document(scenario)
    change(doc)
    return parse_scenario(doc, source)


def keep_fleet(doc: dict, fleet: str) -> None:
    """Keep only the fleet named ``fleet`` in the document ``doc`` (in place)."""
    doc["fleets"] = [f for f in doc["fleets"] if f["name"] == fleet]
