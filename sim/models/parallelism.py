"""Parallel layouts of one replica: which TP / PP / EP a model may run at on an accelerator
(the layout rules), what each accelerator and each replica then holds (sharding), and what
a collective between the shards costs (all-reduce, all-gather, all-to-all, one send).

Placement (:mod:`fleets.placement`, :mod:`fleets.packing`) and the perf model
(:mod:`sim.models.perf`) both ask this module; no rule is written twice. Units: bytes,
seconds, bytes/s; ``tp``, ``pp``, ``ep`` are accelerator counts.

Layout (one replica = ``pp`` pipeline stages, each of :func:`stage_accelerators` chips):

- Tensor parallelism (TP) over ``tp`` chips of one scale-up domain shards every linear
  layer and runs attention by heads: each shard runs whole query heads, so ``tp`` divides
  the attention heads (Megatron-LM, Shoeybi et al. 2019, arXiv 1909.08053 §3; vLLM
  ``QKVParallelLinear``: ``num_heads = divide(total_num_heads, tp_size)``). When ``tp``
  exceeds the KV heads (grouped-query attention) each shard keeps a copy of the one KV
  head its query heads read, so the KV cache per token is stored tp / kv_heads times
  (vLLM ``QKVParallelLinear``: ``num_kv_head_replicas = divide(tp_size,
  total_num_kv_heads)`` when ``tp_size >= total_num_kv_heads``;
  github.com/vllm-project/vllm ``vllm/model_executor/layers/linear.py``).
- Pipeline parallelism (PP) splits the layers into ``pp`` stages of whole layers (at most
  one stage per layer); weights and KV divide evenly over the stages (an even split:
  embeddings and the output head are not placed separately).
- Expert parallelism (EP, mixture-of-experts only; e.g. DeepSeek-V3 over the 72 GPUs of a
  GB200 NVL72): each stage is ``ep`` chips of one scale-up domain (its all-to-all runs on
  the scale-up link); the routed experts are sharded n_experts / ep per chip, so ep
  divides the routed experts; attention and the shared weights run TP-``tp`` in
  ``ep / tp`` data-parallel groups, so ep is a multiple of tp.

Collectives (α–β model): a collective over n chips costs a latency α(n) = α0 + α1·log2(n)
(tree depth) plus its bytes over the algorithm bandwidth η_bus·β: ring all-reduce moves
2(n−1)/n of the message per chip, all-gather and all-to-all (n−1)/n. On the scale-up link
α0, α1 and η_bus are those of the chip's fabric (:data:`FABRICS`, by the catalog's
``scaleup_fabric``), fitted per fabric and group size to published all-reduce measurements
(:mod:`fleets.fabric_fit`): NVIDIA's TensorRT-LLM custom all-reduce on HGX H100/H200, HGX
B200/B300, GB200/GB300 NVL72 and PCIe RTX PRO 6000 / L40S, vLLM's on Arc Pro B60, AMD's
aiter all-reduce on MI355X; a fabric with no measurement (TPU ICI, Gaudi, Trainium) keeps
Vidur's H100 NCCL fit and says so. A full-mesh fabric (AMD xGMI: one link per peer) gives a
group of n only (n − 1) peer links: β(n) = min(β, (n − 1)·β_peer). All-gather and
all-to-all reuse the all-reduce latency (no table of theirs was available). Across domains
the catalog gives one scale-out latency and bandwidth per direction and nothing fitted:
α1 = 0 and η_bus = 1 are ASSUMED there (a lower bound; a ring's latency grows as
2(n−1)·α0). A point-to-point send (a PP activation hop) costs α0 + bytes / β.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fleets.catalog import Accelerator, Model
from sim.errors import UserError

ATTENTION_KINDS = ("autoregressive", "diffusion_lm")  # kinds whose TP shards split attention heads


# --- layout rules ------------------------------------------------------------------------

class LayoutError(UserError):
    """A TP / PP / EP that a model cannot run at on an accelerator. ``problem`` says what is
    wrong, ``fix`` what to use instead (with the allowed values); placement wraps them into
    a :class:`~sim.errors.PlacementError` naming the pool."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}. {fix}")
        self.problem = problem
        self.fix = fix


