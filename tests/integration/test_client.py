"""The API client against the real local kube-apiserver: verbs, patches, watch, errors, metrics."""

from __future__ import annotations

import asyncio
import datetime
import socket
import ssl
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import Configuration

from agentsandbox.kube import metrics
from agentsandbox.kube.client import Client, PatchType
from agentsandbox.kube.config import (
    AuthProvider,
    ClusterConfig,
    ConfigError,
    load_config,
    load_incluster_config,
    load_kubeconfig,
)
from agentsandbox.kube.errors import (
    AlreadyExists,
    ApiConnectionError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    TooManyRequests,
    Unauthorized,
)
from agentsandbox.kube.resources import (
    CONFIGMAPS,
    CUSTOMRESOURCEDEFINITIONS,
    NAMESPACES,
    NODES,
    PODS,
    Resource,
)
from agentsandbox.kube.watch import WatchEvent
from tests.polling import eventually

from .auth_helpers import ca_file, service_account_token, whoami


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def configmap(name: str | None = None, data: dict[str, str] | None = None, **meta: Any) -> Any:
    metadata: dict[str, Any] = dict(meta)
    if name is not None:
        metadata["name"] = name
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data or {}}


def counter(name: str, labels: dict[str, str]) -> float:
    value = metrics.REGISTRY.get_sample_value(name, labels)
    return value or 0.0


@pytest.fixture
async def ns(client: Client) -> AsyncIterator[str]:
    """A namespace of this test's own, created and deleted with the client under test."""
    name = unique("client")
    await client.create(NAMESPACES, {"metadata": {"name": name}})
    yield name
    await client.delete(NAMESPACES, name)


# --- configuration ---------------------------------------------------------------------------


async def test_a_missing_kubeconfig_is_a_one_line_config_error(tmp_path: Any) -> None:
    missing = str(tmp_path / "nope" / "kubeconfig")
    with pytest.raises(ConfigError) as info:
        await load_kubeconfig(missing)
    assert str(info.value) == f"kubeconfig {missing} not found"


async def test_a_garbage_kubeconfig_is_a_one_line_config_error(tmp_path: Any) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("this: [is not\n a kubeconfig")
    with pytest.raises(ConfigError) as info:
        await load_kubeconfig(str(path))
    assert "\n" not in str(info.value)
    assert str(path) in str(info.value)


