"""Workload kinds: one module per kind, found through :data:`KINDS`.

Each module holds its kind's config schema, its request shapes, which replica family
serves it, how a pool rejects its requests and its own summary columns, behind the
:class:`~sim.workloads.base.WorkloadKind` interface. The engine, the results and the
shells ask :func:`kind_of` (or :data:`KINDS`) instead of branching on the kind's name.

Adding a kind: a module here with its schema and a ``WorkloadKind`` subclass, and one
line in :data:`KINDS` (see docs/architecture.md, "Where a change goes").
"""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from sim.workloads.autoregressive import Autoregressive
from sim.workloads.base import WorkloadKind
from sim.workloads.branching_search import BranchingSearch
from sim.workloads.diffusion_lm import DiffusionLM
from sim.workloads.picture import (ImageDiffusion, PictureShape, VideoDiffusion, phases_of, request_phases_of,
                                   shape_of)
from sim.workloads.service_time import ServiceTime

KINDS: dict[str, WorkloadKind] = {k.kind: k for k in (
    Autoregressive(),
    DiffusionLM(),
    ImageDiffusion(),
    VideoDiffusion(),
    BranchingSearch(),
    ServiceTime(),
)}
"""Every workload kind by its ``kind:`` tag, in the order the schema lists them."""

Workload = Annotated[Union[tuple(k.config for k in KINDS.values())], Field(discriminator="kind")]
"""The schema of one entry under ``workloads:`` (a tagged union over :data:`KINDS`)."""


def kind_of(workload) -> WorkloadKind:
    """The :class:`WorkloadKind` of a workload config (or of a ``kind`` tag)."""
    return KINDS[workload if isinstance(workload, str) else workload.kind]


def pipeline_kinds() -> dict[str, tuple[str, ...]]:
    """Kinds run as a pipeline of stages, and their stages."""
    return {name: k.stages for name, k in KINDS.items() if k.stages}


def picture_shape(workload, catalog) -> PictureShape:
    """Per-sample costs of an image/video/branching-search workload
    (:func:`sim.workloads.picture.shape_of`).

    Raises:
        UserError: a model key in its pipeline is unknown."""
    return shape_of(kind_of(workload), workload, catalog)


def picture_phases(workload, shape: PictureShape, failures: tuple = ()) -> list[tuple]:
    """The phases of one image/video/search request (:func:`sim.workloads.picture.phases_of`)."""
    return phases_of(kind_of(workload), workload, shape, failures)


def request_phases(workload, shape: PictureShape, steps: int, images: int) -> list[tuple]:
    """The phases of a request with its own steps and images
    (:func:`sim.workloads.picture.request_phases_of`)."""
    return request_phases_of(kind_of(workload), workload, shape, steps, images)
