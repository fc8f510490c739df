"""The autoscaler's sizing decision (pure): Erlang-B, the sizing rule, stabilisation, bursts."""

from __future__ import annotations

import pytest

from agentsandbox.controllers.autoscaler.plan import (
    REASON_AT_MAXIMUM,
    REASON_AT_MINIMUM,
    REASON_HOLDING,
    REASON_NO_DATA,
    REASON_SCALED_DOWN,
    REASON_SCALED_UP,
    Decision,
    Memory,
    Observation,
    Policy,
    decide,
    erlang_b,
    lead_time,
    servers_for,
)

POLICY = Policy(min_replicas=1, max_replicas=1000, target_warm_share=0.99, scale_down_window=300)


def even(rate: float, now: float, window: float = 600.0) -> list[float]:
    """Claims evenly spaced at ``rate``/s over the window before ``now`` (no bursts)."""
    if rate <= 0:
        return []
    n = int(rate * window)
    return [now - window + (i + 0.5) / rate for i in range(n)]


def once(
    rate: float, refill: float, current: int = 1, policy: Policy = POLICY, now: float = 10_000.0
) -> Decision:
    return decide(Observation(now, even(rate, now), [refill] * 50, current), policy, Memory())


# ----------------------------------------------------------------------------------- Erlang-B
@pytest.mark.parametrize(
    ("servers", "load", "expected"),
    [
        (0, 3.0, 1.0),
        (1, 1.0, 0.5),
        (2, 1.0, 0.2),
        (3, 2.0, 4 / 19),  # (8/6) / (1 + 2 + 2 + 8/6)
        # the classic table: the load N servers carry at 1 % blocking
        (10, 4.461, 0.01),
        (20, 12.031, 0.01),
        (50, 37.901, 0.01),
        (100, 84.064, 0.01),
        # and at 0.1 %
        (10, 3.092, 0.001),
        (100, 75.24, 0.001),
    ],
)
def test_erlang_b_known_values(servers: int, load: float, expected: float) -> None:
    assert erlang_b(servers, load) == pytest.approx(expected, rel=2e-3, abs=1e-9)


def test_erlang_b_is_stable_for_large_pools() -> None:
    b = erlang_b(5000, 4900.0)
    assert 0.0 < b < 0.05
    assert erlang_b(5000, 0.0) == 0.0
    assert erlang_b(3, 1e9) == pytest.approx(1.0, abs=1e-6)


def test_erlang_b_rejects_negative_input() -> None:
    with pytest.raises(ValueError):
        erlang_b(-1, 1.0)
    with pytest.raises(ValueError):
        erlang_b(1, -1.0)


def test_servers_for_is_the_smallest_reaching_the_target() -> None:
    for load in (0.05, 0.5, 4.461, 37.0, 450.0):
        n = servers_for(load, 0.99, 10_000)
        assert 1 - erlang_b(n, load) >= 0.99
        assert 1 - erlang_b(n - 1, load) < 0.99
    assert servers_for(0.0, 0.99, 10) == 0
    assert servers_for(450.0, 0.99, 10) == 11  # above the cap: cap + 1


# ----------------------------------------------------------------------------------- sizing
def test_sized_by_erlang_b_from_rate_and_mean_refill() -> None:
    d = once(rate=2.0, refill=30.0)
    load = 2.0 * (30.0 + POLICY.refill_overhead)
    assert d.replicas == servers_for(load, 0.99, 1000)
    assert d.arrival_rate == pytest.approx(2.0, rel=0.01)
    assert d.refill_time == pytest.approx(30.1)
    assert d.predicted_warm_share >= 0.99
    assert d.reason == REASON_SCALED_UP
    assert "Erlang-B" in d.message and "/s" in d.message


def test_monotone_in_rate() -> None:
    sizes = [once(rate, 20.0).replicas for rate in (0.05, 0.1, 0.3, 1, 2, 3, 5, 8, 13)]
    assert sizes == sorted(sizes)
    assert sizes[-1] > sizes[0]


def test_monotone_in_refill_time() -> None:
    sizes = [once(1.0, refill).replicas for refill in (0.1, 0.5, 2, 10, 30, 90, 180)]
    assert sizes == sorted(sizes)
    assert sizes[-1] > sizes[0]


def test_bounded_by_min_and_max() -> None:
    small = Policy(min_replicas=3, max_replicas=20, target_warm_share=0.99)
    low = once(0.001, 0.1, current=3, policy=small)
    assert low.replicas == 3
    assert low.reason == REASON_AT_MINIMUM
    none = once(0.0, 10.0, current=3, policy=small)
    assert none.replicas == 3 and none.reason == REASON_AT_MINIMUM
    high = once(50.0, 90.0, current=3, policy=small)
    assert high.replicas == 20
    assert high.reason == REASON_SCALED_UP
    again = once(50.0, 90.0, current=20, policy=small)
    assert again.replicas == 20 and again.reason == REASON_AT_MAXIMUM


