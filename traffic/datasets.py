"""Where dcsim finds its data: the traces it ships, and optional datasets it may not ship.

Shipped (in the repository and in the installed package): :data:`SHIPPED_TRACES_DIR`
(``traffic/data/``: the Azure LLM inference traces 2023, CC BY 4.0, and the Mooncake
FAST'25 conversation trace, Apache-2.0; ``NOTICE.md`` there gives sources, licences and
sha256). A scenario names them by a plain path, e.g. ``../traffic/data/...`` from
``scenarios/``.

Optional datasets (:data:`OPTIONAL_DATASETS`) are published files that dcsim may not
redistribute; today the Alibaba GenAI image-generation trace, whose repository has no
licence file. A user downloads each once into the *optional-data directory*, chosen by
:func:`data_dir`:

1. the ``--data-dir DIR`` option of ``dcsim data`` (to check a directory),
2. else the environment variable ``DCSIM_DATA_DIR`` (what every command reads; Dask
   workers need it too),
3. else ``$XDG_DATA_HOME/dcsim``, i.e. ``~/.local/share/dcsim`` when XDG_DATA_HOME is unset.

A scenario names an optional file as ``data:`` + its path relative to that directory::

    arrival: {kind: trace, format: genai_csv, path: "data:alibaba_genai_lora_request_trace.csv"}

The prefix means "this published file, exactly": the name must be one of
:data:`OPTIONAL_DATASETS`, and the file must have the registered size and sha256.
Otherwise reading it raises :class:`sim.errors.TraceError` (exit code 2) whose message
names the file, its sha256 and size, where to download it and where to put it. The
reference is resolved only when the trace is read (:func:`traffic.traces.resolve_trace_file`),
so a saved ``scenario.yaml`` keeps ``data:...`` and reruns on any machine that has the
file. A plain path (no prefix) to the same file is read like any trace, unchecked.
``dcsim data`` lists every optional dataset with its source and status.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from sim.errors import TraceError

SHIPPED_TRACES_DIR = Path(__file__).resolve().parent / "data"
DATA_DIR_ENV = "DCSIM_DATA_DIR"
DATASET_PREFIX = "data:"


@dataclass(frozen=True, slots=True)
class OptionalDataset:
    """One published file dcsim can use but does not ship.

    Attributes:
        name: its path relative to the optional-data directory (what follows ``data:``).
        title: what it is, in a few words.
        source: repository, path and commit it was published at.
        url: the file's download address at that commit.
        paper: the publication that describes it.
        licence: its licence, and so why it is not shipped.
        sha256: hex digest of the published file's bytes.
        size_bytes: its size.
        used_by: the dcsim files that read it.
    """

    name: str
    title: str
    source: str
    url: str
    paper: str
    licence: str
    sha256: str
    size_bytes: int
    used_by: str


# Digest and size measured on the file at commit 7a6c496 (2026-11-26; the same bytes as
# the project's reference copy, ../shared/data/traces/alibaba_genai_lora_request_trace.csv).
ALIBABA_GENAI = OptionalDataset(
    name="alibaba_genai_lora_request_trace.csv",
    title="Alibaba GenAI LoRA request trace (GenTD26): 26,823 Stable-Diffusion requests, "
          "2024-11-15 to 2024-12-08",
    source="github.com/alibaba/clusterdata cluster-trace-v2026-GenAI/lora_request_trace.csv "
           "@7a6c496e4f4b6ce6150be8f881cb051bf2abff42",
    url="https://raw.githubusercontent.com/alibaba/clusterdata/7a6c496e4f4b6ce6150be8f881cb051bf2abff42/"
        "cluster-trace-v2026-GenAI/lora_request_trace.csv",
    paper="Yanying Lin et al., \"Understanding Diffusion Model Serving in Production: A Top-Down "
          "Analysis of Workload, Scheduling, and Resource Efficiency\", ACM SoCC 2025",
    licence="none: its repository has no licence file (published for research use), so dcsim does not ship it",
    sha256="263fb88f1095f62d360cf89ded8cfc24fa2c5d111c1b16e7aaa9ccbfc4b37d78",
    size_bytes=2_012_418,
    used_by="scenarios/genai-image.yaml, sim/studies/genai_report.py, python -m traffic.demand_fit",
)
OPTIONAL_DATASETS: dict[str, OptionalDataset] = {ALIBABA_GENAI.name: ALIBABA_GENAI}


def data_dir(override: str | Path | None = None) -> tuple[Path, str]:
    """The optional-data directory and how it was chosen (``--data-dir``, the
    environment variable, or ``default``); see the module docstring for the order."""
    if override is not None and str(override):
        return Path(override).expanduser(), "--data-dir"
    value = os.environ.get(DATA_DIR_ENV, "")
    if value:
        return Path(value).expanduser(), DATA_DIR_ENV
    xdg = os.environ.get("XDG_DATA_HOME", "") or str(Path("~/.local/share").expanduser())
    return Path(xdg) / "dcsim", "default"


def is_dataset_ref(path: str | Path | None) -> bool:
    """True when ``path`` names an optional dataset (``data:NAME``)."""
    return isinstance(path, (str, Path)) and str(path).startswith(DATASET_PREFIX)


def file_sha256(path: Path) -> str:
    """Hex sha256 of the file's bytes (cached by path, size and modification time)."""
    stat = path.stat()
    return _sha256(path.resolve(), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=32)
