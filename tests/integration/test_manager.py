"""The manager: probes and metrics over HTTP, readiness after sync, clean shutdown on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest

from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.kube.builder import ControllerBuilder
from agentsandbox.kube.client import Client
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.reconcile import Request, Result
from agentsandbox.kube.resources import CONFIGMAPS, LEASES
from tests.polling import eventually

from .runtime_helpers import TcpProxy, client_via, running


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def get(
    http: aiohttp.ClientSession, address: tuple[str, int] | None, path: str
) -> tuple[int, str]:
    assert address is not None
    host, port = address
    async with http.get(f"http://{host}:{port}{path}") as resp:
        return resp.status, await resp.text()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def noop(request: Request) -> Result:
    return Result()


async def test_probes_and_metrics_are_served_and_readyz_waits_for_the_caches(
    cluster: DevCluster, kubeconfig: str, namespace: str, http: aiohttp.ClientSession
) -> None:
    proxy = await TcpProxy.to(cluster.server).start()
    proxy.pause()  # the caches cannot sync yet
    slow = await client_via(kubeconfig, proxy.url, qps=0, max_retries=0)
    try:
        mgr = Manager(
            slow,
            metrics_bind_address="127.0.0.1:0",
            health_probe_bind_address="127.0.0.1:0",
            informer_options={"backoff_base": 0.05, "backoff_cap": 0.5},
        )
        ControllerBuilder(mgr).named("manager-test").for_(CONFIGMAPS, namespace=namespace).complete(
            noop
        )
        async with running(mgr):
            await asyncio.wait_for(mgr.wait_started(), 10)
            assert mgr.metrics_address != mgr.health_probe_address
            assert mgr.health_probe_address is not None
            assert mgr.health_probe_address[0] == "127.0.0.1"
            assert await get(http, mgr.health_probe_address, "/healthz") == (200, "ok")
            status, text = await get(http, mgr.health_probe_address, "/readyz")
            assert status == 500 and "[-]informers-synced failed" in text

            proxy.resume()
            await eventually(lambda: mgr.informers.has_synced(), within=20.0, what="caches synced")
            assert await get(http, mgr.health_probe_address, "/readyz") == (200, "ok")
            status, text = await get(http, mgr.health_probe_address, "/readyz?verbose")
            assert status == 200 and "[+]informers-synced ok" in text
            assert (await get(http, mgr.health_probe_address, "/readyz/readyz"))[0] == 200
            assert (await get(http, mgr.health_probe_address, "/metrics"))[0] == 404

            status, text = await get(http, mgr.metrics_address, "/metrics")
            assert status == 200
            assert (
                'controller_runtime_max_concurrent_reconciles{controller="manager-test"} 1.0'
                in text
            )
            assert "agentsandbox_runtime_informer_lists_total" in text
            assert "workqueue_depth" in text
            assert (await get(http, mgr.metrics_address, "/healthz"))[0] == 404
    finally:
        await slow.close()
        await proxy.close()


async def test_one_address_serves_probes_and_metrics(
    client: Client, http: aiohttp.ClientSession
) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    mgr = Manager(client, metrics_bind_address=address, health_probe_bind_address=address)
    async with running(mgr):
        await asyncio.wait_for(mgr.wait_started(), 10)
        assert mgr.metrics_address == mgr.health_probe_address == ("127.0.0.1", port)
        assert (await get(http, mgr.metrics_address, "/metrics"))[0] == 200
        assert await get(http, mgr.health_probe_address, "/healthz") == (200, "ok")


async def test_zero_disables_the_servers(client: Client) -> None:
    mgr = Manager(client, metrics_bind_address="0", health_probe_bind_address="0")
    async with running(mgr):
        await asyncio.wait_for(mgr.wait_started(), 10)
        assert mgr.metrics_address is None and mgr.health_probe_address is None


async def test_sigterm_drains_reconciles_and_releases_the_lease(
    client: Client, namespace: str, http: aiohttp.ClientSession
) -> None:
    started = asyncio.Event()
    finished: list[str] = []

    async def reconcile(request: Request) -> Result:
        started.set()
        # busy until the shutdown begins, then done: the drain must wait for it
        await eventually(lambda: not mgr.ready(), within=10, what="the manager shutting down")
        finished.append(request.name)
        return Result()

    await client.create(CONFIGMAPS, {"metadata": {"name": "busy"}}, namespace)
    mgr = Manager(
        client,
        health_probe_bind_address="127.0.0.1:0",
        leader_election=True,
        leader_election_id="manager-test",
        leader_election_namespace=namespace,
        lease_duration=3,
        renew_deadline=2,
        retry_period=0.25,
    )
    ControllerBuilder(mgr).named("sigterm-test").for_(CONFIGMAPS, namespace=namespace).complete(
        reconcile
    )
    previous_handler = signal.getsignal(signal.SIGTERM)
    task = asyncio.create_task(mgr.run(handle_signals=True))
    try:
        await asyncio.wait_for(started.wait(), 10)
        assert mgr.is_leader
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(task, 10)
    finally:
        if not task.done():
            mgr.stop()
            await task
    assert finished == ["busy"], "the reconcile in flight was allowed to finish"
    lease = await client.get(LEASES, "manager-test", namespace)
    assert lease["spec"].get("holderIdentity", "") == ""
    assert all(not i.running for i in mgr.informers.informers())
    with pytest.raises(aiohttp.ClientConnectionError):
        await get(http, mgr.health_probe_address, "/healthz")
    assert signal.getsignal(signal.SIGTERM) == previous_handler