async def test_load_config_prefers_kubeconfig_env(
    kubeconfig: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    cfg = await load_config()
    assert cfg.host.startswith("https://127.0.0.1:")
    assert cfg.ssl_context is not None
    async with Client(cfg) as c:
        version = await c.raw("GET", "/version")
    assert version["gitVersion"].startswith("v1.")


async def test_admin_kubeconfig_authenticates_by_client_certificate(kubeconfig: str) -> None:
    cfg = await load_kubeconfig(kubeconfig)
    assert await cfg.auth.header() is None  # the admin user is a client cert, no token
    async with Client(cfg) as c:
        review = await c.create(
            Resource(
                "authentication.k8s.io",
                "v1",
                "selfsubjectreviews",
                "SelfSubjectReview",
                namespaced=False,
            ),
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    assert "system:masters" in review["status"]["userInfo"]["groups"]


# --- CRUD ------------------------------------------------------------------------------------


async def test_configmap_crud_and_its_errors(client: Client, ns: str) -> None:
    created = await client.create(
        CONFIGMAPS, configmap(data={"a": "1"}, generateName="gen-"), namespace=ns
    )
    name = created["metadata"]["name"]
    assert name.startswith("gen-") and len(name) > len("gen-")
    assert created["metadata"]["namespace"] == ns

    got = await client.get(CONFIGMAPS, name, ns)
    assert got["data"] == {"a": "1"}
    assert got["metadata"]["uid"] == created["metadata"]["uid"]

    fresh = {**got, "data": {"a": "2"}}
    updated = await client.update(CONFIGMAPS, fresh)
    assert updated["data"] == {"a": "2"}
    assert updated["metadata"]["resourceVersion"] != got["metadata"]["resourceVersion"]

    stale = {**got, "data": {"a": "3"}}  # still carries the old resourceVersion
    with pytest.raises(Conflict) as conflict:
        await client.update(CONFIGMAPS, stale)
    assert conflict.value.status == 409
    assert "the object has been modified" in conflict.value.message

    with pytest.raises(Conflict) as precondition:
        await client.delete(CONFIGMAPS, name, ns, uid=str(uuid.uuid4()))
    assert "the UID in the precondition" in precondition.value.message
    assert (await client.get(CONFIGMAPS, name, ns))["data"] == {"a": "2"}

    with pytest.raises(Conflict):
        await client.delete(
            CONFIGMAPS, name, ns, resource_version=got["metadata"]["resourceVersion"]
        )

    await client.delete(
        CONFIGMAPS,
        name,
        ns,
        uid=created["metadata"]["uid"],
        resource_version=updated["metadata"]["resourceVersion"],
    )
    with pytest.raises(NotFound) as not_found:
        await client.get(CONFIGMAPS, name, ns)
    assert not_found.value.details.get("name") == name
    assert str(not_found.value).startswith(f'404 NotFound: configmaps "{name}" not found')

    await client.create(CONFIGMAPS, configmap("twice"), namespace=ns)
    with pytest.raises(AlreadyExists) as exists:
        await client.create(CONFIGMAPS, configmap("twice"), namespace=ns)
    assert exists.value.reason == "AlreadyExists"
    assert not isinstance(exists.value, Conflict)


async def test_namespace_comes_from_the_object_when_not_given(client: Client, ns: str) -> None:
    created = await client.create(CONFIGMAPS, configmap("in-meta", namespace=ns))
    assert created["metadata"]["namespace"] == ns
    with pytest.raises(ValueError, match="namespaced"):
        await client.create(CONFIGMAPS, configmap("nowhere"))


async def test_list_follows_continue_tokens(client: Client, ns: str) -> None:
    for i in range(5):
        await client.create(
            CONFIGMAPS, configmap(f"page-{i}", labels={"set": "paged"}), namespace=ns
        )
    await client.create(CONFIGMAPS, configmap("other", labels={"set": "other"}), namespace=ns)

    first = await client.list_page(CONFIGMAPS, ns, label_selector="set=paged", limit=2)
    assert len(first["items"]) == 2
    assert first["metadata"]["continue"]
    unfiltered = await client.list_page(CONFIGMAPS, ns, limit=2)
    assert unfiltered["metadata"]["remainingItemCount"] == 4  # 6 objects, 2 returned

    host = client.host.split("://", 1)[1]
    labels = {"code": "200", "method": "GET", "host": host}
    before = counter("rest_client_requests_total", labels)
    listed = await client.list(CONFIGMAPS, ns, label_selector="set=paged", limit=2)
    assert counter("rest_client_requests_total", labels) - before == 3  # pages of 2, 2, 1
    assert sorted(i["metadata"]["name"] for i in listed.items) == [f"page-{i}" for i in range(5)]
    assert int(listed.resource_version) > 0
    assert all(i["kind"] == "ConfigMap" and i["apiVersion"] == "v1" for i in listed.items)

    selected = await client.list(CONFIGMAPS, ns, field_selector="metadata.name=other")
    assert [i["metadata"]["name"] for i in selected.items] == ["other"]


async def test_cluster_scoped_resources(client: Client, ns: str) -> None:
    got = await client.get(NAMESPACES, ns)
    assert got["status"]["phase"] == "Active"
    nodes = await client.list(NODES)
    assert len(nodes) >= 1
    assert all(n["kind"] == "Node" for n in nodes.items)
    everywhere = await client.list(NAMESPACES, label_selector=f"kubernetes.io/metadata.name={ns}")
    assert [n["metadata"]["name"] for n in everywhere.items] == [ns]


async def test_delete_returns_the_object_while_a_finalizer_holds_it(
    client: Client, ns: str
) -> None:
    await client.create(
        CONFIGMAPS, configmap("held", finalizers=["example.com/hold"]), namespace=ns
    )
    answer = await client.delete(CONFIGMAPS, "held", ns, propagation_policy="Foreground")
    assert answer["kind"] == "ConfigMap"
    assert answer["metadata"]["deletionTimestamp"]
    await client.patch(CONFIGMAPS, "held", {"metadata": {"finalizers": None}}, ns)
    with pytest.raises(NotFound):
        await client.get(CONFIGMAPS, "held", ns)


async def test_delete_collection(client: Client, ns: str) -> None:
    for i in range(3):
        await client.create(CONFIGMAPS, configmap(f"dc-{i}", labels={"dc": "yes"}), namespace=ns)
    await client.delete_collection(CONFIGMAPS, ns, label_selector="dc=yes")
    assert len(await client.list(CONFIGMAPS, ns, label_selector="dc=yes")) == 0


async def test_an_invalid_object_carries_the_servers_message(client: Client, ns: str) -> None:
    with pytest.raises(Invalid) as info:
        await client.create(CONFIGMAPS, configmap("Not_A_Valid_Name"), namespace=ns)
    err = info.value
    assert err.status == 422
    assert 'ConfigMap "Not_A_Valid_Name" is invalid' in err.message
    assert "metadata.name" in err.message
    assert any(c.get("field") == "metadata.name" for c in err.causes)
    assert "\n" not in str(err)


# --- patches and apply -----------------------------------------------------------------------


async def test_json_merge_patch(client: Client, ns: str) -> None:
    await client.create(CONFIGMAPS, configmap("m", {"keep": "1", "drop": "2"}), namespace=ns)
    patched = await client.patch(
        CONFIGMAPS, "m", {"data": {"drop": None, "add": "3"}}, ns, patch_type=PatchType.MERGE
    )
    assert patched["data"] == {"keep": "1", "add": "3"}


async def test_json_patch(client: Client, ns: str) -> None:
    await client.create(CONFIGMAPS, configmap("j", {"a": "1", "b": "2"}), namespace=ns)
    patched = await client.patch(
        CONFIGMAPS,
        "j",
        [
            {"op": "test", "path": "/data/a", "value": "1"},
            {"op": "replace", "path": "/data/a", "value": "10"},
            {"op": "remove", "path": "/data/b"},
            {"op": "add", "path": "/metadata/labels", "value": {"patched": "yes"}},
        ],
        ns,
        patch_type=PatchType.JSON,
    )
    assert patched["data"] == {"a": "10"}
    assert patched["metadata"]["labels"] == {"patched": "yes"}
    with pytest.raises(Exception) as failed_test:
        await client.patch(
            CONFIGMAPS,
            "j",
            [{"op": "test", "path": "/data/a", "value": "nope"}],
            ns,
            patch_type=PatchType.JSON,
        )
    assert "\n" not in str(failed_test.value)


async def test_strategic_merge_patch_merges_containers_by_name(client: Client, ns: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "smp", "labels": {"a": "1"}},
        "spec": {
            "containers": [
                {"name": "main", "image": "registry.example/app:1"},
                {"name": "side", "image": "registry.example/side:1"},
            ]
        },
    }
    await client.create(PODS, pod, namespace=ns)
    patched = await client.patch(
        PODS,
        "smp",
        {
            "metadata": {"labels": {"b": "2"}},
            "spec": {"containers": [{"name": "main", "image": "registry.example/app:2"}]},
        },
        ns,
        patch_type=PatchType.STRATEGIC,
    )
    assert patched["metadata"]["labels"] == {"a": "1", "b": "2"}
    images = {c["name"]: c["image"] for c in patched["spec"]["containers"]}
    assert images == {"main": "registry.example/app:2", "side": "registry.example/side:1"}
    await client.delete(PODS, "smp", ns, grace_period_seconds=0)


async def test_server_side_apply_records_the_field_manager_and_force_wins(
    client: Client, ns: str
) -> None:
    intent = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "ssa", "namespace": ns},
        "data": {"owned": "by-a"},
    }
    applied = await client.apply(CONFIGMAPS, intent, field_manager="manager-a")
    managers = {m["manager"]: m for m in applied["metadata"]["managedFields"]}
    assert managers["manager-a"]["operation"] == "Apply"
    assert "f:owned" in str(managers["manager-a"]["fieldsV1"])

    rival = {**intent, "data": {"owned": "by-b"}}
    with pytest.raises(Conflict) as conflict:
        await client.apply(CONFIGMAPS, rival, field_manager="manager-b")
    assert "manager-a" in conflict.value.message

    forced = await client.apply(CONFIGMAPS, rival, field_manager="manager-b", force=True)
    assert forced["data"] == {"owned": "by-b"}
    assert "manager-b" in {m["manager"] for m in forced["metadata"]["managedFields"]}

    dry = await client.apply(
        CONFIGMAPS, {**intent, "data": {"owned": "dry"}}, field_manager="manager-b", dry_run=True
    )
    assert dry["data"] == {"owned": "dry"}
    assert (await client.get(CONFIGMAPS, "ssa", ns))["data"] == {"owned": "by-b"}


