"""Sandbox: the decision step (pure). Snapshot in, plan out; no I/O, no clock reads.

Implements docs/design/sandbox.md rule by rule: the two-pass expiry ("Expiry in two passes"), the
children in upstream's order PVCs -> Pod -> Service ("The children, in order"), the status fields
("Status fields") and the Ready / Finished / Suspended / PodScheduled conditions with their exact
reasons and messages ("The Ready condition" through "The PodScheduled condition").

Every child decision is a small function of the snapshot, so that the act step can re-plan one
child when the API tells it more than the cache did (a create answered ``AlreadyExists``: the
object exists but is not in our label-scoped caches). The status is a function of what the child
steps *returned*, so the act step recomputes it from the real outcome of its writes.

The step is split by idea: :mod:`.types` (the Snapshot, Plan and ChildStep types, the
constants, the accessors), :mod:`.children` (builders and the per-child decisions) and
:mod:`.status` (status, conditions, events). This module holds the expiry phases and
:func:`plan`; each name is imported from the module that defines it.

Deliberate differences from upstream 35b9757f (each under its rule in docs/design/sandbox.md;
the list in "Upstream quirks, reproduced or fixed"):

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

from dataclasses import replace
from datetime import datetime
from typing import Any

from agentsandbox.api.conditions import CONDITION_READY, REASON_SANDBOX_EXPIRED, find_condition
from agentsandbox.api.owners import Ownership, ownership
from agentsandbox.controllers.sandbox.children import (
    _resolve_pod,
    plan_pod,
    plan_pvcs,
    plan_service,
)
from agentsandbox.controllers.sandbox.status import (
    _expiry_event,
    _with_expired_ready,
    compute_status,
    error_events,
    finish,
    status_patch,
)
from agentsandbox.controllers.sandbox.types import (
    IMMEDIATE_REQUEUE,
    SHUTDOWN_POLICY_DELETE,
    SHUTDOWN_POLICY_RETAIN,
    WRAP_POD_DELETE,
    WRAP_SERVICE_DELETE,
    Action,
    ChildStep,
    ExpiryPlan,
    Obj,
    Phase,
    Plan,
    Snapshot,
    _meta,
    _spec,
    _status,
    is_terminating,
    replicas_of,
    shutdown_time,
)

__all__ = [
    "expired_status",
    "expiry_phase",
    "plan",
    "plan_expiry",
    "pod_to_confirm",
    "with_pod",
    "with_pod_error",
    "with_pvc",
    "with_service",
]


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
    """Retain: only the conditions survive, with Ready=False/SandboxExpired
    (docs/design/sandbox.md, "Expiry in two passes")."""
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
    errors = [(s.error, s.refused) for s in (*pvcs, pod.step) if s.error]
    if snap.pod_error is not None:  # the pod's lookup, in the pod's place among the errors
        errors.append((snap.pod_error, False))
    if service.error:
        errors.append((service.error, service.refused))
    messages = [message for message, _ in errors]
    pod_failed = pod.step.error is not None and pod.step.result is None
    status = compute_status(
        snap, pod.step.result, service.result, messages, snap.now, pod_failed=pod_failed
    )
    done = finish(snap, status, snap.now)
    events = [s.event for s in (*pvcs, pod.step, service) if s.event is not None and not s.error]
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


def with_pod_error(snap: Snapshot, message: str) -> Snapshot:
    """The snapshot after looking the pod up failed: whether it exists is unknown."""
    return replace(snap, pod_error=message)


def pod_to_confirm(snap: Snapshot, decision: Plan) -> str | None:
    """The pod name to look up in the API before this pass reports the pod gone, or None.

    The caches hold only pods with the tracking label, so a pod that is not ours may hold the
    Sandbox's pod name unseen (in a running Sandbox the create's ``AlreadyExists`` reveals it).
    A suspended Sandbox creates nothing: before a pass writes a status that says its pod is
    gone (``Suspended=True``), the name is read from the API once (docs/design/sandbox.md, "The
    Suspended condition"). Passes that write nothing look nothing up.
    """
    if decision.phase is not Phase.ACTIVE or decision.status is None:
        return None
    if replicas_of(snap.sandbox) != 0 or snap.pod_error is not None:
        return None
    name, pod, _ = _resolve_pod(snap)
    if pod is not None or status_patch(_status(snap.sandbox), decision.status) is None:
        return None
    return name


def with_service(snap: Snapshot, service: Obj) -> Snapshot:
    return replace(snap, service=service)


def with_pvc(snap: Snapshot, pvc: Obj) -> Snapshot:
    return replace(snap, pvcs={**snap.pvcs, _meta(pvc)["name"]: pvc})
