"""slow_start_batch: batch sizes, early exit on failure, cancellation (docs/design/warmpool.md,
"Slow-start batches")."""

from __future__ import annotations

import asyncio

from agentsandbox.controllers.common.batch import BatchCancelled, slow_start_batch
from tests.polling import yield_to_loop


async def test_slow_start_batch_all_succeed_with_batch_trimming() -> None:
    calls: list[int] = []
    in_flight = 0
    batches: list[int] = []

    async def fn(i: int) -> None:
        nonlocal in_flight
        calls.append(i)
        in_flight += 1
        await yield_to_loop()
        batches.append(in_flight)
        await yield_to_loop()
        in_flight -= 1

    successes, err = await slow_start_batch(14, 1, fn)
    assert (successes, err) == (14, None)
    assert calls == list(range(14))
    # peak concurrency per batch: 1, 2, 4, 7
    peaks: list[int] = []
    seen = 0
    for size in (1, 2, 4, 7):
        peaks.append(max(batches[seen : seen + size]))
        seen += size
    assert peaks == [1, 2, 4, 7]


async def test_slow_start_batch_count_zero_makes_no_calls() -> None:
    calls: list[int] = []

    async def fn(i: int) -> None:
        calls.append(i)

    assert await slow_start_batch(0, 1, fn) == (0, None)
    assert calls == []


async def test_slow_start_batch_stops_after_the_batch_with_a_failure() -> None:
    calls: list[int] = []

    async def fn(i: int) -> None:
        calls.append(i)
        if i == 5:
            raise RuntimeError(f"injected error at idx {i}")

    successes, err = await slow_start_batch(14, 1, fn)
    assert successes == 6
    assert len(calls) == 7  # batches 1 + 2 + 4; the fourth batch never starts
    assert err is not None and "injected error at idx 5" in str(err)


async def test_slow_start_batch_cancelled_mid_batch_finishes_that_batch_only() -> None:
    stop = asyncio.Event()
    calls: list[int] = []

    async def fn(i: int) -> None:
        calls.append(i)
        if i == 2:
            stop.set()

    successes, err = await slow_start_batch(14, 1, fn, stop=stop)
    assert isinstance(err, BatchCancelled) and str(err) == "context canceled"
    assert successes == 3
    assert len(calls) == 3


async def test_slow_start_batch_counts_partial_successes_of_the_failing_batch() -> None:
    async def fn(i: int) -> None:
        if i in (3, 4):
            raise ValueError(i)

    successes, err = await slow_start_batch(10, 1, fn)
    # batches: [0], [1, 2], [3, 4, 5, 6] -> 3 + 2 successes
    assert successes == 5
    assert isinstance(err, ValueError)