def check_degree(name: str, value) -> None:
    """A parallel degree (``tp``, ``pp``, ``ep``, ``replicas``) is an integer >= 1; raises
    LayoutError otherwise."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise LayoutError(f"{name}={value!r} is not allowed", f"Use an integer {name} >= 1.")


def allowed_tp(model: Model, accelerator: Accelerator) -> list[int]:
    """Every TP size ``model`` may run at on ``accelerator``, ascending: 1 to the scale-up
    domain size, and for an attention model (autoregressive, diffusion LM) only divisors of
    its attention heads (module docstring)."""
    domain = accelerator.scaleup_domain_size
    heads = model.heads or 0
    if not (heads and model.kind in ATTENTION_KINDS):
        return list(range(1, domain + 1))
    return [d for d in range(1, min(heads, domain) + 1) if heads % d == 0]


def check_tp_fits_domain(tp: int, accelerator: Accelerator) -> None:
    """TP runs inside one scale-up domain: raises LayoutError when ``tp`` exceeds
    ``accelerator.scaleup_domain_size``."""
    domain = accelerator.scaleup_domain_size
    if tp > domain:
        raise LayoutError(f"tp={tp} but TP must fit one scale-up domain of {domain} accelerators",
                          f"Lower tp to at most {domain} and raise pp to spread the model over more domains, "
                          "or pick an accelerator with a larger domain.")


def check_tp_divides_heads(tp: int, model: Model, accelerator: Accelerator) -> None:
    """Each TP shard runs whole attention heads: raises LayoutError, listing
    :func:`allowed_tp`, when ``tp`` > 1 does not divide the heads of an attention model.
    Models without heads (image UNets, VAEs, encoders) pass. KV heads fewer than tp are
    replicated, not refused (:func:`kv_replication`)."""
    heads = model.heads or 0
    if tp > 1 and heads and model.kind in ATTENTION_KINDS and heads % tp:
        allowed = ", ".join(map(str, allowed_tp(model, accelerator)))
        raise LayoutError(f"tp={tp} does not divide the model's {heads} attention heads "
                          "(each TP shard runs whole heads)", f"Use tp in: {allowed}.")


def check_tp(tp: int, model: Model, accelerator: Accelerator) -> None:
    """The TP rule: an integer >= 1 (:func:`check_degree`), inside one scale-up domain
    (:func:`check_tp_fits_domain`), dividing the attention heads
    (:func:`check_tp_divides_heads`); raises LayoutError naming the allowed values."""
    check_degree("tp", tp)
    check_tp_fits_domain(tp, accelerator)
    check_tp_divides_heads(tp, model, accelerator)


def check_pp(pp: int, model: Model) -> None:
    """Pipeline stages hold whole layers: raises LayoutError when ``pp`` is not an integer
    >= 1 or exceeds the model's layers (models without a layer count pass)."""
    check_degree("pp", pp)
    if model.layers and pp > model.layers:
        raise LayoutError(f"pp={pp} exceeds the model's {model.layers} layers", f"Use pp <= {model.layers}.")


def allowed_ep(tp: int, model: Model, accelerator: Accelerator) -> list[int]:
    """Every EP group size > 1 that ``model`` may use with ``tp`` on ``accelerator``,
    ascending: inside one scale-up domain, dividing the routed experts, a multiple of tp
    (empty for a dense model)."""
    if not model.is_moe:
        return []
    return [d for d in range(2, min(model.n_experts, accelerator.scaleup_domain_size) + 1)
            if model.n_experts % d == 0 and d % tp == 0]