# --- subresources on a custom resource -------------------------------------------------------


@pytest.fixture
async def widgets(client: Client) -> AsyncIterator[Resource]:
    """A throw-away CRD with status and scale subresources, Established before use."""
    group = f"{uuid.uuid4().hex[:8]}.client-test.example.com"
    crd: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"replicas": {"type": "integer", "minimum": 0}},
                                },
                                "status": {
                                    "type": "object",
                                    "properties": {
                                        "replicas": {"type": "integer"},
                                        "phase": {"type": "string"},
                                    },
                                },
                            },
                        }
                    },
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                        },
                    },
                }
            ],
        },
    }
    name = f"widgets.{group}"
    await client.create(CUSTOMRESOURCEDEFINITIONS, crd)

    async def established() -> bool:
        got = await client.get(CUSTOMRESOURCEDEFINITIONS, name)
        status = got.get("status") or {}
        conds = {c["type"]: c["status"] for c in status.get("conditions") or []}
        return conds.get("Established") == "True"

    await eventually(established, within=30.0, what=f"CRD {name} Established")
    resource = Resource(group, "v1", "widgets", "Widget")

    async def served() -> bool:
        try:
            await client.list(resource, "default")
        except NotFound:
            return False
        return True

    await eventually(served, within=30.0, what="the widgets endpoint")
    yield resource
    await client.delete(CUSTOMRESOURCEDEFINITIONS, name)


