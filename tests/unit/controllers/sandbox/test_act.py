"""The Sandbox act step (``controllers/sandbox/act.py``) through a small fake client.

The fake records every API call in order and fails the calls a test tells it to fail, so each
test checks what the reconciler writes, with which precondition, and what it reports (status,
the ``agents.x-k8s.io/pod-name`` annotation, events, the error) when a write fails. Tests are
named after the rule they check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.resources import SANDBOXES
from agentsandbox.controllers.sandbox.act import SandboxReconcileError, SandboxWriter
from agentsandbox.controllers.sandbox.controller import SandboxReconciler
from agentsandbox.controllers.sandbox.memory import CreatedPods, FirstStatusHold, StatusMemory
from agentsandbox.controllers.sandbox.plan import plan
from agentsandbox.kube.errors import AlreadyExists, Conflict, InternalError, KubeError, NotFound
from agentsandbox.kube.reconcile import Request, retry_within
from agentsandbox.kube.resources import PERSISTENTVOLUMECLAIMS, PODS, SERVICES, Resource
from tests.unit.controllers.sandbox.test_memory import Clock
from tests.unit.controllers.sandbox.test_plan import (
    NOW,
    NS,
    UID,
    _Cache,
    owner_ref,
    pod,
    pvc,
    running_pod,
    sandbox,
    service_obj,
    snap,
    vct,
)

SANDBOX_KIND = SANDBOXES.kind


# ---------------------------------------------------------------------------------- fakes
@dataclass
class Call:
    verb: str  # create | patch | delete | get
    kind: str
    name: str
    body: Any = None
    subresource: str | None = None
    uid: str | None = None
    field_manager: str | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        what = f"{self.kind}/{self.subresource}" if self.subresource else self.kind
        return (self.verb, what, self.name)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, Mapping):
        return patch
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


class FakeClient:
    """The four Client methods the Sandbox reconciler uses. Calls are recorded in order;
    ``fail[(verb, kind[/subresource], name)]`` is raised instead of answering; ``objects`` is
    the server's state: what a GET returns (NotFound otherwise) and what a patch applies to.
    A create answers with the body, a patch with the patched object."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.fail: dict[tuple[str, str, str], KubeError] = {}
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}

    def _record(self, call: Call) -> None:
        self.calls.append(call)
        err = self.fail.get(call.key)
        if err is not None:
            raise err

    async def create(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        namespace: str | None = None,
        *,
        field_manager: str | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        self._record(
            Call("create", resource.kind, obj["metadata"]["name"], obj, field_manager=field_manager)
        )
        return dict(obj)

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        self._record(Call("patch", resource.kind, name, patch, subresource=subresource))
        base = self.objects.get((resource.kind, name)) or {"metadata": {"name": name}}
        patched: dict[str, Any] = merge_patch(base, patch)
        return patched

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        self._record(Call("delete", resource.kind, name, uid=uid))
        return {}

    async def get(
        self, resource: Resource, name: str, namespace: str | None = None, **_: Any
    ) -> dict[str, Any]:
        self._record(Call("get", resource.kind, name))
        found = self.objects.get((resource.kind, name))
        if found is None:
            raise NotFound(message=f'{resource.kind} "{name}" not found')
        return found

    def sent(self) -> list[tuple[str, str, str]]:
        return [c.key for c in self.calls]

    def one(self, verb: str, kind: str, name: str) -> Call:
        [call] = [c for c in self.calls if c.key == (verb, kind, name)]
        return call

    def status_patches(self) -> list[dict[str, Any]]:
        return [
            c.body["status"]
            for c in self.calls
            if c.key == ("patch", f"{SANDBOX_KIND}/status", c.name)
        ]

    def annotation_patches(self) -> list[Any]:
        return [
            c.body["metadata"]["annotations"][keys.ANNOTATION_POD_NAME]
            for c in self.calls
            if c.key == ("patch", SANDBOX_KIND, c.name)
        ]


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(
        self, regarding: Mapping[str, Any], type: str, reason: str, note: str = "", **_: Any
    ) -> bool:
        self.events.append((type, reason, note))
        return True

    def reasons(self) -> list[str]:
        return [reason for _, reason, _ in self.events]


@dataclass
class Rig:
    reconciler: SandboxReconciler
    client: FakeClient
    recorder: Recorder
    monotonic: Clock  # the memories' clock (first-status hold, created pods, status memory)

    async def run(self, name: str = "my-sandbox") -> Any:
        return await self.reconciler.reconcile(Request(NS, name))

    async def fails(self, name: str = "my-sandbox") -> SandboxReconcileError:
        with pytest.raises(SandboxReconcileError) as info:
            await self.run(name)
        return info.value


def rig(
    sb: dict[str, Any],
    *pods: dict[str, Any],
    service: dict[str, Any] | None = None,
    pvcs: tuple[dict[str, Any], ...] = (),
    grace: float = 0.0,
) -> Rig:
    client, recorder, monotonic = FakeClient(), Recorder(), Clock()
    for obj in (*pods, *((service,) if service else ()), *pvcs):
        client.objects[(obj["kind"], obj["metadata"]["name"])] = obj
    writer = SandboxWriter(client, recorder)  # type: ignore[arg-type]
    writer.created_pods = CreatedPods(clock=monotonic)
    writer.status_memory = StatusMemory(clock=monotonic)
    reconciler = SandboxReconciler(
        writer,
        _Cache(sb),  # type: ignore[arg-type]
        _Cache(*pods),  # type: ignore[arg-type]
        _Cache(*(service,) if service else ()),  # type: ignore[arg-type]
        _Cache(*pvcs),  # type: ignore[arg-type]
        clock=lambda: NOW,
    )
    # the first-status hold has its own tests below; the others check every write of one pass
    reconciler.first_status = FirstStatusHold(grace, clock=monotonic)
    return Rig(reconciler, client, recorder, monotonic)


def settled(sb: dict[str, Any], *pods: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """``sb`` with the status a pass over ``pods`` would have written."""
    decided = plan(snap(sb, *pods, **kw))
    assert decided.status is not None
    out = dict(sb)
    out["status"] = decided.status
    return out


def ready_of(status: Mapping[str, Any]) -> tuple[str, str, str]:
    [c] = [c for c in status["conditions"] if c["type"] == "Ready"]
    return c["status"], c["reason"], c["message"]


def boom(what: str = "etcdserver: request timed out") -> InternalError:
    return InternalError(message=what)


POD, SVC, PVC = PODS.kind, SERVICES.kind, PERSISTENTVOLUMECLAIMS.kind
STATUS = f"{SANDBOX_KIND}/status"


# ---------------------------------------------------------------------------------- write order
async def test_a_cold_start_writes_pvcs_then_pod_then_service_then_status() -> None:
    """No pod-name annotation patch: upstream v1.0.1 never adds it."""
    r = rig(sandbox(service=True, vcts=[vct("data")]))
    await r.run()
    assert r.client.sent() == [
        ("create", PVC, "data-my-sandbox"),
        ("create", POD, "my-sandbox"),
        ("create", SVC, "my-sandbox"),
        ("patch", STATUS, "my-sandbox"),
    ]
    for call in r.client.calls:
        if call.verb == "create":
            assert call.field_manager == "sandbox-controller"
    assert r.client.annotation_patches() == []
    assert r.recorder.reasons() == ["PodCreated"]


async def test_a_sandbox_created_with_its_pod_name_annotation_needs_no_annotation_patch() -> None:
    """The warm pool names its sandboxes and puts the pod-name annotation in the create: the
    first pass creates the pod and writes the status, nothing else; the event says the pod was
    created (the annotation on a Sandbox with no status is not a pod that went away)."""
    sb = sandbox()
    sb["metadata"].setdefault("annotations", {})[keys.ANNOTATION_POD_NAME] = sb["metadata"]["name"]
    r = rig(sb)
    await r.run()
    assert r.client.annotation_patches() == []
    assert [k for k in r.client.sent() if k[0] == "patch" and k[1] == SANDBOX_KIND] == []
    assert r.recorder.reasons() == ["PodCreated"]


async def test_a_pass_before_the_pod_cache_shows_our_new_pod_does_not_create_it_again() -> None:
    """The create's answer stands in for the pod until the cache shows it (or 10 s pass): no
    second POST answered AlreadyExists, no GET (a profile at 30 claims/s saw 96 such pairs per
    650 sandboxes, docs/benchmarks.md)."""
    r = rig(sandbox())
    await r.run()
    assert [k for k in r.client.sent() if k[0] == "create" and k[1] == POD] == [
        ("create", POD, "my-sandbox")
    ]
    before = len(r.client.calls)
    result = await r.run()  # the pod cache is still empty
    again = r.client.calls[before:]
    assert [c.key for c in again if c.verb in ("create", "get")] == []
    # decided on a pod only our memory knows: it looks again within the memory's lifetime
    assert result is not None and 0 < result.requeue_after <= 10.0


async def test_a_pod_we_delete_is_no_longer_stood_in_for() -> None:
    """Created, then suspended before the cache ever showed the pod: one DELETE, and the next
    pass neither deletes nor creates it again (the memory went with the delete)."""
    sb = sandbox()
    r = rig(sb)
    await r.run()
    sb["spec"]["replicas"] = 0  # the cached object, as a watch event would replace it
    sb["spec"].pop("operatingMode", None)
    before = len(r.client.calls)
    await r.run()
    assert [c.key for c in r.client.calls[before:] if c.verb == "delete"] == [
        ("delete", POD, "my-sandbox")
    ]
    before = len(r.client.calls)
    await r.run()
    assert [c.key for c in r.client.calls[before:] if c.verb in ("delete", "create")] == []


# ---------------------------------------------------------------------- first status hold
def _statuses(r: Rig) -> list[Any]:
    return [c.body for c in r.client.calls if c.key[1] == STATUS]


async def test_the_first_not_ready_status_waits_for_the_new_pod_to_become_ready() -> None:
    """Right after creating the pod, a first status that would only say DependenciesNotReady
    is held back (the pass asks to look again within the grace); the pass the pod's Ready event
    brings writes one status, Ready=True: one write instead of two."""
    sb = sandbox()
    r = rig(sb, grace=5.0)
    result = await r.run()
    assert ("create", POD, "my-sandbox") in r.client.sent()
    assert _statuses(r) == []
    assert result is not None and 0 < result.requeue_after <= 5.0
    r.reconciler.pods = _Cache(running_pod())  # type: ignore[assignment]
    await r.run()
    [body] = _statuses(r)
    assert ready_of(body["status"])[:2] == ("True", "DependenciesReady")


async def test_a_pod_still_not_ready_after_the_grace_gets_its_not_ready_status() -> None:
    r = rig(sandbox(), grace=1.0)
    await r.run()
    assert _statuses(r) == []
    r.reconciler.pods = _Cache(pod(phase="Pending"))  # type: ignore[assignment]
    r.monotonic.now += 0.5
    result = await r.run()
    assert _statuses(r) == []  # held back until the grace is over...
    assert result is not None and result.requeue_after == pytest.approx(0.5)
    r.monotonic.now += 0.5
    await r.run()
    [body] = _statuses(r)  # ...then written
    assert ready_of(body["status"])[:2] == ("False", "DependenciesNotReady")


async def test_a_failed_pod_create_writes_its_status_at_once() -> None:
    r = rig(sandbox(), grace=5.0)
    r.client.fail[("create", POD, "my-sandbox")] = boom()
    await r.fails()
    [body] = _statuses(r)
    assert ready_of(body["status"])[:2] == ("False", "ReconcilerError")


async def test_a_sandbox_with_a_status_is_never_held_back() -> None:
    """A pod recreated for a Sandbox that already reported (e.g. Ready before its pod was
    deleted) changes its status at once: only a first status waits."""
    sb = settled(sandbox(), running_pod())
    r = rig(sb, grace=5.0)
    await r.run()
    [body] = _statuses(r)
    assert ready_of(body["status"])[:2] == ("False", "DependenciesNotReady")


async def test_a_grace_of_zero_writes_the_first_status_at_once() -> None:
    r = rig(sandbox(), grace=0.0)
    await r.run()
    [body] = _statuses(r)
    assert ready_of(body["status"])[:2] == ("False", "DependenciesNotReady")


# ---------------------------------------------------------------------- status memory
async def test_a_pass_before_the_cache_shows_our_status_write_does_not_write_it_again() -> None:
    """The status write's answer stands in for the cached status until the cache shows that
    version: a second pass (our pod patch's event, say) on the stale cache writes nothing."""
    sb = sandbox()
    r = rig(sb, running_pod())
    r.client.objects[(SANDBOX_KIND, "my-sandbox")] = {
        "metadata": {"name": "my-sandbox", "uid": UID, "resourceVersion": "100"}
    }
    original_patch = r.client.patch

    async def patch(resource: Resource, name: str, body: Any, *a: Any, **kw: Any) -> Any:
        answer = await original_patch(resource, name, body, *a, **kw)
        answer["metadata"] = {**answer["metadata"], "resourceVersion": "101"}
        return answer

    r.client.patch = patch  # type: ignore[method-assign,assignment]
    await r.run()
    assert len(_statuses(r)) == 1
    await r.run()  # the cache still holds resourceVersion 100 without a status
    assert len(_statuses(r)) == 1
    # once the cache shows our version, it is the cache that counts again
    shown = settled(sb, running_pod())
    shown["metadata"] = {**shown["metadata"], "resourceVersion": "101"}
    r.reconciler.status_memory.seen(shown)
    assert len(r.reconciler.status_memory) == 0


async def test_deletes_carry_the_uid_precondition() -> None:
    sb = sandbox(replicas=0, service=False)
    r = rig(sb, running_pod(), service=service_obj())
    await r.run()
    assert r.client.one("delete", POD, "my-sandbox").uid == "pod-uid-my-sandbox"
    assert r.client.one("delete", SVC, "my-sandbox").uid == "svc-uid"


async def test_an_adoption_patch_carries_the_resource_version_it_was_decided_on() -> None:
    adoptable = running_pod(owner=None, labels={keys.LABEL_ADOPTABLE: "true"})
    r = rig(sandbox(), adoptable)
    await r.run()
    body = r.client.one("patch", POD, "my-sandbox").body
    assert body["metadata"]["resourceVersion"] == "7"
    assert body["metadata"]["ownerReferences"] == [owner_ref()]
    assert r.client.annotation_patches() == []
    assert "Adopted" in r.recorder.reasons()


# --------------------------------------------------------------------------------------- pod writes
async def test_a_failed_suspend_delete_keeps_the_pod_name_annotation() -> None:
    """Dropping it would make the next pass look for ``sandbox.name`` and never retry."""
    sb = sandbox(replicas=0, sandbox_annotations={keys.ANNOTATION_POD_NAME: "warm-pod-1"})
    r = rig(sb, running_pod(name="warm-pod-1"))
    r.client.fail[("delete", POD, "warm-pod-1")] = boom()
    err = await r.fails()
    assert r.client.annotation_patches() == []
    assert err.errors == ["failed to delete pod: etcdserver: request timed out"]
    [status] = r.client.status_patches()
    assert ready_of(status)[:2] == ("False", "ReconcilerError")
    assert "PodDeleted" not in r.recorder.reasons()
    assert "ReconcilerError" in r.recorder.reasons()


async def test_a_successful_suspend_delete_removes_the_pod_name_annotation() -> None:
    sb = sandbox(replicas=0, sandbox_annotations={keys.ANNOTATION_POD_NAME: "warm-pod-1"})
    r = rig(sb, running_pod(name="warm-pod-1"))
    await r.run()
    assert r.client.annotation_patches() == [None]
    assert r.recorder.reasons() == ["PodDeleted"]


async def test_a_failed_adoption_patch_reports_no_pod_and_writes_no_annotation() -> None:
    adoptable = running_pod(owner=None, labels={keys.LABEL_ADOPTABLE: "true"})
    r = rig(sandbox(), adoptable)
    r.client.fail[("patch", POD, "my-sandbox")] = Conflict(
        message="the object has been modified; please apply your changes to the latest version"
    )
    err = await r.fails()
    assert r.client.annotation_patches() == []
    [status] = r.client.status_patches()
    assert "replicas" not in status or status["replicas"] is None
    assert "podIPs" not in status and "selector" not in status
    assert ready_of(status) == (
        "False",
        "ReconcilerError",
        "Error seen: failed to update pod: the object has been modified; please apply your "
        "changes to the latest version",
    )
    assert err.errors[0].startswith("failed to update pod: ")
    assert "Adopted" not in r.recorder.reasons()


async def test_a_failed_metadata_sync_still_reports_our_pod_and_keeps_the_annotation() -> None:
    sb = sandbox(labels={"team": "a"})  # the live pod lacks the label: a sync patch
    r = rig(sb, running_pod())
    r.client.fail[("patch", POD, "my-sandbox")] = boom()
    await r.fails()
    assert r.client.annotation_patches() == []  # not written after a failed pod write
    [status] = r.client.status_patches()
    assert status["replicas"] == 1 and status["podIPs"] == ["10.0.0.7"]


async def test_a_failed_pod_create_keeps_the_annotation_and_reports_no_pod() -> None:
    sb = sandbox(sandbox_annotations={keys.ANNOTATION_POD_NAME: "gone-pod"})
    r = rig(sb)
    r.client.fail[("create", POD, "my-sandbox")] = boom("quota exceeded")
    err = await r.fails()
    assert r.client.annotation_patches() == []
    assert err.errors == ["quota exceeded"]  # upstream returns a create error verbatim
    assert r.recorder.reasons() == ["ReconcilerError"]


async def test_a_failed_annotation_patch_is_reported_with_upstreams_wrap() -> None:
    """A stale annotation (its pod is gone) is cleared; that patch failing is reported."""
    r = rig(sandbox(sandbox_annotations={keys.ANNOTATION_POD_NAME: "gone"}))
    r.client.fail[("patch", SANDBOX_KIND, "my-sandbox")] = boom()
    err = await r.fails()
    assert err.errors == ["failed to clear pod name annotation: etcdserver: request timed out"]


# ---------------------------------------------------------------------------------- AlreadyExists
async def test_a_pvc_create_answered_already_exists_reads_it_and_decides_again() -> None:
    """Here the PVC turns out to be a StatefulSet's: an error, and no pod is created
    (docs/design/sandbox.md, "A PVC that is not ours blocks the pod")."""
    foreign = pvc("data-my-sandbox", owner=owner_ref("other-uid", "web", "StatefulSet"))
    r = rig(sandbox(vcts=[vct("data")]))
    r.client.fail[("create", PVC, "data-my-sandbox")] = AlreadyExists(message="exists")
    r.client.objects[(PVC, "data-my-sandbox")] = foreign
    err = await r.fails()
    assert r.client.sent()[:2] == [
        ("create", PVC, "data-my-sandbox"),
        ("get", PVC, "data-my-sandbox"),
    ]
    assert ("create", POD, "my-sandbox") not in r.client.sent()
    assert err.errors == [
        'PVC "data-my-sandbox" is owned by StatefulSet/web (UID: other-uid), '
        'not by sandbox "my-sandbox"',
        'pod "my-sandbox" is not created: it would mount PVC "data-my-sandbox", '
        'not owned by sandbox "my-sandbox"',
    ]
    [status] = r.client.status_patches()
    assert '"data-my-sandbox"' in ready_of(status)[2]


async def test_a_pvc_already_exists_with_the_opt_in_label_is_adopted_then_the_pod_created() -> None:
    orphan = pvc("data-my-sandbox", owner=None, **{keys.LABEL_ADOPTABLE: "true"})
    r = rig(sandbox(vcts=[vct("data")]))
    r.client.fail[("create", PVC, "data-my-sandbox")] = AlreadyExists(message="exists")
    r.client.objects[(PVC, "data-my-sandbox")] = orphan
    await r.run()
    assert r.client.sent()[:4] == [
        ("create", PVC, "data-my-sandbox"),
        ("get", PVC, "data-my-sandbox"),
        ("patch", PVC, "data-my-sandbox"),
        ("create", POD, "my-sandbox"),
    ]
    assert r.client.one("patch", PVC, "data-my-sandbox").body["metadata"]["resourceVersion"] == "3"


async def test_a_failed_pvc_adoption_blocks_the_pod() -> None:
    orphan = pvc("data-my-sandbox", owner=None, **{keys.LABEL_ADOPTABLE: "true"})
    r = rig(sandbox(vcts=[vct("data")]), pvcs=(orphan,))
    r.client.fail[("patch", PVC, "data-my-sandbox")] = Conflict(message="modified")
    err = await r.fails()
    assert ("create", POD, "my-sandbox") not in r.client.sent()
    assert err.errors[0] == "failed to update PVC with owner reference: modified"


async def test_a_failed_pvc_create_does_not_block_the_pod() -> None:
    r = rig(sandbox(vcts=[vct("data")]))
    r.client.fail[("create", PVC, "data-my-sandbox")] = boom()
    err = await r.fails()
    assert ("create", POD, "my-sandbox") in r.client.sent()
    assert err.errors == ["etcdserver: request timed out"]


async def test_a_pvc_get_failure_after_already_exists_is_wrapped_as_upstream() -> None:
    r = rig(sandbox(vcts=[vct("data")]))
    r.client.fail[("create", PVC, "data-my-sandbox")] = AlreadyExists(message="exists")
    r.client.fail[("get", PVC, "data-my-sandbox")] = boom()
    err = await r.fails()
    assert err.errors == ["PVC Get Failed: etcdserver: request timed out"]


async def test_a_service_create_answered_already_exists_reads_it_and_adopts_it() -> None:
    orphan = service_obj(owner=None, labels={keys.LABEL_ADOPTABLE: "true"}, selector={})
    r = rig(sandbox(service=True), running_pod())
    r.client.fail[("create", SVC, "my-sandbox")] = AlreadyExists(message="exists")
    r.client.objects[(SVC, "my-sandbox")] = orphan
    await r.run()
    svc_calls = [k for k in r.client.sent() if k[1] == SVC]
    assert svc_calls == [
        ("create", SVC, "my-sandbox"),
        ("get", SVC, "my-sandbox"),
        ("patch", SVC, "my-sandbox"),
    ]
    meta = r.client.one("patch", SVC, "my-sandbox").body["metadata"]
    assert meta["ownerReferences"] == [owner_ref()] and meta["resourceVersion"] == "9"
    [status] = r.client.status_patches()
    assert status["service"] == "my-sandbox"


async def test_a_service_already_exists_owned_by_another_is_an_error() -> None:
    foreign = service_obj(owner=owner_ref("other-uid", "web", "StatefulSet"))
    r = rig(sandbox(service=True), running_pod())
    r.client.fail[("create", SVC, "my-sandbox")] = AlreadyExists(message="exists")
    r.client.objects[(SVC, "my-sandbox")] = foreign
    err = await r.fails()
    assert err.errors == [
        'service "my-sandbox" is owned by StatefulSet/web (UID: other-uid), '
        'not by sandbox "my-sandbox"'
    ]
    assert ("patch", SVC, "my-sandbox") not in r.client.sent()


async def test_a_failed_service_adoption_reports_no_service() -> None:
    orphan = service_obj(owner=None, labels={keys.LABEL_ADOPTABLE: "true"})
    r = rig(sandbox(service=True), running_pod(), service=orphan)
    r.client.fail[("patch", SVC, "my-sandbox")] = Conflict(message="modified")
    err = await r.fails()
    assert err.errors == ["failed to update service with owner reference: modified"]
    [status] = r.client.status_patches()
    assert "service" not in status and "serviceFQDN" not in status


async def test_a_failed_service_drift_fix_is_wrapped_and_keeps_reporting_the_service() -> None:
    drifted = service_obj(selector={"app": "other"})
    r = rig(sandbox(service=True), running_pod(), service=drifted)
    r.client.fail[("patch", SVC, "my-sandbox")] = boom()
    err = await r.fails()
    assert err.errors == ["failed to patch owned service: etcdserver: request timed out"]
    [status] = r.client.status_patches()
    assert status["service"] == "my-sandbox"


# ---------------------------------------------------------------------------------- aggregation
async def test_child_errors_and_a_status_write_failure_are_reported_together() -> None:
    r = rig(sandbox(service=True))
    r.client.fail[("create", POD, "my-sandbox")] = boom("pod quota exceeded")
    r.client.fail[("create", SVC, "my-sandbox")] = boom("service quota exceeded")
    r.client.fail[("patch", STATUS, "my-sandbox")] = boom()
    err = await r.fails()
    assert err.errors == [
        "pod quota exceeded",
        "service quota exceeded",
        "status update failed: etcdserver: request timed out",
    ]
    # the status the pass tried to write names both child errors
    [call] = [c for c in r.client.calls if c.key == ("patch", STATUS, "my-sandbox")]
    assert ready_of(call.body["status"]) == (
        "False",
        "ReconcilerError",
        "Error seen: pod quota exceeded\nservice quota exceeded",
    )
    assert r.recorder.events == [
        ("Warning", "ReconcilerError", "pod quota exceeded\nservice quota exceeded")
    ]


async def test_an_error_retry_is_bounded_by_the_time_left_to_shutdown() -> None:
    """Backoff after a child error must not postpone the expiry (docs/design/sandbox.md,
    "Requeues and the expiry bound")."""
    r = rig(sandbox(shutdown=NOW + timedelta(seconds=30)))
    r.client.fail[("create", POD, "my-sandbox")] = boom()
    err = await r.fails()
    assert retry_within(err) == 30.0


async def test_an_error_retry_is_bounded_by_the_minimum_expiry_requeue() -> None:
    r = rig(sandbox(shutdown=NOW + timedelta(seconds=0.5)))
    r.client.fail[("create", POD, "my-sandbox")] = boom()
    assert retry_within(await r.fails()) == 2.0


async def test_an_error_retry_without_shutdown_time_is_left_to_the_backoff() -> None:
    r = rig(sandbox())
    r.client.fail[("create", POD, "my-sandbox")] = boom()
    assert retry_within(await r.fails()) is None


# ---------------------------------------------------------------------------------- status writes
async def test_status_is_not_written_when_unchanged() -> None:
    sb = settled(
        sandbox(labels={"team": "a"}, sandbox_annotations={keys.ANNOTATION_POD_NAME: "my-sandbox"}),
        running_pod(),
    )
    r = rig(sb, running_pod())  # only the pod's labels are behind
    assert await r.run() is None
    assert r.client.sent() == [("patch", POD, "my-sandbox")]


async def test_status_write_is_a_merge_patch_of_the_changed_fields_only() -> None:
    pending = pod()
    sb = settled(sandbox(sandbox_annotations={keys.ANNOTATION_POD_NAME: "my-sandbox"}), pending)
    r = rig(sb, running_pod())
    await r.run()
    [status] = r.client.status_patches()
    assert set(status) == {"podIPs", "conditions"}


# ---------------------------------------------------------------------------------- expiry
def expired(policy: str | None = None, **kw: Any) -> dict[str, Any]:
    """A Sandbox past its shutdownTime, already marked expired (the cleanup pass is next)."""
    sb = sandbox(shutdown=NOW - timedelta(minutes=1), policy=policy, **kw)
    marked = plan(snap(sb))
    assert marked.status is not None
    sb["status"] = {**marked.status, "replicas": 1, "selector": "x", "podIPs": ["10.0.0.7"]}
    return sb


async def test_expiry_first_pass_only_marks_and_records_the_event() -> None:
    sb = sandbox(shutdown=NOW - timedelta(minutes=1))
    r = rig(sb, running_pod())
    result = await r.run()
    assert result is not None and result.requeue_after == 0.001
    assert r.client.sent() == [("patch", STATUS, "my-sandbox")]
    assert r.recorder.reasons() == ["SandboxExpired"]


async def test_expiry_with_retain_deletes_children_and_reduces_status_to_conditions() -> None:
    r = rig(expired("Retain"), running_pod(), service=service_obj())
    assert await r.run() is None
    assert r.client.sent() == [
        ("delete", POD, "my-sandbox"),
        ("delete", SVC, "my-sandbox"),
        ("patch", STATUS, "my-sandbox"),
    ]
    [status] = r.client.status_patches()
    assert status == {"replicas": None, "selector": None, "podIPs": None}


async def test_expiry_with_retain_and_a_failing_pod_delete_writes_no_status() -> None:
    r = rig(expired("Retain"), running_pod(), service=service_obj())
    r.client.fail[("delete", POD, "my-sandbox")] = boom()
    err = await r.fails()
    assert r.client.sent() == [("delete", POD, "my-sandbox"), ("delete", SVC, "my-sandbox")]
    assert err.errors == ["failed to delete pod: etcdserver: request timed out"]
    assert r.recorder.reasons() == ["ReconcilerError"]


async def test_a_failed_expiry_cleanup_is_retried_within_the_minimum_expiry_requeue() -> None:
    r = rig(expired("Retain"), running_pod())
    r.client.fail[("delete", POD, "my-sandbox")] = boom()
    assert retry_within(await r.fails()) == 2.0
    r = rig(expired("Delete"))
    r.client.fail[("delete", SANDBOX_KIND, "my-sandbox")] = boom()
    assert retry_within(await r.fails()) == 2.0


async def test_a_failed_expiry_mark_is_retried_within_the_minimum_expiry_requeue() -> None:
    r = rig(sandbox(shutdown=NOW - timedelta(minutes=1)), running_pod())
    r.client.fail[("patch", STATUS, "my-sandbox")] = boom()
    err = await r.fails()
    assert err.errors == ["status update failed: etcdserver: request timed out"]
    assert retry_within(err) == 2.0


async def test_expiry_with_delete_deletes_the_sandbox_with_a_uid_precondition() -> None:
    r = rig(expired("Delete"), running_pod(), service=service_obj())
    r.client.fail[("delete", SVC, "my-sandbox")] = boom()
    assert await r.run() is None  # the garbage collector takes what is left
    assert r.client.sent() == [
        ("delete", POD, "my-sandbox"),
        ("delete", SVC, "my-sandbox"),
        ("delete", SANDBOX_KIND, "my-sandbox"),
    ]
    assert r.client.one("delete", SANDBOX_KIND, "my-sandbox").uid == UID
    assert r.client.status_patches() == []


async def test_a_failed_sandbox_delete_on_expiry_is_an_error_and_writes_no_status() -> None:
    r = rig(expired("Delete"), running_pod())
    r.client.fail[("delete", SANDBOX_KIND, "my-sandbox")] = boom()
    err = await r.fails()
    assert err.errors == ["failed to delete the expired sandbox: etcdserver: request timed out"]
    assert r.client.status_patches() == []
    assert r.recorder.reasons() == ["ReconcilerError"]


async def test_expiry_of_a_sandbox_already_gone_is_done() -> None:
    r = rig(expired("Delete"))
    r.client.fail[("delete", SANDBOX_KIND, "my-sandbox")] = NotFound(message="gone")
    assert await r.run() is None


# ---------------------------------------------------------------------------------- events
async def test_events_follow_transitions_not_passes() -> None:
    # create -> PodCreated; the pod disappears -> PodRecreated; nothing changes -> no event
    r = rig(sandbox())
    await r.run()
    assert r.recorder.reasons() == ["PodCreated"]
    sb = settled(sandbox(sandbox_annotations={keys.ANNOTATION_POD_NAME: "my-sandbox"}), pod())
    r = rig(sb)
    await r.run()
    assert r.recorder.reasons() == ["PodRecreated"]
    r = rig(settled(sb, running_pod()), running_pod())
    await r.run()
    assert r.recorder.reasons() == []


async def test_a_refused_adoption_is_an_adoption_refused_warning() -> None:
    r = rig(sandbox(), running_pod(owner=None))
    err = await r.fails()
    assert r.recorder.events[0][:2] == ("Warning", "AdoptionRefused")
    assert err.errors[0].startswith('pod "my-sandbox" already exists and has no controller')
    assert r.client.sent() == [("patch", STATUS, "my-sandbox")]  # the pod is not touched
