"""The SandboxWarmPool controller against the real local control plane.

Each test runs the Sandbox and SandboxWarmPool controllers in-process (a Manager, leader
election off) and drives them only through the API: pods are scheduled by kube-scheduler and
made Ready by kwok, sandboxes are removed by the real garbage collector.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.defaults import apply_sandbox_secure_defaults
from agentsandbox.api.hashing import name_hash, pod_template_hash
from agentsandbox.api.kinds import SANDBOX, SANDBOX_TEMPLATE, SANDBOX_WARM_POOL
from agentsandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS, SANDBOXES
from agentsandbox.controllers.sandbox import controller as sandbox_controller
from agentsandbox.controllers.warmpool import controller as warmpool
from agentsandbox.controllers.warmpool.plan import Settings
from agentsandbox.devcluster.cluster import LIFECYCLE_LABEL, DevCluster
from agentsandbox.kube import metrics
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import NotFound
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.resources import NAMESPACES
from tests.polling import eventually, stays

from .runtime_helpers import running


@contextlib.asynccontextmanager
async def controllers(
    client: Client, settings: Settings | None = None, workers: int = 4
) -> AsyncIterator[Manager]:
    mgr = Manager(client)
    sandbox_controller.setup(mgr, 8, "cluster.local")
    warmpool.setup(mgr, settings or Settings(), workers=workers)
    async with running(mgr):
        await asyncio.wait_for(mgr.wait_started(), 20)
        yield mgr


def template_obj(name: str, image: str = "example/python:1", **pod_labels: str) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_TEMPLATE.api_version,
        "kind": "SandboxTemplate",
        "metadata": {"name": name},
        "spec": {
            "podTemplate": {
                "metadata": {"labels": dict(pod_labels)},
                "spec": {"containers": [{"name": "main", "image": image}]},
            }
        },
    }


def pool_obj(
    name: str, template: str, replicas: int, strategy: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": replicas, "sandboxTemplateRef": {"name": template}}
    if strategy:
        spec["updateStrategy"] = {"type": strategy}
    return {
        "apiVersion": SANDBOX_WARM_POOL.api_version,
        "kind": "SandboxWarmPool",
        "metadata": {"name": name},
        "spec": spec,
    }


async def pool_sandboxes(client: Client, ns: str, pool: str) -> list[dict[str, Any]]:
    listed = await client.list(
        SANDBOXES, ns, label_selector=f"{keys.LABEL_WARM_POOL_SANDBOX}={name_hash(pool)}"
    )
    return [s for s in listed.items if not s["metadata"].get("deletionTimestamp")]


def ready(sb: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (sb.get("status") or {}).get("conditions", [])
    )


def image_of(sb: dict[str, Any]) -> str:
    return str(sb["spec"]["podTemplate"]["spec"]["containers"][0]["image"])


async def wait_ready_pool(
    client: Client, ns: str, pool: str, n: int, within: float = 60
) -> list[dict[str, Any]]:

    async def full() -> list[dict[str, Any]]:
        last = await pool_sandboxes(client, ns, pool)
        members = [(s["metadata"]["name"], ready(s)) for s in last]
        assert len(last) == n and all(ready(s) for s in last), members
        st = (await client.get(SANDBOX_WARM_POOLS, pool, ns)).get("status") or {}
        assert st.get("readyReplicas") == n and st.get("replicas") == n, (members, st)
        return last

    members: list[dict[str, Any]] = await eventually(
        full, within=within, what=f"pool {ns}/{pool} at {n} Ready", ignoring=AssertionError
    )
    return members


async def test_pool_fills_to_replicas_ready_and_reports_status(
    client: Client, namespace: str
) -> None:
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), namespace)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 5), namespace)
    async with controllers(client):
        sbs = await wait_ready_pool(client, namespace, "pool", 5)
    p = await client.get(SANDBOX_WARM_POOLS, "pool", namespace)
    assert p["status"]["selector"] == f"{keys.LABEL_WARM_POOL_SANDBOX}={name_hash('pool')}"
    assert p["status"]["observedGeneration"] == p["metadata"]["generation"]
    cond = {c["type"]: c for c in p["status"]["conditions"]}["Ready"]
    assert (cond["status"], cond["reason"]) == ("True", "PoolReady")
    for sb in sbs:
        assert sb["metadata"]["generateName"] == "pool-"
        owner = sb["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (
            "SandboxWarmPool",
            p["metadata"]["uid"],
            True,
        )
        assert sb["metadata"]["annotations"][keys.ANNOTATION_SANDBOX_TEMPLATE_REF] == "tpl"
        spec = sb["spec"]["podTemplate"]["spec"]
        assert spec["automountServiceAccountToken"] is False and spec["dnsPolicy"] == "None"


async def test_scale_subresource_up_and_down_deletes_unready_first(
    client: Client, namespace: str, cluster: DevCluster
) -> None:
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), namespace)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 2), namespace)
    async with controllers(client):
        await wait_ready_pool(client, namespace, "pool", 2)
        cluster.kubectl("scale", "sandboxwarmpool/pool", "-n", namespace, "--replicas=4")
        await wait_ready_pool(client, namespace, "pool", 4)
        # make one sandbox unready: suspend it (replicas 0 -> Ready=False, SandboxSuspended)
        victims = await pool_sandboxes(client, namespace, "pool")
        unready = victims[0]["metadata"]["name"]
        await client.patch(SANDBOXES, unready, {"spec": {"replicas": 0}}, namespace)
        await eventually(
            lambda: client.get(SANDBOX_WARM_POOLS, "pool", namespace),
            accept=lambda p: p["status"].get("readyReplicas") == 3,
            within=20,
            what="the suspended sandbox counted as unready",
        )
        cluster.kubectl("scale", "sandboxwarmpool/pool", "-n", namespace, "--replicas=3")
        left = await wait_ready_pool(client, namespace, "pool", 3)
    assert unready not in {s["metadata"]["name"] for s in left}


async def rollout(client: Client, ns: str, strategy: str) -> tuple[set[str], list[dict[str, Any]]]:
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl", image="app:v1"), ns)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 2, strategy), ns)
    before = await wait_ready_pool(client, ns, "pool", 2)
    tpl = await client.get(SANDBOX_TEMPLATES, "tpl", ns)
    tpl["spec"]["podTemplate"]["spec"]["containers"][0]["image"] = "app:v2"
    await client.update(SANDBOX_TEMPLATES, tpl, ns)
    return {s["metadata"]["name"] for s in before}, before


async def test_template_change_rolls_every_sandbox_under_recreate(
    client: Client, namespace: str
) -> None:
    async with controllers(client):
        old_names, _ = await rollout(client, namespace, "Recreate")

        async def rolled() -> list[dict[str, Any]] | None:
            sbs = await pool_sandboxes(client, namespace, "pool")
            if len(sbs) == 2 and all(image_of(s) == "app:v2" and ready(s) for s in sbs):
                return sbs
            return None

        sbs = await eventually(rolled, within=60, what="Recreate to roll the pool to app:v2")
    assert not old_names & {s["metadata"]["name"] for s in sbs}


async def test_template_change_under_on_replenish_only_affects_replacements(
    client: Client, namespace: str
) -> None:
    async with controllers(client):
        old_names, before = await rollout(client, namespace, "OnReplenish")
        await stays(  # give a wrong implementation time to roll
            lambda: pool_sandboxes(client, namespace, "pool"),
            accept=lambda now: (
                {s["metadata"]["name"] for s in now} == old_names
                and {image_of(s) for s in now} == {"app:v1"}
            ),
            for_=2.0,
            what="the pool's sandboxes kept at app:v1",
        )
        await client.delete(SANDBOXES, before[0]["metadata"]["name"], namespace)
        await wait_ready_pool(client, namespace, "pool", 2)
        images = sorted(image_of(s) for s in await pool_sandboxes(client, namespace, "pool"))
    assert images == ["app:v1", "app:v2"]


async def test_repointing_to_an_identical_template_under_another_name_replaces_all(
    client: Client, namespace: str
) -> None:
    await client.create(SANDBOX_TEMPLATES, template_obj("old"), namespace)
    await client.create(SANDBOX_TEMPLATES, template_obj("new"), namespace)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "old", 2, "Recreate"), namespace)
    async with controllers(client):
        before = {
            s["metadata"]["name"] for s in await wait_ready_pool(client, namespace, "pool", 2)
        }
        await client.patch(
            SANDBOX_WARM_POOLS,
            "pool",
            {"spec": {"sandboxTemplateRef": {"name": "new"}}},
            namespace,
        )

        async def replaced() -> bool:
            sbs = await pool_sandboxes(client, namespace, "pool")
            return len(sbs) == 2 and all(
                s["metadata"]["labels"][keys.LABEL_SANDBOX_TEMPLATE_REF_HASH] == name_hash("new")
                and ready(s)
                for s in sbs
            )

        await eventually(replaced, within=60, what="the pool re-pointed")
        after = {s["metadata"]["name"] for s in await pool_sandboxes(client, namespace, "pool")}
    assert not before & after


def orphan_sandbox(ns: str, pool: str, tpl: dict[str, Any], image: str) -> dict[str, Any]:
    spec = copy.deepcopy(tpl["spec"]["podTemplate"]["spec"])
    spec["containers"][0]["image"] = image
    spec = apply_sandbox_secure_defaults(tpl, spec)
    labels = {
        keys.LABEL_WARM_POOL_SANDBOX: name_hash(pool),
        keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash(tpl["metadata"]["name"]),
        keys.LABEL_SANDBOX_POD_TEMPLATE_HASH: pod_template_hash(tpl["spec"]["podTemplate"]),
    }
    return {
        "apiVersion": SANDBOX.api_version,
        "kind": "Sandbox",
        "metadata": {"generateName": "orphan-", "namespace": ns, "labels": labels},
        "spec": {"replicas": 1, "podTemplate": {"metadata": {"labels": labels}, "spec": spec}},
    }


async def test_spoofed_orphan_is_deleted_and_genuine_orphan_is_adopted(
    client: Client, namespace: str
) -> None:
    tpl = template_obj("tpl")
    await client.create(SANDBOX_TEMPLATES, tpl, namespace)
    tpl["metadata"]["namespace"] = namespace
    spoofed = await client.create(
        SANDBOXES, orphan_sandbox(namespace, "pool", tpl, "evil/miner:1"), namespace
    )
    genuine = await client.create(
        SANDBOXES, orphan_sandbox(namespace, "pool", tpl, "example/python:1"), namespace
    )
    pool = await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 2), namespace)
    async with controllers(client):
        sbs = await wait_ready_pool(client, namespace, "pool", 2)
    names = {s["metadata"]["name"] for s in sbs}
    assert genuine["metadata"]["name"] in names
    assert spoofed["metadata"]["name"] not in names
    with pytest.raises(NotFound):
        await client.get(SANDBOXES, spoofed["metadata"]["name"], namespace)
    adopted = await client.get(SANDBOXES, genuine["metadata"]["name"], namespace)
    assert adopted["metadata"]["ownerReferences"][0]["uid"] == pool["metadata"]["uid"]
    assert all(image_of(s) == "example/python:1" for s in sbs)


async def test_sandbox_stuck_unready_past_the_grace_period_is_replaced(
    client: Client, namespace: str
) -> None:
    await client.create(
        SANDBOX_TEMPLATES, template_obj("tpl", **{LIFECYCLE_LABEL: "never-ready"}), namespace
    )
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 1), namespace)
    seen: set[str] = set()
    most = 0
    async with controllers(client, Settings(readiness_grace_period=2.0)):

        async def replaced_twice() -> bool:
            nonlocal seen, most
            sbs = await pool_sandboxes(client, namespace, "pool")
            most = max(most, len(sbs))
            seen |= {s["metadata"]["name"] for s in sbs}
            return len(seen) >= 3

        await eventually(
            replaced_twice, within=40, what=lambda: f"stuck sandboxes replaced (seen: {seen})"
        )
    assert len(seen) >= 3, f"stuck sandboxes were not replaced: {seen}"
    assert most == 1  # never more than spec.replicas at once


async def test_missing_template_writes_status_creates_nothing_then_fills(
    client: Client, namespace: str
) -> None:
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "later", 3), namespace)
    async with controllers(client):

        async def reported() -> dict[str, Any] | None:
            p = await client.get(SANDBOX_WARM_POOLS, "pool", namespace)
            conds = {c["type"]: c for c in (p.get("status") or {}).get("conditions", [])}
            return p if conds.get("Ready", {}).get("reason") == "TemplateNotFound" else None

        p = await eventually(reported, within=20, what="TemplateNotFound reported")
        assert p["status"]["replicas"] == 0
        assert await pool_sandboxes(client, namespace, "pool") == []
        await client.create(SANDBOX_TEMPLATES, template_obj("later"), namespace)
        await wait_ready_pool(client, namespace, "pool", 3)


async def test_deleting_the_pool_removes_its_sandboxes(client: Client, namespace: str) -> None:
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), namespace)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 3), namespace)
    async with controllers(client):
        await wait_ready_pool(client, namespace, "pool", 3)
        await client.delete(SANDBOX_WARM_POOLS, "pool", namespace)
        await eventually(
            lambda: pool_sandboxes(client, namespace, "pool"),
            accept=lambda left: not left,
            within=60,
            what="the garbage collector to remove the sandboxes",
            interval=0.2,
        )


async def _apiserver_count(
    client: Client, verb: str, resource: str, *, scope: str | None = None, code: str | None = None
) -> float:
    """Sum of the apiserver's own ``apiserver_request_total`` for one verb and resource."""
    text = await client.raw("GET", "/metrics", decode=False)
    body = text.decode() if isinstance(text, bytes) else str(text)
    want = [f'verb="{verb}"', f'resource="{resource}"']
    if scope:
        want.append(f'scope="{scope}"')
    if code:
        want.append(f'code="{code}"')
    total = 0.0
    for line in body.splitlines():
        if line.startswith("apiserver_request_total{") and all(w in line for w in want):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_no_over_creation_20_pools_of_25_with_50_workers(
    client: Client, namespace: str
) -> None:
    """Exactly 500 creates, no pool ever above its target, reconciles concurrent and cached (the
    no-over-creation scenario of docs/benchmarks.md)."""
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), namespace)
    creates: dict[str, int] = {}
    per_pool_max: dict[str, int] = {}
    live: dict[str, set[str]] = {}

    def pool_of(sb: dict[str, Any]) -> str | None:
        return (sb["metadata"].get("labels") or {}).get(keys.LABEL_WARM_POOL_SANDBOX)

    def on_add(sb: dict[str, Any]) -> None:
        pool = pool_of(sb)
        if pool is None:
            return
        creates[pool] = creates.get(pool, 0) + 1
        names = live.setdefault(pool, set())
        names.add(sb["metadata"]["uid"])
        per_pool_max[pool] = max(per_pool_max.get(pool, 0), len(names))

    def on_update(old: dict[str, Any], new: dict[str, Any]) -> None:
        if new["metadata"].get("deletionTimestamp"):
            on_delete(new)

    def on_delete(sb: dict[str, Any]) -> None:
        pool = pool_of(sb)
        if pool is not None:
            live.setdefault(pool, set()).discard(sb["metadata"]["uid"])

    # A resuming watch (our informer): a plain watch can be closed by the apiserver when its
    # reader falls behind, and would silently miss creates.
    watcher = Informer(client, SANDBOXES, namespace)
    watcher.add_handler(on_add, on_update, on_delete)
    watcher.start()
    await asyncio.wait_for(watcher.wait_synced(), 10)
    posts_before = await _apiserver_count(client, "POST", "sandboxes", code="201")
    peak = 0.0
    informer_lists = metrics.INFORMER_LISTS.labels(str(SANDBOXES))
    async with controllers(client, workers=50) as _:
        lists_before = await _apiserver_count(client, "LIST", "sandboxes", scope="cluster")
        own_lists_before = informer_lists._value.get()
        await asyncio.gather(
            *(
                client.create(SANDBOX_WARM_POOLS, pool_obj(f"pool-{i}", "tpl", 25), namespace)
                for i in range(20)
            )
        )
        started = time.monotonic()
        filled = 0.0
        next_check = started
        pools: list[dict[str, Any]] = []

        async def full() -> bool:  # and the most reconciles at once, sampled every 10 ms
            nonlocal peak, next_check, pools
            peak = max(
                peak,
                metrics.REGISTRY.get_sample_value(
                    "controller_runtime_active_workers", {"controller": warmpool.CONTROLLER_NAME}
                )
                or 0.0,
            )
            if time.monotonic() < next_check:
                return False
            next_check = time.monotonic() + 0.25
            pools = (await client.list(SANDBOX_WARM_POOLS, namespace)).items
            return all((p.get("status") or {}).get("readyReplicas") == 25 for p in pools)

        with contextlib.suppress(AssertionError):
            await eventually(full, within=180, what="every pool full", interval=0.01)
            filled = time.monotonic()
        if not filled:
            unready = [
                (s["metadata"]["name"], (s.get("status") or {}).get("conditions"))
                for s in (await client.list(SANDBOXES, namespace)).items
                if not ready(s)
            ]
            statuses = [
                (p["metadata"]["name"], (p.get("status") or {}).get("readyReplicas")) for p in pools
            ]
            raise AssertionError(
                f"pools not full after 180s: creates seen={sum(creates.values())} "
                f"statuses={statuses} unready={unready[:5]} watching={watcher.watching}"
            )
        await stays(  # anything extra would show up now
            lambda: sum(creates.values()) <= 500 and max(per_pool_max.values()) <= 25,
            for_=2.0,
            what="no create beyond 25 per pool",
        )
        lists_after = await _apiserver_count(client, "LIST", "sandboxes", scope="cluster")
        own_lists_after = informer_lists._value.get()
    posts = await _apiserver_count(client, "POST", "sandboxes", code="201") - posts_before
    await watcher.stop()
    print(
        f"\nP4: creates={sum(creates.values())} max_per_pool={max(per_pool_max.values())} "
        f"peak_concurrent_reconciles={peak:.0f} sandbox_LISTs_during_run="
        f"{lists_after - lists_before:.0f} fill_seconds={filled - started:.1f}"
    )
    assert posts == 500, f"the apiserver accepted {posts} sandbox creates"
    assert sum(creates.values()) == 500, creates
    assert len(creates) == 20 and set(creates.values()) == {25}
    assert max(per_pool_max.values()) == 25
    assert peak >= 10, f"at most {peak} warm pool reconciles ran at once"
    # reconciles read from the informer cache: LISTs do not grow with hundreds of reconciles
    assert lists_after - lists_before <= 1
    assert own_lists_after == own_lists_before
    await client.delete(NAMESPACES, namespace)
