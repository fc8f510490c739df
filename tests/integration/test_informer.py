"""Informers against the real API server: ordering, indexes, and recovery from real faults.

Each fault test asserts through the informer metrics that the fault really happened (a watch
ended with 410, a connection broke, a relist ran), so a test cannot pass by luck.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.devcluster.process import ClusterStartError, Component
from agentsandbox.kube.client import Client
from agentsandbox.kube.informer import Informer, InformerFactory
from agentsandbox.kube.resources import CONFIGMAPS, EVENTS
from agentsandbox.kube.store import index_by_label
from tests.polling import eventually

from .runtime_helpers import (
    Recorder,
    TcpProxy,
    client_via,
    compact_etcd,
    etcd_revision,
    informer_metrics,
)


def configmap(name: str, value: str = "1", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"v": value},
    }


def event(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "eventTime": "2025-01-01T00:00:00.000000Z",
        "reportingController": "test.agentsandbox.dev/informer-test",
        "reportingInstance": "pytest",
        "action": "Test",
        "reason": "Test",
        "type": "Normal",
        "regarding": {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "namespace": namespace},
    }


def relaunch(component: Component, cwd: Path) -> None:
    """Start a stopped control plane process again with the same command line and log."""
    with component.log.open("ab") as out:
        component.proc = subprocess.Popen(
            component.argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
        )


def start_private_cluster(tmp_path: Path, bin_dir: Path | None) -> DevCluster:
    """A one-node control plane of our own. kwok 0.8 sometimes dies at start-up with "fatal
    error: concurrent map writes" (in easycel), which has nothing to do with this test: retry."""
    for attempt in range(3):
        small = DevCluster(tmp_path / f"cluster-{attempt}", nodes=1, bin_dir=bin_dir)
        try:
            small.start()
        except ClusterStartError:
            if attempt == 2:
                raise
            continue
        return small
    raise AssertionError("unreachable")


@pytest.fixture
async def proxy(cluster: DevCluster) -> AsyncIterator[TcpProxy]:
    p = await TcpProxy.to(cluster.server).start()
    yield p
    await p.close()


@pytest.fixture
async def proxied(kubeconfig: str, proxy: TcpProxy) -> AsyncIterator[Client]:
    c = await client_via(kubeconfig, proxy.url, qps=0, max_retries=0)
    yield c
    await c.close()


async def test_informer_sees_create_update_delete_in_order(client: Client, namespace: str) -> None:
    informer = Informer(client, CONFIGMAPS, namespace)
    seen = Recorder()
    informer.add_handler(seen.on_add, seen.on_update, seen.on_delete)
    async with informer:
        await asyncio.wait_for(informer.wait_synced(), 10)
        await client.create(CONFIGMAPS, configmap("a"), namespace)
        await client.patch(CONFIGMAPS, "a", {"data": {"v": "2"}}, namespace)
        await client.delete(CONFIGMAPS, "a", namespace)
        await eventually(lambda: len(seen.of("a")) >= 3, within=20.0, what="three notifications")
    assert seen.of("a") == ["add", "update", "delete"]
    update = seen.objects[1][1]
    assert update["data"] == {"v": "2"}
    assert informer.get("a", namespace) is None


async def test_cache_drops_managed_fields_and_indexes_by_label(
    client: Client, namespace: str
) -> None:
    await client.create(CONFIGMAPS, configmap("red-1", app="red"), namespace)
    await client.create(CONFIGMAPS, configmap("blue-1", app="blue"), namespace)
    informer = Informer(client, CONFIGMAPS, namespace, indexers={"app": index_by_label("app")})
    async with informer:
        await asyncio.wait_for(informer.wait_synced(), 10)
        cached = informer.get("red-1", namespace)
        assert cached is not None and "managedFields" not in cached["metadata"]
        assert cached["kind"] == "ConfigMap"
        assert [o["metadata"]["name"] for o in informer.by_index("app", "red")] == ["red-1"]
        await client.patch(
            CONFIGMAPS, "red-1", {"metadata": {"labels": {"app": "blue"}}}, namespace
        )
        await eventually(
            lambda: len(informer.by_index("app", "blue")) == 2, within=20.0, what="re-index"
        )
        assert informer.by_index("app", "red") == []


