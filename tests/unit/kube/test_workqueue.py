"""The work queue: de-duplication, per-key exclusivity, delays, rate limits, shutdown, metrics."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from agentsandbox.kube import metrics
from agentsandbox.kube.workqueue import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    ShutDown,
    WorkQueue,
    default_controller_rate_limiter,
)
from tests.polling import stays, yield_to_loop


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


_names = itertools.count()

#: Seconds after which an awaited key counts as never coming: it only stops a hung test. What the
#: tests await is due at once, or after a few tens of milliseconds of the event loop's timer.
HUNG = 10.0


def new_queue(clock: FakeClock | None = None, **kwargs: object) -> WorkQueue[str]:
    """A queue with a unique metrics name, so counters from other tests do not leak in."""
    name = f"test-{next(_names)}"
    if clock is None:
        return WorkQueue(name, "ctl", **kwargs)  # type: ignore[arg-type]
    return WorkQueue(name, "ctl", clock=clock, **kwargs)  # type: ignore[arg-type]


def drain_nowait(q: WorkQueue[str]) -> list[str]:
    """Take and finish every waiting key."""
    out = []
    while len(q):
        key = q.get_nowait()
        out.append(key)
        q.done(key)
    return out


def sample(metric: str, q: WorkQueue[str]) -> float:
    value = metrics.REGISTRY.get_sample_value(metric, {"name": q.name, "controller": "ctl"})
    assert value is not None, metric
    return value


# --- de-duplication and exclusivity ---------------------------------------------------------


def test_key_added_many_times_while_waiting_is_processed_once() -> None:
    q = new_queue()
    for _ in range(5):
        q.add("ns/a")
    q.add("ns/b")
    q.add("ns/a")
    assert len(q) == 2
    assert drain_nowait(q) == ["ns/a", "ns/b"]
    with pytest.raises(asyncio.QueueEmpty):
        q.get_nowait()


def test_keys_are_handed_out_in_first_added_order() -> None:
    q = new_queue()
    for key in ["c", "a", "b", "a"]:
        q.add(key)
    assert drain_nowait(q) == ["c", "a", "b"]


def test_key_readded_while_processing_is_processed_again_after_done() -> None:
    q = new_queue()
    q.add("k")
    assert q.get_nowait() == "k"
    q.add("k")
    q.add("k")
    assert len(q) == 0, "a processing key must not be handed to a second worker"
    with pytest.raises(asyncio.QueueEmpty):
        q.get_nowait()
    q.done("k")
    assert len(q) == 1
    assert q.get_nowait() == "k"
    q.done("k")
    assert len(q) == 0


def test_key_not_readded_while_processing_is_finished_by_done() -> None:
    q = new_queue()
    q.add("k")
    q.done(q.get_nowait())
    assert len(q) == 0
    assert q.processing_count == 0


def test_len_counts_waiting_keys_not_processing_keys() -> None:
    q = new_queue()
    q.add("a")
    q.add("b")
    q.get_nowait()
    assert len(q) == 1
    assert q.processing_count == 1


def test_done_of_a_key_not_processing_is_ignored() -> None:
    q = new_queue()
    q.add("a")
    q.done("a")  # waiting, not processing
    q.done("zzz")
    assert len(q) == 1
    assert q.get_nowait() == "a"


async def test_key_is_never_reconciled_by_two_workers_at_once() -> None:
    q = new_queue()
    in_flight: set[str] = set()
    processed: list[str] = []
    overlaps: list[str] = []

    async def worker() -> None:
        while True:
            try:
                key = await q.get()
            except ShutDown:
                return
            if key in in_flight:
                overlaps.append(key)
            in_flight.add(key)
            await yield_to_loop(2)
            in_flight.discard(key)
            processed.append(key)
            q.done(key)

    workers = [asyncio.create_task(worker()) for _ in range(4)]
    keys = [f"k{i % 3}" for i in range(60)]
    for start in range(0, len(keys), 6):
        for key in keys[start : start + 6]:
            q.add(key)
        await yield_to_loop()
    await q.shutdown_with_drain()  # waiting keys are still handed out until none is left
    await asyncio.gather(*workers)
    assert overlaps == []
    assert set(processed) == {"k0", "k1", "k2"}
    assert len(processed) < len(keys), "duplicates while waiting must collapse"


async def test_get_waits_for_an_add() -> None:
    q = new_queue()
    getter = asyncio.create_task(q.get())
    await yield_to_loop()
    assert not getter.done()
    q.add("x")
    assert await asyncio.wait_for(getter, HUNG) == "x"


async def test_cancelled_getter_passes_its_wakeup_to_another_getter() -> None:
    q = new_queue()
    first = asyncio.create_task(q.get())
    second = asyncio.create_task(q.get())
    await yield_to_loop()
    q.add("x")  # wakes ``first``...
    first.cancel()  # ...which is cancelled before it can take the key
    assert await asyncio.wait_for(second, HUNG) == "x"
    with pytest.raises(asyncio.CancelledError):
        await first


# --- delayed adds ---------------------------------------------------------------------------


def test_add_after_releases_keys_in_deadline_order() -> None:
    clock = FakeClock()
    q = new_queue(clock)
    q.add_after("late", 3.0)
    q.add_after("early", 1.0)
    q.add_after("middle", 2.0)
    assert len(q) == 0
    assert q.delayed_count == 3
    clock.advance(0.5)
    assert q.flush_due() == 0
    clock.advance(2.0)
    assert q.flush_due() == 2
    assert drain_nowait(q) == ["early", "middle"]
    clock.advance(1.0)
    q.flush_due()
    assert drain_nowait(q) == ["late"]
    assert q.delayed_count == 0


def test_add_after_earlier_deadline_wins() -> None:
    clock = FakeClock()
    q = new_queue(clock)
    q.add_after("k", 10.0)
    q.add_after("k", 2.0)
    clock.advance(2.0)
    assert q.flush_due() == 1
    assert drain_nowait(q) == ["k"]
    clock.advance(10.0)
    assert q.flush_due() == 0, "the superseded later deadline must not add the key again"
    assert len(q) == 0


def test_add_after_later_deadline_does_not_postpone_an_earlier_one() -> None:
    clock = FakeClock()
    q = new_queue(clock)
    q.add_after("k", 2.0)
    q.add_after("k", 10.0)
    clock.advance(2.0)
    assert q.flush_due() == 1
    assert q.delayed_count == 0


def test_add_after_with_no_delay_adds_at_once() -> None:
    q = new_queue(FakeClock())
    q.add_after("now", 0)
    q.add_after("past", -1.0)
    assert drain_nowait(q) == ["now", "past"]


async def test_add_after_is_released_by_the_event_loop_timer() -> None:
    """The real clock and the loop's timer (what the fake-clock tests replace by ``flush_due``):
    the keys come in deadline order; how long they took is not asserted."""
    q = new_queue()
    q.add_after("b", 0.04)
    q.add_after("a", 0.02)
    assert await asyncio.wait_for(q.get(), HUNG) == "a"
    assert await asyncio.wait_for(q.get(), HUNG) == "b"


async def test_earlier_add_after_rearms_the_timer() -> None:
    q = new_queue()
    q.add_after("slow", 3600.0)  # a timer left armed for it would hold "fast" past HUNG
    q.add_after("fast", 0.01)
    assert await asyncio.wait_for(q.get(), HUNG) == "fast"
    assert q.delayed_count == 1
    q.shutdown()


# --- rate limiters --------------------------------------------------------------------------


def test_backoff_doubles_from_5ms_and_caps_at_1000s() -> None:
    limiter = ItemExponentialFailureRateLimiter()
    delays = [limiter.when("k") for _ in range(25)]
    assert delays[:4] == pytest.approx([0.005, 0.010, 0.020, 0.040])
    assert delays[17] == pytest.approx(0.005 * 2**17)  # 655 s, still below the cap
    assert delays[18:] == [1000.0] * 7
    assert limiter.num_requeues("k") == 25
    assert limiter.when("other") == pytest.approx(0.005), "backoff is per key"


def test_backoff_stays_capped_after_very_many_failures() -> None:
    limiter = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    for _ in range(1100):
        delay = limiter.when("k")
    assert delay == 1000.0


def test_forget_resets_backoff() -> None:
    limiter = ItemExponentialFailureRateLimiter()
    for _ in range(5):
        limiter.when("k")
    limiter.forget("k")
    assert limiter.num_requeues("k") == 0
    assert limiter.when("k") == pytest.approx(0.005)


def test_token_bucket_allows_a_burst_then_spaces_retries_by_qps() -> None:
    clock = FakeClock()
    bucket = BucketRateLimiter(qps=10.0, burst=100, clock=clock)
    assert [bucket.when(i) for i in range(100)] == [0.0] * 100
    assert bucket.when("x") == pytest.approx(0.1)
    assert bucket.when("y") == pytest.approx(0.2)


def test_token_bucket_refills_at_qps_up_to_burst() -> None:
    clock = FakeClock(0.0)
    bucket = BucketRateLimiter(qps=4.0, burst=5, clock=clock)
    for i in range(5):
        bucket.when(i)
    clock.advance(0.75)  # three tokens back
    assert [bucket.when(i) for i in range(3)] == [0.0] * 3
    assert bucket.when("x") == pytest.approx(0.25)
    clock.advance(3600)  # refill never exceeds the burst
    assert [bucket.when(i) for i in range(5)] == [0.0] * 5
    assert bucket.when("y") > 0


def test_max_of_limiters_takes_the_longest_delay_and_forgets_in_all() -> None:
    clock = FakeClock()
    per_key = ItemExponentialFailureRateLimiter(1.0, 100.0)
    limiter = MaxOfRateLimiter(per_key, BucketRateLimiter(qps=1.0, burst=1, clock=clock))
    assert limiter.when("a") == 1.0  # backoff 1 s, bucket has a token
    assert limiter.when("b") == 1.0  # backoff 1 s, bucket 1 s
    assert limiter.when("b") == 2.0  # backoff 2 s, bucket 2 s
    assert limiter.when("c") == 3.0  # backoff 1 s, bucket 3 s
    assert limiter.num_requeues("b") == 2
    limiter.forget("b")
    assert per_key.num_requeues("b") == 0


def test_default_controller_rate_limiter_matches_client_go() -> None:
    clock = FakeClock()
    limiter = default_controller_rate_limiter(clock)
    assert limiter.when("k") == pytest.approx(0.005)
    for i in range(99):
        limiter.when(i)
    assert limiter.when("fresh") == pytest.approx(0.1), "bucket of 100 exhausted at 10 qps"


def test_add_rate_limited_waits_the_backoff_and_forget_resets_it() -> None:
    clock = FakeClock()
    q = new_queue(clock, rate_limiter=ItemExponentialFailureRateLimiter(1.0, 60.0))
    q.add_rate_limited("k")
    q.add_rate_limited("k")  # second retry: 2 s, later than the pending 1 s deadline
    assert q.num_requeues("k") == 2
    clock.advance(0.99)
    assert q.flush_due() == 0
    clock.advance(0.01)
    assert q.flush_due() == 1
    q.done(q.get_nowait())
    q.forget("k")
    assert q.num_requeues("k") == 0
    q.add_rate_limited("k")
    clock.advance(1.0)
    assert q.flush_due() == 1


# --- shutdown -------------------------------------------------------------------------------


async def test_shutdown_wakes_every_blocked_getter() -> None:
    q = new_queue()
    getters = [asyncio.create_task(q.get()) for _ in range(3)]
    await yield_to_loop()
    q.shutdown()
    results = await asyncio.wait_for(asyncio.gather(*getters, return_exceptions=True), HUNG)
    assert all(isinstance(r, ShutDown) for r in results)


async def test_waiting_keys_are_still_handed_out_after_shutdown_then_get_raises() -> None:
    q = new_queue()
    q.add("a")
    q.shutdown()
    assert await q.get() == "a"
    with pytest.raises(ShutDown):
        await q.get()
    with pytest.raises(ShutDown):
        q.get_nowait()


def test_adds_after_shutdown_are_ignored() -> None:
    clock = FakeClock()
    q = new_queue(clock)
    q.add_after("delayed", 1.0)
    q.shutdown()
    q.add("a")
    q.add_after("b", 1.0)
    q.add_rate_limited("c")
    clock.advance(5)
    q.flush_due()
    assert len(q) == 0
    assert q.delayed_count == 0
    assert q.shutting_down


def test_key_readded_before_shutdown_is_handed_out_again_after_done() -> None:
    q = new_queue()
    q.add("k")
    key = q.get_nowait()
    q.add("k")
    q.shutdown()
    q.done(key)
    assert q.get_nowait() == "k"


async def test_shutdown_with_drain_waits_for_in_flight_keys() -> None:
    q = new_queue()
    q.add("a")
    q.add("b")
    a = await q.get()
    b = await q.get()
    drain = asyncio.create_task(q.shutdown_with_drain())
    await stays(lambda: not drain.done(), for_=0.01, what="the drain waiting for two keys")
    q.done(a)
    await stays(lambda: not drain.done(), for_=0.01, what="one key is still being processed")
    q.done(b)
    await asyncio.wait_for(drain, HUNG)
    assert q.processing_count == 0


async def test_shutdown_with_drain_returns_at_once_when_idle() -> None:
    q = new_queue()
    await asyncio.wait_for(q.shutdown_with_drain(), HUNG)
    assert q.shutting_down


# --- metrics --------------------------------------------------------------------------------


def test_metrics_count_adds_retries_depth_and_durations() -> None:
    clock = FakeClock()
    q = new_queue(clock)
    q.add("a")
    q.add("a")  # duplicate: not an add
    q.add("b")
    assert sample("workqueue_adds_total", q) == 2
    assert sample("workqueue_depth", q) == 2
    clock.advance(0.5)
    key = q.get_nowait()
    assert sample("workqueue_depth", q) == 1
    assert sample("workqueue_queue_duration_seconds_count", q) == 1
    assert sample("workqueue_queue_duration_seconds_sum", q) == pytest.approx(0.5)
    clock.advance(2.0)
    q.update_unfinished_work()
    assert sample("workqueue_longest_running_processor_seconds", q) == pytest.approx(2.0)
    q.done(key)
    assert sample("workqueue_work_duration_seconds_count", q) == 1
    assert sample("workqueue_work_duration_seconds_sum", q) == pytest.approx(2.0)
    assert sample("workqueue_unfinished_work_seconds", q) == 0
    q.add_rate_limited("c")
    q.add_rate_limited("c")
    assert sample("workqueue_retries_total", q) == 2


# --- model-based: the queue against a plain-Python model ------------------------------------

KEYS = st.sampled_from(["a", "b", "c", "d"])


class WorkQueueMachine(RuleBasedStateMachine):
    """Drives a queue synchronously (fake clock, ``get_nowait``, ``flush_due``) against a model.

    The per-key backoff limiter alone is used, so every delay is a pure function of the model.
    """

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.q: WorkQueue[str] = WorkQueue(
            "hypothesis", "ctl", clock=self.clock, rate_limiter=ItemExponentialFailureRateLimiter()
        )
        self.waiting: list[str] = []
        self.readded: set[str] = set()  # processing keys added again
        self.held: set[str] = set()
        self.delayed: dict[str, tuple[float, int]] = {}
        self.failures: dict[str, int] = {}
        self.owed: set[str] = set()  # added, and not yet handed out since
        self.seq = itertools.count()
        self.shut = False

    def _model_add(self, key: str) -> None:
        if self.shut:
            return
        self.owed.add(key)
        if key in self.waiting or key in self.readded:
            return
        if key in self.held:
            self.readded.add(key)
        else:
            self.waiting.append(key)

    def _model_add_after(self, key: str, delay: float) -> None:
        if self.shut:
            return
        if delay <= 0:
            self._model_add(key)
            return
        deadline = self.clock.now + delay
        if key not in self.delayed or deadline < self.delayed[key][0]:
            self.delayed[key] = (deadline, next(self.seq))

    @rule(key=KEYS)
    def add(self, key: str) -> None:
        self.q.add(key)
        self._model_add(key)

    @rule(key=KEYS, delay=st.sampled_from([0.0, 0.005, 0.5, 1.0, 7.0]))
    def add_after(self, key: str, delay: float) -> None:
        self.q.add_after(key, delay)
        self._model_add_after(key, delay)

    @rule(key=KEYS)
    def add_rate_limited(self, key: str) -> None:
        self.q.add_rate_limited(key)
        if self.shut:
            return
        failures = self.failures.get(key, 0)
        self.failures[key] = failures + 1
        self._model_add_after(key, min(0.005 * 2.0**failures, 1000.0))

    @rule(key=KEYS)
    def forget(self, key: str) -> None:
        self.q.forget(key)
        self.failures.pop(key, None)
        assert self.q.num_requeues(key) == 0

    @rule(seconds=st.sampled_from([0.001, 0.005, 0.5, 1.0, 10.0]))
    def advance_clock(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.q.flush_due()
        due = sorted((d, s, k) for k, (d, s) in self.delayed.items() if d <= self.clock.now)
        for _, _, key in due:
            del self.delayed[key]
            self._model_add(key)

    @rule()
    def get(self) -> None:
        if not self.waiting:
            with pytest.raises(ShutDown if self.shut else asyncio.QueueEmpty):
                self.q.get_nowait()
            return
        key = self.q.get_nowait()
        assert key not in self.held, "key handed to two workers at once"
        assert key == self.waiting.pop(0), "keys must come out first-added first-out"
        self.held.add(key)
        self.owed.discard(key)

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def done(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.held)))
        self.q.done(key)
        self.held.remove(key)
        if key in self.readded:
            self.readded.remove(key)
            self.waiting.append(key)

    @rule()
    def shutdown(self) -> None:
        self.q.shutdown()
        self.shut = True
        self.delayed.clear()

    @invariant()
    def depth_counts_waiting_keys_only(self) -> None:
        assert len(self.q) == len(self.waiting)
        assert self.q.processing_count == len(self.held)
        assert self.q.delayed_count == len(self.delayed)

    @invariant()
    def every_owed_key_is_on_its_way(self) -> None:
        assert self.owed == set(self.waiting) | self.readded

    def teardown(self) -> None:
        """Finish all work: every key ever added must have been handed out again since."""
        for key in list(self.held):
            self.q.done(key)
        seen: set[str] = set()
        for _ in range(10):
            self.clock.advance(2000.0)
            self.q.flush_due()
            while True:
                try:
                    key = self.q.get_nowait()
                except (asyncio.QueueEmpty, ShutDown):
                    break
                seen.add(key)
                self.q.done(key)
        expected = self.owed | (set() if self.shut else set(self.delayed))
        assert expected <= seen, f"lost keys: {expected - seen}"
        assert len(self.q) == 0


WorkQueueMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
test_queue_never_loses_or_duplicates_keys = WorkQueueMachine.TestCase
