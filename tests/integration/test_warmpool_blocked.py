"""A warm pool whose sandboxes cannot get pods says so and does not churn (real control plane).

A sandbox that is not Ready after the readiness grace period is normally replaced. When its pod
cannot exist — pod creation is rejected (here by a ResourceQuota: the Sandbox reports
Ready=False/ReconcilerError) or the pod is Unschedulable (here: no node has the CPU) — a
replacement would meet the same wall, so the pool HOLDS it, reports Ready=False/SandboxesBlocked
and records a Warning ``WarmPoolNotProgressing`` event. The Sandbox and SandboxWarmPool
controllers run in-process; quota admission, the resourcequota controller, kube-scheduler, kwok
and the garbage collector are the real ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.conditions import find_condition
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.kinds import SANDBOX_TEMPLATE, SANDBOX_WARM_POOL
from agentsandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS, SANDBOXES
from agentsandbox.controllers.sandbox import controller as sandbox_controller
from agentsandbox.controllers.warmpool import controller as warmpool
from agentsandbox.controllers.warmpool.plan import (
    EVENT_NOT_PROGRESSING,
    EVENT_PROGRESSING,
    REASON_BLOCKED,
    Settings,
)
from agentsandbox.kube import metrics
from agentsandbox.kube.client import Client
from agentsandbox.kube.config import load_kubeconfig
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.resources import EVENTS, PODS, RESOURCEQUOTAS
from tests.polling import eventually, stays

from .runtime_helpers import running

GRACE = 2.0
SETTINGS = Settings(readiness_grace_period=GRACE, unschedulable_recheck_interval=1.0)
POOL = "pool"


@pytest.fixture
async def client(kubeconfig: str) -> AsyncIterator[Client]:
    c = Client(await load_kubeconfig(kubeconfig), qps=0, pool_size=50)
    try:
        yield c
    finally:
        await c.close()


@contextlib.asynccontextmanager
async def controllers(client: Client) -> AsyncIterator[Manager]:
    mgr = Manager(client)
    sandbox_controller.setup(mgr, 4, "cluster.local")
    warmpool.setup(mgr, SETTINGS, workers=2)
    async with running(mgr):
        await asyncio.wait_for(mgr.wait_started(), 20)
        yield mgr


def template_obj(name: str, cpu: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "example/python:1"}
    if cpu is not None:
        container["resources"] = {"requests": {"cpu": cpu}}
    return {
        "apiVersion": SANDBOX_TEMPLATE.api_version,
        "kind": "SandboxTemplate",
        "metadata": {"name": name},
        "spec": {"podTemplate": {"spec": {"containers": [container]}}},
    }


def pool_obj(template: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_WARM_POOL.api_version,
        "kind": "SandboxWarmPool",
        "metadata": {"name": POOL},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": template}},
    }


def ready_condition(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(find_condition((obj.get("status") or {}).get("conditions"), "Ready") or {})


def is_ready(obj: dict[str, Any]) -> bool:
    return ready_condition(obj).get("status") == "True"


async def pool_sandboxes(client: Client, ns: str) -> list[dict[str, Any]]:
    listed = await client.list(
        SANDBOXES, ns, label_selector=f"{keys.LABEL_WARM_POOL_SANDBOX}={name_hash(POOL)}"
    )
    return [s for s in listed.items if not s["metadata"].get("deletionTimestamp")]


def names(sandboxes: list[dict[str, Any]]) -> set[str]:
    return {s["metadata"]["name"] for s in sandboxes}


async def pool_condition(client: Client, ns: str) -> dict[str, Any]:
    return ready_condition(await client.get(SANDBOX_WARM_POOLS, POOL, ns))


async def pool_events(client: Client, ns: str, reason: str) -> list[dict[str, Any]]:
    listed = await client.list(EVENTS, ns)
    return [
        e
        for e in listed.items
        if e.get("reason") == reason
        and (e.get("regarding") or {}).get("kind") == "SandboxWarmPool"
        and (e.get("regarding") or {}).get("name") == POOL
    ]


@dataclass
class Tracker:
    """Every pool sandbox the API server ever had, from a watch (nothing slips between polls)."""

    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    live: set[str] = field(default_factory=set)
    most_live: int = 0

    def see(self, kind: str, sb: dict[str, Any]) -> None:
        name = sb["metadata"]["name"]
        if kind == "ADDED" and name not in self.created:
            self.created.append(name)
        if kind == "DELETED" or sb["metadata"].get("deletionTimestamp"):
            if name in self.live:
                self.deleted.append(name)
            self.live.discard(name)
        elif kind in ("ADDED", "MODIFIED"):
            self.live.add(name)
        self.most_live = max(self.most_live, len(self.live))


@contextlib.asynccontextmanager
async def tracking(client: Client, ns: str) -> AsyncIterator[Tracker]:
    tracker = Tracker()
    selector = f"{keys.LABEL_WARM_POOL_SANDBOX}={name_hash(POOL)}"
    listed = await client.list(SANDBOXES, ns, label_selector=selector)
    for sb in listed.items:
        tracker.see("ADDED", sb)

    async def watch() -> None:
        async with client.watch(
            SANDBOXES, ns, label_selector=selector, resource_version=listed.resource_version
        ) as stream:
            async for event in stream:
                if event.type in ("ADDED", "MODIFIED", "DELETED"):
                    tracker.see(event.type, event.object)

    task = asyncio.create_task(watch())
    try:
        yield tracker
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def quota_enforced(client: Client, ns: str, pods: str) -> bool:
    """The resourcequota controller copied spec.hard to status.hard (what admission checks)."""
    quota = await client.get(RESOURCEQUOTAS, "pods", ns)
    return ((quota.get("status") or {}).get("hard") or {}).get("pods") == pods


async def wait_blocked(client: Client, ns: str, held: int) -> dict[str, Any]:
    """The pool's Ready condition once it reports ``held`` sandboxes as blocked."""

    async def blocked() -> dict[str, Any] | None:
        cond = await pool_condition(client, ns)
        ok = cond.get("reason") == REASON_BLOCKED and str(cond.get("message")).startswith(
            f"{held} sandbox(es) cannot become Ready"
        )
        return cond if ok else None

    # The grace period, plus slack: each test's controllers watch every namespace, so they may
    # still be busy with the sandboxes of an earlier test's namespace being deleted.
    cond = await eventually(
        blocked, within=GRACE + 30, what=f"the pool to report {held} sandboxes blocked"
    )
    assert cond["status"] == "False"
    return cond


