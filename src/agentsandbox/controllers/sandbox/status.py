"""Sandbox: what the decision step reports (pure): status, conditions and events.

The status fields, the Suspended / Finished / PodScheduled / Ready conditions with their exact
reasons and messages (docs/design/sandbox.md, "Status fields" through "Suspend and resume"), the
re-check of expiry at the end of an active pass, the merge patch of the status, and the Warnings
for a pass's errors. The status is a function of
what the child steps *returned*, so the act step recomputes it from the real outcome of its
writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from agentsandbox.api.conditions import (
    CONDITION_FINISHED,
    CONDITION_POD_SCHEDULED,
    CONDITION_READY,
    CONDITION_SUSPENDED,
    FALSE,
    MESSAGE_ERROR_PREFIX,
    MESSAGE_NOT_SUSPENDED,
    MESSAGE_POD_FAILED,
    MESSAGE_POD_NOT_OWNED,
    MESSAGE_POD_READY,
    MESSAGE_POD_SCHEDULING_NOT_REPORTED,
    MESSAGE_POD_SCHEDULING_UNKNOWN,
    MESSAGE_POD_STATE_UNKNOWN,
    MESSAGE_POD_SUCCEEDED,
    MESSAGE_POD_TERMINATED,
    MESSAGE_POD_TERMINATING,
    MESSAGE_SANDBOX_EXPIRED,
    MESSAGE_SANDBOX_SUSPENDED,
    MESSAGE_SANDBOX_SUSPENDING,
    MESSAGE_SERVICE_EXISTS_SUFFIX,
    REASON_DEPENDENCIES_NOT_READY,
    REASON_DEPENDENCIES_READY,
    REASON_NOT_SUSPENDED,
    REASON_POD_FAILED,
    REASON_POD_NOT_OWNED,
    REASON_POD_SCHEDULED,
    REASON_POD_SCHEDULING_UNKNOWN,
    REASON_POD_STATE_UNKNOWN,
    REASON_POD_SUCCEEDED,
    REASON_POD_TERMINATED,
    REASON_POD_TERMINATING,
    REASON_RECONCILER_ERROR,
    REASON_SANDBOX_EXPIRED,
    REASON_SANDBOX_SUSPENDED,
    TRUE,
    UNKNOWN,
    Condition,
    find_condition,
    make_condition,
    remove_status_condition,
    set_status_condition,
)
from agentsandbox.api.equality import semantic_equal
from agentsandbox.api.hashing import sandbox_selector
from agentsandbox.api.owners import Ownership, ownership
from agentsandbox.controllers.sandbox.children import _resolve_pod
from agentsandbox.controllers.sandbox.types import (
    EVENT_ADOPTION_REFUSED,
    EVENT_EXPIRED,
    EVENT_RECONCILER_ERROR,
    IMMEDIATE_REQUEUE,
    MIN_EXPIRY_REQUEUE,
    NORMAL,
    SHUTDOWN_POLICY_DELETE,
    SHUTDOWN_POLICY_RETAIN,
    WARNING,
    Event,
    Finish,
    Obj,
    Snapshot,
    _meta,
    _spec,
    _status,
    replicas_of,
    shutdown_time,
)

__all__ = [
    "MESSAGE_POD_DOES_NOT_EXIST",
    "MESSAGE_POD_EXISTS_WITH_PHASE",
    "MESSAGE_POD_READY_NO_IPS",
    "MESSAGE_POD_RUNNING_NOT_READY",
    "MESSAGE_SERVICE_MISSING_SUFFIX",
    "PHASE_FAILED",
    "PHASE_RUNNING",
    "PHASE_SUCCEEDED",
    "compute_status",
    "error_events",
    "finish",
    "is_first_pending_status",
    "pod_scheduled_condition",
    "ready_condition",
    "status_patch",
    "suspended_condition",
]

PHASE_RUNNING: Final = "Running"
PHASE_SUCCEEDED: Final = "Succeeded"
PHASE_FAILED: Final = "Failed"
#: The pod's own condition that the Sandbox's PodScheduled copies.
POD_CONDITION_SCHEDULED: Final = "PodScheduled"

MESSAGE_POD_DOES_NOT_EXIST: Final = "Pod does not exist"
MESSAGE_POD_EXISTS_WITH_PHASE: Final = "Pod exists with phase: "
MESSAGE_POD_RUNNING_NOT_READY: Final = "Pod is Running but not Ready"
MESSAGE_POD_READY_NO_IPS: Final = "Pod is Ready but has no podIPs yet"
MESSAGE_SERVICE_MISSING_SUFFIX: Final = "; Service does not exist"


# ---------------------------------------------------------------------------------- events
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
    """The Ready condition, in upstream's priority order (docs/design/sandbox.md, "The Ready
    condition")."""
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


