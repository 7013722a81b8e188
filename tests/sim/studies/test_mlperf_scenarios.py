"""MLPerf scenarios (issue 24, item 2): Interactive read from its benchmark name, the bounds
per benchmark as mlperf.conf sets them, SingleStream latency by hand, the layouts the v5.1
submissions ran, and every v5.1 row predicted or refused with a reason that is true of the
raw row (checked here against the raw CSV's own columns)."""

from __future__ import annotations

import csv
import math

import pytest

from data_files import REFERENCE
from fleets.catalog_io import load_catalog
from sim.studies import mlperf
from sim.studies.calibration import Point, read_points
from sim.studies.mlperf_benchmarks import BENCHMARKS
from sim.studies.validate import split_unsimulated

V51 = REFERENCE / "mlperf_v5.1_points.csv"
HEADER = "system,accelerator,count,model,scenario,metric,value,unit,precision,software,source,notes,activation_precision"
CAT = load_catalog()


def _raw_v51() -> list[dict]:
    with open(V51, newline="") as handle:
        return list(csv.DictReader(handle))


def test_every_v51_row_is_predicted_or_refused_with_a_true_reason():
    points, unexpressed = split_unsimulated(*read_points(V51))
    raw = {(r["system"], r["model"], r["scenario"]): r for r in _raw_v51()}
    covered = {(p.system, p.benchmark, "Server" if p.scenario == "Interactive" else p.scenario) for p in points}
    refused = dict(zip(zip(unexpressed["system"], unexpressed["benchmark"], unexpressed["scenario"]), unexpressed["reason"]))
    assert set(raw) <= covered | set(refused)
    for key, reason in refused.items():
        row = raw[key]
        if reason.startswith("int4 weights"):
            assert (row["precision"], row["activation_precision"]) == ("int4", "fp16")
        elif reason.startswith("open division"):
            assert "/open/" in row["source"] or " open/" in row["source"]
        elif reason.startswith("unknown accelerator"):
            assert not any(word in row["accelerator"] for word in ("H100-SXM", "H200", "B200", "GB200", "GB300",
                                                                  "MI300X", "MI325X", "MI355X", "L40S", "RTX PRO 6000"))
        else:
            pytest.fail(f"unexpected refusal {reason!r} for {key}")
    # 70 rows: 66 expressed, 2 W4A16 Arc Pro B60 rows, 1 RTX 2000E Ada, 1 MI355X open-division row
    assert (len(raw), len(points)) == (70, 66)


def test_interactive_benchmark_names_are_the_interactive_scenario(tmp_path):
    src = "github.com/mlcommons/inference_results_v5.1 closed/X/results/{}/perf @abc"
    rows = [("A/8xH200", "NVIDIA H200-SXM-141GB", "8", "llama2-70b-interactive-99", "Server", "completed_tokens_per_s", "20000", "fp8"),
            ("B/4xB60", "[MAXSUN] MS-Intel Arc Pro B60 Dual 48G Turbo", "4", "llama3.1-8b", "Offline", "tokens_per_s", "6472", "bf16")]
    lines = [HEADER] + [f"{s},{a},{c},{m},{sc},{me},{v},u,{pr},vLLM 0.9,{src.format(s)},MLPerf Inference v5.1 closed,{pr}"
                        for s, a, c, m, sc, me, v, pr in rows]
    path = tmp_path / "points.csv"
    path.write_text("\n".join(lines) + "\n")
    points, _ = read_points(path)
    by = {p.system: p for p in points}
    assert (by["A/8xH200"].scenario, by["A/8xH200"].model) == ("Interactive", "llama-2-70b")
    assert BENCHMARKS["llama-2-70b"].bounds("Interactive").tpot_p99_s == 0.04  # mlperf.conf: tpot_latency = 40
    assert BENCHMARKS["llama-2-70b"].bounds("Interactive").ttft_p99_s == 0.45  # ttft_latency = 450
    assert (by["B/4xB60"].accelerator, by["B/4xB60"].count, by["B/4xB60"].stack) == ("arc-pro-b60", 8, "vllm")


@pytest.mark.parametrize("bench,scenario,ttft,tpot", [
    ("llama-3.1-8b", "Server", 2.0, 0.1), ("llama-3.1-8b", "Interactive", 0.5, 0.03),
    ("llama-3.1-405b", "Server", 6.0, 0.175), ("llama-3.1-405b", "Interactive", 4.5, 0.08),
    ("deepseek-r1", "Server", 2.0, 0.08), ("gpt-oss-120b", "Interactive", 2.0, 0.015),
])
def test_bounds_are_mlperf_conf(bench, scenario, ttft, tpot):
    """loadgen/mlperf.conf (v5.1.1 @6776245e99dc; gpt-oss and deepseek-r1-interactive @b66003e10e2d)."""
    bounds = BENCHMARKS[bench].bounds(scenario)
    assert (bounds.ttft_p99_s, bounds.tpot_p99_s) == (ttft, tpot)


