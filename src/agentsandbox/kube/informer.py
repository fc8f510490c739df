"""Shared informers: a LIST+WATCH kept cache of one resource, with indexes and event handlers.

An informer lists a resource (page by page), then watches it from the list's resourceVersion with
bookmarks, so that a re-watch after a dropped connection resumes where it stopped instead of
relisting. A watch the server throttles (429) or fails (5xx) is opened again from the same
resourceVersion after a backoff that honours ``Retry-After``, as client-go's reflector does: a
cheap watch is never replaced by an expensive list under API priority and fairness pressure. A
relist after any other refusal reads from the last resourceVersion (``NotOlderThan``, served by
the watch cache); only when the server says the resourceVersion is too old (410 Gone) does it
relist from etcd. The relist is compared with the cache, so the handlers still hear about every
object that vanished while the informer was not watching (a DELETE for each) and about every
object that changed (an UPDATE only when the resourceVersion differs). Failures back off
exponentially with jitter, capped, so a down API server is not hammered.

Handlers are synchronous and cheap: they usually just put a key on a work queue. Reconcilers read
from the informer's :class:`~agentsandbox.kube.store.Store`, never from the events. An object a
transform, index or handler raises for is skipped there, never fatal (:mod:`.guard`).

Controllers share informers through an :class:`InformerFactory`: one informer per (resource,
namespace, label selector, field selector), so ten controllers watching Pods cost one watch.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from . import metrics
from .client import Client
from .errors import Gone, KubeError
from .guard import ObjectGuard
from .relist import Backoff, is_retriable_watch_error, retry_after, too_large_resource_version
from .resources import Resource
from .store import IndexFunc, KubeObject, Store
from .watch import WatchEvent, WatchStream

__all__ = [
    "AddHandler",
    "Backoff",
    "DeleteHandler",
    "HandlerRegistration",
    "Informer",
    "InformerFactory",
    "InformerStopped",
    "StoreChanges",
    "Transform",
    "UpdateHandler",
    "replace_store",
    "strip_managed_fields",
]

log = logging.getLogger(__name__)

AddHandler = Callable[[KubeObject], None]
UpdateHandler = Callable[[KubeObject, KubeObject], None]
DeleteHandler = Callable[[KubeObject], None]
Transform = Callable[[KubeObject], KubeObject]
"""Applied to every object on its way into the cache; may change the (fresh) dict in place."""

WatchEndReason = Literal["closed", "gone", "error"]

DEFAULT_PAGE_SIZE = 500
DEFAULT_MIN_WATCH_TIMEOUT = 300.0
# A watch that lasted this long, or delivered anything, was healthy: the next one starts at once.
_HEALTHY_WATCH_SECONDS = 1.0


class InformerStopped(RuntimeError):
    """``wait_synced`` was waiting when the informer was stopped before its first list."""


def strip_managed_fields(obj: KubeObject) -> KubeObject:
    """Drop ``metadata.managedFields``: often half an object's size, never needed by a reconciler.

    Changes ``obj`` in place (it was just decoded and belongs to the informer) and returns it.
    """
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def _resource_version(obj: KubeObject) -> str | None:
    meta = obj.get("metadata") or {}
    rv = meta.get("resourceVersion")
    return str(rv) if rv else None


@dataclass(frozen=True, slots=True)
class StoreChanges:
    """What a relist changed: the notifications the handlers must get."""

    added: list[KubeObject]
    updated: list[tuple[KubeObject, KubeObject]]
    deleted: list[KubeObject]


def replace_store(store: Store, objects: Iterable[KubeObject]) -> StoreChanges:
    """Make ``store`` hold exactly ``objects`` and say what changed.

    An object counts as updated only when its resourceVersion differs from the cached one, so a
    relist of an unchanged world notifies nobody. Deleted objects are reported as last cached.
    """
    items = list(objects)
    previous = {store.key_of(obj): obj for obj in store}
    deleted = store.replace(items)
    added: list[KubeObject] = []
    updated: list[tuple[KubeObject, KubeObject]] = []
    for obj in items:
        old = previous.get(store.key_of(obj))
        if old is None:
            added.append(obj)
        elif _resource_version(old) != _resource_version(obj):
            updated.append((old, obj))
    return StoreChanges(added, updated, deleted)


@dataclass(frozen=True, slots=True, eq=False)
class HandlerRegistration:
    """One set of callbacks added with :meth:`Informer.add_handler`; pass it to remove them."""

    on_add: AddHandler | None
    on_update: UpdateHandler | None
    on_delete: DeleteHandler | None


class Informer:
    """A LIST+WATCH cache of one resource, optionally scoped by namespace and selectors.

    ``transform`` runs on every object entering the cache, after ``metadata.managedFields`` has
    been dropped (unless ``keep_managed_fields``). ``resync_period`` re-delivers every cached
    object as an update (old is new) that often; None (default) never does.
    ``min_watch_timeout``: each watch asks the server to end it after a random time between this
    and twice this, spreading reconnects of many informers (client-go's behaviour).
    """

    def __init__(
        self,
        client: Client,
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = None,
        *,
        keep_managed_fields: bool = False,
        indexers: dict[str, IndexFunc] | None = None,
        resync_period: float | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        min_watch_timeout: float = DEFAULT_MIN_WATCH_TIMEOUT,
        backoff_base: float = 0.2,
        backoff_cap: float = 30.0,
    ) -> None:
        if namespace is not None and not resource.namespaced:
            raise ValueError(f"{resource.group_resource} is cluster-scoped; got namespace")
        if resync_period is not None and resync_period <= 0:
            raise ValueError("resync_period must be positive (or None)")
        self._client = client
        self.resource = resource
        self.namespace = namespace or None
        self.label_selector = label_selector or None
        self.field_selector = field_selector or None
        self._transform = transform
        self._keep_managed_fields = keep_managed_fields
        self._resync_period = resync_period
        self._page_size = page_size
        self._min_watch_timeout = max(1.0, min_watch_timeout)
        self._backoff = Backoff(backoff_base, backoff_cap)
        self._store = Store(indexers)
        self._guard = ObjectGuard(self, self._store.key_of, log)
        self._list_pending_since: float | None = None
        self._handlers: tuple[HandlerRegistration, ...] = ()
        self._synced = asyncio.Event()
        self._stopped = asyncio.Event()
        self._resource_version: str | None = None
        self._list_from_scratch = False  # after a 410: list with no resourceVersion (from etcd)
        self._task: asyncio.Task[None] | None = None
        self._resync_task: asyncio.Task[None] | None = None
        self._stream: WatchStream | None = None
        label = str(resource)
        self._m_lists = metrics.INFORMER_LISTS.labels(label)
        self._m_watch_starts = metrics.INFORMER_WATCH_STARTS.labels(label)
        self._m_watch_ends = {
            reason: metrics.INFORMER_WATCH_ENDS.labels(label, reason)
            for reason in ("closed", "gone", "error")
        }
        self._m_events: dict[str, Any] = {}
        self._m_events_label = label

    def __repr__(self) -> str:
        parts = [str(self.resource)]
        if self.namespace:
            parts.append(f"namespace={self.namespace}")
        if self.label_selector:
            parts.append(f"labels={self.label_selector}")
        if self.field_selector:
            parts.append(f"fields={self.field_selector}")
        return f"Informer({', '.join(parts)})"

    # --- the cache ---------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        """The cache. Objects in it are shared: copy one before changing it."""
        return self._store

    def get(self, name: str, namespace: str | None = None) -> KubeObject | None:
        """The cached object ``namespace/name`` (``name`` for cluster-scoped resources)."""
        return self._store.get_by_key(f"{namespace}/{name}" if namespace else name)

    def list(self) -> list[KubeObject]:
        return self._store.list()

    def by_index(self, index: str, value: str) -> builtins.list[KubeObject]:
        return self._store.by_index(index, value)

    def add_index(self, name: str, fn: IndexFunc) -> None:
        """Register a named index (objects already cached are indexed at once)."""
        self._store.add_index(name, fn)

    @property
    def resource_version(self) -> str | None:
        """The last resourceVersion seen (list, event or bookmark): where a re-watch resumes."""
        return self._resource_version

    @property
    def watching(self) -> bool:
        """True while a watch connection is open."""
        stream = self._stream
        return stream is not None and stream.connected

    # --- sync --------------------------------------------------------------------------------

    def has_synced(self) -> bool:
        """True once the first list is in the cache and its handlers were called."""
        return self._synced.is_set()

    def list_pending_since(self) -> float | None:
        """``time.monotonic()`` of the first try of a list (or relist) not yet succeeded."""
        return self._list_pending_since

    async def wait_synced(self) -> None:
        """Wait for the first list (bound it with ``asyncio.timeout``); ``InformerStopped`` if
        the informer stops first."""
        if self._synced.is_set():
            return
        synced = asyncio.ensure_future(self._synced.wait())
        stopped = asyncio.ensure_future(self._stopped.wait())
        try:
            await asyncio.wait({synced, stopped}, return_when="FIRST_COMPLETED")
        finally:
            synced.cancel()
            stopped.cancel()
        if not self._synced.is_set():
            raise InformerStopped(f"{self!r} stopped before it synced")

    # --- handlers ----------------------------------------------------------------------------

    def add_handler(
        self,
        on_add: AddHandler | None = None,
        on_update: UpdateHandler | None = None,
        on_delete: DeleteHandler | None = None,
    ) -> HandlerRegistration:
        """Add callbacks; they get an add for every object already cached, at once.

        Callbacks run synchronously on the event loop and must be cheap. An exception in one is
        logged and does not stop the informer or the other callbacks.
        """
        registration = HandlerRegistration(on_add, on_update, on_delete)
        self._handlers = (*self._handlers, registration)
        if on_add is not None:
            for obj in self._store.list():
                self._call(on_add, obj)
        return registration

    def remove_handler(self, registration: HandlerRegistration) -> None:
        self._handlers = tuple(h for h in self._handlers if h is not registration)

    def _call(self, fn: Callable[..., None], *args: KubeObject) -> None:
        self._guard.call("event handler", fn, *args)

    def _notify_add(self, obj: KubeObject) -> None:
        for handler in self._handlers:
            if handler.on_add is not None:
                self._call(handler.on_add, obj)

    def _notify_update(self, old: KubeObject, new: KubeObject) -> None:
        for handler in self._handlers:
            if handler.on_update is not None:
                self._call(handler.on_update, old, new)

    def _notify_delete(self, obj: KubeObject) -> None:
        for handler in self._handlers:
            if handler.on_delete is not None:
                self._call(handler.on_delete, obj)

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start listing and watching in a background task (idempotent)."""
        if self.running:
            return
        self._stopped.clear()
        self._task = asyncio.create_task(self._run(), name=f"informer {self.resource}")
        if self._resync_period is not None:
            self._resync_task = asyncio.create_task(
                self._resync_loop(self._resync_period), name=f"informer resync {self.resource}"
            )

    async def stop(self) -> None:
        """Stop watching; the cache keeps its contents."""
        tasks = [t for t in (self._task, self._resync_task) if t is not None]
        self._task = self._resync_task = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.aclose()
        self._stopped.set()

    async def __aenter__(self) -> Informer:
        self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # --- list and watch ----------------------------------------------------------------------

    async def _sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def _run(self) -> None:
        backoff = self._backoff
        need_list = True
        gone_in_a_row = 0
        while True:
            if need_list:
                try:
                    await self._list()
                except Gone as err:
                    # The watch cache no longer has our resourceVersion: list from etcd.
                    self._list_from_scratch = True
                    delay = backoff.next()
                    log.warning("%r: list failed, retrying in %.2fs: %s", self, delay, err)
                    await self._sleep(delay)
                    continue
                except KubeError as err:
                    if too_large_resource_version(err):
                        self._list_from_scratch = True  # the watch cache is behind our RV
                    delay = max(backoff.next(), retry_after(err))
                    log.warning("%r: list failed, retrying in %.2fs: %s", self, delay, err)
                    await self._sleep(delay)
                    continue
                except Exception:
                    delay = backoff.next()
                    log.exception("%r: list failed, retrying in %.2fs", self, delay)
                    await self._sleep(delay)
                    continue
                need_list = False
            reason, error, healthy = await self._watch_once()
            self._m_watch_ends[reason].inc()
            if healthy:
                backoff.reset()
            if reason == "gone":
                need_list = True  # history is gone: relist from etcd
                self._list_from_scratch = True
            elif reason == "error" and not is_retriable_watch_error(error):
                need_list = True  # the server refused the watch: relist from the watch cache
            if reason == "gone":
                gone_in_a_row = 0 if healthy else gone_in_a_row + 1
                if gone_in_a_row <= 1:
                    log.info("%r: %s; relisting", self, error)
                    continue  # the first 410 in a row: relist at once
            else:
                gone_in_a_row = 0
                if healthy and reason == "closed":
                    continue  # the server's watch timeout: watch again at once
            delay = max(backoff.next(), retry_after(error))
            log.info(
                "%r: watch ended (%s), retrying in %.2fs%s",
                self,
                reason,
                delay,
                f": {error}" if error is not None else "",
            )
            await self._sleep(delay)

    async def _list(self) -> None:
        if self._list_pending_since is None:
            self._list_pending_since = time.monotonic()
        self._m_lists.inc()
        resource_version: str | None = None
        match: str | None = None
        if self._resource_version and not self._list_from_scratch:
            resource_version, match = self._resource_version, "NotOlderThan"
        result = await self._client.list(
            self.resource,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            limit=self._page_size,
            resource_version=resource_version,
            resource_version_match=match,
        )
        self._list_from_scratch = False
        # an object the transform refuses keeps what the cache had, if anything
        cache = self._store.get_by_key
        kept = (self._prepare(o) or cache(self._guard.key(o) or "") for o in result.items)
        items = [o for o in kept if o is not None]
        changes = replace_store(self._store, items)
        self._resource_version = result.resource_version or None
        for obj in changes.deleted:
            self._notify_delete(obj)
        for obj in changes.added:
            self._notify_add(obj)
        for old, new in changes.updated:
            self._notify_update(old, new)
        self._list_pending_since = None
        if not self._synced.is_set():
            log.debug("%r: synced %d objects", self, len(items))
            self._synced.set()

    def _watch_timeout(self) -> int:
        return max(1, int(self._min_watch_timeout * (1.0 + random.random())))

    async def _watch_once(self) -> tuple[WatchEndReason, BaseException | None, bool]:
        """One watch request, until it ends. Returns (reason, error, healthy)."""
        stream = self._client.watch(
            self.resource,
            self.namespace,
            resource_version=self._resource_version,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            allow_bookmarks=True,
            timeout_seconds=self._watch_timeout(),
        )
        self._stream = stream
        self._m_watch_starts.inc()
        began = time.monotonic()
        delivered = False

        def healthy() -> bool:
            return delivered or time.monotonic() - began >= _HEALTHY_WATCH_SECONDS

        try:
            async with stream:
                async for event in stream:
                    delivered = True
                    self._on_event(event)
        except Gone as err:
            return "gone", err, healthy()
        except KubeError as err:
            return "error", err, healthy()
        except Exception as err:
            log.exception("%r: watch failed", self)
            return "error", err, False
        finally:
            if self._stream is stream:
                self._stream = None
        return "closed", None, healthy()

    def _on_event(self, event: WatchEvent) -> None:
        kind = event.type
        counter = self._m_events.get(kind)
        if counter is None:
            counter = metrics.INFORMER_EVENTS.labels(self._m_events_label, kind)
            self._m_events[kind] = counter
        counter.inc()
        obj = event.object
        rv = _resource_version(obj)
        if kind == "BOOKMARK":
            if rv:
                self._resource_version = rv
            return
        if (prepared := self._prepare(obj)) is None:
            return  # the transform refused it: the event is skipped
        obj = prepared
        if kind in ("ADDED", "MODIFIED"):
            old = self._store.add(obj)
            if old is None:
                self._notify_add(obj)
            else:
                self._notify_update(old, obj)
        elif kind == "DELETED":
            self._store.delete(obj)
            self._notify_delete(obj)
        else:
            log.warning("%r: ignoring watch event of type %r", self, kind)
        if rv:
            self._resource_version = rv

    def _prepare(self, obj: KubeObject) -> KubeObject | None:
        if not self._keep_managed_fields:
            obj = strip_managed_fields(obj)
        if self._transform is None:
            return obj
        return self._guard.apply("transform", self._transform, obj)

    async def _resync_loop(self, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            if not self._synced.is_set():
                continue
            for obj in self._store.list():
                self._notify_update(obj, obj)


# --- shared informers ---------------------------------------------------------------------------

InformerKey = tuple[Resource, str | None, str | None, str | None]


class InformerFactory:
    """One shared :class:`Informer` per (resource, namespace, label selector, field selector).

    ``options`` are passed to every informer created (``resync_period``, ``min_watch_timeout``,
    ``page_size``, ...). After :meth:`start`, informers created later start at once.
    """

    def __init__(self, client: Client, **options: Any) -> None:
        self._client = client
        self._options = options
        self._informers: dict[InformerKey, Informer] = {}
        self._transforms: dict[InformerKey, Transform | None] = {}
        self._started = False

    @property
    def client(self) -> Client:
        return self._client

    def get_informer(
        self,
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        *,
        transform: Transform | None = None,
    ) -> Informer:
        """The shared informer for this scope, created on first request.

        A ``transform`` is part of the informer: asking again with a different one is an error,
        since callers would silently see objects shaped by someone else's transform.
        """
        key: InformerKey = (
            resource,
            namespace or None,
            label_selector or None,
            field_selector or None,
        )
        informer = self._informers.get(key)
        if informer is not None:
            if transform is not None and self._transforms[key] is not transform:
                raise ValueError(f"{informer!r} already exists with a different transform")
            return informer
        informer = Informer(self._client, *key, transform=transform, **self._options)
        self._informers[key] = informer
        self._transforms[key] = transform
        if self._started:
            informer.start()
        return informer

    def informers(self) -> list[Informer]:
        return list(self._informers.values())

    def start(self) -> None:
        self._started = True
        for informer in self._informers.values():
            informer.start()

    def has_synced(self) -> bool:
        return all(informer.has_synced() for informer in self._informers.values())

    async def wait_synced(self) -> None:
        """Wait until every informer (including ones created while waiting) has synced."""
        while True:
            pending = [i for i in self._informers.values() if not i.has_synced()]
            if not pending:
                return
            await asyncio.gather(*(i.wait_synced() for i in pending))

    async def stop(self) -> None:
        self._started = False
        await asyncio.gather(*(informer.stop() for informer in self._informers.values()))