def suspended_condition(
    replicas: int,
    pod: Obj | None,
    owned: bool,
    pod_unknown: bool,
    generation: int | None = None,
) -> Condition:
    """The Suspended condition, present on every active pass (docs/design/sandbox.md, "The
    Suspended condition"). ``pod``: the pod holding the Sandbox's pod name, ``owned``: whether it
    is ours, ``pod_unknown``: the pod could not be read or written, so whether it exists is
    unknown."""
    if replicas != 0:
        return make_condition(
            CONDITION_SUSPENDED, FALSE, REASON_NOT_SUSPENDED, MESSAGE_NOT_SUSPENDED, generation
        )
    if pod is None and pod_unknown:
        return make_condition(
            CONDITION_SUSPENDED,
            UNKNOWN,
            REASON_POD_STATE_UNKNOWN,
            MESSAGE_POD_STATE_UNKNOWN,
            generation,
        )
    if pod is None:
        return make_condition(
            CONDITION_SUSPENDED, TRUE, REASON_POD_TERMINATED, MESSAGE_POD_TERMINATED, generation
        )
    if not owned:
        return make_condition(
            CONDITION_SUSPENDED, FALSE, REASON_POD_NOT_OWNED, MESSAGE_POD_NOT_OWNED, generation
        )
    return make_condition(
        CONDITION_SUSPENDED, FALSE, REASON_POD_TERMINATING, MESSAGE_POD_TERMINATING, generation
    )


def pod_scheduled_condition(
    pod: Obj | None, owned: bool, pod_unknown: bool, generation: int | None = None
) -> Condition | None:
    """The PodScheduled condition: the pod's own, copied (docs/design/sandbox.md, "The
    PodScheduled condition"); None (removed) when there is no pod of ours."""
    if pod is None and pod_unknown:
        return make_condition(
            CONDITION_POD_SCHEDULED,
            UNKNOWN,
            REASON_POD_SCHEDULING_UNKNOWN,
            MESSAGE_POD_SCHEDULING_UNKNOWN,
            generation,
        )
    if pod is None or not owned:
        return None
    scheduled = find_condition(_status(pod).get("conditions"), POD_CONDITION_SCHEDULED)
    if scheduled is None:
        return make_condition(
            CONDITION_POD_SCHEDULED,
            UNKNOWN,
            REASON_POD_SCHEDULING_UNKNOWN,
            MESSAGE_POD_SCHEDULING_NOT_REPORTED,
            generation,
        )
    status = str(scheduled.get("status") or UNKNOWN)
    reason = str(scheduled.get("reason") or "")
    if not reason:  # the scheduler gives none on success; a condition needs one
        reason = REASON_POD_SCHEDULED if status == TRUE else REASON_POD_SCHEDULING_UNKNOWN
    message = str(scheduled.get("message") or "")
    return make_condition(CONDITION_POD_SCHEDULED, status, reason, message, generation)


def _finished_condition(pod: Obj | None, owned: bool, generation: int | None) -> Condition | None:
    phase = _status(pod).get("phase") if pod is not None and owned else None
    if phase == PHASE_SUCCEEDED:
        return make_condition(
            CONDITION_FINISHED, TRUE, REASON_POD_SUCCEEDED, MESSAGE_POD_SUCCEEDED, generation
        )
    if phase == PHASE_FAILED:
        return make_condition(
            CONDITION_FINISHED, TRUE, REASON_POD_FAILED, MESSAGE_POD_FAILED, generation
        )
    return None


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


def _upsert(
    conditions: list[Condition], type_: str, new: Condition | None, now: datetime
) -> list[Condition]:
    if new is None:
        return remove_status_condition(conditions, type_)[0]
    return set_status_condition(conditions, new, now)[0]


