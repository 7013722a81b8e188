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
from sim.overrides import document, full, set_field
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
    """A loaded sweep. ``base_data`` is the base scenario's document (the fields set, 'set'
    applied: :func:`sim.overrides.document`), which every point changes and validates
    once; ``resolved`` is the same with defaults filled in (where grid paths are looked
    up, and what the point ids hash). ``seeds`` is empty when the grid sweeps ``seed``."""

    source: str
    text: str
    base: Scenario
    base_data: dict
    grid: dict[str, list]
    fleets: list[str]
    seeds: list[int]
    points: list[Point] = field(default_factory=list)
    resolved: dict = field(default_factory=dict)

    @property
    def swept_fields(self) -> list[str]:
        return list(self.grid)


# --- dotted paths -------------------------------------------------------------------

def set_path(data: dict, path: str, value: Any, resolved: dict | None = None) -> None:
    """Set ``value`` at dotted ``path`` inside ``data`` (in place): :func:`sim.overrides.set_field`.

    Raises:
        KeyError: a part of the path does not exist (message names the part)."""
    set_field(data, path, value, resolved)


def apply_overrides(base_data: dict, overrides, source: str, resolved: dict | None = None) -> Scenario:
    """The base scenario document with ``overrides`` (path, value pairs) set, validated
    once (:mod:`sim.overrides`: a document, never a dump of derived values, so a trace
    replay keeps its own lengths). ``resolved``: the base with its defaults, where paths
    to defaulted fields are found.

    Raises:
        UserError: a path that does not exist; ScenarioError: a value the schema rejects."""
    data = copy.deepcopy(base_data)
    for path, value in overrides:
        try:
            set_path(data, path, value, resolved)
        except KeyError as err:
            raise UserError(f"{source}: grid field '{path}': {err.args[0]}") from None
    shown = ", ".join(f"{p}={v!r}" for p, v in overrides)
    return parse_scenario(data, f"{source} [{shown}]" if shown else source)


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
    check_file_kind(data, str(path), "sweep", SWEEP_KEYS)
    if not isinstance(data, dict) or "grid" not in data and "base" not in data:
        raise UserError(f"{path}: a sweep file is a mapping with 'base' and 'grid' keys")
    unknown = sorted(str(k) for k in set(data) - SWEEP_KEYS)
    if unknown:
        raise UserError(f"{path}: unknown key(s) {unknown}; allowed: {sorted(SWEEP_KEYS)}")
    base = _with_set(_load_base(path, data.get("base")), data.get("set") or {}, str(path))
    base_data, resolved = document(base), full(base)
    grid = _check_grid(path, data.get("grid") or {}, base_data, resolved)
    spec = SweepSpec(str(path), text, base, base_data, grid,
                     _check_fleets(path, data.get("fleets", "all"), base),
                     _check_seeds(path, data.get("seeds", 1), base.seed, "seed" in grid), resolved=resolved)
    _check_point_count(spec)
    spec.points = expand_points(spec)
    return spec


def _load_base(path: Path, base: Any) -> Scenario:
    if isinstance(base, dict):
        return parse_scenario(resolve_paths(base, path.parent), f"{path} (inline base)")
    if isinstance(base, str) and base:
        return load_scenario(path.parent / base)
    raise UserError(f"{path}: 'base' must be a scenario path (relative to the sweep file) or a mapping, "
                    f"got {_kind_of(base)}")


def _kind_of(value: Any) -> str:
    """What a value is, for messages that must not repeat it."""
    return {bool: "a boolean", int: "a number", float: "a number", str: "an empty string", list: "a list",
            dict: "a mapping", type(None): "nothing"}.get(type(value), type(value).__name__)


def _with_set(base: Scenario, fixed: Any, source: str) -> Scenario:
    """The base with the sweep's fixed ``set`` overrides, validated once."""
    if not isinstance(fixed, dict):
        raise UserError(f"{source}: 'set' must map dotted paths to values, got {_kind_of(fixed)}")
    if not fixed:
        return base
    data, resolved = document(base), full(base)
    for key, value in fixed.items():
        try:
            set_path(data, str(key), value, resolved)
        except KeyError as err:
            raise UserError(f"{source}: set field '{key}': {err.args[0]}") from None
    return parse_scenario(data, f"{source} (base with 'set')")


