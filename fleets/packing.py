"""Pack a fleet's pools into shared servers (nodes) and racks.

Rules (one fleet at a time):

- Accelerators of one type share nodes, whatever pool they serve: a 1-GPU pool and a
  4-GPU pool of H100s sit in one 8-GPU server, not in two.
- A tensor-parallel (TP) group never straddles a scale-up domain. A node holds
  ``accelerators_per_node // d`` domains of ``d = min(scaleup_domain_size,
  accelerators_per_node)`` accelerators; TP groups are packed into those domains first
  fit decreasing (optimal when group sizes divide one another, as powers of two do).
  A TP group larger than a node (a rack-scale domain such as NVL72) takes
  ``ceil(tp / accelerators_per_node)`` whole nodes.
- Racks hold nodes of one type up to their power budget: ``nodes_per_rack`` is the
  smallest value the type's pools allow (see :func:`fleets.placement.place_pool`).
- Node-level costs and power (host, server, network, rack, facility) are shared by the
  pools of a type in proportion to the accelerators each holds, empty slots included,
  so the pool shares add up exactly to the packed fleet.

Provisioned IT power of a type = nodes x full-load node power (accelerators x TDP + node
overhead, see ``fleets/data/accelerators.csv``).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from fleets.catalog import Accelerator
from fleets.placement import PoolLayout
from sim.models.parallelism import stage_accelerators


@dataclass(frozen=True, slots=True)
class TypePacking:
    """One accelerator type of a fleet, packed: counts and provisioned power (W)."""

    accelerator: Accelerator
    accelerators: int
    nodes: int
    nodes_per_rack: int
    racks: int
    empty_slots: int
    it_power_max_w: float


@dataclass(frozen=True, slots=True)
class PoolShare:
    """A pool's share of its type's packed nodes, racks and empty slots (fractions of a
    node/rack; they sum over the type's pools to the packed integers)."""

    node_share: float
    rack_share: float
    empty_slot_share: float
    it_power_max_w: float


@dataclass(frozen=True, slots=True)
class FleetPacking:
    types: tuple[TypePacking, ...]
    shares: dict[str, PoolShare]  # pool name -> share

    @property
    def nodes(self) -> int:
        return sum(t.nodes for t in self.types)

    @property
    def racks(self) -> int:
        return sum(t.racks for t in self.types)

    @property
    def empty_slots(self) -> int:
        return sum(t.empty_slots for t in self.types)

    @property
    def it_power_max_w(self) -> float:
        return sum(t.it_power_max_w for t in self.types)


def domain_slots(acc: Accelerator) -> tuple[int, int]:
    """(accelerators per domain bin, domain bins per node) of one node of ``acc``."""
    d = max(1, min(acc.scaleup_domain_size, acc.accelerators_per_node))
    return d, max(1, acc.accelerators_per_node // d)


def pack_groups(acc: Accelerator, groups: list[int]) -> int:
    """Nodes needed for TP groups of the given sizes (accelerators each) of type ``acc``."""
    per_node = acc.accelerators_per_node
    d, bins_per_node = domain_slots(acc)
    whole = sum(math.ceil(g / per_node) for g in groups if g > d)
    free: list[int] = []  # free accelerators of each open domain bin
    # first fit decreasing, one size at a time: k equal groups of size g fill the open
    # bins in order, floor(room / g) each, then new bins floor(d / g) each (the same bins
    # as placing them one by one, in O(bins) per size instead of O(groups x bins))
    counts = Counter(g for g in groups if g <= d)
    for g in sorted(counts, reverse=True):
        left = counts[g]
        for i, room in enumerate(free):
            if left == 0:
                break
            take = min(room // g, left)
            free[i] -= take * g
            left -= take
        per_bin = d // g
        full, rest = divmod(left, per_bin)
        free.extend([d - per_bin * g] * full + ([d - rest * g] if rest else []))
    return whole + math.ceil(len(free) / bins_per_node)


def pack_fleet(layouts: list[PoolLayout]) -> FleetPacking:
    """Pack ``layouts`` (one fleet's pools) into shared nodes and racks (rules above)."""
    by_type: dict[str, list[PoolLayout]] = {}
    for layout in layouts:
        by_type.setdefault(layout.accelerator.key, []).append(layout)
    types, shares = [], {}
    for group in by_type.values():
        acc = group[0].accelerator
        tp_groups = [stage_accelerators(lay.tp, lay.ep) for lay in group for _ in range(lay.replicas * lay.pp)]
        nodes = pack_groups(acc, tp_groups)
        accelerators = sum(lay.accelerators for lay in group)
        per_rack = min(lay.nodes_per_rack for lay in group)
        racks = math.ceil(nodes / per_rack)
        empty = nodes * acc.accelerators_per_node - accelerators
        power_w = nodes * acc.node_power_w
        types.append(TypePacking(acc, accelerators, nodes, per_rack, racks, max(empty, 0), power_w))
        for lay in group:
            f = lay.accelerators / accelerators
            shares[lay.name] = PoolShare(nodes * f, racks * f, max(empty, 0) * f, power_w * f)
    return FleetPacking(tuple(types), shares)
