"""Write a run's tables beside the resolved scenario, atomically.

``write_results(results, out_dir)`` writes into a fresh sibling directory, then swaps it
into place: the old ``out_dir`` is renamed aside, the new one renamed in, the old one
deleted. A failure while writing removes the temporary directory and leaves ``out_dir``
as it was; readers never see a half-written result directory.

Files (units in column names):

- ``requests.parquet``: one row per request and fleet (full float precision). A streamed
  run (:mod:`sim.results.streaming`) copies its file, written during the run: the same
  columns, rows in completion order per fleet, one row group per batch. A streamed cell
  run (:mod:`sim.studies.cells`) writes a directory ``requests/`` instead, one
  ``part-KKKKK.parquet`` per cell (``pandas.read_parquet`` reads the directory whole).
- ``pools.csv``, ``summary.csv``, ``fleets.csv``: floats written with
  :data:`FLOAT_FORMAT`, so the same scenario and seed give byte-identical files.
- ``timeseries.parquet``: per fleet, pool and sampled instant, requests outstanding,
  queued (at the replicas and in central queues), running (the batch), KV/activation
  memory in use and cumulative busy time (``sim.engine.core`` sampler; queue length over
  time).
- ``scenario.yaml``: the resolved scenario (defaults filled in) that made them.
- ``operations.csv`` and ``capacity.csv`` (only when a pool has residency, autoscale or
  failures: :mod:`sim.engine.operations`): per pool, interruptions, requests retried and
  lost, cold starts, loads, replica-seconds powered/serving/failed, GPU-hours and their
  cost; and the serving/powered/failed replicas at each change.
- With ``engine.output: summary`` no ``requests.parquet`` is written (summary only).

Files are written 0644 and directories 0755 (results are shared within a group). A run
killed between the two renames (SIGKILL, power loss) can leave ``.NAME.tmp-*`` or
``.NAME.old-*`` beside ``NAME``; :func:`remove_leftovers` deletes them and every write
into ``NAME`` calls it first. A full disk or any other write failure is a
:class:`~sim.errors.UserError` and leaves the previous result in place.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sim.errors import UserError
from sim.results.outputs import MARKER, mark, output_dir
from sim.results.tables import Results
from sim.scenario import scenario_to_yaml

FLOAT_FORMAT = "%.10g"
OUTPUT_FILES = ("requests.parquet", "pools.csv", "summary.csv", "fleets.csv", "timeseries.parquet", "scenario.yaml")
OPERATIONS_FILES = ("operations.csv", "capacity.csv")
"""Written besides :data:`OUTPUT_FILES` when a pool has residency, autoscale or failures."""
RESULT_NAMES = (*OUTPUT_FILES, *OPERATIONS_FILES, "requests", "headroom.csv")
"""Everything a ``run --out`` directory may hold (``requests/``: streamed cells;
``headroom.csv``: ``--planner`` with headroom), besides dcsim's marker."""
FILE_MODE = 0o644
DIR_MODE = 0o755


