"""An asyncio Kubernetes API client on aiohttp + orjson; objects are plain dicts.

What it does, and why:

- Every verb the runtime needs: get, list (paged with ``limit``/``continue``), watch, create,
  update, delete, the four patch types (JSON merge, JSON patch, strategic merge, server-side
  apply) and the ``status``/``scale`` subresources, on namespaced and cluster-scoped resources,
  plus :meth:`Client.raw` for any other path (``/version``, ``/openapi/v3``).
- Failures are typed exceptions from :mod:`agentsandbox.kube.errors`, built from the server's
  ``Status``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import Any

from .config import ClusterConfig, load_config, load_incluster_config, load_kubeconfig
from .errors import Gone
from .resources import Resource
from .transport import (
    _USER_AGENT,
    DEFAULT_BURST,
    DEFAULT_POOL_SIZE,
    DEFAULT_QPS,
    JsonObject,
    Transport,
)
from .watch import WatchStream

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "Client",
    "ObjectList",
    "PatchType",
]

DEFAULT_PAGE_SIZE = 500


class PatchType(StrEnum):
    """The ``Content-Type`` of a PATCH, which selects how the server applies it."""

    MERGE = "application/merge-patch+json"
    JSON = "application/json-patch+json"
    STRATEGIC = "application/strategic-merge-patch+json"
    APPLY = "application/apply-patch+yaml"


@dataclass(frozen=True, slots=True)
class ObjectList:
    """The result of :meth:`Client.list`: all items of all pages, and the list's resourceVersion.

    ``resource_version`` is what a watch should start from to see every later change.
    """

    items: list[JsonObject]
    resource_version: str

    def __len__(self) -> int:
        return len(self.items)


def _bool(value: bool) -> str:
    return "true" if value else "false"


class Client(Transport):
    """A Kubernetes API client for one event loop (connection pools open on first use).

    Close it when done (``async with`` does). Every method raises
    :class:`~.errors.ApiError` subclasses for error answers and
    :class:`~.errors.ApiConnectionError` when no answer came.

    >>> async with Client.from_kubeconfig("~/.kube/config") as client:  # doctest: +SKIP
    ...     pod = await client.get(PODS, "web-0", namespace="default")
    """

    def __init__(
        self,
        config: ClusterConfig,
        *,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        pool_size: int = DEFAULT_POOL_SIZE,
        watch_pool_size: int = 0,
        request_timeout: float | None = 60.0,
        max_retries: int = 5,
        retry_backoff_base: float = 0.2,
        retry_backoff_cap: float = 10.0,
        user_agent: str = _USER_AGENT,
        field_manager: str | None = None,
        compression: bool = False,
    ) -> None:
        """``field_manager`` is sent with every write that does not name one; the other options
        are the :class:`~.transport.Transport`'s."""
        super().__init__(
            config,
            qps=qps,
            burst=burst,
            pool_size=pool_size,
            watch_pool_size=watch_pool_size,
            request_timeout=request_timeout,
            max_retries=max_retries,
            retry_backoff_base=retry_backoff_base,
            retry_backoff_cap=retry_backoff_cap,
            user_agent=user_agent,
            compression=compression,
        )
        self._field_manager = field_manager

    # --- construction ------------------------------------------------------------------------

    @classmethod
    def from_kubeconfig(
        cls, path: str | None = None, *, context: str | None = None, **options: Any
    ) -> _PendingClient:
        """``await Client.from_kubeconfig(p)`` or ``async with Client.from_kubeconfig(p) as c``.

        ``path=None`` searches like controller-runtime: ``$KUBECONFIG``, in-cluster,
        ``~/.kube/config``. ``options`` are the constructor's keyword arguments.
        """

        async def load() -> ClusterConfig:
            if path:
                return await load_kubeconfig(path, context=context)
            return await load_config(context=context)

        return _PendingClient(cls, load, options)

    @classmethod
    def from_incluster(cls, **options: Any) -> _PendingClient:
        """The pod's service account; the token file is re-read as it rotates."""

        async def load() -> ClusterConfig:
            return load_incluster_config()

        return _PendingClient(cls, load, options)

    def for_leader_election(self) -> Client:
        """A client for the Lease alone: the same server and credentials, its own small
        connection pool and no client-side rate limit, so renewals never queue behind the
        controllers' requests (controller-runtime builds the resource lock's client the same
        way). The elector retries on its own schedule, so this client does not retry."""
        return Client(
            self._config,
            qps=0,
            pool_size=2,
            request_timeout=self._request_timeout.total,
            max_retries=0,
            user_agent=self._headers["User-Agent"] + " leader-election",
        )

    # --- helpers -----------------------------------------------------------------------------

    @staticmethod
    def _namespace(resource: Resource, namespace: str | None, obj: Mapping[str, Any]) -> str | None:
        if not resource.namespaced:
            return None
        ns = namespace or obj.get("metadata", {}).get("namespace")
        if not ns:
            raise ValueError(f"{resource.group_resource} is namespaced: no namespace given")
        return str(ns)

    @staticmethod
    def _name(resource: Resource, obj: Mapping[str, Any]) -> str:
        name = obj.get("metadata", {}).get("name")
        if not name:
            raise ValueError(f"{resource.group_resource}: object has no metadata.name")
        return str(name)

    def _write_params(
        self, field_manager: str | None, dry_run: bool, force: bool | None = None
    ) -> dict[str, str]:
        params: dict[str, str] = {}
        manager = field_manager or self._field_manager
        if manager:
            params["fieldManager"] = manager
        if dry_run:
            params["dryRun"] = "All"
        if force is not None:
            params["force"] = _bool(force)
        return params

    @staticmethod
    def _selector_params(label_selector: str | None, field_selector: str | None) -> dict[str, str]:
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        return params

    # --- verbs -------------------------------------------------------------------------------

    async def get(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> JsonObject:
        """GET one object (or its ``status``/``scale`` subresource)."""
        path = resource.path(namespace if resource.namespaced else None, name, subresource)
        result: JsonObject = await self._json("GET", path)
        return result

    async def list_page(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> JsonObject:
        """One LIST request; returns the raw ``*List`` (``metadata.continue``: next page)."""
        params = self._selector_params(label_selector, field_selector)
        if limit:
            params["limit"] = str(limit)
        if continue_token:
            params["continue"] = continue_token
        elif resource_version is not None:
            params["resourceVersion"] = resource_version
            if resource_version_match:
                params["resourceVersionMatch"] = resource_version_match
        path = resource.path(namespace if resource.namespaced else None)
        result: JsonObject = await self._json("GET", path, params=params)
        return result

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = DEFAULT_PAGE_SIZE,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> ObjectList:
        """LIST every matching object, following ``continue`` tokens page by page.

        ``limit`` is the page size (None or 0: one unpaged request). ``namespace=None`` on a
        namespaced resource lists all namespaces. Items get ``apiVersion``/``kind`` filled in
        (the server omits them in lists), so they look like watched objects. If a continue token
        expires mid-way (410), the list is redone in one unpaged request, as client-go's pager does.
        """
        items: list[JsonObject] = []
        token: str | None = None
        page_limit = limit
        while True:
            try:
                page = await self.list_page(
                    resource,
                    namespace,
                    label_selector=label_selector,
                    field_selector=field_selector,
                    limit=page_limit,
                    continue_token=token,
                    resource_version=resource_version,
                    resource_version_match=resource_version_match,
                )
            except Gone:
                if token is None:
                    raise
                items, token, page_limit = [], None, None
                continue
            page_items = page.get("items") or []
            items.extend(page_items)
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                break
        api_version, kind = resource.api_version, resource.kind
        for item in items:
            if "kind" not in item:
                item["apiVersion"] = api_version
                item["kind"] = kind
        return ObjectList(items, str(meta.get("resourceVersion", "")))

    def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = True,
        timeout_seconds: int | None = None,
        send_initial_events: bool | None = None,
        resource_version_match: str | None = None,
    ) -> WatchStream:
        """WATCH a collection: an async iterator of :class:`WatchEvent`.

        The request is sent on first iteration. The stream ends (StopAsyncIteration) when the
        server closes it, e.g. after ``timeout_seconds``; :class:`~.errors.Gone` is raised when the
        resourceVersion is too old (HTTP 410 or an ``ERROR`` event with code 410), another
        :class:`~.errors.ApiError` for other ``ERROR`` events, and
        :class:`~.errors.ApiConnectionError` if the connection breaks. Use ``async with`` (or
        ``aclose()``) to release the connection when you stop early.
        """
        params = self._selector_params(label_selector, field_selector)
        params["watch"] = "true"
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        if resource_version_match:
            params["resourceVersionMatch"] = resource_version_match
        if allow_bookmarks:
            params["allowWatchBookmarks"] = "true"
        if timeout_seconds is not None:
            params["timeoutSeconds"] = str(int(timeout_seconds))
        if send_initial_events is not None:
            params["sendInitialEvents"] = _bool(send_initial_events)
        path = resource.path(namespace if resource.namespaced else None)
        read_timeout = None if timeout_seconds is None else float(timeout_seconds) + 60.0
        return WatchStream(self, path, params, read_timeout)

    async def create(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> JsonObject:
        """POST a new object. ``metadata.generateName`` without ``name`` lets the server name it.

        With ``subresource`` (e.g. ``eviction``) the POST goes to ``metadata.name``'s subresource.
        Never retried after the request may have been sent.
        """
        ns = self._namespace(resource, namespace, obj)
        name = self._name(resource, obj) if subresource else None
        path = resource.path(ns, name, subresource)
        result: JsonObject = await self._json(
            "POST", path, params=self._write_params(field_manager, dry_run), body=obj
        )
        return result

    async def update(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> JsonObject:
        """PUT the whole object; its ``metadata.resourceVersion`` makes it a compare-and-swap
        (:class:`~.errors.Conflict` when stale)."""
        ns = self._namespace(resource, namespace, obj)
        path = resource.path(ns, self._name(resource, obj), subresource)
        result: JsonObject = await self._json(
            "PUT", path, params=self._write_params(field_manager, dry_run), body=obj
        )
        return result

    async def update_status(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        namespace: str | None = None,
        *,
        field_manager: str | None = None,
    ) -> JsonObject:
        """PUT the ``status`` subresource (spec changes in ``obj`` are ignored by the server)."""
        return await self.update(
            resource, obj, namespace, subresource="status", field_manager=field_manager
        )

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool | None = None,
        dry_run: bool = False,
    ) -> JsonObject:
        """PATCH an object: a dict for merge/strategic/apply, a list of ops for JSON patch."""
        if patch_type is PatchType.JSON and not isinstance(patch, list):
            raise TypeError("a JSON patch is a list of operations")
        if force is not None and patch_type is not PatchType.APPLY:
            raise ValueError("force is only valid for server-side apply")
        path = resource.path(namespace if resource.namespaced else None, name, subresource)
        result: JsonObject = await self._json(
            "PATCH",
            path,
            params=self._write_params(field_manager, dry_run, force),
            body=patch,
            content_type=patch_type.value,
        )
        return result

    async def apply(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        *,
        field_manager: str,
        force: bool = False,
        namespace: str | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> JsonObject:
        """Server-side apply: ``obj`` is the full intent of ``field_manager`` (JSON is YAML).

        ``force=True`` takes ownership of fields another manager owns instead of a 409.
        Creates the object if it does not exist.
        """
        if not field_manager:
            raise ValueError("server-side apply needs a field manager")
        ns = self._namespace(resource, namespace, obj)
        return await self.patch(
            resource,
            self._name(resource, obj),
            obj,
            ns,
            patch_type=PatchType.APPLY,
            subresource=subresource,
            field_manager=field_manager,
            force=force,
            dry_run=dry_run,
        )

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: str | None = None,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        dry_run: bool = False,
    ) -> JsonObject:
        """DELETE one object; returns the server's answer (the object if deletion is pending on
        finalizers or grace, otherwise a ``Status``).

        ``uid``/``resource_version`` are preconditions: :class:`~.errors.Conflict` when the live
        object differs. ``propagation_policy`` is ``Foreground``, ``Background`` or ``Orphan``.
        """
        path = resource.path(namespace if resource.namespaced else None, name)
        body = self._delete_options(
            propagation_policy, grace_period_seconds, uid, resource_version, dry_run
        )
        result: JsonObject = await self._json("DELETE", path, body=body)
        return result

    async def delete_collection(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        propagation_policy: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> JsonObject:
        """DELETE every matching object of a collection in one request."""
        path = resource.path(namespace if resource.namespaced else None)
        body = self._delete_options(propagation_policy, grace_period_seconds, None, None, False)
        result: JsonObject = await self._json(
            "DELETE",
            path,
            params=self._selector_params(label_selector, field_selector),
            body=body,
        )
        return result

    @staticmethod
    def _delete_options(
        propagation_policy: str | None,
        grace_period_seconds: int | None,
        uid: str | None,
        resource_version: str | None,
        dry_run: bool,
    ) -> JsonObject | None:
        options: JsonObject = {}
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        preconditions: dict[str, str] = {}
        if uid:
            preconditions["uid"] = uid
        if resource_version:
            preconditions["resourceVersion"] = resource_version
        if preconditions:
            options["preconditions"] = preconditions
        if dry_run:
            options["dryRun"] = ["All"]
        if not options:
            return None
        return {"apiVersion": "v1", "kind": "DeleteOptions", **options}


class _PendingClient:
    """What ``Client.from_kubeconfig`` returns: await it, or use it as ``async with``."""

    def __init__(
        self,
        cls: type[Client],
        load: Callable[[], Awaitable[ClusterConfig]],
        options: dict[str, Any],
    ) -> None:
        self._cls = cls
        self._load = load
        self._options = options
        self._client: Client | None = None

    async def _create(self) -> Client:
        return self._cls(await self._load(), **self._options)

    def __await__(self) -> Generator[Any, None, Client]:
        return self._create().__await__()

    async def __aenter__(self) -> Client:
        self._client = await self._create()
        return self._client

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
