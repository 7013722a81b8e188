"""Stands in for Cython's ``cython`` module where Cython is not installed (the engine then
runs from its Python source, see ``setup.py``): the class decorators the engine's
sources use are inert."""

from __future__ import annotations

from types import SimpleNamespace


def _inert(cls):
    return cls


cython = SimpleNamespace(no_gc=_inert, cclass=_inert)
