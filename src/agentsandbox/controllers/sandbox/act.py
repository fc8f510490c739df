"""The Sandbox act step: :class:`SandboxWriter`, the writes that carry out one pass's plan.

Writes: creates with field manager ``sandbox-controller``; metadata changes as JSON merge
patches (an adoption carries the resourceVersion it was decided on, so it cannot overwrite a
concurrent owner change); deletes with a UID precondition. The status is written as a JSON merge
patch of ``/status`` holding only the fields that changed: this controller is the only writer of
a Sandbox's status and never runs one key twice at once, so a stale read cannot lose someone
else's write, and a stale cache is corrected by the pass our own write's watch event triggers.
Unlike upstream's PUT, a status write never fails with 409 Conflict.

``--sandbox-write-behind-window`` (:class:`WriteBehind`): with a window, the one write that the
next pass would compute again from the caches, the repair of an owned pod's drifted labels and
annotations, may wait up to the window (1 s at most) so that the drifts of that time reach the
pod as one patch. Nothing else waits: creates, deletes, adoptions (owner references), the
Sandbox's pod-name annotation and its status are written in the pass that decides them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from agentsandbox.api import keys
from agentsandbox.api.resources import SANDBOXES
from agentsandbox.controllers.sandbox.memory import CreatedPods, StatusMemory
from agentsandbox.controllers.sandbox.status import error_events, status_patch
from agentsandbox.controllers.sandbox.types import (
    MIN_EXPIRY_REQUEUE,
    Action,
    ChildStep,
    Event,
    ExpiryPlan,
    PodPlan,
    Snapshot,
)
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import AlreadyExists, ApiError, KubeError, NotFound
from agentsandbox.kube.events import EventRecorder
from agentsandbox.kube.reconcile import is_terminal
from agentsandbox.kube.resources import PERSISTENTVOLUMECLAIMS, PODS, SERVICES, Resource
from agentsandbox.kube.store import KubeObject

P = TypeVar("P", ChildStep, PodPlan)

FIELD_MANAGER: Final = "sandbox-controller"
#: The longest a pod's label/annotation repair waits, whatever the window (upstream's bound):
#: on a claim's adoption it is the patch that takes the warm pool's safe-to-evict annotation off
#: the pod, which must not stay on it for long.
POD_METADATA_FLUSH_BOUND: Final = 1.0


class WriteBehind:
    """When each Sandbox's pending pod metadata repair was first put off, and nothing else.

    No patch is kept: the pass that finds the repair due computes it again from the caches, so
    it writes what an undeferred pass would have written then, and a restart loses nothing but
    the start of a window of at most :data:`POD_METADATA_FLUSH_BOUND`. The window starts when a
    pass first puts a repair off and is not re-armed by later passes (which would starve the
    write under a stream of events); it ends when a pass writes the repair or finds none.
    ``clock`` is monotonic seconds; tests pass a fake one.
    """

    def __init__(self, window: float = 0.0, clock: Callable[[], float] = time.monotonic) -> None:
        if window < 0:
            raise ValueError("the write-behind window must not be negative")
        self.window = min(window, POD_METADATA_FLUSH_BOUND)
        self._clock = clock
        self._first: dict[tuple[str, str], float] = {}

    @property
    def enabled(self) -> bool:
        return self.window > 0

    def left(self, key: tuple[str, str]) -> float:
        """Seconds until the repair of ``key`` is due (0: write it now); the first call starts
        the window."""
        now = self._clock()
        first = self._first.setdefault(key, now)
        return max(0.0, first + self.window - now)

    def clear(self, key: tuple[str, str]) -> None:
        self._first.pop(key, None)

    def pending(self) -> int:
        return len(self._first)


@dataclass
class Deferral:
    """One pass's use of :class:`WriteBehind` for one Sandbox: ``wait`` is set (seconds) when
    the pass put its pod's metadata repair off, so that the pass asks to run again by then."""

    write_behind: WriteBehind
    key: tuple[str, str]
    wait: float | None = None

    def holds(self, step: ChildStep) -> bool:
        """Whether ``step`` is put off: a repair of the pod's labels or annotations whose window
        is still open."""
        if not is_metadata_repair(step):
            return False
        left = self.write_behind.left(self.key)
        if left <= 0:
            return False
        self.wait = left if self.wait is None else min(self.wait, left)
        return True

    def settle(self) -> None:
        """End of a pass that succeeded: a pass that put nothing off ends the window."""
        if self.wait is None:
            self.write_behind.clear(self.key)


