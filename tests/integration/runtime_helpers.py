"""Helpers for the runtime (informer, controller, manager) integration tests.

``TcpProxy`` sits between a client and the real API server (TLS passes through untouched), so a
test can cut live connections or refuse new ones: a real network fault, not a fake server.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import urllib.request
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.kube import metrics
from agentsandbox.kube.client import Client
from agentsandbox.kube.config import load_kubeconfig
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.resources import Resource

WIDGETS = Resource("test.agentsandbox.dev", "v1", "widgets", "Widget")


def sample(name: str, labels: dict[str, str]) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def informer_metrics(resource: Resource) -> dict[str, float]:
    label = str(resource)
    return {
        "lists": sample("agentsandbox_runtime_informer_lists_total", {"resource": label}),
        "starts": sample("agentsandbox_runtime_informer_watch_starts_total", {"resource": label}),
        **{
            f"ends_{reason}": sample(
                "agentsandbox_runtime_informer_watch_ends_total",
                {"resource": label, "reason": reason},
            )
            for reason in ("closed", "gone", "error")
        },
    }


def etcd_revision(cluster: DevCluster) -> int:
    return int(_etcd(cluster, "/v3/kv/range", {"key": "AA=="})["header"]["revision"])


def compact_etcd(cluster: DevCluster) -> int:
    """Compact etcd's history up to its current revision; returns that revision."""
    revision = etcd_revision(cluster)
    _etcd(cluster, "/v3/kv/compaction", {"revision": str(revision), "physical": True})
    return revision


def _etcd(cluster: DevCluster, path: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        cluster.etcd_url + path, data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


class TcpProxy:
    """A loopback TCP proxy to ``target`` whose connections a test can cut."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.paused = False
        self.port = 0

    @classmethod
    def to(cls, url: str) -> TcpProxy:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        return cls(parts.hostname, parts.port)

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def connections(self) -> int:
        return len(self._pairs)

    def kill_connections(self) -> int:
        """Abort every open connection (both sides see a reset); returns how many."""
        pairs = list(self._pairs)
        for left, right in pairs:
            left.transport.abort()
            right.transport.abort()
        self._pairs.clear()
        return len(pairs)

    def pause(self) -> None:
        """Cut every connection and refuse new ones until :meth:`resume`."""
        self.paused = True
        self.kill_connections()

    def resume(self) -> None:
        self.paused = False

    async def close(self) -> None:
        self.kill_connections()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.paused:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        pair = (writer, up_writer)
        self._pairs.add(pair)
        tasks = [
            asyncio.create_task(self._pipe(reader, up_writer)),
            asyncio.create_task(self._pipe(up_reader, writer)),
        ]
        self._tasks.update(tasks)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
                self._tasks.discard(task)
            self._pairs.discard(pair)
            writer.transport.abort()
            up_writer.transport.abort()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()


async def client_via(kubeconfig: str, url: str, **options: Any) -> Client:
    """A client for the cluster of ``kubeconfig`` that connects through ``url`` (a proxy)."""
    config = await load_kubeconfig(kubeconfig)
    return Client(dataclasses.replace(config, host=url), **options)


class Recorder:
    """Collects informer notifications as ``(type, name)`` (and the objects) in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.objects: list[tuple[str, dict[str, Any]]] = []

    @staticmethod
    def _name(obj: dict[str, Any]) -> str:
        return str(obj["metadata"]["name"])

    def on_add(self, obj: dict[str, Any]) -> None:
        self.events.append(("add", self._name(obj)))
        self.objects.append(("add", obj))

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.events.append(("update", self._name(new)))
        self.objects.append(("update", new))

    def on_delete(self, obj: dict[str, Any]) -> None:
        self.events.append(("delete", self._name(obj)))
        self.objects.append(("delete", obj))

    def of(self, name: str) -> list[str]:
        return [kind for kind, n in self.events if n == name]


@contextlib.asynccontextmanager
async def running(manager: Manager) -> AsyncIterator[asyncio.Task[None]]:
    """Run ``manager`` in a task for the body of the ``with``; stop it and re-raise its error."""
    task = asyncio.create_task(manager.run(handle_signals=False))
    try:
        yield task
    finally:
        manager.stop()
        await asyncio.wait_for(asyncio.shield(task), 30)
