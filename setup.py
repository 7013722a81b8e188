"""Build script: compiles the engine's hot path with Cython; everything else is in pyproject.toml.

The compiled modules are the ``.py`` files under ``sim/`` that have a ``.pxd`` beside them
(Cython's "pure Python mode"): the ``.py`` file is the only source of the logic, the ``.pxd``
only declares C types for its classes, attributes and locals. ``annotation_typing`` is off,
so the Python annotations never change a type; only the ``.pxd`` does. The same source runs
uncompiled (``DCSIM_PURE_PYTHON=1``, or when no C compiler is present: the extensions are
optional) with byte-identical results (``tests/sim/engine/test_compiled_engine.py``).

Nothing is written beside the sources: Cython's C files go to ``build/cython/``, and a
build for this tree (``setup.py build_ext --inplace``, run by ``make build``, or
``pip install -e .``) puts the extensions under ``build/ext/`` (``build/ext/sim/engine/
core.cpython-311-x86_64-linux-gnu.so``), where ``sim/_build.py`` imports them from. A
wheel (``pip install .``) carries them beside its ``.py`` files as usual.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
C_DIR = "build/cython"  # relative to HERE, like the sources: Cython mirrors sim/ under it
EXT_DIR = HERE / "build" / "ext"  # sim/_build.py: EXT_DIR


def compiled_sources() -> list[str]:
    """The modules to compile: every ``sim/**/X.py`` with an ``X.pxd`` beside it."""
    return sorted(str(p.with_suffix(".py").relative_to(HERE)) for p in HERE.glob("sim/**/*.pxd"))


def extensions() -> list:
    try:
        from Cython.Build import cythonize
    except ImportError:  # no Cython: a pure-Python install (same results, slower)
        return []
    exts = cythonize(
        compiled_sources(),
        compiler_directives={"language_level": 3, "annotation_typing": False},
        build_dir=C_DIR,
        quiet=True,
    )
    for ext in exts:
        ext.optional = True  # no C compiler: fall back to the .py file
    return exts


class BuildExtToBuildDir(build_ext):
    """``build_ext`` whose build for this tree (``--inplace``; ``pip install -e .`` asks
    for the same) writes the extensions to ``build/ext/`` instead of beside the sources."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if self.inplace:
            self.inplace = False
            self.build_lib = str(EXT_DIR)


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExtToBuildDir})
