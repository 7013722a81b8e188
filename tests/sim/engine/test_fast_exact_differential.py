"""Differential test of the engine: ``fast`` mode against ``exact`` mode on generated
whole scenarios.

Exact mode (one SimPy event per iteration or step) is the reference implementation;
fast mode must reproduce it request by request: identical status, pool, replica,
preemptions and counts, and arrival / admission / first-token / done timestamps equal
to 1e-9 relative (``tests/fast_exact.py``).

The strategy builds scenario mappings as a user would write them: bursts (every request
within a few ms) and Poisson, gamma, MMPP and trace arrivals (a small Azure-format CSV
written into ``tmp_path``, with repeated timestamps); constant, equal (prompt = output),
uniform, exponential and heavy-tailed lognormal lengths; 1 to 64 replicas; every router;
KV caches small enough to force preemption; every workload kind (autoregressive with
best-of-k or speculative decoding of every method, served whole or split into prefill
and decode pools on any GPUs, fabric and hand-off scheme; diffusion LM, image and video diffusion with pipeline stages on other pools,
branching search with a fallible verifier on its own pool, service time); drains short
enough to leave requests in flight.

Examples: ``DCSIM_DIFF_EXAMPLES=N`` sets the number per test (a long local run);
otherwise the five slow tests run 150, 150, 150, 120 and 150 (720 in all) and the two
unmarked smoke tests 12 each.
With ``CI`` set, hypothesis is derandomized so a failure reproduces (profile in tests/conftest.py). Every shrunk
counterexample is kept in ``test_fast_exact_regressions.py``.
"""

from __future__ import annotations

import pytest
from fast_exact import assert_modes_agree
from hypothesis import assume, event, given
from hypothesis import strategies as st
from scenario_strategies import cached_sessions, chunked, diff_settings, placeable, remote_drafters, scenarios, squeeze


def check(data: dict):
    """Both modes agree on ``data``; returns the exact run's requests."""
    squeeze(data)
    assume(placeable(data))
    _, exact = assert_modes_agree(data)
    req = exact.requests
    # what the example exercised (shown by --hypothesis-show-statistics)
    event(f"requests: {'0' if req.empty else '1-9' if len(req) < 10 else '10+'}")
    for label, happened in (
        ("preemption", req["preemptions"].sum() > 0),
        ("in flight at the end", (req["status"] == "in_flight").any()),
        ("rejection", (req["status"] == "rejected").any()),
        ("hand-off to another pool", req["handoffs"].sum() > 0),
        ("wait for activation memory", req["memory_wait_s"].sum() > 0),
        ("verifier calls", req["verifier_calls"].sum() > 0),
        ("KV cache handed to a decode pool", "decode_pool" in req and (req["decode_pool"] != "").any()),
        ("a decode side full (queued for KV room)", "decode_queue_s" in req and (req["decode_queue_s"] > 0).any()),
        ("speculative verification steps", "tokens_per_step" in req and req["tokens_per_step"].notna().any()),
        ("a drafter on a pool of its own", any(":draft" in e for p in data["fleets"][0]["pools"] for e in p["serves"])),
    ):
        if happened:
            event(label)
    return req


# --- the tests -------------------------------------------------------------------------
@pytest.mark.slow
@diff_settings(150)
@given(data=st.data())
def test_autoregressive_scenarios_agree(tmp_path_factory, data):
    check(data.draw(scenarios(tmp_path_factory.mktemp("trace"), families=("ar",))))


@pytest.mark.slow
@diff_settings(150)
@given(data=st.data())
def test_step_and_pipeline_scenarios_agree(tmp_path_factory, data):
    check(data.draw(scenarios(tmp_path_factory.mktemp("trace"), families=("dlm", "picture"))))


@pytest.mark.slow
@diff_settings(150)
@given(data=st.data())
def test_mixed_scenarios_agree(tmp_path_factory, data):
    check(data.draw(scenarios(tmp_path_factory.mktemp("trace"))))


@pytest.mark.slow
@diff_settings(120)
@given(data=st.data())
def test_memory_pressure_scenarios_agree(tmp_path_factory, data):
    """KV caches that force preemption and activation memory that makes forks wait, on
    one or two replicas (the examples above reach these paths less often)."""
    check(data.draw(scenarios(tmp_path_factory.mktemp("trace"), families=("ar", "picture"), pressure=True)))


@pytest.mark.slow
@diff_settings(150)
@given(data=st.data())
def test_split_and_speculative_scenarios_agree(tmp_path_factory, data):
    """Autoregressive workloads only, most of them split into prefill and decode pools or
    speculating, some under KV pressure (the examples above reach them less often)."""
    pressure = data.draw(st.booleans())
    check(data.draw(scenarios(tmp_path_factory.mktemp("trace"), families=("ar",), pressure=pressure)))


@diff_settings(12)
@given(data=st.data())
def test_split_and_speculative_scenarios_agree_smoke(tmp_path_factory, data):
    check(data.draw(scenarios(tmp_path_factory.mktemp("trace"), families=("ar",), max_workloads=2)))


@diff_settings(12)
@given(data=st.data())
def test_generated_scenarios_agree_smoke(tmp_path_factory, data):
    """The unmarked fast-loop version: a few mixed scenarios per run."""
    check(data.draw(scenarios(tmp_path_factory.mktemp("trace"), max_workloads=2)))


