"""Placement: memory, scale-up domain and rack power checks; node and rack counts."""

import pytest

from fleets.catalog_io import load_catalog
from fleets.placement import count_nodes, place_pool
from sim.errors import PlacementError

CATALOG = load_catalog()
H100 = CATALOG.accelerator("h100-sxm")
LLAMA_70B = CATALOG.model("llama-3-70b")


def place(**overrides):
    args = dict(name="chat", accelerator=H100, model=LLAMA_70B, precision="bf16", tp=4, pp=1,
                replicas=5, where="fleets[0].pools[1] 'chat'")
    args.update(overrides)
    return place_pool(**args)


def test_70b_bf16_on_one_h100_fails_with_numbers():
    with pytest.raises(PlacementError) as err:
        place(tp=1)
    message = str(err.value)
    assert message.startswith("fleets[0].pools[1] 'chat':")
    assert "llama-3-70b" in message and "h100-sxm" in message
    assert "141.1 GB" in message and "72.0 GB" in message  # 70.55e9 x 2 B vs 80 GB x 0.9


def test_70b_bf16_tp4_fits_and_counts_by_hand():
    layout = place()
    assert layout.accelerators == 20
    assert layout.nodes == 3          # 2 replicas of tp=4 per 8-GPU node -> ceil(5/2)
    assert layout.nodes_per_rack == 3  # floor(40 kW / 10.2 kW)
    assert layout.racks == 1
    assert layout.replica_memory_bytes == pytest.approx(4 * 80e9 * 0.9)
    assert layout.replica_free_bytes == pytest.approx(288e9 - 141.1e9)
    assert layout.node_power_w == pytest.approx(8 * 700 + 4600)
    assert layout.it_power_max_w == pytest.approx(3 * 10_200)
    assert layout.rack_power_w == pytest.approx(3 * 10_200)


def test_racks_count():
    layout = place(tp=8, replicas=7)  # 7 nodes, 3 per rack -> 3 racks
    assert (layout.nodes, layout.nodes_per_rack, layout.racks) == (7, 3, 3)


def test_tp_beyond_scaleup_domain_fails():
    with pytest.raises(PlacementError, match="TP must fit one scale-up domain of 8"):
        place(tp=16)


def test_gb200_tp_spans_nodes_in_nvl72():
    gb200 = CATALOG.accelerator("gb200")
    layout = place(accelerator=gb200, model=CATALOG.model("llama-3.1-405b"), tp=8, replicas=9)
    assert layout.nodes == 18           # 4-GPU trays, 2 per replica
    assert layout.nodes_per_rack == 18  # 120 kW / (4 x 1200 + 1866.67 W)
    assert layout.racks == 1


def test_kv_and_activation_reserve_counted():
    # 4 x 72 GB = 288 GB; weights 141.1 GB; 450,000 tokens x 327,680 B = 147.5 GB -> over.
    with pytest.raises(PlacementError, match="KV for 450000 tokens 147.5 GB"):
        place(min_kv_tokens=450_000)
    assert place(min_kv_tokens=400_000).replicas == 5


def test_rack_budget_too_small_for_one_node():
    with pytest.raises(PlacementError, match="10.20 kW.*rack power budget of 8.00 kW"):
        place(rack_power_budget_w=8_000)


def test_explicit_nodes_per_rack_over_budget():
    with pytest.raises(PlacementError, match="nodes_per_rack=4 draws 40.80 kW"):
        place(nodes_per_rack=4)
    assert place(nodes_per_rack=2).racks == 2


@pytest.mark.parametrize("field,value", [("tp", 0), ("pp", -1), ("replicas", 0),
                                         ("memory_utilization", 0.0),
                                         ("memory_utilization", 1.5), ("precision", "int4")])
def test_bad_inputs_rejected(field, value):
    with pytest.raises(PlacementError, match="fleets\\[0\\].pools\\[1\\] 'chat'"):
        place(**{field: value})


def test_fp8_halves_weights():
    layout = place(precision="fp8", tp=2)
    assert layout.replica_weight_bytes == pytest.approx(70.55e9)


def test_count_nodes_matches_ceil_when_tp_divides_node():
    for tp, replicas in [(1, 9), (2, 5), (4, 3), (8, 2)]:
        assert count_nodes(H100, tp, 1, replicas) == -(-tp * replicas // 8)
    assert count_nodes(H100, 3, 1, 4) == 2  # a 3-GPU group never straddles nodes


def test_min_kv_tokens_is_checked_at_the_bytes_the_engine_stores():
    """Regression: placement counted KV at the weights' precision without TP replication,
    so DeepSeek-V3 TP8 on H200 passed 5M tokens while the engine held ~1.2M. By hand from
    models.csv: MLA caches 61 layers x 576 values x 1 byte (fp8) per token, stored on every
    one of the 8 TP ranks (kv_heads 1): 281,088 B/token; 5M tokens = 1.41 TB > 8 x 141 GB."""
    h200, deepseek = CATALOG.accelerator("h200"), CATALOG.model("deepseek-v3")
    assert 61 * 576 * 8 == 281_088
    with pytest.raises(PlacementError, match="KV for 5000000 tokens"):
        place(accelerator=h200, model=deepseek, precision="fp8", tp=8, replicas=1, min_kv_tokens=5_000_000)
    # 1M tokens (281 GB) fits next to the weights in 8 x 141 GB x 0.9
    place(accelerator=h200, model=deepseek, precision="fp8", tp=8, replicas=1, min_kv_tokens=1_000_000)


@pytest.mark.parametrize("fields, message", [
    ({"accelerator": CATALOG.accelerator("tpu-v5e"), "precision": "fp8"}, "precision='fp8' has no published peak"),
    ({"precision": "fp4"}, "precision='fp4' has no published peak"),  # H100: no FP4 peak
    ({"precision": "bf16", "kv_precision": "fp4"}, "kv_precision='fp4' has no published peak"),
    ({"tp": 3}, "tp=3 does not divide the model's 64 attention heads"),
])
def test_precision_and_head_errors_name_the_pool_and_the_field(fields, message):
    with pytest.raises(PlacementError) as err:
        place(**fields)
    assert "fleets[0].pools[1] 'chat'" in str(err.value) and message in str(err.value)
