"""A Sandbox whose Ready pod is lost reports Ready=False before a replacement is Ready.

Upstream's e2e test ``TestWarmPoolSandboxWatcher`` deletes the pod of a Sandbox a claim adopted
from a warm pool and waits for the Sandbox to show Ready other than True. On kwok's ordinary pods
the replacement is Ready within milliseconds, so whether a poll ever sees the gap is luck. Here
the pod template carries the kwok lifecycle ``slow-ready``: the replacement pod runs with
Ready=False for 2 s before it turns Ready, and a watch on the namespace records every version of
the Sandbox, its pods and the claim, so the order is checked rather than sampled:

- the first Sandbox status after the deletion says Ready=False/DependenciesNotReady, "Pod exists
  with phase: Pending" (the replacement was created in the same pass, as upstream does), with no
  pod IPs; it is written before the replacement pod is Ready;
- while the replacement runs but is not Ready the Sandbox says "Pod is Running but not Ready";
- Ready=True comes back only after the replacement pod is Ready;
- the adopting claim forwards the Sandbox's Ready, so it too shows the Sandbox's not-ready
  condition before it is Ready again (upstream's test does not look at the claim in the gap;
  upstream's claim controller forwards the Sandbox's condition, and so does ours).

One etcd orders every write: the watch events' resourceVersions, compared as numbers, give the
order of writes across the Sandbox, the pods and the claim.

The Sandbox, SandboxWarmPool and SandboxClaim controllers run in-process, one set for the module.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.conditions import find_condition
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.controllers.claim import controller as claim_controller
from agentsandbox.controllers.sandbox import controller as sandbox_controller
from agentsandbox.controllers.warmpool import controller as warmpool
from agentsandbox.controllers.warmpool.plan import Settings
from agentsandbox.devcluster.cluster import LIFECYCLE_LABEL, DevCluster
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import NotFound
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.resources import PODS, Resource
from tests.polling import eventually

from .invariants import SandboxHistory, checked_history, wait_claims_ready
from .runtime_helpers import running
from .test_claims import claim_obj
from .test_warmpool import pool_obj, template_obj, wait_ready_pool

SLOW = {LIFECYCLE_LABEL: "slow-ready"}
PENDING = "Pod exists with phase: Pending"
RUNNING_NOT_READY = "Pod is Running but not Ready"


@pytest.fixture(autouse=True)
async def claim_history(
    cluster: DevCluster, namespace: str, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of each test, checked against the claim rules at its end
    (tests/integration/invariants.py)."""
    async with checked_history(cluster, request.node.nodeid) as history:
        yield history


@pytest.fixture(scope="module")
async def manager(module_client: Client) -> AsyncIterator[Manager]:
    mgr = Manager(module_client)
    sandbox_controller.setup(mgr, 4, "cluster.local")
    warmpool.setup(mgr, Settings(), workers=2)
    claim_controller.setup(mgr, workers=2)
    async with running(mgr):
        await asyncio.wait_for(mgr.wait_started(), 20)
        yield mgr


def ready_of(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(find_condition((obj.get("status") or {}).get("conditions"), "Ready") or {})


@dataclass(frozen=True)
class Seen:
    rv: int
    kind: str
    type: str
    obj: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def ready(self) -> dict[str, Any]:
        return ready_of(self.obj)


@dataclass
class Timeline:
    """Every version of the namespace's Sandboxes, Pods and claims from a point on."""

    events: list[Seen] = field(default_factory=list)
    listed: dict[str, int] = field(default_factory=dict)  # kind -> the version watched from

    def caught_up(self, kind: str, rv: int) -> bool:
        """The record of ``kind`` holds everything up to version ``rv``."""
        seen = (e.rv for e in self.events if e.kind == kind)
        return rv <= self.listed[kind] or any(v >= rv for v in seen)

    def of(self, kind: str, name: str, after: int) -> list[Seen]:
        return sorted(
            (e for e in self.events if e.kind == kind and e.name == name and e.rv > after),
            key=lambda e: e.rv,
        )


@contextlib.asynccontextmanager
async def recording(client: Client, ns: str) -> AsyncIterator[Timeline]:
    """Watches from a listed resourceVersion: every later change is delivered, however late the
    stream opens; the block starts once every list is done."""
    timeline = Timeline()
    listed: list[asyncio.Event] = []

    async def watch(resource: Resource, done: asyncio.Event) -> None:
        since = (await client.list(resource, ns)).resource_version
        timeline.listed[resource.kind] = int(since)
        done.set()
        async with client.watch(resource, ns, resource_version=since) as stream:
            async for ev in stream:
                if ev.type in ("ADDED", "MODIFIED", "DELETED"):
                    rv = int(ev.object["metadata"]["resourceVersion"])
                    timeline.events.append(Seen(rv, resource.kind, ev.type, ev.object))

    tasks = []
    for resource in (SANDBOXES, PODS, SANDBOX_CLAIMS):
        listed.append(asyncio.Event())
        tasks.append(asyncio.create_task(watch(resource, listed[-1])))
    try:
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in listed)), 10)
        yield timeline
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for task in tasks:  # a watch that failed must not pass unnoticed
            if not task.cancelled() and task.exception() is not None:
                raise AssertionError("a watch failed") from task.exception()