async def test_status_and_scale_subresources(client: Client, ns: str, widgets: Resource) -> None:
    obj = {
        "apiVersion": widgets.api_version,
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"replicas": 2},
    }
    created = await client.create(widgets, obj, namespace=ns)
    assert "status" not in created

    with_status = {
        **created,
        "status": {"replicas": 1, "phase": "Growing"},
        "spec": {"replicas": 9},
    }
    after_status = await client.update_status(widgets, with_status)
    assert after_status["status"] == {"replicas": 1, "phase": "Growing"}
    assert after_status["spec"] == {"replicas": 2}  # the status endpoint ignores spec

    status_patched = await client.patch(
        widgets, "w", {"status": {"phase": "Ready"}}, ns, subresource="status"
    )
    assert status_patched["status"] == {"replicas": 1, "phase": "Ready"}
    status_view = await client.get(widgets, "w", ns, subresource="status")
    assert status_view["status"]["phase"] == "Ready"

    scale = await client.get(widgets, "w", ns, subresource="scale")
    assert scale["kind"] == "Scale"
    assert scale["spec"]["replicas"] == 2
    assert scale["status"]["replicas"] == 1

    scale["spec"]["replicas"] = 5
    updated_scale = await client.update(widgets, scale, ns, subresource="scale")
    assert updated_scale["spec"]["replicas"] == 5
    assert (await client.get(widgets, "w", ns))["spec"]["replicas"] == 5

    await client.patch(widgets, "w", {"spec": {"replicas": 7}}, ns, subresource="scale")
    assert (await client.get(widgets, "w", ns))["spec"]["replicas"] == 7

    with pytest.raises(Invalid) as invalid:
        await client.patch(widgets, "w", {"spec": {"replicas": -1}}, ns)
    assert "spec.replicas" in invalid.value.message


# --- watch -----------------------------------------------------------------------------------


