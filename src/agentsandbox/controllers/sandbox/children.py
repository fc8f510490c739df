"""Sandbox: the children of the decision step (pure): Pod, Service and PVCs.

The builders (:func:`build_pod`, :func:`build_service`, :func:`build_pvc`) and one decision per
child in upstream's order PVCs -> Pod -> Service (docs/design/sandbox.md, "The children, in
order"): create, adopt (only a child
labelled ``agents.x-k8s.io/adoptable: "true"``), sync the pod's propagated metadata or the
Service's selector, delete. Each is a small function of the :class:`~.types.Snapshot`,
so that the act step can re-plan one child when the API tells it more than the cache did.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Final

from agentsandbox.api import keys
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.kinds import EXTENSIONS_GROUP, SANDBOX, SANDBOX_WARM_POOL
from agentsandbox.api.owners import (
    Ownership,
    controller_of,
    controller_reference,
    is_adoptable,
    ownership,
    with_controller_reference,
)
from agentsandbox.controllers.sandbox.types import (
    EVENT_ADOPTED,
    EVENT_POD_CREATED,
    EVENT_POD_DELETED,
    EVENT_POD_RECREATED,
    NORMAL,
    WRAP_POD_DELETE,
    WRAP_POD_UPDATE,
    WRAP_PVC_ADOPT,
    WRAP_SERVICE_ADOPT,
    WRAP_SERVICE_DELETE,
    WRAP_SERVICE_PATCH,
    Action,
    ChildStep,
    Event,
    Obj,
    PodPlan,
    Snapshot,
    _meta,
    _spec,
    _status,
    is_terminating,
    replicas_of,
)

__all__ = [
    "EXTENSION_POD_LABELS",
    "IP_FAMILY_PREFER_DUAL_STACK",
    "IP_FAMILY_REQUIRE_DUAL_STACK",
    "RESERVED_POD_ANNOTATIONS",
    "RESERVED_POD_LABELS",
    "build_pod",
    "build_pvc",
    "build_service",
    "in_warm_pool",
    "plan_pod",
    "plan_pvc",
    "plan_pvcs",
    "plan_service",
    "pvc_name",
]

IP_FAMILY_REQUIRE_DUAL_STACK: Final = "RequireDualStack"
IP_FAMILY_PREFER_DUAL_STACK: Final = "PreferDualStack"

#: Sandbox labels carried to the pod when an extensions-group object controls the Sandbox.
EXTENSION_POD_LABELS: Final = (keys.LABEL_WARM_POOL_SANDBOX, keys.LABEL_SANDBOX_TEMPLATE_REF_HASH)

#: Keys the controller owns on a pod; a pod template can neither set nor propagate them.
RESERVED_POD_LABELS: Final = frozenset({keys.LABEL_SANDBOX_NAME_HASH})
RESERVED_POD_ANNOTATIONS: Final = frozenset(
    {keys.ANNOTATION_PROPAGATED_LABELS, keys.ANNOTATION_PROPAGATED_ANNOTATIONS}
)


# ---------------------------------------------------------------------------------- helpers
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
    """The pod of a Sandbox (docs/design/sandbox.md, "The pod": desired count 1, no pod)."""
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
    """``volumeClaimTemplates[index]`` (docs/design/sandbox.md, "PVCs")."""
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
    Sandbox. A pod-name annotation naming another pod that is gone is dropped, and the pod named
    after the Sandbox is looked at instead (upstream reaches it through create -> AlreadyExists).
    The annotation is never added: upstream v1.0.1 only reads and clears it.
    """
    meta = _meta(snap.sandbox)
    annotation = (meta.get("annotations") or {}).get(keys.ANNOTATION_POD_NAME) or None
    name = annotation or meta["name"]
    pod = snap.pods.get(name)
    if pod is None and annotation and annotation != meta["name"]:
        annotation = None
        name = meta["name"]
        pod = snap.pods.get(name)
    return name, pod, annotation


def _synced_metadata(sandbox: Obj, pod: Obj) -> tuple[dict[str, str], dict[str, str]]:
    """Pod labels and annotations after the metadata sync (docs/design/sandbox.md, "Pod metadata
    sync")."""
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
    # the pod-name annotation is kept as it is, never added: upstream v1.0.1 only reads and
    # clears it, and a write of it on every new Sandbox races its creator's next update
    final_annotation = annotation
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
    """The pod (upstream's ``reconcilePod``; docs/design/sandbox.md, "The pod", "Suspend and
    resume", "Deletion and pod failure").

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
    # the pod is named after the Sandbox: an annotation saying so (the warm pool's) is kept
    return PodPlan(step, annotation)


# ---------------------------------------------------------------------------------- Service
def plan_service(snap: Snapshot) -> ChildStep:
    """The headless Service, per the tri-state ``spec.service`` table (docs/design/sandbox.md,
    "The Service")."""
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
