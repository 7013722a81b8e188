"""Read the catalog CSVs and convert their human units to SI, in one place.

CSV units -> SI: TFLOP/s x 1e12 -> FLOP/s; GB x 1e9 -> bytes (decimal GB); TB/s x 1e12 and
GB/s x 1e9 -> bytes/s; us x 1e-6 -> s; kW x 1e3 -> W; billions of params x 1e9; TFLOP x 1e12.
``text_encoders`` ('a+b') -> tuple of model keys; bytes, px, frames and fractions stay as is.
"""

from __future__ import annotations

import csv
import functools
import math
import os
import re
from pathlib import Path

from sim.errors import InputError, UserError
from sim.inputs import parse_number, read_csv, reraised_as, shown_number
from fleets.catalog import (EFFICIENCY_STATUS_WORDS, LOCAL_ATTENTION_KINDS, MEMORY_KINDS, MODEL_KINDS,
                            STATUS_WORDS, Accelerator, Catalog, Model)

DATA_DIR = Path(__file__).resolve().parent / "data"
TERA = 1e12
GIGA = 1e9
MICRO = 1e-6
KILO = 1e3

# CSV column -> (dataclass field, scale); scale None = text, int = integer, bool = boolean.
ACCELERATOR_COLUMNS = {
    "key": ("key", None), "name": ("name", None), "vendor": ("vendor", None),
    "peak_bf16_tflops": ("peak_bf16_flops", TERA),
    "peak_fp8_tflops": ("peak_fp8_flops", TERA),
    "peak_fp4_tflops": ("peak_fp4_flops", TERA),
    "memory_kind": ("memory_kind", None), "memory_gb": ("memory_bytes", GIGA),
    "memory_bw_tbps": ("memory_bw_bytes_per_s", TERA),
    "scaleup_gbps_per_dir": ("scaleup_bw_bytes_per_s", GIGA),
    "scaleup_domain_size": ("scaleup_domain_size", int),
    "scaleup_latency_us": ("scaleup_latency_s", MICRO),
    "scaleup_latency_log2_us": ("scaleup_latency_log2_s", MICRO),
    "scaleup_bus_efficiency": ("scaleup_bus_efficiency", 1.0),
    "scaleout_gbps_per_dir": ("scaleout_bw_bytes_per_s", GIGA),
    "scaleout_latency_us": ("scaleout_latency_s", MICRO),
    "accelerators_per_node": ("accelerators_per_node", int),
    "tdp_w": ("tdp_w", 1.0), "node_overhead_w": ("node_overhead_w", 1.0),
    "price_usd": ("price_usd", 1.0), "price_includes_server": ("price_includes_server", bool),
    "server_cost_usd_per_node": ("server_cost_usd_per_node", 1.0),
    "compute_efficiency": ("compute_efficiency", 1.0),
    "bandwidth_efficiency": ("bandwidth_efficiency", 1.0),
    "iteration_overhead_us": ("iteration_overhead_s", MICRO),
    "efficiency_band_pct": ("efficiency_band_pct", 1.0),
    "rack_power_budget_kw": ("rack_power_budget_w", KILO),
    "sram_layer_latency_us": ("sram_layer_latency_s", MICRO),
    "sram_hop_latency_us": ("sram_hop_latency_s", MICRO),
    "status": ("status", None), "spec_source": ("spec_source", None),
    "price_status": ("price_status", None), "price_source": ("price_source", None),
    "power_status": ("power_status", None), "power_source": ("power_source", None),
    "network_status": ("network_status", None), "network_source": ("network_source", None),
    "efficiency_status": ("efficiency_status", None),
    "efficiency_source": ("efficiency_source", None), "assumptions": ("assumptions", None),
    "scaleup_fabric": ("scaleup_fabric", None),
    "moe_efficiency_factor": ("moe_efficiency_factor", 1.0),
    "diffusion_efficiency_factor": ("diffusion_efficiency_factor", 1.0),
    "fp4_efficiency_factor": ("fp4_efficiency_factor", 1.0),
}
ACCELERATOR_OPTIONAL = {"peak_fp8_tflops", "peak_fp4_tflops", "assumptions", "efficiency_band_pct",
                        "sram_layer_latency_us", "sram_hop_latency_us", "scaleup_fabric",
                        "moe_efficiency_factor", "diffusion_efficiency_factor", "fp4_efficiency_factor"}