async def ready_again(client: Client, ns: str, name: str, old_uid: str) -> dict[str, Any] | None:
    """The Sandbox, once a pod other than ``old_uid`` is Ready and, read after it, the Sandbox is
    Ready (a Sandbox read first could still show its Ready from before the loss)."""
    try:
        pod = await client.get(PODS, name, ns)
    except NotFound:
        return None
    if pod["metadata"]["uid"] == old_uid or ready_of(pod).get("status") != "True":
        return None
    sb = await client.get(SANDBOXES, name, ns)
    return sb if ready_of(sb).get("status") == "True" else None


@dataclass(frozen=True)
class Loss:
    timeline: Timeline
    deleted_at: int  # the resourceVersion of the deletion
    old_uid: str


async def lose_the_pod(client: Client, ns: str, name: str, claim: str | None = None) -> Loss:
    """Delete the Ready Sandbox ``name``'s pod and record until the Sandbox (and ``claim``) is
    Ready on the replacement."""
    pod = await client.get(PODS, name, ns)
    assert pod["metadata"]["labels"][LIFECYCLE_LABEL] == "slow-ready"
    old_uid = pod["metadata"]["uid"]
    async with recording(client, ns) as timeline:
        gone = await client.delete(PODS, name, ns, uid=old_uid)
        deleted_at = int(gone["metadata"]["resourceVersion"])
        back = await eventually(
            lambda: ready_again(client, ns, name, old_uid),
            within=30,
            what=f"sandbox {name} Ready again on a new pod",
        )
        back_rv = int(back["metadata"]["resourceVersion"])
        pod_rv = int((await client.get(PODS, name, ns))["metadata"]["resourceVersion"])
        await eventually(
            lambda: timeline.caught_up("Sandbox", back_rv) and timeline.caught_up("Pod", pod_rv),
            within=10,
            what="the watches to see the Sandbox and its new pod Ready",
        )
        after = timeline.of("Sandbox", name, deleted_at)
        dipped = any(e.ready.get("status") != "True" for e in after)
        if claim is not None and dipped:  # else check_order says what went wrong

            def states() -> list[tuple[int, Any, Any]]:
                seen = timeline.of("SandboxClaim", claim, deleted_at)
                return [(e.rv, e.ready.get("status"), e.ready.get("message")) for e in seen]

            def dipped_and_back() -> bool:
                ready = [status == "True" for _, status, _ in states()]
                return False in ready and True in ready[ready.index(False) :]

            await eventually(
                dipped_and_back,
                within=20,
                what=lambda: f"claim {claim} not Ready, then Ready again; saw {states()}",
            )
    return Loss(timeline, deleted_at, old_uid)


def distinct(messages: list[str]) -> list[str]:
    """``messages`` without repeats in a row (a write that changed another field)."""
    return [m for i, m in enumerate(messages) if i == 0 or messages[i - 1] != m]


