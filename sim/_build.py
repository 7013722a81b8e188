"""Which build of the engine's compiled modules runs, chosen once: when ``sim.models`` or
``sim.engine`` is first imported (both packages import this module first; a compiled
engine module cimports ``sim.models.perf``, so the choice precedes either package).

setup.py compiles with Cython every ``sim/**/X.py`` that has an ``X.pxd`` beside it (the
``.py`` is the only source of the logic). In a source tree (``setup.py`` beside ``sim/``)
the build (``make build``, ``pip install -e .``) writes the extensions under
``build/ext/`` (``build/ext/sim/engine/core.cpython-311-x86_64-linux-gnu.so``), never
beside the sources; an installed wheel has them beside its ``.py`` files.

:data:`ENGINE_BUILD` says which build runs: ``"compiled"``, or ``"source"`` when
``DCSIM_PURE_PYTHON`` is set (to a value other than ``0``), when nothing was compiled (no
C compiler at install), when only some modules were compiled, or, in a source tree, when
a compiled module is older than its ``.py`` or ``.pxd``: an edit since the build (a
warning says so; ``make build`` rebuilds). An installed wheel's file times say nothing
about edits and are not compared. The switch is all or none: a compiled class and a
source subclass would disagree on where their attributes live. A finder placed first on
``sys.meta_path`` imports every compiled module from the file chosen for it, so no other
file (a stale extension left beside a source by an older build) is ever picked up. Both
builds give byte-identical results (``tests/sim/engine/test_compiled_engine.py``).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from pathlib import Path

SIM = Path(__file__).resolve().parent
IN_TREE = (SIM.parent / "setup.py").is_file()  # a source tree, not a wheel's copy
EXT_DIR = SIM.parent / "build" / "ext"  # where setup.py's build writes in a source tree


def compiled_sources() -> dict[str, Path]:
    """Module name -> ``.py`` path of every module that setup.py compiles."""
    return {
        ".".join(("sim",) + pxd.relative_to(SIM).with_suffix("").parts): pxd.with_suffix(".py")
        for pxd in sorted(SIM.rglob("*.pxd"))
    }


def extension_of(name: str, source: Path) -> Path | None:
    """The compiled file of module ``name`` (``build/ext/...`` in a source tree, beside
    ``source`` in a wheel), or None."""
    folder = EXT_DIR.joinpath(*name.split(".")[:-1]) if IN_TREE else source.parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = folder / (source.stem + suffix)
        if candidate.is_file():
            return candidate
    return None


class _Finder(importlib.abc.MetaPathFinder):
    """Imports each compiled module from the file chosen for it (extension or ``.py``)."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def find_spec(self, fullname, path=None, target=None):
        file = self.files.get(fullname)
        return None if file is None else importlib.util.spec_from_file_location(fullname, file)


def _stale_or_missing(sources: dict[str, Path], built: dict[str, Path | None]) -> str:
    """Why the extensions present cannot run (one missing, or older than its sources), or ""."""
    for name, py in sources.items():
        ext = built[name]
        if ext is None:
            return f"{py.name} was not compiled"
        if IN_TREE and ext.stat().st_mtime < max(py.stat().st_mtime, py.with_suffix(".pxd").stat().st_mtime):
            return f"{py.name} changed after the engine was compiled"
    return ""


def _choose_build() -> tuple[str, str]:
    """(``ENGINE_BUILD``, why), installing the finder of the chosen files."""
    sources = compiled_sources()
    built = {name: extension_of(name, py) for name, py in sources.items()}
    if os.environ.get("DCSIM_PURE_PYTHON", "0") not in ("", "0"):
        why = "DCSIM_PURE_PYTHON is set"
    elif not any(built.values()):
        why = "the engine was not compiled (no C compiler or Cython at install)"
    elif why := _stale_or_missing(sources, built):
        warnings.warn(f"dcsim: {why}; running the Python source (same results, slower). "
                      "Rebuild with `make build`.", RuntimeWarning, stacklevel=2)
    sys.meta_path.insert(0, _Finder(sources if why else built))
    if why:
        return "source", why
    return "compiled", "every module with a .pxd is compiled and up to date"


ENGINE_BUILD, ENGINE_BUILD_WHY = _choose_build()
"""``"compiled"`` or ``"source"`` (module docstring), and why."""