# Optional numeric columns and the value an empty cell means.
ACCELERATOR_DEFAULTS = {"moe_efficiency_factor": 1.0, "diffusion_efficiency_factor": 1.0, "fp4_efficiency_factor": 1.0}

# Allowed range of every numeric accelerator column, in the CSV's units: (low, high, low
# excluded). Wide enough for any real part (the shipped rows span 188..62,500 TFLOP/s,
# 0.23..288 GB, 0.8..21,000 TB/s, 200..23,000 W, $1,781..$2.5M), narrow enough that no
# product of them overflows or divides by zero: a peak, a bandwidth or a node size of 0
# and a price of 1e308 are refused. A scale-up bandwidth of 0 is allowed only on a part
# whose scale-up domain is one accelerator (no collective crosses it).
ACCELERATOR_RANGES = {
    "peak_bf16_tflops": (0, 1e6, True), "peak_fp8_tflops": (0, 1e6, True), "peak_fp4_tflops": (0, 1e6, True),
    "memory_gb": (0, 1e5, True), "memory_bw_tbps": (0, 1e6, True),
    "scaleup_gbps_per_dir": (0, 1e6, False), "scaleup_domain_size": (1, 1e6, False),
    "scaleup_latency_us": (0, 1e6, False), "scaleup_latency_log2_us": (0, 1e6, False),
    "scaleup_bus_efficiency": (0, 1, True), "scaleout_gbps_per_dir": (0, 1e6, True),
    "scaleout_latency_us": (0, 1e6, False), "accelerators_per_node": (1, 1024, False),
    "tdp_w": (0, 1e5, True), "node_overhead_w": (0, 1e6, False), "price_usd": (0, 1e9, False),
    "server_cost_usd_per_node": (0, 1e9, False), "compute_efficiency": (0, 1, True),
    "bandwidth_efficiency": (0, 1, True), "iteration_overhead_us": (0, 1e6, False),
    "efficiency_band_pct": (0, 1000, False), "rack_power_budget_kw": (0, 1e4, True),
    # relative kernel-class factors: the product with eta_c is capped at 1
    "moe_efficiency_factor": (0, 2, True), "diffusion_efficiency_factor": (0, 2, True),
    "fp4_efficiency_factor": (0, 2, True),
    "sram_layer_latency_us": (0, 1e6, False), "sram_hop_latency_us": (0, 1e6, False),
}
KEY_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
"""An accelerator key: it names planner CSV columns (``accelerators_<key>``) and scenario fields."""

