"""Multi-stage journeys: which pool runs each pipeline stage, and the hand-offs between.

A request of an image/video/search workload runs a list of phases (``sim.workloads.phases``);
each phase's stage (encode, denoise, verify, safety, decode) is served by a router
(the pools placed for that stage, or the workload's main pools). Consecutive phases on
the same router form one *leg*. When a leg ends on one pool and the next leg runs
elsewhere, the request is handed off: it pays the transfer of its latents over the link
between the two pools (the scale-up link when both pools share a ``domain`` label and
accelerator type, otherwise the sender's scale-out NIC), then the receiving pool's queue.
"""

from __future__ import annotations

from sim.engine.request import COMPLETED, Request
from sim.workloads.phases import STAGE
from sim.workloads import picture_phases, request_phases
from sim.workloads.picture import PictureShape


class JourneyPlanner:
    """Splits one workload's requests into legs for one fleet.

    Args:
        workload: the workload config (image/video/search kinds).
        shape: its per-sample costs.
        routers: stage code -> position of the router serving that stage in the run's
            ``routers`` (legs name routers by position, never hold them: a request holds
            no engine object, see :class:`sim.engine.run.RunContext`).
        variants: CFG off/on (False/True) -> per-sample costs, for requests that set
            their own ``cfg`` (trace replay); requests with their own steps, images or
            CFG share legs by (steps, images, cfg).
    """

    def __init__(self, workload, shape: PictureShape, routers: dict[int, int],
                 variants: dict[bool, PictureShape] | None = None) -> None:
        self.workload = workload
        self.shape = shape
        self.routers = routers
        self.variants = variants or {}
        self._plain: list | None = None  # legs of a request without verifier failures
        self._own: dict[tuple, list] = {}  # (steps, images, cfg) -> legs
        # a leg: (router position, [phase, ...])

    def plan(self, req: Request) -> list[tuple[int, list]]:
        if (req.steps or req.images != 1 or req.cfg >= 0) and not req.draws:
            key = (req.steps, req.images, req.cfg)
            if key not in self._own:
                shape = self.variants.get(bool(req.cfg), self.shape) if req.cfg >= 0 else self.shape
                self._own[key] = self._legs(request_phases(self.workload, shape, req.steps, req.images))
            return self._own[key]
        if not req.draws and self._plain is not None:
            return self._plain
        legs = self._legs(picture_phases(self.workload, self.shape, req.draws))
        if not req.draws:
            self._plain = legs
        return legs

    def _legs(self, phases: list[tuple]) -> list[tuple[int, list]]:
        legs: list[tuple[int, list]] = []
        for phase in phases:
            position = self.routers[phase[STAGE]]
            if legs and legs[-1][0] == position:
                legs[-1][1].append(phase)
            else:
                legs.append((position, [phase]))
        return legs


class Handoffs:
    """Ends a request's leg: the next leg after a transfer, or completion."""

    def __init__(self, run, latent_bytes: dict[int, float]) -> None:
        self.run = run
        self.env = run.env
        self.latent_bytes = latent_bytes  # workload index -> bytes per sample handed over

    def leg_done(self, pool, req: Request) -> None:
        req.leg += 1
        if req.journey is None or req.leg >= len(req.journey):
            self._complete(req)
            return
        position, phases = req.journey[req.leg]
        router = self.run.routers[position]
        width = max(p[1] for p in phases)
        delay = transfer_s(pool, router.pools[0], self.latent_bytes.get(req.workload, 0.0) * width)
        req.handoffs += 1
        req.handoff_s += delay
        timer = self.env.timeout(delay)
        timer.callbacks.append(lambda _event, req=req, router=router: self._arrive(req, router))

    def _arrive(self, req: Request, router) -> None:
        req.leg_dispatched_at_s = self.env.now
        router.forward(req)

    def _complete(self, req: Request) -> None:
        req.status = COMPLETED
        req.done_at_s = self.env.now
        req.journey = None
        self.run.request_finished(req)


def transfer_s(source, target, bytes_moved: float) -> float:
    """Seconds to move ``bytes_moved`` from pool ``source`` to pool ``target``: zero on the
    same pool; the scale-up link within a shared domain; else the sender's scale-out."""
    if source is target:
        return 0.0
    acc = source.layout.accelerator
    same_domain = (
        source.config.domain is not None
        and source.config.domain == target.config.domain
        and source.config.accelerator == target.config.accelerator
    )
    if same_domain and acc.scaleup_bw_bytes_per_s:
        return acc.scaleup_latency_s + bytes_moved / acc.scaleup_bw_bytes_per_s
    return acc.scaleout_latency_s + bytes_moved / acc.scaleout_bw_bytes_per_s
