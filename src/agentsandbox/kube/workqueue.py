"""A rate-limited, de-duplicating asyncio work queue with client-go semantics.

Controllers are level-triggered: an event only says *which key* to look at, so adding a key
that is already waiting must not make it run twice, and a key must never be reconciled by two
workers at once. A key added while it is being processed is remembered as *dirty* and handed out
again after ``done``, so the change that arrived mid-reconcile is never lost.

Failures back off per key (exponential) and overall (token bucket), like client-go's
``DefaultControllerRateLimiter``. Delayed adds share one heap and one loop timer, so a hundred
thousand ``requeue_after`` keys cost no tasks.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

from agentsandbox.kube import metrics

__all__ = [
    "BucketRateLimiter",
    "Clock",
    "ItemExponentialFailureRateLimiter",
    "MaxOfRateLimiter",
    "RateLimiter",
    "ShutDown",
    "WorkQueue",
    "default_controller_rate_limiter",
]

K = TypeVar("K", bound=Hashable)
Clock = Callable[[], float]
"""A monotonic clock in seconds; injectable so tests never sleep."""


class ShutDown(Exception):
    """Raised by ``get`` once the queue is shut down and no key is left waiting."""


# --- rate limiters ----------------------------------------------------------------------------


class RateLimiter(Protocol):
    """Decides how long a key must wait before it is retried."""

    def when(self, key: Hashable) -> float:
        """Record one more retry of ``key`` and return the delay in seconds before it."""
        ...

    def forget(self, key: Hashable) -> None:
        """Stop tracking ``key`` (it succeeded), resetting its backoff."""
        ...

    def num_requeues(self, key: Hashable) -> int:
        """How many times ``key`` has been retried since it was last forgotten."""
        ...


class ItemExponentialFailureRateLimiter:
    """Per-key backoff ``base * 2**failures``, capped, so a broken key cannot spin hot."""

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        if base_delay <= 0 or max_delay < base_delay:
            raise ValueError("need 0 < base_delay <= max_delay")
        self._base = base_delay
        self._max = max_delay
        self._failures: dict[Hashable, int] = {}

    def when(self, key: Hashable) -> float:
        exp = self._failures.get(key, 0)
        self._failures[key] = exp + 1
        if exp >= 1024:  # 2.0**1024 overflows a float; the cap was reached long ago
            return self._max
        return min(self._base * 2.0**exp, self._max)

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)

    def num_requeues(self, key: Hashable) -> int:
        return self._failures.get(key, 0)


class BucketRateLimiter:
    """An overall token bucket (``qps`` refill, ``burst`` capacity) shared by all keys.

    Each retry reserves a token, possibly one not yet refilled; the returned delay is the time
    until that token exists. This bounds the retry rate of the whole controller when many keys
    fail at once (for example, the API server is down).
    """

    def __init__(self, qps: float = 10.0, burst: int = 100, clock: Clock = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("need qps > 0 and burst >= 1")
        self._qps = qps
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def when(self, key: Hashable) -> float:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
        self._last = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self._qps

    def forget(self, key: Hashable) -> None:
        """Tokens are shared, not per key: nothing to forget."""

    def num_requeues(self, key: Hashable) -> int:
        return 0


class MaxOfRateLimiter:
    """Combines limiters: the delay is the longest any of them asks for."""

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("need at least one rate limiter")
        self._limiters = limiters

    def when(self, key: Hashable) -> float:
        return max(limiter.when(key) for limiter in self._limiters)

    def forget(self, key: Hashable) -> None:
        for limiter in self._limiters:
            limiter.forget(key)

    def num_requeues(self, key: Hashable) -> int:
        return max(limiter.num_requeues(key) for limiter in self._limiters)


def default_controller_rate_limiter(clock: Clock = time.monotonic) -> MaxOfRateLimiter:
    """client-go's default: 5 ms doubling per key up to 1000 s, and 10 qps / burst 100 overall."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(0.005, 1000.0),
        BucketRateLimiter(qps=10.0, burst=100, clock=clock),
    )


# --- the queue --------------------------------------------------------------------------------


