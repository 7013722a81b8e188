"""Where dcsim may write: under the path the user gave, never over what it did not write.

Every command checks its targets here before any simulation (each refusal is a
:class:`~sim.errors.UserError` naming the option, the path and what to do):

- a target that is a **symlink** is refused (a rename would replace the link, not what
  it points to): give the path it points to;
- a target that exists as something else than expected (a **device** such as
  ``/dev/full``, a FIFO, a socket; a file where a directory is expected or the reverse)
  is refused: a rename would put a regular file in its place;
- an output **directory** may not be the current directory or one of its parents
  (``--out .`` would mix dcsim's files with yours), and may only be reused when it is
  empty or carries dcsim's marker file :data:`MARKER` (dcsim made it); ``--force``
  allows another directory;
- an output **file** that exists may only be replaced when dcsim wrote it (its
  ``signature``: the planner CSV's header, the overlay's ``dcsim calibrate`` source, the
  report's title); ``--force`` allows another file;
- every name written inside a directory matches :data:`SAFE_NAME` (letters, digits,
  ``.``, ``_``, ``-``; no ``/``, no leading dot, no ``..``) and stays inside it
  (:func:`inside`): a plan's quarter ``q/../../x`` is refused when the plan is read.

Paths are resolved (``..`` and parent symlinks) once, and the resolved directory is
where everything goes.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Callable

from sim.errors import UserError
from sim.inputs import file_type

MARKER = ".dcsim"
"""The file dcsim leaves in every directory it creates for its outputs."""
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""What a name written into an output directory may be."""
SAFE_NAME_TEXT = "letters, digits, '.', '_' and '-', starting with a letter or digit, at most 128 characters"


def check_name(name: str, what: str) -> str:
    """``name`` if it can be (part of) a file name (:data:`SAFE_NAME`, no ``..``).

    Raises:
        ValueError: naming ``what`` and the rule (pydantic reports it at the field)."""
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name) or ".." in name:
        raise ValueError(f"{what} becomes part of a file name: use {SAFE_NAME_TEXT}, without '..'")
    return name


def inside(directory: Path, name: str) -> Path:
    """``directory / name`` for a safe ``name`` that stays inside ``directory``.

    Raises:
        UserError: the name is not safe (a bug upstream: names are checked when read)."""
    try:
        check_name(name, f"output name {name!r}")
    except ValueError as err:
        raise UserError(str(err)) from None
    path = directory / name
    if path.parent != directory:
        raise UserError(f"output name {name!r} leaves {directory}")
    return path


def _lstat(path: Path):
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise UserError(f"{path}: cannot inspect it ({err.strerror})") from None


def _refuse_link_or_special(target: Path, option: str, directory: bool) -> os.stat_result | None:
    info = _lstat(target)
    if info is None:
        return None
    if stat.S_ISLNK(info.st_mode):
        raise UserError(f"{option} {target}: is a symlink; dcsim does not write through links "
                        f"(give the path it points to, {os.path.realpath(target)})")
    expected = stat.S_ISDIR if directory else stat.S_ISREG
    if not expected(info.st_mode):
        kind = "a regular file" if stat.S_ISREG(info.st_mode) else file_type(info.st_mode)
        wanted = "a directory" if directory else "a file path"
        raise UserError(f"{option} {target}: is {kind}, not {'a directory' if directory else 'a regular file'}; "
                        f"give {wanted} dcsim may create")
    return info


def output_dir(target: str | Path, option: str = "--out", *, force: bool = False,
               replace_files: tuple[str, ...] = ()) -> Path:
    """The resolved directory to write into, checked (module docstring). ``replace_files``:
    names an existing dcsim directory may hold (anything else is the user's, refused
    unless ``force``, since the directory is replaced as a whole); empty: the directory
    is written into, not replaced.

    Raises:
        UserError: naming ``option``, the path and the reason."""
    given = Path(os.path.abspath(target))
    _refuse_link_or_special(given, option, directory=True)
    resolved = given.resolve()
    cwd = Path.cwd().resolve()
    if resolved == cwd or resolved in cwd.parents:
        raise UserError(f"{option} {target}: is the current directory{'' if resolved == cwd else ' or above it'}; "
                        f"dcsim writes several files there: give a new directory, e.g. {option} results")
    if resolved.is_dir():
        entries = sorted(p.name for p in resolved.iterdir())
        if entries and MARKER not in entries and not force:
            shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
            raise UserError(f"{option} {target}: directory holds files dcsim did not write ({shown}; no {MARKER} "
                            f"marker); choose an empty or new directory, or pass --force")
        foreign = [e for e in entries if e != MARKER and not e.startswith(".") and e not in replace_files]
        if replace_files and foreign and not force:
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise UserError(f"{option} {target}: directory holds files that are not dcsim results ({shown}); "
                            f"it would be replaced as a whole: choose an empty or new directory, or pass --force")
    return resolved


def mark(directory: Path, command: str) -> None:
    """Leave dcsim's marker in a directory being written (e.g. the temporary directory of
    an atomic result)."""
    (directory / MARKER).write_text(f"written by dcsim {command}\n", encoding="utf-8")


def output_file(target: str | Path, option: str, *, force: bool = False,
                signature: Callable[[bytes], bool] | None = None) -> Path:
    """The resolved file to write, checked (module docstring): an existing file is
    replaced only when ``signature`` (on its first 64 kB) says dcsim wrote it.

    Raises:
        UserError: naming ``option``, the path and the reason."""
    given = Path(os.path.abspath(target))
    info = _refuse_link_or_special(given, option, directory=False)
    if info is not None and not force:
        head = _head(given)
        if signature is None or not signature(head):
            raise UserError(f"{option} {target}: exists and was not written by dcsim; choose another path, or pass "
                            f"--force to replace it")
    return given.parent.resolve() / given.name


def _head(path: Path) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(65536)
    except OSError as err:
        raise UserError(f"{path}: cannot read it to see whether dcsim wrote it ({err.strerror})") from None


def planner_signature(head: bytes) -> bool:
    """A planner CSV: its header names racks, nodes and accelerators_total and ends with
    the headroom columns (:func:`sim.results.planner_csv.planner_table`)."""
    first = head.split(b"\n", 1)[0]
    return b",racks,nodes,accelerators_total" in first and first.rstrip(b"\r").endswith(b"headroom_pct")


def overlay_signature(head: bytes) -> bool:
    """An overlay written by ``dcsim calibrate`` (its rows' source says so)."""
    return head.startswith(b"key,") and b"dcsim calibrate" in head


def report_signature(head: bytes) -> bool:
    """An HTML report of ``dcsim report``."""
    return head.startswith(b"<!DOCTYPE html><html><head><meta charset='utf-8'><title>dcsim ")
