"""Spare sizing by hand: units in repair are Poisson with mean rate × repair time."""

from __future__ import annotations

import math

import pytest

from sim.studies.operations import spares_for


def poisson_cdf(s: int, mean: float) -> float:
    return sum(math.exp(-mean) * mean ** k / math.factorial(k) for k in range(s + 1))


def test_spares_for_the_llama3_rate():
    # 419 unexpected interruptions in 54 days: 419 / (54 x 24) = 0.3233 per hour; 24 h repairs
    rate = 419 / (54 * 24)
    mean = rate * 24.0  # 7.76 units in repair on average
    s = spares_for(rate, 24.0, 0.999)
    assert poisson_cdf(s, mean) >= 0.999 > poisson_cdf(s - 1, mean)


def test_no_failures_need_no_spares_and_bad_input_is_refused():
    assert spares_for(0.0, 10.0, 0.99) == 0
    with pytest.raises(ValueError):
        spares_for(1.0, 1.0, 1.0)