def canonical(value: Any) -> Any:
    """``value`` with integral floats as ints, recursively (2.0 and 2 are one value)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [canonical(v) for v in value]
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items()}
    return value


def _check_grid(path: Path, grid: Any, base_data: dict, resolved: dict) -> dict[str, list]:
    if not isinstance(grid, dict):
        raise UserError(f"{path}: 'grid' must map dotted paths to lists of values, got {_kind_of(grid)}")
    out = {}
    size = 1
    for key, values in grid.items():  # sizes first: a 10^10-point grid is refused before any value is checked
        if not isinstance(values, list) or not values:
            raise UserError(f"{path}: grid field '{key}' needs a non-empty list of values, got {_kind_of(values)}")
        if len(values) > MAX_GRID_VALUES:
            raise UserError(f"{path}: grid field '{key}' lists {len(values):,} values; the limit is {MAX_GRID_VALUES:,}")
        size *= len(values)
        if size > MAX_POINTS:
            raise UserError(f"{path}: grid has at least {size:,} combinations; the limit is {MAX_POINTS:,} points "
                            f"(grid values × fleets × seeds): sweep fewer values or split the sweep")
    for key, values in grid.items():
        _check_distinct(path, str(key), values)
        for value in values:
            try:
                apply_overrides(base_data, [(str(key), value)], str(path), resolved)
            except ScenarioError as err:
                raise UserError(f"{path}: grid field '{key}' value {value!r} is invalid:\n{err}") from None
        out[str(key)] = values
    return out


def _check_distinct(path: Path, key: str, values: list) -> None:
    """Refuse a grid that lists one value twice (``[2, 2.0]``: one simulation would count
    as two replications and get a confidence interval)."""
    seen: dict[str, int] = {}
    for i, value in enumerate(values, start=1):
        text = json.dumps(canonical(value), sort_keys=True, default=str)
        if text in seen:
            raise UserError(f"{path}: grid field '{key}' lists the same value twice (items {seen[text]} and {i}: "
                            f"{values[seen[text] - 1]!r} and {value!r}); list each value once")
        seen[text] = i


def _check_point_count(spec: SweepSpec) -> None:
    size = len(spec.fleets) * max(len(spec.seeds), 1)
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


def _check_seeds(path: Path, seeds: Any, base_seed: int, seed_in_grid: bool = False) -> list[int]:
    """The replication seeds; [] when the grid sweeps ``seed`` itself (each grid value is
    then the point's seed, and ``seeds`` may only be 1)."""
    if seed_in_grid:
        if seeds != 1:
            raise UserError(f"{path}: the grid sweeps 'seed', so 'seeds' (replications) must be 1 or left out, "
                            f"got {seeds!r}: list every seed in the grid instead")
        return []
    if isinstance(seeds, int) and not isinstance(seeds, bool) and 1 <= seeds <= 10_000:
        if base_seed + seeds > 2**63:
            raise UserError(f"{path}: 'seeds' {seeds} from the base seed {base_seed} go beyond the largest seed 2^63 - 1")
        return [base_seed + i for i in range(seeds)]
    if (isinstance(seeds, list) and 0 < len(seeds) <= 10_000
            and all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**63 for s in seeds)):
        if len(set(seeds)) != len(seeds):
            raise UserError(f"{path}: 'seeds' has repeated values: {seeds}")
        return list(seeds)
    raise UserError(f"{path}: 'seeds' must be a count (1..10000) or a list of distinct seeds from 0 to 2^63 - 1, "
                    f"got {seeds!r}")


def base_hash(base_data: dict) -> str:
    return hashlib.sha256(json.dumps(base_data, sort_keys=True).encode("utf-8")).hexdigest()


def expand_points(spec: SweepSpec) -> list[Point]:
    """Every grid combination × fleet × seed, in a fixed order (a grid over ``seed``
    gives each combination its own seed)."""
    digest = base_hash(spec.resolved or full(spec.base))
    fields = list(spec.grid)
    points = []
    for values in itertools.product(*(spec.grid[f] for f in fields)):
        overrides = tuple(zip(fields, values))
        seeds = spec.seeds or [dict(overrides)["seed"]]
        for fleet in spec.fleets:
            for seed in seeds:
                points.append(Point(point_id(digest, overrides, fleet, seed), overrides, fleet, seed))
    return points