def _sha256(path: Path, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check(dataset: OptionalDataset, directory: Path) -> str | None:
    """None when ``directory`` holds ``dataset`` with its registered size and sha256;
    otherwise what is wrong, in a few words."""
    path = directory / dataset.name
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    if size != dataset.size_bytes:
        return f"wrong file: {size:,} bytes, expected {dataset.size_bytes:,}"
    digest = file_sha256(path)
    if digest != dataset.sha256:
        return f"wrong file: sha256 {digest}"
    return None


def resolve_dataset_ref(ref: str | Path) -> Path:
    """The file ``data:NAME`` names, in the optional-data directory, after checking it.

    Raises:
        TraceError: NAME is not an optional dataset (the message lists them), or the file
            is missing or is not the published one (the message says how to get it)."""
    name = str(ref)[len(DATASET_PREFIX):]
    dataset = OPTIONAL_DATASETS.get(name)
    if dataset is None:
        allowed = ", ".join(DATASET_PREFIX + n for n in OPTIONAL_DATASETS)
        raise TraceError(f"trace path {str(ref)!r}: no optional dataset of that name; allowed: {allowed} "
                         f"(or a plain file path without the '{DATASET_PREFIX}' prefix)")
    directory, chosen = data_dir()
    problem = check(dataset, directory)
    if problem is not None:
        raise TraceError(how_to_get(dataset, directory, chosen, problem))
    return (directory / dataset.name).resolve()


def how_to_get(dataset: OptionalDataset, directory: Path, chosen: str, problem: str) -> str:
    """The message for a missing or wrong optional file: which, where, how to get it."""
    target = directory / dataset.name
    where = {"default": f"the default; set {DATA_DIR_ENV} to use another directory",
             DATA_DIR_ENV: f"from {DATA_DIR_ENV}"}.get(chosen, f"from {chosen}")
    return (f"optional dataset {DATASET_PREFIX}{dataset.name}: {problem}: {target} "
            f"(optional-data directory {directory}, {where}).\n"
            f"It is the {dataset.title}. Licence: {dataset.licence}.\n"
            f"Get it and put it there:\n"
            f"  mkdir -p {directory}\n"
            f"  curl -L -o {target} {dataset.url}\n"
            f"Expected: {dataset.size_bytes:,} bytes, sha256 {dataset.sha256}. "
            f"`dcsim data` checks it; docs/data.md explains the optional data.")


SHIPPED_SUMMARY = ("Shipped with dcsim (no download): traffic/data/ (Azure LLM inference traces 2023, "
                   "CC BY 4.0; Mooncake FAST'25 conversation trace, Apache-2.0) and fleets/data/reference/ "
                   "(MLPerf Inference points, Apache-2.0; Vidur operator profiles, MIT); sources, licences "
                   "and sha256 in the NOTICE.md of each folder.")


def datasets_text(override: str | Path | None = None) -> str:
    """What ``dcsim data`` prints: every optional dataset with its source, checksum, the
    place dcsim looks for it and whether it is there, then what ships."""
    directory, chosen = data_dir(override)
    where = {"default": f"default; set {DATA_DIR_ENV} to use another",
             DATA_DIR_ENV: f"from {DATA_DIR_ENV}"}.get(chosen, f"from {chosen}")
    lines = [f"Optional datasets (not shipped; a scenario names one as {DATASET_PREFIX}NAME)",
             f"optional-data directory: {directory} ({where})", ""]
    for dataset in OPTIONAL_DATASETS.values():
        problem = check(dataset, directory)
        target = directory / dataset.name
        lines += [f"{DATASET_PREFIX}{dataset.name}",
                  f"  what      {dataset.title}",
                  f"  source    {dataset.source}",
                  f"  paper     {dataset.paper}",
                  f"  licence   {dataset.licence}",
                  f"  sha256    {dataset.sha256}",
                  f"  size      {dataset.size_bytes:,} bytes",
                  f"  used by   {dataset.used_by}",
                  f"  looked at {target}",
                  f"  status    {'present, sha256 matches' if problem is None else problem}"]
        if problem is not None:
            lines += [f"  get it    mkdir -p {directory} && curl -L -o {target} {dataset.url}"]
        lines.append("")
    return "\n".join(lines + [SHIPPED_SUMMARY]) + "\n"
