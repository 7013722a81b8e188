"""The dashboard's logic without Streamlit: sidebar edits -> scenario dict -> errors.

The sidebar shows one widget per *edit key*. Most keys are the dotted path of the
scenario field they set (``fleets.0.pools.1.replicas``, ``economics.pue``), so a
validation error, whose location is such a path, lands beside its widget. A few keys
are views over several fields:

- ``traffic.total_rate_per_s`` and ``traffic.share.<workload>`` (percent): the total
  arrival rate over workloads with synthetic arrivals (poisson, gamma, mmpp) and each
  one's share; shares are normalised, and every rate field of the arrival is scaled.
- ``workloads.<w>.steps`` of a diffusion LM: text, one value or comma-separated choices.
- ``workloads.<w>.slo.*``: 0 means "no bound"; ``slo.target`` is a percentage.
- ``fleets.selected``: the fleets to run (the others are dropped from the run).

The dashboard runs at most :data:`DASHBOARD_MAX_DURATION_S` of arrivals by default (the
duration widget can raise it), so the default scenario re-runs in a few seconds.
"""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

from sim.errors import ScenarioError, UserError
from sim.overrides import document
from sim.scenario import Scenario, parse_scenario
from sim.workloads import KINDS, kind_of

SCENARIO_DIR = Path(__file__).resolve().parents[1] / "scenarios"
DASHBOARD_MAX_DURATION_S = 300.0
SYNTHETIC_ARRIVALS = ("poisson", "gamma", "mmpp")
ECONOMICS_KEYS = ("electricity_usd_per_kwh", "pue", "depreciation_years", "facility_capex_usd_per_mw",
                  "facility_depreciation_years", "discount_rate_per_year", "network_capex_usd_per_node",
                  "maintenance_fraction_per_year", "staff_usd_per_kw_month", "other_opex_fraction_per_year")
SLO_BOUNDS = ("ttft_s", "tpot_s", "e2e_s")
GENERAL = ""  # errors that belong to no widget


# --- scenarios on disk ----------------------------------------------------------------

def run_scenarios(directory: Path = SCENARIO_DIR) -> dict[str, Path]:
    """Scenario files a run can start from (YAML mappings with ``workloads:``), by stem;
    sweep or plan files in the same folder are left out."""
    found = {}
    for path in sorted(Path(directory).glob("*.y*ml")):
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(data, dict) and "workloads" in data:
            found[path.stem] = path
    return found


def read_scenario_text(raw: bytes | str, source: str) -> dict:
    """A scenario mapping from an uploaded file's bytes (or text), through the same
    strict door as a scenario file (:mod:`sim.loader`: UTF-8 only, size, nesting and
    duplicate keys bounded, YAML 1.2 scalars, no content of an unparsable file in the
    message), validated.

    Raises:
        ScenarioError: not UTF-8 text, YAML error, not a scenario, or an invalid scenario."""
    from sim.inputs import InputError, decode_upload
    from sim.loader import check_file_kind, parse_yaml

    try:
        text = decode_upload(raw, source, "scenario") if isinstance(raw, bytes) else raw
    except InputError as err:
        raise ScenarioError(str(err)) from None
    loaded = parse_yaml(text, source)
    check_file_kind(loaded.data, source, "scenario", set(Scenario.model_fields))
    return document(parse_scenario(loaded.data, source, loaded))


def for_dashboard(data: dict) -> dict:
    """The scenario with its arrival duration capped at :data:`DASHBOARD_MAX_DURATION_S`
    (warm-up shortened to a fifth of it if it no longer fits)."""
    data = copy.deepcopy(data)
    if data["duration_s"] > DASHBOARD_MAX_DURATION_S:
        data["duration_s"] = DASHBOARD_MAX_DURATION_S
        if data.get("warmup_s", 0.0) >= DASHBOARD_MAX_DURATION_S:
            data["warmup_s"] = DASHBOARD_MAX_DURATION_S / 5
    return data


# --- widget values ------------------------------------------------------------------

