"""Client-side QPS/burst token bucket, driven by a fake clock."""

from __future__ import annotations

import asyncio
import inspect
import time

import pytest

from agentsandbox.kube.ratelimit import TokenBucket
from tests.polling import yield_to_loop


class FakeTime:
    """A clock that only moves when someone sleeps on it."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await yield_to_loop()

    def advance(self, seconds: float) -> None:
        self.now += seconds


def bucket(qps: float, burst: int, fake: FakeTime) -> TokenBucket:
    return TokenBucket(qps, burst, clock=fake.clock, sleep=fake.sleep)


async def test_burst_tokens_are_available_at_once() -> None:
    fake = FakeTime()
    limiter = bucket(10, 5, fake)
    waits = [await limiter.acquire() for _ in range(5)]
    assert waits == [0.0] * 5
    assert fake.sleeps == []


async def test_after_the_burst_each_request_waits_one_over_qps_more() -> None:
    fake = FakeTime()
    limiter = bucket(10, 2, fake)
    await limiter.acquire()
    await limiter.acquire()
    delays = [limiter.reserve() for _ in range(3)]
    assert delays == pytest.approx([0.1, 0.2, 0.3])


async def test_concurrent_waiters_are_served_in_arrival_order() -> None:
    fake = FakeTime()
    limiter = bucket(4, 1, fake)
    waits = await asyncio.gather(*(limiter.acquire() for _ in range(4)))
    assert waits == pytest.approx([0.0, 0.25, 0.5, 0.75])


async def test_tokens_refill_at_qps_up_to_burst() -> None:
    fake = FakeTime()
    limiter = bucket(2, 3, fake)
    for _ in range(3):
        assert limiter.try_acquire()
    assert not limiter.try_acquire()
    fake.advance(0.5)
    assert limiter.tokens == pytest.approx(1.0)
    fake.advance(100)
    assert limiter.tokens == pytest.approx(3.0)


async def test_a_long_idle_period_does_not_bank_more_than_burst() -> None:
    fake = FakeTime()
    limiter = bucket(100, 3, fake)
    fake.advance(3600)
    assert [limiter.reserve() for _ in range(4)] == pytest.approx([0, 0, 0, 0.01])


async def test_qps_zero_or_negative_disables_limiting() -> None:
    for qps in (0, -1):
        fake = FakeTime()
        limiter = bucket(qps, 1, fake)
        assert not limiter.enabled
        assert [await limiter.acquire() for _ in range(1000)] == [0.0] * 1000
        assert limiter.try_acquire()
        assert fake.sleeps == []


async def test_burst_below_one_is_treated_as_one() -> None:
    fake = FakeTime()
    limiter = bucket(5, 0, fake)
    assert limiter.burst == 1
    assert limiter.reserve() == 0.0
    assert limiter.reserve() == pytest.approx(0.2)


async def test_a_cancelled_waiter_gives_its_token_back() -> None:
    fake = FakeTime()
    never = asyncio.Event()

    async def sleep(seconds: float) -> None:  # the waiter waits until it is cancelled
        fake.sleeps.append(seconds)
        await never.wait()

    limiter = TokenBucket(1, 1, clock=fake.clock, sleep=sleep)
    await limiter.acquire()
    before = limiter.tokens
    waiter = asyncio.create_task(limiter.acquire())
    await yield_to_loop()
    assert fake.sleeps == [1.0] and limiter.tokens == before - 1
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert limiter.tokens == before


def test_by_default_the_bucket_paces_on_the_real_clock() -> None:
    """The default clock is the real monotonic one (the tests above inject a fake clock and
    sleep; this one reads no time)."""
    assert inspect.signature(TokenBucket).parameters["clock"].default is time.monotonic