def is_metadata_repair(step: ChildStep) -> bool:
    """A patch of nothing but labels and annotations: an owned child's metadata sync. An
    adoption also sets owner references (and carries a resourceVersion), so it is not one."""
    if step.action is not Action.PATCH or not step.body:
        return False
    meta = step.body.get("metadata")
    return (
        set(step.body) == {"metadata"}
        and isinstance(meta, Mapping)
        and bool(meta)
        and set(meta) <= {"labels", "annotations"}
    )


class Failure(str):
    """A child write's failure message that remembers whether no retry can mend it (a create
    refused because the namespace is being deleted; see ``kube.reconcile.is_terminal``)."""

    terminal: bool = False

    @classmethod
    def of(cls, text: str, err: BaseException) -> Failure:
        failure = cls(text)
        failure.terminal = is_terminal(err)
        return failure


class SandboxReconcileError(ApiError):
    """The child errors of one pass, reported together; the key is retried with backoff,
    unless every one of them is a :class:`Failure` no retry can mend (then it is terminal: the
    Sandbox's next event brings it back).

    An :class:`ApiError` so the runtime logs it as one expected line (they are conflicts with
    the world, such as a pod nobody may adopt, not bugs).
    """

    def __init__(
        self, sandbox: str, errors: list[str], *, retry_within: float | None = None
    ) -> None:
        super().__init__(0, "ReconcilerError", f"sandbox {sandbox}: " + "; ".join(errors))
        self.errors = errors
        self.terminal = bool(errors) and all(getattr(e, "terminal", False) for e in errors)
        #: The latest the retry may come (seconds), whatever the backoff: the time left to the
        #: Sandbox's shutdownTime (see :data:`agentsandbox.kube.controller.RETRY_WITHIN`).
        self.retry_within = retry_within

    def __str__(self) -> str:
        return self.message


def error_message(err: BaseException) -> str:
    """The server's own text for API errors (what Go's ``err.Error()`` shows), else str()."""
    if isinstance(err, ApiError):
        return err.message
    return str(err)


