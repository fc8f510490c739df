"""SandboxWarmPool: the decision step (pure). Snapshot in, plan out; no I/O, no clock reads.

Follows the seed's reconcile order (spec extensions §4.3): filter the listed sandboxes (skip
terminating, ignore foreign controllers, vet and adopt orphans, delete stale ones), replace
sandboxes stuck not Ready past the grace period, compute status from what remains, then create or
delete the difference, capped by the batch size. Later upstream fixes (§9) and our own:

- expectations: no creates or excess deletes while earlier writes are not yet visible in the cache;
  creates count terminating sandboxes too, so the pool never exceeds ``spec.replicas``;
- a missing template: orphans are neither adopted nor counted (the seed adopted them unvetted);
- sandboxes that cannot get a pod (unschedulable, pod creation rejected) are held, not churned;
- a ``Ready`` condition, ``observedGeneration``, and events on transitions.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentsandbox.api import keys
from agentsandbox.api.conditions import find_condition, is_sandbox_ready, set_status_condition
from agentsandbox.api.defaults import apply_sandbox_secure_defaults
from agentsandbox.api.equality import pod_spec_equal
from agentsandbox.api.gojson import GoJSONError
from agentsandbox.api.hashing import name_hash, pod_template_hash, warm_pool_selector
from agentsandbox.api.kinds import SANDBOX, SANDBOX_WARM_POOL
from agentsandbox.api.owners import controller_of, controller_reference
from agentsandbox.api.timefmt import parse_rfc3339

Obj = Mapping[str, Any]

RECREATE = "Recreate"
ON_REPLENISH = "OnReplenish"

# Ready condition reasons on the pool (ours; upstream later tried and dropped conditions).
REASON_READY = "PoolReady"
REASON_SCALING = "Scaling"
REASON_TEMPLATE_NOT_FOUND = "TemplateNotFound"
REASON_TEMPLATE_ERROR = "TemplateError"
REASON_BLOCKED = "SandboxesBlocked"
REASON_CREATE_FAILED = "SandboxCreateFailed"
REASON_WAITING = "WaitingForCache"

EVENT_NOT_PROGRESSING = "WarmPoolNotProgressing"
EVENT_PROGRESSING = "WarmPoolProgressing"


@dataclass(frozen=True)
class Settings:
    max_batch_size: int = 300
    readiness_grace_period: float = 300.0
    unschedulable_recheck_interval: float = 60.0


@dataclass(frozen=True)
class Snapshot:
    """What one reconcile sees. ``template_error`` is None, ``"NotFound"`` or a message."""

    pool: Obj
    sandboxes: Sequence[Obj]
    template: Obj | None
    template_error: str | None
    now: float
    pods: Mapping[str, Obj] = field(default_factory=dict)
    expectations_satisfied: bool = True
    settings: Settings = Settings()


@dataclass
class Plan:
    delete_stale: list[Obj] = field(default_factory=list)
    adopt: list[Obj] = field(default_factory=list)
    delete_stuck: list[Obj] = field(default_factory=list)
    held: list[tuple[Obj, str]] = field(default_factory=list)
    create: int = 0
    blueprint: dict[str, Any] | None = None
    delete_excess: list[Obj] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)
    requeue_after: float | None = None
    active: int = 0
    ready: int = 0
    strategy: str = ON_REPLENISH


# ---------------------------------------------------------------------------------- helpers
def update_strategy(pool: Obj) -> str:
    strategy = (pool.get("spec", {}).get("updateStrategy") or {}).get("type") or ON_REPLENISH
    return RECREATE if strategy == RECREATE else ON_REPLENISH


def template_pod_spec(template: Obj) -> dict[str, Any]:
    return dict(template.get("spec", {}).get("podTemplate", {}).get("spec") or {})


def pod_specs_match(template: Obj, actual: Obj | None) -> bool:
    """The seed's comparePodSpecs: template spec + secure defaults, semantically equal."""
    expected = apply_sandbox_secure_defaults(template, template_pod_spec(template))
    return pod_spec_equal(expected, dict(actual or {}))


def is_sandbox_stale(
    sb: Obj, template: Obj, pod_hash: str, vetted: dict[str, bool], *, orphan: bool
) -> bool:
    """Layered staleness check (spec extensions §4.5)."""
    labels = sb.get("metadata", {}).get("labels") or {}
    if labels.get(keys.LABEL_SANDBOX_TEMPLATE_REF_HASH) != name_hash(template["metadata"]["name"]):
        return True
    actual = sb.get("spec", {}).get("podTemplate", {}).get("spec")
    if orphan:  # never trust labels on an object we do not own
        return not pod_specs_match(template, actual)
    h = labels.get(keys.LABEL_SANDBOX_POD_TEMPLATE_HASH, "")
    if h and h == pod_hash:
        return False
    if not pod_hash:
        return False  # hashing failed: never mass-delete on that
    if h and h in vetted:
        return vetted[h]
    stale = not pod_specs_match(template, actual)
    if h:
        vetted[h] = stale
    return stale


