"""Small scenarios built as dicts, shared by the engine, models and studies tests."""

from __future__ import annotations

import copy

from sim.scenario import parse_scenario


def ar_pool(name="chat", accelerator="h100-sxm", serves=("chat",), **kw):
    return {"name": name, "accelerator": accelerator, "serves": list(serves), "replicas": 1, "tp": 1, **kw}


def make_scenario(workloads: dict, pools: list, **top) -> object:
    data = {
        "seed": 7,
        "duration_s": 60.0,
        "warmup_s": 0.0,
        "workloads": copy.deepcopy(workloads),
        "fleets": [{"name": "f", "pools": copy.deepcopy(pools)}],
    }
    data.update(top)
    return parse_scenario(data, "test")