class SandboxWriter:
    """Writes a Sandbox's children, its pod-name annotation, its status and its Events.

    It keeps what its own writes tell it that the caches may not show yet: the pods it created
    (:attr:`created_pods`) and the status it last wrote (:attr:`status_memory`).
    """

    def __init__(
        self,
        client: Client,
        recorder: EventRecorder | None,
        write_behind: WriteBehind | None = None,
    ) -> None:
        self.client = client
        self.recorder = recorder
        self.created_pods = CreatedPods()
        self.status_memory = StatusMemory()
        self.write_behind = write_behind or WriteBehind()

    def deferral(self, namespace: str, name: str) -> Deferral | None:
        """This pass's :class:`Deferral` for the Sandbox; None when the window is 0."""
        if not self.write_behind.enabled:
            return None
        return Deferral(self.write_behind, (namespace, name))

    async def apply(
        self,
        resource: Resource,
        namespace: str,
        planned: P,
        step_of: Callable[[P], ChildStep],
        replan: Callable[[KubeObject], P],
        *,
        retried: bool = False,
        deferral: Deferral | None = None,
    ) -> tuple[P, KubeObject | None, str | None]:
        """Do one child step; return (the plan done, the child it leaves, failure message).

        A create answered ``AlreadyExists`` reads the object from the API and re-plans the step
        with it, once: the object exists but our label-scoped cache does not show it.
        ``deferral``: a metadata repair it holds is not written; the pass goes on with the child
        as the repair would leave it (what the pass reports does not depend on labels).
        """
        step = step_of(planned)
        if step.error:
            return planned, None, None
        if deferral is not None and deferral.holds(step):
            return planned, _as_object(step.result), None
        get_wrap = _GET_WRAPS.get(resource.kind, "")
        try:
            if step.action is Action.CREATE:
                assert step.body is not None
                created = await self.client.create(
                    resource, step.body, namespace, field_manager=FIELD_MANAGER
                )
                if resource is PODS:
                    self.created_pods.remember(namespace, step.name, created)
                return planned, created, None
            if step.action is Action.PATCH:
                patched = await self.client.patch(resource, step.name, step.body, namespace)
                return planned, patched, None
            if step.action is Action.DELETE:
                if resource is PODS:  # gone as far as we know: never stand in for it again
                    self.created_pods.forget(namespace, step.name)
                with contextlib.suppress(NotFound):
                    await self.client.delete(resource, step.name, namespace, uid=step.uid)
                return planned, None, None
            return planned, _as_object(step.result), None
        except AlreadyExists as err:
            if retried:
                return planned, None, error_message(err)
            try:
                live = await self.client.get(resource, step.name, namespace)
            except KubeError as get_err:
                return planned, None, get_wrap + error_message(get_err)
            return await self.apply(
                resource, namespace, replan(live), step_of, replan, retried=True
            )
        except KubeError as err:
            # a failed metadata sync leaves our child as it was: still report it; a child we
            # failed to create, delete or adopt is reported as none
            return planned, _as_object(step.kept), Failure.of(step.wrap + error_message(err), err)

    async def ensure_pod_name_annotation(
        self, sandbox: Mapping[str, Any], desired: str | None
    ) -> str | None:
        meta = sandbox["metadata"]
        current = (meta.get("annotations") or {}).get(keys.ANNOTATION_POD_NAME) or None
        if current == desired:
            return None
        body = {"metadata": {"annotations": {keys.ANNOTATION_POD_NAME: desired}}}
        try:
            await self.client.patch(SANDBOXES, meta["name"], body, meta["namespace"])
        except NotFound:
            return None
        except KubeError as err:
            verb = "set" if desired else "clear"
            return f"failed to {verb} pod name annotation: {error_message(err)}"
        return None

    async def expire(
        self, snap: Snapshot, expiry: ExpiryPlan, status: Mapping[str, Any] | None
    ) -> None:
        """The second expiry pass: delete the owned pod and Service, then the Sandbox (Delete)
        or reset its status (Retain). A failure is retried within ``MIN_EXPIRY_REQUEUE``
        however long the backoff has grown: the expiry is due and not done yet."""
        sandbox = snap.sandbox
        meta = sandbox["metadata"]
        ns = meta["namespace"]
        errors: list[str] = []
        for resource, step in ((PODS, expiry.delete_pod), (SERVICES, expiry.delete_service)):
            if step is None:
                continue
            _, _, failure = await self.apply(resource, ns, step, same_step, _keep(step))
            if failure is not None:
                errors.append(failure)
        if expiry.delete_sandbox:
            try:
                await self.client.delete(SANDBOXES, meta["name"], ns, uid=meta.get("uid"))
            except NotFound:
                pass
            except KubeError as err:
                errors.append(f"failed to delete the expired sandbox: {error_message(err)}")
                self.record(sandbox, error_events([(e, False) for e in errors]))
                raise SandboxReconcileError(
                    f"{ns}/{meta['name']}", errors, retry_within=MIN_EXPIRY_REQUEUE
                ) from err
            return
        if errors:
            self.record(sandbox, error_events([(e, False) for e in errors]))
            raise SandboxReconcileError(
                f"{ns}/{meta['name']}", errors, retry_within=MIN_EXPIRY_REQUEUE
            )
        await self.write_status(sandbox, status or {})

    async def write_status(self, sandbox: Mapping[str, Any], status: Mapping[str, Any]) -> None:
        patch = status_patch(sandbox.get("status") or {}, status)
        if patch is None:
            return
        meta = sandbox["metadata"]
        self.status_memory.forget(sandbox)  # whatever happens now, it is out of date
        with contextlib.suppress(NotFound):  # deleted meanwhile
            answer = await self.client.patch(
                SANDBOXES, meta["name"], patch, meta["namespace"], subresource="status"
            )
            self.status_memory.remember(sandbox, answer)

    def record(self, sandbox: Mapping[str, Any], events: list[Event] | tuple[Event, ...]) -> None:
        if self.recorder is None:
            return
        for event in events:
            self.recorder.event(sandbox, event.type, event.reason, event.note, action=event.action)


#: Upstream's wraps of a failed GET after ``AlreadyExists``, by kind.
_GET_WRAPS: Final = {
    PODS.kind: "pod get failed: ",
    SERVICES.kind: "service get failed: ",
    PERSISTENTVOLUMECLAIMS.kind: "PVC Get Failed: ",
}


def _as_object(value: Mapping[str, Any] | None) -> KubeObject | None:
    return dict(value) if value is not None else None


def same_step(step: ChildStep) -> ChildStep:
    """The ``step_of`` of :meth:`SandboxWriter.apply` for a plan that is a child step."""
    return step


def pod_step(pod_plan: PodPlan) -> ChildStep:
    """The ``step_of`` of :meth:`SandboxWriter.apply` for the pod's plan."""
    return pod_plan.step


def _keep(step: ChildStep) -> Callable[[KubeObject], ChildStep]:
    return lambda _live: step


__all__ = [
    "FIELD_MANAGER",
    "POD_METADATA_FLUSH_BOUND",
    "Deferral",
    "SandboxReconcileError",
    "SandboxWriter",
    "WriteBehind",
    "error_message",
    "is_metadata_repair",
    "pod_step",
    "same_step",
]
