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


# A mixed fleet (chat, diffusion LM, images, search) for the engine-mode tests
MIXED_WORKLOADS = {
    "chat": {
        "kind": "autoregressive",
        "model": "llama-3-8b",
        "arrival": {"kind": "gamma", "rate_per_s": 8.0, "cv": 2.0},
        "prompt_tokens": {"kind": "lognormal", "median": 900, "sigma": 0.9, "max": 6000},
        "output_tokens": {"kind": "lognormal", "median": 200, "sigma": 0.9, "max": 1500},
    },
    "dlm": {
        "kind": "diffusion_lm",
        "model": "llada-8b",
        "arrival": {"kind": "poisson", "rate_per_s": 3.0},
        "prompt_tokens": {"kind": "lognormal", "median": 400, "sigma": 0.5, "max": 2000},
        "output_tokens": {"kind": "lognormal", "median": 300, "sigma": 0.6, "max": 1200},
        "steps": {"kind": "choice", "values": [4, 8, 16, 32]},
    },
    "image": {"kind": "image_diffusion", "model": "sdxl", "arrival": {"kind": "poisson", "rate_per_s": 3.0}},
    "search": {
        "kind": "branching_search",
        "model": "flux-1-dev",
        "arrival": {"kind": "poisson", "rate_per_s": 0.3},
        "candidates_k": 4,
        "shared_steps": 20,
        "total_steps": 28,
    },
}

# the chat pool is deliberately short of KV cache (a small memory share) to force preemptions
MIXED_POOLS = [
    {"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 2, "memory_utilization": 0.107, "min_kv_tokens": 1000},
    {"name": "dlm", "accelerator": "h100-sxm", "serves": ["dlm"], "replicas": 1},
    {"name": "image", "accelerator": "h100-sxm", "serves": ["image"], "replicas": 1, "max_batch": 8},
    {"name": "search", "accelerator": "mi300x", "serves": ["search"], "replicas": 1, "max_batch": 8},
]