async def test_label_selector_scopes_the_cache(client: Client, namespace: str) -> None:
    informer = Informer(client, CONFIGMAPS, namespace, label_selector="app=mine")
    seen = Recorder()
    informer.add_handler(seen.on_add, seen.on_update, seen.on_delete)
    async with informer:
        await asyncio.wait_for(informer.wait_synced(), 10)
        await client.create(CONFIGMAPS, configmap("theirs", app="theirs"), namespace)
        await client.create(CONFIGMAPS, configmap("mine", app="mine"), namespace)
        await eventually(lambda: seen.of("mine") == ["add"], within=20.0, what="add of mine")
        # Relabelling an object out of the selector looks like a deletion to the informer.
        await client.patch(CONFIGMAPS, "mine", {"metadata": {"labels": {"app": "x"}}}, namespace)
        await eventually(
            lambda: seen.of("mine") == ["add", "delete"], within=20.0, what="delete of mine"
        )
    assert seen.of("theirs") == []


async def test_a_handler_added_after_sync_gets_adds_for_existing_objects(
    client: Client, namespace: str
) -> None:
    for name in ("x", "y"):
        await client.create(CONFIGMAPS, configmap(name), namespace)
    factory = InformerFactory(client)
    informer = factory.get_informer(CONFIGMAPS, namespace)
    assert factory.get_informer(CONFIGMAPS, namespace) is informer
    factory.start()
    try:
        await asyncio.wait_for(factory.wait_synced(), 10)
        late = Recorder()
        informer.add_handler(late.on_add, late.on_update, late.on_delete)
        assert sorted(late.events) == [("add", "x"), ("add", "y")]
    finally:
        await factory.stop()


async def test_resync_redelivers_cached_objects_as_updates(client: Client, namespace: str) -> None:
    await client.create(CONFIGMAPS, configmap("steady"), namespace)
    informer = Informer(client, CONFIGMAPS, namespace, resync_period=0.2)
    resynced: list[bool] = []
    informer.add_handler(on_update=lambda old, new: resynced.append(old is new))
    async with informer:
        await eventually(lambda: len(resynced) >= 2, within=20.0, what="two resyncs")
    assert all(resynced)


async def test_relist_after_410_reports_objects_deleted_meanwhile(
    cluster: DevCluster,
    client: Client,
    proxied: Client,
    proxy: TcpProxy,
    namespace: str,
) -> None:
    # Events are not served from the API server's watch cache, so compacting etcd past the
    # informer's resourceVersion makes its next watch fail with 410 Gone.
    for name in ("stays", "goes"):
        await client.create(EVENTS, event(name, namespace), namespace)
    informer = Informer(proxied, EVENTS, namespace, backoff_base=0.05)
    seen = Recorder()
    informer.add_handler(seen.on_add, seen.on_update, seen.on_delete)
    async with informer:
        await asyncio.wait_for(informer.wait_synced(), 10)
        await eventually(lambda: informer.watching, within=20.0, what="watch open")
        before = informer_metrics(EVENTS)
        watched_from = int(informer.resource_version or 0)

        proxy.pause()  # the watch breaks; re-watches are refused while history is destroyed
        await client.delete(EVENTS, "goes", namespace)
        await client.create(EVENTS, event("new", namespace), namespace)
        compacted = compact_etcd(cluster)
        assert compacted > watched_from + 1
        await eventually(
            lambda: informer_metrics(EVENTS)["ends_error"] > before["ends_error"],
            within=20.0,
            what="the watch to break",
        )
        proxy.resume()

        await eventually(
            lambda: "delete" in seen.of("goes"), within=20.0, what="deletion via relist"
        )
        await eventually(lambda: "add" in seen.of("new"), within=20.0, what="addition via relist")
    after = informer_metrics(EVENTS)
    assert after["ends_gone"] > before["ends_gone"], "the watch never got 410 Gone"
    assert after["lists"] > before["lists"], "no relist happened"
    assert seen.of("stays") == ["add"]  # unchanged objects are not re-announced by the relist
    assert {o["metadata"]["name"] for o in informer.list()} == {"stays", "new"}
    assert etcd_revision(cluster) >= compacted


async def test_a_killed_connection_resumes_from_the_last_resource_version(
    client: Client, proxied: Client, proxy: TcpProxy, namespace: str
) -> None:
    await client.create(CONFIGMAPS, configmap("victim"), namespace)
    informer = Informer(proxied, CONFIGMAPS, namespace, backoff_base=0.05)
    seen = Recorder()
    informer.add_handler(seen.on_add, seen.on_update, seen.on_delete)
    async with informer:
        await asyncio.wait_for(informer.wait_synced(), 10)
        await eventually(lambda: informer.watching, within=20.0, what="watch open")
        before = informer_metrics(CONFIGMAPS)
        proxy.pause()
        await client.delete(CONFIGMAPS, "victim", namespace)
        await client.create(CONFIGMAPS, configmap("born"), namespace)
        await eventually(
            lambda: informer_metrics(CONFIGMAPS)["ends_error"] > before["ends_error"],
            within=20.0,
            what="the watch to break",
        )
        proxy.resume()
        await eventually(
            lambda: seen.of("victim") == ["add", "delete"], within=20.0, what="the deletion"
        )
        await eventually(lambda: seen.of("born") == ["add"], within=20.0, what="the addition")
    after = informer_metrics(CONFIGMAPS)
    assert after["lists"] == before["lists"], "resumed by re-watching, without a relist"
    assert after["starts"] > before["starts"]


