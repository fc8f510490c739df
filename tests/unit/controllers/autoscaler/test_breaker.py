"""The autoscaler's circuit breaker (autoscaler review finding 14): a pool whose members never
become Ready (a bad image tag, a broken template), or that reports it cannot progress, is not
grown on a remembered refill time — the desired size is frozen (scale-down unchanged), the
decision says why, and a member becoming Ready again resets it."""

from __future__ import annotations

from agentsandbox.controllers.autoscaler.decision import (
    REASON_MEMBERS_NEVER_READY,
    REASON_POOL_NOT_READY,
)
from agentsandbox.controllers.autoscaler.plan import (
    Memory,
    Observation,
    Policy,
    breaker_limit,
    decide,
)

POLICY = Policy(min_replicas=1, max_replicas=1000, target_warm_share=0.99, scale_down_window=300)
REFILL = [2.0] * 50  # a healthy pool: Ready 2 s after the create


def even(rate: float, now: float, window: float = 600.0) -> list[float]:
    n = int(rate * window)
    return [now - window + (i + 0.5) / rate for i in range(n)]


def healthy(memory: Memory, now: float, rate: float, current: int) -> int:
    """A pass of a healthy pool (refill samples, no not-Ready member): its size."""
    return decide(Observation(now, even(rate, now), REFILL, current), POLICY, memory).replicas


def test_members_never_ready_freeze_growth_while_the_rate_rises() -> None:
    memory = Memory()
    size = healthy(memory, 10_000.0, 0.5, 1)
    assert size > 1
    # the image breaks: no new refill sample, the oldest not-Ready member ages past the limit
    now = 10_015.0
    for rate in (1.0, 2.0, 5.0, 10.0):
        now += 15.0
        obs = Observation(now, even(rate, now), [], size, oldest_not_ready_age=900.0)
        d = decide(obs, POLICY, memory)
        assert d.replicas <= size, rate
        assert d.reason == REASON_MEMBERS_NEVER_READY
        assert d.stalled
        assert "not Ready" in d.message


def test_a_young_not_ready_member_does_not_trip_the_breaker() -> None:
    memory = Memory()
    size = healthy(memory, 10_000.0, 0.5, 1)
    obs = Observation(10_015.0, even(5.0, 10_015.0), REFILL, size, oldest_not_ready_age=20.0)
    d = decide(obs, POLICY, memory)
    assert d.replicas > size
    assert not d.stalled
    assert d.reason not in (REASON_MEMBERS_NEVER_READY, REASON_POOL_NOT_READY)


def test_a_pool_that_cannot_progress_trips_the_breaker() -> None:
    memory = Memory()
    size = healthy(memory, 10_000.0, 0.5, 1)
    obs = Observation(10_015.0, even(5.0, 10_015.0), REFILL, size, pool_progressing=False)
    d = decide(obs, POLICY, memory)
    assert d.replicas <= size
    assert d.stalled and d.reason == REASON_POOL_NOT_READY


def test_the_breaker_holds_while_stuck_members_are_replaced_and_resets_on_a_ready_member() -> None:
    memory = Memory()
    size = healthy(memory, 10_000.0, 0.5, 1)
    trip = Observation(10_015.0, even(2.0, 10_015.0), [], size, oldest_not_ready_age=900.0)
    assert decide(trip, POLICY, memory).stalled
    # the pool replaced its stuck members: the oldest not-Ready one is young, but none has
    # become Ready since the trip (the last Ready was long before it)
    replaced = Observation(
        10_030.0,
        even(2.0, 10_030.0),
        [],
        size,
        oldest_not_ready_age=5.0,
        last_ready_age=2000.0,
    )
    d = decide(replaced, POLICY, memory)
    assert d.stalled and d.replicas <= size
    # a member became Ready 3 s ago (after the trip): the breaker resets, the pool grows
    ready = Observation(
        10_045.0,
        even(2.0, 10_045.0),
        REFILL,
        size,
        oldest_not_ready_age=5.0,
        last_ready_age=3.0,
    )
    d = decide(ready, POLICY, memory)
    assert not d.stalled
    assert d.replicas > size


def test_scale_down_still_applies_while_tripped() -> None:
    policy = Policy(min_replicas=1, max_replicas=1000, target_warm_share=0.99, scale_down_window=0)
    memory = Memory()
    obs = Observation(10_000.0, even(0.1, 10_000.0), REFILL, 40, oldest_not_ready_age=900.0)
    d = decide(obs, policy, memory)
    assert d.stalled and d.replicas < 40


def test_the_breaker_holds_while_a_stuck_member_is_deleted_before_its_replacement() -> None:
    """The pool deletes a stuck member at its readiness deadline and makes the replacement in a
    later pass: for a moment no member is not Ready. That moment reset the breaker, which
    tripped again a limit later, with one more Warning every replacement (47 trips in the
    never-Ready scenario's four hours) and growth allowed between."""
    memory = Memory()
    size = healthy(memory, 10_000.0, 0.5, 1)
    now = 10_015.0
    trip = Observation(now, even(2.0, now), [], size, oldest_not_ready_age=900.0)
    assert decide(trip, POLICY, memory).stalled
    since = memory.breaker_since
    for age in (None, None, 3.0, 18.0):  # deleted, not yet replaced; then the replacement
        now += 5.0
        obs = Observation(
            now, even(5.0, now), REFILL, size, oldest_not_ready_age=age, last_ready_age=2000.0
        )
        d = decide(obs, POLICY, memory)
        assert d.stalled and d.replicas <= size, age
        assert memory.breaker_since == since  # the same trip: no second Warning


def test_the_breaker_resets_when_no_member_is_left_not_ready_for_a_whole_limit() -> None:
    """A tripped pool scaled down past its stuck members (or to zero) has nothing left to wait
    for: once no member has been not Ready for the breaker's limit, the size may grow again."""
    memory = Memory()
    size = healthy(memory, 10_000.0, 0.5, 1)
    now = 10_015.0
    trip = Observation(now, even(2.0, now), [], size, oldest_not_ready_age=900.0)
    assert decide(trip, POLICY, memory).stalled
    limit = breaker_limit(POLICY, memory)
    start = now + 5.0
    while now < start + limit + 5.0:
        now += 5.0
        obs = Observation(now, even(5.0, now), REFILL, size, last_ready_age=2000.0)
        d = decide(obs, POLICY, memory)
        assert d.stalled == (now - start < limit), now - start
    assert d.recommended > size  # grown as fast as the scale-up limit lets it