def check_order(loss: Loss, name: str) -> tuple[list[dict[str, Any]], int]:
    """The rule, on the record; returns the Sandbox's not-ready conditions in the gap and the
    resourceVersion of its Ready=True after it."""
    timeline, deleted_at = loss.timeline, loss.deleted_at
    new_pod = [
        e for e in timeline.of("Pod", name, deleted_at) if e.obj["metadata"]["uid"] != loss.old_uid
    ]
    ready_pod = next(e for e in new_pod if e.ready.get("status") == "True")
    pod_ready = ready_pod.rv
    assert "reason" not in ready_pod.ready, "the slow-ready stage drops the not-ready reason"
    assert any(
        e.obj["status"].get("phase") == "Running" and e.ready.get("status") == "False"
        for e in new_pod
    ), "the replacement pod ran not Ready first (kwok slow-ready)"

    sandbox = timeline.of("Sandbox", name, deleted_at)
    statuses = [(e.rv, e.ready.get("status"), e.ready.get("message")) for e in sandbox]
    first_false = next((e for e in sandbox if e.ready.get("status") != "True"), None)
    assert first_false is not None, f"Ready never left True after the pod was lost: {statuses}"
    assert first_false.rv < pod_ready, (
        f"Ready=False written after the replacement pod was Ready (rv {pod_ready}): {statuses}"
    )
    assert {k: first_false.ready.get(k) for k in ("status", "reason", "message")} == {
        "status": "False",
        "reason": "DependenciesNotReady",
        "message": PENDING,
    }, statuses
    assert "podIPs" not in first_false.obj["status"], "no pod IPs while the pod is gone"
    back = next(e for e in sandbox if e.rv > first_false.rv and e.ready.get("status") == "True")
    assert back.rv > pod_ready, f"Ready=True before the replacement pod was Ready: {statuses}"
    assert back.ready["message"] == "Pod is Ready"
    gap = [e.ready for e in sandbox if first_false.rv <= e.rv < back.rv]
    assert distinct([c["message"] for c in gap]) == [PENDING, RUNNING_NOT_READY], statuses
    assert all(c["status"] == "False" and c["reason"] == "DependenciesNotReady" for c in gap)
    print(f"\n{name}: pod Ready at rv {pod_ready}; sandbox Ready (rv, status, message): {statuses}")
    return gap, back.rv


# ---------------------------------------------------------------------------------------------
async def test_a_sandbox_that_loses_its_pod_is_not_ready_until_the_replacement_is(
    client: Client, manager: Manager, namespace: str
) -> None:
    body = {
        "apiVersion": SANDBOXES.api_version,
        "kind": "Sandbox",
        "metadata": {"name": "sb"},
        "spec": {
            "podTemplate": {
                "metadata": {"labels": dict(SLOW)},
                "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
            }
        },
    }
    await client.create(SANDBOXES, body, namespace)
    await eventually(
        lambda: ready_again(client, namespace, "sb", ""),
        within=20,
        what="sandbox sb Ready",
    )
    check_order(await lose_the_pod(client, namespace, "sb"), "sb")


async def test_a_claimed_warm_sandbox_that_loses_its_pod_and_its_claim_show_the_gap(
    client: Client, manager: Manager, namespace: str
) -> None:
    """Upstream's TestWarmPoolSandboxWatcher, with the order checked: a pool of one, a claim
    adopts its sandbox, the sandbox's pod goes."""
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl", **SLOW), namespace)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 1), namespace)
    await wait_ready_pool(client, namespace, "pool", 1)
    await client.create(SANDBOX_CLAIMS, claim_obj("c", pool="pool"), namespace)
    (claim,) = await wait_claims_ready(client, namespace, {"c"}, 20)
    name = claim["status"]["sandbox"]["name"]
    sb = await client.get(SANDBOXES, name, namespace)
    [owner] = [r for r in sb["metadata"]["ownerReferences"] if r.get("controller")]
    assert owner["uid"] == claim["metadata"]["uid"], "the claim controls the adopted sandbox"

    async def adopted() -> bool:  # upstream waits for this before deleting the pod
        pod = await client.get(PODS, name, namespace)
        labels = pod["metadata"]["labels"]
        [ref] = [r for r in pod["metadata"]["ownerReferences"] if r.get("controller")]
        return (
            ref["uid"] == sb["metadata"]["uid"]
            and labels.get(keys.LABEL_SANDBOX_NAME_HASH) == name_hash(name)
            and keys.LABEL_WARM_POOL_SANDBOX not in labels
        )

    await eventually(adopted, within=20, what="the adopted pod relabelled")
    loss = await lose_the_pod(client, namespace, name, claim="c")
    gap, sandbox_back = check_order(loss, name)

    claims = loss.timeline.of("SandboxClaim", "c", loss.deleted_at)
    states = [(e.rv, e.ready.get("status"), e.ready.get("message")) for e in claims]
    first_false = next((e for e in claims if e.ready.get("status") != "True"), None)
    assert first_false is not None, f"the claim never showed the gap: {states}"
    forwarded = {k: first_false.ready.get(k) for k in ("status", "reason", "message")}
    assert forwarded in [{k: c[k] for k in ("status", "reason", "message")} for c in gap], states
    back = next(e for e in claims if e.rv > first_false.rv and e.ready.get("status") == "True")
    assert back.rv > sandbox_back, f"the claim was Ready before its sandbox: {states}"
    assert back.obj["status"]["sandbox"]["name"] == name, "the same sandbox, not a new one"
