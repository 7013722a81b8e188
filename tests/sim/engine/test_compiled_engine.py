"""The compiled engine against its own Python source (``sim/_build.py``: ``ENGINE_BUILD``).

setup.py compiles the engine's hot path with Cython from the same ``.py`` files, with C
types from the ``.pxd`` files beside them. C ``long`` and ``double`` fields could change
a result where the source would have kept a Python ``int`` where the ``.pxd`` says
``double`` (exact integer sums against rounded ones), so the compiled build is checked
against the source build on generated whole scenarios (both engine modes) and on every
shipped scenario through the CLI: the results must be byte-identical.

Under CI the compiled build must be the one running (else the speed figures in
bench/README.md would not be what CI tests).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from data_files import require_scenario_data
from engine_builds import SourceEngine, digest
from hypothesis import given
from hypothesis import strategies as st
from scenario_strategies import cached_sessions, chunked, diff_settings, placeable, remote_drafters, scenarios, squeeze

import sim

ROOT = Path(__file__).resolve().parents[3]
CI = bool(os.environ.get("CI"))
RUN_SCENARIOS = ["default", "azure-conv", "mooncake-conv", "mooncake-prefix", "diffusion-shift", "genai-image", "search-verifier", "pd-disagg",
                 "spec-decode"]


def _require_compiled() -> None:
    if sim.ENGINE_BUILD != "compiled":
        if CI:
            pytest.fail(f"CI must run the compiled engine; it runs the source: {sim.ENGINE_BUILD_WHY}")
        pytest.skip(f"the engine is not compiled here: {sim.ENGINE_BUILD_WHY}")


def test_the_compiled_modules_are_the_ones_imported():
    _require_compiled()
    import sim.engine.replica_ar
    import sim.engine.request

    for module in (sim.engine.replica_ar, sim.engine.request):
        assert Path(module.__file__).suffix == ".so", module.__file__


def test_a_float_in_an_integer_field_is_refused_not_truncated():
    """The compiled Request's int fields are Py_ssize_t: a float is a TypeError there (a C
    long would have truncated 3.7 to 3 silently, where the source keeps 3.7)."""
    _require_compiled()
    from sim.engine.request import Request

    with pytest.raises(TypeError):
        Request(0, 0, 0.0).prompt_tokens = 3.7


@pytest.fixture(scope="module")
def source_engine():
    engine = SourceEngine()
    yield engine
    engine.close()


def test_the_switch_runs_the_source(source_engine):
    assert source_engine.build == "source replica_ar.py"


def check_both_builds(source_engine, tmp_path_factory, data) -> None:
    _require_compiled()
    scenario = data.draw(scenarios(tmp_path_factory.mktemp("trace")))
    squeeze(scenario)
    if not placeable(scenario):
        return
    scenario["engine"] = {"mode": data.draw(st.sampled_from(["fast", "exact"]))}
    assert digest(scenario) == source_engine.digest(scenario)


@pytest.mark.slow
@diff_settings(188)
@given(data=st.data())
def test_generated_scenarios_are_byte_identical_in_both_builds(source_engine, tmp_path_factory, data):
    check_both_builds(source_engine, tmp_path_factory, data)


@diff_settings(12)
@given(data=st.data())
def test_generated_scenarios_are_byte_identical_in_both_builds_smoke(source_engine, tmp_path_factory, data):
    """The fast loop's share of the 200 generated scenarios (the slow test draws the rest)."""
    check_both_builds(source_engine, tmp_path_factory, data)


@diff_settings(6)
@given(data=st.data())
def test_remote_drafter_scenarios_are_byte_identical_in_both_builds(source_engine, tmp_path_factory, data):
    """A draft model on a pool of its own (its step folded into the target's closed form,
    its busy time accounted by the target replica) in both builds."""
    _require_compiled()
    base = data.draw(scenarios(tmp_path_factory.mktemp("trace"), families=("ar",), max_workloads=1))
    scenario = data.draw(remote_drafters(base))
    squeeze(scenario)
    if not placeable(scenario):
        return
    scenario["engine"] = {"mode": data.draw(st.sampled_from(["fast", "exact"]))}
    assert digest(scenario) == source_engine.digest(scenario)


@diff_settings(8)
@given(data=st.data())
def test_chunked_prefill_scenarios_are_byte_identical_in_both_builds(source_engine, tmp_path_factory, data):
    """Chunked prefill (pool prefill_chunk_tokens: the pending prompts' Python lists, the
    KV count set back at the last chunk) in both builds."""
    _require_compiled()
    base = data.draw(scenarios(tmp_path_factory.mktemp("trace"), families=("ar",), max_workloads=2))
    scenario = data.draw(chunked(base))
    squeeze(scenario)
    if not placeable(scenario):
        return
    scenario["engine"] = {"mode": data.draw(st.sampled_from(["fast", "exact"]))}
    assert digest(scenario) == source_engine.digest(scenario)