@pytest.mark.slow
@diff_settings(80)
@given(data=st.data())
def test_remote_drafter_scenarios_agree(tmp_path_factory, data):
    """Every autoregressive workload drafts with a draft model on a pool of its own
    (sim.models.speculation.RemoteDraft), served whole or split, some under KV pressure."""
    pressure = data.draw(st.booleans())
    base = data.draw(scenarios(tmp_path_factory.mktemp("trace"), families=("ar",), max_workloads=2, pressure=pressure))
    check(data.draw(remote_drafters(base)))


@diff_settings(6)
@given(data=st.data())
def test_remote_drafter_scenarios_agree_smoke(tmp_path_factory, data):
    base = data.draw(scenarios(tmp_path_factory.mktemp("trace"), families=("ar",), max_workloads=1))
    check(data.draw(remote_drafters(base)))


def _chunked_check(data) -> None:
    req = check(data)
    if any("prefill_chunk_tokens" in p and "speculation" in data["workloads"][p["serves"][0].partition(":")[0]]
           for p in data["fleets"][0]["pools"]):
        event("chunks beside speculation (verification steps, drafters)")
    budgets = [p["prefill_chunk_tokens"] - p.get("max_batch", 256)
               for p in data["fleets"][0]["pools"] if "prefill_chunk_tokens" in p]
    if any("prefill_chunk_tokens" in p and any(e.endswith(":prefill") for e in p["serves"])
           for p in data["fleets"][0]["pools"]):
        event("a split deployment's prefill pool chunked")
    if not budgets:
        event("no pool chunked")
    elif not req.empty and (req["prompt_tokens"] > min(budgets)).any():
        event("a prompt longer than a chunk")


@pytest.mark.slow
@diff_settings(150)
@given(data=st.data())
def test_chunked_prefill_scenarios_agree(tmp_path_factory, data):
    """Chunked prefill (pool prefill_chunk_tokens) on every co-located autoregressive pool
    and split deployment's prefill pool, speculating or not, some under KV pressure: a
    prompt mid-prefill runs one iteration per timer in both modes, the decode stretches of
    fast mode resume after its last chunk, a prefill replica hands a prompt off at the end
    of its last chunk."""
    pressure = data.draw(st.booleans())
    base = data.draw(scenarios(tmp_path_factory.mktemp("trace"), families=("ar",), max_workloads=2, pressure=pressure))
    _chunked_check(data.draw(chunked(base)))


@diff_settings(12)
@given(data=st.data())
def test_chunked_prefill_scenarios_agree_smoke(tmp_path_factory, data):
    base = data.draw(scenarios(tmp_path_factory.mktemp("trace"), families=("ar",), max_workloads=2))
    _chunked_check(data.draw(chunked(base)))


@pytest.mark.slow
@diff_settings(60)
@given(data=st.data())
def test_chunked_prefill_with_a_remote_drafter_agrees(tmp_path_factory, data):
    """Chunked prefill on the target pools of workloads whose draft model runs on a pool of
    its own: the draft pool's prefill of each chunk and its forwards for the verifying
    decodes are charged from the target's chunk iterations (both modes reach every one)."""
    base = data.draw(scenarios(tmp_path_factory.mktemp("trace"), families=("ar",), max_workloads=2))
    _chunked_check(data.draw(chunked(data.draw(remote_drafters(base)))))


@diff_settings(6)
@given(data=st.data())
def test_chunked_prefill_with_a_remote_drafter_agrees_smoke(tmp_path_factory, data):
    base = data.draw(scenarios(tmp_path_factory.mktemp("trace"), families=("ar",), max_workloads=2))
    _chunked_check(data.draw(chunked(data.draw(remote_drafters(base)))))


def _cached_check(data) -> None:
    from fast_exact import assert_modes_agree

    fast, exact = assert_modes_agree(data)
    for column in ("cached_tokens", "host_cached_tokens"):
        assert fast.requests[column].tolist() == exact.requests[column].tolist()
    moved = [c for c in exact.pools.columns if c.startswith("kv_") and c.endswith("_blocks")]  # blocks between tiers
    assert fast.pools[moved].equals(exact.pools[moved])
    pool = data["fleets"][0]["pools"][0]
    event(("chunked" if "prefill_chunk_tokens" in pool else "whole prompts")
          + (", split" if len(data["fleets"][0]["pools"]) > 1 else ", co-located"))
    if exact.requests["cached_tokens"].sum() > 0:
        event("prefix hits")


@pytest.mark.slow
@diff_settings(100)
@given(data=st.data())
def test_chunked_prefill_with_a_prefix_cache_agrees(tmp_path_factory, data):
    """Multi-turn sessions with a prefix cache (small HBM caches, a host tier), chunked or
    whole, co-located or on a split deployment's prefill pool: the same outcomes and the
    same cached tokens in both modes (the cache changes at chunk starts, which both reach)."""
    _cached_check(data.draw(cached_sessions(tmp_path_factory.mktemp("sessions"))))


@diff_settings(10)
@given(data=st.data())
def test_chunked_prefill_with_a_prefix_cache_agrees_smoke(tmp_path_factory, data):
    _cached_check(data.draw(cached_sessions(tmp_path_factory.mktemp("sessions"))))
