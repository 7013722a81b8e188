"""The efficiency model ``dcsim validate`` fits: what achievable compute and bandwidth
depend on, separated as far as the published points separate them.

Terms (each a multiplier on the roofline's peak rates, :func:`sim.models.perf.compute_efficiency`):

- per chip, η_c (dense transformer GEMMs at the run's precision, whose own peak is used:
  bf16, fp8 or fp4) and η_m (memory bandwidth);
- across chips, a factor per kernel class: ``moe`` (grouped expert GEMMs and routing of a
  mixture of experts), ``diffusion`` (UNet denoisers and VAE convolutions, :func:`sim.models.perf.is_conv_diffusion`) and ``fp4``
  (NVFP4/MXFP4 math against its doubled peak); each is fitted on every chip that runs
  that class beside a dense LLM at the reference precision, so it is separated from η_c;
- a serving-stack factor ``stack:<vendor>:<stack>`` on both rates of points served by a
  stack other than the vendor's reference stack (NVIDIA: TensorRT(-LLM), AMD: vLLM/ROCm,
  Google: XLA), created only where points of both stacks exist on one chip (so the two
  are separated, not confounded with the chip);
- one fixed per-iteration overhead t_0 shared by every chip (scheduling, launch, sampling:
  software, not silicon), bounded by :data:`OVERHEAD_MAX_S`.

Which points determine what: Offline LLM points at MLPerf's batch sizes are compute-bound
(they fix η_c), the vendor max-throughput rows with long outputs and small inputs are
bound by weight and KV-cache reads (they fix η_m); a chip with Offline LLM points only has
an η_m the data do not determine.

Identifiability rule: a chip factor on which none of its points depend (max |∂ log
prediction / ∂ log factor| < :data:`IDENTIFIABLE_MIN`), or the less influential of two
whose Jacobian columns are collinear on that chip's points, is not fitted but transferred
(:func:`transfer`: the geometric mean over the calibrated chips of the same vendor, else of
every calibrated chip) and the output says so; a global factor no point depends on stays
1 and is reported as not determined.

Fitting is bounded least squares (``scipy.optimize.least_squares``, trust-region with the
Jacobian's sparsity: a chip's factors move only its own points) on log(predicted /
measured) over Offline points, with the closed-form saturated rate of
:func:`sim.studies.mlperf.analytic_offline_rate`.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares
from scipy.sparse import lil_matrix

from fleets.catalog import Catalog
from sim.models.perf import is_conv_diffusion
from sim.studies.calibration import Point
from sim.studies.mlperf import predict

ETA_MIN = 0.02
FACTOR_BOUNDS = {"moe": (0.1, 2.0), "diffusion": (0.1, 2.0), "fp4": (0.1, 2.0)}  # catalog allows (0, 2]
START_FACTOR = 0.7
STACK_BOUNDS = (0.1, 3.0)
# Upper bound of t_0, s: LLaMA-3.1-8B-Instruct (bf16, 16.06 GB of weights) decodes at
# 158.34 tok/s at batch 1 on one H100 under SGLang (EAGLE-3 paper arXiv 2503.01840, as the
# SGLang docs quote it): 6.32 ms per token, of which the weight read alone takes at least
# 16.06 GB / 3.35 TB/s = 4.79 ms; any fixed per-iteration cost is below the 1.5 ms left.
OVERHEAD_MAX_S = 1.5e-3
START_ETA = 0.5
START_OVERHEAD_S = 5e-4
DIFF_STEP = 1e-3
IDENTIFIABLE_MIN = 0.02
IDENTIFIABLE_RANK_MIN = 0.05
RULES = ("same-stack", "cross-stack")
CLASS_TERMS = ("moe", "diffusion", "fp4")
REFERENCE_STACK = {"NVIDIA": "tensorrt", "AMD": "vllm", "Google": "xla"}


@dataclass(frozen=True, slots=True)
class Factors:
    """Efficiency factors of one chip and where they come from."""

    compute_efficiency: float
    bandwidth_efficiency: float
    compute_status: str  # calibrated | same-stack | cross-stack | spec-only
    bandwidth_status: str
    compute_from: tuple[str, ...]  # chip keys (transferred) or point ids (calibrated)
    bandwidth_from: tuple[str, ...]

    @property
    def status(self) -> str:
        """calibrated (both fitted), transferred (both transferred) or partly calibrated."""
        if "spec-only" in (self.compute_status, self.bandwidth_status):
            return "spec-only"
        calibrated = [s == "calibrated" for s in (self.compute_status, self.bandwidth_status)]
        if all(calibrated):
            return "calibrated"
        return "transferred" if not any(calibrated) else "calibrated (eta_c), transferred (eta_m)" if calibrated[0] \
            else "calibrated (eta_m), transferred (eta_c)"


@dataclass(frozen=True, slots=True)
class Term:
    """A factor shared by every chip: its value, whether the points determined it and
    the points (ids) that depend on it."""

    value: float
    determined: bool
    points: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Fit:
    """A fitted efficiency model: factors per chip (calibrated and transferred), the
    class and stack terms, t_0."""

    factors: dict[str, Factors]
    overhead_s: float
    rms_log_error: float
    points: int
    pooled: bool = False
    rounds: dict[str, str] = dataclasses.field(default_factory=dict)  # point id -> MLPerf round ("" unknown)
    terms: dict[str, Term] = dataclasses.field(default_factory=dict)
    vendor_points: frozenset = frozenset()  # ids of the points from a vendor's own table

    def term(self, name: str) -> float:
        """The value of term ``name`` (1 when the fit has no such term)."""
        return self.terms[name].value if name in self.terms else 1.0


def point_terms(point: Point, catalog: Catalog) -> tuple[str, ...]:
    """The class terms that apply to ``point`` (its model's kernel class, its precision)."""
    model = catalog.model(point.model)
    out = []
    if model.is_moe:
        out.append("moe")
    if is_conv_diffusion(model):
        out.append("diffusion")
    if point.precision == "fp4":
        out.append("fp4")
    return tuple(out)


def stack_term(point: Point, catalog: Catalog) -> str:
    """``stack:<vendor>:<stack>`` when the point's stack is not its vendor's reference
    stack (:data:`REFERENCE_STACK`), else ""."""
    vendor = catalog.accelerator(point.accelerator).vendor
    reference = REFERENCE_STACK.get(vendor, "")
    if not point.stack or not reference or point.stack == reference:
        return ""
    return f"stack:{vendor}:{point.stack}"


def stack_terms(points: list[Point], catalog: Catalog) -> tuple[str, ...]:
    """Stack terms the points separate: a non-reference stack measured on a chip that also
    has points of its vendor's reference stack (module docstring)."""
    by_chip: dict[str, set[str]] = {}
    for p in points:
        by_chip.setdefault(p.accelerator, set()).add(stack_term(p, catalog))
    return tuple(sorted({t for stacks in by_chip.values() if "" in stacks for t in stacks if t}))


def with_fit(catalog: Catalog, fit: Fit) -> Catalog:
    """A copy of ``catalog`` with every chip of ``fit`` given its (η_c, η_m), t_0 and the
    class factors the fit determined (others keep the row's value): the reference stack's
    efficiencies. SRAM machines (Groq, Cerebras) keep their rows: their per-step cost comes
    from their architecture (:mod:`sim.models.sram`), not from GPU serving stacks."""
    accs = dict(catalog.accelerators)
    for key, f in fit.factors.items():
        if key in accs and accs[key].memory_kind != "sram":  # SRAM machines: sim.models.sram
            classes = {f"{t}_efficiency_factor": float(fit.terms[t].value)
                       for t in CLASS_TERMS if t in fit.terms and fit.terms[t].determined}
            accs[key] = dataclasses.replace(
                accs[key], compute_efficiency=float(f.compute_efficiency),
                bandwidth_efficiency=float(f.bandwidth_efficiency), iteration_overhead_s=float(fit.overhead_s),
                **classes)
    return Catalog(accelerators=accs, models=catalog.models)


def point_catalog(catalog: Catalog, point: Point, fit: Fit) -> Catalog:
    """``catalog`` (already :func:`with_fit`) with the point's chip scaled by its stack term."""
    name = stack_term(point, catalog)
    if name not in fit.terms:
        return catalog
    s = fit.terms[name].value
    acc = catalog.accelerators[point.accelerator]
    scaled = dataclasses.replace(acc, compute_efficiency=min(1.0, acc.compute_efficiency * s),
                                 bandwidth_efficiency=min(1.0, acc.bandwidth_efficiency * s))
    return Catalog(accelerators={**catalog.accelerators, point.accelerator: scaled}, models=catalog.models)


def predict_with(points: list[Point], catalog: Catalog, fit: Fit) -> list[tuple[float, object]]:
    """(prediction, layout) of every point under ``fit`` (stack terms included)."""
    fitted = with_fit(catalog, fit)
    return [predict(p, point_catalog(fitted, p, fit)) for p in points]


def _geomean(values: list[float]) -> float:
    return float(math.exp(sum(math.log(v) for v in values) / len(values)))


def transfer(catalog: Catalog, fitted: dict[str, tuple[float, float, bool, bool]],
             sources: dict[str, tuple[str, ...]], pooled: bool = False) -> dict[str, Factors]:
    """Factors for every catalog chip: fitted where identifiable, else the transfer rule.

    ``fitted``: chip -> (η_c, η_m, η_c identifiable, η_m identifiable); ``sources``: chip ->
    calibration point ids.  ``pooled`` ignores the vendor (the alternative rule)."""
    out = {}
    for key, acc in catalog.accelerators.items():
        if acc.memory_kind == "sram":  # modelled from their architecture (sim.models.sram), not by this fit
            out[key] = Factors(acc.compute_efficiency, acc.bandwidth_efficiency, "spec-only", "spec-only", (), ())
            continue
        parts = []
        for i in (0, 1):
            if key in fitted and fitted[key][2 + i]:
                parts.append((fitted[key][i], "calibrated", sources[key]))
                continue
            donors = {k: v for k, v in fitted.items() if v[2 + i] and k != key}
            same = {k: v for k, v in donors.items() if catalog.accelerators[k].vendor == acc.vendor}
            chosen, rule = (same, "same-stack") if same and not pooled else (donors, "cross-stack")
            if not chosen:  # nothing calibrated this factor anywhere: keep the row's value
                parts.append(((acc.compute_efficiency, acc.bandwidth_efficiency)[i], "spec-only", ()))
                continue
            parts.append((_geomean([v[i] for v in chosen.values()]), rule, tuple(sorted(chosen))))
        out[key] = Factors(parts[0][0], parts[1][0], parts[0][1], parts[1][1], parts[0][2], parts[1][2])
    return out


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where each parameter sits in the least-squares vector."""

    chips: tuple[str, ...]
    terms: tuple[str, ...]

    @property
    def size(self) -> int:
        return 2 * len(self.chips) + len(self.terms) + 1

    def chip_column(self, chip: str, which: int) -> int:
        return 2 * self.chips.index(chip) + which

    def term_column(self, term: str) -> int:
        return 2 * len(self.chips) + self.terms.index(term)


def _fit_from_vector(x: np.ndarray, layout: _Layout, free: dict, catalog: Catalog, offline: list[Point],
                     pooled: bool = False) -> Fit:
    fitted = {k: (math.exp(x[layout.chip_column(k, 0)]), math.exp(x[layout.chip_column(k, 1)]), *free[k])
              for k in layout.chips}
    sources = {k: tuple(p.point for p in offline if p.accelerator == k) for k in layout.chips}
    terms = {}
    for t in layout.terms:
        users = tuple(p.point for p in offline if t in point_terms(p, catalog) or t == stack_term(p, catalog))
        terms[t] = Term(math.exp(x[layout.term_column(t)]), free.get(t, True), users)
    return Fit(transfer(catalog, fitted, sources, pooled), float(x[-1]), 0.0, len(offline), pooled,
               {p.point: p.round for p in offline}, terms, frozenset(p.point for p in offline if p.origin == "vendor"))


def _log_errors(points: list[Point], catalog: Catalog, fit: Fit) -> np.ndarray:
    return np.array([math.log(pred / p.measured) for p, (pred, _) in zip(points, predict_with(points, catalog, fit))])


def _bounds(layout: _Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, lower, upper) of the parameter vector (logs of the factors, then t_0)."""
    lo, hi, x0 = [], [], []
    for _ in layout.chips:
        lo += [math.log(ETA_MIN)] * 2
        hi += [0.0, 0.0]
        x0 += [math.log(START_ETA)] * 2
    for t in layout.terms:
        low, high = FACTOR_BOUNDS.get(t, STACK_BOUNDS)
        lo.append(math.log(low))
        hi.append(math.log(high))
        x0.append(math.log(START_FACTOR) if t in CLASS_TERMS else 0.0)
    return np.array(x0 + [START_OVERHEAD_S]), np.array(lo + [0.0]), np.array(hi + [OVERHEAD_MAX_S])


def _sparsity(offline: list[Point], layout: _Layout, catalog: Catalog):
    """Which parameter moves which point: a chip's factors its own points, a term the
    points it applies to, t_0 every point."""
    s = lil_matrix((len(offline), layout.size), dtype=int)
    for i, p in enumerate(offline):
        s[i, layout.chip_column(p.accelerator, 0)] = 1
        s[i, layout.chip_column(p.accelerator, 1)] = 1
        for t in (*point_terms(p, catalog), stack_term(p, catalog)):
            if t in layout.terms:
                s[i, layout.term_column(t)] = 1
        s[i, layout.size - 1] = 1
    return s


def _least_squares(offline: list[Point], catalog: Catalog, layout: _Layout, free: dict):
    """Bounded least squares of log(predicted / measured). A chip factor marked not free is
    not a parameter: it takes the transfer rule's value from the chips whose factor is
    free, at every evaluation, so the free factors are fitted given it (its column in x
    stays at the start value); a term marked not free stays at 1."""
    x0, lo, hi = _bounds(layout)
    mask = np.array([free[k][j] for k in layout.chips for j in (0, 1)]
                    + [free.get(t, True) for t in layout.terms] + [True])
    scale = np.array([1.0] * (layout.size - 1) + [START_OVERHEAD_S])
    sparsity = _sparsity(offline, layout, catalog).tocsc()[:, np.flatnonzero(mask)]

    def reduced(z: np.ndarray) -> np.ndarray:
        x = x0.copy()
        x[mask] = z
        return _log_errors(offline, catalog, _fit_from_vector(x, layout, free, catalog, offline))

    result = least_squares(reduced, x0[mask], bounds=(lo[mask], hi[mask]), method="trf", diff_step=DIFF_STEP,
                           x_scale=scale[mask], jac_sparsity=sparsity)
    x = x0.copy()
    x[mask] = result.x
    jac = np.zeros((len(offline), layout.size))
    jac[:, mask] = result.jac.toarray() if hasattr(result.jac, "toarray") else result.jac
    result.x, result.jac = x, jac
    return result


def _identifiable(offline: list[Point], layout: _Layout, jac: np.ndarray) -> dict:
    """Which factors the points determine (module docstring): per chip (η_c, η_m), and per
    term whether any point depends on it."""
    out = {}
    for k in layout.chips:
        rows = [j for j, p in enumerate(offline) if p.accelerator == k]
        block = jac[np.ix_(rows, [layout.chip_column(k, 0), layout.chip_column(k, 1)])]
        sensitivity = np.abs(block).max(axis=0)
        free = [bool(s >= IDENTIFIABLE_MIN) for s in sensitivity]
        if all(free):
            singular = np.linalg.svd(block, compute_uv=False)
            if len(singular) < 2 or singular[-1] < IDENTIFIABLE_RANK_MIN * singular[0]:
                keep = int(np.argmax(np.linalg.norm(block, axis=0)))
                free = [j == keep for j in (0, 1)]
        out[k] = (free[0], free[1])
    for t in layout.terms:
        out[t] = bool(np.abs(jac[:, layout.term_column(t)]).max() >= IDENTIFIABLE_MIN)
    return out


def fit_model(points: list[Point], catalog: Catalog, pooled: bool = False) -> Fit:
    """Fit the chip factors, class and stack terms and t_0 on the Offline ``points``;
    transfer the chip factors the points do not determine.

    Raises:
        ValueError: no Offline point to fit.
    """
    offline = [p for p in points if p.scenario == "Offline"]
    if not offline:
        raise ValueError("no Offline point to fit")
    used = Counter(t for p in offline for t in point_terms(p, catalog))
    layout = _Layout(tuple(sorted({p.accelerator for p in offline})),
                     tuple(t for t in CLASS_TERMS if used[t]) + stack_terms(offline, catalog))
    free = {**{k: (True, True) for k in layout.chips}, **{t: True for t in layout.terms}}
    result = _least_squares(offline, catalog, layout, free)  # pass 1: everything free
    free = _identifiable(offline, layout, result.jac)
    if not all(all(v) if isinstance(v, tuple) else v for v in free.values()):  # pass 2: transfer the rest
        result = _least_squares(offline, catalog, layout, free)
    fit = _fit_from_vector(result.x, layout, free, catalog, offline, pooled)
    rms = float(np.sqrt(np.mean(result.fun ** 2)))
    return dataclasses.replace(fit, rms_log_error=rms)