def mean_rates(data: dict) -> dict[str, float]:
    """Mean arrival rate (req/s) of each workload with a synthetic arrival process."""
    scenario = parse_scenario(data, "scenario")
    return {name: wl.arrival.mean_rate_per_s for name, wl in scenario.workloads.items()
            if wl.arrival.kind in SYNTHETIC_ARRIVALS}


def steps_text(steps: Any) -> str:
    """A diffusion-LM steps distribution as the text the widget shows: '16' or '4, 8, 16'."""
    if isinstance(steps, dict) and steps.get("kind") == "constant":
        return f"{steps['value']:g}"
    if isinstance(steps, dict) and steps.get("kind") == "choice":
        return ", ".join(f"{v:g}" for v in steps["values"])
    return ""


def initial_values(data: dict, catalog=None) -> dict[str, Any]:
    """Every edit key's value as the scenario ``data`` stands (see module docstring)."""
    values: dict[str, Any] = {"run.duration_s": float(data["duration_s"]), "run.seed": int(data.get("seed", 0))}
    rates = mean_rates(data)
    total = sum(rates.values())
    if rates:
        values["traffic.total_rate_per_s"] = total
    for name, wl in data["workloads"].items():
        base = f"workloads.{name}"
        if name in rates:
            values[f"traffic.share.{name}"] = 100 * rates[name] / total if total else 0.0
        elif wl["arrival"]["kind"] == "trace":
            values[f"{base}.arrival.rate_scale"] = float(wl["arrival"].get("rate_scale", 1.0))
        for field, widget, _label, _low in kind_of(wl["kind"]).edit_fields:
            value = wl.get(field)
            values[f"{base}.{field}"] = (steps_text(value) if widget == "distribution"
                                         else int(value or 0) if widget == "steps" else int(value))
        slo = wl.get("slo") or {}
        for bound in SLO_BOUNDS:
            values[f"{base}.slo.{bound}"] = float(slo.get(bound) or 0.0)
        values[f"{base}.slo.target"] = 100 * float(slo.get("target", 0.99))
    for i, fleet in enumerate(data["fleets"]):
        for j, pool in enumerate(fleet["pools"]):
            base = f"fleets.{i}.pools.{j}"
            values[f"{base}.accelerator"] = pool["accelerator"]
            values[f"{base}.replicas"] = int(pool["replicas"])
            values[f"{base}.tp"] = int(pool.get("tp", 1))
            values[f"{base}.serves"] = list(pool["serves"])
            values[f"{base}.precision"] = pool.get("precision", "fp8")
            values[f"{base}.max_batch"] = int(pool.get("max_batch", 256))
            price = pool.get("price_usd")
            if price is None and catalog is not None:
                price = catalog.accelerators[pool["accelerator"]].price_usd
            values[f"{base}.price_usd"] = float(price or 0.0)
    economics = data.get("economics") or {}
    defaults = Scenario.model_fields["economics"].default
    for key in ECONOMICS_KEYS:
        values[f"economics.{key}"] = float(economics.get(key, getattr(defaults, key)))
    values["economics.ownership"] = economics.get("ownership", defaults.ownership)
    values["fleets.selected"] = [f["name"] for f in data["fleets"]]
    return values


def trace_rates(data: dict) -> dict[str, tuple[float, float]]:
    """(mean arrival rate in requests/s with ``rate_scale`` applied, ``rate_scale``) of
    each workload replaying a trace; the rate follows the trace_summary.csv convention
    (rows over the replayed span, see ``TraceArrivals.mean_rate_per_s``).

    Raises:
        TraceError: the trace file is missing or unreadable."""
    scenario = parse_scenario(data, "scenario")
    return {name: (wl.arrival.mean_rate_per_s, float(wl.arrival.rate_scale))
            for name, wl in scenario.workloads.items() if wl.arrival.kind == "trace"}


def accelerator_defaults(accelerator: str, precision: str, catalog) -> dict[str, Any]:
    """The pool fields that follow a newly chosen ``accelerator``: its catalog price per
    accelerator (USD) and a precision it has a dense peak for (``precision`` if it has,
    else fp8, else its first).  Keys are the pool's field names."""
    acc = catalog.accelerators[accelerator]
    allowed = acc.precisions
    chosen = precision if precision in allowed else ("fp8" if "fp8" in allowed else allowed[0])
    return {"price_usd": float(acc.price_usd), "precision": chosen}


