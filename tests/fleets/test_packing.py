"""Packing pools into shared servers and racks, checked against a layout done by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from fleets.catalog_io import load_catalog
from fleets.packing import pack_fleet, pack_groups
from fleets.placement import place_pool

CATALOG = load_catalog()
H100 = CATALOG.accelerator("h100-sxm")
GB200 = CATALOG.accelerator("gb200")
LLAMA_8B = CATALOG.model("llama-3-8b")
LLAMA_70B = CATALOG.model("llama-3-70b")


def pool(name, acc, model, tp, replicas, precision="fp8"):
    return place_pool(name=name, accelerator=acc, model=model, precision=precision, tp=tp, pp=1, replicas=replicas)


def test_a_fleet_packed_by_hand():
    # H100 nodes hold 8 GPUs in one NVLink domain; racks hold floor(40 kW / 10.2 kW) = 3 nodes.
    # chat: 3 x tp4 = three 4-GPU groups; dlm: 1 x tp1; image: 2 x tp2; search: 5 x tp1.
    # First fit decreasing by hand:
    #   node 1: tp4 + tp4           (8/8)
    #   node 2: tp4 + tp2 + tp2     (8/8)
    #   node 3: tp1 x 6             (6/8)  -> 2 empty slots
    layouts = [pool("chat", H100, LLAMA_70B, 4, 3), pool("dlm", H100, LLAMA_8B, 1, 1),
               pool("image", H100, LLAMA_8B, 2, 2), pool("search", H100, LLAMA_8B, 1, 5)]
    packed = pack_fleet(layouts)
    (h100,) = packed.types
    assert (h100.accelerators, h100.nodes, h100.empty_slots) == (22, 3, 2)
    assert (h100.nodes_per_rack, h100.racks) == (3, 1)
    assert h100.it_power_max_w == pytest.approx(3 * (8 * 700 + 4600))
    # shares by accelerator count: chat holds 12 of 22 accelerators
    assert packed.shares["chat"].node_share == pytest.approx(3 * 12 / 22)
    assert packed.shares["dlm"].empty_slot_share == pytest.approx(2 * 1 / 22)
    assert sum(s.node_share for s in packed.shares.values()) == pytest.approx(3)
    assert sum(s.it_power_max_w for s in packed.shares.values()) == pytest.approx(h100.it_power_max_w)
    # on their own the pools would take 2 + 1 + 1 + 1 = 5 nodes
    assert sum(lay.nodes for lay in layouts) == 5


def test_two_types_never_share_a_node():
    packed = pack_fleet([pool("a", H100, LLAMA_8B, 1, 1), pool("b", GB200, LLAMA_8B, 1, 1)])
    assert packed.nodes == 2 and packed.empty_slots == (8 - 1) + (4 - 1)


def test_tp_group_larger_than_a_node_takes_whole_nodes():
    # GB200: 4 GPUs per tray, NVL72 domain; a tp8 replica takes 2 whole trays
    packed = pack_fleet([pool("big", GB200, LLAMA_70B, 8, 2), pool("small", GB200, LLAMA_8B, 1, 3)])
    assert packed.types[0].nodes == 4 + 1


@settings(max_examples=60)
@given(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=40))
def test_power_of_two_groups_pack_to_the_lower_bound(groups):
    # sizes dividing the node size pack perfectly: ceil(total / 8) nodes
    assert pack_groups(H100, groups) == -(-sum(groups) // 8)


def first_fit_decreasing(d: int, per_node: int, groups: list[int]) -> int:
    """Reference: groups placed one by one into the first domain bin with room."""
    bins_per_node = max(1, per_node // d)
    whole = sum(-(-g // per_node) for g in groups if g > d)
    free: list[int] = []
    for g in sorted((g for g in groups if g <= d), reverse=True):
        for i, room in enumerate(free):
            if room >= g:
                free[i] -= g
                break
        else:
            free.append(d - g)
    return whole + -(-len(free) // bins_per_node)


@settings(max_examples=150)
@given(st.lists(st.integers(1, 80), min_size=0, max_size=60), st.sampled_from(["h100-sxm", "gb200", "mi300x", "tpu-v5e"]))
def test_packing_by_size_equals_first_fit_one_by_one(groups, key):
    acc = CATALOG.accelerator(key)
    d = max(1, min(acc.scaleup_domain_size, acc.accelerators_per_node))
    assert pack_groups(acc, groups) == first_fit_decreasing(d, acc.accelerators_per_node, groups)


def test_a_hundred_thousand_replicas_pack_at_once():
    # 100,000 tp1 replicas on 8-GPU nodes: 12,500 nodes (one by one this took ~20 s)
    assert pack_groups(H100, [1] * 100_000) == 12_500
