"""Warm-pool autoscaler: the loss-system formulas its sizing rests on (pure): Erlang-B, its
size for a target, Hayward's approximation for a peaked load, and the refill times' ``κ`` and
settled mean."""

from __future__ import annotations

import math
from collections.abc import Sequence

# ------------------------------------------------------------------------------------ Erlang-B
#: above this load the recursion starts ``START_SIGMAS`` standard deviations below the load, from
#: the heavy-traffic value ``1 - n/a`` (its error dies out within a few √a steps: exact to double
#: precision from ``n = a`` on, within 0.5 % below), so that a pass is O(√a), not O(a)
FAST_LOAD = 50.0
START_SIGMAS = 10.0


def _start(offered_load: float) -> tuple[int, float]:
    """(n0, B(n0)) to start the recursion from."""
    if offered_load <= FAST_LOAD:
        return 0, 1.0
    n0 = max(0, math.floor(offered_load - START_SIGMAS * math.sqrt(offered_load)))
    return n0, 1.0 - n0 / offered_load


def erlang_b(servers: int, offered_load: float) -> float:
    """Blocking probability of an M/G/N/N loss system: the recursion
    ``B(0) = 1, B(n) = a·B(n-1) / (n + a·B(n-1))`` (stable: no factorials, no powers), started
    near the load for a large one (:data:`FAST_LOAD`)."""
    if servers < 0:
        raise ValueError("servers must be >= 0")
    if offered_load < 0:
        raise ValueError("offered_load must be >= 0")
    n0, b = _start(offered_load)
    if servers <= n0:
        return 1.0 - servers / offered_load if servers else 1.0
    for n in range(n0 + 1, servers + 1):
        ab = offered_load * b
        b = ab / (n + ab)
    return b


def _table(offered_load: float, upto: int) -> tuple[int, list[float]]:
    """(n0, [B(n0), B(n0 + 1), ..., B(upto)])."""
    n0, b = _start(offered_load)
    n0 = min(n0, upto)
    if n0 and n0 == upto:
        return n0, [1.0 - n0 / offered_load]
    out = [b]
    for n in range(n0 + 1, upto + 1):
        ab = offered_load * b
        b = ab / (n + ab)
        out.append(b)
    return n0, out


def servers_for(offered_load: float, target: float, cap: int) -> int:
    """The smallest N ≤ cap with ``1 - ErlangB(N, a) ≥ target``; ``cap + 1`` if none is."""
    if offered_load <= 0:
        return 0
    n, b = _start(offered_load)
    while 1.0 - b < target:
        if n > cap:
            return cap + 1
        n += 1
        ab = offered_load * b
        b = ab / (n + ab)
    return n


def _interpolated(n0: int, table: list[float], load: float, servers: float) -> float:
    """Erlang-B at a real number of servers: log-linear between the integers around it."""
    k = math.floor(servers)
    if k < n0:
        return 1.0 - servers / load
    low = table[k - n0]
    if servers == k or low == 0.0:
        return low
    high = table[k + 1 - n0]
    if high <= 0.0:
        return 0.0
    f = servers - k
    return math.exp((1.0 - f) * math.log(low) + f * math.log(high))


def hayward_blocking(servers: int, offered_load: float, peakedness: float) -> float:
    """The blocking of ``servers`` for a load of peakedness ``z`` (Hayward):
    Erlang-B(servers/z, a/z), log-linear between integers."""
    z = max(1.0, peakedness)
    if offered_load <= 0:
        return 0.0
    load = offered_load / z
    n0, table = _table(load, math.floor(servers / z) + 1)
    return _interpolated(n0, table, load, servers / z)


def hayward_servers(offered_load: float, peakedness: float, target: float, cap: int) -> int:
    """The smallest N ≤ cap with ``1 - hayward_blocking(N, a, z) ≥ target`` (``cap + 1`` if none
    is). For ``z = 1``, the Erlang-B size."""
    z = max(1.0, peakedness)
    if offered_load <= 0:
        return 0
    if z == 1.0:
        return servers_for(offered_load, target, cap)
    load = offered_load / z
    size = servers_for(load, target, cap)
    n0, table = _table(load, size + 2)
    n = max(0, math.floor(z * (size - 1)))
    while 1.0 - _interpolated(n0, table, load, n / z) < target:
        if n > cap:
            return cap + 1
        n += 1
    return n


def poisson_quantile(mean: float, p: float) -> int:
    """The smallest m with P(Poisson(mean) <= m) >= p (summed from the mode, in log space)."""
    if mean <= 0:
        return 0
    mode = math.floor(mean)
    at_mode = math.exp(mode * math.log(mean) - mean - math.lgamma(mode + 1))
    cdf, term, k = at_mode, at_mode, mode
    while k > 0 and term > cdf * 1e-17:  # P(X <= mode)
        term *= k / mean
        k -= 1
        cdf += term
    m, term = mode, at_mode
    if cdf >= p:
        while m > 0 and cdf - term >= p:  # P(X <= m - 1) still reaches p
            cdf -= term
            term *= m / mean
            m -= 1
        return m
    while cdf < p and term > 0:
        m += 1
        term *= mean / m
        cdf += term
    return m


def slot_kappa(refills: Sequence[float]) -> float:
    """``∫S² / ∫S`` of the empirical refill-time distribution (1: all equal)."""
    ordered = sorted(refills)
    n = len(ordered)
    if not n or ordered[-1] <= 0:
        return 1.0
    first = second = 0.0
    prev = 0.0
    for k, q in enumerate(ordered):
        surv = (n - k) / n  # S on [prev, q)
        first += (q - prev) * surv
        second += (q - prev) * surv * surv
        prev = q
    return second / first if first > 0 else 1.0


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[rank]


def settled_mean(
    previous: float | None, samples: Sequence[float], dt: float, horizon: float, sigmas: float
) -> float:
    """The refill time the sizing uses: the mean of the recent ``samples``, smoothed over about
    ``horizon`` seconds (``dt`` since the last call) while it stays within ``sigmas`` standard
    errors of the smoothed one, and taken at once when it moves further. A few hundred samples
    of a spread-out refill time (a 90 s lognormal's mean wanders by 2 % over 200) would otherwise
    move the size with their chance, up at once and down only after the scale-down window."""
    n = len(samples)
    recent = sum(samples) / n
    if previous is None or n < 2 or horizon <= 0:
        return recent
    spread = math.sqrt(sum((x - recent) ** 2 for x in samples) / (n - 1) / n)
    if abs(recent - previous) > sigmas * spread:
        return recent
    return previous + (recent - previous) * min(1.0, max(dt, 0.0) / horizon)