def blocked_reason(sb: Obj, pod: Obj | None) -> str | None:
    """Why a not-Ready sandbox cannot progress on its own, or None.

    Replacing such a sandbox only churns: its successor meets the same quota, admission rule or
    full cluster. So it is held and reported instead (upstream later did the same for
    unschedulable pods).
    """
    if pod is not None:
        for cond in pod.get("status", {}).get("conditions") or []:
            if (
                cond.get("type") == "PodScheduled"
                and cond.get("status") == "False"
                and cond.get("reason") == "Unschedulable"
            ):
                return f"pod unschedulable: {cond.get('message', '')}".strip()
        return None
    ready = find_condition(sb.get("status", {}).get("conditions"), "Ready")
    if ready is not None and ready.get("reason") == "ReconcilerError":
        return str(ready.get("message") or "the sandbox controller cannot create its pod")
    return None


def build_blueprint(pool: Obj, template: Obj, pod_hash: str) -> dict[str, Any]:
    """The sandbox every create posts (spec extensions §4.7)."""
    meta = pool["metadata"]
    tspec = template.get("spec", {})
    ref_name = pool["spec"]["sandboxTemplateRef"]["name"]
    pool_labels = {
        keys.LABEL_WARM_POOL_SANDBOX: name_hash(meta["name"]),
        keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash(ref_name),
        keys.LABEL_SANDBOX_POD_TEMPLATE_HASH: pod_hash,
    }
    ptpl = tspec.get("podTemplate", {})
    pod_meta = ptpl.get("metadata") or {}
    pod_labels = {**(pod_meta.get("labels") or {}), **pool_labels}
    pod_spec = apply_sandbox_secure_defaults(template, copy.deepcopy(ptpl.get("spec") or {}))
    spec: dict[str, Any] = {
        "replicas": 1,
        "podTemplate": {
            "metadata": {"labels": pod_labels},
            "spec": pod_spec,
        },
    }
    if pod_meta.get("annotations"):
        spec["podTemplate"]["metadata"]["annotations"] = dict(pod_meta["annotations"])
    if tspec.get("service") is not None:
        spec["service"] = tspec["service"]
    if tspec.get("volumeClaimTemplates"):
        spec["volumeClaimTemplates"] = copy.deepcopy(tspec["volumeClaimTemplates"])
    return {
        "apiVersion": SANDBOX.api_version,
        "kind": "Sandbox",
        "metadata": {
            "generateName": f"{meta['name']}-",
            "namespace": meta["namespace"],
            "labels": dict(pool_labels),
            "annotations": {keys.ANNOTATION_SANDBOX_TEMPLATE_REF: ref_name},
            "ownerReferences": [controller_reference(pool, SANDBOX_WARM_POOL)],
        },
        "spec": spec,
    }


def _created_at(sb: Obj) -> float | None:
    stamp = sb.get("metadata", {}).get("creationTimestamp")
    return parse_rfc3339(stamp).timestamp() if stamp else None


def progress_started(sb: Obj, pod: Obj | None) -> float | None:
    """When the sandbox last got a chance to become Ready: the latest of its creation, its pod's
    creation and the pod's scheduling. A sandbox held back by a quota or a full cluster gets a
    fresh grace period once it is unblocked, instead of being replaced at once as "stuck"."""
    start = _created_at(sb)
    if start is None or pod is None:
        return start
    stamps = [start, _created_at(pod) or start]
    scheduled = find_condition((pod.get("status") or {}).get("conditions"), "PodScheduled")
    if scheduled and scheduled.get("status") == "True" and scheduled.get("lastTransitionTime"):
        stamps.append(parse_rfc3339(scheduled["lastTransitionTime"]).timestamp())
    return max(stamps)


def _deletion_order(sandboxes: Sequence[Obj]) -> list[Obj]:
    """Not-Ready first, then newest first (spec extensions §4.3 step 7)."""
    return sorted(
        sandboxes,
        key=lambda sb: (is_sandbox_ready(sb), -(_created_at(sb) or 0.0)),
    )


