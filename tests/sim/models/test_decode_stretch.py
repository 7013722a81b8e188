"""The decode-stretch closed forms against a per-iteration sum.

Both engine modes time decode iterations with :func:`decode_stretch_time_s` (so they
agree bit for bit); this test is the independent check that the closed form equals the
sum of one roofline iteration at a time (``PerfModel.decode_time_s``), across the
compute/memory crossing, and that its inverse finds the iterations done by a given time.
"""

from __future__ import annotations


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleets.catalog_io import load_catalog
from sim.models.perf import PerfModel, decode_stretch_iterations_done, decode_stretch_time_s

CASES = settings(max_examples=200)


@st.composite
def stretches(draw):
    cat = load_catalog()
    perf = PerfModel(
        cat.accelerator(draw(st.sampled_from(["h100-sxm", "mi300x", "b200", "tpu-v6e"]))),
        cat.model(draw(st.sampled_from(["llama-3-8b", "llama-3-70b", "mixtral-8x7b"]))),
        draw(st.sampled_from(["bf16", "fp8"])),
        tp=draw(st.sampled_from([1, 2, 4, 8])),
        iteration_overhead_s=draw(st.sampled_from([0.0, 0.003])),
    )
    batch = draw(st.integers(1, 512))
    context0 = batch * draw(st.integers(1, 20_000))
    return perf, batch, context0, draw(st.integers(0, 400))


@CASES
@given(stretches())
def test_closed_form_equals_the_per_iteration_sum(case):
    perf, batch, context0, n = case
    by_iteration = sum(perf.decode_time_s(batch, context0 + batch * j) for j in range(n))
    closed = decode_stretch_time_s(perf.decode_line(batch), context0, batch, n)
    assert closed == pytest.approx(by_iteration, rel=1e-9, abs=0.0)


@CASES
@given(stretches(), st.floats(0.0, 1.2))
def test_iterations_done_inverts_the_stretch_time(case, fraction):
    perf, batch, context0, n = case
    line = perf.decode_line(batch)
    elapsed = fraction * decode_stretch_time_s(line, context0, batch, n)
    k = decode_stretch_iterations_done(line, context0, batch, n, elapsed)
    assert 0 <= k <= n
    assert decode_stretch_time_s(line, context0, batch, k) <= elapsed
    if k < n:
        assert decode_stretch_time_s(line, context0, batch, k + 1) > elapsed


def test_nearly_equal_slopes_do_not_overflow_the_iteration_count():
    """Shrunk from a review: two decode lines whose slopes differ by ~1 ulp cross ~1e300
    iterations out, past any 64-bit integer (the compiled build raised OverflowError).
    The crossing is beyond the stretch, so the split is the stretch's length, and an
    elapsed time far beyond the stretch has finished all of it."""
    from sim.models.perf import DecodeLine, _first_index_where_second_wins, decode_stretch_iterations_done

    assert _first_index_where_second_wins(1.0, 0.0, 0.0, 1e-300, 10) == 10
    line = DecodeLine(0.01, 1e-9, 0.01, 1e-9 * (1 + 2**-52), 0.001)
    assert decode_stretch_iterations_done(line, 100.0, 3, 1000, 1e30) == 1000


@st.composite
def speculative_stretches(draw):
    """A speculative step (verification over k + 1 tokens and k draft forwards, context
    growing by E[L] per sequence and step) of a drafting method of every kind."""
    from sim.models.speculation import spec_plan
    from sim.workloads.speculation import Speculation

    cat = load_catalog()
    perf = PerfModel(cat.accelerator(draw(st.sampled_from(["h100-sxm", "mi300x", "b200"]))),
                     cat.model(draw(st.sampled_from(["llama-3-70b", "mixtral-8x7b"]))), "fp8",
                     tp=draw(st.sampled_from([1, 2, 4, 8])), iteration_overhead_s=draw(st.sampled_from([0.0, 0.003])))
    k = draw(st.integers(1, 8))
    method = draw(st.sampled_from(["eagle", "draft_model", "ngram"]))
    spec = Speculation(method=method, draft_tokens=k, acceptance=draw(st.sampled_from([0.3, 0.7, 0.95])),
                       head_vocab=128_256 if method == "eagle" else None,
                       draft_model="llama-3-8b" if method == "draft_model" else None)
    plan = spec_plan(spec, perf, cat.model)
    batch = draw(st.integers(1, 512))
    return plan, batch, batch * draw(st.integers(1, 20_000)), draw(st.integers(0, 400))


@CASES
@given(speculative_stretches())
def test_speculative_closed_form_equals_the_per_step_sum(case):
    """Step j costs verify(C_j) + k·draft(C_j) at C_j = context0 + batch·E[L]·j
    (:meth:`sim.models.speculation.SpecPlan.step_time_s`, summed one step at a time)."""
    plan, batch, context0, n = case
    growth = batch * plan.growth
    by_step = sum(plan.step_time_s(batch, context0 + growth * j) for j in range(n))
    assert decode_stretch_time_s(plan.line(batch), context0, batch, n) == pytest.approx(by_step, rel=1e-9, abs=0.0)


@CASES
@given(speculative_stretches(), st.floats(0.0, 1.2))
def test_speculative_iterations_done_inverts_the_stretch_time(case, fraction):
    plan, batch, context0, n = case
    line = plan.line(batch)
    elapsed = fraction * decode_stretch_time_s(line, context0, batch, n)
    k = decode_stretch_iterations_done(line, context0, batch, n, elapsed)
    assert 0 <= k <= n and decode_stretch_time_s(line, context0, batch, k) <= elapsed
    if k < n:
        assert decode_stretch_time_s(line, context0, batch, k + 1) > elapsed