async def test_server_side_watch_timeouts_lose_nothing(client: Client, namespace: str) -> None:
    informer = Informer(client, CONFIGMAPS, namespace, min_watch_timeout=1)
    seen = Recorder()
    informer.add_handler(seen.on_add, seen.on_update, seen.on_delete)
    async with informer:
        await asyncio.wait_for(informer.wait_synced(), 10)
        before = informer_metrics(CONFIGMAPS)
        await client.create(CONFIGMAPS, configmap("t"), namespace)
        for value in range(3):
            closed = informer_metrics(CONFIGMAPS)["ends_closed"]
            await eventually(  # the server ends a watch (1 s) between two writes
                lambda closed=closed: informer_metrics(CONFIGMAPS)["ends_closed"] > closed,
                within=10,
                what="a watch timed out by the server",
            )
            await client.patch(CONFIGMAPS, "t", {"data": {"v": str(value)}}, namespace)
        await client.delete(CONFIGMAPS, "t", namespace)
        await eventually(lambda: "delete" in seen.of("t"), within=20.0, what="the deletion")
    after = informer_metrics(CONFIGMAPS)
    assert seen.of("t") == ["add", "update", "update", "update", "delete"]
    assert after["ends_closed"] > before["ends_closed"], "no watch timed out"
    assert after["lists"] == before["lists"]


async def test_informer_recovers_when_the_apiserver_restarts(
    cluster: DevCluster, tmp_path: Path
) -> None:
    # A private control plane: restarting the shared one would disturb other tests.
    small = start_private_cluster(tmp_path, cluster.bin_dir)
    try:
        small.api("POST", "/api/v1/namespaces", {"metadata": {"name": "restart"}})
        for name in ("keep", "drop"):
            body = {"metadata": {"name": name}, "data": {}}
            small.api("POST", "/api/v1/namespaces/restart/configmaps", body)
        async with Client.from_kubeconfig(str(small.kubeconfig), qps=0, max_retries=1) as c:
            informer = Informer(c, CONFIGMAPS, "restart", backoff_base=0.1, backoff_cap=1.0)
            seen = Recorder()
            informer.add_handler(seen.on_add, seen.on_update, seen.on_delete)
            async with informer:
                await asyncio.wait_for(informer.wait_synced(), 10)
                await eventually(lambda: informer.watching, within=20.0, what="watch open")
                before = informer_metrics(CONFIGMAPS)

                apiserver = small.components["kube-apiserver"]
                assert apiserver.proc is not None
                apiserver.proc.kill()  # a crash; a graceful stop waits out open watches
                await asyncio.to_thread(apiserver.proc.wait, 30)
                await eventually(
                    lambda: informer_metrics(CONFIGMAPS)["ends_error"] > before["ends_error"],
                    within=20.0,
                    what="the watch to break",
                )
                await asyncio.to_thread(relaunch, apiserver, small.workdir)
                await eventually(
                    lambda: apiserver.health(), within=60, what="apiserver ready", interval=0.2
                )
                restarted = time.monotonic()
                small.api("DELETE", "/api/v1/namespaces/restart/configmaps/drop")
                small.api(
                    "POST",
                    "/api/v1/namespaces/restart/configmaps",
                    {"metadata": {"name": "after"}, "data": {}},
                )
                await eventually(
                    lambda: "delete" in seen.of("drop"), within=20.0, what="the deletion"
                )
                await eventually(
                    lambda: "add" in seen.of("after"), within=20.0, what="the addition"
                )
                await eventually(lambda: informer.watching, within=20.0, what="watching again")
                recovered = time.monotonic() - restarted
            after = informer_metrics(CONFIGMAPS)
        assert after["starts"] > before["starts"] + 1  # at least one failed and one good re-watch
        assert seen.of("keep") == ["add"]
        assert recovered < 15
    finally:
        small.stop(keep_logs=False)