async def assert_held_without_churn(
    client: Client, ns: str, tracker: Tracker, seconds: float, replicas: int
) -> set[str]:
    """For ``seconds``: the same sandboxes, never more than ``replicas``, still blocked."""
    before = names(await pool_sandboxes(client, ns))
    created, deleted = len(tracker.created), len(tracker.deleted)

    async def held() -> bool:
        now = names(await pool_sandboxes(client, ns))
        assert now == before, f"the pool churned while blocked: {sorted(before)} -> {sorted(now)}"
        assert tracker.most_live <= replicas, tracker
        return True

    await stays(held, for_=seconds, what="the pool held without churn", interval=0.2)
    assert tracker.created[created:] == [], f"created while blocked: {tracker}"
    assert tracker.deleted[deleted:] == [], f"deleted while blocked: {tracker}"
    assert (await pool_condition(client, ns)).get("reason") == REASON_BLOCKED
    return before


async def test_quota_blocked_pool_holds_its_sandboxes_reports_and_recovers(
    client: Client, namespace: str
) -> None:
    ns = namespace
    await client.create(
        RESOURCEQUOTAS, {"metadata": {"name": "pods"}, "spec": {"hard": {"pods": "1"}}}, ns
    )

    await eventually(
        lambda: quota_enforced(client, ns, "1"),
        within=20,
        what="the quota's status.hard (resourcequota ctrl)",
    )
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), ns)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("tpl", 3), ns)

    async with tracking(client, ns) as tracker, controllers(client):
        started = time.monotonic()

        async def one_ready_two_rejected() -> list[dict[str, Any]] | None:
            sbs = await pool_sandboxes(client, ns)
            rejected = [
                s
                for s in sbs
                if ready_condition(s).get("status") == "False"
                and ready_condition(s).get("reason") == "ReconcilerError"
                and "exceeded quota" in str(ready_condition(s).get("message"))
            ]
            ok = len(sbs) == 3 and sum(map(is_ready, sbs)) == 1 and len(rejected) == 2
            return sbs if ok else None

        await eventually(
            one_ready_two_rejected, within=30, what="1 Ready sandbox and 2 rejected by the quota"
        )

        cond = await wait_blocked(client, ns, 2)
        blocked_after = time.monotonic() - started
        assert "exceeded quota" in cond["message"], cond
        pool = await client.get(SANDBOX_WARM_POOLS, POOL, ns)
        assert (pool["status"]["replicas"], pool["status"]["readyReplicas"]) == (3, 1)

        warnings = await eventually(
            lambda: pool_events(client, ns, EVENT_NOT_PROGRESSING),
            within=30,
            what="a Warning event",
        )
        assert warnings[0]["type"] == "Warning"
        assert "exceeded quota" in warnings[0]["note"]

        held = await assert_held_without_churn(client, ns, tracker, 6.0, 3)

        # Lift the limit: the Sandbox controller's retries (with backoff) now create the pods.
        await client.patch(RESOURCEQUOTAS, "pods", {"spec": {"hard": {"pods": "3"}}}, ns)
        raised = time.monotonic()
        await eventually(
            lambda: quota_enforced(client, ns, "3"),
            within=20,
            what="the raised quota in status.hard",
        )

        async def pool_ready() -> list[dict[str, Any]] | None:
            sbs = await pool_sandboxes(client, ns)
            p = await client.get(SANDBOX_WARM_POOLS, POOL, ns)
            st = p.get("status") or {}
            full = len(sbs) == 3 and all(map(is_ready, sbs))
            ok = (
                full and st.get("readyReplicas") == 3 and ready_condition(p).get("status") == "True"
            )
            return sbs if ok else None

        final = await eventually(
            pool_ready, within=90, what="the pool to become Ready after raising the quota"
        )
        recovered_after = time.monotonic() - raised
        # events are written by a background task, behind whatever other namespaces queued
        progressing = await eventually(
            lambda: pool_events(client, ns, EVENT_PROGRESSING), within=30, what="a Normal event"
        )
        assert progressing[0]["type"] == "Normal"
        pods = [
            p
            for p in (await client.list(PODS, ns)).items
            if not p["metadata"].get("deletionTimestamp")
        ]
        assert len(pods) == 3, [p["metadata"]["name"] for p in pods]
        print(
            f"\nquota: blocked reported {blocked_after:.1f}s after start; Ready "
            f"{recovered_after:.1f}s after raising the quota; created={tracker.created} "
            f"deleted={tracker.deleted} held={sorted(held)} final={sorted(names(final))}"
        )
    assert tracker.most_live <= 3, tracker  # never above spec.replicas, before or after
    # Whether the held sandboxes survive being unblocked: see test_held_sandbox_is_kept_...


