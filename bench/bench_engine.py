"""Engine benchmark: how fast does ``simulate`` run, and what does it cost per request?

Usage (from the repository root)::

    python bench/bench_engine.py [--duration-s 3600] [--rate 100] [--replicas 64]
                                 [--mode fast|exact] [--quick] [--save] [--features]

Main case: ``duration_s`` seconds of Poisson arrivals at ``rate`` requests/s (default one
hour at 100/s, about 360k requests) of llama-3-70b requests whose prompt and output
lengths are resampled from the Azure LLM inference trace 2023 (conv) (empirical
distribution), served by ``replicas`` H100-SXM TP4 FP8 replicas behind a
least-outstanding router. Only ``simulate`` is timed (demand is drawn beforehand).

``--features [both|spec|split]`` turns on the serving features of issue 25 (both by default): the chat workload speculates
(an EAGLE-style head, k = 3, acceptance 0.7) and its replicas are split into a prefill pool
(a quarter of them) and a decode pool (the rest), the KV cache moving over InfiniBand
NDR; the cost per request should stay within 15% of the plain run's.

Second case (output-length independence): a shorter run (10 min, 1 min with ``--quick``)
simulated twice on the same arrivals and prompts, with every output length set to 50 and
then to 1000 tokens; events per request should be the same for both.

Printed: requests, wall seconds, CPU microseconds per request (the process's own time:
steadier than wall time on a shared machine), simulated requests per wall-second, SimPy events per
request, peak RSS, and RSS growth per retained request (RSS after ``simulate`` returned,
its FleetRun still alive, minus RSS before, over the number of requests). With ``--save``
the figures are also written to ``bench/results.json``.

Targets (issue 14, "from a pod to a datacenter"): >= 50,000 requests per wall-second on one
core (measured on a quiet machine, medians of several runs), events/request
independent of output length, < 1 KB of memory per retained request.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sim import ENGINE_BUILD  # noqa: E402 - 'compiled' or 'source' (sim/_build)
from sim.engine.demand import generate_demand  # noqa: E402
from sim.engine.core import simulate  # noqa: E402
from sim.scenario import parse_scenario  # noqa: E402

TRACE = REPO / "traffic" / "data" / "AzureLLMInferenceTrace_conv.csv"  # shipped (traffic/data/NOTICE.md)
RESULTS_JSON = REPO / "bench" / "results.json"

TARGET_REQ_PER_WALL_S = 50_000
TARGET_BYTES_PER_REQUEST = 1024


def _trace_path() -> Path:
    if not TRACE.is_file():
        sys.exit(
            f"bench_engine: trace file not found: {TRACE}\n"
            "  The benchmark draws token lengths from the Azure LLM inference trace 2023 (conv);\n"
            "  the repository ships it in traffic/data/ (github.com/Azure/AzurePublicDataset, data/);\n"
            "  restore it with `git checkout -- traffic/data`."
        )
    return TRACE


def _empirical(field: str, trace: Path) -> dict:
    return {"kind": "empirical", "trace": {"path": str(trace), "format": "azure_csv", "field": field}}


def build_scenario(duration_s: float, rate: float, replicas: int, mode: str, output_tokens: float | None = None,
                   features: str | None = None):
    """The benchmark scenario, validated through ``parse_scenario``.

    ``output_tokens``: a constant output length instead of the trace's empirical one;
    ``features``: "both", "spec" or "split": speculation and/or a prefill/decode split
    (module docstring).
    """
    trace = _trace_path()
    output = _empirical("output_tokens", trace) if output_tokens is None else {"kind": "constant", "value": output_tokens}
    data = {
        "name": "bench-engine",
        "seed": 7,
        "duration_s": duration_s,
        "warmup_s": 0.0,
        "drain_s": 1800.0,
        "engine": {"mode": mode},
        "workloads": {
            "chat": {
                "kind": "autoregressive",
                "model": "llama-3-70b",
                "arrival": {"kind": "poisson", "rate_per_s": rate},
                "prompt_tokens": _empirical("prompt_tokens", trace),
                "output_tokens": output,
                "slo": {"ttft_s": 2.0, "tpot_s": 0.1},
            }
        },
        "fleets": [
            {
                "name": "h100-tp4",
                "router": "least_outstanding",
                "pools": [
                    {
                        "name": "chat",
                        "accelerator": "h100-sxm",
                        "serves": ["chat"],
                        "replicas": replicas,
                        "tp": 4,
                        "precision": "fp8",
                    }
                ],
            }
        ],
    }
    if features:
        with_features(data, "chat", features)
    return parse_scenario(data, "bench_engine")


SPECULATION = {"method": "eagle", "draft_tokens": 3, "acceptance": 0.7, "head_vocab": 128_256}


def with_features(data: dict, workload: str, features: str = "both") -> None:
    """Speculative decoding for ``workload`` (``features`` "both" or "spec"), and its pool
    split into a prefill pool (a quarter of the replicas, at least one) and a decode pool
    (the rest, at least one) ("both" or "split")."""
    if features in ("both", "spec"):
        data["workloads"][workload]["speculation"] = dict(SPECULATION)
    if features == "spec":
        return
    pools = data["fleets"][0]["pools"]
    i = next(j for j, p in enumerate(pools) if p["serves"] == [workload])
    pool = pools[i]
    prefill = max(1, pool["replicas"] // 4)
    sides = [{**pool, "name": f"{pool['name']}-{side}", "serves": [f"{workload}:{side}"], "replicas": n,
              "scaleout_fabric": "ib-ndr-400"}
             for side, n in (("prefill", prefill), ("decode", max(1, pool["replicas"] - prefill)))]
    pools[i:i + 1] = sides


def _rss_now_kb() -> int:
    """Current resident set size in KB (Linux /proc; falls back to the peak)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _peak_rss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KB on Linux


