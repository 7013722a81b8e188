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
α0, α1 and η_bus are fitted to Vidur's H100 NVLink all-reduce measurements
(``accelerators.csv`` ``network_source``); all-gather and all-to-all reuse that latency (no
table of theirs was available). Across domains the catalog gives one scale-out latency and
bandwidth per direction and nothing fitted: α1 = 0 and η_bus = 1 are ASSUMED there (a lower
bound; a ring's latency grows as 2(n−1)·α0). A point-to-point send (a PP activation hop)
costs α0 + bytes / β.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fleets.catalog import BYTES_PER_PARAM, Accelerator, Model, check_precision
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
    per_param = BYTES_PER_PARAM[check_precision(precision, f"model '{model.key}'")]
    return ((ep // tp) * model.shared_params + model.n_experts * model.expert_params) * per_param


def weight_bytes_per_accelerator(model: Model, precision: str, tp: int = 1, ep: int = 1, pp: int = 1) -> float:
    """Weight bytes on each accelerator of a replica: (shared / tp + experts / ep) / pp with
    expert parallelism, all weights / (tp x pp) without (layers split evenly over the
    ``pp`` stages). Raises UserError for an unknown precision."""
    if ep <= 1 or not model.is_moe:
        return model.weight_bytes(precision) / tp / pp
    per_param = BYTES_PER_PARAM[check_precision(precision, f"model '{model.key}'")]
    return (model.shared_params / tp + model.n_experts * model.expert_params / ep) * per_param / pp


# --- collectives -------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Link:
    """One interconnect as the collectives see it: latency α0 (s), latency per doubling of
    the group α1 (s), bandwidth β per accelerator per direction (bytes/s) and the fraction
    η_bus of β a collective achieves."""

    latency_s: float
    latency_log2_s: float
    bw_bytes_per_s: float
    bus_efficiency: float


def scaleup_link(accelerator: Accelerator) -> Link:
    """The scale-up link (NVLink, Infinity Fabric, ICI ...) inside one domain, with the
    fitted α0, α1 and η_bus of ``accelerators.csv`` (``network_source``)."""
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
    ``α0 + α1·log2(n) + 2(n−1)/n · bytes / (η_bus · β)``; 0 for a group of one. On the
    scale-up link fitted to Vidur's H100 NVLink measurements (``network_source``)."""
    if group <= 1:
        return 0.0
    return (collective_latency_s(link, group)
            + 2.0 * (group - 1) / group * message_bytes / (link.bus_efficiency * link.bw_bytes_per_s))


def allgather_time_s(link: Link, message_bytes: float, group: int) -> float:
    """One all-gather whose result is ``message_bytes`` over ``group`` chips, s: half an
    all-reduce's bandwidth term ((n−1)/n · bytes / (η_bus·β)) and the same latency; 0 for a
    group of one."""
    if group <= 1:
        return 0.0
    return (collective_latency_s(link, group)
            + (group - 1) / group * message_bytes / (link.bus_efficiency * link.bw_bytes_per_s))


def alltoall_time_s(link: Link, message_bytes: float, group: int) -> float:
    """One balanced all-to-all over ``group`` chips in which every chip sends
    ``message_bytes`` spread evenly over the group, s: ``α(n) + (n−1)/n · bytes /
    (η_bus·β)`` (the 1/n addressed to itself stays); 0 for a group of one. α(n) is the
    all-reduce's fitted latency: no all-to-all table was available (ASSUMED)."""
    if group <= 1:
        return 0.0
    return (collective_latency_s(link, group)
            + (group - 1) / group * message_bytes / (link.bus_efficiency * link.bw_bytes_per_s))


def send_time_s(link: Link, message_bytes: float) -> float:
    """One point-to-point send of ``message_bytes`` (a pipeline stage handing its
    activations to the next), s: α0 + bytes / β."""
    return link.latency_s + message_bytes / link.bw_bytes_per_s
