"""The HTTP transport under the API client: connection pools, client-side throttling, retries
(with ``Retry-After``) and request metrics; :class:`~.client.Client` adds the API verbs on top.

What it does, and why:

- A client-side token bucket (QPS/burst, as ``--kube-api-qps``/``--kube-api-burst``) paces every
  request, retries included.
- Retries, with jittered exponential backoff: a 429 is retried for every verb (the server refused
  before doing anything) honouring ``Retry-After``, and so is a 5xx that carries ``Retry-After``
  (the server asks for it, e.g. a restarting kube-apiserver's 503 "before all known HTTP paths
  have been installed"; client-go's ``checkWait`` does the same); a failed connect is retried for
  every verb (nothing was sent); connection resets and other 5xx answers only for GET, because a
  POST that may have reached the server must not be blindly repeated. A request that timed out
  is never sent again (client-go retries a GET only after a reset or an early close), so one slow
  answer holds a worker for one request timeout, not ``max_retries + 1`` of them.
- Two connection pools: requests share one sized by ``pool_size``; watches get their own,
  unbounded, so long-lived watches never starve ordinary requests.
- client-go's ``rest_client_*`` metrics for every request.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

import aiohttp
import orjson

from agentsandbox import __version__

from . import metrics
from .config import AuthProvider, ClusterConfig
from .errors import (
    ApiConnectionError,
    ServerError,
    TooManyRequests,
    api_error_from_response,
)
from .ratelimit import TokenBucket

__all__ = [
    "DEFAULT_BURST",
    "DEFAULT_POOL_SIZE",
    "DEFAULT_QPS",
    "JsonObject",
    "Transport",
]

log = logging.getLogger("agentsandbox.kube.client")

JsonObject = dict[str, Any]

DEFAULT_QPS = 20.0
DEFAULT_BURST = 30
DEFAULT_POOL_SIZE = 100
_USER_AGENT = f"agentsandbox/{__version__} (python; aiohttp)"
_JSON = "application/json"
_SAFE_METHODS = frozenset({"GET", "HEAD"})
_CONNECT_TIMEOUT = 10.0
_READ_BUFSIZE = 2**18


def _retry_after_header(value: str | None) -> float | None:
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date; the Status details carry retryAfterSeconds too
    return seconds if seconds >= 0 else None


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


class Transport:
    """Sends requests to one API server for one event loop (connection pools open on first use):
    throttled, retried, measured. Close it when done (``async with`` does)."""

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
        compression: bool = False,
    ) -> None:
        """
        ``qps <= 0`` disables client-side rate limiting. ``pool_size`` bounds concurrent
        non-watch connections (size it to the worker count); ``watch_pool_size`` bounds watch
        connections (0 = unbounded). ``compression=False`` asks the server for identity encoding:
        on loopback or a cluster network gzip costs CPU on both sides for nothing.
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
                connect_failed = isinstance(
                    exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError
                )
                timed_out = isinstance(exc, TimeoutError) and not connect_failed
                retriable = connect_failed or (safe and not timed_out)
                delay = retry.next_delay() if retriable else None
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
