"""The shared Erlang-C helper against closed forms it must reduce to."""

from __future__ import annotations

import pytest
from queueing_theory import erlang_c, erlang_c_lq, erlang_c_wait_s


def test_one_server_is_mm1():
    # M/M/1: P(wait) = ρ, Wq = ρ / (μ − λ), Lq = ρ² / (1 − ρ)
    lam, mu = 0.6, 1.0
    assert erlang_c(lam, mu, 1) == pytest.approx(0.6)
    assert erlang_c_wait_s(lam, mu, 1) == pytest.approx(0.6 / 0.4)
    assert erlang_c_lq(lam, mu, 1) == pytest.approx(0.36 / 0.4)


def test_two_servers_by_hand():
    # M/M/2, a = 1, ρ = 1/2: C = (1/2 / (1/2)) / (1 + 1 + 1) = 1/3, Wq = (1/3) / (2 − 1)
    assert erlang_c(1.0, 1.0, 2) == pytest.approx(1 / 3)
    assert erlang_c_wait_s(1.0, 1.0, 2) == pytest.approx(1 / 3)


def test_unstable_load_is_refused():
    with pytest.raises(ValueError):
        erlang_c(2.0, 1.0, 2)