MODEL_COLUMNS = {
    "key": ("key", None), "name": ("name", None), "kind": ("kind", None),
    "params_b": ("params", GIGA), "active_params_b": ("active_params", GIGA),
    "layers": ("layers", int), "hidden": ("hidden", int), "heads": ("heads", int),
    "kv_heads": ("kv_heads", int), "head_dim": ("head_dim", int),
    "n_experts": ("n_experts", int), "experts_per_token": ("experts_per_token", int),
    "expert_params_b": ("expert_params", GIGA),
    "max_context_tokens": ("max_context_tokens", int),
    "flops_per_step_tflop": ("flops_per_step", TERA),
    "latent_tokens": ("latent_tokens", int),
    "activation_gb_per_sample": ("activation_bytes_per_sample", GIGA),
    "default_steps": ("default_steps", int), "default_cfg": ("default_cfg", bool),
    "block_tokens": ("block_tokens", int),
    "source": ("source", None), "status": ("status", None), "assumptions": ("assumptions", None),
    "text_encoders": ("text_encoders", None), "vae_decoder": ("vae_decoder", None),
    "safety_checker": ("safety_checker", None),
    "ref_height_px": ("ref_height_px", int), "ref_width_px": ("ref_width_px", int),
    "ref_frames": ("ref_frames", int),
    "latent_bytes_per_sample": ("latent_bytes_per_sample", 1.0),
    "attention_flops_fraction": ("attention_flops_fraction", 1.0),
    "moe_layers": ("moe_layers", int),
    "kv_values_per_token_layer": ("kv_values_per_token_layer", int),
    "local_attention_layers": ("local_attention_layers", int),
    "local_attention_tokens": ("local_attention_tokens", int),
    "local_attention_kind": ("local_attention_kind", None),
    "attention_sinks": ("attention_sinks", bool),
    "expert_bits_per_param": ("expert_bits_per_param", 1.0),
    "mla_kv_rank": ("mla_kv_rank", int),
    "mla_rope_dim": ("mla_rope_dim", int),
}
MODEL_REQUIRED = {"key", "name", "kind", "params_b", "active_params_b", "source", "status"}


def _parse_cell(text: str, scale, where: str, bounds: tuple | None = None):
    """One CSV cell -> Python value in SI; UserError naming ``where`` on a bad value, whose
    text is never repeated (a value only once parsed as a number: :mod:`sim.inputs`).
    ``bounds``: (low, high, low excluded) in the CSV's units (:data:`ACCELERATOR_RANGES`)."""
    if scale is None:
        return text
    if scale is bool:
        if text.lower() not in ("true", "false"):
            raise UserError(f"{where}: not a boolean; allowed: true, false")
        return text.lower() == "true"
    value = parse_number(text)
    if value is None:
        raise UserError(f"{where}: not a number; allowed: a decimal number")
    low, high, open_low = bounds if bounds is not None else (0, math.inf, False)
    if not math.isfinite(value) or value < low or value > high or (open_low and value == low):
        shown = f"({low:g}, {high:g}]" if open_low else f"[{low:g}, {high:g}]"
        raise UserError(f"{where}: {shown_number(value)} is out of range; allowed: a number in {shown}")
    if scale is int:
        if value != int(value):
            raise UserError(f"{where}: {shown_number(value)} is not a whole number; allowed: an integer")
        return int(value)
    return value * scale


def _parse_row(row: dict, columns: dict, required: set, where: str, ranges: dict | None = None,
               place=None) -> dict:
    """``place(column)``: where a column's cell is, for messages (default ``where column 'x'``)."""
    fields = {}
    for column, (field, scale) in columns.items():
        text = (row.get(column) or "").strip()
        cell_where = place(column) if place is not None else f"{where} column '{column}'"
        if not text:
            if column in required:
                raise UserError(f"{cell_where}: empty; a value is required")
            fields[field] = False if scale is bool else ("" if scale is None else None)
            continue
        fields[field] = _parse_cell(text, scale, cell_where, (ranges or {}).get(column))
    return fields


def _read_rows(path: Path) -> list[tuple[str, dict]]:
    if not path.is_file():
        raise UserError(f"catalog file not found: {path}")
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        return [(f"{path.name} line {i}", row) for i, row in enumerate(reader, start=2)]


def _check_status(fields: dict, names: tuple[str, ...], where: str, place=None) -> None:
    place = place or (lambda column: f"{where} column '{column}'")
    for name in names:
        if not fields[name].lower().startswith(STATUS_WORDS):
            raise UserError(f"{place(name)}: not a status; allowed: starts with one of {', '.join(STATUS_WORDS)}")


def _check_choice(value: str, allowed: tuple[str, ...], where: str) -> None:
    if value not in allowed:
        raise UserError(f"{where}: not an allowed value; allowed: {', '.join(allowed)}")