def test_no_data_keeps_current_within_bounds() -> None:
    small = Policy(min_replicas=3, max_replicas=20, target_warm_share=0.99)
    for current, kept in ((7, 7), (50, 20), (0, 3)):
        d = decide(Observation(100.0, even(5.0, 100.0), [], current), small, Memory())
        assert (d.replicas, d.reason) == (kept, REASON_NO_DATA)


def test_claims_with_no_refill_time_at_zero_replicas_bootstrap_one_sandbox() -> None:
    """Autoscaler review finding 4: with minReplicas 0, a pool at 0 never creates, so never
    gives a refill sample; claims arriving with none measured scale it to max(minReplicas, 1)
    so that one can be measured, every pass until one is, and say so."""
    zero = Policy(min_replicas=0, max_replicas=20, target_warm_share=0.99)
    memory = Memory()
    for now in range(600, 3600, 15):  # 2 claims/s for 50 minutes, no refill sample
        d = decide(Observation(float(now), even(2.0, float(now)), [], 0), zero, memory)
        assert d.replicas == 1
        assert d.reason == "Bootstrap"
        assert "bootstrap" in d.message and "no refill time" in d.message
    # no claims: nothing to bootstrap for
    idle = decide(Observation(3600.0, [], [], 0), zero, Memory())
    assert (idle.replicas, idle.reason) == (0, REASON_NO_DATA)
    # a pool already above 0 is kept as it is (it refills, so it will be measured)
    kept = decide(Observation(3600.0, even(2.0, 3600.0), [], 4), zero, Memory())
    assert (kept.replicas, kept.reason) == (4, REASON_NO_DATA)


def test_refill_time_is_remembered_when_samples_run_out() -> None:
    memory = Memory()
    first = decide(Observation(1000.0, even(1.0, 1000.0), [10.0] * 20, 1), POLICY, memory)
    later = decide(Observation(1015.0, even(1.0, 1015.0), [], first.replicas), POLICY, memory)
    assert later.reason != REASON_NO_DATA
    assert later.refill_time == pytest.approx(first.refill_time)


def test_fast_up_slow_down() -> None:
    memory = Memory()
    now, current = 10_000.0, 1
    for _ in range(5):  # settle at 1/s
        current = decide(
            Observation(now, even(1.0, now), [20.0] * 50, current), POLICY, memory
        ).replicas
        now += 15
    low = current
    # the rate jumps (the whole window at the new rate): up at once, in one decision
    up = decide(Observation(now, even(4.0, now), [20.0] * 50, current), POLICY, memory)
    assert up.reason == REASON_SCALED_UP
    assert up.replicas == servers_for(4.0 * 20.1, 0.99, 1000) > low
    current, high_at = up.replicas, now
    # and back down: held for the window, then down to the new recommendation
    seen = []
    for _ in range(40):
        now += 15
        obs = Observation(now, even(1.0, now), [20.0] * 50, current)
        d = decide(obs, POLICY, memory)
        seen.append((now - high_at, d.replicas, d.reason))
        current = d.replicas
    held = [s for s in seen if s[0] < POLICY.scale_down_window]
    assert all(r == up.replicas and why == REASON_HOLDING for _, r, why in held)
    after = [s for s in seen if s[0] > POLICY.scale_down_window + 15]
    assert after and all(r < up.replicas for _, r, _ in after)
    assert any(why == REASON_SCALED_DOWN for _, _, why in seen)


# ----------------------------------------------------------------------------------- bursts
def burst_arrivals(starts: list[float], size: int = 100, length: float = 20.0) -> list[float]:
    return sorted(s + length * (i + 0.5) / size for s in starts for i in range(size))


def run_bursts(starts: list[float], until: float, refill: float) -> list[tuple[float, Decision]]:
    arrivals = burst_arrivals(starts)
    memory, current, out = Memory(), 1, []
    t = 0.0
    while t <= until:
        window = [a for a in arrivals if t - 600 < a <= t]
        d = decide(Observation(t, window, [refill] * 50, current), POLICY, memory)
        out.append((t, d))
        current = d.replicas
        t += 10.0
    return out