def _point(acc: str, model: str, count: int, precision: str, scenario: str = "Offline", **lengths) -> Point:
    return Point(point=f"x|{model}|{scenario}", system="x", mlperf_accelerator=acc, accelerator=acc, count=count,
                 benchmark=model, model=model, scenario=scenario, metric="m", unit="u", measured=1.0,
                 precision=precision, division="closed", source="s", **lengths)


@pytest.mark.parametrize("acc,model,count,precision,tp", [
    ("h200", "llama-2-70b", 8, "fp8", 1),      # NVIDIA v5.1 configs: llama2-70b tensor_parallelism 1 on H200
    ("b200", "llama-2-70b", 8, "fp4", 1),      # ... and on B200 (FP4)
    ("h100-sxm", "llama-2-70b", 8, "fp8", 2),  # 69 GB of FP8 weights do not leave room on one 80 GB H100
    ("b200", "llama-3.1-405b", 8, "fp4", 4),   # B200 405B: TP2 x PP2 = 4 GPUs per replica
    ("h200", "llama-3.1-405b", 8, "fp8", 8),   # H200 405B: TP4 x PP2 = 8 GPUs
])
def test_layouts_match_the_submissions(acc, model, count, precision, tp):
    """Replica sizes of the v5.1 NVIDIA configs (closed/*/configs/*/Offline/*.py @965182b03376)."""
    assert mlperf.choose_layout(_point(acc, model, count, precision), CAT).tp == tp


def test_singlestream_latency_by_hand():
    """One H100, Llama-3.1-8B FP8, every prompt 128 and every output 64 tokens (constant, so
    the 90th percentile is the one latency): the prefill of 128 tokens, then 63 decode steps
    at batch 1 over contexts 128..190, each max(FLOP / (peak η_c), bytes / (BW η_m)) + t_0,
    summed here step by step from the catalog's numbers."""
    acc, m = CAT.accelerator("h100-sxm"), CAT.model("llama-3.1-8b")
    point = _point("h100-sxm", "llama-3.1-8b", 1, "fp8", "SingleStream", input_tokens=128, output_tokens=64)
    compute, memory, t0 = acc.peak_fp8_flops * acc.compute_efficiency, acc.memory_bw_bytes_per_s * acc.bandwidth_efficiency, \
        acc.iteration_overhead_s
    kv_token = 32 * 8 * 128 * 2 * 1  # fp8 cache
    pair = 4 * 32 * 32 * 128
    weights = m.params * 1.0
    prefill = max((2 * m.active_params * 128 + pair * 128 * 128 / 2) / compute, (weights + kv_token * 128) / memory) + t0
    decode = sum(max((2 * m.active_params + pair * c) / compute, (weights + kv_token * c) / memory) + t0
                 for c in range(128, 191))
    assert mlperf.singlestream_latency(point, mlperf.Layout(1, 1), CAT) == pytest.approx(prefill + decode, rel=1e-6)


def test_singlestream_of_a_video_is_its_phases_at_batch_one():
    """Wan 2.2 T2V-A14B, 720p x 81 frames, 20 steps with CFG on 8 H200 at TP8: the latency is
    1 / (the batch-1 rate of the same phases), and at least the 20 x 2 DiT forwards at
    peak: 40 x 6.5233 PFLOP / (8 x 989 TFLOP/s)."""
    point = _point("h200", "wan2.2-t2v-a14b", 8, "bf16", "SingleStream")
    layout = mlperf.choose_layout(point, CAT)
    latency = mlperf.singlestream_latency(point, layout, CAT)
    assert layout.tp == 8
    assert latency >= 40 * 6523.3e12 / (8 * 989e12)
    assert not math.isnan(latency)


@pytest.mark.slow
def test_interactive_bounds_never_raise_the_rate():
    """The same system under Interactive bounds (TTFT 0.5 s, TPOT 30 ms) serves at most
    what it serves under Server bounds (2 s, 100 ms)."""
    server = _point("h100-sxm", "llama-3.1-8b", 1, "fp8", "Server")
    interactive = _point("h100-sxm", "llama-3.1-8b", 1, "fp8", "Interactive")
    rates = [mlperf.predict(p, CAT)[0] for p in (server, interactive)]
    assert 0 < rates[1] <= rates[0]
