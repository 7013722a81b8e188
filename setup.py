"""Build script: compiles the engine's hot path with Cython; everything else is in pyproject.toml.

The compiled modules are the ``.py`` files under ``sim/`` that have a ``.pxd`` beside them
(Cython's "pure Python mode"): the ``.py`` file is the only source of the logic, the ``.pxd``
only declares C types for its classes, attributes and locals. ``annotation_typing`` is off,
so the Python annotations never change a type; only the ``.pxd`` does. The same source runs
uncompiled (``DCSIM_PURE_PYTHON=1``, or when no C compiler is present: the extensions are
optional) with byte-identical results (``tests/sim/engine/test_compiled_engine.py``).
"""

from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent


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
        quiet=True,
    )
    for ext in exts:
        ext.optional = True  # no C compiler: fall back to the .py file
    return exts


setup(ext_modules=extensions())