def write_parquet(df: pd.DataFrame, path: Path) -> None:
    """Parquet without the pandas index; pyarrow output is deterministic for equal data."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    pq.write_table(table, path)


def write_csv(df: pd.DataFrame, path: Path) -> None:
    """CSV with a fixed float format and ``\\n`` line ends (byte-identical reruns)."""
    df.to_csv(path, index=False, float_format=FLOAT_FORMAT, lineterminator="\n")


def write_files(results: Results, directory: Path) -> None:
    """Write the output files (:data:`OUTPUT_FILES`) into an existing, empty ``directory``."""
    if results.requests_file is not None and results.requests_file.is_dir():  # streamed cells: one part per cell
        shutil.copytree(results.requests_file, directory / "requests")
        for path in (directory / "requests").iterdir():
            path.chmod(FILE_MODE)
    elif results.requests_file is not None:
        shutil.copyfile(results.requests_file, directory / "requests.parquet")
    elif results.scenario.engine.output == "rows":  # engine.output: summary keeps no request rows
        write_parquet(results.requests, directory / "requests.parquet")
    if results.operations is not None:  # only when some pool has residency, autoscale or failures
        write_csv(results.operations, directory / "operations.csv")
        write_csv(results.capacity, directory / "capacity.csv")
    write_csv(results.pools, directory / "pools.csv")
    write_csv(results.summary, directory / "summary.csv")
    write_csv(results.fleets, directory / "fleets.csv")
    write_parquet(results.timeseries, directory / "timeseries.parquet")
    (directory / "scenario.yaml").write_text(scenario_to_yaml(results.scenario), encoding="utf-8")
    mark(directory, "run")
    for path in directory.iterdir():
        path.chmod(DIR_MODE if path.is_dir() else FILE_MODE)
    directory.chmod(DIR_MODE)


def make_dirs(directory: Path) -> None:
    """``mkdir -p`` whose new directories are 0755 whatever the umask."""
    missing = []
    while not directory.exists() and directory != directory.parent:
        missing.append(directory)
        directory = directory.parent
    for new in reversed(missing):
        new.mkdir(exist_ok=True)
        new.chmod(DIR_MODE)


def claim_dir(directory: Path, command: str) -> None:
    """Create ``directory`` (0755, parents too) and leave dcsim's marker in it
    (:data:`sim.results.outputs.MARKER`: later runs may write there again).

    Raises:
        UserError: it cannot be created or written."""
    try:
        make_dirs(directory)
    except OSError as err:
        raise UserError(f"{directory}: cannot create it ({err.strerror})") from None
    write_file_atomic(directory / MARKER, lambda p: p.write_text(f"written by dcsim {command}\n", encoding="utf-8"))


def remove_leftovers(target: Path) -> list[Path]:
    """Delete ``.NAME.tmp-*`` / ``.NAME.old-*`` left beside ``target`` by a killed run;
    returns what was removed."""
    parent = target.parent
    if not parent.is_dir():
        return []
    removed = []
    for pattern in (f".{target.name}.tmp-*", f".{target.name}.old-*"):
        for path in parent.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def check_writable(target: Path, option: str, directory: bool = True, replace: bool = True) -> None:
    """Find, before any simulation, what would make writing ``target`` fail: a dangling
    symlink, a mount point (cannot be replaced by rename), a file where a directory is
    expected (or the reverse), or a parent that cannot be written (read-only file system,
    permissions). Probes with a temporary file in the nearest existing parent, removed at once.

    Raises:
        UserError: naming ``option``, the path and the reason.
    """
    target = Path(os.path.abspath(target))
    if target.is_symlink() and not target.exists():
        raise UserError(f"{option} {target}: is a symlink to a missing path ({os.readlink(target)}); "
                        f"remove it or choose another path")
    if directory and replace and os.path.ismount(target):
        raise UserError(f"{option} {target}: is a mount point, which cannot be replaced atomically; "
                        f"write into a directory below it")
    if target.exists() and directory and not target.is_dir():
        raise UserError(f"{option} {target}: exists and is not a directory; choose another path")
    if target.exists() and not directory and target.is_dir():
        raise UserError(f"{option} {target}: is a directory; give a file path such as {target / 'planner.csv'}")
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"{option} {target}: {parent} is not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.tmp-", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise UserError(f"{option} {target}: cannot write in {parent} ({err.strerror}); "
                        f"choose a writable directory") from None


def _write_failed(target: Path, err: OSError) -> UserError:
    reason = "the disk is full" if err.errno in (errno.ENOSPC, errno.EDQUOT) else err.strerror or str(err)
    return UserError(f"{target}: cannot write ({reason}); nothing was written, any earlier result is unchanged")


def check_replaceable(out_dir: Path, force: bool = False) -> Path:
    """Refuse to replace anything but a new or empty directory or an earlier result
    directory of dcsim (:func:`sim.results.outputs.output_dir`); returns it resolved.

    Raises:
        UserError: ``out_dir`` is a file, a link or a device, the current directory, or
            a directory holding other files (replacing it would delete them).
    """
    return output_dir(out_dir, "--out", force=force, replace_files=RESULT_NAMES)


def write_results(results: Results, out_dir: str | Path, force: bool = False) -> Path:
    """Write ``results`` to ``out_dir`` atomically (see module docstring); returns the path.

    Raises:
        UserError: ``out_dir`` cannot be replaced or its parent cannot be written.
    """
    out_dir = check_replaceable(Path(out_dir), force)
    remove_leftovers(out_dir)
    try:
        make_dirs(out_dir.parent)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    except OSError as err:
        raise UserError(f"--out {out_dir}: cannot create a directory there ({err.strerror})") from None
    try:
        write_files(results, tmp)
        _swap_in(tmp, out_dir)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _write_failed(out_dir, err) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _swap_in(new: Path, target: Path) -> None:
    """Rename ``target`` aside (if present), ``new`` into its place, then delete the old."""
    if not target.exists():
        os.rename(new, target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
    os.rmdir(old)  # reserve a unique name; rename needs it absent
    os.rename(target, old)
    try:
        os.rename(new, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def write_file_atomic(path: str | Path, write, cleanup: bool = True) -> Path:
    """Call ``write(tmp_path)`` on a temporary file beside ``path``, then rename it into
    place (readers see the old file or the new one, never half of one). The file is made
    0644; with ``cleanup``, leftovers of a killed earlier write are removed first.

    Raises:
        UserError: the directory cannot be created or written."""
    path = Path(path).absolute()
    if path.is_symlink() or path.exists() and not path.is_file():
        raise UserError(f"{path}: is {'a symlink' if path.is_symlink() else 'not a regular file'}; dcsim writes "
                        f"regular files only, never through a link or onto a device")
    if cleanup:
        remove_leftovers(path)
    try:
        make_dirs(path.parent)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
        os.close(fd)
    except OSError as err:
        raise UserError(f"{path}: cannot write there ({err.strerror})") from None
    tmp = Path(name)
    try:
        write(tmp)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise _write_failed(path, err) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
