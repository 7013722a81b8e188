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
from pathlib import Path

from sim.errors import UserError
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


def _parse_cell(text: str, scale, where: str):
    """One CSV cell -> Python value in SI; UserError naming ``where`` on a bad value."""
    if scale is None:
        return text
    if scale is bool:
        if text.lower() not in ("true", "false"):
            raise UserError(f"{where}: bad value {text!r}; allowed: true, false")
        return text.lower() == "true"
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"{where}: bad value {text!r}; allowed: a number") from None
    if not math.isfinite(value) or value < 0:
        raise UserError(f"{where}: bad value {text!r}; allowed: a finite number >= 0")
    if scale is int:
        if value != int(value):
            raise UserError(f"{where}: bad value {text!r}; allowed: an integer")
        return int(value)
    return value * scale


def _parse_row(row: dict, columns: dict, required: set, where: str) -> dict:
    fields = {}
    for column, (field, scale) in columns.items():
        text = (row.get(column) or "").strip()
        cell_where = f"{where} column '{column}'"
        if not text:
            if column in required:
                raise UserError(f"{cell_where}: empty; a value is required")
            fields[field] = False if scale is bool else ("" if scale is None else None)
            continue
        fields[field] = _parse_cell(text, scale, cell_where)
    return fields


def _read_rows(path: Path) -> list[tuple[str, dict]]:
    if not path.is_file():
        raise UserError(f"catalog file not found: {path}")
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        return [(f"{path.name} line {i}", row) for i, row in enumerate(reader, start=2)]


def _check_status(fields: dict, names: tuple[str, ...], where: str) -> None:
    for name in names:
        if not fields[name].lower().startswith(STATUS_WORDS):
            raise UserError(f"{where} column '{name}': bad status {fields[name]!r}; "
                            f"allowed: starts with one of {', '.join(STATUS_WORDS)}")


def _check_choice(value: str, allowed: tuple[str, ...], where: str) -> None:
    if value not in allowed:
        raise UserError(f"{where}: bad value {value!r}; allowed: {', '.join(allowed)}")


def _accelerator(row: dict, where: str) -> Accelerator:
    required = set(ACCELERATOR_COLUMNS) - ACCELERATOR_OPTIONAL
    fields = _parse_row(row, ACCELERATOR_COLUMNS, required, where)
    _check_choice(fields["memory_kind"], MEMORY_KINDS, f"{where} column 'memory_kind'")
    _check_status(fields, ("status", "price_status", "power_status", "network_status"), where)
    if not fields["efficiency_status"].lower().startswith(EFFICIENCY_STATUS_WORDS):
        raise UserError(f"{where} column 'efficiency_status': bad status {fields['efficiency_status']!r}; "
                        f"allowed: starts with one of {', '.join(EFFICIENCY_STATUS_WORDS)}")
    for name, default in ACCELERATOR_DEFAULTS.items():
        fields[name] = default if fields[name] is None else fields[name]
    for name in ("compute_efficiency", "bandwidth_efficiency", "scaleup_bus_efficiency"):
        if not 0 < fields[name] <= 1:
            raise UserError(f"{where} column '{name}': {fields[name]} not in (0, 1]")
    for name in ACCELERATOR_DEFAULTS:  # relative factors: the product with eta_c is capped at 1
        if not 0 < fields[name] <= 2:
            raise UserError(f"{where} column '{name}': {fields[name]} not in (0, 2]")
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

    Raises:
        UserError: missing file, no ``key`` column, unknown column, or a bad value (file,
        line, column named)."""
    rows = _read_rows(path)
    with path.open(newline="", encoding="utf-8") as handle:
        columns = next(csv.reader(handle), [])
    unknown = [c for c in columns if c not in ACCELERATOR_COLUMNS]
    if "key" not in columns or unknown:
        raise UserError(f"{path}: {'unknown column(s) ' + ', '.join(unknown) if unknown else 'no key column'}; "
                        f"allowed: {', '.join(ACCELERATOR_COLUMNS)}")
    base = _read_rows(DATA_DIR / "accelerators.csv")
    shipped = {row["key"]: row for _, row in base}
    accelerators = dict(catalog.accelerators)
    for where, row in rows:
        given = {k: v for k, v in row.items() if k in ACCELERATOR_COLUMNS and (v or "").strip()}
        if "efficiency_status" in given and "efficiency_band_pct" in row:
            # a row that restates the status restates the band too: blank = no band (calibrated)
            given["efficiency_band_pct"] = (row["efficiency_band_pct"] or "").strip()
        merged = {**shipped.get(given.get("key", ""), {}), **given}
        accelerators[merged.get("key", "")] = _accelerator(merged, f"{path.name}: {where}")
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