# --- edits -> scenario ----------------------------------------------------------------

def set_path(data: dict, path: str, value: Any) -> None:
    """Set ``data[a][b]...`` from the dotted ``path`` (integer segments index lists)."""
    *parents, last = path.split(".")
    node: Any = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def parse_steps(text: str) -> dict:
    """'16' -> constant; '4, 8, 16' -> uniform choice. Raises ValueError on bad text."""
    parts = [p for p in re.split(r"[,\s]+", text.strip()) if p]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"steps: write whole numbers separated by commas, e.g. 4, 8, 16 (got {text!r})") from None
    if not values or min(values) < 1:
        raise ValueError(f"steps: give at least one whole number >= 1 (got {text!r})")
    if len(values) == 1:
        return {"kind": "constant", "value": values[0]}
    return {"kind": "choice", "values": values}


def _scale_arrival(arrival: dict, factor: float) -> None:
    if "rate_per_s" in arrival:
        arrival["rate_per_s"] = arrival["rate_per_s"] * factor
    if "rates_per_s" in arrival:
        arrival["rates_per_s"] = [r * factor for r in arrival["rates_per_s"]]


def _apply_traffic(data: dict, values: dict[str, Any], base_rates: dict[str, float]) -> dict[str, str]:
    errors = {}
    total = values.get("traffic.total_rate_per_s")
    shares = {n: values.get(f"traffic.share.{n}", 0.0) for n in base_rates}
    if total is None or not base_rates:
        return errors
    if total <= 0:
        errors["traffic.total_rate_per_s"] = "total arrival rate must be > 0 requests/s"
        return errors
    share_sum = sum(shares.values())
    if share_sum <= 0:
        errors["traffic"] = "at least one workload needs a share > 0%"
        return errors
    for name, share in shares.items():
        if share <= 0:
            errors[f"traffic.share.{name}"] = f"share of {name} must be > 0% (every workload needs traffic)"
            continue
        factor = total * share / share_sum / base_rates[name]
        if not math.isclose(factor, 1.0, rel_tol=1e-12):  # the shown rates as written: keep the file's bytes
            _scale_arrival(data["workloads"][name]["arrival"], factor)
    return errors


def _apply_workload(data: dict, name: str, values: dict[str, Any]) -> dict[str, str]:
    wl, base, errors = data["workloads"][name], f"workloads.{name}", {}
    if f"{base}.arrival.rate_scale" in values:
        wl["arrival"]["rate_scale"] = values[f"{base}.arrival.rate_scale"]
    for field, widget, _label, _low in kind_of(wl["kind"]).edit_fields:
        key = f"{base}.{field}"
        if key not in values:
            continue
        if widget == "distribution":
            try:
                text = str(values[key]).strip()
                steps = parse_steps(text) if text else None  # empty: the catalog's default steps
                if steps is None or steps_text(wl.get(field)) != steps_text(steps):
                    wl[field] = steps  # same text keeps the file's distribution (its weights)
            except ValueError as err:
                errors[key] = str(err)
        else:
            number = int(values[key])
            wl[field] = (number or None) if widget == "steps" else number  # steps 0: the model's default
    slo = dict(wl.get("slo") or {})
    for bound in SLO_BOUNDS:
        if f"{base}.slo.{bound}" in values:
            v = values[f"{base}.slo.{bound}"]
            slo[bound] = float(v) if v else None
    if f"{base}.slo.target" in values:
        slo["target"] = values[f"{base}.slo.target"] / 100
    wl["slo"] = slo
    return errors