def compute_status(
    snap: Snapshot,
    pod: Obj | None,
    service: Obj | None,
    errors: Sequence[str],
    now: datetime,
    *,
    pod_failed: bool = False,
) -> dict[str, Any]:
    """The status after an active pass, from what the child steps returned
    (docs/design/sandbox.md, "Status fields" through "Suspend and resume").

    ``pod`` is the pod the pod step left, ``pod_failed`` whether that step failed (a pod it
    reports none for is then of unknown state). While the desired count is 0 the pod step leaves
    no pod whatever it did; the status then reports the pod that still holds the Sandbox's pod
    name, as it was observed: ours being deleted, or one that is not ours and is left alone.
    Whether it exists is unknown when its lookup failed (``snap.pod_error``).
    """
    sandbox = snap.sandbox
    meta = _meta(sandbox)
    old = _status(sandbox)
    generation = _generation(sandbox)
    replicas = replicas_of(sandbox)
    if replicas == 0:
        pod = _resolve_pod(snap)[1]
        pod_failed = snap.pod_error is not None
    owned = pod is not None and ownership(pod, str(meta.get("uid") or "")) is Ownership.OWNED
    status: dict[str, Any] = dict(old)

    if pod is not None:
        status["replicas"] = replicas
        status["selector"] = sandbox_selector(meta["name"])
    else:
        status["replicas"] = 0  # selector is kept (quirk reproduced)
    if owned:
        assert pod is not None
        ips = [p.get("ip") for p in _status(pod).get("podIPs") or () if p.get("ip")]
        status["podIPs"] = ips or None
        status["nodeName"] = _spec(pod).get("nodeName") or None
    else:
        status["podIPs"] = None
        status["nodeName"] = None

    if service is not None:
        name = _meta(service).get("name") or meta["name"]
        status["service"] = name
        status["serviceFQDN"] = f"{name}.{meta.get('namespace')}.svc.{snap.cluster_domain}"
    else:
        status["service"] = None
        status["serviceFQDN"] = None

    desired_service = _spec(sandbox).get("service")
    required = bool(desired_service) if desired_service is not None else service is not None
    unknown = pod_failed and pod is None
    # upstream's order: a condition new to the list is appended, an existing one keeps its place
    conditions: list[Condition] = [dict(c) for c in old.get("conditions") or ()]
    suspended = suspended_condition(replicas, pod, owned, unknown, generation)
    conditions = _upsert(conditions, CONDITION_SUSPENDED, suspended, now)
    finished = _finished_condition(pod, owned, generation)
    conditions = _upsert(conditions, CONDITION_FINISHED, finished, now)
    scheduled = pod_scheduled_condition(pod, owned, unknown, generation)
    conditions = _upsert(conditions, CONDITION_POD_SCHEDULED, scheduled, now)
    ready = ready_condition(replicas, pod, required, service is not None, errors, generation)
    conditions = _upsert(conditions, CONDITION_READY, ready, now)
    status["conditions"] = conditions
    return _compact(status)


def _with_expired_ready(status: Mapping[str, Any], sandbox: Obj, now: datetime) -> dict[str, Any]:
    """Ready=False/SandboxExpired; PodScheduled goes (the pod is being torn down and no later
    pass mirrors it), the other conditions stay."""
    out = dict(status)
    conditions, _ = set_status_condition(
        status.get("conditions"), _expired_condition(_generation(sandbox)), now
    )
    out["conditions"], _ = remove_status_condition(conditions, CONDITION_POD_SCHEDULED)
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
    """End of an active pass: re-check expiry with a fresh ``now`` (docs/design/sandbox.md,
    "Expiry in two passes")."""
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
    deviation, docs/design/sandbox.md, "Writes").
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


#: The conditions upstream v1.0.1 puts on every Sandbox that our earlier release did not write.
V101_CONDITIONS: Final = (CONDITION_SUSPENDED, POD_CONDITION_SCHEDULED)


def is_migration_only(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether writing ``new`` over ``old`` only brings an earlier release's status up to date.

    True when ``old`` lacks one of v1.0.1's ``Suspended`` / ``PodScheduled`` conditions and the
    two statuses are equal once those missing conditions and ``nodeName`` are left out: the write
    adds what the earlier release did not write and changes nothing an observer already relies
    on. Such writes are paced (``memory.MigrationPace``); every other write is not.
    """
    have = {c.get("type") for c in old.get("conditions") or ()}
    missing = {t for t in V101_CONDITIONS if t not in have}
    if not missing or find_condition(old.get("conditions"), CONDITION_READY) is None:
        return False

    def without(status: Mapping[str, Any]) -> dict[str, Any]:
        out = _compact(status)
        out.pop("nodeName", None)
        kept = [c for c in out.get("conditions") or () if c.get("type") not in missing]
        out["conditions"] = kept
        return out

    return semantic_equal(without(old), without(new))