def check_ep(ep: int, tp: int, model: Model, accelerator: Accelerator) -> None:
    """The EP rule: ep = 1, or (MoE only) an expert-parallel group inside one scale-up
    domain whose size divides the routed experts and is a multiple of tp (module
    docstring). Raises LayoutError listing :func:`allowed_ep`."""
    check_degree("ep", ep)
    if ep == 1:
        return
    if not model.is_moe:
        raise LayoutError(f"ep={ep} but the model is dense (no routed experts)",
                          "Use ep: 1 (expert parallelism shards experts; there are none).")
    domain = accelerator.scaleup_domain_size
    allowed = allowed_ep(tp, model, accelerator)
    fix = (f"Allowed ep with tp={tp} on this part: {', '.join(map(str, allowed))}" if allowed
           else f"No ep > 1 fits tp={tp} on this part; use ep: 1") + "."
    if ep > domain:
        raise LayoutError(f"ep={ep} but an expert-parallel group must fit one scale-up domain of "
                          f"{domain} accelerators (its all-to-all runs on the scale-up link)", fix)
    if model.n_experts % ep:
        raise LayoutError(f"ep={ep} does not divide the model's {model.n_experts} routed experts", fix)
    if ep % tp:
        raise LayoutError(f"ep={ep} is not a multiple of tp={tp} (attention runs in ep/tp "
                          "data-parallel groups of tp accelerators)", fix)


# --- sharding ----------------------------------------------------------------------------

def stage_accelerators(tp: int, ep: int = 1) -> int:
    """Accelerators per pipeline stage of a replica: its expert-parallel group of ``ep``
    (a multiple of tp, so attention runs TP-tp in ep / tp groups) when ep > 1, else its
    tensor-parallel group of ``tp``."""
    return ep if ep > 1 else tp


def replica_accelerators(tp: int, pp: int = 1, ep: int = 1) -> int:
    """Accelerators of one replica: :func:`stage_accelerators` x ``pp``."""
    return stage_accelerators(tp, ep) * pp


def kv_replication(model: Model, tp: int) -> float:
    """Copies of each token's KV cache across a TP group: tp / kv_heads when tp > kv_heads
    (each shard keeps the KV head its query heads read; vLLM ``QKVParallelLinear``), else 1.
    Multi-head latent attention (one latent, ``kv_heads`` 1) is stored on every shard."""
    kv_heads = model.kv_heads or 0
    return tp / kv_heads if kv_heads and tp > kv_heads else 1.0


def stored_kv_bytes_per_token(model: Model, kv_precision: str, tp: int) -> float:
    """KV-cache bytes one token takes across a TP group of ``tp``:
    :meth:`fleets.catalog.Model.kv_bytes_per_token` at ``kv_precision`` x
    :func:`kv_replication`. What the engine allocates and what placement checks
    ``min_kv_tokens`` against. Raises UserError for an unknown precision."""
    return model.kv_bytes_per_token(kv_precision) * kv_replication(model, tp)


def kv_bytes_per_token_per_accelerator(model: Model, kv_precision: str, tp: int = 1, pp: int = 1) -> float:
    """KV-cache bytes a token puts on each accelerator of its TP group and pipeline stage:
    :func:`stored_kv_bytes_per_token` / (tp x pp) (layers split evenly over the stages).
    Under EP a token's KV lives in one attention group of tp chips, so the same holds."""
    return stored_kv_bytes_per_token(model, kv_precision, tp) / (tp * pp)