def apply_edits(data: dict, values: dict[str, Any], catalog=None) -> tuple[dict, dict[str, str]]:
    """The scenario ``data`` with the sidebar ``values`` applied (all fleets kept), and
    the errors of edits that cannot even be written into the dict (by edit key).

    Every value is applied as shown, whether or not it differs from the start.  A price
    equal to the chosen accelerator's catalog price on a pool that gave none stays unset
    (the catalog's), so an untouched sidebar runs the file as written."""
    out = copy.deepcopy(data)
    errors = _apply_traffic(out, values, mean_rates(data))
    for name in out["workloads"]:
        errors.update(_apply_workload(out, name, values))
    if "run.duration_s" in values:
        out["duration_s"] = values["run.duration_s"]
    if "run.seed" in values:
        out["seed"] = int(values["run.seed"])
    for key, value in values.items():
        if key.startswith(("fleets.", "economics.")) and key != "fleets.selected":
            if key.startswith("economics.") and "economics" not in out:
                out["economics"] = {}
            set_path(out, key, _pool_value(key, value))
    if catalog is not None:
        _catalog_prices_unset(out, data, catalog)
    return out, errors


def _catalog_prices_unset(out: dict, data: dict, catalog) -> None:
    for fleet, original in zip(out["fleets"], data["fleets"]):
        for pool, before in zip(fleet["pools"], original["pools"]):
            acc = catalog.accelerators.get(pool["accelerator"])
            if before.get("price_usd") is None and acc is not None and pool.get("price_usd") == acc.price_usd:
                pool["price_usd"] = None


def _pool_value(key: str, value: Any) -> Any:
    if key.endswith(".price_usd"):
        return float(value) if value else None
    if key.endswith((".replicas", ".tp", ".max_batch")):
        return int(value)
    return value


def select_fleets(data: dict, names: list[str]) -> dict:
    """``data`` keeping only the fleets named (in the scenario's order)."""
    out = copy.deepcopy(data)
    out["fleets"] = [f for f in out["fleets"] if f["name"] in names]
    return out


# --- validation -----------------------------------------------------------------------

def validate(data: dict, values: dict[str, Any], initial: dict[str, Any],
             catalog=None) -> tuple[Scenario | None, dict[str, list[str]]]:
    """Apply the sidebar ``values`` (all of them, as shown) to ``data``, validate
    (schema, then placement of every pool), and keep the selected fleets.

    Returns the scenario to run (None when anything is wrong) and the error messages by
    the edit key (one of ``initial``'s keys, or a group such as ``fleets.0.pools.1``)
    they belong to.
    """
    from sim.dashboard_checks import field_errors

    keys = list(initial)
    values = {**initial, **{k: v for k, v in values.items() if k in initial}}
    bad = field_errors(values, float(data.get("warmup_s", 0.0)))  # shown, never replaced by the old value
    edited, early = apply_edits(data, {k: v for k, v in values.items() if k not in bad}, catalog)
    early = {**early, **bad}
    errors: dict[str, list[str]] = {}
    for key, message in early.items():  # the bad edit was left out; check the rest too
        errors.setdefault(key, []).append(message)
    try:
        scenario = parse_scenario(edited, "scenario")
        check_placement(scenario)
    except ScenarioError as err:
        for line in str(err).splitlines():
            key, message = locate(*error_path(line), keys, edited)
            errors.setdefault(key, []).append(message)
        return None, errors
    except UserError as err:  # placement: "fleets[i] 'name' pools[j] 'name': ..."
        key, message = locate(GENERAL, for_the_dashboard(str(err)), keys, edited)
        errors.setdefault(key, []).append(message)
        return None, errors
    except ArithmeticError as err:  # a bug below (e.g. a catalog row with 0 scale-up bandwidth): say so, don't crash
        errors.setdefault(GENERAL, []).append(
            f"checking the placement of the fleets failed inside dcsim ({type(err).__name__}: {err}); "
            "this is a dcsim bug, please report it with the scenario (scenario.yaml download)")
        return None, errors
    if errors:
        return None, errors
    selected = values.get("fleets.selected", [f.name for f in scenario.fleets])
    if not selected:
        return None, {"fleets.selected": ["select at least one fleet to run"]}
    return parse_scenario(select_fleets(edited, selected), "scenario"), {}  # the edited document, validated once


PP_ADVICE = "and raise pp to spread the model over more domains"


def for_the_dashboard(message: str) -> str:
    """A placement message with advice the dashboard can follow: it has no pp control,
    so 'raise pp' points to the scenario file instead."""
    return message.replace(PP_ADVICE, "(or split the model over more domains with pp, which the dashboard has "
                                      "no control for: set it in the scenario file and upload it)")


