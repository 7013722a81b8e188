"""Mixed-workload engine benchmark: autoregressive chat, a diffusion LM, image diffusion
pipelines and branching search with a verifier, in one fleet, at least 100k requests.

Usage (from the repository root)::

    python bench/bench_mixed.py [--duration-s 1250] [--scale 1.0] [--quick] [--features]

Prints requests simulated, wall seconds, CPU microseconds per request, requests per wall-second, SimPy events per
request and per denoising sample-step, then events per request of the image workload at
20 and at 200 denoising steps: diffusion steps advance in one timeout while a batch is
unchanged, so events per request must not grow with the number of steps.

``--features``: the chat workload speculates and is split into prefill and decode pools
(``bench_engine.with_features``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sim.engine.demand import generate_demand  # noqa: E402
from sim.engine.core import simulate  # noqa: E402
from sim.scenario import parse_scenario  # noqa: E402


def build_scenario(duration_s: float, scale: float, features: str | None = None):
    def rate(r: float) -> dict:
        return {"kind": "poisson", "rate_per_s": r * scale}

    lengths = {
        "prompt_tokens": {"kind": "lognormal", "median": 760, "sigma": 0.99, "min": 2, "max": 3000},
        "output_tokens": {"kind": "lognormal", "median": 151, "sigma": 0.86, "min": 7, "max": 1000},
    }
    data = {
        "name": "bench-mixed",
        "seed": 3,
        "duration_s": duration_s,
        "drain_s": 1200.0,
        "workloads": {
            "chat": {"kind": "autoregressive", "model": "llama-3-8b", "arrival": rate(40), **lengths},
            "dlm": {"kind": "diffusion_lm", "model": "llada-8b", "arrival": rate(20), **lengths,
                    "steps": {"kind": "choice", "values": [4, 8, 16, 32], "weights": [0.3, 0.3, 0.25, 0.15]}},
            "image": {"kind": "image_diffusion", "model": "sdxl", "arrival": rate(20)},
            "search": {"kind": "branching_search", "model": "flux-1-dev", "arrival": rate(2), "candidates_k": 4,
                       "shared_steps": 20, "total_steps": 28,
                       "verifier": {"checkpoints": [24, 28], "fail_probability": 0.2, "backtrack_steps": 4}},
        },
        "fleets": [{"name": "mixed", "pools": [
            {"name": "chat", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": max(1, round(4 * scale))},
            {"name": "dlm", "accelerator": "b200", "serves": ["dlm"], "replicas": max(1, round(4 * scale))},
            {"name": "image", "accelerator": "b200", "serves": ["image"], "replicas": max(1, round(4 * scale)), "max_batch": 16},
            {"name": "search", "accelerator": "b200", "serves": ["search"], "replicas": max(1, round(6 * scale)), "max_batch": 32},
            {"name": "verify", "accelerator": "mi300x", "serves": ["search:verify"], "replicas": 1, "max_batch": 64},
        ]}],
    }
    if features:
        from bench_engine import with_features

        with_features(data, "chat", features)
    return parse_scenario(data, "bench_mixed")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration-s", type=float, default=1250.0)
    p.add_argument("--scale", type=float, default=1.0, help="multiply every rate and pool size")
    p.add_argument("--quick", action="store_true", help="120 s instead of the full run")
    p.add_argument("--features", nargs="?", const="both", default=None, choices=("both", "spec", "split"),
                   help="speculation and/or a prefill/decode split of the chat pool")
    args = p.parse_args(argv)
    scenario = build_scenario(120.0 if args.quick else args.duration_s, args.scale, args.features)
    demand = generate_demand(scenario)
    n = sum(len(d) for d in demand.values())
    t0, c0 = time.perf_counter(), time.process_time()
    run = simulate(scenario, 0, demand=demand)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    req = run.requests
    sample_steps = int(req["sample_steps"].sum())
    print(f"mixed: {scenario.duration_s:.0f} s, AR + diffusion LM + image pipeline + search with verifier")
    print(f"  requests simulated          {n:>12,}")
    print(f"  by workload                 {', '.join(f'{k} {len(v):,}' for k, v in demand.items())}")
    print(f"  status                      {req['status'].value_counts().to_dict()}")
    print(f"  wall seconds (simulate)     {wall:>12.2f}")
    print(f"  CPU us per request          {cpu / n * 1e6:>12.1f}")
    print(f"  requests per wall-second    {n / wall:>12,.0f}")
    print(f"  SimPy events per request    {run.events / n:>12.2f}")
    print(f"  denoising sample-steps      {sample_steps:>12,}")
    print(f"  events per sample-step      {run.events / max(sample_steps, 1):>12.4f}")
    print("\nsteps independence: the image workload alone, 20 vs 200 denoising steps, same arrivals")
    for steps in (20, 200):
        data = scenario.model_dump(mode="json")
        data["workloads"] = {"image": {**data["workloads"]["image"], "steps": steps}}
        data["fleets"][0]["pools"] = [p for p in data["fleets"][0]["pools"] if p["name"] == "image"]
        data["fleets"][0]["pools"][0]["replicas"] *= steps // 20
        one = parse_scenario(data, "bench_mixed steps")
        demand_one = generate_demand(one)
        count = sum(len(d) for d in demand_one.values())
        result = simulate(one, 0, demand=demand_one)
        print(f"  {steps:>4} steps: {count:,} requests, {result.events / count:.2f} events/request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
