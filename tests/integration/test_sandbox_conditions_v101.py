"""What a watcher of a Sandbox sees, write by write, against the real local control plane: the
status of upstream v1.0.1 (docs/design/sandbox.md, "The Suspended condition", "The PodScheduled
condition", "Suspend and resume").

Each test watches its Sandbox from before it exists and keeps every distinct status the API
server sent (conditions in list order with type, status, reason, message and
observedGeneration; nodeName, podIPs, selector, service). The scenarios are those of upstream's
e2e tests TestSimpleSandbox, TestSandboxSuspendResumeCycleWithOperatingMode,
TestSandboxSuspensionWithTerminatingPod, TestSandboxPodDeletionKeepsSuspendedFalse,
TestSandboxSuspensionBlockedByUnownedPodConflict and TestSandboxShutdownTime; where the order
of the writes is fixed by the controller, the sequence is compared whole.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.resources import SANDBOXES
from agentsandbox.api.timefmt import format_rfc3339
from agentsandbox.kube.client import Client
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.resources import PODS
from tests.polling import eventually, stays

from .test_sandbox_controller import condition, get_or_none, new_sandbox

HOLD = "agents.x-k8s.io/test-hold"

Cond = tuple[str, str, str, str, int | None]


@pytest.fixture(scope="module")
def sandbox_controller_options() -> dict[str, Any]:
    return {"workers": 2, "cluster_domain": "cluster.local"}


# ---------------------------------------------------------------------------------- the watcher
@dataclass(frozen=True)
class Seen:
    """One status as a watcher saw it (lastTransitionTime left out)."""

    conditions: tuple[Cond, ...]
    node: str | None
    pod_ips: tuple[str, ...]
    selector: str | None
    service: str | None

    def types(self) -> list[str]:
        return [c[0] for c in self.conditions]

    def get(self, type_: str) -> Cond | None:
        return next((c for c in self.conditions if c[0] == type_), None)


def seen(sb: dict[str, Any]) -> Seen:
    status = sb.get("status") or {}
    return Seen(
        tuple(
            (
                c["type"],
                c["status"],
                c["reason"],
                c.get("message", ""),
                c.get("observedGeneration"),
            )
            for c in status.get("conditions") or ()
        ),
        status.get("nodeName"),
        tuple(status.get("podIPs") or ()),
        status.get("selector"),
        status.get("service"),
    )


@dataclass
class Trail:
    """Every distinct status of one Sandbox, in the order the watch delivered them."""

    seen: list[Seen] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    def add(self, sb: dict[str, Any]) -> None:
        now = seen(sb)
        if not self.seen or self.seen[-1] != now:
            self.seen.append(now)

    def last(self) -> Seen | None:
        if self.task is not None and self.task.done():
            self.task.result()  # the watch broke: say why
            raise AssertionError("the watch ended")
        return self.seen[-1] if self.seen else None

    async def until(self, accept: Callable[[Seen], bool], what: str) -> Seen:
        def check() -> Seen | None:
            last = self.last()
            return last if last is not None and accept(last) else None

        found: Seen = await eventually(check, within=20.0, what=lambda: f"{what}; saw {self.seen}")
        return found


@contextlib.asynccontextmanager
async def watching(client: Client, ns: str, name: str) -> AsyncIterator[Trail]:
    trail = Trail()
    selector = f"metadata.name={name}"
    listed = await client.list(SANDBOXES, ns, field_selector=selector)
    for sb in listed.items:
        trail.add(sb)

    async def watch() -> None:
        async with client.watch(
            SANDBOXES, ns, field_selector=selector, resource_version=listed.resource_version
        ) as stream:
            async for event in stream:
                if event.type in ("ADDED", "MODIFIED"):
                    trail.add(event.object)

    trail.task = asyncio.create_task(watch())
    try:
        yield trail
    finally:
        trail.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await trail.task


# ---------------------------------------------------------------------------------- expectations
def not_suspended(gen: int) -> Cond:
    return ("Suspended", "False", "NotSuspended", "Sandbox is not suspended", gen)


def terminating(gen: int) -> Cond:
    return (
        "Suspended",
        "False",
        "PodTerminating",
        "Pod is terminating. Sandbox is suspending",
        gen,
    )


def terminated(gen: int) -> Cond:
    return (
        "Suspended",
        "True",
        "PodTerminated",
        "Pod has been terminated. Sandbox is suspended",
        gen,
    )


def scheduled(gen: int) -> Cond:
    return ("PodScheduled", "True", "PodScheduled", "", gen)


def ready(gen: int) -> Cond:
    return ("Ready", "True", "DependenciesReady", "Pod is Ready; Service Exists", gen)


def suspending_ready(gen: int) -> Cond:
    return ("Ready", "False", "SandboxSuspended", "Sandbox is suspending", gen)


def suspended_ready(gen: int) -> Cond:
    return ("Ready", "False", "SandboxSuspended", "Sandbox is suspended", gen)


def expired_ready(gen: int) -> Cond:
    return ("Ready", "False", "SandboxExpired", "Sandbox has expired", gen)


def check_running(s: Seen, gen: int, order: list[str]) -> None:
    """What every status of a running Sandbox at ``gen`` shows, however far its pod got: Suspended
    False first; the conditions in ``order`` (PodScheduled missing only before the first pass);
    Ready True only once the pod is scheduled; the node name exactly while it is."""
    assert s.conditions[0] == not_suspended(gen), s
    assert [t for t in order if t in s.types()] == s.types(), s
    pod_scheduled = s.get("PodScheduled")
    is_scheduled = pod_scheduled is not None and pod_scheduled[1] == "True"
    ready_cond = s.get("Ready")
    if ready_cond is not None and ready_cond[1] == "True":
        assert is_scheduled, s
    assert (s.node is not None) == is_scheduled, s


async def suspended_transition_time(client: Client, name: str, ns: str) -> str:
    found = condition(await client.get(SANDBOXES, name, ns), "Suspended")
    assert found is not None
    return str(found["lastTransitionTime"])


async def hold_pod(client: Client, name: str, ns: str, finalizers: list[str] | None) -> None:
    await client.patch(PODS, name, {"metadata": {"finalizers": finalizers}}, ns)


# ---------------------------------------------------------------------------------- tests
async def test_create_ready_suspend_and_resume_as_a_watcher_sees_them(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    name, ns = "cycle", namespace
    selector = f"{keys.LABEL_SANDBOX_NAME_HASH}={name_hash(name)}"
    async with watching(client, ns, name) as trail:
        # create -> Ready (generation 1)
        await client.create(SANDBOXES, new_sandbox(name, service=True, operatingMode="Running"), ns)
        running = await trail.until(
            lambda s: s.conditions == (not_suspended(1), scheduled(1), ready(1)), "Ready at gen 1"
        )
        pod = await client.get(PODS, name, ns)
        assert running.node == pod["spec"]["nodeName"] and running.node
        assert running.pod_ips and running.selector == selector and running.service == name
        for s in trail.seen[1:]:  # [0]: the Sandbox as created, without a status
            check_running(s, 1, ["Suspended", "PodScheduled", "Ready"])
        created_at = await suspended_transition_time(client, name, ns)

        # suspend (generation 2) while a finalizer holds the pod: the suspending state is certain
        await hold_pod(client, name, ns, [HOLD])
        try:
            mark = len(trail.seen)
            await client.patch(SANDBOXES, name, {"spec": {"operatingMode": "Suspended"}}, ns)
            suspending = await trail.until(
                lambda s: s.get("Suspended") == terminating(2), "PodTerminating"
            )
            assert suspending.conditions == (terminating(2), scheduled(2), suspending_ready(2))
            assert suspending.node == running.node and suspending.pod_ips == running.pod_ips
            held = await client.get(PODS, name, ns)
            assert held["metadata"].get("deletionTimestamp")
            # False -> False: the transition time stays
            assert await suspended_transition_time(client, name, ns) == created_at
            # nothing changes while the pod is held (and a second passes, so that the next
            # transition time is a later one)
            await stays(
                trail.last, accept=lambda s: s == suspending, for_=1.1, what="still suspending"
            )
        finally:
            await hold_pod(client, name, ns, None)
        suspended = await trail.until(lambda s: s.get("Suspended") == terminated(2), "suspended")
        assert suspended.conditions == (terminated(2), suspended_ready(2))
        assert suspended.node is None and suspended.pod_ips == ()
        assert suspended.selector == selector and suspended.service == name  # kept
        assert trail.seen[mark:] == [suspending, suspended]  # in this order, nothing between
        suspended_at = await suspended_transition_time(client, name, ns)
        assert suspended_at > created_at
        await stays(
            lambda: get_or_none(client, PODS, name, ns),
            accept=lambda p: p is None,
            for_=1.1,
            what="no pod while suspended",
        )

        # resume (generation 3): PodScheduled comes back, appended after Ready
        mark = len(trail.seen)
        await client.patch(SANDBOXES, name, {"spec": {"operatingMode": "Running"}}, ns)
        resumed = await trail.until(
            lambda s: s.conditions == (not_suspended(3), ready(3), scheduled(3)), "Ready at gen 3"
        )
        for s in trail.seen[mark:]:
            check_running(s, 3, ["Suspended", "Ready", "PodScheduled"])
        assert trail.seen[mark].get("Ready") != ready(3)  # not Ready before the new pod is
        pod = await client.get(PODS, name, ns)
        assert resumed.node == pod["spec"]["nodeName"] and resumed.pod_ips
        assert await suspended_transition_time(client, name, ns) > suspended_at


async def test_a_pod_restart_keeps_suspended_false_and_its_transition_time(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    name, ns = "restart", namespace
    async with watching(client, ns, name) as trail:
        await client.create(SANDBOXES, new_sandbox(name, service=True), ns)
        before = await trail.until(
            lambda s: s.conditions == (not_suspended(1), scheduled(1), ready(1)), "Ready"
        )
        created_at = await suspended_transition_time(client, name, ns)
        old = await client.get(PODS, name, ns)
        mark = len(trail.seen)
        await client.delete(PODS, name, ns)

        async def new_pod() -> bool:
            pod = await get_or_none(client, PODS, name, ns)
            return pod is not None and pod["metadata"]["uid"] != old["metadata"]["uid"]

        await eventually(new_pod, within=20.0, what="the pod recreated")
        after = await trail.until(lambda s: s.conditions == before.conditions, "Ready again")
        restart = trail.seen[mark:]
        assert any(s.get("Ready") is not None and s.get("Ready") != ready(1) for s in restart)
        for s in restart:
            check_running(s, 1, ["Suspended", "PodScheduled", "Ready"])
        assert after.node == (await client.get(PODS, name, ns))["spec"]["nodeName"]
        assert await suspended_transition_time(client, name, ns) == created_at


async def test_a_suspension_is_blocked_by_a_pod_that_is_not_the_sandboxs(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    """The pod has neither an owner nor the tracking label: our caches never see it, and the
    pod-name lookup before reporting the pod gone finds it."""
    name, ns = "conflict", namespace
    foreign = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]},
    }
    made = await client.create(PODS, foreign, ns)
    async with watching(client, ns, name) as trail:
        await client.create(
            SANDBOXES, new_sandbox(name, service=True, operatingMode="Suspended"), ns
        )
        blocked = await trail.until(lambda s: bool(s.conditions), "a status")
        assert blocked.conditions == (
            (
                "Suspended",
                "False",
                "PodNotOwned",
                "Refused to delete pod because it is not owned by this sandbox",
                1,
            ),
            suspending_ready(1),
        )
        assert blocked.selector == f"{keys.LABEL_SANDBOX_NAME_HASH}={name_hash(name)}"
        assert blocked.service == name and blocked.node is None and blocked.pod_ips == ()
        assert trail.seen[1:] == [blocked]  # never reported suspended first
    pod = await client.get(PODS, name, ns)
    assert pod["metadata"]["uid"] == made["metadata"]["uid"]
    assert not pod["metadata"].get("deletionTimestamp")


async def test_expiry_drops_pod_scheduled_and_keeps_suspended(
    client: Client, sandbox_manager: Manager, namespace: str
) -> None:
    name, ns = "expiring", namespace
    async with watching(client, ns, name) as trail:
        await client.create(SANDBOXES, new_sandbox(name, service=True), ns)
        await trail.until(
            lambda s: s.conditions == (not_suspended(1), scheduled(1), ready(1)), "Ready"
        )
        mark = len(trail.seen)
        shutdown = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
        patch = {"spec": {"shutdownTime": format_rfc3339(shutdown)}}
        await client.patch(SANDBOXES, name, patch, ns)
        done = await trail.until(lambda s: s.service is None, "expired and cleaned up")
        assert done == Seen((not_suspended(2), expired_ready(2)), None, (), None, None)
        running, marked = trail.seen[mark : mark + 2]
        assert running.conditions == (not_suspended(2), scheduled(2), ready(2))
        # the first expiry pass only marks it: PodScheduled goes, the rest of the status stays
        assert marked.conditions == (not_suspended(2), expired_ready(2))
        assert marked.node == running.node and marked.service == name
        assert trail.seen[mark:] == [running, marked, done]
    assert datetime.now(UTC) >= shutdown