def test_regular_bursts_grow_the_pool_before_the_next_and_shrink_it_between() -> None:
    starts = [300.0 * k for k in range(1, 6)]
    refill = 60.0
    log = run_bursts(starts, until=1500.0, refill=refill)

    def at(t: float) -> Decision:
        return next(d for s, d in log if s == t)

    # from the third burst on the spacing is known: full before each burst starts
    for start in (900.0, 1200.0, 1500.0):
        before = at(start - 10)
        assert before.replicas >= 100, (start, before)
        assert before.next_burst is not None and before.next_burst <= start
        # well between two bursts the pool is small again
        between = at(start - 200)
        assert between.replicas < 10, (start, between)
    # a 60 s refill outlasts the 20 s burst (no replacement can serve it): the headroom is
    # handed back as its claims arrive
    during = [d.burst_headroom for s, d in log if 1200 <= s <= 1220]
    assert during == sorted(during, reverse=True) and during[-1] < during[0]


def test_a_burst_keeps_its_headroom_while_its_claims_are_still_arriving() -> None:
    """Fast refills (0.5 s) and 40-claim bursts 6 s long every 40 s, decisions every second:
    as the burst's claims are seen the pool is not shrunk (a claim seen is not yet adopted, and
    a smaller pool would delete the Ready members the rest of the burst needs); the headroom
    goes only after the burst's expected end."""
    starts = [20.0 + 40.0 * k for k in range(6)]
    arrivals = sorted(s + 6.0 * (i + 0.5) / 40 for s in starts for i in range(40))
    policy = Policy(1, 200, 0.99, scale_down_window=15.0)
    memory, current, t = Memory(), 1, 0.0
    log: list[tuple[float, Decision]] = []
    while t <= 260.0:
        window = [a for a in arrivals if a <= t]
        d = decide(Observation(t, window, [0.5] * 50, current), policy, memory)
        log.append((t, d))
        current, t = d.replicas, t + 1.0
    last = starts[-1]
    # grown before the burst, and never smaller while its claims arrive
    inside = [d.replicas for s, d in log if last - 1.0 <= s <= last + 6.0]
    assert inside[0] > 5, log
    assert inside == sorted(inside), inside
    # back down once it is over
    assert next(d for s, d in log if s == last + 25.0).replicas < inside[-1]
    # every claim is in a burst: the message says so instead of "cold share 100% at 0"
    quiet = next(d for s, d in log if s == last - 1.0)
    assert "no claims outside bursts" in quiet.message and "100.00%" not in quiet.message
    assert "create -> Ready mean 0.5s (p99 0.5s) + 0.1s" in quiet.message


def test_irregular_bursts_hold_the_headroom() -> None:
    starts = [300.0, 420.0, 900.0, 1000.0, 1700.0]
    log = run_bursts(starts, until=1690.0, refill=60.0)
    quiet = [d for s, d in log if 1300 <= s <= 1650]
    assert all(d.replicas >= 100 for d in quiet)
    assert "irregular" in quiet[-1].message


def test_lead_time_covers_slow_creates_spread_over_the_burst() -> None:
    refills = [float(x) for x in range(1, 101)]  # 1..100 s
    assert lead_time(refills, 0.0, 0.99) == pytest.approx(100.0)
    # a 50 s burst: the last claims can wait 50 s more
    assert lead_time(refills, 50.0, 0.99) == pytest.approx(
        max(q - (q - 1) / 100 * 50 for q in refills)
    )
    assert lead_time(refills, 50.0, 0.99) < 100.0


def test_a_warm_share_horizon_prices_cold_claims() -> None:
    """With a horizon the first size is the per-moment one; while the predicted cold share runs
    below the allowance the price falls and a quiet pool is allowed to shrink below it."""
    horizon = Policy(1, 1000, 0.99, warm_share_horizon=3600.0)
    memory = Memory()
    now, current = 10_000.0, 1
    strict = once(0.1, 0.3).replicas
    sizes = []
    for _ in range(400):
        d = decide(Observation(now, even(0.1, now), [0.3] * 50, current), horizon, memory)
        sizes.append(d.replicas)
        current, now = d.replicas, now + 15
    assert sizes[0] == strict == 2
    assert 1 in sizes  # 0.1/s with a 0.4 s refill: one sandbox serves ~96 % warm
    # and the predicted cold share over the horizon stays near the 1 % allowance
    assert memory.cold_price is not None
    assert memory.cold_seen / memory.claims_seen < 0.015


def test_poisson_noise_is_not_a_burst() -> None:
    """Poisson claims at 5/s for an hour: no bin passes the tail test, no episode is learned."""
    import random

    rng = random.Random(11)
    arrivals, t = [], 0.0
    while t < 3600:
        t += rng.expovariate(5.0)
        arrivals.append(t)
    memory, current, now = Memory(), 1, 600.0
    while now <= 3600:
        window = [a for a in arrivals if now - 600 < a <= now]
        d = decide(Observation(now, window, [30.0] * 50, current), POLICY, memory)
        assert d.burst_headroom == 0
        current, now = d.replicas, now + 15
    assert memory.bursts == []
