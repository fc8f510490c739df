"""The client retries a 5xx that carries ``Retry-After`` for every verb (client-go's checkWait),
and never repeats a write the server answered with a 5xx without it. Against a loopback aiohttp
server, no cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web
from kubernetes_asyncio.client import Configuration

from agentsandbox.kube.client import Client
from agentsandbox.kube.config import AuthProvider, ClusterConfig
from agentsandbox.kube.errors import ServerTimeout, ServiceUnavailable
from agentsandbox.kube.resources import CONFIGMAPS


def _status(code: int, reason: str, message: str) -> bytes:
    return orjson.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "code": code,
            "reason": reason,
            "message": message,
        }
    )


class Server:
    """Answers POSTs with ``answers`` in turn (status, Retry-After or None), then 201."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, str | None]] = []
        self.posts = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.posts += 1
        body = await request.json()
        if self.answers:
            code, retry_after = self.answers.pop(0)
            headers = {"Retry-After": retry_after} if retry_after is not None else {}
            reason = {503: "ServiceUnavailable", 504: "Timeout"}[code]
            return web.Response(
                status=code,
                body=_status(code, reason, "try again"),
                headers=headers,
                content_type="application/json",
            )
        return web.Response(status=201, body=orjson.dumps(body), content_type="application/json")


@pytest.fixture
async def served() -> AsyncIterator[tuple[Server, Client]]:
    server = Server()
    app = web.Application()
    app.router.add_post("/api/v1/namespaces/{ns}/configmaps", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    config = ClusterConfig(f"http://127.0.0.1:{port}", None, AuthProvider(Configuration()))
    client = Client(config, qps=0, max_retries=3, retry_backoff_base=0.01)
    try:
        yield server, client
    finally:
        await client.close()
        await runner.cleanup()


CM: dict[str, Any] = {"metadata": {"name": "x"}}


async def test_a_503_with_retry_after_is_retried_for_a_create(
    served: tuple[Server, Client],
) -> None:
    server, client = served
    server.answers = [(503, "0"), (503, "0")]
    created = await client.create(CONFIGMAPS, CM, "ns")
    assert created["metadata"]["name"] == "x"
    assert server.posts == 3


async def test_a_503_without_retry_after_is_not_repeated_for_a_create(
    served: tuple[Server, Client],
) -> None:
    server, client = served
    server.answers = [(503, None)]
    with pytest.raises(ServiceUnavailable):
        await client.create(CONFIGMAPS, CM, "ns")
    assert server.posts == 1


async def test_a_504_timeout_of_a_create_is_never_repeated(
    served: tuple[Server, Client],
) -> None:
    """The write may still be going on: only the caller knows whether repeating it is safe."""
    server, client = served
    server.answers = [(504, None)]
    with pytest.raises(ServerTimeout):
        await client.create(CONFIGMAPS, CM, "ns")
    assert server.posts == 1


async def test_retry_after_503s_give_up_after_max_retries(
    served: tuple[Server, Client],
) -> None:
    server, client = served
    server.answers = [(503, "0")] * 10
    with pytest.raises(ServiceUnavailable):
        await client.create(CONFIGMAPS, CM, "ns")
    assert server.posts == 4  # the first try and 3 retries