async def test_watch_sees_added_modified_deleted_in_order(client: Client, ns: str) -> None:
    start = await client.list(CONFIGMAPS, ns)
    seen: list[WatchEvent] = []

    async def consume() -> None:
        async with client.watch(
            CONFIGMAPS, ns, resource_version=start.resource_version, timeout_seconds=60
        ) as stream:
            async for event in stream:
                if event.type == "BOOKMARK":
                    continue
                seen.append(event)
                if event.type == "DELETED":
                    return

    watcher = asyncio.create_task(consume())
    await client.create(CONFIGMAPS, configmap("watched", {"v": "1"}), namespace=ns)
    await client.patch(CONFIGMAPS, "watched", {"data": {"v": "2"}}, ns)
    await client.delete(CONFIGMAPS, "watched", ns)
    await asyncio.wait_for(watcher, 30)

    assert [e.type for e in seen] == ["ADDED", "MODIFIED", "DELETED"]
    assert all(e.object["metadata"]["name"] == "watched" for e in seen)
    assert [e.object["data"]["v"] for e in seen] == ["1", "2", "2"]
    versions = [int(e.object["metadata"]["resourceVersion"]) for e in seen]
    assert versions == sorted(versions)


async def test_watch_ends_when_the_server_timeout_passes(client: Client, ns: str) -> None:
    start = await client.list(CONFIGMAPS, ns)
    began = time.monotonic()
    stream = client.watch(
        CONFIGMAPS,
        ns,
        resource_version=start.resource_version,
        timeout_seconds=1,
        allow_bookmarks=False,
    )
    events = [e async for e in stream]
    assert events == []
    assert 0.5 < time.monotonic() - began < 15
    assert stream.resource_version == start.resource_version


async def test_watch_from_a_too_old_resource_version_raises_gone(
    client: Client, ns: str, widgets: Resource
) -> None:
    # Measured: on a young cluster the built-in types' watch caches (and etcd, uncompacted) still
    # reach back to RV 1, so a watch from "1" on ConfigMaps replays history instead of failing.
    # A new CRD's watch cache starts at the resourceVersion of its first list, so an older RV is
    # refused: the server sends an ERROR event, code 410, "too old resource version".
    # (Only RV "1" is asked for: "the list's RV - 1" is too old only while nothing else in the
    # cluster wrote since the CRD's cache started, which a busy test session does not promise.)
    # A new CRD's watch cache may still be starting: the server answers 429 "storage is
    # (re)initializing" for a few seconds; ask again (at most 30 s) until it answers the watch.
    listed = await client.list(widgets, ns)
    for rv in ("1",):

        async def refused(rv: str = rv) -> Gone | None:
            try:
                async with client.watch(widgets, ns, resource_version=rv, timeout_seconds=30) as s:
                    async for _event in s:
                        pass
            except Gone as gone:
                return gone
            pytest.fail(f"a watch from resourceVersion {rv} ended without 410 Gone")

        err = await eventually(
            refused, within=30, what="the watch answered", ignoring=TooManyRequests
        )
        assert err.status == 410
        assert err.reason in ("Expired", "Gone")
        assert f"too old resource version: {rv}" in err.message
    # ...while the list's own resourceVersion is a valid starting point.
    async with client.watch(
        widgets, ns, resource_version=listed.resource_version, timeout_seconds=1
    ) as s:
        assert [e async for e in s if e.type != "BOOKMARK"] == []


async def test_watch_of_a_single_object_by_field_selector(client: Client, ns: str) -> None:
    await client.create(CONFIGMAPS, configmap("one", {"v": "1"}), namespace=ns)
    await client.create(CONFIGMAPS, configmap("two", {"v": "1"}), namespace=ns)
    names: list[str] = []
    async with client.watch(
        CONFIGMAPS, ns, field_selector="metadata.name=two", timeout_seconds=30
    ) as stream:
        async for event in stream:  # no resourceVersion: synthetic ADDED for current state
            names.append(event.object["metadata"]["name"])
            break
    assert names == ["two"]


async def test_long_watches_do_not_starve_requests(kubeconfig: str, ns: str) -> None:
    async with Client.from_kubeconfig(kubeconfig, qps=0, pool_size=1) as small:
        streams = [small.watch(CONFIGMAPS, ns, timeout_seconds=60) for _ in range(4)]
        opened = [asyncio.create_task(anext(s, None)) for s in streams]
        await eventually(lambda: all(s.connected for s in streams), within=10, what="watches open")
        await client_roundtrip(small, ns)
        results = await asyncio.wait_for(
            asyncio.gather(*(small.get(NAMESPACES, ns) for _ in range(5))), 10
        )
        assert len(results) == 5
        for task in opened:
            task.cancel()
        for s in streams:
            await s.aclose()


