"""The data dcsim ships and the optional data it does not (issue 22, item 4).

Shipped: every data file under traffic/data and fleets/data/reference is listed in its
folder's NOTICE.md with the sha256 computed here with hashlib (the notice is true, the
copies are byte for byte), every tracked file stays under 8 MB, and the unlicensed Alibaba
trace is not among them. Optional: ``data:NAME`` resolves in the optional-data directory
only to the published bytes; otherwise the error names the file, its sha256, where to get
it and where to put it."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from data_files import REFERENCE, REPO, TRACES
from sim.errors import TraceError
from sim.loader import resolve_paths
from traffic import datasets
from traffic.datasets import ALIBABA_GENAI, OptionalDataset, data_dir, resolve_dataset_ref
from traffic.traces import load_trace

MAX_FILE_BYTES = 8 * 1024 * 1024
ROWS = "".join(f"2023-11-16 18:00:{s:02d}.0,{100 + s},20\n" for s in range(0, 40, 2))
CSV_BYTES = ("TIMESTAMP,ContextTokens,GeneratedTokens\n" + ROWS).encode()
DATA_SUFFIXES = {".csv", ".jsonl"}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def notice_rows(notice: Path) -> dict[str, str]:
    """``file -> sha256`` from the notice's markdown tables (``| file | bytes | sha256 |``)."""
    rows = re.findall(r"^\| ([\w./-]+) \| [\d,]+ \| ([0-9a-f]{64}) \|", notice.read_text(encoding="utf-8"), re.M)
    return dict(rows)


@pytest.mark.parametrize("folder", [TRACES, REFERENCE, REFERENCE / "vidur_profiling"], ids=["traces", "reference", "vidur"])
def test_every_shipped_data_file_is_in_its_notice_with_its_sha256(folder):
    listed = notice_rows(folder / "NOTICE.md")
    nested = folder / "vidur_profiling"
    files = [p for p in folder.rglob("*") if p.suffix in DATA_SUFFIXES and not (folder == REFERENCE and nested in p.parents)]
    assert files and len(listed) == len(files)
    for path in files:
        assert listed[path.relative_to(folder).as_posix()] == sha256(path), path


def test_shipped_folders_carry_their_licence_texts():
    assert "Attribution 4.0 International" in (TRACES / "LICENSE-CC-BY-4.0.txt").read_text(encoding="utf-8-sig")
    for apache in (TRACES / "LICENSE-APACHE-2.0.txt", REFERENCE / "LICENSE-APACHE-2.0.txt"):
        assert "Apache License" in apache.read_text(encoding="utf-8") and "Version 2.0" in apache.read_text(encoding="utf-8")
    assert "MIT License" in (REFERENCE / "vidur_profiling" / "LICENSE").read_text(encoding="utf-8")


def test_data_files_stay_small_and_the_unlicensed_trace_is_not_shipped():
    for folder in (TRACES, REPO / "fleets" / "data"):
        for path in folder.rglob("*"):
            if path.is_file():
                assert path.stat().st_size < MAX_FILE_BYTES, path
                assert "alibaba" not in path.name.lower(), path
                if path.stat().st_size == ALIBABA_GENAI.size_bytes:
                    assert sha256(path) != ALIBABA_GENAI.sha256, path


def test_data_dir_order_flag_then_variable_then_xdg_default(monkeypatch, tmp_path):
    monkeypatch.setenv("DCSIM_DATA_DIR", str(tmp_path / "env"))
    assert data_dir(tmp_path / "flag") == (tmp_path / "flag", "--data-dir")
    assert data_dir() == (tmp_path / "env", "DCSIM_DATA_DIR")
    monkeypatch.delenv("DCSIM_DATA_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert data_dir() == (tmp_path / "xdg" / "dcsim", "default")
    monkeypatch.delenv("XDG_DATA_HOME")
    assert data_dir() == (Path.home() / ".local" / "share" / "dcsim", "default")


@pytest.fixture
def small_dataset(tmp_path, monkeypatch) -> OptionalDataset:
    """A registered optional dataset whose published bytes are CSV_BYTES."""
    dataset = OptionalDataset(name="small.csv", title="a small test trace", source="tests", url="https://example.org/small.csv",
                              paper="none", licence="none", sha256=hashlib.sha256(CSV_BYTES).hexdigest(),
                              size_bytes=len(CSV_BYTES), used_by="tests")
    monkeypatch.setitem(datasets.OPTIONAL_DATASETS, dataset.name, dataset)
    monkeypatch.setenv("DCSIM_DATA_DIR", str(tmp_path / "optional"))
    return dataset


def test_a_present_dataset_is_read_through_its_reference(small_dataset, tmp_path):
    (tmp_path / "optional").mkdir()
    (tmp_path / "optional" / "small.csv").write_bytes(CSV_BYTES)
    trace = load_trace("data:small.csv", "azure_csv")
    assert trace.rows == 20 and trace.source_path == (tmp_path / "optional" / "small.csv").resolve()
    assert trace.prompt_tokens.tolist() == [100 + s for s in range(0, 40, 2)]


def test_a_missing_dataset_says_which_file_its_sha256_and_how_to_get_it(small_dataset, tmp_path):
    with pytest.raises(TraceError) as err:
        load_trace("data:small.csv", "azure_csv")
    message = str(err.value)
    for part in ("data:small.csv", "missing", str(tmp_path / "optional" / "small.csv"), small_dataset.sha256,
                 f"{len(CSV_BYTES):,} bytes", "curl -L -o", small_dataset.url, "DCSIM_DATA_DIR"):
        assert part in message, part


def test_a_file_with_other_bytes_is_refused(small_dataset, tmp_path):
    (tmp_path / "optional").mkdir()
    changed = CSV_BYTES.replace(b",20\n", b",21\n")  # same size, other bytes
    (tmp_path / "optional" / "small.csv").write_bytes(changed)
    with pytest.raises(TraceError, match=f"wrong file: sha256 {hashlib.sha256(changed).hexdigest()}"):
        load_trace("data:small.csv", "azure_csv")
    (tmp_path / "optional" / "small.csv").write_bytes(CSV_BYTES + b"\n")
    with pytest.raises(TraceError, match=f"wrong file: {len(CSV_BYTES) + 1:,} bytes"):
        resolve_dataset_ref("data:small.csv")


def test_an_unknown_dataset_lists_the_known_ones():
    with pytest.raises(TraceError, match="allowed: .*data:alibaba_genai_lora_request_trace.csv"):
        resolve_dataset_ref("data:nope.csv")


def test_scenario_loading_keeps_a_dataset_reference_as_written(tmp_path):
    data = {"workloads": {"w": {"arrival": {"kind": "trace", "path": "data:small.csv"}}}}
    assert resolve_paths(data, tmp_path / "scenarios")["workloads"]["w"]["arrival"]["path"] == "data:small.csv"
