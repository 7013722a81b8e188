"""Queueing-theory results the engine tests compare against, written out from the
textbook formulas and independent of any ``sim`` code.

M/M/c (Poisson arrivals at rate λ, exponential service at rate μ per server, c servers,
one FIFO queue), offered load a = λ/μ, utilisation ρ = a/c < 1. Erlang's C formula
(Gross, Shortle, Thompson & Harris, *Fundamentals of Queueing Theory*, 4th ed., 2008,
§2.3) gives the probability that an arrival waits:

    C(c, a) = [a^c / c! / (1 − ρ)] / [Σ_{k<c} a^k / k! + a^c / c! / (1 − ρ)]

and then Wq = C / (cμ − λ) and, by Little's law, Lq = λ·Wq = C·ρ / (1 − ρ).
"""

from __future__ import annotations

import math


def erlang_c(arrival_rate: float, service_rate: float, servers: int) -> float:
    """Probability that an arrival to a stable M/M/c queue has to wait (Erlang C)."""
    a = arrival_rate / service_rate
    rho = a / servers
    if not 0 <= rho < 1:
        raise ValueError(f"M/M/c is stable only for rho < 1, got {rho}")
    top = a**servers / math.factorial(servers) / (1 - rho)
    return top / (sum(a**k / math.factorial(k) for k in range(servers)) + top)


def erlang_c_wait_s(arrival_rate: float, service_rate: float, servers: int) -> float:
    """Mean wait in queue Wq (s) of M/M/c."""
    return erlang_c(arrival_rate, service_rate, servers) / (servers * service_rate - arrival_rate)


def erlang_c_lq(arrival_rate: float, service_rate: float, servers: int) -> float:
    """Mean number waiting Lq of M/M/c (= λ·Wq by Little's law)."""
    return arrival_rate * erlang_c_wait_s(arrival_rate, service_rate, servers)