def replica_weight_bytes(model: Model, precision: str, tp: int = 1, ep: int = 1) -> float:
    """Weight bytes one replica holds at ``precision``. With expert parallelism (ep > 1, MoE)
    the routed experts are stored once, sharded over the ``ep`` accelerators, and the shared
    part (attention, dense layers, shared expert, embeddings) once per data-parallel
    attention group of ``tp`` accelerators (ep / tp groups); else all weights once.
    Raises UserError for an unknown precision."""
    if ep <= 1 or not model.is_moe:
        return model.weight_bytes(precision)
    return (ep // tp) * model.shared_weight_bytes(precision) + model.n_experts * model.expert_weight_bytes(precision)


def weight_bytes_per_accelerator(model: Model, precision: str, tp: int = 1, ep: int = 1, pp: int = 1) -> float:
    """Weight bytes on each accelerator of a replica: (shared / tp + experts / ep) / pp with
    expert parallelism, all weights / (tp x pp) without (layers split evenly over the
    ``pp`` stages). Raises UserError for an unknown precision."""
    if ep <= 1 or not model.is_moe:
        return model.weight_bytes(precision) / tp / pp
    return (model.shared_weight_bytes(precision) / tp + model.n_experts * model.expert_weight_bytes(precision) / ep) / pp


# --- collectives -------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Link:
    """One interconnect as the collectives see it: latency α0 (s), latency per doubling of
    the group α1 (s), bandwidth β per accelerator per direction (bytes/s), the fraction
    η_bus of β a collective achieves, and for a full-mesh fabric the bandwidth of one peer
    link (bytes/s; 0: switched, every group gets β)."""

    latency_s: float
    latency_log2_s: float
    bw_bytes_per_s: float
    bus_efficiency: float
    peer_bw_bytes_per_s: float = 0.0

    def group_bw_bytes_per_s(self, group: int) -> float:
        """β seen by a group of ``group`` chips: min(β, (group − 1)·β_peer) on a full mesh."""
        if self.peer_bw_bytes_per_s and group > 1:
            return min(self.bw_bytes_per_s, (group - 1) * self.peer_bw_bytes_per_s)
        return self.bw_bytes_per_s


@dataclass(frozen=True, slots=True)
class Fabric:
    """Published collective figures of one scale-up fabric: the all-reduce latency α0 + α1·log2(n)
    (s), bus efficiency η_bus of ``link_bw_bytes_per_s`` (the per-chip β the fit used),
    the bandwidth of one peer link on a full mesh (0: switched), how well the α–β line
    fits the measurements (median / max relative error over 2 KiB–64 MiB), the source and
    a status word (``accelerators.csv`` ``network_status`` vocabulary)."""

    alpha0_s: float
    alpha_log2_s: float
    bus_efficiency: float
    link_bw_bytes_per_s: float
    peer_bw_bytes_per_s: float
    median_rel_error: float
    max_rel_error: float
    status: str
    source: str


_AIC = "github.com/ai-dynamo/aiconfigurator systems/data/{}/comm/{}/custom_allreduce_perf.parquet @095f58a51c4c"
_FIT = ("; fleets/fabric_fit.py on fleets/data/reference/collectives/allreduce_latency.csv "
        "(non-negative least squares on the relative error, 2 KiB-64 MiB)")
# Per scale-up fabric (the catalog's ``scaleup_fabric``); the numbers are what
# ``python -m fleets.fabric_fit`` prints for the shipped measurements (tests check it).
FABRICS: dict[str, Fabric] = {
    "nvlink4-hgx8": Fabric(2.08e-6, 0.61e-6, 0.569, 450e9, 0.0, 0.10, 0.58, "derived",
                           "NVLink 4 NVSwitch, 8-GPU HGX: TensorRT-LLM 1.3.0rc20 custom all-reduce (AUTO, CUDA "
                           "graphs) measured on H100 and H200 at TP2/4/8, " + _AIC.format("h{1,2}00_sxm", "trtllm/1.3.0rc20") + _FIT),
    "nvlink5-hgx8": Fabric(3.73e-6, 0.75e-6, 0.462, 900e9, 0.0, 0.07, 0.51, "derived",
                           "NVLink 5 NVSwitch, 8-GPU HGX: TensorRT-LLM 1.3.0rc20 custom all-reduce measured on "
                           "B200 and B300 at TP2/4/8, " + _AIC.format("b{2,3}00_sxm", "trtllm/1.3.0rc20") + _FIT),
    "nvlink5-nvl72": Fabric(3.27e-6, 0.84e-6, 0.489, 900e9, 0.0, 0.07, 0.32, "derived",
                            "NVLink 5 rack NVSwitch (GB200/GB300 NVL72): TensorRT-LLM 1.3.0rc20 custom all-reduce "
                            "measured at TP2/4 (larger groups extrapolated in log2 n), "
                            + _AIC.format("gb{2,3}00", "trtllm/1.3.0rc20") + _FIT),
    "pcie5-x16": Fabric(0.0, 7.58e-6, 0.422, 64e9, 0.0, 0.14, 0.64, "derived",
                        "PCIe Gen5 x16 through a switch, no NVLink (RTX PRO 6000 Blackwell Server): TensorRT-LLM "
                        "1.3.0rc20 custom all-reduce at TP2/4/8, " + _AIC.format("rtx_pro_6000_server", "trtllm/1.3.0rc20") + _FIT),
    "pcie4-x16": Fabric(0.0, 8.29e-6, 0.441, 32e9, 0.0, 0.43, 0.92, "derived",
                        "PCIe Gen4 x16, no NVLink (L40S; applied to L4): TensorRT-LLM 1.3.0rc20 custom all-reduce at "
                        "TP2/4/8, " + _AIC.format("l40s", "trtllm/1.3.0rc20") + _FIT + "; TP8 crosses CPU sockets and "
                        "runs at a fifth of TP2's bandwidth, hence the poor fit"),
    "pcie5-x8": Fabric(25.78e-6, 5.87e-6, 0.775, 28.4e9, 0.0, 0.13, 0.46, "derived",
                       "PCIe Gen5 x8 (Arc Pro B60): vLLM 0.20 custom all-reduce (eager) at TP2/4/8, "
                       + _AIC.format("b60", "vllm/0.20.0") + _FIT),
    "xgmi-mi355x": Fabric(4.36e-6, 0.61e-6, 0.776, 537.6e9, 76.8e9, 0.01, 0.05, "derived",
                          "AMD Infinity Fabric full mesh, 7 links x 76.8 GB/s per dir (MI350X/MI355X): aiter custom "
                          "all-reduce at TP8, 24 KiB-1.5 MiB (github.com/vllm-project/vllm pull 39080, 2026-04-06)"
                          + _FIT + "; alpha1 ASSUMED = nvlink4-hgx8's (one group size measured)"),
    "xgmi-mi300x": Fabric(4.36e-6, 0.61e-6, 0.698, 448e9, 64e9, 0.0, 0.0, "assumed",
                          "AMD Infinity Fabric full mesh, 7 links x 64 GB/s per dir (MI300X/MI325X): latency ASSUMED "
                          "= xgmi-mi355x's (same aiter/vLLM stack, no MI300X small-message table found); eta_bus "
                          "= RCCL all-reduce busbw 312.9 GB/s of 448 at 8 GPUs, 4 GiB (2 GPUs: 47.7 of 64 = 0.745; "
                          "github.com/stas00/ml-engineering network/README.md @744d01e18b79)"),
    "vidur-nccl-h100": Fabric(14.2e-6, 5.1e-6, 0.733, 450e9, 0.0, 0.06, 0.0, "assumed",
                              "no measurement of this fabric: Vidur's H100 NVLink NCCL all-reduce fit (n = 2, 4, 8; "
                              "2 KiB-64 MiB; microsoft/vidur @7d47513 data/profiling/network/h100_dgx/all_reduce.csv; "
                              "fleets/vidur_efficiency.all_reduce_fit) transferred"),
}


def fabric(key: str) -> Fabric:
    """The fabric ``key`` of :data:`FABRICS`; UserError naming the allowed keys."""
    if key not in FABRICS:
        raise UserError(f"unknown scale-up fabric {key!r}; allowed: {', '.join(sorted(FABRICS))}")
    return FABRICS[key]


def scaleup_link(accelerator: Accelerator) -> Link:
    """The scale-up link (NVLink, Infinity Fabric, PCIe, ICI ...) inside one domain: the
    row's β (``scaleup_gbps_per_dir``) with the latency, η_bus and peer bandwidth of its
    ``scaleup_fabric`` (:data:`FABRICS`); a row without a fabric (a user's own part, the
    SRAM machines) keeps its own α0, α1 and η_bus columns."""
    if accelerator.scaleup_fabric:
        f = fabric(accelerator.scaleup_fabric)
        return Link(f.alpha0_s, f.alpha_log2_s, accelerator.scaleup_bw_bytes_per_s, f.bus_efficiency,
                    f.peer_bw_bytes_per_s)
    return Link(accelerator.scaleup_latency_s, accelerator.scaleup_latency_log2_s,
                accelerator.scaleup_bw_bytes_per_s, accelerator.scaleup_bus_efficiency)


def scaleout_link(accelerator: Accelerator) -> Link:
    """The scale-out link between domains (InfiniBand / Ethernet per accelerator): its
    latency and bandwidth from ``accelerators.csv``; α1 = 0 and η_bus = 1 ASSUMED (nothing
    fitted across domains; module docstring)."""
    return Link(accelerator.scaleout_latency_s, 0.0, accelerator.scaleout_bw_bytes_per_s, 1.0)


def link_for(accelerator: Accelerator, span: int) -> Link:
    """The link a group spanning ``span`` accelerators talks over: scale-up when it fits one
    domain, else scale-out."""
    return scaleup_link(accelerator) if span <= accelerator.scaleup_domain_size else scaleout_link(accelerator)


def collective_latency_s(link: Link, group: int) -> float:
    """α(n) = α0 + α1·log2(n) of one collective over ``group`` chips, s."""
    return link.latency_s + link.latency_log2_s * math.log2(group)


def allreduce_time_s(link: Link, message_bytes: float, group: int) -> float:
    """One ring all-reduce of ``message_bytes`` over ``group`` chips, s:
    ``α0 + α1·log2(n) + 2(n−1)/n · bytes / (η_bus · β(n))``; 0 for a group of one. On the
    scale-up link α0, α1 and η_bus are the fabric's (:data:`FABRICS`)."""
    if group <= 1:
        return 0.0
    return (collective_latency_s(link, group)
            + 2.0 * (group - 1) / group * message_bytes / (link.bus_efficiency * link.group_bw_bytes_per_s(group)))


def allgather_time_s(link: Link, message_bytes: float, group: int) -> float:
    """One all-gather whose result is ``message_bytes`` over ``group`` chips, s: half an
    all-reduce's bandwidth term ((n−1)/n · bytes / (η_bus·β)) and the same latency; 0 for a
    group of one."""
    if group <= 1:
        return 0.0
    return (collective_latency_s(link, group)
            + (group - 1) / group * message_bytes / (link.bus_efficiency * link.group_bw_bytes_per_s(group)))


def alltoall_time_s(link: Link, message_bytes: float, group: int) -> float:
    """One balanced all-to-all over ``group`` chips in which every chip sends
    ``message_bytes`` spread evenly over the group, s: ``α(n) + (n−1)/n · bytes /
    (η_bus·β)`` (the 1/n addressed to itself stays); 0 for a group of one. α(n) is the
    all-reduce's fitted latency: no all-to-all table was available (ASSUMED)."""
    if group <= 1:
        return 0.0
    return (collective_latency_s(link, group)
            + (group - 1) / group * message_bytes / (link.bus_efficiency * link.group_bw_bytes_per_s(group)))


def send_time_s(link: Link, message_bytes: float) -> float:
    """One point-to-point send of ``message_bytes`` (a pipeline stage handing its
    activations to the next), s: α0 + bytes / β."""
    return link.latency_s + message_bytes / link.bw_bytes_per_s
