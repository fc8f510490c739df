"""The Sandbox decision functions, rule by rule (docs/design/sandbox.md).

Each test builds the snapshot the reconciler would observe from its caches and checks the plan.
Tests are named after the rule they check; the heading of docs/design/sandbox.md that states it
is in the test's group comment. Messages are compared as exact strings.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.kinds import SANDBOX
from agentsandbox.api.owners import controller_of
from agentsandbox.api.timefmt import format_rfc3339, format_rfc3339_nano
from agentsandbox.controllers.sandbox.handlers import sandbox_for_child
from agentsandbox.controllers.sandbox.plan import plan
from agentsandbox.controllers.sandbox.status import (
    compute_status,
    finish,
    ready_condition,
    status_patch,
)
from agentsandbox.controllers.sandbox.types import (
    EVENT_ADOPTED,
    EVENT_ADOPTION_REFUSED,
    EVENT_EXPIRED,
    EVENT_POD_CREATED,
    EVENT_POD_DELETED,
    EVENT_POD_RECREATED,
    EVENT_RECONCILER_ERROR,
    IMMEDIATE_REQUEUE,
    MIN_EXPIRY_REQUEUE,
    Action,
    Phase,
    Plan,
    Snapshot,
    replicas_of,
)
from agentsandbox.kube.reconcile import Request

NOW = datetime(2026, 5, 21, 10, 0, 0, tzinfo=UTC)
NS = "default"
UID = "sandbox-uid"
HASH = name_hash("my-sandbox")  # 374de8f5


# ---------------------------------------------------------------------------------- builders
def sandbox(
    name: str = "my-sandbox",
    *,
    replicas: int | None = None,
    service: bool | None = None,
    labels: dict[str, str] | None = None,
    pod_annotations: dict[str, str] | None = None,
    sandbox_annotations: dict[str, str] | None = None,
    vcts: list[dict[str, Any]] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    shutdown: datetime | None = None,
    policy: str | None = None,
    status: dict[str, Any] | None = None,
    generation: int = 1,
) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    if volumes is not None:
        pod_spec["volumes"] = volumes
    pod_meta: dict[str, Any] = {}
    if labels is not None:
        pod_meta["labels"] = labels
    if pod_annotations is not None:
        pod_meta["annotations"] = pod_annotations
    spec: dict[str, Any] = {"podTemplate": {"metadata": pod_meta, "spec": pod_spec}}
    if replicas is not None:
        spec["replicas"] = replicas
    if service is not None:
        spec["service"] = service
    if vcts is not None:
        spec["volumeClaimTemplates"] = vcts
    if shutdown is not None:
        spec["shutdownTime"] = format_rfc3339_nano(shutdown)
    if policy is not None:
        spec["shutdownPolicy"] = policy
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "uid": UID,
        "generation": generation,
        "resourceVersion": "100",
    }
    if sandbox_annotations is not None:
        meta["annotations"] = sandbox_annotations
    out: dict[str, Any] = {
        "apiVersion": SANDBOX.api_version,
        "kind": "Sandbox",
        "metadata": meta,
        "spec": spec,
    }
    if status is not None:
        out["status"] = status
    return out


def owner_ref(uid: str = UID, name: str = "my-sandbox", kind: str = "Sandbox") -> dict[str, Any]:
    api = SANDBOX.api_version if kind == "Sandbox" else "apps/v1"
    return {
        "apiVersion": api,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod(
    name: str = "my-sandbox",
    *,
    owner: dict[str, Any] | str | None = "self",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    phase: str | None = None,
    ready: bool | None = None,
    ips: list[str] | None = None,
    terminating: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "uid": f"pod-uid-{name}",
        "resourceVersion": "7",
        "labels": {keys.LABEL_SANDBOX_NAME_HASH: HASH} if labels is None else labels,
    }
    if annotations is not None:
        meta["annotations"] = annotations
    if owner == "self":
        meta["ownerReferences"] = [owner_ref()]
    elif owner is not None:
        assert isinstance(owner, dict)
        meta["ownerReferences"] = [owner]
    if terminating:
        meta["deletionTimestamp"] = format_rfc3339(NOW)
    status: dict[str, Any] = {}
    if phase is not None:
        status["phase"] = phase
    if ready is not None:
        status["conditions"] = [
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "True" if ready else "False"},
        ]
    if ips:
        status["podIPs"] = [{"ip": ip} for ip in ips]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        "status": status,
    }


def running_pod(**kw: Any) -> dict[str, Any]:
    return pod(phase="Running", ready=True, ips=["10.0.0.7"], **kw)


def service_obj(
    name: str = "my-sandbox",
    *,
    owner: dict[str, Any] | str | None = "self",
    labels: dict[str, str] | None = None,
    selector: dict[str, str] | None = None,
    cluster_ip: str = "None",
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "uid": "svc-uid",
        "resourceVersion": "9",
        "labels": {keys.LABEL_SANDBOX_NAME_HASH: HASH} if labels is None else labels,
    }
    if owner == "self":
        meta["ownerReferences"] = [owner_ref()]
    elif owner is not None:
        assert isinstance(owner, dict)
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "clusterIP": cluster_ip,
            "selector": {keys.LABEL_SANDBOX_NAME_HASH: HASH} if selector is None else selector,
        },
    }


def pvc(name: str, *, owner: dict[str, Any] | str | None = "self", **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "uid": f"pvc-uid-{name}",
        "resourceVersion": "3",
        "labels": dict(labels),
    }
    if owner == "self":
        meta["ownerReferences"] = [owner_ref()]
    elif owner is not None:
        assert isinstance(owner, dict)
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": {}}


def vct(name: str = "data", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def snap(
    sb: dict[str, Any],
    *pods: dict[str, Any],
    service: dict[str, Any] | None = None,
    pvcs: tuple[dict[str, Any], ...] = (),
    now: datetime = NOW,
    cluster_domain: str = "cluster.local",
) -> Snapshot:
    return Snapshot(
        sandbox=sb,
        now=now,
        pods={p["metadata"]["name"]: p for p in pods},
        service=service,
        pvcs={p["metadata"]["name"]: p for p in pvcs},
        cluster_domain=cluster_domain,
    )


def cond(p: Plan | dict[str, Any], type_: str) -> dict[str, Any] | None:
    status = p.status if isinstance(p, Plan) else p
    assert status is not None
    for c in status.get("conditions", []):
        if c["type"] == type_:
            return dict(c)
    return None


def ready(p: Plan | dict[str, Any]) -> tuple[str, str, str]:
    c = cond(p, "Ready")
    assert c is not None
    return c["status"], c["reason"], c["message"]


def event_reasons(p: Plan) -> list[str]:
    return [e.reason for e in p.events]


# --------------------------------------------------------------------------------------- One pass
def test_replicas_unset_is_treated_as_one() -> None:
    p = plan(snap(sandbox()))
    assert p.pod is not None and p.pod.step.action is Action.CREATE


def test_expired_and_not_marked_only_marks_ready_expired_and_requeues_1ms() -> None:
    sb = sandbox(shutdown=NOW - timedelta(seconds=1), status={"replicas": 1})
    p = plan(snap(sb, running_pod(), service=service_obj()))
    assert p.phase is Phase.MARK_EXPIRED
    assert ready(p) == ("False", "SandboxExpired", "Sandbox has expired")
    assert p.requeue_after == IMMEDIATE_REQUEUE == 0.001
    assert p.pod is None and p.service is None and p.expiry is None  # children untouched
    assert p.status is not None and p.status["replicas"] == 1
    assert event_reasons(p) == [EVENT_EXPIRED]


def test_shutdown_time_equal_to_now_counts_as_expired() -> None:
    assert plan(snap(sandbox(shutdown=NOW))).phase is Phase.MARK_EXPIRED


def test_expired_and_marked_runs_the_expiry_cleanup() -> None:
    expired = {"type": "Ready", "status": "False", "reason": "SandboxExpired", "message": "x"}
    sb = sandbox(shutdown=NOW - timedelta(minutes=1), status={"conditions": [expired]})
    p = plan(snap(sb, running_pod()))
    assert p.phase is Phase.EXPIRED and p.expiry is not None


def test_not_expired_requeues_after_the_remaining_time() -> None:
    p = plan(snap(sandbox(shutdown=NOW + timedelta(seconds=90))))
    assert p.phase is Phase.ACTIVE
    assert p.requeue_after == 90.0


def test_pending_shutdown_requeue_is_at_least_2s() -> None:
    p = plan(snap(sandbox(shutdown=NOW + timedelta(milliseconds=300))))
    assert p.requeue_after == MIN_EXPIRY_REQUEUE == 2.0


def test_no_shutdown_time_means_no_requeue() -> None:
    assert plan(snap(sandbox(), running_pod())).requeue_after is None


def test_shutdown_passing_during_the_pass_overwrites_ready_and_requeues_1ms() -> None:
    sb = sandbox(shutdown=NOW + timedelta(milliseconds=5))
    s = snap(sb, running_pod())
    p = plan(s)
    assert p.phase is Phase.ACTIVE and p.status is not None
    done = finish(s, p.status, NOW + timedelta(milliseconds=10))
    assert done.expired_now and done.requeue_after == IMMEDIATE_REQUEUE
    assert ready(done.status) == ("False", "SandboxExpired", "Sandbox has expired")
    assert [e.reason for e in done.events] == [EVENT_EXPIRED]


def test_status_is_written_only_when_it_changed() -> None:
    first = plan(snap(sandbox(), running_pod()))
    assert first.status is not None
    again = plan(snap(sandbox(status=first.status), running_pod()))
    assert again.status is not None
    assert status_patch(first.status, again.status) is None


def test_status_patch_nulls_dropped_fields_and_replaces_conditions_whole() -> None:
    old = {"replicas": 1, "podIPs": ["10.0.0.7"], "selector": "s", "conditions": [{"type": "A"}]}
    new = {"selector": "s", "conditions": [{"type": "B"}]}
    assert status_patch(old, new) == {
        "status": {"replicas": None, "podIPs": None, "conditions": [{"type": "B"}]}
    }


# ------------------------------------------------------------------------------------------- PVCs
def test_pvc_missing_is_created_with_template_metadata_tracking_label_and_owner() -> None:
    sb = sandbox(vcts=[vct("data", tier="fast")])
    p = plan(snap(sb))
    [step] = p.pvcs
    assert step.action is Action.CREATE and step.name == "data-my-sandbox"
    assert step.body is not None
    assert step.body["metadata"]["labels"] == {
        "tier": "fast",
        keys.LABEL_SANDBOX_NAME_HASH: HASH,
    }
    assert step.body["spec"]["resources"] == {"requests": {"storage": "1Gi"}}
    ref = controller_of(step.body)
    assert ref is not None and ref["uid"] == UID and ref["blockOwnerDeletion"] is True


def test_pvc_owned_is_left_alone() -> None:
    sb = sandbox(vcts=[vct("data")])
    [step] = plan(snap(sb, pvcs=(pvc("data-my-sandbox"),))).pvcs
    assert step.action is Action.NONE and step.error is None


def test_pvc_owned_by_other_is_an_error_skips_the_remaining_templates_and_blocks_the_pod() -> None:
    """Deliberate difference from upstream (which still creates the pod, mounting the PVC)."""
    sb = sandbox(vcts=[vct("a"), vct("b")])
    foreign = pvc("a-my-sandbox", owner=owner_ref("other-uid", "web", "StatefulSet"))
    p = plan(snap(sb, pvcs=(foreign,)))
    assert len(p.pvcs) == 1
    assert p.pvcs[0].error == (
        'PVC "a-my-sandbox" is owned by StatefulSet/web (UID: other-uid), '
        'not by sandbox "my-sandbox"'
    )
    # no pod is created: it would mount the foreign PVC
    assert p.pod is not None and p.pod.step.action is Action.NONE
    assert p.pod.step.error == (
        'pod "my-sandbox" is not created: it would mount PVC "a-my-sandbox", '
        'not owned by sandbox "my-sandbox"'
    )
    assert ready(p) == (
        "False",
        "ReconcilerError",
        'Error seen: PVC "a-my-sandbox" is owned by StatefulSet/web (UID: other-uid), '
        'not by sandbox "my-sandbox"\n'
        'pod "my-sandbox" is not created: it would mount PVC "a-my-sandbox", '
        'not owned by sandbox "my-sandbox"',
    )
    assert p.status is not None and "replicas" not in p.status
    assert EVENT_RECONCILER_ERROR in event_reasons(p)
    assert EVENT_POD_CREATED not in event_reasons(p)


def test_pvc_refused_for_adoption_blocks_the_pod() -> None:
    sb = sandbox(vcts=[vct("data")])
    p = plan(snap(sb, pvcs=(pvc("data-my-sandbox", owner=None),)))
    assert p.pod is not None and p.pod.step.action is Action.NONE
    assert p.pod.step.error is not None and '"data-my-sandbox"' in p.pod.step.error
    assert event_reasons(p).count(EVENT_ADOPTION_REFUSED) == 1
    assert ready(p)[1] == "ReconcilerError"


def test_pvc_being_created_or_adopted_does_not_block_the_pod() -> None:
    orphan = pvc("b-my-sandbox", owner=None, **{keys.LABEL_ADOPTABLE: "true"})
    p = plan(snap(sandbox(vcts=[vct("a"), vct("b")]), pvcs=(orphan,)))
    assert [s.action for s in p.pvcs] == [Action.CREATE, Action.PATCH]
    assert p.pod is not None and p.pod.step.action is Action.CREATE


def test_foreign_pvc_leaves_an_existing_pod_to_the_usual_metadata_sync() -> None:
    sb = sandbox(vcts=[vct("data")], labels={"team": "a"})
    foreign = pvc("data-my-sandbox", owner=owner_ref("other-uid", "web", "StatefulSet"))
    p = plan(snap(sb, running_pod(), pvcs=(foreign,)))
    assert p.pod is not None and p.pod.step.action is Action.PATCH
    assert p.pod.step.error is None


def test_pvc_unowned_without_opt_in_label_is_not_adopted() -> None:
    sb = sandbox(vcts=[vct("data")])
    p = plan(snap(sb, pvcs=(pvc("data-my-sandbox", owner=None),)))
    [step] = p.pvcs
    assert step.action is Action.NONE and step.refused
    assert step.error == (
        'PVC "data-my-sandbox" already exists and has no controller; sandbox "my-sandbox" '
        'does not adopt it unless it is labelled agents.x-k8s.io/adoptable="true"'
    )
    assert EVENT_ADOPTION_REFUSED in event_reasons(p)


def test_pvc_unowned_with_opt_in_label_is_adopted() -> None:
    sb = sandbox(vcts=[vct("data")])
    orphan = pvc("data-my-sandbox", owner=None, **{keys.LABEL_ADOPTABLE: "true"})
    p = plan(snap(sb, pvcs=(orphan,)))
    [step] = p.pvcs
    assert step.action is Action.PATCH and step.body is not None
    meta = step.body["metadata"]
    assert meta["ownerReferences"] == [owner_ref()]
    assert meta["labels"] == {keys.LABEL_SANDBOX_NAME_HASH: HASH}
    assert meta["resourceVersion"] == "3"  # adoption is conditional on what we saw
    assert EVENT_ADOPTED in event_reasons(p)


def test_pvcs_are_never_deleted() -> None:
    sb = sandbox(replicas=0, vcts=[vct("data")])
    [step] = plan(snap(sb, pvcs=(pvc("data-my-sandbox"),))).pvcs
    assert step.action is Action.NONE


# ---------------------------------------------------------------------------------------- The pod
def test_new_pod_is_named_after_the_sandbox_with_tracking_label_and_owner() -> None:
    p = plan(snap(sandbox()))
    assert p.pod is not None
    step = p.pod.step
    assert step.action is Action.CREATE and step.body is not None
    meta = step.body["metadata"]
    assert (meta["name"], meta["namespace"]) == ("my-sandbox", NS)
    assert meta["labels"] == {keys.LABEL_SANDBOX_NAME_HASH: HASH}
    assert "annotations" not in meta  # nothing propagated: no tracking annotations
    assert meta["ownerReferences"] == [owner_ref()]
    assert step.body["spec"] == sandbox()["spec"]["podTemplate"]["spec"]


def test_new_pod_gets_template_labels_annotations_and_the_propagated_keys() -> None:
    sb = sandbox(labels={"b": "2", "a": "1"}, pod_annotations={"z": "26", "y": "25"})
    p = plan(snap(sb))
    assert p.pod is not None and p.pod.step.body is not None
    meta = p.pod.step.body["metadata"]
    assert meta["labels"] == {"a": "1", "b": "2", keys.LABEL_SANDBOX_NAME_HASH: HASH}
    assert meta["annotations"] == {
        "y": "25",
        "z": "26",
        keys.ANNOTATION_PROPAGATED_LABELS: "a,b",
        keys.ANNOTATION_PROPAGATED_ANNOTATIONS: "y,z",
    }


def test_template_cannot_override_the_tracking_label() -> None:
    sb = sandbox(labels={keys.LABEL_SANDBOX_NAME_HASH: "deadbeef", "a": "1"})
    p = plan(snap(sb))
    assert p.pod is not None and p.pod.step.body is not None
    meta = p.pod.step.body["metadata"]
    assert meta["labels"][keys.LABEL_SANDBOX_NAME_HASH] == HASH
    assert meta["annotations"][keys.ANNOTATION_PROPAGATED_LABELS] == "a"


def test_new_pod_volumes_wire_in_the_claims_replacing_same_named_template_volumes() -> None:
    volumes = [
        {"name": "cache", "emptyDir": {}},
        {"name": "data", "emptyDir": {}},
        {"name": "conf", "configMap": {"name": "c"}},
    ]
    sb = sandbox(vcts=[vct("data"), vct("logs")], volumes=volumes)
    p = plan(snap(sb))
    assert p.pod is not None and p.pod.step.body is not None
    assert p.pod.step.body["spec"]["volumes"] == [
        {"name": "cache", "emptyDir": {}},
        {"name": "conf", "configMap": {"name": "c"}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-my-sandbox"}},
        {"name": "logs", "persistentVolumeClaim": {"claimName": "logs-my-sandbox"}},
    ]


def test_cold_create_never_adds_the_pod_name_annotation() -> None:
    """Upstream v1.0.1 only reads and clears ``agents.x-k8s.io/pod-name``; writing it on every
    new Sandbox raced its creator's next update (a 409 in upstream's immutability test)."""
    p = plan(snap(sandbox()))
    assert p.pod is not None and p.pod.annotation is None
    assert event_reasons(p) == [EVENT_POD_CREATED]


def test_pod_name_annotation_selects_the_tracked_pod() -> None:
    sb = sandbox(sandbox_annotations={keys.ANNOTATION_POD_NAME: "pool-abc"})
    warm = running_pod(name="pool-abc", labels={keys.LABEL_SANDBOX_NAME_HASH: name_hash("x")})
    p = plan(snap(sb, warm))
    assert p.pod is not None
    assert p.pod.step.name == "pool-abc" and p.pod.step.action is Action.PATCH
    assert p.pod.step.body == {"metadata": {"labels": {keys.LABEL_SANDBOX_NAME_HASH: HASH}}}
    assert p.pod.annotation == "pool-abc"
    assert p.status is not None and p.status["podIPs"] == ["10.0.0.7"]


def test_missing_annotated_pod_drops_the_annotation_and_creates_the_sandbox_named_pod() -> None:
    sb = sandbox(sandbox_annotations={keys.ANNOTATION_POD_NAME: "gone"}, status={"replicas": 1})
    p = plan(snap(sb))
    assert p.pod is not None
    assert p.pod.step.action is Action.CREATE and p.pod.step.name == "my-sandbox"
    assert p.pod.annotation is None
    assert event_reasons(p) == [EVENT_POD_RECREATED]


def test_an_annotation_naming_the_sandbox_itself_is_kept_through_the_pod_create() -> None:
    """The warm pool creates its members with the annotation naming their own pod: creating
    that pod leaves it as it is (no clear, no write)."""
    sb = sandbox(sandbox_annotations={keys.ANNOTATION_POD_NAME: "my-sandbox"})
    p = plan(snap(sb))
    assert p.pod is not None
    assert p.pod.step.action is Action.CREATE and p.pod.annotation == "my-sandbox"


def test_existing_owned_pod_without_drift_is_not_written() -> None:
    p = plan(
        snap(sandbox(sandbox_annotations={keys.ANNOTATION_POD_NAME: "my-sandbox"}), running_pod())
    )
    assert p.pod is not None
    assert p.pod.step.action is Action.NONE and p.pod.annotation == "my-sandbox"
    assert p.events == ()


def test_existing_pod_does_not_get_the_pod_name_annotation_when_missing() -> None:
    p = plan(snap(sandbox(), running_pod()))
    assert p.pod is not None and p.pod.annotation is None


def test_existing_pod_owned_by_other_is_an_error_and_drops_the_annotation() -> None:
    sb = sandbox(sandbox_annotations={keys.ANNOTATION_POD_NAME: "my-sandbox"})
    foreign = running_pod(owner=owner_ref("rs-uid", "web-123", "ReplicaSet"))
    p = plan(snap(sb, foreign))
    assert p.pod is not None
    assert p.pod.step.error == (
        'pod "my-sandbox" is owned by ReplicaSet/web-123 (UID: rs-uid), not by sandbox "my-sandbox"'
    )
    assert p.pod.annotation is None and p.pod.step.result is None
    assert ready(p) == (
        "False",
        "ReconcilerError",
        'Error seen: pod "my-sandbox" is owned by ReplicaSet/web-123 (UID: rs-uid), '
        'not by sandbox "my-sandbox"',
    )
    assert event_reasons(p) == [EVENT_RECONCILER_ERROR]


def test_existing_unowned_pod_without_opt_in_label_is_not_adopted() -> None:
    p = plan(snap(sandbox(), running_pod(owner=None)))
    assert p.pod is not None
    step = p.pod.step
    assert step.action is Action.NONE and step.refused and step.result is None
    assert ready(p) == (
        "False",
        "ReconcilerError",
        'Error seen: pod "my-sandbox" already exists and has no controller; sandbox '
        '"my-sandbox" does not adopt it unless it is labelled agents.x-k8s.io/adoptable="true"',
    )
    assert p.status is not None and "replicas" not in p.status and "podIPs" not in p.status
    assert [(e.type, e.reason) for e in p.events] == [("Warning", EVENT_ADOPTION_REFUSED)]


def test_existing_unowned_pod_with_opt_in_label_is_adopted() -> None:
    labels = {keys.LABEL_ADOPTABLE: "true"}
    p = plan(snap(sandbox(), running_pod(owner=None, labels=labels)))
    assert p.pod is not None
    step = p.pod.step
    assert step.action is Action.PATCH and step.body is not None
    assert step.body["metadata"]["ownerReferences"] == [owner_ref()]
    assert step.body["metadata"]["resourceVersion"] == "7"
    assert step.body["metadata"]["labels"] == {keys.LABEL_SANDBOX_NAME_HASH: HASH}
    assert ready(p) == ("True", "DependenciesReady", "Pod is Ready")
    assert event_reasons(p) == [EVENT_ADOPTED]


def test_pod_spec_is_never_updated() -> None:
    live = running_pod()
    live["spec"]["containers"][0]["image"] = "old-image"
    p = plan(snap(sandbox(sandbox_annotations={keys.ANNOTATION_POD_NAME: "my-sandbox"}), live))
    assert p.pod is not None and p.pod.step.action is Action.NONE


def test_metadata_sync_sets_template_labels_and_removes_those_that_left_the_template() -> None:
    live = running_pod(
        labels={keys.LABEL_SANDBOX_NAME_HASH: HASH, "old": "x", "keep": "1", "user": "u"},
        annotations={keys.ANNOTATION_PROPAGATED_LABELS: "keep,old"},
    )
    sb = sandbox(labels={"keep": "2", "new": "n"})
    p = plan(snap(sb, live))
    assert p.pod is not None and p.pod.step.body is not None
    assert p.pod.step.body["metadata"]["labels"] == {"keep": "2", "new": "n", "old": None}
    assert p.pod.step.body["metadata"]["annotations"] == {
        keys.ANNOTATION_PROPAGATED_LABELS: "keep,new"
    }


def test_metadata_sync_of_annotations_sets_and_removes_propagated_ones() -> None:
    live = running_pod(
        annotations={
            "gone": "1",
            "stay": "old",
            "mine": "m",
            keys.ANNOTATION_PROPAGATED_ANNOTATIONS: "gone,stay",
        }
    )
    sb = sandbox(pod_annotations={"stay": "new"})
    p = plan(snap(sb, live))
    assert p.pod is not None and p.pod.step.body is not None
    assert p.pod.step.body["metadata"]["annotations"] == {
        "stay": "new",
        "gone": None,
        keys.ANNOTATION_PROPAGATED_ANNOTATIONS: "stay",
    }


def test_metadata_sync_treats_a_missing_tracking_annotation_as_empty() -> None:
    p = plan(snap(sandbox(pod_annotations={}), running_pod()))
    assert p.pod is not None and p.pod.step.action is Action.NONE


def test_metadata_sync_writes_an_emptied_tracking_annotation_as_empty_string() -> None:
    live = running_pod(
        labels={keys.LABEL_SANDBOX_NAME_HASH: HASH, "a": "1"},
        annotations={keys.ANNOTATION_PROPAGATED_LABELS: "a"},
    )
    p = plan(snap(sandbox(), live))
    assert p.pod is not None and p.pod.step.body is not None
    assert p.pod.step.body["metadata"] == {
        "labels": {"a": None},
        "annotations": {keys.ANNOTATION_PROPAGATED_LABELS: ""},
    }


def test_terminating_pod_is_reported_but_not_written() -> None:
    live = pod(phase="Running", terminating=True, labels={})
    p = plan(snap(sandbox(), live))
    assert p.pod is not None and p.pod.step.action is Action.NONE
    assert ready(p)[2] == "Pod is Running but not Ready"


# --- the warm pool's sandboxes and a claim adopting one
def test_pool_sandbox_pod_gets_the_pod_template_labels() -> None:
    pool_labels = {
        keys.LABEL_WARM_POOL_SANDBOX: name_hash("pool"),
        keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("tpl"),
        keys.LABEL_SANDBOX_POD_TEMPLATE_HASH: "0a1b2c3d",
    }
    sb = sandbox("pool-x7k2p", labels=pool_labels)
    p = plan(snap(sb))
    assert p.pod is not None and p.pod.step.body is not None
    meta = p.pod.step.body["metadata"]
    assert meta["name"] == "pool-x7k2p"
    assert meta["labels"] == {**pool_labels, keys.LABEL_SANDBOX_NAME_HASH: name_hash("pool-x7k2p")}


def test_claim_adoption_keeps_the_existing_pod_and_moves_its_labels() -> None:
    name = "pool-x7k2p"
    h = name_hash(name)
    pool_labels = {
        keys.LABEL_WARM_POOL_SANDBOX: name_hash("pool"),
        keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("tpl"),
    }
    live = running_pod(
        name=name,
        labels={**pool_labels, keys.LABEL_SANDBOX_NAME_HASH: h},
        annotations={keys.ANNOTATION_PROPAGATED_LABELS: ",".join(sorted(pool_labels))},
    )
    live["metadata"]["ownerReferences"] = [owner_ref(name=name)]
    claimed = sandbox(
        name,
        labels={keys.LABEL_CLAIM_UID: "claim-uid", keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: "t"},
        sandbox_annotations={keys.ANNOTATION_POD_NAME: name},
        status={"replicas": 1},
    )
    p = plan(snap(claimed, live))
    assert p.pod is not None
    step = p.pod.step
    assert step.action is Action.PATCH and step.name == name  # no new pod
    assert step.body is not None
    assert step.body["metadata"]["labels"] == {
        keys.LABEL_CLAIM_UID: "claim-uid",
        keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: "t",
        keys.LABEL_WARM_POOL_SANDBOX: None,
    }
    assert "ownerReferences" not in step.body["metadata"]
    assert ready(p) == ("True", "DependenciesReady", "Pod is Ready")


# --- upstream HEAD (#927, #1067, #1139): warm-pool and ref-hash labels of extension-owned Sandboxes
def owned_by(sb: dict[str, Any], api_version: str, kind: str, labels: dict[str, str]) -> Any:
    sb["metadata"]["labels"] = labels
    sb["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": "o", "uid": "o-uid", "controller": True}
    ]
    return sb


EXT_LABELS = {
    keys.LABEL_WARM_POOL_SANDBOX: name_hash("pool"),
    keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("tpl"),
}


def test_extension_owned_sandbox_labels_reach_the_pod_and_are_listed_as_propagated() -> None:
    for kind in ("SandboxWarmPool", "SandboxClaim"):
        sb = owned_by(
            sandbox(), "extensions.agents.x-k8s.io/v1beta1", kind, {**EXT_LABELS, "other": "x"}
        )
        p = plan(snap(sb))
        assert p.pod is not None and p.pod.step.body is not None
        meta = p.pod.step.body["metadata"]
        assert meta["labels"] == {**EXT_LABELS, keys.LABEL_SANDBOX_NAME_HASH: HASH}  # not other
        assert meta["annotations"][keys.ANNOTATION_PROPAGATED_LABELS] == ",".join(
            sorted(EXT_LABELS)
        )


def test_extension_labels_are_not_propagated_for_other_controllers() -> None:
    for api_version in ("apps/v1", "agents.x-k8s.io/v1beta1", "example.com/v1"):
        sb = owned_by(sandbox(), api_version, "Thing", dict(EXT_LABELS))
        p = plan(snap(sb))
        assert p.pod is not None and p.pod.step.body is not None
        assert p.pod.step.body["metadata"]["labels"] == {keys.LABEL_SANDBOX_NAME_HASH: HASH}
    sb = sandbox()
    sb["metadata"]["labels"] = dict(EXT_LABELS)  # no controller at all
    p = plan(snap(sb))
    assert p.pod is not None and p.pod.step.body is not None
    assert p.pod.step.body["metadata"]["labels"] == {keys.LABEL_SANDBOX_NAME_HASH: HASH}


def test_the_pod_template_wins_over_an_extension_label() -> None:
    sb = owned_by(
        sandbox(labels={keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: "from-template"}),
        "extensions.agents.x-k8s.io/v1beta1",
        "SandboxClaim",
        dict(EXT_LABELS),
    )
    p = plan(snap(sb))
    assert p.pod is not None and p.pod.step.body is not None
    labels = p.pod.step.body["metadata"]["labels"]
    assert labels[keys.LABEL_SANDBOX_TEMPLATE_REF_HASH] == "from-template"
    assert labels[keys.LABEL_WARM_POOL_SANDBOX] == name_hash("pool")


def test_an_extension_label_that_leaves_the_sandbox_leaves_the_pod() -> None:
    live = running_pod(
        labels={**EXT_LABELS, keys.LABEL_SANDBOX_NAME_HASH: HASH},
        annotations={keys.ANNOTATION_PROPAGATED_LABELS: ",".join(sorted(EXT_LABELS))},
    )
    live["metadata"]["ownerReferences"] = [owner_ref()]
    ref_only = {keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("tpl")}  # adopted: pool label gone
    sb = owned_by(
        sandbox(sandbox_annotations={keys.ANNOTATION_POD_NAME: "my-sandbox"}),
        "extensions.agents.x-k8s.io/v1beta1",
        "SandboxClaim",
        ref_only,
    )
    p = plan(snap(sb, live))
    assert p.pod is not None and p.pod.step.action is Action.PATCH
    assert p.pod.step.body is not None
    assert p.pod.step.body["metadata"]["labels"] == {keys.LABEL_WARM_POOL_SANDBOX: None}


# ----------------------------------------------------------------------------- Suspend and resume
def test_replicas_zero_deletes_the_owned_pod_and_removes_the_annotation() -> None:
    sb = sandbox(replicas=0, sandbox_annotations={keys.ANNOTATION_POD_NAME: "my-sandbox"})
    p = plan(snap(sb, running_pod()))
    assert p.pod is not None
    assert p.pod.step.action is Action.DELETE and p.pod.step.uid == "pod-uid-my-sandbox"
    assert p.pod.annotation is None
    assert event_reasons(p) == [EVENT_POD_DELETED]


def test_replicas_zero_reports_suspending_while_the_pod_terminates() -> None:
    sb = sandbox(replicas=0, status={"replicas": 1, "selector": "s", "podIPs": ["10.0.0.7"]})
    p = plan(snap(sb, running_pod(), service=service_obj()))
    assert ready(p) == ("False", "SandboxSuspended", "Sandbox is suspending")
    assert cond(p, "Suspended") == {
        "type": "Suspended",
        "status": "False",
        "reason": "PodTerminating",
        "message": "Pod is terminating. Sandbox is suspending",
        "observedGeneration": 1,
        "lastTransitionTime": format_rfc3339(NOW),
    }
    assert p.status is not None
    assert "replicas" not in p.status  # the desired count
    assert p.status["podIPs"] == ["10.0.0.7"]  # the pod's, until it is gone
    assert p.status["selector"] == f"{keys.LABEL_SANDBOX_NAME_HASH}={HASH}"
    assert p.service is not None and p.service.action is Action.NONE  # service kept
    assert p.status["service"] == "my-sandbox"


def test_replicas_zero_reports_suspended_once_the_pod_is_gone() -> None:
    sb = sandbox(replicas=0, status={"selector": "s", "podIPs": ["10.0.0.7"], "nodeName": "n"})
    p = plan(snap(sb, service=service_obj()))
    assert ready(p) == ("False", "SandboxSuspended", "Sandbox is suspended")
    c = cond(p, "Suspended")
    assert c is not None
    assert (c["status"], c["reason"], c["message"]) == (
        "True",
        "PodTerminated",
        "Pod has been terminated. Sandbox is suspended",
    )
    assert p.status is not None
    assert "podIPs" not in p.status and "nodeName" not in p.status
    assert p.status["selector"] == "s"  # kept


def test_replicas_zero_leaves_unowned_and_foreign_pods_alone() -> None:
    for owner in (None, owner_ref("rs-uid", "web", "ReplicaSet")):
        p = plan(snap(sandbox(replicas=0), running_pod(owner=owner)))
        assert p.pod is not None
        assert p.pod.step.action is Action.NONE and p.pod.step.error is None


def test_replicas_zero_does_not_delete_a_terminating_pod_again() -> None:
    p = plan(snap(sandbox(replicas=0), pod(terminating=True)))
    assert p.pod is not None and p.pod.step.action is Action.NONE


def test_resume_creates_the_pod_again_and_suspended_turns_false() -> None:
    suspended = {
        "type": "Suspended",
        "status": "True",
        "reason": "PodTerminated",
        "message": "Pod has been terminated. Sandbox is suspended",
        "observedGeneration": 2,
        "lastTransitionTime": "2026-05-21T09:00:00Z",
    }
    sb = sandbox(replicas=1, generation=3, status={"selector": "s", "conditions": [suspended]})
    p = plan(snap(sb))
    assert p.pod is not None and p.pod.step.action is Action.CREATE
    assert event_reasons(p) == [EVENT_POD_CREATED]
    assert cond(p, "Suspended") == {
        "type": "Suspended",
        "status": "False",
        "reason": "NotSuspended",
        "message": "Sandbox is not suspended",
        "observedGeneration": 3,
        "lastTransitionTime": format_rfc3339(NOW),
    }
    assert ready(p) == ("False", "DependenciesNotReady", "Pod exists with phase: ")


# ------------------------------------------------------- operatingMode (upstream HEAD #801)
def with_mode(sb: dict[str, Any], mode: str) -> dict[str, Any]:
    sb["spec"]["operatingMode"] = mode
    return sb


def test_operating_mode_suspended_without_replicas_deletes_the_pod_like_replicas_zero() -> None:
    sb = with_mode(
        sandbox(sandbox_annotations={keys.ANNOTATION_POD_NAME: "my-sandbox"}), "Suspended"
    )
    assert replicas_of(sb) == 0
    p = plan(snap(sb, running_pod()))
    assert p.pod is not None
    assert p.pod.step.action is Action.DELETE and p.pod.annotation is None
    assert event_reasons(p) == [EVENT_POD_DELETED]
    assert ready(p) == ("False", "SandboxSuspended", "Sandbox is suspending")
    assert p.status is not None and "replicas" not in p.status


def test_operating_mode_suspended_creates_no_pod() -> None:
    p = plan(snap(with_mode(sandbox(), "Suspended")))
    assert p.pod is not None and p.pod.step.action is Action.NONE
    assert ready(p) == ("False", "SandboxSuspended", "Sandbox is suspended")


def test_operating_mode_running_creates_the_pod() -> None:
    for sb in (with_mode(sandbox(), "Running"), with_mode(sandbox(replicas=1), "Running")):
        assert replicas_of(sb) == 1
        p = plan(snap(sb))
        assert p.pod is not None and p.pod.step.action is Action.CREATE


def test_operating_mode_unset_leaves_it_to_replicas_and_unset_both_run() -> None:
    assert replicas_of(sandbox()) == 1
    assert replicas_of(sandbox(replicas=1)) == 1
    assert replicas_of(sandbox(replicas=0)) == 0


def test_operating_mode_wins_over_a_contradicting_replicas() -> None:
    # the CRD rejects these; an object stored before the rule existed may still say both
    assert replicas_of(with_mode(sandbox(replicas=1), "Suspended")) == 0
    assert replicas_of(with_mode(sandbox(replicas=0), "Running")) == 1
    assert replicas_of(with_mode(sandbox(replicas=0), "Suspended")) == 0


def test_suspended_false_pod_terminating_while_our_pod_holds_the_name() -> None:
    sb = sandbox(replicas=0)
    status = compute_status(snap(sb, pod(terminating=True)), None, None, [], NOW)
    assert ready(status) == ("False", "SandboxSuspended", "Sandbox is suspending")
    c = cond(status, "Suspended")
    assert c is not None
    assert (c["status"], c["reason"], c["message"]) == (
        "False",
        "PodTerminating",
        "Pod is terminating. Sandbox is suspending",
    )


# ------------------------------------------------------------------------------------ The Service
def _svc(desired: bool | None, existing: dict[str, Any] | None) -> Plan:
    return plan(snap(sandbox(service=desired), running_pod(), service=existing))


def test_service_absent_and_desired_true_creates_the_headless_service() -> None:
    p = _svc(True, None)
    assert p.service is not None and p.service.action is Action.CREATE
    assert p.service.body == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "my-sandbox",
            "namespace": NS,
            "labels": {keys.LABEL_SANDBOX_NAME_HASH: HASH},
            "ownerReferences": [owner_ref()],
        },
        "spec": {"clusterIP": "None", "selector": {keys.LABEL_SANDBOX_NAME_HASH: HASH}},
    }
    assert p.status is not None
    assert p.status["service"] == "my-sandbox"
    assert p.status["serviceFQDN"] == "my-sandbox.default.svc.cluster.local"


@pytest.mark.parametrize("desired", [None, False])
def test_service_absent_and_not_desired_does_nothing_and_clears_status(
    desired: bool | None,
) -> None:
    sb = sandbox(service=desired, status={"service": "x", "serviceFQDN": "x.default.svc"})
    p = plan(snap(sb, running_pod()))
    assert p.service is not None and p.service.action is Action.NONE
    assert p.status is not None and "service" not in p.status and "serviceFQDN" not in p.status


@pytest.mark.parametrize("desired", [True, None])
def test_service_owned_is_kept_reported_and_its_drift_fixed(desired: bool | None) -> None:
    drifted = service_obj(labels={"x": "y"}, selector={"app": "web"})
    p = _svc(desired, drifted)
    assert p.service is not None and p.service.action is Action.PATCH
    assert p.service.body == {
        "metadata": {"labels": {keys.LABEL_SANDBOX_NAME_HASH: HASH}},
        "spec": {"selector": {keys.LABEL_SANDBOX_NAME_HASH: HASH, "app": None}},
    }
    assert p.status is not None and p.status["service"] == "my-sandbox"
    assert ready(p) == ("True", "DependenciesReady", "Pod is Ready; Service Exists")


def test_service_owned_without_drift_is_not_written() -> None:
    p = _svc(None, service_obj())
    assert p.service is not None and p.service.action is Action.NONE


def test_service_owned_and_desired_false_is_deleted() -> None:
    p = _svc(False, service_obj())
    assert p.service is not None
    assert p.service.action is Action.DELETE and p.service.uid == "svc-uid"
    assert p.status is not None and "service" not in p.status
    assert ready(p) == ("True", "DependenciesReady", "Pod is Ready")


def test_service_unowned_and_desired_true_without_opt_in_is_refused() -> None:
    p = _svc(True, service_obj(owner=None, labels={}))
    assert p.service is not None and p.service.refused
    assert p.service.error == (
        'service "my-sandbox" already exists and has no controller; sandbox "my-sandbox" '
        'does not adopt it unless it is labelled agents.x-k8s.io/adoptable="true"'
    )
    assert p.status is not None and "service" not in p.status


def test_service_unowned_headless_with_opt_in_is_adopted() -> None:
    orphan = service_obj(owner=None, labels={keys.LABEL_ADOPTABLE: "true"}, selector={})
    p = _svc(True, orphan)
    assert p.service is not None and p.service.action is Action.PATCH
    assert p.service.body == {
        "metadata": {
            "labels": {keys.LABEL_SANDBOX_NAME_HASH: HASH},
            "ownerReferences": [owner_ref()],
            "resourceVersion": "9",
        },
        "spec": {"selector": {keys.LABEL_SANDBOX_NAME_HASH: HASH}},
    }
    assert EVENT_ADOPTED in event_reasons(p)


def test_service_adoption_relaxes_the_apiservers_dual_stack_default_of_a_selectorless_one() -> None:
    """A selector-less headless Service is defaulted to RequireDualStack with both families;
    adding a selector to it is rejected on a single-stack cluster unless that is relaxed."""
    orphan = service_obj(owner=None, labels={keys.LABEL_ADOPTABLE: "true"}, selector={})
    orphan["spec"].update(ipFamilyPolicy="RequireDualStack", ipFamilies=["IPv4", "IPv6"])
    p = _svc(True, orphan)
    assert p.service is not None and p.service.body is not None
    assert p.service.body["spec"] == {
        "selector": {keys.LABEL_SANDBOX_NAME_HASH: HASH},
        "ipFamilyPolicy": "PreferDualStack",
        "ipFamilies": None,
    }


def test_service_adoption_leaves_an_explicit_ip_family_policy_alone() -> None:
    orphan = service_obj(owner=None, labels={keys.LABEL_ADOPTABLE: "true"}, selector={"a": "b"})
    orphan["spec"].update(ipFamilyPolicy="RequireDualStack", ipFamilies=["IPv4", "IPv6"])
    p = _svc(True, orphan)
    assert p.service is not None and p.service.body is not None
    assert set(p.service.body["spec"]) == {"selector"}


def test_service_unowned_with_a_cluster_ip_cannot_be_adopted() -> None:
    orphan = service_obj(owner=None, labels={keys.LABEL_ADOPTABLE: "true"}, cluster_ip="10.96.0.5")
    p = _svc(True, orphan)
    assert p.service is not None and not p.service.refused
    assert p.service.error == (
        'cannot adopt service "my-sandbox": ClusterIP is "10.96.0.5" '
        '(expected "None", field is immutable)'
    )


@pytest.mark.parametrize("desired", [None, False])
def test_service_unowned_and_not_desired_true_is_ignored(desired: bool | None) -> None:
    p = _svc(desired, service_obj(owner=None))
    assert p.service is not None
    assert p.service.action is Action.NONE and p.service.error is None
    assert p.status is not None and "service" not in p.status


def test_service_owned_by_other_and_desired_true_is_an_error() -> None:
    p = _svc(True, service_obj(owner=owner_ref("x-uid", "other", "Sandbox")))
    assert p.service is not None
    assert p.service.error == (
        'service "my-sandbox" is owned by Sandbox/other (UID: x-uid), not by sandbox "my-sandbox"'
    )


@pytest.mark.parametrize("desired", [None, False])
def test_service_owned_by_other_and_not_desired_true_is_ignored(desired: bool | None) -> None:
    p = _svc(desired, service_obj(owner=owner_ref("x-uid", "other", "Sandbox")))
    assert p.service is not None and p.service.error is None
    assert ready(p) == ("True", "DependenciesReady", "Pod is Ready")


def test_suspending_does_not_delete_the_service() -> None:
    p = plan(snap(sandbox(replicas=0, service=True), service=service_obj()))
    assert p.service is not None and p.service.action is Action.NONE


# ---------------------------------------------------------------------------------- Status fields
def test_status_with_a_pod_has_replicas_selector_and_pod_ips() -> None:
    p = plan(snap(sandbox(), running_pod()))
    assert p.status is not None
    assert p.status["replicas"] == 1
    assert p.status["selector"] == f"{keys.LABEL_SANDBOX_NAME_HASH}={HASH}"
    assert p.status["podIPs"] == ["10.0.0.7"]


def test_status_without_pod_ips_omits_them() -> None:
    p = plan(snap(sandbox(), pod(phase="Pending")))
    assert p.status is not None and "podIPs" not in p.status and p.status["replicas"] == 1


def test_status_service_fqdn_uses_the_cluster_domain() -> None:
    s = snap(sandbox(service=True), running_pod(), service=service_obj(), cluster_domain="corp.x")
    status = plan(s).status
    assert status is not None and status["serviceFQDN"] == "my-sandbox.default.svc.corp.x"


def test_condition_transition_time_changes_only_when_status_flips() -> None:
    first = plan(snap(sandbox(), pod(phase="Pending")))
    assert first.status is not None
    later = NOW + timedelta(seconds=5)
    second = plan(snap(sandbox(status=first.status), pod(phase="Running"), now=later))
    c = cond(second, "Ready")
    assert c is not None and c["message"] == "Pod is Running but not Ready"
    assert c["lastTransitionTime"] == format_rfc3339(NOW)  # still False
    third = plan(snap(sandbox(status=second.status), running_pod(), now=later))
    c = cond(third, "Ready")
    assert c is not None and c["status"] == "True"
    assert c["lastTransitionTime"] == format_rfc3339(later)


def test_every_condition_carries_the_observed_generation() -> None:
    p = plan(snap(sandbox(replicas=0, generation=7)))
    assert p.status is not None
    assert {c["observedGeneration"] for c in p.status["conditions"]} == {7}


# ---------------------------------------------------------------------------- The Ready condition
def test_ready_child_error_is_reconciler_error_with_errors_joined_by_newline() -> None:
    c = ready_condition(1, running_pod(), False, False, ["first", "second"], 4)
    assert c == {
        "type": "Ready",
        "status": "False",
        "reason": "ReconcilerError",
        "message": "Error seen: first\nsecond",
        "observedGeneration": 4,
    }


def test_ready_replicas_zero_is_suspended_or_suspending() -> None:
    assert ready_condition(0, None, False, False, [])["message"] == "Sandbox is suspended"
    assert ready_condition(0, pod(), False, False, [])["message"] == "Sandbox is suspending"
    assert ready_condition(0, None, False, False, [])["reason"] == "SandboxSuspended"


def test_ready_no_pod_says_pod_does_not_exist() -> None:
    c = ready_condition(1, None, False, False, [])
    assert (c["status"], c["reason"], c["message"]) == (
        "False",
        "DependenciesNotReady",
        "Pod does not exist",
    )


def test_ready_example_fresh_sandbox_without_service() -> None:
    assert ready(plan(snap(sandbox()))) == (
        "False",
        "DependenciesNotReady",
        "Pod exists with phase: ",
    )


def test_ready_example_fresh_sandbox_with_service_true() -> None:
    assert ready(plan(snap(sandbox(service=True)))) == (
        "False",
        "DependenciesNotReady",
        "Pod exists with phase: ; Service Exists",
    )


def test_ready_example_running_sandbox_with_service() -> None:
    p = plan(snap(sandbox(service=True), running_pod(), service=service_obj()))
    assert ready(p) == ("True", "DependenciesReady", "Pod is Ready; Service Exists")


def test_ready_pending_pod_reports_its_phase() -> None:
    c = ready_condition(1, pod(phase="Pending"), False, False, [])
    assert c["message"] == "Pod exists with phase: Pending"


def test_ready_running_but_not_ready() -> None:
    c = ready_condition(1, pod(phase="Running", ready=False, ips=["1.2.3.4"]), False, False, [])
    assert (c["status"], c["message"]) == ("False", "Pod is Running but not Ready")


def test_ready_pod_ready_without_pod_ips_is_not_ready() -> None:
    c = ready_condition(1, pod(phase="Running", ready=True), False, False, [])
    assert (c["status"], c["message"]) == ("False", "Pod is Ready but has no podIPs yet")


def test_ready_only_the_first_ready_pod_condition_counts() -> None:
    p = running_pod()
    p["status"]["conditions"] = [
        {"type": "Ready", "status": "False"},
        {"type": "Ready", "status": "True"},
    ]
    assert ready_condition(1, p, False, False, [])["message"] == "Pod is Running but not Ready"


def test_ready_ready_condition_is_only_read_for_running_pods() -> None:
    p = pod(phase="Pending", ready=True, ips=["1.2.3.4"])
    assert ready_condition(1, p, False, False, [])["message"] == "Pod exists with phase: Pending"


def test_ready_required_service_missing_blocks_readiness() -> None:
    c = ready_condition(1, running_pod(), True, False, [])
    assert (c["status"], c["reason"], c["message"]) == (
        "False",
        "DependenciesNotReady",
        "Pod is Ready; Service does not exist",
    )


def test_ready_service_unset_is_required_when_an_owned_service_exists() -> None:
    p = plan(snap(sandbox(), running_pod(), service=service_obj()))
    assert ready(p) == ("True", "DependenciesReady", "Pod is Ready; Service Exists")
    p = plan(snap(sandbox(), running_pod()))
    assert ready(p) == ("True", "DependenciesReady", "Pod is Ready")


# ------------------------------------------------------------- The Finished condition, the order
@pytest.mark.parametrize(
    ("phase", "reason", "message"),
    [
        ("Succeeded", "PodSucceeded", "Pod completed successfully"),
        ("Failed", "PodFailed", "Pod failed"),
    ],
)
def test_finished_follows_a_terminal_pod_phase(phase: str, reason: str, message: str) -> None:
    p = plan(snap(sandbox(), pod(phase=phase)))
    c = cond(p, "Finished")
    assert c is not None
    assert (c["status"], c["reason"], c["message"]) == ("True", reason, message)
    assert ready(p) == ("False", "DependenciesNotReady", f"Pod exists with phase: {phase}")
    assert p.pod is not None and p.pod.step.action is Action.NONE  # kept, not recreated


def test_finished_is_removed_when_not_computed() -> None:
    finished = {
        "type": "Finished",
        "status": "True",
        "reason": "PodFailed",
        "message": "Pod failed",
    }
    p = plan(snap(sandbox(status={"conditions": [finished]}), running_pod()))
    assert cond(p, "Finished") is None


def _condition_types(p: Plan) -> list[str]:
    assert p.status is not None
    return [c["type"] for c in p.status["conditions"]]


def test_new_conditions_are_inserted_in_upstreams_order() -> None:
    """Suspended, Finished, PodScheduled, Ready: upstream v1.0.1 sets them in this order, so a
    watcher of a new Sandbox sees the list in it."""
    assert _condition_types(plan(snap(sandbox(replicas=0)))) == ["Suspended", "Ready"]
    assert _condition_types(plan(snap(sandbox(), pod(phase="Failed")))) == [
        "Suspended",
        "Finished",
        "PodScheduled",
        "Ready",
    ]


def test_existing_conditions_keep_their_place() -> None:
    first = plan(snap(sandbox()))
    assert first.status is not None
    assert _condition_types(first) == ["Suspended", "PodScheduled", "Ready"]
    p = plan(snap(sandbox(replicas=0, status=first.status)))
    assert _condition_types(p) == ["Suspended", "Ready"]  # PodScheduled went with the pod
    resumed = plan(snap(sandbox(status=p.status)))
    assert _condition_types(resumed) == ["Suspended", "Ready", "PodScheduled"]  # appended


# --------------------------------------------------------------------------- Expiry in two passes
def _marked(policy: str | None = None, **status: Any) -> dict[str, Any]:
    conditions = [
        {"type": "Ready", "status": "False", "reason": "SandboxExpired", "message": "x"},
        {"type": "Finished", "status": "True", "reason": "PodSucceeded", "message": "m"},
    ]
    return sandbox(
        shutdown=NOW - timedelta(minutes=1),
        policy=policy,
        service=True,
        vcts=[vct("data")],
        status={"conditions": conditions, **status},
    )


def test_expiry_deletes_the_owned_pod_and_service_but_not_pvcs() -> None:
    p = plan(snap(_marked(), running_pod(), service=service_obj(), pvcs=(pvc("data-my-sandbox"),)))
    assert p.expiry is not None
    assert p.expiry.delete_pod is not None and p.expiry.delete_pod.uid == "pod-uid-my-sandbox"
    assert p.expiry.delete_service is not None and p.expiry.delete_service.uid == "svc-uid"
    assert p.pvcs == ()


def test_expiry_skips_unowned_and_foreign_children() -> None:
    p = plan(
        snap(
            _marked(),
            running_pod(owner=None),
            service=service_obj(owner=owner_ref("o", "other", "Sandbox")),
        )
    )
    assert p.expiry is not None
    assert p.expiry.delete_pod is None and p.expiry.delete_service is None


def test_expiry_with_delete_policy_deletes_the_sandbox_and_writes_no_status() -> None:
    p = plan(snap(_marked("Delete"), running_pod()))
    assert p.expiry is not None and p.expiry.delete_sandbox
    assert p.status is None


def test_expiry_with_retain_keeps_only_the_conditions() -> None:
    sb = _marked(
        "Retain",
        replicas=1,
        selector="s",
        podIPs=["1.2.3.4"],
        service="my-sandbox",
        serviceFQDN="f",
    )
    p = plan(snap(sb))
    assert p.expiry is not None and not p.expiry.delete_sandbox
    assert p.status is not None and set(p.status) == {"conditions"}
    assert ready(p) == ("False", "SandboxExpired", "Sandbox has expired")
    assert cond(p, "Finished") is not None  # preserved


def test_expiry_policy_defaults_to_retain() -> None:
    p = plan(snap(_marked()))
    assert p.expiry is not None and not p.expiry.delete_sandbox


def test_expiry_cleanup_is_idempotent_once_done() -> None:
    first = plan(snap(_marked()))
    assert first.status is not None
    again = plan(snap(_marked() | {"status": first.status}))
    assert again.expiry is not None
    assert again.expiry.delete_pod is None and again.expiry.delete_service is None
    assert again.status is not None and status_patch(first.status, again.status) is None


def test_moving_shutdown_time_into_the_future_un_expires() -> None:
    sb = _marked()
    sb["spec"]["shutdownTime"] = format_rfc3339(NOW + timedelta(hours=1))
    p = plan(snap(sb))
    assert p.phase is Phase.ACTIVE
    assert p.pod is not None and p.pod.step.action is Action.CREATE
    assert p.service is not None and p.service.action is Action.CREATE
    assert ready(p) == ("False", "DependenciesNotReady", "Pod exists with phase: ; Service Exists")


# ----------------------------------------------------------------------- Deletion and pod failure
def test_deleted_pod_is_recreated_with_the_sandbox_name() -> None:
    sb = sandbox(
        sandbox_annotations={keys.ANNOTATION_POD_NAME: "my-sandbox"},
        status={"replicas": 1, "podIPs": ["10.0.0.7"]},
    )
    p = plan(snap(sb))
    assert p.pod is not None and p.pod.step.action is Action.CREATE
    assert [(e.reason, e.note) for e in p.events] == [
        (EVENT_POD_RECREATED, 'Pod was gone; created pod "my-sandbox"')
    ]


def test_terminating_pod_is_still_reported_by_phase() -> None:
    p = plan(snap(sandbox(), pod(phase="Running", ready=True, ips=["1.1.1.1"], terminating=True)))
    assert p.pod is not None and p.pod.step.action is Action.NONE
    assert ready(p) == ("True", "DependenciesReady", "Pod is Ready")


# ----------------------------------------------------------------------------- Watches and caches
def test_child_events_map_to_the_controlling_sandbox() -> None:
    owned = running_pod(name="pool-abc")
    owned["metadata"]["ownerReferences"] = [owner_ref(name="claimed")]
    assert sandbox_for_child(owned) == [Request(NS, "claimed")]


def test_child_events_of_foreign_controllers_are_dropped() -> None:
    assert sandbox_for_child(running_pod(owner=owner_ref("x", "rs", "ReplicaSet"))) == []


def test_unowned_child_events_map_to_the_sandbox_of_the_same_name() -> None:
    assert sandbox_for_child(running_pod(owner=None)) == [Request(NS, "my-sandbox")]


# ---------------------------------------------------------------------------------- purity
def test_plan_does_not_modify_its_snapshot() -> None:
    sb = sandbox(labels={"a": "1"}, service=True, vcts=[vct()], status={"replicas": 1})
    live = running_pod(owner=None, labels={keys.LABEL_ADOPTABLE: "true"})
    before = copy.deepcopy((sb, live))
    plan(snap(sb, live, service=service_obj(owner=None)))
    assert (sb, live) == before


# ----------------------------------------------------------------------------------------- Writes
class _Cache:
    """Just enough of an informer for the reconciler: get, an index, no events."""

    def __init__(self, *objs: dict[str, Any]) -> None:
        self.objs = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objs}

    def get(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self.objs.get((namespace or "", name))

    def add_index(self, name: str, fn: Any) -> None:
        pass

    def by_index(self, index: str, value: str) -> list[dict[str, Any]]:
        return []


class _NoClient:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the reconciler must not call the API ({name})")


def _reconciler(*sandboxes: dict[str, Any]) -> Any:
    from agentsandbox.controllers.sandbox.act import SandboxWriter
    from agentsandbox.controllers.sandbox.controller import SandboxReconciler

    return SandboxReconciler(
        SandboxWriter(_NoClient(), None),  # type: ignore[arg-type]
        _Cache(*sandboxes),  # type: ignore[arg-type]
        _Cache(),  # type: ignore[arg-type]
        _Cache(),  # type: ignore[arg-type]
        _Cache(),  # type: ignore[arg-type]
        clock=lambda: NOW,
    )


async def test_a_sandbox_being_deleted_is_left_to_the_garbage_collector() -> None:
    sb = sandbox()
    sb["metadata"]["deletionTimestamp"] = format_rfc3339(NOW)
    assert await _reconciler(sb).reconcile(Request(NS, "my-sandbox")) is None


async def test_a_sandbox_not_in_the_cache_is_done_without_error() -> None:
    assert await _reconciler().reconcile(Request(NS, "gone")) is None


async def test_an_up_to_date_sandbox_makes_no_api_call() -> None:
    first = plan(snap(sandbox(), running_pod()))
    assert first.status is not None
    sb = sandbox(sandbox_annotations={keys.ANNOTATION_POD_NAME: "my-sandbox"}, status=first.status)
    reconciler = _reconciler(sb)
    reconciler.pods = _Cache(running_pod())
    assert await reconciler.reconcile(Request(NS, "my-sandbox")) is None


# ------------------------------------------------------------------- first pending status
def test_is_first_pending_status_only_for_a_first_dependencies_not_ready() -> None:
    from agentsandbox.controllers.sandbox.status import is_first_pending_status

    def status(ready: str, reason: str) -> dict[str, Any]:
        return {"conditions": [{"type": "Ready", "status": ready, "reason": reason}]}

    pending = status("False", "DependenciesNotReady")
    assert is_first_pending_status({}, pending)
    assert not is_first_pending_status(pending, pending)  # not the first status
    assert not is_first_pending_status({}, status("True", "DependenciesReady"))
    assert not is_first_pending_status({}, status("False", "ReconcilerError"))
    assert not is_first_pending_status({}, status("False", "SandboxSuspended"))
    assert not is_first_pending_status({}, {})


# ------------------------------------------------------------------- events of pool members
def _controlled(sb: dict[str, Any], kind: str) -> dict[str, Any]:
    sb["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": kind,
            "name": "x",
            "uid": "owner-uid",
            "controller": True,
        }
    ]
    return sb


def test_a_warm_pool_members_first_pod_is_created_without_an_event() -> None:
    """Ours: pools make members by the hundreds; one Event write less per pool sandbox."""
    from agentsandbox.controllers.sandbox.children import in_warm_pool, plan_pod

    member = _controlled(sandbox(), "SandboxWarmPool")
    assert in_warm_pool(member)
    step = plan_pod(snap(member)).step
    assert step.action.name == "CREATE" and step.event is None
    cold = _controlled(sandbox(), "SandboxClaim")
    assert not in_warm_pool(cold)
    event = plan_pod(snap(cold)).step.event
    assert event is not None and event.reason == "PodCreated"
    assert plan_pod(snap(sandbox())).step.event is not None  # a user's own Sandbox


def test_a_pool_member_whose_pod_went_away_still_says_so() -> None:
    from agentsandbox.controllers.sandbox.children import plan_pod

    member = _controlled(sandbox(status={"replicas": 1}), "SandboxWarmPool")
    event = plan_pod(snap(member)).step.event
    assert event is not None and event.reason == "PodRecreated"
