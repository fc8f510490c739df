"""A reconcile error can bound its retry delay (``retry_within``): the key comes back no later
than that, however long the per-key backoff has grown; the backoff itself keeps growing."""

from __future__ import annotations

import pytest

from agentsandbox.kube.controller import Controller
from agentsandbox.kube.reconcile import Request, Result, retry_within
from agentsandbox.kube.workqueue import ItemExponentialFailureRateLimiter
from tests.polling import eventually
from tests.unit.kube.controller_helpers import STEP, FakeClock, advance_until_released, idle


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
    error: Exception, limiter_base: float, *, step: float = STEP, limit: float = 2.0
) -> tuple[float | None, int]:
    """Seconds of a fake clock between the failing pass and its retry (None: no retry within
    ``limit`` seconds, moving the clock ``step`` at a time), and the backoff count after the
    failure."""
    clock = FakeClock()
    attempts: list[float] = []

    async def reconcile(request: Request) -> Result:
        attempts.append(clock())
        if len(attempts) == 1:
            raise error
        return Result()

    controller = Controller(
        "retry-within",
        reconcile,
        rate_limiter=ItemExponentialFailureRateLimiter(limiter_base, 1000.0),
        clock=clock,
    )
    await controller.start()
    try:
        controller.enqueue(Request("ns", "a"))
        await eventually(
            lambda: len(attempts) == 1 and idle(controller),
            within=5,
            interval=0.01,
            what="the failed first pass",
        )
        requeues = controller.queue.num_requeues(Request("ns", "a"))
        if advance_until_released(clock, controller.queue, step=step, limit=limit) is None:
            return None, requeues
        await eventually(lambda: len(attempts) == 2, within=5, interval=0.01, what="the retry")
    finally:
        await controller.stop()
    return attempts[1] - attempts[0], requeues


async def test_an_error_with_retry_within_is_retried_before_a_long_backoff() -> None:
    gap, requeues = await _retry_gap(DeadlineError(0.05), limiter_base=100.0)
    assert gap == pytest.approx(0.05, abs=STEP)
    assert requeues == 1  # the failure still counts towards the backoff


async def test_a_shorter_backoff_still_wins_over_a_later_retry_within() -> None:
    gap, _ = await _retry_gap(DeadlineError(100.0), limiter_base=0.02)
    assert gap == pytest.approx(0.02, abs=STEP)


async def test_an_error_without_retry_within_waits_for_the_backoff() -> None:
    gap, requeues = await _retry_gap(RuntimeError("plain"), limiter_base=100.0)
    assert gap is None and requeues == 1
    gap, _ = await _retry_gap(RuntimeError("plain"), limiter_base=100.0, step=0.5, limit=200)
    assert gap == pytest.approx(100.0, abs=0.5)
