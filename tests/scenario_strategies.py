"""Hypothesis strategies that build whole dcsim scenario mappings as a user would write
them, and the settings the differential engine tests share (fast vs exact mode:
``tests/sim/engine/test_fast_exact_differential.py`` and the tests that reuse its
generator). ``DCSIM_DIFF_EXAMPLES=N`` sets the examples per test for a long local run.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from fleets.catalog_io import load_catalog
from sim.fleet_plan import resolve_fleet
from sim.errors import PlacementError
from sim.scenario import parse_scenario

LONG = int(os.environ.get("DCSIM_DIFF_EXAMPLES", "0"))
ROUTERS = ["round_robin", "least_outstanding", "join_shortest_queue", "central_queue"]
GPUS = ["h100-sxm", "mi300x", "b200"]


def diff_settings(examples: int):
    return settings(
        max_examples=LONG or examples,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


# --- lengths and arrivals ------------------------------------------------------------
@st.composite
def lengths(draw, low: int, high: int) -> dict:
    """A token-length distribution on [low, high]: constant, uniform, exponential,
    choice or heavy-tailed lognormal."""
    kind = draw(st.sampled_from(["constant", "uniform", "exponential", "choice", "lognormal"]))
    if kind == "constant":
        return {"kind": "constant", "value": draw(st.integers(low, high))}
    if kind == "uniform":
        a = draw(st.integers(low, high - 1))
        return {"kind": "uniform", "low": a, "high": draw(st.integers(a + 1, high))}
    if kind == "exponential":
        return {"kind": "exponential", "mean": draw(st.integers(low, high))}
    if kind == "choice":
        return {"kind": "choice", "values": draw(st.lists(st.integers(low, high), min_size=1, max_size=4))}
    return {
        "kind": "lognormal",
        "median": draw(st.integers(low, max(low, high // 8))),
        "sigma": draw(st.sampled_from([0.5, 1.2, 2.0])),
        "min": low,
        "max": high,
    }


@st.composite
def token_pair(draw, prompt_max: int, output_max: int) -> dict:
    """prompt_tokens and output_tokens, sometimes equal constants (every request alike)."""
    if draw(st.integers(0, 3)) == 0:
        value = draw(st.integers(1, min(prompt_max, output_max)))
        return {"prompt_tokens": {"kind": "constant", "value": value}, "output_tokens": {"kind": "constant", "value": value}}
    return {"prompt_tokens": draw(lengths(1, prompt_max)), "output_tokens": draw(lengths(1, output_max))}


@st.composite
def arrival(draw, duration_s: float, count: int, trace_dir) -> dict:
    """An arrival process expected to bring about ``count`` requests in ``duration_s``."""
    rate = count / duration_s
    kind = draw(st.sampled_from(["poisson", "gamma", "mmpp", "trace"] if trace_dir else ["poisson", "gamma", "mmpp"]))
    if kind == "poisson":
        return {"kind": "poisson", "rate_per_s": rate}
    if kind == "gamma":
        return {"kind": "gamma", "rate_per_s": rate, "cv": draw(st.sampled_from([0.5, 1.0, 3.0]))}
    if kind == "mmpp":
        quiet = draw(st.sampled_from([0.0, rate / 4]))
        return {"kind": "mmpp", "rates_per_s": [quiet, 4 * rate], "mean_dwell_s": [duration_s / 3, duration_s / 6]}
    # a trace: arrivals on a millisecond grid (so some share an instant), Azure CSV format
    ms = draw(st.lists(st.integers(0, max(int(duration_s * 1000) - 1, 0)), min_size=2, max_size=max(count, 2)))
    ms.sort()
    start = datetime(2023, 11, 16, 18, 0, 0)
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for t in ms:
        stamp = (start + timedelta(milliseconds=t)).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
        rows.append(f"{stamp},{draw(st.integers(1, 1500))},{draw(st.integers(1, 200))}")
    path = trace_dir / f"trace{draw(st.integers(0, 10**9))}.csv"
    path.write_text("\n".join(rows) + "\n")
    return {"kind": "trace", "path": str(path), "format": "azure_csv"}


# --- workloads and their pools -----------------------------------------------------
@st.composite
def ar_pool_settings(draw, model: str, max_tokens: int, pressure: bool = False) -> dict:
    """Serving settings of an AR pool; with KV pressure the cache holds only a few
    requests, so sequences are preempted."""
    cat = load_catalog()
    acc = draw(st.sampled_from(GPUS))
    tp = draw(st.sampled_from([1, 2, 4]))
    pp = draw(st.sampled_from([1, 1, 2]))
    precision = draw(st.sampled_from(["fp8", "bf16"]))
    out = {
        "accelerator": acc, "tp": tp, "pp": pp, "precision": precision,
        "max_batch": draw(st.sampled_from([4, 8, 32, 256] if pressure else [1, 2, 4, 8, 32, 256])),
        "max_prefill_tokens": draw(st.sampled_from([64, 512, 2048, 8192])),
        "kv_block_tokens": draw(st.sampled_from([1, 16, 32])),
        "kv_watermark": draw(st.sampled_from([0.0, 0.01, 0.1])),
        "iteration_overhead_s": draw(st.sampled_from([0.0, 0.002])),
        "min_kv_tokens": 0,
    }
    m, a = cat.model(model), cat.accelerator(acc)
    memory = tp * pp * a.memory_bytes
    if pressure or draw(st.booleans()):  # KV pressure: room for a few requests; larger ones are rejected
        kv_tokens = max_tokens * draw(st.sampled_from([0.2, 0.5, 1.1, 2.5]))
        out["memory_utilization"] = min(1.0, (m.weight_bytes(precision) + kv_tokens * m.kv_bytes_per_token(precision)) / memory)
    else:
        out["memory_utilization"] = 0.9
    if m.weight_bytes(precision) >= out["memory_utilization"] * memory:
        out["memory_utilization"] = 1.0
    return out


@st.composite
def ar_workload(draw, duration_s, count, trace_dir, pressure=False):
    model = draw(st.sampled_from(["llama-3-8b", "llama-3-8b", "mixtral-8x7b"]))
    wl = {"kind": "autoregressive", "model": model}
    wl["arrival"] = draw(arrival(duration_s, count, trace_dir))
    if pressure:  # sequences that grow: decode KV outgrows what admission saw
        wl.update(prompt_tokens=draw(lengths(1, 600)), output_tokens=draw(lengths(40, 300)))
    elif wl["arrival"]["kind"] != "trace" or draw(st.booleans()):
        wl.update(draw(token_pair(2000, 300)))
    if draw(st.integers(0, 3)) == 0:
        wl["speculation"] = draw(speculation(model))
    elif draw(st.integers(0, 4)) == 0:
        wl["best_of_k"] = draw(st.integers(2, 4))
    return wl


@st.composite
def speculation(draw, model: str) -> dict:
    """Speculative decoding of ``model``: every method, 1 to 8 draft tokens, one acceptance
    or one per position (including the extremes 0 and 1)."""
    methods = ["ngram", "eagle", "mtp"] + (["draft_model"] if model == "mixtral-8x7b" else [])
    method = draw(st.sampled_from(methods))
    k = draw(st.integers(1, 8))
    values = st.sampled_from([0.0, 0.3, 0.7, 0.9, 1.0])
    out = {"method": method, "draft_tokens": k,
           "acceptance": draw(st.one_of(values, st.lists(values, min_size=k, max_size=k)))}
    if method in ("eagle", "mtp"):
        out["head_vocab"] = 128_256 if model.startswith("llama") else 32_000
    if method == "draft_model":
        out["draft_model"] = "llama-3-8b"
    return out


@st.composite
def split_pools(draw, name: str, i: int, wl: dict, replicas, pressure: bool) -> list[dict]:
    """A split deployment of AR workload ``name``: one prefill pool and one or two decode
    pools (any of the GPUs, sometimes in one NVLink domain, sometimes on a fabric of the
    catalog), their KV caches at one precision."""
    max_tokens = 900 if pressure else 2300
    prefill = {"name": f"p{i}prefill", "serves": [f"{name}:prefill"], "replicas": draw(replicas),
               **draw(ar_pool_settings(wl["model"], max_tokens, pressure))}
    out = [prefill]
    for j in range(draw(st.integers(1, 2))):
        decode = {"name": f"p{i}decode{j}", "serves": [f"{name}:decode"], "replicas": draw(replicas),
                  **draw(ar_pool_settings(wl["model"], max_tokens, pressure))}
        decode["kv_precision"] = prefill["kv_precision"] = prefill["precision"]
        if draw(st.booleans()):  # one scale-up domain: the KV cache moves over NVLink
            decode.update(accelerator=prefill["accelerator"], domain="nvl")
            prefill["domain"] = "nvl"
        out.append(decode)
    for pool in out:
        if draw(st.integers(0, 2)) == 0:
            pool["scaleout_fabric"] = draw(st.sampled_from(["ib-ndr-400", "roce-800", "eth-100"]))
    wl["disaggregation"] = {"decode_choice": draw(st.sampled_from(["at_prefill", "at_handoff"])),
                            "kv_transfer": draw(st.sampled_from(["layerwise", "after_prefill"]))}
    wl.pop("best_of_k", None)
    return out


@st.composite
def dlm_workload(draw, duration_s, count, trace_dir):
    wl = {"kind": "diffusion_lm", "model": "llada-8b", "arrival": draw(arrival(duration_s, count, trace_dir))}
    if wl["arrival"]["kind"] != "trace" or draw(st.booleans()):
        wl.update(draw(token_pair(2000, 300)))
    wl["block_tokens"] = draw(st.sampled_from([16, 64, 256]))
    wl["steps"] = {"kind": "choice", "values": draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=3))}
    return wl


@st.composite
def picture_workload(draw, duration_s, count, trace_dir, pressure=False):
    kinds = ["branching_search"] if pressure else ["image_diffusion", "video_diffusion", "branching_search"]
    kind = draw(st.sampled_from(kinds))
    wl = {"kind": kind, "arrival": draw(arrival(duration_s, count, trace_dir))}
    wl["pipeline"] = draw(st.booleans())
    if kind == "video_diffusion":
        wl.update(model="wan2.1-t2v-1.3b", steps=draw(st.integers(1, 4)), frames=draw(st.sampled_from([1, 5, 9])),
                  height_px=240, width_px=320)
    elif kind == "image_diffusion":
        wl.update(model=draw(st.sampled_from(["sdxl", "flux-1-dev"])), steps=draw(st.integers(1, 6)))
        if wl["model"] == "sdxl":
            wl["cfg"] = draw(st.booleans())
    else:
        total = draw(st.integers(2, 8) if pressure else st.integers(1, 8))
        shared = draw(st.integers(0, total - 1) if pressure else st.integers(0, total))
        wl.update(model=draw(st.sampled_from(["sdxl", "flux-1-dev"])), candidates_k=draw(st.integers(2 if pressure else 1, 4)),
                  shared_steps=shared, total_steps=total)
        if draw(st.booleans()):
            checkpoints = sorted(draw(st.sets(st.integers(shared, total), max_size=2)))
            wl["verifier"] = {
                "model": "verifier",
                "fail_probability": draw(st.sampled_from([0.0, 0.3, 0.6])),
                "backtrack_steps": draw(st.integers(1, 3)),
                "retry_budget": draw(st.integers(0, 2)),
            }
            if checkpoints:
                wl["verifier"]["checkpoints"] = checkpoints
    return wl


def stage_names(wl: dict) -> list[str]:
    stages = []
    if wl.get("pipeline", True):
        stages += ["encode", "decode"] + ([] if wl["kind"] == "video_diffusion" else ["safety"])
    if wl["kind"] == "branching_search" and wl.get("verifier"):
        stages.append("verify")
    return stages


@st.composite
def scenarios(draw, tmp_path, families=("ar", "dlm", "picture", "service"), max_workloads=3, pressure=False,
              split=True) -> dict:
    """A whole scenario mapping (one fleet) in the spirit of scenarios/*.yaml, small
    enough that exact mode runs it in a fraction of a second."""
    burst = draw(st.integers(0, 1 if pressure else 3)) == 0
    duration_s = draw(st.sampled_from([0.0005, 0.002, 0.01])) if burst else draw(st.sampled_from([0.5, 2.0, 8.0, 20.0]))
    kinds = draw(st.lists(st.sampled_from(families), min_size=1, max_size=max_workloads))
    use_trace = draw(st.booleans())
    trace_dir = tmp_path if use_trace else None
    workloads, pools = {}, []
    replicas = st.sampled_from([1, 2]) if pressure else st.sampled_from([1, 1, 2, 3, 4, 8, 16, 64])
    ar_pools: dict[str, dict] = {}  # model -> pool shared by AR workloads of that model
    for i, family in enumerate(kinds):
        name = f"w{i}"
        count = draw(st.integers(10, 40) if pressure else st.integers(1, 40))
        if family == "ar":
            wl = draw(ar_workload(duration_s, count, trace_dir, pressure))
            workloads[name] = wl
            if split and draw(st.integers(0, 3)) == 0:  # prefill and decode on pools of their own
                pools += draw(split_pools(name, i, wl, replicas, pressure))
                continue
            shared = ar_pools.get(wl["model"])
            if shared is not None and draw(st.booleans()):
                shared["serves"].append(name)
                first = workloads[shared["serves"][0]]  # a replica runs one drafter: the same speculation
                wl.pop("speculation", None)
                if "speculation" in first:
                    wl["speculation"] = first["speculation"]
                    wl.pop("best_of_k", None)
                continue
            pool = {"name": f"p{i}", "serves": [name], "replicas": draw(replicas)}
            max_tokens = (900 if pressure else 2300) * wl.get("best_of_k", 1)
            pool.update(draw(ar_pool_settings(wl["model"], max_tokens, pressure)))
            ar_pools[wl["model"]] = pool
            pools.append(pool)
        elif family == "dlm":
            wl = draw(dlm_workload(duration_s, count, trace_dir))
            workloads[name] = wl
            pool = {"name": f"p{i}", "accelerator": draw(st.sampled_from(GPUS)), "serves": [name],
                    "replicas": draw(replicas), "max_batch": draw(st.sampled_from([1, 4, 64]))}
            if draw(st.booleans()):  # memory for the KV of a few requests only
                pool["memory_utilization"] = draw(st.sampled_from([0.12, 0.15, 0.3]))
            pools.append(pool)
        elif family == "picture":
            wl = draw(picture_workload(duration_s, count, trace_dir, pressure))
            workloads[name] = wl
            k = wl.get("candidates_k", 1)
            main = {"name": f"p{i}", "accelerator": draw(st.sampled_from(GPUS)), "serves": [name],
                    "replicas": draw(replicas), "max_batch": max(k, draw(st.sampled_from([1, 2, 8, 16]))),
                    "domain": "nvl"}
            if pressure or draw(st.booleans()):  # little activation memory: forks wait for it
                main[SQUEEZE] = draw(st.sampled_from([1.0, 1.02, 1.2]))
            pools.append(main)
            for stage in stage_names(wl):
                if draw(st.integers(0, 2)) == 0:  # this stage on a pool of its own
                    pools.append({
                        "name": f"p{i}{stage}", "accelerator": draw(st.sampled_from(["h100-sxm", main["accelerator"], "tpu-v6e"])),
                        "serves": [f"{name}:{stage}"], "replicas": draw(st.integers(1, 3)),
                        "max_batch": max(k, draw(st.sampled_from([1, 4, 16]))),
                        "domain": draw(st.sampled_from(["nvl", None])),
                    })
        else:
            wl = {"kind": "service_time", "arrival": {"kind": "poisson", "rate_per_s": count / duration_s},
                  "service_s": {"kind": "exponential", "mean": duration_s / 4}}
            workloads[name] = wl
            pools.append({"name": f"p{i}", "accelerator": "h100-sxm", "serves": [name], "replicas": draw(replicas),
                          "max_batch": draw(st.sampled_from([1, 2]))})
    drain = draw(st.sampled_from([3000.0, 3000.0, 0.0, 0.01, 0.05, 0.5, 3.0]))
    return {
        "name": "diff",
        "seed": draw(st.integers(0, 2**31)),
        "duration_s": duration_s,
        "warmup_s": 0.0,
        "drain_s": drain,
        "sample_interval_s": duration_s + drain + 1.0,
        "workloads": workloads,
        "fleets": [{"name": "f", "router": draw(st.sampled_from(ROUTERS)), "pools": pools}],
    }


@st.composite
def remote_drafters(draw, data: dict) -> dict:
    """``data`` (a scenario of :func:`scenarios`) with every autoregressive workload
    speculating with one draft model on a pool of its own (``<name>:draft``, any of the
    GPUs, over a fabric of the catalog), as many draft replicas as target replicas or
    fewer (a drafter paired with several targets)."""
    k = draw(st.integers(1, 8))
    values = st.sampled_from([0.0, 0.3, 0.7, 0.9, 1.0])
    spec = {"method": "draft_model", "draft_tokens": k, "draft_model": "llama-3-8b",
            "acceptance": draw(st.one_of(values, st.lists(values, min_size=k, max_size=k)))}
    pools = data["fleets"][0]["pools"]
    for name, wl in data["workloads"].items():
        if wl["kind"] != "autoregressive":
            continue
        wl["speculation"] = dict(spec)
        wl.pop("best_of_k", None)
        served = [p for p in pools if any(e.split(":")[0] == name and not e.endswith(":draft") for e in p["serves"])]
        targets = sum(p["replicas"] for p in served)
        pools.append({"name": f"draft-{name}", "accelerator": draw(st.sampled_from(GPUS)),
                      "serves": [f"{name}:draft"], "replicas": draw(st.integers(max(1, targets // 2), targets)),
                      "scaleout_fabric": draw(st.sampled_from(["ib-ndr-400", "eth-100"]))})
    return data


@st.composite
def chunked(draw, data: dict) -> dict:
    """``data`` (a scenario of :func:`scenarios`) with chunked prefill on every pool that
    prefills autoregressive workloads (a co-located pool, or a split deployment's prefill
    pool), speculating or not: ``prefill_chunk_tokens`` just above what a full batch's
    decodes take (``max_batch``, × (k + 1) on a co-located pool whose workload speculates:
    decodes nearly fill the budget, one-token chunks) up to a few hundred tokens more
    (prompts in several chunks)."""
    workloads = data["workloads"]
    for pool in data["fleets"][0]["pools"]:
        names = [e for e in pool["serves"]]
        plain = all(e.partition(":")[2] in ("", "prefill") and workloads[e.partition(":")[0]]["kind"] == "autoregressive"
                    for e in names)
        if plain and names:
            per_sequence = max([workloads[e]["speculation"]["draft_tokens"] + 1 for e in names
                                if ":" not in e and "speculation" in workloads[e]] + [1])
            pool["prefill_chunk_tokens"] = (pool.get("max_batch", 256) * per_sequence
                                            + draw(st.sampled_from([1, 3, 16, 100, 700])))
    return data


PREFIX_BLOCK = 512  # tokens per hashed block of a Mooncake-format trace


@st.composite
def cached_sessions(draw, tmp_path) -> dict:
    """A scenario of a few multi-turn conversations (a Mooncake-format trace written into
    ``tmp_path``: turns extend their session's hashed blocks, one first block shared by all,
    on a millisecond grid with repeats) on Llama-3.1-8B H100 replicas with a prefix cache
    (small HBM caches, sometimes a host tier), served whole or split into a prefill pool
    (the cache's) and a decode pool, the prefilling pool chunked or not."""
    sessions = [[0] for _ in range(draw(st.integers(1, 4)))]
    next_id, t, rows = 1, 0, []
    for _ in range(draw(st.integers(2, 20))):
        ids = sessions[draw(st.integers(0, len(sessions) - 1))]
        for _ in range(draw(st.integers(0, 3))):
            ids.append(next_id)
            next_id += 1
        t += draw(st.sampled_from([0, 1, 40, 400]))
        rows.append({"timestamp": t, "input_length": len(ids) * PREFIX_BLOCK + draw(st.integers(1, PREFIX_BLOCK)),
                     "output_length": draw(st.sampled_from([1, 7, 40, 300])), "hash_ids": ids + [next_id]})
        next_id += 1
    path = tmp_path / "sessions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    max_batch = draw(st.integers(1, 8))
    cache = {"block_tokens": PREFIX_BLOCK, "capacity_blocks": draw(st.integers(1, 12)),
             "host_blocks": draw(st.sampled_from([0, 0, 3, 50]))}
    side = {"accelerator": "h100-sxm", "tp": 1, "precision": "fp8", "max_batch": max_batch, "min_kv_tokens": 2048}
    pool = {"name": "p", "serves": ["chat"], "replicas": draw(st.integers(1, 3)), "prefix_cache": cache, **side}
    if draw(st.booleans()):
        pool["prefill_chunk_tokens"] = max_batch + draw(st.sampled_from([1, 3, 100, 700]))
    wl = {"kind": "autoregressive", "model": "llama-3.1-8b",
          "arrival": {"kind": "trace", "path": str(path), "format": "mooncake_jsonl"}}
    pools = [pool]
    if draw(st.booleans()):  # split: the prefill pool keeps the cache, the decode pool none
        pool["serves"] = ["chat:prefill"]
        pools.append({"name": "d", "serves": ["chat:decode"], "replicas": draw(st.integers(1, 2)), **side})
        wl["disaggregation"] = {"decode_choice": draw(st.sampled_from(["at_prefill", "at_handoff"])),
                                "kv_transfer": draw(st.sampled_from(["layerwise", "after_prefill"]))}
    return {"name": "sessions", "seed": 1, "duration_s": 10.0, "warmup_s": 0.0,
            "drain_s": draw(st.sampled_from([100_000.0, 0.05, 1.0])), "workloads": {"chat": wl},
            "fleets": [{"name": "f", "router": draw(st.sampled_from(["least_outstanding", "round_robin", "prefix_aware"])),
                        "pools": pools}]}


SQUEEZE = "_squeeze"  # marks a pool to get just over the least memory it can be placed with


def squeeze(data: dict) -> None:
    """Give every marked pool ``factor`` × the smallest memory share it can be placed
    with (bisection on ``memory_utilization``), so its largest request's activations
    barely fit and others wait for memory."""
    pools = data["fleets"][0]["pools"]
    marked = [(pool, pool.pop(SQUEEZE)) for pool in pools if SQUEEZE in pool]
    for pool, factor in marked:
        low, high = 0.0, 1.0
        for _ in range(12):
            pool["memory_utilization"] = (low + high) / 2
            sc = parse_scenario(data, "generated")
            try:
                resolve_fleet(sc, 0).pools
                high = pool["memory_utilization"]
            except PlacementError:
                low = pool["memory_utilization"]
        pool["memory_utilization"] = min(1.0, high * factor)


def placeable(data: dict) -> bool:
    """Raise the memory share of pools that cannot be placed (a strategy draws memory
    pressure without knowing every co-located model's weights); False if even all of
    the memory is not enough."""
    for _ in range(8):
        sc = parse_scenario(data, "generated")
        try:
            resolve_fleet(sc, 0).pools
            return True
        except PlacementError as err:
            pools = data["fleets"][0]["pools"]
            failing = [p for p in pools if f"'{p['name']}'" in str(err)] or pools
            if all(p.get("memory_utilization", 0.9) >= 1.0 for p in failing):
                return False
            for p in failing:
                p["memory_utilization"] = min(1.0, p.get("memory_utilization", 0.9) * 1.6)
    return False
