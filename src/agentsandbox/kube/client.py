"""An asyncio Kubernetes API client on aiohttp + orjson; objects are plain dicts.

What it does, and why:

- Every verb the runtime needs: get, list (paged with ``limit``/``continue``), watch, create,
  update, delete, the four patch types (JSON merge, JSON patch, strategic merge, server-side
  apply) and the ``status``/``scale`` subresources, on namespaced and cluster-scoped resources,
  plus :meth:`Client.raw` for any other path (``/version``, ``/openapi/v3``).
- Failures are typed exceptions from :mod:`agentsandbox.kube.errors`, built from the server's
  ``Status``.
- A client-side token bucket (QPS/burst, as ``--kube-api-qps``/``--kube-api-burst``) paces every
  request, retries included.
- Retries, with jittered exponential backoff: a 429 is retried for every verb (the server refused
  before doing anything) honouring ``Retry-After``, and so is a 5xx that carries ``Retry-After``
  (the server asks for it, e.g. a restarting kube-apiserver's 503 "before all known HTTP paths
  have been installed"; client-go's ``checkWait`` does the same); a failed connect is retried for
  every verb (nothing was sent); connection resets, timeouts and other 5xx answers only for GET,
  because a POST that may have reached the server must not be blindly repeated.
- Two connection pools: requests share one sized by ``pool_size``; watches get their own,
  unbounded, so long-lived watches never starve ordinary requests.
- client-go's ``rest_client_*`` metrics for every request.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import Any, NamedTuple, Self
from urllib.parse import urlsplit

import aiohttp
import orjson

from . import metrics
from .config import AuthProvider, ClusterConfig, load_config, load_incluster_config, load_kubeconfig
from .errors import (
    ApiConnectionError,
    Gone,
    ServerError,
    TooManyRequests,
    api_error_from_response,
    api_error_from_status,
)
from .ratelimit import TokenBucket
from .resources import Resource

__all__ = [
    "DEFAULT_BURST",
    "DEFAULT_QPS",
    "Client",
    "JsonObject",
    "ObjectList",
    "PatchType",
    "WatchEvent",
    "WatchStream",
]

log = logging.getLogger(__name__)

JsonObject = dict[str, Any]

DEFAULT_QPS = 20.0
DEFAULT_BURST = 30
DEFAULT_POOL_SIZE = 100
DEFAULT_PAGE_SIZE = 500
_USER_AGENT = "agentsandbox/0.1.0 (python; aiohttp)"
_JSON = "application/json"
_SAFE_METHODS = frozenset({"GET", "HEAD"})
_CONNECT_TIMEOUT = 10.0
_READ_BUFSIZE = 2**18


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


class WatchEvent(NamedTuple):
    """One watch event: ``type`` is ADDED, MODIFIED, DELETED or BOOKMARK."""

    type: str
    object: JsonObject


def _retry_after_header(value: str | None) -> float | None:
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date; the Status details carry retryAfterSeconds too
    return seconds if seconds >= 0 else None


def _bool(value: bool) -> str:
    return "true" if value else "false"


class _Retry:
    """Jittered exponential backoff state for one logical request."""

    __slots__ = ("attempt", "base", "cap", "max_retries")

    def __init__(self, max_retries: int, base: float, cap: float) -> None:
        self.attempt = 0
        self.max_retries = max_retries
        self.base = base
        self.cap = cap

    def next_delay(self, retry_after: float | None = None) -> float | None:
        """Seconds to sleep before the next attempt, or None when retries are exhausted."""
        if self.attempt >= self.max_retries:
            return None
        self.attempt += 1
        backoff: float = min(self.cap, self.base * 2.0 ** (self.attempt - 1))
        delay = backoff / 2 + random.uniform(0, backoff / 2)
        if retry_after is not None:
            delay = max(delay, min(retry_after, 60.0) * random.uniform(1.0, 1.2))
        return delay


class Client:
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
        """
        ``qps <= 0`` disables client-side rate limiting. ``pool_size`` bounds concurrent
        non-watch connections (size it to the worker count); ``watch_pool_size`` bounds watch
        connections (0 = unbounded). ``field_manager`` is sent with every write that does not
        name one. ``compression=False`` asks the server for identity encoding: on loopback or a
        cluster network gzip costs CPU on both sides for nothing.
        """
        self._config = config
        self._base = config.host.rstrip("/")
        self._host = urlsplit(self._base).netloc
        self._auth: AuthProvider = config.auth
        self._limiter = TokenBucket(qps, burst)
        self._pool_size = pool_size
        self._watch_pool_size = watch_pool_size
        self._request_timeout = aiohttp.ClientTimeout(
            total=request_timeout, sock_connect=_CONNECT_TIMEOUT
        )
        self._max_retries = max(0, max_retries)
        self._backoff_base = retry_backoff_base
        self._backoff_cap = retry_backoff_cap
        self._field_manager = field_manager
        self._headers: dict[str, str] = {"Accept": _JSON, "User-Agent": user_agent}
        if not compression:
            self._headers["Accept-Encoding"] = "identity"
        self._request_kwargs: dict[str, Any] = {}
        if config.tls_server_name:
            self._request_kwargs["server_hostname"] = config.tls_server_name
        if config.proxy:
            self._request_kwargs["proxy"] = config.proxy
        self._session: aiohttp.ClientSession | None = None
        self._watch_session: aiohttp.ClientSession | None = None
        self._closed = False
        self._requests_children: dict[tuple[str, str], Any] = {}
        self._latency_children: dict[str, Any] = {}
        self._limiter_children: dict[str, Any] = {}

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

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close both connection pools (open watches end with a connection error)."""
        self._closed = True
        sessions = [s for s in (self._session, self._watch_session) if s is not None]
        self._session = self._watch_session = None
        for session in sessions:
            await session.close()

    @property
    def host(self) -> str:
        """The API server's base URL."""
        return self._base

    @property
    def rate_limiter(self) -> TokenBucket:
        return self._limiter

    def _make_session(self, limit: int) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=limit,
            ssl=self._config.ssl_context if self._config.ssl_context is not None else True,
            keepalive_timeout=30.0,
        )
        return aiohttp.ClientSession(
            connector=connector,
            headers=self._headers,
            read_bufsize=_READ_BUFSIZE,
            trust_env=False,
        )

    def _requests_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            if self._closed:
                raise RuntimeError("Client is closed")
            self._session = self._make_session(self._pool_size)
        return self._session

    def _watches_session(self) -> aiohttp.ClientSession:
        if self._watch_session is None:
            if self._closed:
                raise RuntimeError("Client is closed")
            self._watch_session = self._make_session(self._watch_pool_size)
        return self._watch_session

    # --- metrics -----------------------------------------------------------------------------

    def _observe(self, method: str, code: str, seconds: float) -> None:
        child = self._requests_children.get((code, method))
        if child is None:
            child = metrics.REST_CLIENT_REQUESTS.labels(code, method, self._host)
            self._requests_children[(code, method)] = child
        child.inc()
        latency = self._latency_children.get(method)
        if latency is None:
            latency = metrics.REST_CLIENT_LATENCY.labels(method, self._host)
            self._latency_children[method] = latency
        latency.observe(seconds)

    async def _throttle(self, method: str) -> None:
        waited = await self._limiter.acquire()
        child = self._limiter_children.get(method)
        if child is None:
            child = metrics.REST_CLIENT_RATE_LIMITER_DURATION.labels(method, self._host)
            self._limiter_children[method] = child
        child.observe(waited)

    # --- the request loop --------------------------------------------------------------------

    async def _headers_for(self, content_type: str | None) -> dict[str, str]:
        headers: dict[str, str] = {}
        authorization = await self._auth.header()
        if authorization:
            headers["Authorization"] = authorization
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        data: bytes | None = None,
        content_type: str | None = None,
        extra_headers: Mapping[str, str] | None = None,
        client_timeout: aiohttp.ClientTimeout | None = None,
    ) -> tuple[int, str, bytes]:
        """Send one logical request with throttling, retries and metrics.

        Returns (status, content type, body) for a 2xx/3xx answer; raises a typed error otherwise.
        """
        url = self._base + path
        retry = _Retry(self._max_retries, self._backoff_base, self._backoff_cap)
        reauthenticated = False
        safe = method in _SAFE_METHODS
        while True:
            await self._throttle(method)
            headers = await self._headers_for(content_type)
            if extra_headers:
                headers.update(extra_headers)
            session = self._requests_session()
            start = time.perf_counter()
            try:
                async with session.request(
                    method,
                    url,
                    params=params,
                    data=data,
                    headers=headers,
                    timeout=client_timeout or self._request_timeout,
                    **self._request_kwargs,
                ) as resp:
                    body = await resp.read()
                    status = resp.status
                    resp_type = resp.headers.get("Content-Type", "")
                    retry_after = _retry_after_header(resp.headers.get("Retry-After"))
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                self._observe(method, "<error>", time.perf_counter() - start)
                connect_failed = isinstance(exc, aiohttp.ClientConnectorError)
                delay = retry.next_delay() if (safe or connect_failed) else None
                if delay is None:
                    raise ApiConnectionError(
                        f"{type(exc).__name__}: {exc}", method=method, path=path
                    ) from exc
                log.debug("retrying %s %s in %.2fs after %r", method, path, delay, exc)
                await asyncio.sleep(delay)
                continue
            self._observe(method, str(status), time.perf_counter() - start)
            if status < 400:
                return status, resp_type, body
            error = api_error_from_response(
                status, body, method=method, path=path, retry_after=retry_after
            )
            if status == 401 and not reauthenticated and await self._auth.unauthorized():
                reauthenticated = True
                continue
            delay = None
            if isinstance(error, TooManyRequests) or (
                isinstance(error, ServerError) and (safe or retry_after is not None)
            ):
                delay = retry.next_delay(error.retry_after)
            if delay is None:
                raise error
            log.debug("retrying %s %s in %.2fs after %s", method, path, delay, error)
            await asyncio.sleep(delay)

    async def _json(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> Any:
        data = None if body is None else orjson.dumps(body)
        if data is not None and content_type is None:
            content_type = _JSON
        _, _, raw = await self._send(
            method, path, params=params, data=data, content_type=content_type
        )
        return orjson.loads(raw) if raw else {}

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

    async def raw(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str | None = None,
        headers: Mapping[str, str] | None = None,
        request_timeout: float | None = None,
        decode: bool | None = None,
    ) -> Any:
        """Any request to any path (``/version``, ``/openapi/v3``, ``/apis``, ``/healthz``).

        ``body`` bytes are sent as-is, anything else is JSON-encoded. ``decode=True`` returns
        decoded JSON, ``False`` the raw bytes; ``None`` (default) decodes when the answer is
        labelled JSON or looks like a JSON object/array (some endpoints, e.g. ``/openapi/v3``,
        label JSON ``text/plain``), else returns bytes. Retries and errors as for the typed verbs.
        """
        if not path.startswith("/"):
            raise ValueError("path must start with '/'")
        method = method.upper()
        if body is None:
            data = None
        elif isinstance(body, bytes | bytearray):
            data = bytes(body)
        else:
            data = orjson.dumps(body)
            content_type = content_type or _JSON
        _, resp_type, raw = await self._send(
            method,
            path,
            params=params,
            data=data,
            content_type=content_type,
            extra_headers=headers,
            client_timeout=(
                None
                if request_timeout is None
                else aiohttp.ClientTimeout(total=request_timeout, sock_connect=_CONNECT_TIMEOUT)
            ),
        )
        if decode is False:
            return raw
        if decode or "json" in resp_type:
            return orjson.loads(raw) if raw else None
        if raw[:1] in (b"{", b"["):
            try:
                return orjson.loads(raw)
            except orjson.JSONDecodeError:
                return raw
        return raw

    # --- watch plumbing ----------------------------------------------------------------------

    async def _open_watch(
        self, path: str, params: Mapping[str, str], read_timeout: float | None
    ) -> aiohttp.ClientResponse:
        await self._throttle("GET")
        headers = await self._headers_for(None)
        session = self._watches_session()
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=_CONNECT_TIMEOUT, sock_read=read_timeout
        )
        start = time.perf_counter()
        try:
            resp = await session.request(
                "GET",
                self._base + path,
                params=params,
                headers=headers,
                timeout=timeout,
                **self._request_kwargs,
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._observe("GET", "<error>", time.perf_counter() - start)
            raise ApiConnectionError(
                f"{type(exc).__name__}: {exc}", method="WATCH", path=path
            ) from exc
        self._observe("GET", str(resp.status), time.perf_counter() - start)
        if resp.status >= 400:
            try:
                body = await resp.read()
            except (aiohttp.ClientError, TimeoutError, OSError):
                body = b""
            finally:
                resp.release()
            error = api_error_from_response(
                resp.status,
                body,
                method="WATCH",
                path=path,
                retry_after=_retry_after_header(resp.headers.get("Retry-After")),
            )
            if resp.status == 401:
                await self._auth.unauthorized()
            raise error
        return resp


class WatchStream:
    """An open (or about to open) watch; iterate it for :class:`WatchEvent` values.

    ``resource_version`` is the resourceVersion of the last event seen (bookmarks included), the
    point to resume from after the stream ends.
    """

    def __init__(
        self,
        client: Client,
        path: str,
        params: Mapping[str, str],
        read_timeout: float | None,
    ) -> None:
        self._client = client
        self._path = path
        self._params = dict(params)
        self._read_timeout = read_timeout
        self._resp: aiohttp.ClientResponse | None = None
        self._pending: deque[bytes] = deque()
        self._partial = b""
        self._done = False
        self.resource_version: str | None = self._params.get("resourceVersion")

    @property
    def connected(self) -> bool:
        """True while the watch's HTTP response is open."""
        return self._resp is not None

    def __aiter__(self) -> Self:
        return self

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection; further iteration ends at once."""
        self._done = True
        resp, self._resp = self._resp, None
        if resp is not None:
            resp.close()

    async def __anext__(self) -> WatchEvent:
        while True:
            if self._pending:
                line = self._pending.popleft()
                if line.strip():
                    return self._decode(line)
                continue
            if self._done:
                raise StopAsyncIteration
            if self._resp is None:
                try:
                    self._resp = await self._client._open_watch(
                        self._path, self._params, self._read_timeout
                    )
                except BaseException:
                    self._done = True
                    raise
            await self._fill()

    async def _fill(self) -> None:
        assert self._resp is not None
        try:
            chunk = await self._resp.content.readany()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            await self.aclose()
            raise ApiConnectionError(
                f"watch stream broken: {type(exc).__name__}: {exc}", method="WATCH", path=self._path
            ) from exc
        if not chunk:
            if self._partial:
                self._pending.append(self._partial)
                self._partial = b""
            await self.aclose()
            return
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        self._pending.extend(lines)

    def _decode(self, line: bytes) -> WatchEvent:
        try:
            event = orjson.loads(line)
            event_type = event["type"]
            obj = event["object"]
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            self._done = True
            self._pending.clear()
            raise ApiConnectionError(
                f"undecodable watch event: {line[:200]!r}", method="WATCH", path=self._path
            ) from exc
        if event_type == "ERROR":
            self._done = True
            self._pending.clear()
            raise api_error_from_status(obj, method="WATCH", path=self._path)
        rv = obj.get("metadata", {}).get("resourceVersion")
        if rv:
            self.resource_version = rv
        return WatchEvent(event_type, obj)


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