async def client_roundtrip(c: Client, ns: str) -> None:
    created = await asyncio.wait_for(c.create(CONFIGMAPS, configmap(generateName="rt-"), ns), 10)
    await asyncio.wait_for(c.delete(CONFIGMAPS, created["metadata"]["name"], ns), 10)


# --- raw, metrics, rate limiting, retries ----------------------------------------------------


async def test_raw_reaches_arbitrary_paths(client: Client) -> None:
    version = await client.raw("GET", "/version")
    assert version["major"] == "1"
    openapi = await client.raw("GET", "/openapi/v3")
    assert "api/v1" in openapi["paths"]
    healthz = await client.raw("GET", "/healthz")
    assert healthz == b"ok"
    assert (await client.raw("GET", "/version", decode=False)).startswith(b"{")
    with pytest.raises(NotFound):
        await client.raw("GET", "/apis/no.such.group/v1")


async def test_metrics_count_every_request(client: Client, ns: str) -> None:
    host = client.host.split("://", 1)[1]
    created = {"code": "201", "method": "POST", "host": host}
    missing = {"code": "404", "method": "GET", "host": host}
    latency = {"verb": "POST", "host": host}
    throttle = {"verb": "GET", "host": host}
    before = (
        counter("rest_client_requests_total", created),
        counter("rest_client_requests_total", missing),
        counter("rest_client_request_duration_seconds_count", latency),
        counter("rest_client_rate_limiter_duration_seconds_count", throttle),
    )
    await client.create(CONFIGMAPS, configmap("counted"), namespace=ns)
    with pytest.raises(NotFound):
        await client.get(CONFIGMAPS, "not-there", ns)
    after = (
        counter("rest_client_requests_total", created),
        counter("rest_client_requests_total", missing),
        counter("rest_client_request_duration_seconds_count", latency),
        counter("rest_client_rate_limiter_duration_seconds_count", throttle),
    )
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 1, 1]


async def test_client_side_qps_paces_requests(kubeconfig: str, ns: str) -> None:
    async with Client.from_kubeconfig(kubeconfig, qps=20, burst=1) as slow:
        began = time.monotonic()
        await asyncio.gather(*(slow.get(NAMESPACES, ns) for _ in range(11)))
        elapsed = time.monotonic() - began
    assert elapsed >= 0.45  # ten waits of 50 ms after the single burst token


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_failed_connects_are_retried_then_raised_as_one_line(kubeconfig: str) -> None:
    cfg = await load_kubeconfig(kubeconfig)
    dead = ClusterConfig(
        host=f"https://127.0.0.1:{closed_port()}", ssl_context=cfg.ssl_context, auth=cfg.auth
    )
    host = dead.host.split("://", 1)[1]
    labels = {"code": "<error>", "method": "GET", "host": host}
    async with Client(dead, max_retries=2, retry_backoff_base=0.01) as c:
        with pytest.raises(ApiConnectionError) as info:
            await c.get(NAMESPACES, "default")
        assert counter("rest_client_requests_total", labels) == 3  # first try + 2 retries
        assert "\n" not in str(info.value)
        post = {"code": "<error>", "method": "POST", "host": host}
        with pytest.raises(ApiConnectionError):
            await c.create(NAMESPACES, {"metadata": {"name": "x"}})
        # Nothing reached a server, so even a POST may be retried after a refused connect.
        assert counter("rest_client_requests_total", post) == 3


async def test_requests_without_credentials_get_a_typed_error(kubeconfig: str) -> None:
    cfg = await load_kubeconfig(kubeconfig)
    no_client_cert = ssl.create_default_context()
    no_client_cert.check_hostname = False
    no_client_cert.verify_mode = ssl.CERT_NONE
    anonymous = ClusterConfig(
        host=cfg.host, ssl_context=no_client_cert, auth=AuthProvider(Configuration())
    )
    async with Client(anonymous) as c:
        with pytest.raises((Forbidden, Unauthorized)) as info:
            await c.list(CONFIGMAPS, "default")
    assert "\n" not in str(info.value)