class WorkQueue(Generic[K]):
    """De-duplicating FIFO of keys with per-key exclusivity, delayed and rate-limited adds.

    A key is in at most one of three places: *waiting* (in the FIFO, counted by ``len``),
    *processing* (handed out by ``get``, not yet ``done``), or neither. ``dirty`` holds keys that
    need (another) run: every waiting key, plus processing keys re-added meanwhile.

    Single event loop only; all methods except ``get``/``shutdown_with_drain`` are synchronous so
    event handlers can call them without awaiting. Without a running loop (plain synchronous
    tests) delayed keys are only released by ``flush_due``.
    """

    def __init__(
        self,
        name: str,
        controller: str = "",
        *,
        rate_limiter: RateLimiter | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.name = name
        self._clock = clock
        self._rate_limiter = rate_limiter or default_controller_rate_limiter(clock)
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: dict[K, float] = {}  # key -> time handed out
        self._added_at: dict[K, float] = {}  # key -> time it became dirty
        self._getters: deque[asyncio.Future[None]] = deque()
        self._drained: list[asyncio.Future[None]] = []
        self._shutting_down = False
        # delayed adds: heap of (deadline, seq, key); _deadlines holds each key's live deadline,
        # heap entries that disagree with it are stale and skipped.
        self._heap: list[tuple[float, int, K]] = []
        self._deadlines: dict[K, float] = {}
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline = 0.0
        labels = {"name": name, "controller": controller}
        self._m_depth = metrics.WORKQUEUE_DEPTH.labels(**labels)
        self._m_adds = metrics.WORKQUEUE_ADDS.labels(**labels)
        self._m_retries = metrics.WORKQUEUE_RETRIES.labels(**labels)
        self._m_queue_duration = metrics.WORKQUEUE_QUEUE_DURATION.labels(**labels)
        self._m_work_duration = metrics.WORKQUEUE_WORK_DURATION.labels(**labels)
        self._m_unfinished = metrics.WORKQUEUE_UNFINISHED_WORK.labels(**labels)
        self._m_longest = metrics.WORKQUEUE_LONGEST_RUNNING.labels(**labels)

    # --- introspection

    def __len__(self) -> int:
        """Keys waiting to be handed out; keys being processed are not counted."""
        return len(self._queue)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    @property
    def processing_count(self) -> int:
        """Keys handed out by ``get`` and not yet ``done``."""
        return len(self._processing)

    @property
    def delayed_count(self) -> int:
        """Keys waiting for an ``add_after`` deadline."""
        return len(self._deadlines)

    # --- adding

    def add(self, key: K) -> None:
        """Mark ``key`` as needing work. Idempotent while it waits; ignored after shutdown."""
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        self._added_at[key] = self._clock()
        self._m_adds.inc()
        if key in self._processing:
            return  # handed out again by ``done``
        self._queue.append(key)
        self._m_depth.set(len(self._queue))
        self._wake_one_getter()

    def add_after(self, key: K, delay: float) -> None:
        """Add ``key`` after ``delay`` seconds; if it is already delayed, the earlier time wins."""
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        deadline = self._clock() + delay
        current = self._deadlines.get(key)
        if current is not None and current <= deadline:
            return
        self._deadlines[key] = deadline
        heapq.heappush(self._heap, (deadline, next(self._seq), key))
        self._schedule_timer()

    def add_rate_limited(self, key: K) -> None:
        """Retry ``key`` after the rate limiter's delay (per-key backoff, overall bucket)."""
        if self._shutting_down:
            return
        self._m_retries.inc()
        self.add_after(key, self._rate_limiter.when(key))

    def forget(self, key: K) -> None:
        """Reset ``key``'s backoff; call after it was processed successfully."""
        self._rate_limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        return self._rate_limiter.num_requeues(key)

    def flush_due(self) -> int:
        """Move delayed keys whose deadline has passed into the queue; returns how many.

        The loop timer calls this; tests driving a fake clock may call it directly.
        """
        now = self._clock()
        released = 0
        while self._heap and self._heap[0][0] <= now:
            deadline, _, key = heapq.heappop(self._heap)
            if self._deadlines.get(key) != deadline:
                continue  # superseded by an earlier deadline, already released
            del self._deadlines[key]
            self.add(key)
            released += 1
        self._schedule_timer()
        return released

    # --- taking

    def get_nowait(self) -> K:
        """Hand out the oldest waiting key; ``asyncio.QueueEmpty`` if none, ``ShutDown`` if done."""
        if not self._queue:
            if self._shutting_down:
                raise ShutDown(self.name)
            raise asyncio.QueueEmpty
        key = self._queue.popleft()
        now = self._clock()
        self._processing[key] = now
        self._dirty.discard(key)
        added = self._added_at.pop(key, None)
        if added is not None:
            self._m_queue_duration.observe(max(0.0, now - added))
        self._m_depth.set(len(self._queue))
        self.update_unfinished_work()
        return key

    async def get(self) -> K:
        """Wait for a key; raises ``ShutDown`` once shut down and nothing is left waiting."""
        loop = asyncio.get_running_loop()
        while not self._queue:
            if self._shutting_down:
                raise ShutDown(self.name)
            waiter: asyncio.Future[None] = loop.create_future()
            self._getters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one_getter()  # we were woken but will not take the key: pass it on
                raise
            finally:
                if waiter in self._getters:
                    self._getters.remove(waiter)
        return self.get_nowait()

    def done(self, key: K) -> None:
        """Finish processing ``key``; if it was re-added meanwhile it waits again."""
        started = self._processing.pop(key, None)
        if started is None:
            return
        self._m_work_duration.observe(max(0.0, self._clock() - started))
        self.update_unfinished_work()
        if key in self._dirty:
            self._queue.append(key)
            self._m_depth.set(len(self._queue))
            self._wake_one_getter()
        elif not self._processing:
            self._resolve_drained()

    # --- stopping

    def shutdown(self) -> None:
        """Stop accepting adds, drop delayed keys and wake every waiting ``get``.

        Keys already waiting are still handed out; ``get`` raises ``ShutDown`` once none is left.
        """
        self._shutting_down = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._heap.clear()
        self._deadlines.clear()
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
        if not self._processing:
            self._resolve_drained()

    async def shutdown_with_drain(self) -> None:
        """Shut down, then wait until every key being processed is ``done``."""
        self.shutdown()
        while self._processing:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._drained.append(waiter)
            await waiter

    # --- metrics

    def update_unfinished_work(self) -> None:
        """Refresh the in-progress gauges (unfinished seconds, longest running processor)."""
        now = self._clock()
        ages = [now - started for started in self._processing.values()]
        self._m_unfinished.set(sum(ages))
        self._m_longest.set(max(ages, default=0.0))

    # --- internals

    def _wake_one_getter(self) -> None:
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _resolve_drained(self) -> None:
        drained, self._drained = self._drained, []
        for waiter in drained:
            if not waiter.done():
                waiter.set_result(None)

    def _schedule_timer(self) -> None:
        """Keep one loop timer armed for the earliest live deadline."""
        if not self._heap or self._shutting_down:
            return
        deadline = self._heap[0][0]
        if self._timer is not None:
            if self._timer_deadline <= deadline:
                return
            self._timer.cancel()
            self._timer = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop: flush_due is driven by hand
        self._timer_deadline = deadline
        self._timer = loop.call_later(max(0.0, deadline - self._clock()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.flush_due()
