"""The controller loop without a cluster: result handling, error logging, workers, restarts,
min_interval.

Events come from an in-memory source (objects are plain dicts, as the informer delivers them).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable

import pytest

from agentsandbox.kube import metrics
from agentsandbox.kube.controller import Controller
from agentsandbox.kube.errors import Conflict, NotFound
from agentsandbox.kube.reconcile import Request, Result
from agentsandbox.kube.workqueue import ItemExponentialFailureRateLimiter
from tests.polling import eventually, yield_to_loop
from tests.unit.kube.controller_helpers import (
    STEP,
    FakeClock,
    MemorySource,
    advance_until_released,
    idle,
    noop,
    obj,
)


def sample(name: str, labels: dict[str, str]) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


# --- result handling ------------------------------------------------------------------------


class Scripted:
    """A reconciler that returns (or raises) what a script says, per call."""

    def __init__(self, *outcomes: Result | BaseException | None) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[Request] = []

    async def reconcile(self, request: Request) -> Result | None:
        self.calls.append(request)
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def counters(name: str) -> Callable[[], dict[str, float]]:
    def read() -> dict[str, float]:
        out = {
            result: sample(
                "controller_runtime_reconcile_total", {"controller": name, "result": result}
            )
            for result in ("success", "error", "requeue", "requeue_after")
        }
        out["errors"] = sample("controller_runtime_reconcile_errors_total", {"controller": name})
        out["panics"] = sample("controller_runtime_reconcile_panics_total", {"controller": name})
        return out

    return read


async def test_success_forgets_the_backoff() -> None:
    controller = Controller("ok", Scripted(RuntimeError("x"), Result()))
    req = Request("ns", "a")
    await controller.process(req)
    assert controller.queue.num_requeues(req) == 1
    await controller.process(req)
    assert controller.queue.num_requeues(req) == 0
    assert counters("ok")()["success"] == 1


async def test_requeue_after_is_a_plain_delay_and_resets_backoff() -> None:
    controller = Controller("later", Scripted(RuntimeError("x"), Result(requeue_after=30)))
    req = Request("ns", "a")
    await controller.process(req)
    await controller.process(req)
    assert controller.queue.num_requeues(req) == 0
    assert controller.queue.delayed_count == 1
    assert counters("later")()["requeue_after"] == 1


async def test_requeue_uses_the_rate_limited_backoff() -> None:
    controller = Controller("again", Scripted(Result(requeue=True)))
    req = Request("ns", "a")
    await controller.process(req)
    assert controller.queue.num_requeues(req) == 1
    assert counters("again")()["requeue"] == 1


async def test_a_plain_function_is_a_reconciler_and_none_means_done() -> None:
    seen: list[Request] = []

    async def reconcile(request: Request) -> None:
        seen.append(request)

    controller = Controller("fn", reconcile)
    await controller.process(Request("ns", "a"))
    assert seen == [Request("ns", "a")]
    assert counters("fn")()["success"] == 1


async def test_expected_api_errors_are_one_line_and_not_panics(
    caplog: pytest.LogCaptureFixture,
) -> None:
    controller = Controller(
        "expected", Scripted(NotFound(message='widgets "a" not found'), Conflict())
    )
    req = Request("ns", "a")
    with caplog.at_level(logging.INFO, logger="agentsandbox.kube.controller"):
        await controller.process(req)
        await controller.process(req)
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 2
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in failures)
    assert "NotFound" in failures[0].getMessage()
    c = counters("expected")()
    assert c["errors"] == 2 and c["panics"] == 0 and c["error"] == 2
    assert controller.queue.num_requeues(req) == 2


async def test_an_unexpected_error_logs_its_traceback_once_per_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    boom = Scripted(ValueError("bug"), ValueError("bug"), ValueError("bug"), Result())
    controller = Controller("buggy", boom)
    req = Request("ns", "a")
    with caplog.at_level(logging.INFO, logger="agentsandbox.kube.controller"):
        for _ in range(4):
            await controller.process(req)
    records = [r for r in caplog.records if r.name == "agentsandbox.kube.controller"]
    with_traceback = [r for r in records if r.exc_info]
    assert len(with_traceback) == 1
    repeats = [r for r in records if "failed again" in r.getMessage()]
    assert len(repeats) == 2 and all(r.exc_info is None for r in repeats)
    assert any("reconciled after errors" in r.getMessage() for r in records)
    c = counters("buggy")()
    assert c["panics"] == 3 and c["errors"] == 3 and c["success"] == 1


async def test_a_different_error_gets_its_own_traceback(caplog: pytest.LogCaptureFixture) -> None:
    controller = Controller("two-bugs", Scripted(ValueError("one"), KeyError("two")))
    with caplog.at_level(logging.ERROR, logger="agentsandbox.kube.controller"):
        await controller.process(Request("ns", "a"))
        await controller.process(Request("ns", "a"))
    assert len([r for r in caplog.records if r.exc_info]) == 2


# --- workers --------------------------------------------------------------------------------


async def test_workers_never_run_one_key_twice_at_once_but_run_keys_in_parallel() -> None:
    running: set[Request] = set()
    overlap: list[Request] = []
    peak = 0
    calls = 0
    busy = asyncio.Event()  # the reconciles hold their key until the test lets them finish

    async def reconcile(request: Request) -> Result:
        nonlocal peak, calls
        calls += 1
        if request in running:
            overlap.append(request)
        running.add(request)
        peak = max(peak, len(running))
        await busy.wait()
        running.discard(request)
        return Result()

    controller = Controller("parallel", reconcile, workers=4)
    await controller.start()
    try:
        for _ in range(3):
            for i in range(8):
                controller.enqueue(Request("ns", f"k{i}"))
            await yield_to_loop()
        await eventually(lambda: len(running) == 4, within=5, what="four keys reconciling at once")
        busy.set()
        await eventually(
            lambda: not len(controller.queue) and not controller.queue.processing_count,
            within=5,
            what="the queue drained",
        )
    finally:
        await controller.stop()
    assert overlap == []
    assert peak == 4
    assert 8 <= calls <= 24
    assert sample("controller_runtime_max_concurrent_reconciles", {"controller": "parallel"}) == 4
    assert sample("controller_runtime_active_workers", {"controller": "parallel"}) == 0


async def test_a_failing_key_is_retried_with_backoff_without_stopping_the_worker() -> None:
    """The worker goes on with other keys while a failing one waits 20, 40, then 80 ms (on a
    fake clock: the gaps are the delays the controller asked the work queue for)."""
    clock = FakeClock()
    attempts: list[float] = []
    others: list[Request] = []

    async def reconcile(request: Request) -> Result:
        if request.name == "bad":
            attempts.append(clock())
            if len(attempts) < 4:
                raise RuntimeError("not yet")
        else:
            others.append(request)
        return Result()

    limiter = ItemExponentialFailureRateLimiter(0.02, 1.0)
    controller = Controller("retry", reconcile, workers=1, rate_limiter=limiter, clock=clock)
    await controller.start()
    try:
        controller.enqueue(Request("ns", "bad"))
        controller.enqueue(Request("ns", "good"))
        for n in range(1, 4):

            def waiting_for_retry(failed: int = n) -> bool:
                return len(attempts) == failed and idle(controller)

            await eventually(
                waiting_for_retry,
                within=5,
                interval=0.01,
                what=f"attempt {n} failed and waiting for its retry",
            )
            assert advance_until_released(clock, controller.queue) is not None
        await eventually(
            lambda: len(attempts) == 4 and idle(controller),
            within=5,
            interval=0.01,
            what="four attempts",
        )
    finally:
        await controller.stop()
    assert len(attempts) == 4
    assert others == [Request("ns", "good")]
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert gaps == pytest.approx([0.02, 0.04, 0.08], abs=STEP)


async def test_stop_lets_running_reconciles_finish() -> None:
    finished: list[str] = []
    started = asyncio.Event()
    release = asyncio.Event()

    async def reconcile(request: Request) -> Result:
        started.set()
        await release.wait()
        finished.append(request.name)
        return Result()

    controller = Controller("drain", reconcile)
    await controller.start()
    controller.enqueue(Request("ns", "a"))
    await started.wait()
    stopping = asyncio.create_task(controller.stop(drain_timeout=5))
    await yield_to_loop(3)
    assert not stopping.done()  # stop waits for the running reconcile
    release.set()
    await stopping
    assert finished == ["a"]


async def test_stop_without_drain_cancels_running_reconciles() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def reconcile(request: Request) -> Result:
        started.set()
        try:
            await asyncio.Event().wait()  # never set: runs until cancelled
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return Result()

    controller = Controller("cancel", reconcile)
    await controller.start()
    controller.enqueue(Request("ns", "a"))
    await started.wait()
    # the reconcile never ends by itself: a stop that waited for it would hang (the timeout
    # only stops such a test)
    await asyncio.wait_for(controller.stop(drain_timeout=0), 10)
    assert cancelled.is_set()


async def test_a_restarted_controller_gets_every_cached_object_again() -> None:
    seen: list[Request] = []

    async def reconcile(request: Request) -> Result:
        seen.append(request)
        return Result()

    source = MemorySource(obj("a"), obj("b"))
    controller = Controller("restart", reconcile)
    controller.watch(source)
    for start in range(1, 3):
        await controller.start()
        await eventually(
            lambda start=start: len(seen) == 2 * start and not controller.queue.processing_count,
            within=1,
            interval=0.01,
            what="both cached objects reconciled",
        )
        await controller.stop()
        assert source.handlers == []
    assert sorted(seen) == [Request("ns", "a")] * 2 + [Request("ns", "b")] * 2


async def test_min_interval_coalesces_events_after_a_recent_pass_into_one_later_pass() -> None:
    """A request whose last pass started within min_interval is not queued at once: it waits for
    the rest of the interval (one later pass serves every event in between). Another request,
    or the same one once the interval is over, is queued at once. (A fake clock: the interval
    is 0.2 s of it.)"""
    clock = FakeClock()
    controller = Controller("coalesce", noop, min_interval=0.2, clock=clock)
    queue = controller.queue
    a, b = Request("ns", "a"), Request("ns", "b")
    controller.enqueue(a)
    assert len(queue) == 1  # never passed: at once
    got = await queue.get()
    await controller.process(got)
    queue.done(got)
    for _ in range(5):  # a burst of events right after the pass
        controller.enqueue(a)
    controller.enqueue(b)
    assert len(queue) == 1 and queue.delayed_count == 1
    # a is back when the rest of its interval is over, not before
    assert advance_until_released(clock, queue) == pytest.approx(0.2, abs=STEP)
    assert len(queue) == 2  # a is back, once
    assert queue.delayed_count == 0
    for _ in range(2):
        got = await queue.get()
        await controller.process(got)  # a's last pass starts now
        queue.done(got)
    assert len(queue) == 0
    clock.advance(0.25)
    controller.enqueue(a)  # interval over (a's last pass started 0.25 s ago): at once
    assert len(queue) == 1 and queue.delayed_count == 0
    queue.shutdown()


def test_min_interval_is_off_by_default_and_never_negative() -> None:
    assert Controller("plain", noop).min_interval == 0
    with pytest.raises(ValueError):
        Controller("bad", noop, min_interval=-1)
