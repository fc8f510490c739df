"""Controllers: event sources -> predicates -> mapped requests -> one work queue -> N workers.

The split follows controller-runtime, one small job per piece:

- a *source* is an informer (anything with ``add_handler``/``remove_handler``/``wait_synced``);
- *predicates* drop events that cannot matter (``GenerationChanged``, ``LabelSelectorPredicate``);
- a *mapper* turns an object into the :class:`Request` keys to reconcile — the object itself
  (:func:`enqueue_for_object`), its controlling owner (:func:`enqueue_for_owner`), or anything a
  map function says;
- the work queue de-duplicates keys and never hands one key to two workers at once;
- the reconciler reads the current state from the caches and converges; it returns a
  :class:`Result` or raises.

On update events the mapper runs on *both* the old and the new object, so when a child moves from
one owner to another (an adoption), both owners are reconciled.

Reconcile errors never stop a worker: the key is retried with per-key exponential backoff. An
error may bound that wait with a ``retry_within`` attribute (seconds, see :data:`RETRY_WITHIN`):
the retry then comes no later than that, however long the backoff has grown, so a deadline the
reconciler knows about (an object due to expire) is not postponed by errors.
A *terminal* error (see :func:`~agentsandbox.kube.reconcile.is_terminal`: the error says so, or
the object's namespace is being deleted) is not retried at all: the key waits for its next
event. Retries of a namespace being deleted would otherwise take their tokens from the queue's
overall rate limit, which every other key of the controller shares.
Expected API errors (NotFound, Conflict, ...) are logged as one line; anything else is a bug and
is logged with its traceback, once per key until the key succeeds (repeats are one line).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from . import metrics
from .errors import (
    AlreadyExists,
    ApiConnectionError,
    ApiError,
    Conflict,
    Gone,
    KubeError,
    NotFound,
    TooManyRequests,
)
from .handler import Mapper, enqueue_for_object
from .predicate import Predicate
from .reconcile import ReconcileFunc, Reconciler, Request, Result, is_terminal, retry_within
from .store import KubeObject
from .workqueue import Clock, RateLimiter, ShutDown, WorkQueue

__all__ = [
    "EXPECTED_ERRORS",
    "Controller",
    "EventSource",
]

log = logging.getLogger(__name__)

#: Errors a reconciler meets in normal operation (stale cache, lost race, server busy); logged as
#: one line, retried with backoff, not counted as panics.
#: Any error the API server answered with carries its own explanation (a quota, an admission
#: rule, a validation message), so every :class:`ApiError` is logged as one line too.
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (
    NotFound,
    Conflict,
    AlreadyExists,
    Gone,
    TooManyRequests,
    ApiConnectionError,
    ApiError,
)


class EventSource(Protocol):
    """What a controller watches: an :class:`~agentsandbox.kube.informer.Informer` or a fake."""

    def add_handler(
        self,
        on_add: Callable[[KubeObject], None] | None = None,
        on_update: Callable[[KubeObject, KubeObject], None] | None = None,
        on_delete: Callable[[KubeObject], None] | None = None,
    ) -> Any: ...

    def remove_handler(self, registration: Any) -> None: ...

    async def wait_synced(self) -> None: ...


@dataclass(slots=True)
class _Watch:
    source: EventSource
    mapper: Mapper
    predicates: tuple[Predicate, ...]
    registration: Any = None


@dataclass(slots=True)
class _Failure:
    """The last failure of a key, so a repeating error is logged with a traceback only once."""

    signature: tuple[type[BaseException], str]
    repeats: int = 0


class Controller:
    """Runs ``reconciler`` for the requests its watches produce, on ``workers`` workers.

    ``reconciler`` is an ``async def reconcile(request) -> Result | None`` function or an object
    with such a ``reconcile`` method. ``None`` means ``Result()``. ``clock`` (monotonic seconds)
    times ``min_interval`` and the work queue's delays and retries; tests pass a fake one.
    """

    def __init__(
        self,
        name: str,
        reconciler: Reconciler | ReconcileFunc,
        *,
        workers: int = 1,
        rate_limiter: RateLimiter | None = None,
        logger: logging.Logger | None = None,
        expected_errors: tuple[type[BaseException], ...] = EXPECTED_ERRORS,
        min_interval: float = 0.0,
        clock: Clock = time.monotonic,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        if min_interval < 0:
            raise ValueError("min_interval must be >= 0")
        self.name = name
        # events for a request whose last pass started less than min_interval ago wait for the
        # rest of the interval (one pass then sees them all): for reconciles whose cost grows
        # with the object's size, like a pool's pass over its members
        self.min_interval = min_interval
        self._last_start: dict[Request, float] = {}
        self._clock = clock
        self._reconcile: ReconcileFunc = (
            reconciler.reconcile if isinstance(reconciler, Reconciler) else reconciler
        )
        self.workers = workers
        self._rate_limiter = rate_limiter
        self._log = logger or log
        self._expected = expected_errors
        self._queue: WorkQueue[Request] = self._new_queue()
        self._watches: list[_Watch] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._failures: dict[Request, _Failure] = {}
        self._started = False
        # set while the controller stops: a reconcile may end long-running work between steps
        # (e.g. between two slow-start batches) instead of being cancelled in the middle
        self.stopping = asyncio.Event()
        self._m_total = {
            result: metrics.RECONCILE_TOTAL.labels(name, result)
            for result in ("success", "error", "requeue", "requeue_after")
        }
        self._m_errors = metrics.RECONCILE_ERRORS.labels(name)
        self._m_panics = metrics.RECONCILE_PANICS.labels(name)
        self._m_time = metrics.RECONCILE_TIME.labels(name)
        self._m_active = metrics.ACTIVE_WORKERS.labels(name)
        metrics.MAX_CONCURRENT_RECONCILES.labels(name).set(workers)
        self._m_terminal = metrics.RECONCILE_TERMINAL_ERRORS.labels(name)
        self._m_terminal.inc(0)
        # No reconcile timeout here: exported at 0, as controller-runtime does.
        metrics.RECONCILE_TIMEOUTS.labels(name).inc(0)
        self._m_active.set(0)

    def __repr__(self) -> str:
        return f"Controller({self.name!r}, workers={self.workers})"

    def _new_queue(self) -> WorkQueue[Request]:
        return WorkQueue(self.name, self.name, rate_limiter=self._rate_limiter, clock=self._clock)

    @property
    def queue(self) -> WorkQueue[Request]:
        return self._queue

    @property
    def started(self) -> bool:
        return self._started

    needs_leader_election = True
    """Runs only on the elected replica (when the manager does leader election)."""

    # --- wiring

    def watch(
        self,
        source: EventSource,
        mapper: Mapper = enqueue_for_object,
        *predicates: Predicate,
    ) -> None:
        """Enqueue ``mapper``'s requests for the events of ``source`` that pass ``predicates``.

        Handlers are attached when the controller starts, so a controller that starts late (on
        gaining leadership) still gets every cached object as an add.
        """
        watch = _Watch(source, mapper, tuple(predicates))
        self._watches.append(watch)
        if self._started:
            self._attach(watch)

    def _attach(self, watch: _Watch) -> None:
        mapper, predicates, enqueue = watch.mapper, watch.predicates, self._enqueue_mapped

        def on_add(obj: KubeObject) -> None:
            if all(p.create(obj) for p in predicates):
                enqueue(mapper, obj)

        def on_update(old: KubeObject, new: KubeObject) -> None:
            if all(p.update(old, new) for p in predicates):
                enqueue(mapper, old)
                enqueue(mapper, new)

        def on_delete(obj: KubeObject) -> None:
            if all(p.delete(obj) for p in predicates):
                enqueue(mapper, obj)

        watch.registration = watch.source.add_handler(on_add, on_update, on_delete)

    def _enqueue_mapped(self, mapper: Mapper, obj: KubeObject) -> None:
        for request in mapper(obj):
            self.enqueue(request)

    def enqueue(self, request: Request) -> None:
        """Ask for ``request`` to be reconciled (from outside the watches too)."""
        if self.min_interval:
            started = self._last_start.get(request)
            if started is not None:
                wait = started + self.min_interval - self._clock()
                if wait > 0:
                    self._queue.add_after(request, wait)
                    return
        self._queue.add(request)

    def _note_start(self, request: Request, now: float) -> None:
        last = self._last_start
        last[request] = now
        if len(last) > 4096:  # forget requests whose interval is long over
            for key in [k for k, t in last.items() if now - t > self.min_interval]:
                del last[key]

    # --- lifecycle

    async def start(self) -> None:
        """Attach handlers, wait for the watched caches, then start the workers."""
        if self._started:
            return
        if self._queue.shutting_down:
            self._queue = self._new_queue()
        self._started = True
        self.stopping.clear()
        for watch in self._watches:
            self._attach(watch)
        await asyncio.gather(*(w.source.wait_synced() for w in self._watches))
        self._tasks = [
            asyncio.create_task(self._worker(), name=f"{self.name} worker {i}")
            for i in range(self.workers)
        ]
        self._log.info("controller %s started with %d workers", self.name, self.workers)

    async def stop(self, drain_timeout: float | None = 30.0) -> None:
        """Stop taking new work (keys still queued are dropped); let reconciles in flight finish
        for up to ``drain_timeout`` seconds (0: cancel them at once), then cancel the workers."""
        if not self._started:
            return
        self._started = False
        self.stopping.set()
        for watch in self._watches:
            if watch.registration is not None:
                watch.source.remove_handler(watch.registration)
                watch.registration = None
        self._queue.shutdown()
        tasks, self._tasks = self._tasks, []
        try:
            if tasks and (drain_timeout is None or drain_timeout > 0):
                _, pending = await asyncio.wait(tasks, timeout=drain_timeout)
                if pending:
                    self._log.warning(
                        "controller %s: %d reconciles still running after %.1fs; cancelling",
                        self.name,
                        len(pending),
                        drain_timeout,
                    )
        finally:  # also when the drain itself is cancelled (a second SIGTERM)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self._log.info("controller %s stopped", self.name)

    async def run(self) -> None:
        """Start, then wait until cancelled (stopping cleanly)."""
        await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.shield(self.stop())

    # --- workers

    async def _worker(self) -> None:
        queue = self._queue
        while True:
            try:
                request = await queue.get()
            except ShutDown:
                return
            if self.stopping.is_set():
                # Stopping: the backlog is dropped (the next leader lists everything again); only
                # the reconciles already in flight may finish, as controller-runtime's drain.
                queue.done(request)
                return
            try:
                await self.process(request)
            finally:
                queue.done(request)

    async def process(self, request: Request) -> None:
        """Reconcile one request and handle its outcome (retry, delay, forget).

        Public so tests can drive a controller without workers; never raises except on
        cancellation.
        """
        queue = self._queue
        self._m_active.inc()
        if self.min_interval:
            self._note_start(request, self._clock())
        started = time.perf_counter()
        try:
            result = await self._reconcile(request)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self._m_errors.inc()
            self._m_total["error"].inc()
            if is_terminal(err):
                # no retry can mend it: the next event for the object brings it back; the
                # rate limiters (per key and overall) are left untouched
                queue.forget(request)
                self._m_terminal.inc()
                self._log_terminal(request, err)
                return
            queue.add_rate_limited(request)
            bound = retry_within(err)
            if bound is not None:
                queue.add_after(request, bound)  # the earlier of the two deadlines wins
            self._log_failure(request, err)
            return
        finally:
            elapsed = time.perf_counter() - started
            self._m_time.observe(elapsed)
            self._m_active.dec()
            # one line per pass (bench/p7_scale.py parses it)
            if self._log.isEnabledFor(logging.DEBUG):
                self._log.debug(
                    "reconciled",
                    extra={
                        "controller": self.name,
                        "request": str(request),
                        "duration_ms": round(elapsed * 1000, 3),
                    },
                )
        if self._failures.pop(request, None) is not None:
            self._log.info("controller %s: %s reconciled after errors", self.name, request)
        if result is None:
            result = Result()
        if result.requeue_after is not None and result.requeue_after > 0:
            queue.forget(request)
            queue.add_after(request, result.requeue_after)
            self._m_total["requeue_after"].inc()
        elif result.requeue:
            queue.add_rate_limited(request)
            self._m_total["requeue"].inc()
        else:
            queue.forget(request)
            self._m_total["success"].inc()

    def _log_terminal(self, request: Request, err: Exception) -> None:
        self._failures.pop(request, None)
        self._log.warning(
            "controller %s: reconcile %s failed, not retried until the object changes: %s",
            self.name,
            request,
            _describe(err),
        )

    def _log_failure(self, request: Request, err: Exception) -> None:
        retries = self._queue.num_requeues(request)
        if isinstance(err, self._expected):
            self._failures.pop(request, None)
            self._log.warning(
                "controller %s: reconcile %s failed (retry %d): %s",
                self.name,
                request,
                retries,
                _describe(err),
            )
            return
        self._m_panics.inc()
        signature = (type(err), str(err))
        failure = self._failures.get(request)
        if failure is not None and failure.signature == signature:
            failure.repeats += 1
            self._log.error(
                "controller %s: reconcile %s failed again (retry %d, same error %d times, "
                "traceback logged once): %s",
                self.name,
                request,
                retries,
                failure.repeats + 1,
                _describe(err),
            )
            return
        self._failures[request] = _Failure(signature)
        self._log.error(
            "controller %s: reconcile %s failed with an unexpected error (retry %d): %s",
            self.name,
            request,
            retries,
            _describe(err),
            exc_info=err,
        )


def _describe(err: BaseException) -> str:
    """One line: API errors already name their status and reason; others get their type."""
    if isinstance(err, KubeError):
        return str(err)
    return f"{type(err).__name__}: {err}"