def _accelerator(row: dict, where: str, place=None) -> Accelerator:
    """One accelerator row; ``place(column)`` says where a column's cell is in messages."""
    place = place or (lambda column: f"{where} column '{column}'")
    required = set(ACCELERATOR_COLUMNS) - ACCELERATOR_OPTIONAL
    fields = _parse_row(row, ACCELERATOR_COLUMNS, required, where, ACCELERATOR_RANGES, place)
    if not KEY_PATTERN.fullmatch(fields["key"]):
        raise UserError(f"{place('key')}: not an accelerator key; use letters, digits, '.', '_', '+', '-' "
                        f"(at most 64, starting with a letter or digit)")
    _check_choice(fields["memory_kind"], MEMORY_KINDS, place("memory_kind"))
    _check_status(fields, ("status", "price_status", "power_status", "network_status"), where, place)
    if not fields["efficiency_status"].lower().startswith(EFFICIENCY_STATUS_WORDS):
        raise UserError(f"{place('efficiency_status')}: not an efficiency status; "
                        f"allowed: starts with one of {', '.join(EFFICIENCY_STATUS_WORDS)}")
    if fields["scaleup_bw_bytes_per_s"] == 0 and fields["scaleup_domain_size"] > 1:
        raise UserError(f"{place('scaleup_gbps_per_dir')}: 0 with a scale-up domain of {fields['scaleup_domain_size']} "
                        f"accelerators; allowed: > 0 (0 only when scaleup_domain_size is 1)")
    for name, default in ACCELERATOR_DEFAULTS.items():
        fields[name] = default if fields[name] is None else fields[name]
    return Accelerator(**fields)


def _model(row: dict, where: str) -> Model:
    fields = _parse_row(row, MODEL_COLUMNS, MODEL_REQUIRED, where)
    _check_choice(fields["kind"], MODEL_KINDS, f"{where} column 'kind'")
    _check_status(fields, ("status",), where)
    fields["text_encoders"] = _split_keys(fields["text_encoders"],
                                          f"{where} column 'text_encoders'")
    fraction = fields["attention_flops_fraction"]
    if fraction is not None and not 0 <= fraction < 1:
        raise UserError(f"{where} column 'attention_flops_fraction': {fraction} not in [0, 1)")
    _check_local_attention(fields, where)
    return Model(**fields)


def _check_local_attention(fields: dict, where: str) -> None:
    """A local-attention kind needs its window and a layer count within the model's layers;
    window and layers without a kind are refused too (which rule would they follow?)."""
    kind, layers, tokens = (fields["local_attention_kind"], fields["local_attention_layers"],
                            fields["local_attention_tokens"])
    if kind:
        _check_choice(kind, LOCAL_ATTENTION_KINDS, f"{where} column 'local_attention_kind'")
        if not layers or not tokens or layers > (fields["layers"] or 0):
            raise UserError(f"{where}: local_attention_kind {kind!r} needs local_attention_tokens >= 1 and "
                            f"1 <= local_attention_layers <= layers ({fields['layers']})")
    elif layers or tokens:
        raise UserError(f"{where} column 'local_attention_kind': empty while local_attention_layers/tokens are "
                        f"set; allowed: {', '.join(LOCAL_ATTENTION_KINDS)}")


def _split_keys(text: str, where: str) -> tuple[str, ...]:
    """'a+b' -> ('a', 'b'); '' -> (); UserError on an empty part such as 'a++b'."""
    if not text:
        return ()
    keys = tuple(part.strip() for part in text.split("+"))
    if not all(keys):
        raise UserError(f"{where}: bad value {text!r}; allowed: model keys joined by '+'")
    return keys


def _check_pipelines(catalog: Catalog, path: Path) -> None:
    """Every referenced text encoder / VAE / safety checker exists with the right kind."""
    for key in catalog.models:
        catalog.pipeline(key, where=str(path.name))


def _by_key(items: list, what: str, path: Path) -> dict:
    result = {}
    for item in items:
        if item.key in result:
            raise UserError(f"{path}: duplicate {what} key {item.key!r}")
        result[item.key] = item
    return result