PLACEMENT_CACHE_SIZE = 64
_placed: dict[str, None] = {}  # fleets whose placement passed, by content (insertion order: oldest first)


def check_placement(scenario: Scenario) -> None:
    """Resolve every fleet (placement, memory, packing, the economics checks) as a run
    would, skipping a fleet already checked with the same content: the fleet, the
    economics and the workloads without their arrivals and SLOs (the models and shapes
    placement depends on, in the scenario's order). Every widget edit reruns the
    page, and a fleet of 100,000 replicas took seconds to place; a passed check is kept
    for the :data:`PLACEMENT_CACHE_SIZE` latest fleets. Failures are not kept (their
    error is raised again each time, for the message).

    Raises:
        UserError / PlacementError: as :func:`sim.fleet_plan.resolve`."""
    from sim import fleet_plan

    shapes = {name: wl.model_dump(mode="json", exclude={"arrival", "slo"}) for name, wl in scenario.workloads.items()}
    economics = scenario.economics.model_dump(mode="json")
    for i, fleet in enumerate(scenario.fleets):
        key = json.dumps([fleet.model_dump(mode="json"), shapes, economics], sort_keys=True)
        if key in _placed:
            continue
        fleet_plan.resolve_fleet(scenario, i)
        _placed[key] = None
        while len(_placed) > PLACEMENT_CACHE_SIZE:
            del _placed[next(iter(_placed))]


_KIND_TAGS = (*KINDS, "poisson", "gamma", "mmpp", "trace", "constant", "choice")


def error_path(line: str) -> tuple[str, str]:
    """Split ``source: field.path: message`` into (path, message); union tags such as
    ``branching_search`` are dropped from the path."""
    parts = line.split(": ", 2)
    if len(parts) < 3:
        return GENERAL, line
    path = ".".join(p for p in parts[1].split(".") if p not in _KIND_TAGS)
    message = parts[2].removeprefix("Value error, ")
    return ("" if path == "(top level)" else path), message


def locate(path: str, message: str, keys: list[str], data: dict) -> tuple[str, str]:
    """The edit key an error at field ``path`` belongs to, and its message.

    The longest key that is a prefix of ``path``; failing that a key of the group
    (workload, fleet, pool; from the path or the names in the message) whose field the
    message's problem mentions first; failing that the group itself; else :data:`GENERAL`."""
    path = path or _group_from_names(message, data)
    problem = message.split("): ", 1)[-1]
    exact = [k for k in keys if path == k or path.startswith(k + ".")]
    if exact:
        return max(exact, key=len), message
    children = [k for k in keys if path and k.startswith(path + ".")]
    mentioned = [(m.start(), k) for k in children
                 for m in [re.search(rf"\b{re.escape(k.rsplit('.', 1)[-1])}\b", problem)] if m]
    if mentioned:
        return min(mentioned)[1], message
    return path, message


def _group_from_names(message: str, data: dict) -> str:
    """``fleets.<i>[.pools.<j>]`` from a message naming fleet and pool."""
    m = re.search(r"fleets\[(\d+)\][^\n]*?pools\[(\d+)\]", message)
    if m:
        return f"fleets.{m.group(1)}.pools.{m.group(2)}"
    fleet = re.search(r"fleet '([^']+)'", message)
    if not fleet:
        return GENERAL
    names = [f["name"] for f in data["fleets"]]
    if fleet.group(1) not in names:
        return GENERAL
    i = names.index(fleet.group(1))
    pool = re.search(r"pool '([^']+)'", message)
    pools = [p["name"] for p in data["fleets"][i]["pools"]]
    if pool and pool.group(1) in pools:
        return f"fleets.{i}.pools.{pools.index(pool.group(1))}"
    return f"fleets.{i}"


def scenario_key(scenario: Scenario) -> str:
    """The content key results are cached under: the scenario as canonical JSON."""
    return scenario.model_dump_json()


# --- fleets and pools as one table --------------------------------------------------

TABLE_COLUMNS = ("fleet", "pool", "accelerator", "replicas", "tp", "precision", "max_batch", "price_usd", "serves")


