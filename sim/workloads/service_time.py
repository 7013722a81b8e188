"""A request that holds one batch slot of a replica for a sampled service time.

Not a model of any real job: it exists so the engine can be checked against queueing
theory (M/M/c with exponential service, Erlang-C)."""

from __future__ import annotations

from typing import Literal

import numpy as np

from sim.workloads.base import SLO, Strict, WorkloadKind
from traffic.arrivals import ArrivalProcess as Arrival
from traffic.distributions import Distribution


class ServiceTimeWorkload(Strict):
    """A request that holds one batch slot of a replica for a sampled service time.

    Not a model of any real job: it exists so the engine can be checked against queueing
    theory (M/M/c with exponential service, Erlang-C)."""

    kind: Literal["service_time"]
    arrival: Arrival
    service_s: Distribution
    slo: SLO = SLO()
    model: None = None


class ServiceTime(WorkloadKind):
    kind = "service_time"
    config = ServiceTimeWorkload
    family = "service"
    label = "service"
    marker = "x"

    def draw(self, wl, shapes, rows, draws, default_steps) -> None:
        shapes.service = np.asarray(wl.service_s.sample(draws.service, len(shapes.prompt)), dtype=float)
