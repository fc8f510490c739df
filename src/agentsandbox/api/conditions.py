"""Status conditions: the types, reasons and messages of our kinds, and helpers with the
semantics of apimachinery's ``meta.SetStatusCondition``.

The helpers never mutate their input: they return a new list (and whether anything changed),
because objects from informer caches are shared. The clock is a parameter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from agentsandbox.api.timefmt import format_rfc3339

__all__ = [
    "find_condition",
    "is_condition_true",
    "is_sandbox_ready",
    "make_condition",
    "remove_status_condition",
    "set_status_condition",
]

Condition = dict[str, Any]

TRUE: Final = "True"
FALSE: Final = "False"
UNKNOWN: Final = "Unknown"

# --- Sandbox ----------------------------------------------------------------------------------
# (docs/design/sandbox.md, "The Ready condition" through "The PodScheduled condition")
CONDITION_READY: Final = "Ready"
CONDITION_SUSPENDED: Final = "Suspended"
CONDITION_FINISHED: Final = "Finished"
CONDITION_POD_SCHEDULED: Final = "PodScheduled"

REASON_DEPENDENCIES_READY: Final = "DependenciesReady"
REASON_DEPENDENCIES_NOT_READY: Final = "DependenciesNotReady"
REASON_SANDBOX_SUSPENDED: Final = "SandboxSuspended"
REASON_RECONCILER_ERROR: Final = "ReconcilerError"
REASON_SANDBOX_EXPIRED: Final = "SandboxExpired"
REASON_NOT_SUSPENDED: Final = "NotSuspended"
REASON_POD_TERMINATING: Final = "PodTerminating"
REASON_POD_NOT_OWNED: Final = "PodNotOwned"
REASON_POD_STATE_UNKNOWN: Final = "PodStateUnknown"
REASON_POD_TERMINATED: Final = "PodTerminated"
REASON_POD_SCHEDULED: Final = "PodScheduled"
REASON_POD_SCHEDULING_UNKNOWN: Final = "PodSchedulingUnknown"
REASON_POD_SUCCEEDED: Final = "PodSucceeded"
REASON_POD_FAILED: Final = "PodFailed"

MESSAGE_POD_READY: Final = "Pod is Ready"
MESSAGE_SERVICE_EXISTS_SUFFIX: Final = "; Service Exists"
MESSAGE_SANDBOX_SUSPENDED: Final = "Sandbox is suspended"
MESSAGE_SANDBOX_SUSPENDING: Final = "Sandbox is suspending"
MESSAGE_ERROR_PREFIX: Final = "Error seen: "
MESSAGE_SANDBOX_EXPIRED: Final = "Sandbox has expired"
MESSAGE_NOT_SUSPENDED: Final = "Sandbox is not suspended"
MESSAGE_POD_TERMINATING: Final = "Pod is terminating. Sandbox is suspending"
MESSAGE_POD_NOT_OWNED: Final = "Refused to delete pod because it is not owned by this sandbox"
MESSAGE_POD_STATE_UNKNOWN: Final = "Pod state is unknown. Sandbox suspension cannot be confirmed"
MESSAGE_POD_TERMINATED: Final = "Pod has been terminated. Sandbox is suspended"
MESSAGE_POD_SCHEDULING_UNKNOWN: Final = "Pod state is unknown. Pod scheduling cannot be determined"
MESSAGE_POD_SCHEDULING_NOT_REPORTED: Final = "Pod has not reported a PodScheduled condition yet"
MESSAGE_POD_SUCCEEDED: Final = "Pod completed successfully"
MESSAGE_POD_FAILED: Final = "Pod failed"

# --- SandboxClaim (docs/design/claim.md, "The claim's status") ---------------------------------
REASON_CLAIM_EXPIRED: Final = "ClaimExpired"


def make_condition(
    type_: str,
    status: str,
    reason: str,
    message: str,
    observed_generation: int | None = None,
) -> Condition:
    """A condition without ``lastTransitionTime`` (``set_status_condition`` stamps it)."""
    cond: Condition = {"type": type_, "status": status, "reason": reason, "message": message}
    if observed_generation is not None:
        cond["observedGeneration"] = observed_generation
    return cond


def find_condition(
    conditions: Sequence[Mapping[str, Any]] | None, type_: str
) -> Mapping[str, Any] | None:
    for cond in conditions or ():
        if cond.get("type") == type_:
            return cond
    return None


def is_condition_true(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> bool:
    cond = find_condition(conditions, type_)
    return cond is not None and cond.get("status") == TRUE


def is_sandbox_ready(sandbox: Mapping[str, Any]) -> bool:
    """``isSandboxReady``: the Sandbox has a ``Ready`` condition with status ``"True"``."""
    status = sandbox.get("status") or {}
    return is_condition_true(status.get("conditions"), CONDITION_READY)


def set_status_condition(
    conditions: Sequence[Mapping[str, Any]] | None,
    new: Mapping[str, Any],
    now: datetime,
) -> tuple[list[Condition], bool]:
    """Upsert ``new`` by type; return the new list and whether anything changed.

    A new type is appended with ``lastTransitionTime`` = the given one, or ``now``. For an
    existing type, ``lastTransitionTime`` moves only when ``status`` changes (to the given time,
    or ``now``); reason, message and observedGeneration are always taken from ``new``.
    """
    result = [dict(c) for c in conditions or ()]
    given_time = new.get("lastTransitionTime") or format_rfc3339(now)
    for cond in result:
        if cond.get("type") != new["type"]:
            continue
        changed = False
        if cond.get("status") != new.get("status"):
            cond["status"] = new.get("status")
            cond["lastTransitionTime"] = given_time
            changed = True
        for key in ("reason", "message"):
            if cond.get(key, "") != new.get(key, ""):
                cond[key] = new.get(key, "")
                changed = True
        if cond.get("observedGeneration", 0) != new.get("observedGeneration", 0):
            if new.get("observedGeneration"):
                cond["observedGeneration"] = new["observedGeneration"]
            else:
                cond.pop("observedGeneration", None)
            changed = True
        return result, changed
    added = dict(new)
    added["lastTransitionTime"] = given_time
    result.append(added)
    return result, True


def remove_status_condition(
    conditions: Sequence[Mapping[str, Any]] | None, type_: str
) -> tuple[list[Condition], bool]:
    """Drop the condition of ``type_``; return the new list and whether it was there."""
    kept = [dict(c) for c in conditions or () if c.get("type") != type_]
    return kept, len(kept) != len(conditions or ())
