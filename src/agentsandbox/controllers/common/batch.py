"""Slow-start batching: create or delete many objects without hammering a failing API.

Run ``count`` calls in batches of 1, 2, 4, ... (the last one trimmed). Every call of a batch runs
concurrently and the whole batch is awaited; the first failing batch ends the run, so a create
that is rejected (quota, admission, a bad template) costs a handful of calls, not hundreds. The
same shape as the ReplicaSet controller's and upstream's ``slowStartBatch``
(docs/design/warmpool.md, "Slow-start batches").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class BatchCancelled(Exception):
    """The run was cancelled between two batches (the ``stop`` event was set)."""

    def __str__(self) -> str:
        return "context canceled"


async def slow_start_batch(
    count: int,
    initial: int,
    fn: Callable[[int], Awaitable[None]],
    *,
    stop: asyncio.Event | None = None,
) -> tuple[int, BaseException | None]:
    """Call ``fn(0) .. fn(count-1)``; return ``(successes, first_error_or_None)``.

    ``successes`` counts the calls that returned normally, including those of the failing batch.
    The first error is the first to complete among the failing batch's errors. ``stop`` is
    checked between batches only: a started batch always runs to the end.
    """
    remaining = count
    successes = 0
    size = min(remaining, max(initial, 1))
    while size > 0:
        if stop is not None and stop.is_set():
            return successes, BatchCancelled()
        start = successes
        first_error: BaseException | None = None
        ok = 0

        async def run(index: int) -> None:
            nonlocal first_error, ok
            try:
                await fn(index)
            except Exception as err:
                if first_error is None:
                    first_error = err
            else:
                ok += 1

        await asyncio.gather(*(run(start + i) for i in range(size)))
        successes += ok
        if first_error is not None:
            return successes, first_error
        remaining -= size
        size = min(2 * size, remaining)
    return successes, None
