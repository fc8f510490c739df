"""A watch's event stream: :class:`WatchStream` reads the server's newline-delimited events."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from types import TracebackType
from typing import NamedTuple, Self

import aiohttp
import orjson

from .errors import ApiConnectionError, api_error_from_status
from .transport import JsonObject, Transport

__all__ = ["WatchEvent", "WatchStream"]


class WatchEvent(NamedTuple):
    """One watch event: ``type`` is ADDED, MODIFIED, DELETED or BOOKMARK."""

    type: str
    object: JsonObject


class WatchStream:
    """An open (or about to open) watch; iterate it for :class:`WatchEvent` values.

    ``resource_version`` is the resourceVersion of the last event seen (bookmarks included), the
    point to resume from after the stream ends.
    """

    def __init__(
        self,
        client: Transport,
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
