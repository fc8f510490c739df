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
Expected API errors (NotFound, Conflict, ...) are logged as one line; anything else is a bug and
is logged with its traceback, once per key until the key succeeds (repeats are one line).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, Self, runtime_checkable

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
from .informer import Informer, InformerFactory
from .resources import Resource
from .store import KubeObject
from .workqueue import RateLimiter, ShutDown, WorkQueue

__all__ = [
    "EXPECTED_ERRORS",
    "RETRY_WITHIN",
    "AnnotationChangedPredicate",
    "Controller",
    "ControllerBuilder",
    "ControllerHost",
    "EventSource",
    "GenerationChangedPredicate",
    "LabelChangedPredicate",
    "LabelSelector",
    "LabelSelectorPredicate",
    "Mapper",
    "Predicate",
    "PredicateFuncs",
    "ReconcileFunc",
    "Reconciler",
    "Request",
    "ResourceVersionChangedPredicate",
    "Result",
    "all_of",
    "any_of",
    "api_group",
    "enqueue_for_object",
    "enqueue_for_owner",
    "negate",
    "new_predicate",
    "owner_requests",
    "retry_within",
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


#: The attribute of a reconcile error that bounds its retry delay: a number of seconds (or None).
#: The key is retried after ``min(backoff, retry_within)``; the backoff still grows.
RETRY_WITHIN = "retry_within"


def retry_within(err: BaseException) -> float | None:
    """The longest ``err`` lets its request wait for a retry (None: the backoff decides)."""
    value = getattr(err, RETRY_WITHIN, None)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return max(float(value), 0.0)


# --- requests and results ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class Request:
    """The key of one object to reconcile; ``namespace`` is ``""`` for cluster-scoped objects."""

    namespace: str
    name: str

    @classmethod
    def from_object(cls, obj: KubeObject) -> Request:
        meta = obj.get("metadata") or {}
        return cls(meta.get("namespace") or "", meta.get("name") or "")

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass(frozen=True, slots=True)
class Result:
    """What a reconcile asks for next.

    ``requeue_after`` (seconds): reconcile again after a plain delay, backoff reset. ``requeue``
    alone: reconcile again with the key's rate-limited backoff. Neither: done until an event.
    """

    requeue: bool = False
    requeue_after: float | None = None


ReconcileFunc = Callable[[Request], Awaitable[Result | None]]


@runtime_checkable
class Reconciler(Protocol):
    async def reconcile(self, request: Request) -> Result | None: ...


# --- mappers ------------------------------------------------------------------------------------

Mapper = Callable[[KubeObject], Iterable[Request]]
"""Maps an object (from an event) to the requests to enqueue."""


def api_group(api_version: str) -> str:
    """The group part of an ``apiVersion`` (``""`` for the core group's ``v1``)."""
    group, _, _ = api_version.rpartition("/")
    return group


def enqueue_for_object(obj: KubeObject) -> list[Request]:
    """The object's own key (the ``For`` mapping)."""
    return [Request.from_object(obj)]


def owner_requests(
    obj: KubeObject,
    owner_group: str,
    owner_kind: str,
    *,
    controller_only: bool = True,
    owner_namespaced: bool = True,
) -> list[Request]:
    """Requests for ``obj``'s owners of the given group and kind (version is ignored, as owner
    references survive version changes). ``controller_only``: only the reference marked
    ``controller: true``. A cluster-scoped owner gets an empty namespace."""
    meta = obj.get("metadata") or {}
    namespace = (meta.get("namespace") or "") if owner_namespaced else ""
    requests: list[Request] = []
    for ref in meta.get("ownerReferences") or ():
        if controller_only and not ref.get("controller"):
            continue
        if ref.get("kind") != owner_kind or api_group(ref.get("apiVersion") or "") != owner_group:
            continue
        name = ref.get("name")
        if name:
            requests.append(Request(namespace, name))
    return requests


def enqueue_for_owner(
    owner: Resource, *, controller_only: bool = True
) -> Callable[[KubeObject], list[Request]]:
    """The ``Owns`` mapping: the owner of kind ``owner`` that controls the object."""

    def mapper(obj: KubeObject) -> list[Request]:
        return owner_requests(
            obj,
            owner.group,
            owner.kind,
            controller_only=controller_only,
            owner_namespaced=owner.namespaced,
        )

    mapper.__name__ = f"enqueue_for_owner[{owner.kind}]"
    return mapper


# --- label selectors ----------------------------------------------------------------------------

_REQUIREMENT = re.compile(
    r"""^\s*(?:
        (?P<not>!)\s*(?P<absent>[^\s!=,()]+)
      | (?P<key>[^\s!=,()]+)\s*(?:
            (?P<op>==|=|!=)\s*(?P<value>[^\s!=,()]*)
          | \s(?P<setop>in|notin)\s*\((?P<values>[^()]*)\)
        )?
    )\s*$""",
    re.VERBOSE,
)


@dataclass(frozen=True, slots=True)
class _Requirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator == "In":
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values  # NotIn


def _split_terms(text: str) -> list[str]:
    terms: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return [t for t in (term.strip() for term in terms) if t]


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A label selector: the string form (``a=b,c!=d,e in (x,y),!f``) or ``metav1.LabelSelector``.

    The empty selector matches everything, as in Kubernetes.
    """

    requirements: tuple[_Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        requirements: list[_Requirement] = []
        for term in _split_terms(text):
            match = _REQUIREMENT.match(term)
            if match is None:
                raise ValueError(f"invalid label selector term {term!r}")
            if match["absent"]:
                requirements.append(_Requirement(match["absent"], "DoesNotExist"))
            elif match["op"]:
                operator = "NotIn" if match["op"] == "!=" else "In"
                requirements.append(
                    _Requirement(match["key"], operator, frozenset({match["value"]}))
                )
            elif match["setop"]:
                values = frozenset(v.strip() for v in match["values"].split(",") if v.strip())
                operator = "In" if match["setop"] == "in" else "NotIn"
                requirements.append(_Requirement(match["key"], operator, values))
            else:
                requirements.append(_Requirement(match["key"], "Exists"))
        return cls(tuple(requirements))

    @classmethod
    def from_dict(cls, selector: Mapping[str, Any]) -> LabelSelector:
        """From a ``metav1.LabelSelector`` (``matchLabels`` and ``matchExpressions``)."""
        requirements = [
            _Requirement(str(k), "In", frozenset({str(v)}))
            for k, v in (selector.get("matchLabels") or {}).items()
        ]
        for expr in selector.get("matchExpressions") or ():
            operator = expr.get("operator")
            if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
                raise ValueError(f"invalid label selector operator {operator!r}")
            values = frozenset(str(v) for v in expr.get("values") or ())
            if operator in ("In", "NotIn") and not values:
                raise ValueError(f"operator {operator} needs values")
            requirements.append(_Requirement(str(expr["key"]), operator, values))
        return cls(tuple(requirements))

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(req.matches(labels) for req in self.requirements)

    def matches_object(self, obj: KubeObject) -> bool:
        return self.matches((obj.get("metadata") or {}).get("labels"))


# --- predicates ---------------------------------------------------------------------------------


class Predicate(Protocol):
    """Filters events before they are mapped to requests; False drops the event."""

    def create(self, obj: KubeObject) -> bool: ...

    def update(self, old: KubeObject, new: KubeObject) -> bool: ...

    def delete(self, obj: KubeObject) -> bool: ...


@dataclass(frozen=True, slots=True)
class PredicateFuncs:
    """A predicate from optional functions; a missing one lets every event of its kind pass."""

    on_create: Callable[[KubeObject], bool] | None = None
    on_update: Callable[[KubeObject, KubeObject], bool] | None = None
    on_delete: Callable[[KubeObject], bool] | None = None

    def create(self, obj: KubeObject) -> bool:
        return self.on_create is None or self.on_create(obj)

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        return self.on_update is None or self.on_update(old, new)

    def delete(self, obj: KubeObject) -> bool:
        return self.on_delete is None or self.on_delete(obj)


def new_predicate(accept: Callable[[KubeObject], bool]) -> PredicateFuncs:
    """A predicate applying ``accept`` to the object (the *new* object on updates)."""
    return PredicateFuncs(accept, lambda _old, new: accept(new), accept)


def _meta(obj: KubeObject) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return meta


class GenerationChangedPredicate:
    """Passes updates only when ``metadata.generation`` changed (a spec change), skipping
    status and metadata-only writes. Creates and deletes pass."""

    def create(self, obj: KubeObject) -> bool:
        return True

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        return _meta(old).get("generation") != _meta(new).get("generation")

    def delete(self, obj: KubeObject) -> bool:
        return True


class ResourceVersionChangedPredicate:
    """Passes updates only when the resourceVersion changed (drops resync re-deliveries)."""

    def create(self, obj: KubeObject) -> bool:
        return True

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        return _meta(old).get("resourceVersion") != _meta(new).get("resourceVersion")

    def delete(self, obj: KubeObject) -> bool:
        return True


class LabelChangedPredicate:
    """Passes updates only when the labels changed."""

    def create(self, obj: KubeObject) -> bool:
        return True

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        return (_meta(old).get("labels") or {}) != (_meta(new).get("labels") or {})

    def delete(self, obj: KubeObject) -> bool:
        return True


class AnnotationChangedPredicate:
    """Passes updates only when the annotations changed."""

    def create(self, obj: KubeObject) -> bool:
        return True

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        return (_meta(old).get("annotations") or {}) != (_meta(new).get("annotations") or {})

    def delete(self, obj: KubeObject) -> bool:
        return True


class LabelSelectorPredicate:
    """Passes events whose object (the new one on updates) matches ``selector``.

    ``selector`` is a string (``app=web``), a ``metav1.LabelSelector`` dict, or a
    :class:`LabelSelector`.
    """

    def __init__(self, selector: str | Mapping[str, Any] | LabelSelector) -> None:
        if isinstance(selector, LabelSelector):
            self.selector = selector
        elif isinstance(selector, str):
            self.selector = LabelSelector.parse(selector)
        else:
            self.selector = LabelSelector.from_dict(selector)

    def create(self, obj: KubeObject) -> bool:
        return self.selector.matches_object(obj)

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        return self.selector.matches_object(new)

    def delete(self, obj: KubeObject) -> bool:
        return self.selector.matches_object(obj)


def all_of(*predicates: Predicate) -> PredicateFuncs:
    """Passes when every predicate passes."""
    return PredicateFuncs(
        lambda o: all(p.create(o) for p in predicates),
        lambda old, new: all(p.update(old, new) for p in predicates),
        lambda o: all(p.delete(o) for p in predicates),
    )


def any_of(*predicates: Predicate) -> PredicateFuncs:
    """Passes when at least one predicate passes."""
    return PredicateFuncs(
        lambda o: any(p.create(o) for p in predicates),
        lambda old, new: any(p.update(old, new) for p in predicates),
        lambda o: any(p.delete(o) for p in predicates),
    )


def negate(predicate: Predicate) -> PredicateFuncs:
    return PredicateFuncs(
        lambda o: not predicate.create(o),
        lambda old, new: not predicate.update(old, new),
        lambda o: not predicate.delete(o),
    )


# --- the controller -----------------------------------------------------------------------------


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
    with such a ``reconcile`` method. ``None`` means ``Result()``.
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
        # No terminal errors and no reconcile timeout here: exported at 0, as controller-runtime.
        metrics.RECONCILE_TERMINAL_ERRORS.labels(name).inc(0)
        metrics.RECONCILE_TIMEOUTS.labels(name).inc(0)
        self._m_active.set(0)

    def __repr__(self) -> str:
        return f"Controller({self.name!r}, workers={self.workers})"

    def _new_queue(self) -> WorkQueue[Request]:
        return WorkQueue(self.name, self.name, rate_limiter=self._rate_limiter)

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
                wait = started + self.min_interval - time.monotonic()
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
        """Stop taking new work; let reconciles in flight finish for up to ``drain_timeout``
        seconds (0: cancel them at once), then cancel the workers."""
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
            self._note_start(request, time.monotonic())
        started = time.perf_counter()
        try:
            result = await self._reconcile(request)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self._m_errors.inc()
            self._m_total["error"].inc()
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
            if self._log.isEnabledFor(logging.DEBUG):  # one line per pass (bench P7 parses it)
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


# --- the builder --------------------------------------------------------------------------------


class ControllerHost(Protocol):
    """What the builder needs from a manager: shared informers and a place to run controllers."""

    def get_informer(
        self,
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Informer: ...

    def add(self, runnable: Controller) -> None: ...


@dataclass(slots=True)
class _SourceSpec:
    resource: Resource
    mapper: Mapper | None  # None: decided at build time (owner of the For type)
    predicates: tuple[Predicate, ...]
    namespace: str | None
    label_selector: str | None
    field_selector: str | None


@dataclass(slots=True)
class _BuilderState:
    name: str | None = None
    for_: _SourceSpec | None = None
    sources: list[_SourceSpec] = field(default_factory=list)
    global_predicates: list[Predicate] = field(default_factory=list)
    workers: int = 1
    rate_limiter: RateLimiter | None = None
    min_interval: float = 0.0


class ControllerBuilder:
    """controller-runtime's builder::

        ControllerBuilder(mgr).for_(WIDGETS).owns(CONFIGMAPS).workers(4).complete(reconciler)

    ``for_`` enqueues the object itself; ``owns`` the controlling owner of the ``for_`` kind;
    ``watches`` whatever its map function returns. ``with_predicates`` filters every source.
    The name defaults to the lower-cased kind of the ``for_`` resource.
    ``host`` is a :class:`~agentsandbox.kube.manager.Manager` (or anything with
    ``get_informer`` and ``add``); an :class:`InformerFactory` works for informers only via
    :meth:`build`.
    """

    def __init__(self, host: ControllerHost | InformerFactory) -> None:
        self._host = host
        self._state = _BuilderState()

    def named(self, name: str) -> Self:
        self._state.name = name
        return self

    def for_(
        self,
        resource: Resource,
        *,
        predicates: Sequence[Predicate] = (),
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Self:
        if self._state.for_ is not None:
            raise ValueError("for_ can be called only once")
        self._state.for_ = _SourceSpec(
            resource,
            enqueue_for_object,
            tuple(predicates),
            namespace,
            label_selector,
            field_selector,
        )
        return self

    def owns(
        self,
        resource: Resource,
        *,
        predicates: Sequence[Predicate] = (),
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Self:
        self._state.sources.append(
            _SourceSpec(
                resource, None, tuple(predicates), namespace, label_selector, field_selector
            )
        )
        return self

    def watches(
        self,
        resource: Resource,
        map_fn: Mapper,
        *,
        predicates: Sequence[Predicate] = (),
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Self:
        self._state.sources.append(
            _SourceSpec(
                resource, map_fn, tuple(predicates), namespace, label_selector, field_selector
            )
        )
        return self

    def with_predicates(self, *predicates: Predicate) -> Self:
        self._state.global_predicates.extend(predicates)
        return self

    def workers(self, count: int) -> Self:
        self._state.workers = count
        return self

    def with_min_interval(self, seconds: float) -> Self:
        """Coalesce the events of one request that arrive within ``seconds`` of its last pass's
        start into one later pass (see :class:`Controller`)."""
        self._state.min_interval = seconds
        return self

    def with_rate_limiter(self, rate_limiter: RateLimiter) -> Self:
        self._state.rate_limiter = rate_limiter
        return self

    def build(self, reconciler: Reconciler | ReconcileFunc) -> Controller:
        """Make the controller and wire its watches, without registering it anywhere."""
        state = self._state
        if state.for_ is None:
            raise ValueError("a controller needs for_(resource)")
        owner = state.for_.resource
        controller = Controller(
            state.name or owner.kind.lower(),
            reconciler,
            workers=state.workers,
            rate_limiter=state.rate_limiter,
            min_interval=state.min_interval,
        )
        for spec in (state.for_, *state.sources):
            informer = self._host.get_informer(
                spec.resource, spec.namespace, spec.label_selector, spec.field_selector
            )
            mapper = spec.mapper if spec.mapper is not None else enqueue_for_owner(owner)
            controller.watch(informer, mapper, *state.global_predicates, *spec.predicates)
        return controller

    def complete(self, reconciler: Reconciler | ReconcileFunc) -> Controller:
        """Build the controller and add it to the manager, which starts it."""
        controller = self.build(reconciler)
        if isinstance(self._host, InformerFactory):
            raise TypeError("complete() needs a manager; use build() with an InformerFactory")
        self._host.add(controller)
        return controller