def fleets_table(data: dict) -> list[dict[str, Any]]:
    """One row per pool of every fleet: the columns of :data:`TABLE_COLUMNS`; ``serves``
    as comma-separated text, ``price_usd`` None when the catalog price applies."""
    return [{"fleet": f["name"], "pool": p["name"], "accelerator": p["accelerator"], "replicas": int(p["replicas"]),
             "tp": int(p.get("tp", 1)), "precision": p.get("precision", "fp8"), "max_batch": int(p.get("max_batch", 256)),
             "price_usd": p.get("price_usd"), "serves": ", ".join(p["serves"])}
            for f in data["fleets"] for p in f["pools"]]


def fleets_from_table(rows: list[dict[str, Any]], data: dict, catalog=None) -> list[dict]:
    """The ``fleets`` list of a scenario from table ``rows`` (fleets in order of first
    appearance, pools in row order; a fleet keeps its router and workloads by name).  A pool whose (fleet, pool) names match one in
    ``data`` keeps its other fields (serving settings); a new one gets the schema's
    defaults.  A blank price means the catalog's; a precision the accelerator has no
    peak for becomes one it has (:func:`accelerator_defaults`).  Blank rows are skipped;
    the result is validated with the rest of the scenario."""
    known = {(f["name"], p["name"]): p for f in data["fleets"] for p in f["pools"]}
    fleets: dict[str, list[dict]] = {}
    for row in rows:
        if not str(row.get("fleet") or "").strip() and not str(row.get("pool") or "").strip():
            continue
        fleet, name = str(row.get("fleet") or "").strip(), str(row.get("pool") or "").strip()
        pool = copy.deepcopy(known.get((fleet, name), {}))
        price = row.get("price_usd")
        precision = row.get("precision") or "fp8"
        if catalog is not None and row.get("accelerator") in catalog.accelerators:
            precision = accelerator_defaults(row["accelerator"], precision, catalog)["precision"]
        pool.update({"name": name, "accelerator": row.get("accelerator") or "", "replicas": _whole(row.get("replicas"), 1),
                     "tp": _whole(row.get("tp"), 1), "precision": precision, "max_batch": _whole(row.get("max_batch"), 256),
                     "price_usd": None if price is None or (isinstance(price, float) and math.isnan(price)) else float(price),
                     "serves": [s for s in re.split(r"[,\s]+", str(row.get("serves") or "")) if s]})
        fleets.setdefault(fleet, []).append(pool)
    settings = {f["name"]: {k: copy.deepcopy(v) for k, v in f.items() if k != "pools"} for f in data["fleets"]}
    return [{**settings.get(name, {}), "name": name, "pools": pools} for name, pools in fleets.items()]


def table_fleets(rows: list[dict[str, Any]], data: dict, catalog) -> tuple[list[dict] | None, list[str]]:
    """The fleets of table ``rows`` (:func:`fleets_from_table`) if the scenario ``data``
    with them is valid, else (None, the problems: rows that cannot become pools, or the
    scenario's validation messages). Never raises for what a user can type."""
    from sim.dashboard_checks import table_errors

    problems = table_errors(rows, list(data["workloads"]), sorted(catalog.accelerators))
    if problems:
        return None, problems
    fleets = fleets_from_table(rows, data, catalog)
    if not fleets:
        return None, ["the table has no pools: a scenario needs at least one fleet with one pool"]
    try:
        parse_scenario({**data, "fleets": fleets}, "table")
    except ScenarioError as err:
        return None, [line.removeprefix("table: ") for line in str(err).splitlines()]
    return fleets, []


def _whole(value: Any, default: int) -> int:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return default
    return int(value)


def duplicate_fleet(fleets: list[dict], name: str) -> list[dict]:
    """``fleets`` with a copy of fleet ``name`` appended as ``<name>-copy`` (``-copy2``...
    when taken)."""
    taken = {f["name"] for f in fleets}
    new, n = f"{name}-copy", 2
    while new in taken:
        new, n = f"{name}-copy{n}", n + 1
    source = next(f for f in fleets if f["name"] == name)
    return [*copy.deepcopy(fleets), {**copy.deepcopy(source), "name": new}]