# --- credentials from kubernetes_asyncio's loaders: exec plugins and in-cluster tokens ------

EXEC_PLUGIN = """#!/bin/sh
dir="$(dirname "$0")"
echo x >> "$dir/calls"
token="$(cat "$dir/token")"
exp=""
if [ -f "$dir/expiry" ]; then exp=",\\"expirationTimestamp\\":\\"$(cat "$dir/expiry")\\""; fi
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",'
printf '"status":{"token":"%s"%s}}' "$token" "$exp"
"""


def exec_kubeconfig(kubeconfig: str, plugin_dir: Path) -> str:
    admin = yaml.safe_load(Path(kubeconfig).read_text())
    plugin = plugin_dir / "plugin.sh"
    plugin.write_text(EXEC_PLUGIN)
    plugin.chmod(0o755)
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {**admin["clusters"][0]["cluster"]}}],
        "users": [
            {
                "name": "exec",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": str(plugin),
                        "interactiveMode": "Never",
                    }
                },
            }
        ],
        "contexts": [{"name": "exec", "context": {"cluster": "local", "user": "exec"}}],
        "current-context": "exec",
    }
    cluster = config["clusters"][0]["cluster"]
    if "certificate-authority" in cluster:
        cluster["certificate-authority"] = ca_file(kubeconfig, plugin_dir)
    path = plugin_dir / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def rfc3339(seconds_from_now: float) -> str:
    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds_from_now)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_exec_plugin_token_is_refreshed_after_401_and_near_expiry(
    client: Client, ns: str, kubeconfig: str, tmp_path: Path
) -> None:
    token = await service_account_token(client, ns, "exec-user")
    calls = tmp_path / "calls"
    (tmp_path / "token").write_text("not-a-valid-token")
    path = exec_kubeconfig(kubeconfig, tmp_path)

    async with Client.from_kubeconfig(path) as c:
        assert len(calls.read_text().split()) == 1  # the loader ran the plugin once
        (tmp_path / "token").write_text(token)
        # The cached credential is rejected (401); the client re-runs the plugin and retries.
        assert await whoami(c) == f"system:serviceaccount:{ns}:exec-user"
        assert len(calls.read_text().split()) == 2
        await whoami(c)
        assert len(calls.read_text().split()) == 2  # no expiry: the token is reused

    (tmp_path / "expiry").write_text(rfc3339(10))  # inside the refresh skew
    async with Client.from_kubeconfig(path) as c:
        base = len(calls.read_text().split())
        await whoami(c)
        assert len(calls.read_text().split()) == base + 1  # near expiry: refreshed
        (tmp_path / "expiry").write_text(rfc3339(3600))
        await whoami(c)
        await whoami(c)
        assert len(calls.read_text().split()) == base + 2  # fresh for an hour: reused

    (tmp_path / "expiry").unlink()
    (tmp_path / "token").write_text("still-not-valid")
    async with Client.from_kubeconfig(path) as c:
        with pytest.raises(Unauthorized) as info:
            await whoami(c)
    assert info.value.status == 401
    assert "\n" not in str(info.value)


async def test_in_cluster_config_uses_the_mounted_token(
    client: Client, ns: str, kubeconfig: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = await service_account_token(client, ns, "in-pod")
    token_file = tmp_path / "token"
    token_file.write_text(token)
    host, port = client.host.split("://", 1)[1].rsplit(":", 1)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    cfg = load_incluster_config(
        token_filename=str(token_file), cert_filename=ca_file(kubeconfig, tmp_path)
    )
    assert cfg.configuration is not None
    assert cfg.configuration.refresh_api_key_hook is not None  # the library's token re-reader
    async with Client(cfg) as c:
        assert await whoami(c) == f"system:serviceaccount:{ns}:in-pod"
        with pytest.raises(Forbidden) as info:
            await c.list(CONFIGMAPS, ns)
    assert "cannot list resource" in info.value.message


async def test_in_cluster_config_without_a_pod_environment_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError) as info:
        load_incluster_config()
    assert "in-cluster" in str(info.value)
