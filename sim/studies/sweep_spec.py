"""A sweep file: a base scenario, a grid of dotted-path fields, fleets and seeds.

::

    base: default.yaml               # path relative to this file, or an inline mapping
    set: {duration_s: 60}            # optional: fixed overrides applied to every point
    grid:                            # every combination of these values
      workloads.chat.arrival.rate_per_s: [6, 12, 24]
      economics.electricity_usd_per_kwh: [0.06, 0.12]
    fleets: all                      # or a list of fleet names of the base scenario
    seeds: 3                         # replications: 3 -> seeds base.seed .. base.seed+2,
                                     # or an explicit list [1, 2, 3]

A dotted path walks the scenario as YAML: mapping keys, list elements by ``name``
(``fleets.all-h100.pools.chat.replicas``) or by index (``fleets.0.pools.1.tp``). Every
path must exist in the resolved base scenario (defaults filled in) and every value must
validate on its own; otherwise loading fails with a :class:`~sim.errors.UserError`
naming the path and value (exit 2). A combination of valid values that is invalid
together (e.g. ``warmup_s`` >= ``duration_s``) is a failed point, recorded at run time.

A point is (grid values, fleet, seed); its id is a stable hash of those and of the
resolved base scenario, so a rerun with the same files finds the points already done.

Limits: at most :data:`MAX_POINTS` points (grid values × fleets × seeds, counted before
any is built) and :data:`MAX_GRID_VALUES` values per grid field; the file itself is read
through :mod:`sim.loader` (size, nesting, alias expansion and duplicate keys bounded).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.errors import ScenarioError, UserError
from sim.loader import check_file_kind, load_yaml, resolve_paths
from sim.scenario import Scenario, load_scenario, parse_scenario

SWEEP_KEYS = {"base", "set", "grid", "fleets", "seeds", "name", "description"}
MAX_POINTS = 100_000
"""Most points (grid combinations × fleets × seeds) one sweep may have."""
MAX_GRID_VALUES = 1_000
"""Most values one grid field may list."""


@dataclass(frozen=True)
class Point:
    """One simulation of a sweep: the base scenario with ``overrides`` set, one fleet,
    one seed. ``overrides`` are (dotted path, value) pairs in grid order."""

    point_id: str
    overrides: tuple[tuple[str, Any], ...]
    fleet: str
    seed: int

    def overrides_json(self) -> str:
        return json.dumps(dict(self.overrides), sort_keys=True)


@dataclass
class SweepSpec:
    source: str
    text: str
    base: Scenario
    base_data: dict
    grid: dict[str, list]
    fleets: list[str]
    seeds: list[int]
    points: list[Point] = field(default_factory=list)

    @property
    def swept_fields(self) -> list[str]:
        return list(self.grid)


# --- dotted paths -------------------------------------------------------------------

def _step(node: Any, key: str, path: str) -> tuple[Any, Any]:
    """The container key for ``key`` inside ``node`` (dict key or list index)."""
    if isinstance(node, dict):
        if key not in node:
            raise KeyError(f"'{key}' is not a field here; fields: {sorted(node)}")
        return node, key
    if isinstance(node, list):
        for i, item in enumerate(node):
            if isinstance(item, dict) and item.get("name") == key:
                return node, i
        if key.isdigit() and int(key) < len(node):
            return node, int(key)
        names = [item.get("name") for item in node if isinstance(item, dict)]
        raise KeyError(f"no element named '{key}' (names: {names}) and not an index < {len(node)}")
    raise KeyError(f"'{key}' goes below a plain value")


def set_path(data: dict, path: str, value: Any) -> None:
    """Set ``value`` at dotted ``path`` inside ``data`` (in place).

    Raises:
        KeyError: a part of the path does not exist (message names the part)."""
    node: Any = data
    parts = path.split(".")
    for part in parts[:-1]:
        container, key = _step(node, part, path)
        node = container[key]
    container, key = _step(node, parts[-1], path)
    container[key] = copy.deepcopy(value)


def apply_overrides(base_data: dict, overrides, source: str) -> Scenario:
    """The base scenario with ``overrides`` (path, value pairs) set, validated again.

    Raises:
        UserError: a path that does not exist; ScenarioError: a value the schema rejects."""
    data = copy.deepcopy(base_data)
    for path, value in overrides:
        try:
            set_path(data, path, value)
        except KeyError as err:
            raise UserError(f"{source}: grid field '{path}': {err.args[0]}") from None
    shown = ", ".join(f"{p}={v!r}" for p, v in overrides)
    return parse_scenario(data, f"{source} [{shown}]")


# --- loading ------------------------------------------------------------------------

def point_id(base_hash: str, overrides, fleet: str, seed: int) -> str:
    """Stable 16-hex-digit id of a point (see module docstring)."""
    key = json.dumps({"base": base_hash, "set": dict(overrides), "fleet": fleet, "seed": seed},
                     sort_keys=True, default=str)
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


def load_sweep(path: str | Path) -> SweepSpec:
    """Read, check and expand a sweep file into its points.

    Raises:
        UserError: unreadable file, unknown keys, a missing base, a bad dotted path or a
            value the schema rejects (each message names the file, path and value)."""
    path = Path(path)
    loaded = load_yaml(path, "sweep")
    data, text = loaded.data, loaded.text
    check_file_kind(data, str(path), "sweep")
    if not isinstance(data, dict) or "grid" not in data and "base" not in data:
        raise UserError(f"{path}: a sweep file is a mapping with 'base' and 'grid' keys")
    unknown = sorted(set(data) - SWEEP_KEYS)
    if unknown:
        raise UserError(f"{path}: unknown key(s) {unknown}; allowed: {sorted(SWEEP_KEYS)}")
    base = _load_base(path, data.get("base"))
    base_data = _with_set(base.model_dump(mode="json"), data.get("set") or {}, str(path))
    base = parse_scenario(base_data, f"{path} (base with 'set')")
    base_data = base.model_dump(mode="json")
    grid = _check_grid(path, data.get("grid") or {}, base_data)
    spec = SweepSpec(str(path), text, base, base_data, grid,
                     _check_fleets(path, data.get("fleets", "all"), base),
                     _check_seeds(path, data.get("seeds", 1), base.seed))
    _check_point_count(spec)
    spec.points = expand_points(spec)
    return spec


def _load_base(path: Path, base: Any) -> Scenario:
    if isinstance(base, dict):
        return parse_scenario(resolve_paths(base, path.parent), f"{path} (inline base)")
    if isinstance(base, str):
        return load_scenario(path.parent / base)
    raise UserError(f"{path}: 'base' must be a scenario path (relative to the sweep file) or a mapping, got {base!r}")


def _with_set(base_data: dict, fixed: Any, source: str) -> dict:
    if not isinstance(fixed, dict):
        raise UserError(f"{source}: 'set' must map dotted paths to values, got {fixed!r}")
    data = copy.deepcopy(base_data)
    for key, value in fixed.items():
        try:
            set_path(data, str(key), value)
        except KeyError as err:
            raise UserError(f"{source}: set field '{key}': {err.args[0]}") from None
    return data


def _check_grid(path: Path, grid: Any, base_data: dict) -> dict[str, list]:
    if not isinstance(grid, dict):
        raise UserError(f"{path}: 'grid' must map dotted paths to lists of values, got {grid!r}")
    out = {}
    size = 1
    for key, values in grid.items():  # sizes first: a 10^10-point grid is refused before any value is checked
        if not isinstance(values, list) or not values:
            raise UserError(f"{path}: grid field '{key}' needs a non-empty list of values, got {values!r}")
        if len(values) > MAX_GRID_VALUES:
            raise UserError(f"{path}: grid field '{key}' lists {len(values):,} values; the limit is {MAX_GRID_VALUES:,}")
        size *= len(values)
        if size > MAX_POINTS:
            raise UserError(f"{path}: grid has at least {size:,} combinations; the limit is {MAX_POINTS:,} points "
                            f"(grid values × fleets × seeds): sweep fewer values or split the sweep")
    for key, values in grid.items():
        for value in values:
            try:
                apply_overrides(base_data, [(str(key), value)], str(path))
            except ScenarioError as err:
                raise UserError(f"{path}: grid field '{key}' value {value!r} is invalid:\n{err}") from None
        out[str(key)] = values
    return out


def _check_point_count(spec: SweepSpec) -> None:
    size = len(spec.fleets) * len(spec.seeds)
    for values in spec.grid.values():
        size *= len(values)
    if size > MAX_POINTS:
        raise UserError(f"{spec.source}: the sweep has {size:,} points (grid values × {len(spec.fleets)} fleet(s) × "
                        f"{len(spec.seeds)} seed(s)); the limit is {MAX_POINTS:,}: sweep fewer values or split the sweep")


def _check_fleets(path: Path, fleets: Any, base: Scenario) -> list[str]:
    names = [f.name for f in base.fleets]
    if fleets == "all":
        return names
    if not isinstance(fleets, list) or not fleets:
        raise UserError(f"{path}: 'fleets' must be 'all' or a list of fleet names from {names}, got {fleets!r}")
    unknown = [f for f in fleets if f not in names]
    if unknown:
        raise UserError(f"{path}: fleets {unknown} are not in the base scenario; fleets: {names}")
    return [str(f) for f in fleets]


def _check_seeds(path: Path, seeds: Any, base_seed: int) -> list[int]:
    if isinstance(seeds, int) and not isinstance(seeds, bool) and 1 <= seeds <= 10_000:
        return [base_seed + i for i in range(seeds)]
    if (isinstance(seeds, list) and 0 < len(seeds) <= 10_000
            and all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**63 - 10_000 for s in seeds)):
        if len(set(seeds)) != len(seeds):
            raise UserError(f"{path}: 'seeds' has repeated values: {seeds}")
        return list(seeds)
    raise UserError(f"{path}: 'seeds' must be a count (1..10000) or a list of distinct seeds >= 0, got {seeds!r}")


def base_hash(base_data: dict) -> str:
    return hashlib.sha256(json.dumps(base_data, sort_keys=True).encode("utf-8")).hexdigest()


def expand_points(spec: SweepSpec) -> list[Point]:
    """Every grid combination × fleet × seed, in a fixed order."""
    digest = base_hash(spec.base_data)
    fields = list(spec.grid)
    points = []
    for values in itertools.product(*(spec.grid[f] for f in fields)):
        overrides = tuple(zip(fields, values))
        for fleet in spec.fleets:
            for seed in spec.seeds:
                points.append(Point(point_id(digest, overrides, fleet, seed), overrides, fleet, seed))
    return points
