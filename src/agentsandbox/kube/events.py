"""Kubernetes Events (``events.k8s.io/v1``), recorded without ever blocking a reconcile.

``EventRecorder.event`` only puts the event on a bounded in-memory queue; an
:class:`EventBroadcaster` task writes them. When the queue is full the event is dropped and
counted: events are a courtesy to humans, never worth slowing or failing a reconcile for.

Repeats are aggregated as client-go does: the same event (same object, type, reason, action,
note, reporting controller) seen again within ``series_window`` does not create a new Event but
patches the existing one's ``series.count`` and ``series.lastObservedTime``. Repeats that are
still queued are merged before anything is sent, so a burst costs one write.

Events about different objects are written concurrently (``writers`` at a time), those about
one object in the order they were recorded. A namespace that is gone or terminating refuses
every Event written into it: once it has refused one, the events for it are dropped without a
request for ``closed_namespace_hold`` seconds, so a tenant deleting a namespace of hundreds of
objects does not queue everyone else's events behind hundreds of doomed writes.

Keeping secrets out of ``note`` is the caller's job.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter

from . import metrics
from .client import Client, PatchType
from .errors import KubeError, NotFound, namespace_terminating
from .resources import EVENTS
from .timefmt import format_micro_time

__all__ = [
    "EVENTS_DROPPED",
    "EVENTS_WRITTEN",
    "NORMAL",
    "NOTE_LIMIT",
    "WARNING",
    "EventBroadcaster",
    "EventRecorder",
    "object_reference",
]

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"
NOTE_LIMIT = 1024  # bytes, the API server's limit for ``note``
_FIELD_LIMIT = 128  # reason, action, reportingInstance

EVENTS_DROPPED = Counter(
    "agentsandbox_runtime_events_dropped_total",
    "Events not written: queue full, the write failed, or its namespace is gone or terminating",
    ["reason"],
    registry=metrics.REGISTRY,
)
EVENTS_WRITTEN = Counter(
    "agentsandbox_runtime_events_written_total",
    "Event writes: a new Event (create) or a repeat aggregated into a series (patch)",
    ["verb"],
    registry=metrics.REGISTRY,
)


def object_reference(obj: Mapping[str, Any]) -> dict[str, str]:
    """An ``ObjectReference`` for a full object (or an already built reference)."""
    meta = obj.get("metadata")
    if meta is None:  # already a reference
        source: Mapping[str, Any] = obj
    else:
        source = {**meta, "apiVersion": obj.get("apiVersion"), "kind": obj.get("kind")}
    ref = {
        key: str(source[key])
        for key in ("apiVersion", "kind", "namespace", "name", "uid", "resourceVersion")
        if source.get(key)
    }
    if "name" not in ref or "kind" not in ref:
        raise ValueError("an event needs an object with a kind and a name")
    return ref


def _truncate_utf8(text: str, limit: int) -> str:
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return raw[:limit].decode(errors="ignore")


@dataclass(frozen=True, slots=True)
class _Pending:
    """One recorded event waiting to be written."""

    regarding: dict[str, str]
    related: dict[str, str] | None
    type: str
    reason: str
    action: str
    note: str
    controller: str
    observed: datetime.datetime

    @property
    def key(self) -> tuple[Any, ...]:
        ref = self.regarding
        related = tuple(sorted(self.related.items())) if self.related else ()
        identity = ref.get("uid") or (ref.get("kind"), ref.get("namespace"), ref.get("name"))
        return (identity, related, self.type, self.reason, self.action, self.note, self.controller)


@dataclass(slots=True)
class _Series:
    name: str
    namespace: str
    count: int
    last_seen: float


class EventRecorder:
    """Records events as one reporting controller; cheap and synchronous, never blocks."""

    def __init__(self, broadcaster: EventBroadcaster, reporting_controller: str) -> None:
        if not reporting_controller:
            raise ValueError("reporting_controller is required")
        self._broadcaster = broadcaster
        self.reporting_controller = reporting_controller

    def event(
        self,
        regarding: Mapping[str, Any],
        type: str,
        reason: str,
        note: str = "",
        *,
        action: str | None = None,
        related: Mapping[str, Any] | None = None,
    ) -> bool:
        """Record an event about ``regarding`` (an object or an object reference).

        ``type`` is ``Normal`` or ``Warning``; ``action`` defaults to ``reason``; ``note`` is cut
        to 1 KiB. Returns False if the event was dropped because the queue is full.
        """
        if type not in (NORMAL, WARNING):
            raise ValueError(f"event type must be Normal or Warning, not {type!r}")
        if not reason:
            raise ValueError("an event needs a reason")
        pending = _Pending(
            regarding=object_reference(regarding),
            related=object_reference(related) if related is not None else None,
            type=type,
            reason=reason[:_FIELD_LIMIT],
            action=(action or reason)[:_FIELD_LIMIT],
            note=_truncate_utf8(note, NOTE_LIMIT),
            controller=self.reporting_controller,
            observed=self._broadcaster.now(),
        )
        return self._broadcaster.submit(pending)

    def normal(self, regarding: Mapping[str, Any], reason: str, note: str = "", **kw: Any) -> bool:
        return self.event(regarding, NORMAL, reason, note, **kw)

    def warning(self, regarding: Mapping[str, Any], reason: str, note: str = "", **kw: Any) -> bool:
        return self.event(regarding, WARNING, reason, note, **kw)


class EventBroadcaster:
    """Owns the queue and the task that writes Events for every :class:`EventRecorder`."""

    def __init__(
        self,
        client: Client,
        *,
        reporting_instance: str | None = None,
        queue_size: int = 1000,
        series_window: float = 360.0,
        cache_size: int = 4096,
        writers: int = 8,
        closed_namespace_hold: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime.datetime] | None = None,
    ) -> None:
        self._client = client
        self.reporting_instance = (reporting_instance or socket.gethostname())[:_FIELD_LIMIT]
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=queue_size)
        self._series_window = series_window
        self._cache: OrderedDict[tuple[Any, ...], _Series] = OrderedDict()
        self._cache_size = cache_size
        if writers < 1:
            raise ValueError("writers must be at least 1")
        self._writers = asyncio.Semaphore(writers)
        self._closed: dict[str, float] = {}  # namespace -> until (clock)
        self._closed_hold = closed_namespace_hold
        self._clock = clock
        self.now: Callable[[], datetime.datetime] = now or (
            lambda: datetime.datetime.now(datetime.UTC)
        )
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self.dropped = 0

    def new_recorder(self, reporting_controller: str) -> EventRecorder:
        return EventRecorder(self, reporting_controller)

    # --- queueing

    def submit(self, pending: _Pending) -> bool:
        try:
            self._queue.put_nowait(pending)
        except asyncio.QueueFull:
            self.dropped += 1
            EVENTS_DROPPED.labels("queue_full").inc()
            return False
        self._idle.clear()
        return True

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    # --- lifecycle

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="event broadcaster")

    async def flush(self) -> None:
        """Wait until every queued event has been written (or given up on)."""
        while not (self._idle.is_set() and self._queue.empty()):
            await self._idle.wait()
            if not self._queue.empty():
                await asyncio.sleep(0)

    async def stop(self, flush_timeout: float = 5.0) -> None:
        """Write what is queued (for up to ``flush_timeout`` seconds), then stop."""
        task, self._task = self._task, None
        if task is None:
            return
        if flush_timeout > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.flush(), timeout=flush_timeout)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    # --- writing

    async def _run(self) -> None:
        while True:
            first = await self._queue.get()
            batch = [first]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            merged: dict[tuple[Any, ...], tuple[_Pending, int]] = {}
            for pending in batch:
                earlier = merged.get(pending.key)
                merged[pending.key] = (pending, 1 if earlier is None else earlier[1] + 1)
            by_object: dict[Any, list[tuple[_Pending, int]]] = {}
            for pending, count in merged.values():
                by_object.setdefault(pending.key[0], []).append((pending, count))
            try:
                await asyncio.gather(*(self._write_in_order(item) for item in by_object.values()))
            finally:
                if self._queue.empty():
                    self._idle.set()

    async def _write_in_order(self, items: list[tuple[_Pending, int]]) -> None:
        async with self._writers:
            for pending, count in items:
                await self._write(pending, count)

    def _namespace_closed(self, namespace: str, now: float) -> bool:
        until = self._closed.get(namespace)
        if until is None:
            return False
        if now < until:
            return True
        del self._closed[namespace]
        return False

    async def _write(self, pending: _Pending, count: int) -> None:
        key = pending.key
        now = self._clock()
        if self._namespace_closed(pending.regarding.get("namespace") or "default", now):
            self.dropped += 1
            EVENTS_DROPPED.labels("namespace_closed").inc()
            return
        series = self._cache.get(key)
        if series is not None and now - series.last_seen <= self._series_window:
            series.count += count
            series.last_seen = now
            self._cache.move_to_end(key)
            patch = {
                "series": {
                    "count": series.count,
                    "lastObservedTime": format_micro_time(pending.observed),
                }
            }
            try:
                await self._client.patch(
                    EVENTS, series.name, patch, series.namespace, patch_type=PatchType.MERGE
                )
            except NotFound:
                pass  # expired or deleted: start a new Event
            except KubeError as err:
                self._failed(pending, err)
                return
            else:
                EVENTS_WRITTEN.labels("patch").inc()
                return
        body = self._build(pending, count)
        namespace = body["metadata"]["namespace"]
        try:
            created = await self._client.create(EVENTS, body, namespace)
        except KubeError as err:
            if _refused_by_namespace(err, namespace):
                self._closed[namespace] = self._clock() + self._closed_hold
            self._failed(pending, err)
            return
        EVENTS_WRITTEN.labels("create").inc()
        self._cache[key] = _Series(created["metadata"]["name"], namespace, count, now)
        self._cache.move_to_end(key)
        # least recently seen first: drop what is past the series window (a repeat would start a
        # new Event anyway; client-go's finishSeries), then anything over the size bound. Without
        # the first, a busy controller held 4096 dead series (soak: RSS +2 MB / 10 min)
        cache = self._cache
        while cache:
            oldest = next(iter(cache.values()))
            if now - oldest.last_seen <= self._series_window and len(cache) <= self._cache_size:
                break
            cache.popitem(last=False)

    @property
    def closed_namespaces(self) -> list[str]:
        """Namespaces whose events are being dropped (gone or terminating when last tried)."""
        now = self._clock()
        return sorted(ns for ns, until in self._closed.items() if now < until)

    def _failed(self, pending: _Pending, err: KubeError) -> None:
        self.dropped += 1
        EVENTS_DROPPED.labels("write_failed").inc()
        log.warning(
            "could not write event %s %s for %s/%s: %s",
            pending.type,
            pending.reason,
            pending.regarding.get("kind"),
            pending.regarding.get("name"),
            err,
        )

    def _build(self, pending: _Pending, count: int) -> dict[str, Any]:
        ref = pending.regarding
        namespace = ref.get("namespace") or "default"
        stamp = f"{time.time_ns():x}"
        name = f"{ref['name'][: 253 - len(stamp) - 1]}.{stamp}"
        event: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "eventTime": format_micro_time(pending.observed),
            "reportingController": pending.controller,
            "reportingInstance": self.reporting_instance,
            "action": pending.action,
            "reason": pending.reason,
            "type": pending.type,
            "regarding": ref,
        }
        if pending.note:
            event["note"] = pending.note
        if pending.related is not None:
            event["related"] = pending.related
        if count > 1:
            event["series"] = {
                "count": count,
                "lastObservedTime": format_micro_time(pending.observed),
            }
        return event


def _refused_by_namespace(err: KubeError, namespace: str) -> bool:
    """Whether ``err`` says the namespace itself is gone or terminating (not the Event)."""
    if isinstance(err, NotFound):
        details = err.details
        return details.get("kind") == "namespaces" and details.get("name") == namespace
    return namespace_terminating(err)