def _load(directory: Path) -> Catalog:
    acc_path, model_path = directory / "accelerators.csv", directory / "models.csv"
    accelerators = [_accelerator(r, w) for w, r in _read_rows(acc_path)]
    models = [_model(r, w) for w, r in _read_rows(model_path)]
    catalog = Catalog(accelerators=_by_key(accelerators, "accelerator", acc_path),
                      models=_by_key(models, "model", model_path))
    _check_pipelines(catalog, model_path)
    return catalog


# An accelerator overlay CSV (``dcsim calibrate --out``, ``--catalog OVERLAY``): its path in
# this environment variable applies to every default catalog load of this process and of
# the worker processes it starts (sweeps, dashboards).
OVERLAY_ENV = "DCSIM_CATALOG_OVERLAY"


@functools.cache
def _default_catalog(overlay: str = "") -> Catalog:
    catalog = _load(DATA_DIR)
    return apply_overlay(catalog, Path(overlay)) if overlay else catalog


def apply_overlay(catalog: Catalog, path: Path) -> Catalog:
    """``catalog`` with the accelerator rows of the overlay CSV at ``path`` laid over it.

    An overlay row names a ``key`` and any subset of the accelerator columns; a key already
    in the catalog keeps its other columns, a new key must give every required column.
    The file is read through :mod:`sim.inputs` (bounded UTF-8 text, rows with one field
    per column, no cell repeated in messages), every number in its range
    (:data:`ACCELERATOR_RANGES`).

    Raises:
        UserError: unreadable file, no ``key`` column, unknown column, a key given twice,
        or a bad value (``file:LINE:FIELD: column: what is allowed``)."""
    source = str(path)
    with reraised_as(InputError):
        table = read_csv(path, "catalog overlay", ("key",), tuple(c for c in ACCELERATOR_COLUMNS if c != "key"),
                         extra="refuse")
    if table.rows == 0:
        raise UserError(f"{source}:2: the overlay has no accelerator rows; expected one row per accelerator")
    base = _read_rows(DATA_DIR / "accelerators.csv")
    shipped = {row["key"]: row for _, row in base}
    accelerators = dict(catalog.accelerators)
    seen: dict[str, int] = {}
    for i in range(table.rows):
        row = {c: table.columns[c][i] for c in table.header}
        line = int(table.lines[i])

        def place(column: str, line=line) -> str:
            field = f":{table.column_of(column)}" if column in table.header else ""
            return f"{source}:{line}{field}: {column}"

        key = row["key"]
        if key in seen:
            raise UserError(f"{place('key')}: the key of line {seen[key]} again; one row per accelerator")
        seen[key] = line
        given = {k: v for k, v in row.items() if v}
        if "efficiency_status" in given and "efficiency_band_pct" in row:
            # a row that restates the status restates the band too: blank = no band (calibrated)
            given["efficiency_band_pct"] = row["efficiency_band_pct"]
        merged = {**shipped.get(key, {}), **given}
        accelerators[key] = _accelerator(merged, f"{source}:{line}", place)
    return Catalog(accelerators=accelerators, models=catalog.models)


def use_overlay(path: Path | None) -> None:
    """Make every later default :func:`load_catalog` (here and in child processes) apply the
    overlay at ``path`` (None: the shipped catalog).  Raises UserError on a bad overlay."""
    if path is None:
        os.environ.pop(OVERLAY_ENV, None)
        return
    _default_catalog(str(Path(path).resolve()))  # validate now: a bad file fails before any run
    os.environ[OVERLAY_ENV] = str(Path(path).resolve())


def load_catalog(path_dir=None) -> Catalog:
    """Load ``accelerators.csv`` and ``models.csv`` from ``path_dir`` (not cached) or from
    the package data ``fleets/data/`` (cached), with the overlay of :func:`use_overlay`.

    Raises:
        UserError: naming file, line, column and value on a malformed row."""
    if path_dir is None:
        return _default_catalog(os.environ.get(OVERLAY_ENV, ""))
    return _load(Path(path_dir))
