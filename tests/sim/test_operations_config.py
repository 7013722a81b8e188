"""Bad operations config is refused with the field and the allowed values."""

from __future__ import annotations

import copy

import pytest

from sim.errors import ScenarioError, UserError
from sim.fleet_plan import resolve
from sim.scenario import parse_scenario

BASE = {
    "name": "ops", "duration_s": 60.0,
    "workloads": {"chat": {"kind": "autoregressive", "model": "llama-3.1-8b",
                           "arrival": {"kind": "poisson", "rate_per_s": 1.0},
                           "mix": {"models": 3}}},
    "fleets": [{"name": "f", "pools": [{"name": "p", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 4,
                                        "loading": {"storage": "nvme-gen5"}, "residency": {"resident_models": 2}}]}],
}


def with_(path: tuple, value) -> dict:
    data = copy.deepcopy(BASE)
    node = data
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


POOL = ("fleets", 0, "pools", 0)


@pytest.mark.parametrize("path, value, words", [
    (POOL + ("loading",), None, ["residency and autoscale load weights", "loading"]),
    (POOL + ("residency",), None, ["residency", "model mix"]),
    (POOL + ("autoscale",), {"target": 4.0, "min_replicas": 9}, ["min_replicas (=9)", "replicas (=4"]),
    (POOL + ("failures",), {"repair_s": 60.0}, ["preset (llama3) or components"]),
    (("workloads", "chat", "mix"), {"from_trace": True}, ["genai_csv"]),
    (("fleets", 0, "router"), "round_robin", None),
])
def test_refused_at_load(path, value, words):
    data = with_(path, value)
    if path[-1] == "router":  # round robin cannot take replicas out of routing
        data["fleets"][0]["pools"][0]["failures"] = {"preset": "llama3", "repair_s": 60.0}
        words = ["round_robin", "least_outstanding"]
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data)
    for word in words:
        assert word in str(err.value)


def test_unknown_storage_tier_names_the_allowed_ones():
    sc = parse_scenario(with_(POOL + ("loading",), {"storage": "nvme-gen9"}))
    with pytest.raises(UserError) as err:
        resolve(sc)
    assert "unknown storage tier 'nvme-gen9'" in str(err.value) and "nvme-gen5" in str(err.value)


def test_resident_checkpoints_take_memory_from_the_kv_cache():
    one = resolve(parse_scenario(with_(POOL + ("residency",), {"resident_models": 1}))).fleets[0].pools[0]
    three = resolve(parse_scenario(with_(POOL + ("residency",), {"resident_models": 3}))).fleets[0].pools[0]
    # Llama-3.1-8B at FP8: 8.03e9 bytes per extra checkpoint
    assert one.free_bytes - three.free_bytes == pytest.approx(2 * 8.03e9)
