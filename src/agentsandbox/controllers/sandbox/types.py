"""Sandbox: the vocabulary of the decision step (pure; no I/O, no clock reads).

What one pass sees (:class:`Snapshot`) and decides (:class:`Plan`, one :class:`ChildStep` per
child), the constants upstream fixes (requeues, shutdown policies, Events, error wraps) and the
accessors every part of the step reads a Sandbox with. :mod:`.plan` decides a pass from
these with :mod:`.children` (Pod, Service, PVCs) and :mod:`.status` (status, conditions, the
pass's events).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Final

from agentsandbox.api.timefmt import parse_rfc3339

__all__ = [
    "DEFAULT_CLUSTER_DOMAIN",
    "EVENT_ADOPTED",
    "EVENT_ADOPTION_REFUSED",
    "EVENT_EXPIRED",
    "EVENT_POD_CREATED",
    "EVENT_POD_DELETED",
    "EVENT_POD_RECREATED",
    "EVENT_RECONCILER_ERROR",
    "IMMEDIATE_REQUEUE",
    "MIN_EXPIRY_REQUEUE",
    "NORMAL",
    "OPERATING_MODE_RUNNING",
    "OPERATING_MODE_SUSPENDED",
    "SHUTDOWN_POLICY_DELETE",
    "SHUTDOWN_POLICY_RETAIN",
    "WARNING",
    "WRAP_POD_DELETE",
    "WRAP_POD_GET",
    "WRAP_POD_UPDATE",
    "WRAP_PVC_ADOPT",
    "WRAP_SERVICE_ADOPT",
    "WRAP_SERVICE_DELETE",
    "WRAP_SERVICE_PATCH",
    "Action",
    "ChildStep",
    "Event",
    "ExpiryPlan",
    "Finish",
    "Obj",
    "Phase",
    "Plan",
    "PodPlan",
    "Snapshot",
    "is_terminating",
    "replicas_of",
    "shutdown_time",
]

Obj = Mapping[str, Any]

#: ``RequeueAfter`` after marking a Sandbox expired: the cleanup pass runs at once.
IMMEDIATE_REQUEUE: Final = 0.001
#: Shortest ``RequeueAfter`` while a shutdownTime is pending.
MIN_EXPIRY_REQUEUE: Final = 2.0
DEFAULT_CLUSTER_DOMAIN: Final = "cluster.local"

SHUTDOWN_POLICY_DELETE: Final = "Delete"
SHUTDOWN_POLICY_RETAIN: Final = "Retain"

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
WRAP_POD_GET: Final = "pod get failed: "
WRAP_SERVICE_DELETE: Final = "failed to delete service: "
WRAP_SERVICE_PATCH: Final = "failed to patch owned service: "
WRAP_SERVICE_ADOPT: Final = "failed to update service with owner reference: "
WRAP_PVC_ADOPT: Final = "failed to update PVC with owner reference: "


# ---------------------------------------------------------------------------------- types
class Phase(Enum):
    """Where a Sandbox is in its life, by ``spec.shutdownTime`` (docs/design/sandbox.md, "Expiry
    in two passes")."""

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
    ``pod_error`` is set when the pod was looked up in the API and the read failed (the error as
    the pass reports it): whether a pod exists is then unknown.
    """

    sandbox: Obj
    now: datetime
    pods: Mapping[str, Obj] = field(default_factory=dict)
    service: Obj | None = None
    pvcs: Mapping[str, Obj] = field(default_factory=dict)
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN
    pod_error: str | None = None


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
    """The second expiry pass: delete the owned pod and Service, maybe the Sandbox
    (docs/design/sandbox.md, "Expiry in two passes")."""

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
    mode wins). Unset, ``spec.replicas`` decides, and unset too means 1 (docs/design/sandbox.md,
    "The desired pod count"). So a sandbox suspended by upstream HEAD (``operatingMode:
    Suspended``, no replicas) stays suspended here.
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