@pytest.mark.parametrize("mode", ["fast", "exact"])
@pytest.mark.parametrize("model,tp,memory,rate,spec", [
    ("llama-3.1-8b", 1, 0.12, 40.0, {"method": "eagle", "draft_tokens": 3, "acceptance": [0.8, 0.6, 0.4], "head_vocab": 128_256}),
    ("llama-3.1-70b", 2, 0.505, 6.0, {"method": "draft_model", "draft_tokens": 2, "acceptance": 0.7,
                                "draft_model": "llama-3.1-8b"}),
])
def test_chunks_beside_speculation_are_byte_identical_in_both_builds(source_engine, mode, model, tp, memory, rate, spec):
    """Chunked prefill beside speculating decodes (k + 1 tokens each from the budget, the
    drafter's chunk prefill, the ⌊I·g⌋ KV growth set back at a last chunk), under KV
    pressure (preemptions), in both builds."""
    _require_compiled()
    scenario = {
        "name": "chunk-spec", "seed": 3, "duration_s": 20.0, "warmup_s": 0.0, "drain_s": 5.0, "engine": {"mode": mode},
        "workloads": {"chat": {"kind": "autoregressive", "model": model, "speculation": spec,
                               "arrival": {"kind": "poisson", "rate_per_s": rate},
                               "prompt_tokens": {"kind": "lognormal", "median": 900, "sigma": 1.0, "max": 6000},
                               "output_tokens": {"kind": "lognormal", "median": 150, "sigma": 0.8, "max": 800}}},
        "fleets": [{"name": "f", "pools": [{"name": "p", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 2,
                                            "tp": tp, "precision": "fp8", "max_batch": 16, "memory_utilization": memory,
                                            "min_kv_tokens": 0,
                                            "prefill_chunk_tokens": 16 * (spec["draft_tokens"] + 1) + 300}]}],
    }
    assert digest(scenario) == source_engine.digest(scenario)


@diff_settings(8)
@given(data=st.data())
def test_chunked_prefill_with_a_prefix_cache_is_byte_identical_in_both_builds(source_engine, tmp_path_factory, data):
    """Chunked prefill with a prefix cache (chunks after the cached prefix, blocks committed
    chunk by chunk, a host copy under the first chunk), co-located or split, in both builds."""
    _require_compiled()
    scenario = data.draw(cached_sessions(tmp_path_factory.mktemp("sessions")))
    scenario["engine"] = {"mode": data.draw(st.sampled_from(["fast", "exact"]))}
    assert digest(scenario) == source_engine.digest(scenario)


def _dcsim(args: list[str], pure: bool) -> subprocess.CompletedProcess:
    env = dict(os.environ, DCSIM_PURE_PYTHON="1" if pure else "0")
    return subprocess.run([sys.executable, "-m", "sim.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("name", RUN_SCENARIOS)
def test_shipped_scenarios_give_the_same_files_in_both_builds(tmp_path, name):
    _require_compiled()
    require_scenario_data(ROOT / "scenarios" / f"{name}.yaml")
    outputs = {}
    for pure in (False, True):
        out = tmp_path / ("source" if pure else "compiled")
        done = _dcsim(["run", f"scenarios/{name}.yaml", "--out", str(out), "--quiet",
                       "--planner", str(out / "planner.csv"), "--no-headroom"], pure)
        assert done.returncode == 0, done.stderr
        outputs[pure] = (done.stdout, {p.name: p.read_bytes() for p in sorted(out.iterdir())})
    assert outputs[False][0] == outputs[True][0]
    assert outputs[False][1].keys() == outputs[True][1].keys()
    for file, data in outputs[False][1].items():
        assert data == outputs[True][1][file], f"{name}: {file} differs between the builds"


@pytest.mark.slow  # three interpreters importing a fresh copy of sim/ (~7 s of CPU)
def test_an_edit_after_the_build_switches_everything_to_the_source(tmp_path):
    """A stale extension is never imported: the copy's router.py is newer than its build."""
    _require_compiled()
    copy = tmp_path / "sim"
    shutil.copytree(ROOT / "sim", copy, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "build" / "ext", tmp_path / "build" / "ext")  # the extensions (setup.py)
    shutil.copy(ROOT / "setup.py", tmp_path / "setup.py")  # a source tree: file times are compared
    t0 = 1_700_000_000
    for path in tmp_path.rglob("*"):  # sources at t0, their build 10 s later, then one edit
        os.utime(path, (t0, t0 + 10 if path.suffix == ".so" else t0))
    probe = ("import sim, sim.engine.replica_ar as r, sim.engine.request as q; "
             "print(sim.ENGINE_BUILD, r.__file__.endswith('.py'), q.__file__.endswith('.py'))")

    def imported() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=str(tmp_path), DCSIM_PURE_PYTHON="0"))

    fresh = imported()
    assert fresh.stdout.split() == ["compiled", "False", "False"], fresh.stderr
    os.utime(copy / "engine" / "router.py", (t0, t0 + 20))
    stale = imported()
    assert stale.returncode == 0, stale.stderr
    assert stale.stdout.split() == ["source", "True", "True"]
    assert "router.py changed after the engine was compiled" in stale.stderr
    (tmp_path / "setup.py").unlink()  # an installed copy (a wheel): file times are not compared,
    for so in (tmp_path / "build" / "ext").rglob("*.so"):  # and the extensions sit beside the sources
        so.rename(tmp_path / so.relative_to(tmp_path / "build" / "ext"))
    installed = imported()
    assert installed.stdout.split() == ["compiled", "False", "False"], installed.stderr