async def test_unschedulable_pool_reports_the_schedulers_message_and_holds(
    client: Client, namespace: str
) -> None:
    ns = namespace
    # kwok nodes have 1000 CPUs allocatable: no node can ever fit this pod
    await client.create(SANDBOX_TEMPLATES, template_obj("huge", cpu="5000"), ns)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("huge", 2), ns)

    async with tracking(client, ns) as tracker, controllers(client):
        started = time.monotonic()

        async def unschedulable() -> list[dict[str, Any]] | None:
            pods = (await client.list(PODS, ns)).items
            stuck = [
                p
                for p in pods
                if any(
                    c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                    for c in (p.get("status") or {}).get("conditions") or []
                )
            ]
            return stuck if len(stuck) == 2 else None

        pods = await eventually(unschedulable, within=30, what="both pods Pending/Unschedulable")
        assert all(p["status"].get("phase") == "Pending" for p in pods)

        cond = await wait_blocked(client, ns, 2)
        blocked_after = time.monotonic() - started
        assert "pod unschedulable" in cond["message"], cond
        assert "Insufficient cpu" in cond["message"], cond
        warnings = await eventually(
            lambda: pool_events(client, ns, EVENT_NOT_PROGRESSING),
            within=30,
            what="a Warning event",
        )
        assert warnings[0]["type"] == "Warning" and "Insufficient cpu" in warnings[0]["note"]

        held = await assert_held_without_churn(client, ns, tracker, 6.0, 2)
        print(
            f"\nunschedulable: blocked reported {blocked_after:.1f}s after start; "
            f"held={sorted(held)} created={tracker.created} deleted={tracker.deleted}"
        )
    assert tracker.most_live <= 2, tracker


class HeldSandboxReplaced(AssertionError):
    """A held sandbox was deleted as "stuck" once the blocker went away."""


async def test_held_sandbox_is_kept_once_unblocked(client: Client, namespace: str) -> None:
    """Once the quota allows its pod, a held sandbox should become Ready itself, not be replaced."""
    ns = namespace
    await client.create(
        RESOURCEQUOTAS, {"metadata": {"name": "pods"}, "spec": {"hard": {"pods": "0"}}}, ns
    )

    await eventually(
        lambda: quota_enforced(client, ns, "0"),
        within=20,
        what="the quota's status.hard (resourcequota ctrl)",
    )
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), ns)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("tpl", 1), ns)
    stuck_deletes = "agent_sandbox_warmpool_sandbox_deletes_total"
    labels = {"namespace": ns, "pool": POOL, "reason": "stuck"}

    async with tracking(client, ns) as tracker, controllers(client):
        await wait_blocked(client, ns, 1)
        held = await assert_held_without_churn(client, ns, tracker, 2.0, 1)
        deleted_while_held = len(tracker.deleted)
        await client.patch(RESOURCEQUOTAS, "pods", {"spec": {"hard": {"pods": "1"}}}, ns)
        raised = time.monotonic()

        async def pool_ready() -> list[dict[str, Any]] | None:
            sbs = await pool_sandboxes(client, ns)
            p = await client.get(SANDBOX_WARM_POOLS, POOL, ns)
            ok = len(sbs) == 1 and is_ready(sbs[0]) and ready_condition(p).get("status") == "True"
            return sbs if ok else None

        final = await eventually(
            pool_ready, within=60, what="the pool to become Ready after raising the quota"
        )
        print(f"\nunblocked: Ready {time.monotonic() - raised:.1f}s after raising the quota")
    assert tracker.most_live <= 1, tracker
    if names(final) != held or tracker.deleted[deleted_while_held:]:
        raise HeldSandboxReplaced(
            f"held {sorted(held)} but Ready {sorted(names(final))}; created={tracker.created} "
            f"deleted={tracker.deleted}; stuck deletes="
            f"{metrics.REGISTRY.get_sample_value(stuck_deletes, labels)}"
        )
