"""Security review note #14 ("GETs are retried for up to 5 x 60 s"): retries are bounded as
client-go's are. A GET that timed out is not sent again (client-go retries a GET only when the
connection was reset or closed early), so one slow answer holds a worker for one request timeout,
not six; a GET whose connection was cut is still retried. Against a loopback aiohttp server, no
cluster; nothing asserts on elapsed time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web
from kubernetes_asyncio.client import Configuration

from agentsandbox.kube.client import Client
from agentsandbox.kube.config import AuthProvider, ClusterConfig
from agentsandbox.kube.errors import ApiConnectionError
from agentsandbox.kube.resources import CONFIGMAPS


class Server:
    """GET answers: ``hang`` first requests never answer, ``cut`` next ones lose the connection,
    then the ConfigMap."""

    def __init__(self) -> None:
        self.hang = 0
        self.cut = 0
        self.gets = 0
        self.release = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.gets += 1
        if self.hang:
            self.hang -= 1
            await self.release.wait()
        elif self.cut:
            self.cut -= 1
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        body = {"metadata": {"name": "x", "namespace": "ns"}}
        return web.Response(body=orjson.dumps(body), content_type="application/json")


@pytest.fixture
async def served() -> AsyncIterator[tuple[Server, Client]]:
    server = Server()
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{ns}/configmaps/{name}", server.handle)
    runner = web.AppRunner(app, shutdown_timeout=0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    config = ClusterConfig(f"http://127.0.0.1:{port}", None, AuthProvider(Configuration()))
    client = Client(config, qps=0, max_retries=5, retry_backoff_base=0.01, request_timeout=0.3)
    try:
        yield server, client
    finally:
        server.release.set()
        await client.close()
        await runner.cleanup()


async def test_a_get_that_timed_out_is_not_sent_again(served: tuple[Server, Client]) -> None:
    """Security review note #14: one timeout, one request (it was 1 + 5 retries)."""
    server, client = served
    server.hang = 10
    with pytest.raises(ApiConnectionError):
        await client.get(CONFIGMAPS, "x", "ns")
    assert server.gets == 1


async def test_a_get_whose_connection_was_cut_is_retried(served: tuple[Server, Client]) -> None:
    """Security review note #14: a reset or early close is still retried, as client-go does."""
    server, client = served
    server.cut = 2
    got = await client.get(CONFIGMAPS, "x", "ns")
    assert got["metadata"]["name"] == "x"
    assert server.gets == 3
