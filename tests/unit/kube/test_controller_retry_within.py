"""A reconcile error can bound its retry delay (``retry_within``): the key comes back no later
than that, however long the per-key backoff has grown; the backoff itself keeps growing."""

from __future__ import annotations

import asyncio

from agentsandbox.kube.controller import Controller
from agentsandbox.kube.reconcile import Request, Result, retry_within
from agentsandbox.kube.workqueue import ItemExponentialFailureRateLimiter
from tests.polling import eventually, stays


class DeadlineError(Exception):
    def __init__(self, within: float | None) -> None:
        super().__init__("child write failed")
        self.retry_within = within


def test_retry_within_reads_a_number_and_ignores_anything_else() -> None:
    assert retry_within(DeadlineError(2.5)) == 2.5
    assert retry_within(DeadlineError(-1)) == 0.0
    assert retry_within(DeadlineError(None)) is None
    assert retry_within(RuntimeError("plain")) is None
    err = RuntimeError("odd")
    err.retry_within = "soon"  # type: ignore[attr-defined]
    assert retry_within(err) is None


async def _retry_gap(
    error: Exception, limiter_base: float, *, retried: bool = True
) -> tuple[float | None, int]:
    """Seconds between the failing pass and its retry (None: no retry within 2 s, what a test
    passing ``retried=False`` checks), and the backoff count after the failure."""
    attempts: list[float] = []
    requeues: list[int] = []

    async def reconcile(request: Request) -> Result:
        attempts.append(asyncio.get_running_loop().time())
        if len(attempts) == 1:
            raise error
        return Result()

    controller = Controller(
        "retry-within",
        reconcile,
        rate_limiter=ItemExponentialFailureRateLimiter(limiter_base, 1000.0),
    )

    def retries() -> int:
        if len(attempts) == 1 and not requeues:
            requeues.append(controller.queue.num_requeues(Request("ns", "a")))
        return max(len(attempts) - 1, 0)

    await controller.start()
    try:
        controller.enqueue(Request("ns", "a"))
        if retried:
            await eventually(retries, within=2, interval=0.01, what="the retry")
        else:
            await eventually(lambda: attempts, within=2, interval=0.01, what="the first pass")
            await stays(lambda: retries() == 0, for_=2, interval=0.01, what="no retry")
    finally:
        await controller.stop()
    gap = attempts[1] - attempts[0] if len(attempts) >= 2 else None
    return gap, requeues[0] if requeues else -1


async def test_an_error_with_retry_within_is_retried_before_a_long_backoff() -> None:
    gap, requeues = await _retry_gap(DeadlineError(0.05), limiter_base=100.0)
    assert gap is not None and 0.04 <= gap < 1.0
    assert requeues == 1  # the failure still counts towards the backoff


async def test_a_shorter_backoff_still_wins_over_a_later_retry_within() -> None:
    gap, _ = await _retry_gap(DeadlineError(100.0), limiter_base=0.02)
    assert gap is not None and gap < 1.0


async def test_an_error_without_retry_within_waits_for_the_backoff() -> None:
    gap, requeues = await _retry_gap(RuntimeError("plain"), limiter_base=100.0, retried=False)
    assert gap is None and requeues == 1
