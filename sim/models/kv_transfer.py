"""The KV-cache transfer of a disaggregated deployment: the prompt's KV cache moves from the
prefill replica that computed it to the decode replica that continues the sequence.

Bytes: the prompt's tokens x the model's KV bytes per token in the KV precision
(:meth:`fleets.catalog.Model.kv_bytes_per_token`), times the copies the *decode* layout
keeps (:func:`sim.models.parallelism.kv_replication`: a decode TP group wider than the KV
heads keeps one copy per shard, and every shard receives its own). When the workload
speculates with a drafter that keeps a KV cache of its own (a draft model, an EAGLE-style
head, MTP heads) and the decode replica runs it locally, the drafter's KV of the prompt
(computed by the prefill replica alongside the target's) moves too: the drafter's KV bytes
per token at the same KV precision, times the copies the decode layout keeps of *its* KV
heads, are added to every token (a drafter on a pool of its own: nothing more moves, the
draft pool prefills the prompt itself, :mod:`sim.models.speculation`).

Link (the same rule as a pipeline hand-off, :func:`sim.engine.journey.transfer_s`): the
scale-up link (NVLink, Infinity Fabric ...) when both pools share a ``domain`` label and
accelerator type; otherwise the scale-out NIC of each GPU (the accelerator's catalog
figures or the pool's ``scaleout_fabric``, :mod:`fleets.fabrics`), at the slower side's
bandwidth and the larger side's latency.

Lanes (the TP/PP layout conversion): the KV is sharded by heads (TP) and layers (PP) over
the sender's ``s`` accelerators and lands on the receiver's ``r``; every accelerator moves
its share over its own link, so ``min(s, r)`` links run in parallel (with different TP
each shard's heads go to one or several peers; the side with fewer accelerators limits).

Time of one transfer (α–β, as :func:`sim.models.parallelism.send_time_s`)::

    T = α + bytes / (min(s, r) · β)

Overlap: ``after_prefill`` moves the whole cache once it is complete and the decode
replica has reserved its blocks (DistServe's pull). ``layerwise`` streams each of the L
layers as soon as it is computed (Splitwise): layer ℓ is ready at p0 + ℓ·T_p/L (prefill
from p0 to p1 = p0 + T_p) and the layers go one after the other, T_β/L each (T_β = T − α),
from ``ready`` (when the decode side reserved its blocks) on; the last one leaves at the
largest of ``max(ready, p0 + T_p/L) + T_β`` (the link busy from the first layer on) and
``p1 + T_β/L`` (the last layer waits for its compute), the maximum of a linear sequence
being at an end (the drafter's KV, when it moves, is spread over the same L layers). Both assume η = 1 of the
link's bandwidth (ASSUMED, as :func:`sim.models.parallelism.scaleout_link`) and no
contention with other traffic on the NICs.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleets.catalog import Accelerator, Model
from sim.models.parallelism import kv_replication, replica_accelerators

LINKS = ("scale-up", "scale-out")


@dataclass(frozen=True, slots=True)
class KVEnd:
    """One side of a transfer: a pool's accelerator (with its fabric applied), its layout
    (``tp``, ``pp``, ``ep``) and its scale-up ``domain`` label (None: its own)."""

    accelerator: Accelerator
    tp: int
    pp: int
    ep: int
    domain: str | None

    @property
    def accelerators(self) -> int:
        return replica_accelerators(self.tp, self.pp, self.ep)


@dataclass(frozen=True, slots=True)
class KVLink:
    """How one prompt's KV cache moves between two pools (module docstring).

    Attributes:
        link: ``scale-up`` or ``scale-out``.
        latency_s: α, s.
        bw_bytes_per_s: β of one lane (per accelerator, per direction), bytes/s.
        lanes: links in parallel, min(sender, receiver accelerators).
        bytes_per_token: bytes moved per prompt token.
        layers: layers streamed one by one under ``layerwise``.
    """

    link: str
    latency_s: float
    bw_bytes_per_s: float
    lanes: int
    bytes_per_token: float
    layers: int

    def bytes_of(self, tokens: int) -> float:
        """Bytes moved for a prompt of ``tokens`` tokens."""
        return tokens * self.bytes_per_token

    def wire_s(self, tokens: int) -> float:
        """T_β: the bandwidth term, s."""
        return self.bytes_of(tokens) / (self.lanes * self.bw_bytes_per_s)

    def transfer_s(self, tokens: int) -> float:
        """T = α + bytes / (lanes · β): the whole cache of ``tokens`` tokens, s."""
        return self.latency_s + self.wire_s(tokens)

    def done_at_s(self, tokens: int, ready_at_s: float, prefill_start_s: float, prefill_end_s: float,
                  layerwise: bool) -> float:
        """Instant the transfer ends when the decode side reserved its blocks at
        ``ready_at_s`` (module docstring: after_prefill or layerwise overlap)."""
        wire = self.wire_s(tokens)
        if not layerwise:
            return max(ready_at_s, prefill_end_s) + self.latency_s + wire
        layers = max(self.layers, 1)
        start = max(ready_at_s, prefill_start_s + (prefill_end_s - prefill_start_s) / layers)
        return self.latency_s + max(start + wire, prefill_end_s + wire / layers)


    def hand_over(self, tokens: int, ready_at_s: float, prefill_start_s: float, prefill_end_s: float,
                  layerwise: bool) -> tuple[float, float, float]:
        """(:meth:`done_at_s`, :meth:`bytes_of`, :meth:`transfer_s`) of one request in one
        call, the same expressions (the decode side reserves once per request)."""
        moved = tokens * self.bytes_per_token
        wire = moved / (self.lanes * self.bw_bytes_per_s)
        if not layerwise:
            done = max(ready_at_s, prefill_end_s) + self.latency_s + wire
        else:
            layers = max(self.layers, 1)
            start = max(ready_at_s, prefill_start_s + (prefill_end_s - prefill_start_s) / layers)
            done = self.latency_s + max(start + wire, prefill_end_s + wire / layers)
        return done, moved, self.latency_s + wire


def kv_link(source: KVEnd, target: KVEnd, model: Model, kv_precision: str,
            draft: Model | None = None) -> KVLink:
    """The link the KV cache of ``model`` (stored at ``kv_precision``) takes from a replica
    laid out as ``source`` to one laid out as ``target`` (module docstring); ``draft``: the
    drafter whose KV of the prompt moves with it (None: none moves).

    Raises:
        UserError: an unknown KV precision."""
    same_domain = (source.domain is not None and source.domain == target.domain
                   and source.accelerator.key == target.accelerator.key)
    a, b = source.accelerator, target.accelerator
    if same_domain and a.scaleup_bw_bytes_per_s:
        link, latency, bw = "scale-up", a.scaleup_latency_s, a.scaleup_bw_bytes_per_s
    else:
        link = "scale-out"
        latency = max(a.scaleout_latency_s, b.scaleout_latency_s)
        bw = min(a.scaleout_bw_bytes_per_s, b.scaleout_bw_bytes_per_s)
    per_token = model.kv_bytes_per_token(kv_precision) * kv_replication(model, target.tp)
    if draft is not None:
        per_token += draft.kv_bytes_per_token(kv_precision) * kv_replication(draft, target.tp)
    return KVLink(link, latency, bw, min(source.accelerators, target.accelerators), per_token, model.layers or 1)