def _status_counts(run) -> dict[str, int]:
    counts = run.requests["status"].value_counts()
    return {k: int(counts.get(k, 0)) for k in ("completed", "rejected", "in_flight")}


def main_case(args) -> dict:
    scenario = build_scenario(args.duration_s, args.rate, args.replicas, args.mode, features=args.features)
    demand = generate_demand(scenario)
    n = sum(len(d) for d in demand.values())
    gc.collect()
    rss_before = _rss_now_kb()
    t0, c0 = time.perf_counter(), time.process_time()
    run = simulate(scenario, 0, demand=demand)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    gc.collect()
    rss_after = _rss_now_kb()
    counts = _status_counts(run)
    done = run.requests[run.requests["status"] == "completed"]
    result = {
        "duration_s": args.duration_s,
        "rate_per_s": args.rate,
        "replicas": args.replicas,
        "mode": args.mode,
        "requests": n,
        "wall_s": wall,
        "cpu_s": cpu,
        "cpu_us_per_request": cpu / n * 1e6,
        "requests_per_wall_s": n / wall,
        "events": run.events,
        "events_per_request": run.events / n,
        "end_s": run.end_s,
        "peak_rss_kb": _peak_rss_kb(),
        "rss_before_kb": rss_before,
        "rss_after_kb": rss_after,
        "bytes_per_request": (rss_after - rss_before) * 1024 / n,
        "status": counts,
        "stable": counts["in_flight"] == 0,
        "ttft_p50_s": float(done["ttft_s"].median()),
        "ttft_p99_s": float(done["ttft_s"].quantile(0.99)),
        "tpot_p50_s": float(done["tpot_s"].median()),
        "preemptions": int(run.requests["preemptions"].sum()),
    }
    del run
    return result


def output_length_case(args) -> dict:
    duration = 60.0 if args.quick else 600.0
    out = {"duration_s": duration, "rate_per_s": args.rate, "replicas": args.replicas, "mode": args.mode}
    for length in (50, 1000):
        scenario = build_scenario(duration, args.rate, args.replicas, args.mode, output_tokens=length,
                                  features=args.features)
        demand = generate_demand(scenario)  # same seed + workload name: same arrivals and prompts
        n = sum(len(d) for d in demand.values())
        t0 = time.perf_counter()
        run = simulate(scenario, 0, demand=demand)
        wall = time.perf_counter() - t0
        out[f"out{length}"] = {
            "requests": n,
            "events": run.events,
            "events_per_request": run.events / n,
            "wall_s": wall,
            "requests_per_wall_s": n / wall,
            "status": _status_counts(run),
            "arrivals_sum_s": float(sum(d.arrival_s.sum() for d in demand.values())),
        }
    a, b = out["out50"]["events_per_request"], out["out1000"]["events_per_request"]
    out["ratio_1000_over_50"] = b / a
    out["same_arrivals"] = out["out50"]["arrivals_sum_s"] == out["out1000"]["arrivals_sum_s"]
    return out


