"""Sandbox: the decision step (pure). Snapshot in, plan out; no I/O, no clock reads.

Implements core spec §2 rule by rule: the two-pass expiry (§2.3, §2.8), the children in upstream's
order PVCs -> Pod -> Service (§2.4), the status fields (§2.5) and the Ready / Suspended / Finished
conditions with their exact reasons and messages (§2.6, §2.7).

Every child decision is a small function of the snapshot, so that the act step can re-plan one
child when the API tells it more than the cache did (a create answered ``AlreadyExists``: the
object exists but is not in our label-scoped caches). The status is a function of what the child
steps *returned*, so the act step recomputes it from the real outcome of its writes.

Deliberate differences from upstream 35b9757f (see ``docs/sandbox-controller.md``):

- an unowned Pod, PVC or Service is adopted only if it carries ``agents.x-k8s.io/adoptable:
  "true"`` (upstream's later hijacking fix); otherwise it is left alone and reported;
- the tracking label and the propagated-keys annotations are reserved: a pod template cannot
  override or propagate them (upstream's later #894);
- with ``spec.service`` unset a Service owned by someone else is ignored, not an error forever;
- no pod is created while a PVC it would mount is someone else's (owned by another controller,
  or its adoption refused): upstream creates it and so mounts a volume it refused to adopt;
- a terminating pod is reported but not written to;
- adopting a selector-less headless Service also relaxes the apiserver's ``RequireDualStack``
  default to ``PreferDualStack`` (upstream's adoption is rejected on single-stack clusters).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import Enum
from typing import Any, Final

from agentsandbox.api import keys
from agentsandbox.api.conditions import (
    CONDITION_FINISHED,
    CONDITION_READY,
    CONDITION_SUSPENDED,
    FALSE,
    MESSAGE_ERROR_PREFIX,
    MESSAGE_POD_FAILED,
    MESSAGE_POD_NOT_TERMINATED,
    MESSAGE_POD_READY,
    MESSAGE_POD_SUCCEEDED,
    MESSAGE_POD_TERMINATED,
    MESSAGE_SANDBOX_EXPIRED,
    MESSAGE_SANDBOX_SUSPENDED,
    MESSAGE_SANDBOX_SUSPENDING,
    MESSAGE_SERVICE_EXISTS_SUFFIX,
    REASON_DEPENDENCIES_NOT_READY,
    REASON_DEPENDENCIES_READY,
    REASON_POD_FAILED,
    REASON_POD_NOT_TERMINATED,
    REASON_POD_SUCCEEDED,
    REASON_POD_TERMINATED,
    REASON_RECONCILER_ERROR,
    REASON_SANDBOX_EXPIRED,
    REASON_SANDBOX_SUSPENDED,
    TRUE,
    Condition,
    find_condition,
    make_condition,
    remove_status_condition,
    set_status_condition,
)
from agentsandbox.api.equality import semantic_equal
from agentsandbox.api.hashing import name_hash, sandbox_selector
from agentsandbox.api.kinds import EXTENSIONS_GROUP, SANDBOX, SANDBOX_WARM_POOL
from agentsandbox.api.owners import (
    Ownership,
    controller_of,
    controller_reference,
    is_adoptable,
    ownership,
    with_controller_reference,
)
from agentsandbox.api.timefmt import parse_rfc3339

__all__ = [
    "DEFAULT_CLUSTER_DOMAIN",
    "IMMEDIATE_REQUEUE",
    "MIN_EXPIRY_REQUEUE",
    "Action",
    "ChildStep",
    "Event",
    "ExpiryPlan",
    "Finish",
    "Phase",
    "Plan",
    "PodPlan",
    "Snapshot",
    "build_pod",
    "build_pvc",
    "build_service",
    "compute_status",
    "error_events",
    "expired_status",
    "expiry_phase",
    "finish",
    "is_first_pending_status",
    "plan",
    "plan_expiry",
    "plan_pod",
    "plan_pvc",
    "plan_pvcs",
    "plan_service",
    "pvc_name",
    "ready_condition",
    "status_patch",
    "with_pod",
    "with_pvc",
    "with_service",
]

Obj = Mapping[str, Any]

#: ``RequeueAfter`` after marking a Sandbox expired: the cleanup pass runs at once.
IMMEDIATE_REQUEUE: Final = 0.001
#: Shortest ``RequeueAfter`` while a shutdownTime is pending.
MIN_EXPIRY_REQUEUE: Final = 2.0
DEFAULT_CLUSTER_DOMAIN: Final = "cluster.local"

IP_FAMILY_REQUIRE_DUAL_STACK: Final = "RequireDualStack"
IP_FAMILY_PREFER_DUAL_STACK: Final = "PreferDualStack"

SHUTDOWN_POLICY_DELETE: Final = "Delete"
SHUTDOWN_POLICY_RETAIN: Final = "Retain"

PHASE_RUNNING: Final = "Running"
PHASE_SUCCEEDED: Final = "Succeeded"
PHASE_FAILED: Final = "Failed"

MESSAGE_POD_DOES_NOT_EXIST: Final = "Pod does not exist"
MESSAGE_POD_EXISTS_WITH_PHASE: Final = "Pod exists with phase: "
MESSAGE_POD_RUNNING_NOT_READY: Final = "Pod is Running but not Ready"
MESSAGE_POD_READY_NO_IPS: Final = "Pod is Ready but has no podIPs yet"
MESSAGE_SERVICE_MISSING_SUFFIX: Final = "; Service does not exist"

# Kubernetes Events on the Sandbox (reporting controller "sandbox-controller").
NORMAL: Final = "Normal"
WARNING: Final = "Warning"
EVENT_POD_CREATED: Final = "PodCreated"
EVENT_POD_RECREATED: Final = "PodRecreated"
EVENT_POD_DELETED: Final = "PodDeleted"
EVENT_ADOPTED: Final = "Adopted"
EVENT_ADOPTION_REFUSED: Final = "AdoptionRefused"
EVENT_EXPIRED: Final = "SandboxExpired"
EVENT_RECONCILER_ERROR: Final = "ReconcilerError"

# Upstream's error wraps for failed writes (the API's message follows).
WRAP_POD_UPDATE: Final = "failed to update pod: "
WRAP_POD_DELETE: Final = "failed to delete pod: "
WRAP_SERVICE_DELETE: Final = "failed to delete service: "
WRAP_SERVICE_PATCH: Final = "failed to patch owned service: "
WRAP_SERVICE_ADOPT: Final = "failed to update service with owner reference: "
WRAP_PVC_ADOPT: Final = "failed to update PVC with owner reference: "

#: Sandbox labels carried to the pod when an extensions-group object controls the Sandbox.
EXTENSION_POD_LABELS: Final = (keys.LABEL_WARM_POOL_SANDBOX, keys.LABEL_SANDBOX_TEMPLATE_REF_HASH)

#: Keys the controller owns on a pod; a pod template can neither set nor propagate them.
RESERVED_POD_LABELS: Final = frozenset({keys.LABEL_SANDBOX_NAME_HASH})
RESERVED_POD_ANNOTATIONS: Final = frozenset(
    {keys.ANNOTATION_PROPAGATED_LABELS, keys.ANNOTATION_PROPAGATED_ANNOTATIONS}
)


# ---------------------------------------------------------------------------------- types
class Phase(Enum):
    """Where a Sandbox is in its life, by ``spec.shutdownTime`` (§2.3 step 7)."""

    ACTIVE = "active"
    MARK_EXPIRED = "mark-expired"  # first pass after shutdownTime: only mark it
    EXPIRED = "expired"  # marked: delete the children (and the Sandbox with policy Delete)


class Action(Enum):
    NONE = "none"
    CREATE = "create"
    PATCH = "patch"  # JSON merge patch of the body
    DELETE = "delete"


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    note: str
    action: str = "Reconcile"


@dataclass(frozen=True)
class Snapshot:
    """What one pass sees, read from the caches (or, after ``AlreadyExists``, from the API).

    ``pods`` holds the candidates by name: the pod named in ``agents.x-k8s.io/pod-name`` and the
    pod named after the Sandbox, when they exist. ``pvcs`` maps PVC names to the PVCs that exist.
    """

    sandbox: Obj
    now: datetime
    pods: Mapping[str, Obj] = field(default_factory=dict)
    service: Obj | None = None
    pvcs: Mapping[str, Obj] = field(default_factory=dict)
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN


@dataclass(frozen=True)
class ChildStep:
    """One decision about one child (Pod, Service or PVC).

    ``result`` is the child as the pass reports it afterwards, assuming the write succeeds (None:
    no child in use); ``kept`` is what it reports when the write fails (the child as it was for a
    metadata sync of our own child; None for a create, a delete and an adoption, since a child
    we failed to adopt is not ours). ``error`` is a message for the Ready condition; ``refused``
    marks the error as a refused adoption (a Warning ``AdoptionRefused`` event rather than
    ``ReconcilerError``). ``event`` is recorded once the write succeeded. ``wrap`` prefixes the
    API's message when the write fails (upstream's error wrap, e.g. ``failed to delete pod: ``).
    """

    action: Action
    name: str
    body: dict[str, Any] | None = None
    uid: str | None = None  # precondition of a DELETE
    result: Obj | None = None
    error: str | None = None
    refused: bool = False
    event: Event | None = None
    kept: Obj | None = None
    wrap: str = ""


@dataclass(frozen=True)
class PodPlan:
    """The pod step and the value the Sandbox's ``agents.x-k8s.io/pod-name`` must end with
    (None: absent)."""

    step: ChildStep
    annotation: str | None


@dataclass(frozen=True)
class ExpiryPlan:
    """The second expiry pass (§2.8): delete the owned pod and Service, maybe the Sandbox."""

    delete_pod: ChildStep | None
    delete_service: ChildStep | None
    delete_sandbox: bool


@dataclass(frozen=True)
class Finish:
    """The end of an active pass: final status, requeue, and whether expiry was just marked."""

    status: dict[str, Any]
    requeue_after: float | None
    expired_now: bool
    events: tuple[Event, ...] = ()


@dataclass(frozen=True)
class Plan:
    phase: Phase
    pvcs: tuple[ChildStep, ...] = ()
    pod: PodPlan | None = None
    service: ChildStep | None = None
    expiry: ExpiryPlan | None = None
    #: The status to write when every write succeeds; None when the Sandbox is being deleted.
    status: dict[str, Any] | None = None
    requeue_after: float | None = None
    events: tuple[Event, ...] = ()

    @property
    def errors(self) -> list[str]:
        """Errors known before any write (ownership conflicts, refused adoptions)."""
        steps = [*self.pvcs, self.pod.step if self.pod else None, self.service]
        return [s.error for s in steps if s is not None and s.error]


# ---------------------------------------------------------------------------------- helpers
def _meta(obj: Obj) -> Mapping[str, Any]:
    meta: Mapping[str, Any] = obj.get("metadata") or {}
    return meta


def _spec(obj: Obj) -> Mapping[str, Any]:
    spec: Mapping[str, Any] = obj.get("spec") or {}
    return spec


def _status(obj: Obj) -> Mapping[str, Any]:
    status: Mapping[str, Any] = obj.get("status") or {}
    return status


OPERATING_MODE_RUNNING: Final = "Running"
OPERATING_MODE_SUSPENDED: Final = "Suspended"


def replicas_of(sandbox: Obj) -> int:
    """The desired pod count, 0 or 1.

    ``spec.operatingMode`` (upstream HEAD, #801) decides when set: ``Suspended`` is 0, ``Running``
    is 1 (a CEL rule keeps ``spec.replicas`` from saying otherwise; if an older object does, the
    mode wins). Unset, ``spec.replicas`` decides, and unset too means 1 (§2.3 step 5). So a
    sandbox suspended by upstream HEAD (``operatingMode: Suspended``, no replicas) stays
    suspended here.
    """
    spec = _spec(sandbox)
    mode = spec.get("operatingMode")
    if mode == OPERATING_MODE_SUSPENDED:
        return 0
    if mode == OPERATING_MODE_RUNNING:
        return 1
    value = spec.get("replicas")
    return 1 if value is None else int(value)


def shutdown_time(sandbox: Obj) -> datetime | None:
    raw = _spec(sandbox).get("shutdownTime")
    return parse_rfc3339(raw) if raw else None


def is_terminating(obj: Obj) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def pvc_name(template_name: str, sandbox_name: str) -> str:
    """``<vct.metadata.name>-<sandbox.name>``: the PVC and (by ``vct.name``) its pod volume."""
    return f"{template_name}-{sandbox_name}"


def _vct_name(vct: Obj) -> str:
    return str(_meta(vct).get("name") or "")


def _owned_by_message(kind: str, name: str, child: Obj, sandbox_name: str) -> str:
    ref = controller_of(child) or {}
    return (
        f'{kind} "{name}" is owned by {ref.get("kind")}/{ref.get("name")} '
        f'(UID: {ref.get("uid")}), not by sandbox "{sandbox_name}"'
    )


def _refused_message(kind: str, name: str, sandbox_name: str) -> str:
    return (
        f'{kind} "{name}" already exists and has no controller; sandbox "{sandbox_name}" does '
        f'not adopt it unless it is labelled {keys.LABEL_ADOPTABLE}="{keys.ADOPTABLE_TRUE}"'
    )


def _map_diff(old: Mapping[str, str], new: Mapping[str, str]) -> dict[str, str | None]:
    """A JSON-merge-patch of a string map: changed and added keys, removed keys as null."""
    diff: dict[str, str | None] = {k: v for k, v in new.items() if old.get(k) != v}
    diff.update({k: None for k in old if k not in new})
    return diff


def _split_keys(value: str | None) -> list[str]:
    return [k for k in (value or "").split(",") if k]


def _extension_labels(sandbox: Obj) -> dict[str, str]:
    """The warm-pool and template-ref-hash labels of a Sandbox controlled by an extensions-group
    object (a pool or a claim), which upstream HEAD's core controller carries to the pod
    (#927, #1067, #1139). Our own pool and claims also put them in the pod template, where
    they win; this covers Sandboxes made by other extension controllers."""
    ref = controller_of(sandbox)
    group = str((ref or {}).get("apiVersion") or "").partition("/")[0]
    if group != EXTENSIONS_GROUP:
        return {}
    labels = _meta(sandbox).get("labels") or {}
    return {k: str(labels[k]) for k in EXTENSION_POD_LABELS if labels.get(k)}


def _template_meta(sandbox: Obj) -> tuple[dict[str, str], dict[str, str] | None]:
    """Template labels and annotations without the reserved keys (annotations None when the
    template has no annotations map at all), plus :func:`_extension_labels` the template does
    not set (propagated, so listed and removed like template labels)."""
    meta = (_spec(sandbox).get("podTemplate") or {}).get("metadata") or {}
    labels = {
        k: v
        for k, v in {**_extension_labels(sandbox), **(meta.get("labels") or {})}.items()
        if k not in RESERVED_POD_LABELS
    }
    raw = meta.get("annotations")
    annotations = (
        None if raw is None else {k: v for k, v in raw.items() if k not in RESERVED_POD_ANNOTATIONS}
    )
    return labels, annotations


def in_warm_pool(sandbox: Obj) -> bool:
    """Controlled by a SandboxWarmPool (a warm member nobody has claimed yet)."""
    ref = controller_of(sandbox) or {}
    group = str(ref.get("apiVersion") or "").partition("/")[0]
    return group == EXTENSIONS_GROUP and ref.get("kind") == SANDBOX_WARM_POOL.kind


# ---------------------------------------------------------------------------------- builders
def build_pod(sandbox: Obj) -> dict[str, Any]:
    """The pod of a Sandbox (§2.4 "replicas == 1, no pod")."""
    meta = _meta(sandbox)
    name = meta["name"]
    spec = _spec(sandbox)
    tpl_labels, tpl_annotations = _template_meta(sandbox)
    labels = {**tpl_labels, keys.LABEL_SANDBOX_NAME_HASH: name_hash(name)}
    annotations = dict(tpl_annotations or {})
    if tpl_labels:
        annotations[keys.ANNOTATION_PROPAGATED_LABELS] = ",".join(sorted(tpl_labels))
    if tpl_annotations:
        annotations[keys.ANNOTATION_PROPAGATED_ANNOTATIONS] = ",".join(sorted(tpl_annotations))
    pod_spec = copy.deepcopy(dict((spec.get("podTemplate") or {}).get("spec") or {}))
    claim_volumes = [
        {
            "name": _vct_name(vct),
            "persistentVolumeClaim": {"claimName": pvc_name(_vct_name(vct), name)},
        }
        for vct in spec.get("volumeClaimTemplates") or ()
    ]
    if claim_volumes:
        taken = {v["name"] for v in claim_volumes}
        kept = [v for v in pod_spec.get("volumes") or () if v.get("name") not in taken]
        pod_spec["volumes"] = kept + claim_volumes
    pod_meta: dict[str, Any] = {
        "name": name,
        "namespace": meta.get("namespace"),
        "labels": labels,
        "ownerReferences": [controller_reference(sandbox, SANDBOX)],
    }
    if annotations:
        pod_meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": pod_spec}


def build_pvc(sandbox: Obj, vct: Obj) -> dict[str, Any]:
    """A PVC from ``volumeClaimTemplates[i]``: template metadata + tracking label + owner."""
    meta = _meta(sandbox)
    vmeta = _meta(vct)
    pvc_meta: dict[str, Any] = {
        "name": pvc_name(_vct_name(vct), meta["name"]),
        "namespace": meta.get("namespace"),
        "labels": {
            **(vmeta.get("labels") or {}),
            keys.LABEL_SANDBOX_NAME_HASH: name_hash(meta["name"]),
        },
        "ownerReferences": [controller_reference(sandbox, SANDBOX)],
    }
    if vmeta.get("annotations"):
        pvc_meta["annotations"] = dict(vmeta["annotations"])
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": pvc_meta,
        "spec": copy.deepcopy(dict(_spec(vct))),
    }


def build_service(sandbox: Obj) -> dict[str, Any]:
    """The headless Service: tracking label and selector, no ports, owned by the Sandbox."""
    meta = _meta(sandbox)
    track = {keys.LABEL_SANDBOX_NAME_HASH: name_hash(meta["name"])}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            "labels": dict(track),
            "ownerReferences": [controller_reference(sandbox, SANDBOX)],
        },
        "spec": {"clusterIP": "None", "selector": dict(track)},
    }


# ---------------------------------------------------------------------------------- PVCs
def plan_pvc(snap: Snapshot, index: int) -> ChildStep:
    """``volumeClaimTemplates[index]`` (§2.4 PVCs)."""
    sandbox = snap.sandbox
    meta = _meta(sandbox)
    vct = (_spec(sandbox).get("volumeClaimTemplates") or [])[index]
    name = pvc_name(_vct_name(vct), meta["name"])
    pvc = snap.pvcs.get(name)
    if pvc is None:
        body = build_pvc(sandbox, vct)
        return ChildStep(Action.CREATE, name, body=body, result=body)
    owner = ownership(pvc, meta["uid"])
    if owner is Ownership.OWNED:
        return ChildStep(Action.NONE, name, result=pvc)
    if owner is Ownership.OWNED_BY_OTHER:
        return ChildStep(Action.NONE, name, error=_owned_by_message("PVC", name, pvc, meta["name"]))
    if not is_adoptable(pvc):
        message = _refused_message("PVC", name, meta["name"])
        return ChildStep(Action.NONE, name, error=message, refused=True)
    adopted = with_controller_reference(pvc, controller_reference(sandbox, SANDBOX))
    labels = dict(_meta(pvc).get("labels") or {})
    labels[keys.LABEL_SANDBOX_NAME_HASH] = name_hash(meta["name"])
    adopted["metadata"]["labels"] = labels
    patch_meta: dict[str, Any] = {
        "labels": {keys.LABEL_SANDBOX_NAME_HASH: name_hash(meta["name"])},
        "ownerReferences": adopted["metadata"]["ownerReferences"],
    }
    if _meta(pvc).get("resourceVersion"):
        patch_meta["resourceVersion"] = _meta(pvc)["resourceVersion"]
    return ChildStep(
        Action.PATCH,
        name,
        body={"metadata": patch_meta},
        result=adopted,
        event=Event(NORMAL, EVENT_ADOPTED, f'Adopted PVC "{name}"', "Adopt"),
        wrap=WRAP_PVC_ADOPT,
    )


def plan_pvcs(snap: Snapshot) -> tuple[ChildStep, ...]:
    """Every template in order; a conflict stops the remaining templates (as upstream)."""
    steps: list[ChildStep] = []
    for i in range(len(_spec(snap.sandbox).get("volumeClaimTemplates") or ())):
        step = plan_pvc(snap, i)
        steps.append(step)
        if step.error:
            break
    return tuple(steps)


# ---------------------------------------------------------------------------------- Pod
def _resolve_pod(snap: Snapshot) -> tuple[str, Obj | None, str | None]:
    """(pod name, pod, annotation left after resolving).

    The pod is the one named in ``agents.x-k8s.io/pod-name``, else the one named after the
    Sandbox. A pod-name annotation naming a pod that is gone is dropped, and the pod named after
    the Sandbox is looked at instead (upstream reaches it through create -> AlreadyExists).
    """
    meta = _meta(snap.sandbox)
    annotation = (meta.get("annotations") or {}).get(keys.ANNOTATION_POD_NAME) or None
    name = annotation or meta["name"]
    pod = snap.pods.get(name)
    if pod is None and annotation:
        annotation = None
        name = meta["name"]
        pod = snap.pods.get(name)
    return name, pod, annotation


def _synced_metadata(sandbox: Obj, pod: Obj) -> tuple[dict[str, str], dict[str, str]]:
    """Pod labels and annotations after the metadata sync (§2.4 "Pod metadata sync")."""
    pmeta = _meta(pod)
    labels = dict(pmeta.get("labels") or {})
    annotations = dict(pmeta.get("annotations") or {})
    tpl_labels, tpl_annotations = _template_meta(sandbox)

    labels.update(tpl_labels)
    labels[keys.LABEL_SANDBOX_NAME_HASH] = name_hash(_meta(sandbox)["name"])
    for key in _split_keys(annotations.get(keys.ANNOTATION_PROPAGATED_LABELS)):
        if key not in tpl_labels and key not in RESERVED_POD_LABELS:
            labels.pop(key, None)

    listed = _split_keys(annotations.get(keys.ANNOTATION_PROPAGATED_ANNOTATIONS))
    if tpl_annotations is not None:
        annotations.update(tpl_annotations)
    for key in listed:
        if key not in (tpl_annotations or {}) and key not in RESERVED_POD_ANNOTATIONS:
            annotations.pop(key, None)

    for key, value in (
        (keys.ANNOTATION_PROPAGATED_LABELS, ",".join(sorted(tpl_labels))),
        (keys.ANNOTATION_PROPAGATED_ANNOTATIONS, ",".join(sorted(tpl_annotations or {}))),
    ):
        if annotations.get(key, "") != value:  # absent equals "": no spurious write
            annotations[key] = value
    return labels, annotations


def _existing_pod(snap: Snapshot, name: str, pod: Obj, annotation: str | None) -> PodPlan:
    """replicas == 1 and the pod exists (warm-pool adoption, restarts, cache lag)."""
    sandbox = snap.sandbox
    meta = _meta(sandbox)
    owner = ownership(pod, meta["uid"])
    if owner is Ownership.OWNED_BY_OTHER:
        error = _owned_by_message("pod", name, pod, meta["name"])
        return PodPlan(ChildStep(Action.NONE, name, error=error), None)
    adopting = owner is Ownership.UNOWNED
    if adopting and not is_adoptable(pod):
        error = _refused_message("pod", name, meta["name"])
        return PodPlan(ChildStep(Action.NONE, name, error=error, refused=True), None)
    final_annotation = annotation or name  # ensure: set when missing, else leave it
    if is_terminating(pod):
        return PodPlan(ChildStep(Action.NONE, name, result=pod), final_annotation)

    result = copy.deepcopy(dict(pod))
    rmeta = result.setdefault("metadata", {})
    patch_meta: dict[str, Any] = {}
    if adopting:
        adopted = with_controller_reference(pod, controller_reference(sandbox, SANDBOX))
        rmeta["ownerReferences"] = adopted["metadata"]["ownerReferences"]
        patch_meta["ownerReferences"] = rmeta["ownerReferences"]
        if rmeta.get("resourceVersion"):
            patch_meta["resourceVersion"] = rmeta["resourceVersion"]
    labels, annotations = _synced_metadata(sandbox, pod)
    label_diff = _map_diff(_meta(pod).get("labels") or {}, labels)
    annotation_diff = _map_diff(_meta(pod).get("annotations") or {}, annotations)
    if label_diff:
        patch_meta["labels"] = label_diff
        rmeta["labels"] = labels
    if annotation_diff:
        patch_meta["annotations"] = annotation_diff
        rmeta["annotations"] = annotations
    if not patch_meta:
        return PodPlan(ChildStep(Action.NONE, name, result=pod), final_annotation)
    event = Event(NORMAL, EVENT_ADOPTED, f'Adopted pod "{name}"', "Adopt") if adopting else None
    step = ChildStep(
        Action.PATCH,
        name,
        body={"metadata": patch_meta},
        result=result,
        event=event,
        kept=None if adopting else pod,  # a pod we failed to adopt is not ours
        wrap=WRAP_POD_UPDATE,
    )
    return PodPlan(step, final_annotation)


def plan_pod(snap: Snapshot, blocking_pvcs: Sequence[str] = ()) -> PodPlan:
    """The pod (§2.4 ``reconcilePod``, §2.7, §2.9).

    ``blocking_pvcs``: claims of the pod's volumes that are not ours (owned by someone else, or
    their adoption refused or failed). No pod is created while there are any: it would mount a
    volume someone else controls (a deliberate difference from upstream, which creates it).
    A pod that already exists is handled as usual.
    """
    sandbox = snap.sandbox
    meta = _meta(sandbox)
    name, pod, annotation = _resolve_pod(snap)

    if replicas_of(sandbox) == 0:
        if (
            pod is not None
            and ownership(pod, meta["uid"]) is Ownership.OWNED
            and not is_terminating(pod)
        ):
            step = ChildStep(
                Action.DELETE,
                name,
                uid=_meta(pod).get("uid"),
                event=Event(
                    NORMAL, EVENT_POD_DELETED, f'Deleted pod "{name}": sandbox suspended', "Delete"
                ),
                wrap=WRAP_POD_DELETE,
            )
            return PodPlan(step, None)
        return PodPlan(ChildStep(Action.NONE, name), None)

    if pod is not None:
        return _existing_pod(snap, name, pod, annotation)

    if blocking_pvcs:
        claims = ", ".join(f'"{c}"' for c in blocking_pvcs)
        noun = "PVC" if len(blocking_pvcs) == 1 else "PVCs"
        error = (
            f'pod "{meta["name"]}" is not created: it would mount {noun} {claims}, '
            f'not owned by sandbox "{meta["name"]}"'
        )
        return PodPlan(ChildStep(Action.NONE, meta["name"], error=error), annotation)

    body = build_pod(sandbox)
    # a pod-name annotation on a Sandbox that never had a status was written by its creator
    # (the warm pool names its sandboxes and their pods at once), not left by a pod that went
    had_pod = bool(_status(sandbox).get("replicas")) or (
        bool((meta.get("annotations") or {}).get(keys.ANNOTATION_POD_NAME))
        and bool(_status(sandbox))
    )
    event: Event | None
    if had_pod:
        event = Event(
            NORMAL, EVENT_POD_RECREATED, f'Pod was gone; created pod "{meta["name"]}"', "Create"
        )
    elif in_warm_pool(sandbox):
        # a pool makes its members by the hundreds and reports them in its status and metrics:
        # no Event per member's first pod (one write less per pool sandbox; ours, see docs)
        event = None
    else:
        event = Event(NORMAL, EVENT_POD_CREATED, f'Created pod "{meta["name"]}"', "Create")
    step = ChildStep(Action.CREATE, meta["name"], body=body, result=body, event=event)
    return PodPlan(step, meta["name"])


# ---------------------------------------------------------------------------------- Service
def plan_service(snap: Snapshot) -> ChildStep:
    """The headless Service, per the tri-state ``spec.service`` table (§2.4 Service)."""
    sandbox = snap.sandbox
    meta = _meta(sandbox)
    name = meta["name"]
    desired = _spec(sandbox).get("service")
    svc = snap.service
    if svc is None:
        if desired is True:
            body = build_service(sandbox)
            return ChildStep(Action.CREATE, name, body=body, result=body)
        return ChildStep(Action.NONE, name)

    track_key, track_value = keys.LABEL_SANDBOX_NAME_HASH, name_hash(name)
    owner = ownership(svc, meta["uid"])
    if owner is Ownership.OWNED:
        if desired is False:
            return ChildStep(
                Action.DELETE, name, uid=_meta(svc).get("uid"), wrap=WRAP_SERVICE_DELETE
            )
        return _service_sync(svc, name, track_key, track_value, adopt_from=None)
    if desired is not True:
        return ChildStep(Action.NONE, name)  # unowned / foreign and not asked for: ignored
    if owner is Ownership.OWNED_BY_OTHER:
        return ChildStep(Action.NONE, name, error=_owned_by_message("service", name, svc, name))
    if not is_adoptable(svc):
        return ChildStep(
            Action.NONE, name, error=_refused_message("service", name, name), refused=True
        )
    cluster_ip = _spec(svc).get("clusterIP") or ""
    if cluster_ip not in ("None", ""):
        return ChildStep(
            Action.NONE,
            name,
            error=(
                f'cannot adopt service "{name}": ClusterIP is "{cluster_ip}" '
                '(expected "None", field is immutable)'
            ),
        )
    return _service_sync(svc, name, track_key, track_value, adopt_from=sandbox)


def _service_sync(
    svc: Obj, name: str, track_key: str, track_value: str, adopt_from: Obj | None
) -> ChildStep:
    """Drift fix (owned) or adoption: tracking label, selector = exactly the tracking label."""
    labels = _meta(svc).get("labels") or {}
    selector = _spec(svc).get("selector") or {}
    want_selector = {track_key: track_value}
    patch: dict[str, Any] = {}
    result = copy.deepcopy(dict(svc))
    if labels.get(track_key) != track_value:
        patch.setdefault("metadata", {})["labels"] = {track_key: track_value}
        result.setdefault("metadata", {})["labels"] = {**labels, track_key: track_value}
    if dict(selector) != want_selector:
        patch["spec"] = {"selector": _map_diff(selector, want_selector)}
        result.setdefault("spec", {})["selector"] = want_selector
        if not selector and _spec(svc).get("ipFamilyPolicy") == IP_FAMILY_REQUIRE_DUAL_STACK:
            # The apiserver defaults a selector-less headless Service to RequireDualStack with
            # both families, whatever the cluster; with a selector that is invalid on a
            # single-stack cluster. PreferDualStack with the families re-defaulted is valid
            # on both kinds of cluster (and still dual-stack where the cluster is).
            patch["spec"].update(ipFamilyPolicy=IP_FAMILY_PREFER_DUAL_STACK, ipFamilies=None)
            result["spec"]["ipFamilyPolicy"] = IP_FAMILY_PREFER_DUAL_STACK
            result["spec"].pop("ipFamilies", None)
    event = None
    if adopt_from is not None:
        adopted = with_controller_reference(svc, controller_reference(adopt_from, SANDBOX))
        refs = adopted["metadata"]["ownerReferences"]
        patch.setdefault("metadata", {})["ownerReferences"] = refs
        result["metadata"]["ownerReferences"] = refs
        if _meta(svc).get("resourceVersion"):
            patch["metadata"]["resourceVersion"] = _meta(svc)["resourceVersion"]
        event = Event(NORMAL, EVENT_ADOPTED, f'Adopted service "{name}"', "Adopt")
    if not patch:
        return ChildStep(Action.NONE, name, result=svc)
    if adopt_from is not None:  # a Service we failed to adopt is not ours
        return ChildStep(
            Action.PATCH, name, body=patch, result=result, event=event, wrap=WRAP_SERVICE_ADOPT
        )
    return ChildStep(
        Action.PATCH, name, body=patch, result=result, kept=svc, wrap=WRAP_SERVICE_PATCH
    )


def error_events(errors: Sequence[tuple[str, bool]]) -> list[Event]:
    """Warnings for a pass's errors, given as (message, refused adoption?): one
    ``AdoptionRefused`` per refused child, one ``ReconcilerError`` for the rest."""
    out = [
        Event(WARNING, EVENT_ADOPTION_REFUSED, msg, "Adopt") for msg, refused in errors if refused
    ]
    others = [msg for msg, refused in errors if not refused]
    if others:
        out.append(Event(WARNING, EVENT_RECONCILER_ERROR, "\n".join(others)))
    return out


# ---------------------------------------------------------------------------------- status
def ready_condition(
    replicas: int,
    pod: Obj | None,
    service_required: bool,
    service_present: bool,
    errors: Sequence[str],
    generation: int | None = None,
) -> Condition:
    """The Ready condition, in upstream's priority order (§2.6)."""
    if errors:
        message = MESSAGE_ERROR_PREFIX + "\n".join(errors)
        return make_condition(CONDITION_READY, FALSE, REASON_RECONCILER_ERROR, message, generation)
    if replicas == 0:
        message = MESSAGE_SANDBOX_SUSPENDING if pod is not None else MESSAGE_SANDBOX_SUSPENDED
        return make_condition(CONDITION_READY, FALSE, REASON_SANDBOX_SUSPENDED, message, generation)
    pod_ready = False
    if pod is None:
        message = MESSAGE_POD_DOES_NOT_EXIST
    else:
        status = _status(pod)
        phase = status.get("phase") or ""
        message = MESSAGE_POD_EXISTS_WITH_PHASE + phase
        if phase == PHASE_RUNNING:
            message = MESSAGE_POD_RUNNING_NOT_READY
            ready = find_condition(status.get("conditions"), "Ready")
            if ready is not None and ready.get("status") == TRUE:
                if status.get("podIPs"):
                    message, pod_ready = MESSAGE_POD_READY, True
                else:
                    message = MESSAGE_POD_READY_NO_IPS
    service_ok = True
    if service_required:
        service_ok = service_present
        message += (
            MESSAGE_SERVICE_EXISTS_SUFFIX if service_present else MESSAGE_SERVICE_MISSING_SUFFIX
        )
    if pod_ready and service_ok:
        return make_condition(CONDITION_READY, TRUE, REASON_DEPENDENCIES_READY, message, generation)
    return make_condition(
        CONDITION_READY, FALSE, REASON_DEPENDENCIES_NOT_READY, message, generation
    )


def _expired_condition(generation: int | None) -> Condition:
    return make_condition(
        CONDITION_READY, FALSE, REASON_SANDBOX_EXPIRED, MESSAGE_SANDBOX_EXPIRED, generation
    )


def _generation(sandbox: Obj) -> int | None:
    value = _meta(sandbox).get("generation")
    return int(value) if value is not None else None


def _compact(status: Mapping[str, Any]) -> dict[str, Any]:
    """``omitempty``: drop nulls, empty strings and lists, and ``replicas: 0``."""
    return {
        k: v
        for k, v in status.items()
        if v not in (None, "", [], {}) and not (k == "replicas" and v == 0)
    }


def compute_status(
    snap: Snapshot,
    pod: Obj | None,
    service: Obj | None,
    errors: Sequence[str],
    now: datetime,
) -> dict[str, Any]:
    """The status after an active pass, from what the child steps returned (§2.5-§2.7)."""
    sandbox = snap.sandbox
    meta = _meta(sandbox)
    old = _status(sandbox)
    generation = _generation(sandbox)
    replicas = replicas_of(sandbox)
    status: dict[str, Any] = dict(old)

    if pod is not None:
        status["replicas"] = 1
        status["selector"] = sandbox_selector(meta["name"])
        ips = [p.get("ip") for p in _status(pod).get("podIPs") or () if p.get("ip")]
        status["podIPs"] = ips or None
    else:
        status["replicas"] = 0
        status["podIPs"] = None  # selector is kept (quirk reproduced)

    if service is not None:
        name = _meta(service).get("name") or meta["name"]
        status["service"] = name
        status["serviceFQDN"] = f"{name}.{meta.get('namespace')}.svc.{snap.cluster_domain}"
    else:
        status["service"] = None
        status["serviceFQDN"] = None

    desired_service = _spec(sandbox).get("service")
    required = bool(desired_service) if desired_service is not None else service is not None
    conditions: list[Condition] = [dict(c) for c in old.get("conditions") or ()]
    if replicas == 0:
        suspended = (
            make_condition(
                CONDITION_SUSPENDED,
                FALSE,
                REASON_POD_NOT_TERMINATED,
                MESSAGE_POD_NOT_TERMINATED,
                generation,
            )
            if pod is not None
            else make_condition(
                CONDITION_SUSPENDED,
                TRUE,
                REASON_POD_TERMINATED,
                MESSAGE_POD_TERMINATED,
                generation,
            )
        )
        conditions, _ = set_status_condition(conditions, suspended, now)
    phase = _status(pod).get("phase") if pod is not None else None
    if phase == PHASE_SUCCEEDED:
        finished = make_condition(
            CONDITION_FINISHED, TRUE, REASON_POD_SUCCEEDED, MESSAGE_POD_SUCCEEDED, generation
        )
        conditions, _ = set_status_condition(conditions, finished, now)
    elif phase == PHASE_FAILED:
        finished = make_condition(
            CONDITION_FINISHED, TRUE, REASON_POD_FAILED, MESSAGE_POD_FAILED, generation
        )
        conditions, _ = set_status_condition(conditions, finished, now)
    else:
        conditions, _ = remove_status_condition(conditions, CONDITION_FINISHED)
    # Ready last: a new list gets upstream's insertion order Suspended, Finished, Ready
    ready = ready_condition(replicas, pod, required, service is not None, errors, generation)
    conditions, _ = set_status_condition(conditions, ready, now)
    status["conditions"] = conditions
    return _compact(status)


def _with_expired_ready(status: Mapping[str, Any], sandbox: Obj, now: datetime) -> dict[str, Any]:
    out = dict(status)
    out["conditions"], _ = set_status_condition(
        status.get("conditions"), _expired_condition(_generation(sandbox)), now
    )
    return _compact(out)


def _expiry_event(sandbox: Obj) -> Event:
    spec = _spec(sandbox)
    policy = spec.get("shutdownPolicy") or SHUTDOWN_POLICY_RETAIN
    what = (
        "deleting the Sandbox"
        if policy == SHUTDOWN_POLICY_DELETE
        else "deleting its pod and service, keeping the Sandbox"
    )
    return Event(
        NORMAL,
        EVENT_EXPIRED,
        f"Sandbox reached its shutdownTime {spec.get('shutdownTime')}; "
        f"shutdownPolicy {policy}: {what}",
        "Expire",
    )


def finish(snap: Snapshot, status: Mapping[str, Any], now: datetime) -> Finish:
    """End of an active pass: re-check expiry with a fresh ``now`` (§2.3 step 7)."""
    deadline = shutdown_time(snap.sandbox)
    if deadline is None:
        return Finish(dict(status), None, False)
    if now < deadline:
        remaining = (deadline - now).total_seconds()
        return Finish(dict(status), max(remaining, MIN_EXPIRY_REQUEUE), False)
    expired = _with_expired_ready(status, snap.sandbox, now)
    return Finish(expired, IMMEDIATE_REQUEUE, True, (_expiry_event(snap.sandbox),))


def is_first_pending_status(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """``new`` would be the Sandbox's first status and only says its pod is on its way.

    True when ``old`` has no Ready condition (no status was written yet) and ``new``'s Ready is
    False with reason ``DependenciesNotReady`` (no error, not suspended, not expired). The
    Sandbox controller holds such a write back for a moment after creating the pod: a pod that
    becomes Ready in that time gets one status write (Ready) instead of two (a deliberate
    deviation, docs/sandbox-controller.md).
    """
    if find_condition(old.get("conditions"), CONDITION_READY) is not None:
        return False
    ready = find_condition(new.get("conditions"), CONDITION_READY)
    return (
        ready is not None
        and ready.get("status") == FALSE
        and ready.get("reason") == REASON_DEPENDENCIES_NOT_READY
    )


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any] | None:
    """A JSON merge patch turning status ``old`` into ``new`` (None when they are equal).

    Changed keys carry their new value, dropped keys null; ``conditions`` is replaced whole.
    """
    old_c, new_c = _compact(old), _compact(new)
    if semantic_equal(old_c, new_c):
        return None
    diff: dict[str, Any] = {k: v for k, v in new_c.items() if old_c.get(k) != v}
    diff.update({k: None for k in old_c if k not in new_c})
    return {"status": diff} if diff else None


# ---------------------------------------------------------------------------------- expiry
def expiry_phase(sandbox: Obj, now: datetime) -> Phase:
    deadline = shutdown_time(sandbox)
    if deadline is None or now < deadline:
        return Phase.ACTIVE
    ready = find_condition(_status(sandbox).get("conditions"), CONDITION_READY)
    if ready is not None and ready.get("reason") == REASON_SANDBOX_EXPIRED:
        return Phase.EXPIRED
    return Phase.MARK_EXPIRED


def plan_expiry(snap: Snapshot) -> ExpiryPlan:
    """``handleSandboxExpiry``: the owned pod and Service go; PVCs stay (GC takes them)."""
    uid = _meta(snap.sandbox)["uid"]
    name, pod, _ = _resolve_pod(snap)
    delete_pod = None
    if pod is not None and ownership(pod, uid) is Ownership.OWNED and not is_terminating(pod):
        delete_pod = ChildStep(Action.DELETE, name, uid=_meta(pod).get("uid"), wrap=WRAP_POD_DELETE)
    svc = snap.service
    delete_service = None
    if svc is not None and ownership(svc, uid) is Ownership.OWNED and not is_terminating(svc):
        delete_service = ChildStep(
            Action.DELETE, _meta(svc)["name"], uid=_meta(svc).get("uid"), wrap=WRAP_SERVICE_DELETE
        )
    policy = _spec(snap.sandbox).get("shutdownPolicy") or SHUTDOWN_POLICY_RETAIN
    return ExpiryPlan(delete_pod, delete_service, policy == SHUTDOWN_POLICY_DELETE)


def expired_status(snap: Snapshot) -> dict[str, Any]:
    """Retain: only the conditions survive, with Ready=False/SandboxExpired (§2.8 step 4)."""
    conditions = _status(snap.sandbox).get("conditions") or []
    return _with_expired_ready({"conditions": conditions}, snap.sandbox, snap.now)


# ---------------------------------------------------------------------------------- plan
def plan(snap: Snapshot) -> Plan:
    """One reconcile pass of a Sandbox that exists and is not being deleted."""
    sandbox = snap.sandbox
    phase = expiry_phase(sandbox, snap.now)
    if phase is Phase.MARK_EXPIRED:
        status = _with_expired_ready(_status(sandbox), sandbox, snap.now)
        return Plan(
            phase, status=status, requeue_after=IMMEDIATE_REQUEUE, events=(_expiry_event(sandbox),)
        )
    if phase is Phase.EXPIRED:
        expiry = plan_expiry(snap)
        retained = None if expiry.delete_sandbox else expired_status(snap)
        return Plan(phase, expiry=expiry, status=retained)

    pvcs = plan_pvcs(snap)
    pod = plan_pod(snap, [s.name for s in pvcs if s.error])
    service = plan_service(snap)
    steps = (*pvcs, pod.step, service)
    errors = [(s.error, s.refused) for s in steps if s.error]
    messages = [message for message, _ in errors]
    status = compute_status(snap, pod.step.result, service.result, messages, snap.now)
    done = finish(snap, status, snap.now)
    events = [s.event for s in steps if s.event is not None and not s.error]
    events.extend(error_events(errors))
    return Plan(
        phase,
        pvcs=pvcs,
        pod=pod,
        service=service,
        status=done.status,
        requeue_after=done.requeue_after,
        events=(*events, *done.events),
    )


def with_pod(snap: Snapshot, pod: Obj) -> Snapshot:
    """The snapshot with ``pod`` known (read from the API after a create said it exists)."""
    return replace(snap, pods={**snap.pods, _meta(pod)["name"]: pod})


def with_service(snap: Snapshot, service: Obj) -> Snapshot:
    return replace(snap, service=service)


def with_pvc(snap: Snapshot, pvc: Obj) -> Snapshot:
    return replace(snap, pvcs={**snap.pvcs, _meta(pvc)["name"]: pvc})
