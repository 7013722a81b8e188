"""The pools' running totals (kept by the replicas as their state changes, read by the
time-series sampler in O(1) per pool) against a second implementation: the brute-force
sums over every replica that the sampler computed before, written out here.

At every sample of generated scenarios (the strategy of the fast/exact differential test,
sampled every few hundredths of the run instead of once), in fast and in exact mode:

- outstanding, queued and running (AR sequences, step-batched sample-width, service busy
  slots) equal the sums over the pool's replicas exactly;
- the AR KV total equals Σ 2·min(tokens held + half a block of slack per sequence + the
  blocks pinned for a split deployment's transfers, the KV capacity) over the replicas
  exactly (integers), and the memory fraction the sampler
  writes equals Σ ``kv_bytes_estimate(iters)`` / capacity to 1e-12 relative;
- the step-batched reserved bytes equal Σ ``replica.reserved`` to 1e-9 relative.

The byte-identity of the written time series before/after the change was checked on
every run scenario in scenarios/ by hand (see the speed notes); this test keeps the
totals honest on the paths those scenarios do not reach (preemption, blocked forks,
drains that run out, central queues).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from scenario_strategies import diff_settings, placeable, scenarios, squeeze

import sim.engine.core as core
from sim.scenario import parse_scenario


def kv_tokens(r) -> int:
    """Tokens every running sequence has gained by the replica's iteration counter: one per
    iteration, or under speculation ⌊iters · g_num / 1024⌋ (E[L] per step)."""
    return r.iters if r.spec is None else r.iters * r.gnum // 1024


def brute_force(p) -> dict:
    """The pool's state summed over its replicas, as the sampler computed it before."""
    rs = p.replicas
    out = {
        "outstanding": sum(r.outstanding for r in rs),
        "queued": sum(len(r.waiting) for r in rs),
    }
    if p.family == "ar":
        out["running"] = sum(r.n_running for r in rs)
        out["kv_half"] = sum(
            min(2 * (r.sum_offsets + r.n_running * kv_tokens(r) + r.pinned * r.block) + r.n_running * (r.block - 1),
                2 * r.cap_blocks * r.block)
            for r in rs
        )
        cap = p.kv_capacity_blocks * p.config.kv_block_tokens * p.perf.kv_bytes_per_token
        out["memory"] = sum(r.kv_bytes_estimate(r.iters) for r in rs) / (cap * len(rs)) if cap else math.nan
    elif p.family == "step":
        out["running"] = sum(r.width for r in rs)
        out["reserved"] = sum(r.reserved for r in rs)
    else:
        out["running"] = sum(r.busy for r in rs)
    return out


def run_checked(data: dict, mode: str) -> int:
    """Simulate ``data`` in ``mode``, checking every pool at every sample; returns the
    number of (sample, pool) checks."""
    data = dict(data, engine={"mode": mode})
    span = data["duration_s"] + min(data["drain_s"], 3 * data["duration_s"])
    data["sample_interval_s"] = span / 40
    scenario = parse_scenario(data, "pool-totals")
    checks = 0
    original = core._Sampler._pool_state  # noqa: SLF001
    seen: dict[int, object] = {}  # the run's pools, as the sampler saw them

    def checked(p, feeds):
        nonlocal checks
        seen[id(p)] = p
        want = brute_force(p)
        state = original(p, feeds)
        assert (state[0], state[1], state[3]) == (want["outstanding"], want["queued"], want["running"]), p.name
        assert p.outstanding_total == want["outstanding"] and p.queued_total == want["queued"]
        if p.family == "ar":
            assert p.kv_half_tokens_total == want["kv_half"], p.name
            assert state[4] == pytest.approx(want["memory"], rel=1e-12, abs=1e-300, nan_ok=True)
        elif p.family == "step":
            assert p.reserved_total_bytes == pytest.approx(want["reserved"], rel=1e-9, abs=1e-3)
        checks += 1
        return state

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(core._Sampler, "_pool_state", staticmethod(checked))  # noqa: SLF001
        run = core.simulate(scenario)
    # and once more after the run (settle() accounted the iterations cut by the drain)
    assert len(seen) == len(run.pools)
    for p in seen.values():
        want = brute_force(p)
        assert (p.outstanding_total, p.queued_total, p.running_total) == (
            want["outstanding"], want["queued"], want["running"])
        if p.family == "ar":
            assert p.kv_half_tokens_total == want["kv_half"]
    return checks


@diff_settings(30)
@given(data=st.data(), mode=st.sampled_from(["fast", "exact"]))
def test_pool_totals_equal_sums_over_replicas(tmp_path_factory, data, mode):
    scenario = data.draw(scenarios(tmp_path_factory.mktemp("trace"), max_workloads=2))
    squeeze(scenario)
    assume(placeable(scenario))
    assert run_checked(scenario, mode) > 0


@pytest.mark.slow
@diff_settings(11)
@given(data=st.data(), mode=st.sampled_from(["fast", "exact"]))
def test_pool_totals_under_memory_pressure(tmp_path_factory, data, mode):
    """Preemptions (AR) and forks waiting for activation memory (step-batched)."""
    check_under_pressure(tmp_path_factory, data, mode)


@diff_settings(4)
@given(data=st.data(), mode=st.sampled_from(["fast", "exact"]))
def test_pool_totals_under_memory_pressure_smoke(tmp_path_factory, data, mode):
    """The fast loop's share of the 15 examples (the slow test draws the rest)."""
    check_under_pressure(tmp_path_factory, data, mode)


def check_under_pressure(tmp_path_factory, data, mode) -> None:
    scenario = data.draw(scenarios(tmp_path_factory.mktemp("trace"), families=("ar", "picture"), pressure=True))
    squeeze(scenario)
    assume(placeable(scenario))
    assert run_checked(scenario, mode) > 0