OPERATED = """
name: operated
seed: 3
duration_s: 1800
drain_s: 300
workloads:
  chat:
    kind: autoregressive
    model: llama-3.1-8b
    arrival: {kind: poisson, rate_per_s: 6}
    prompt_tokens: {kind: constant, value: 300}
    output_tokens: {kind: constant, value: 60}
    mix: {models: 4, model_zipf_s: 1.0, adapters: 20, adapter_share: 0.5}
fleets:
  - name: f
    pools:
      - name: chat
        accelerator: h100-sxm
        serves: [chat]
        replicas: 8
        loading: {storage: nvme-gen5, devices: 4}
        residency: {resident_models: 2, host_cache_models: 2, adapter_cache: 4}
        autoscale: {target: 6, min_replicas: 2, interval_s: 10, down_delay_s: 60}
        failures: {components: {gpu: {rate_per_gpu_hour: 1.0}}, detection_s: 20, repair_s: 120, spares: 1, swap_s: 30}
"""


@pytest.mark.slow
def test_an_operated_pool_gives_the_same_files_in_both_builds(tmp_path):
    """Residency, autoscaling and failures (sim/engine/operations.py) drive the compiled
    replicas and routers from Python: both builds must still agree byte for byte."""
    _require_compiled()
    path = tmp_path / "operated.yaml"
    path.write_text(OPERATED)
    outputs = {}
    for pure in (False, True):
        out = tmp_path / ("source" if pure else "compiled")
        done = _dcsim(["run", str(path), "--out", str(out), "--quiet"], pure)
        assert done.returncode == 0, done.stderr
        outputs[pure] = (done.stdout, {p.name: p.read_bytes() for p in sorted(out.iterdir())})
    ops = outputs[False][1]["operations.csv"].decode().splitlines()
    row = dict(zip(ops[0].split(","), ops[1].split(",")))
    assert int(row["interruptions"]) > 0 and int(row["cold_starts"]) > 0 and int(row["loads_storage"]) > 0
    assert outputs[False] == outputs[True]


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_kv_tiers_and_their_traffic_are_byte_identical_in_both_builds(source_engine, mode):
    """The first minute of the Mooncake trace on two small replicas whose HBM, host and
    SSD tiers spill into a shared store that overflows (about 3,500 blocks demoted to
    host memory, 1,100 to the SSD, 500 written to the store, 25 read back from the SSD):
    the requests, and the pools' blocks moved between tiers (``kv_*_blocks``, counted in
    the compiled cache's C arrays), are byte-identical in both builds."""
    _require_compiled()
    cache = {"block_tokens": 512, "capacity_blocks": 100, "host_blocks": 1200, "ssd_blocks": 300, "shared_blocks": 400}
    scenario = {
        "name": "tiers", "seed": 1, "duration_s": 60, "warmup_s": 0, "engine": {"mode": mode},
        "workloads": {"chat": {"kind": "autoregressive", "model": "llama-3.1-8b", "arrival": {
            "kind": "trace", "path": str(ROOT / "traffic/data/mooncake_conversation_trace.jsonl"),
            "format": "mooncake_jsonl"}}},
        "fleets": [{"name": "f", "router": "round_robin", "pools": [{
            "name": "p", "accelerator": "h100-sxm", "serves": ["chat"], "replicas": 2, "tp": 1, "precision": "fp8",
            "max_batch": 8, "prefix_cache": cache}]}],
    }
    assert digest(scenario) == source_engine.digest(scenario)