def _print(main: dict, lengths: dict) -> None:
    ok = lambda cond: "ok" if cond else "MISSED"  # noqa: E731
    print(
        f"\ndcsim engine benchmark  (python {platform.python_version()}, {platform.machine()}, "
        f"mode={main['mode']}, engine build={ENGINE_BUILD})"
    )
    print(
        f"main: {main['duration_s']:.0f} s x {main['rate_per_s']:g} req/s Poisson, Azure-conv empirical lengths, "
        f"llama-3-70b on {main['replicas']} x H100 TP4 FP8"
    )
    rows = [
        ("requests simulated", f"{main['requests']:,}", ""),
        ("status", " / ".join(f"{k} {v:,}" for k, v in main["status"].items()), ok(main["stable"])),
        ("simulated end (s)", f"{main['end_s']:.1f}", ""),
        ("wall seconds (simulate)", f"{main['wall_s']:.2f}", ""),
        ("CPU us per request (simulate)", f"{main['cpu_us_per_request']:.1f}", "(a shared machine: CPU time)"),
        (
            "requests per wall-second",
            f"{main['requests_per_wall_s']:,.0f}",
            f"target >= {TARGET_REQ_PER_WALL_S:,}: {ok(main['requests_per_wall_s'] >= TARGET_REQ_PER_WALL_S)}",
        ),
        ("SimPy events per request", f"{main['events_per_request']:.2f}", ""),
        ("peak RSS (KB)", f"{main['peak_rss_kb']:,}", ""),
        (
            "RSS growth per request (B)",
            f"{main['bytes_per_request']:,.0f}",
            f"target < {TARGET_BYTES_PER_REQUEST}: {ok(main['bytes_per_request'] < TARGET_BYTES_PER_REQUEST)}",
        ),
        ("TTFT p50 / p99 (s)", f"{main['ttft_p50_s']:.3f} / {main['ttft_p99_s']:.3f}", ""),
        ("TPOT p50 (s)", f"{main['tpot_p50_s']:.4f}", ""),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value, note in rows:
        print(f"  {name:<{width}}  {value:>28}  {note}")
    a, b = lengths["out50"], lengths["out1000"]
    print(
        f"\noutput-length independence: {lengths['duration_s']:.0f} s, same arrivals "
        f"({'yes' if lengths['same_arrivals'] else 'NO'}), constant output length"
    )
    print(f"  {'output tokens':>14}  {'requests':>9}  {'events':>10}  {'events/req':>10}  {'req/wall-s':>10}  in_flight")
    for length, r in (("50", a), ("1000", b)):
        print(
            f"  {length:>14}  {r['requests']:>9,}  {r['events']:>10,}  {r['events_per_request']:>10.2f}  "
            f"{r['requests_per_wall_s']:>10,.0f}  {r['status']['in_flight']}"
        )
    print(f"  ratio events/req (1000 vs 50): {lengths['ratio_1000_over_50']:.3f}  (1.0 = independent)")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration-s", type=float, default=3600.0, help="arrival window of the main case (s)")
    p.add_argument("--rate", type=float, default=100.0, help="Poisson arrival rate (requests/s)")
    p.add_argument("--replicas", type=int, default=64, help="H100 TP4 replicas")
    p.add_argument("--mode", choices=("fast", "exact"), default="fast", help="engine mode")
    p.add_argument("--quick", action="store_true", help="short runs (main 120 s, length case 60 s)")
    p.add_argument("--save", action="store_true", help=f"write the figures to {RESULTS_JSON.relative_to(REPO)}")
    p.add_argument("--features", nargs="?", const="both", default=None, choices=("both", "spec", "split"),
                   help="speculative decoding (EAGLE k=3) and/or a prefill/decode split of the pool (issue 25)")
    args = p.parse_args(argv)
    if args.quick and args.duration_s == 3600.0:
        args.duration_s = 120.0
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    _trace_path()
    main_res = main_case(args)
    lengths = output_length_case(args)
    _print(main_res, lengths)
    if args.save:
        payload = {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "engine_build": ENGINE_BUILD,
            "argv": sys.argv[1:],
            "targets": {
                "requests_per_wall_s": TARGET_REQ_PER_WALL_S,
                "bytes_per_request": TARGET_BYTES_PER_REQUEST,
                "events_per_request": "independent of output length",
            },
            "main": main_res,
            "output_length": lengths,
        }
        RESULTS_JSON.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"\nwrote {RESULTS_JSON}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
