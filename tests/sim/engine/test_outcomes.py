"""Outcome columns (sim/engine/outcomes.py) against the Request objects they were copied
from: every field of every recorded request, read attribute by attribute, in id order
(in memory) or in completion order (streaming), across batch flushes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim.engine import outcomes as outcomes_mod
from sim.engine.outcomes import OUTCOME_FIELDS, Outcomes
from sim.engine.request import COMPLETED, REJECTED, Request


def _requests(n: int) -> list[Request]:
    """Requests with varied outcome fields: completed, rejected (with a reason) and in
    flight (NaN instants), large integers and floats that float32 would round."""
    reqs = []
    for i in range(n):
        r = Request(i, i % 3, 0.1 * i + 1e-9, prompt_tokens=1000 + i, output_tokens=7 * i, steps=i % 5)
        r.pool, r.replica, r.branches = i % 2, 2**40 + i, 1 + i % 4
        if i % 4 == 1:
            r.status, r.reason = REJECTED, "exceeds_kv_capacity"
        elif i % 4 != 3:  # i % 4 == 3 stays in flight
            r.status = COMPLETED
            r.admitted_at_s, r.first_token_at_s, r.done_at_s = r.arrival_at_s + 0.5, r.arrival_at_s + 0.75, 1.0 / 3 + i
        r.share_s, r.denoiser_flops, r.preemptions, r.memory_wait_s = i / 7.0, 1.5e15 * i, i % 3, 2.0**-30 * i
        reqs.append(r)
    return reqs


def _expected(reqs: list[Request], field: str) -> list:
    return [getattr(r, field) for r in reqs]


def _same(column: np.ndarray, values: list) -> bool:
    assert len(column) == len(values)
    for got, want in zip(column.tolist(), values):
        if isinstance(want, float) and math.isnan(want):
            if not math.isnan(got):
                return False
        elif got != want or type(got) is not type(want):
            return False
    return True


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(outcomes_mod, "CHUNK_ROWS", 5)  # several flushes for 23 requests


def test_in_memory_columns_are_every_field_in_id_order(small_chunks):
    reqs = _requests(23)
    out = Outcomes(30)  # more ids than recorded: unrecorded ids are left out
    for r in reqs:
        out.arrived(r)
    finished = [r for r in reqs if r.status != 0]
    for r in reversed(finished):  # completion order is not id order
        out.record(r)
    out.finish_in_flight()
    cols, shares = out.columns()
    assert set(cols) == set(OUTCOME_FIELDS)
    for f in OUTCOME_FIELDS:
        assert _same(cols[f], _expected(reqs, f)), f
    assert cols["reason"].dtype == object and cols["share_s"].dtype == np.float64 and cols["id"].dtype == np.int64
    assert len(shares["request_id"]) == 0


def test_streamed_batches_are_every_field_in_completion_order(small_chunks):
    reqs = _requests(23)
    batches = []
    out = Outcomes(0, sink=lambda cols, shares: batches.append(cols))
    order = [r for r in reqs if r.status != 0][::-1]
    for r in reqs:
        out.arrived(r)
    for r in order:
        out.record(r)
    out.finish_in_flight()
    order += [r for r in reqs if r.status == 0]  # in flight last, in id order
    assert [len(b["id"]) for b in batches][:-1] == [5] * (len(batches) - 1)
    for f in OUTCOME_FIELDS:
        column = np.concatenate([b[f] for b in batches])
        assert column.flags["C_CONTIGUOUS"] and _same(column, _expected(order, f)), f