# ---------------------------------------------------------------------------------- decide
def plan(snap: Snapshot) -> Plan:
    pool = snap.pool
    meta = pool["metadata"]
    settings = snap.settings
    out = Plan(strategy=update_strategy(pool))
    template = snap.template if snap.template_error is None else None
    pod_hash = ""
    if template is not None:
        try:
            pod_hash = pod_template_hash(template.get("spec", {}).get("podTemplate", {}))
        except (GoJSONError, TypeError, ValueError):
            pod_hash = ""

    vetted: dict[str, bool] = {}
    active: list[Obj] = []
    terminating = 0
    for sb in snap.sandboxes:
        if sb.get("metadata", {}).get("deletionTimestamp"):
            terminating += 1
            continue
        ref = controller_of(sb)
        orphan = ref is None
        mine = ref is not None and ref.get("uid") == meta["uid"]
        if not orphan and not mine:
            continue  # foreign controller: not ours to count or touch
        if orphan and template is None:
            continue  # deviation: never adopt what we cannot vet
        if (
            template is not None
            and (out.strategy == RECREATE or orphan)
            and is_sandbox_stale(sb, template, pod_hash, vetted, orphan=orphan)
        ):
            out.delete_stale.append(sb)
            continue
        if orphan:
            out.adopt.append(sb)
        active.append(sb)

    # stuck sandboxes: replace after the grace period, unless replacing cannot help
    kept: list[Obj] = []
    next_deadline: float | None = None
    for sb in active:
        if is_sandbox_ready(sb):
            kept.append(sb)
            continue
        pod = snap.pods.get(sb["metadata"]["name"])
        if pod is None and (sb.get("status") or {}).get("replicas"):
            # the Sandbox reports a pod our pod cache has not seen yet: look again shortly
            next_deadline = snap.now if next_deadline is None else min(next_deadline, snap.now)
            kept.append(sb)
            continue
        created = progress_started(sb, pod)
        if created is None:
            kept.append(sb)
            continue
        age = snap.now - created
        if age > settings.readiness_grace_period:
            reason = blocked_reason(sb, pod)
            if reason is not None:
                out.held.append((sb, reason))
                kept.append(sb)
                continue
            out.delete_stuck.append(sb)
            continue
        deadline = created + settings.readiness_grace_period
        next_deadline = deadline if next_deadline is None else min(next_deadline, deadline)
        kept.append(sb)
    active = kept

    desired = int(pool.get("spec", {}).get("replicas", 0) or 0)
    current = len(active)
    ready = sum(1 for sb in active if is_sandbox_ready(sb))
    out.active, out.ready = current, ready

    if snap.expectations_satisfied:
        in_flight = terminating + len(out.delete_stale) + len(out.delete_stuck)
        if current < desired and template is not None:
            # never exceed spec.replicas while old objects are still on their way out
            room = desired - current - in_flight
            out.create = max(0, min(room, settings.max_batch_size))
            if out.create:
                out.blueprint = build_blueprint(pool, template, pod_hash)
        elif current > desired:
            n = min(current - desired, settings.max_batch_size, current)
            out.delete_excess = _deletion_order(active)[:n]

    out.status = _status(snap, out, desired, pod_hash)
    requeues = []
    if next_deadline is not None:
        requeues.append(max(next_deadline - snap.now, 0.0) + 1.0)
    if out.held:
        requeues.append(settings.unschedulable_recheck_interval)
    out.requeue_after = min(requeues) if requeues else None
    return out


def _status(snap: Snapshot, out: Plan, desired: int, pod_hash: str) -> dict[str, Any]:
    pool = snap.pool
    old = pool.get("status") or {}
    conditions = copy.deepcopy(old.get("conditions") or [])
    generation = pool.get("metadata", {}).get("generation")
    if snap.template_error == "NotFound":
        ref = pool["spec"]["sandboxTemplateRef"]["name"]
        cond = ("False", REASON_TEMPLATE_NOT_FOUND, f'SandboxTemplate "{ref}" not found')
    elif snap.template_error is not None:
        cond = ("False", REASON_TEMPLATE_ERROR, snap.template_error)
    elif out.held:
        sb, why = out.held[0]
        cond = (
            "False",
            REASON_BLOCKED,
            f"{len(out.held)} sandbox(es) cannot become Ready, e.g. "
            f'"{sb["metadata"]["name"]}": {why}',
        )
    elif out.active == desired and out.ready == desired:
        cond = ("True", REASON_READY, f"{out.ready}/{desired} sandboxes ready")
    elif not snap.expectations_satisfied:
        cond = ("False", REASON_WAITING, f"{out.ready}/{desired} ready; waiting for earlier writes")
    else:
        cond = ("False", REASON_SCALING, f"{out.ready}/{desired} sandboxes ready")
    conditions, _ = set_status_condition(
        conditions,
        {
            "type": "Ready",
            "status": cond[0],
            "reason": cond[1],
            "message": cond[2],
            "observedGeneration": generation,
        },
        dt.datetime.fromtimestamp(snap.now, dt.UTC),
    )
    status: dict[str, Any] = {
        "replicas": out.active,
        "readyReplicas": out.ready,
        "selector": warm_pool_selector(pool["metadata"]["name"]),
        "conditions": conditions,
    }
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def transition_event(old_status: Obj, new_status: Obj) -> tuple[str, str, str] | None:
    """(type, reason, note) when the pool starts or stops being able to progress."""
    stuck = (REASON_TEMPLATE_NOT_FOUND, REASON_TEMPLATE_ERROR, REASON_BLOCKED, REASON_CREATE_FAILED)
    old = find_condition(old_status.get("conditions"), "Ready") or {}
    new = find_condition(new_status.get("conditions"), "Ready") or {}
    was, now = old.get("reason") in stuck, new.get("reason") in stuck
    if now and (not was or old.get("reason") != new.get("reason")):
        return ("Warning", EVENT_NOT_PROGRESSING, str(new.get("message", "")))
    if was and not now:
        return ("Normal", EVENT_PROGRESSING, str(new.get("message", "")))
    return None
