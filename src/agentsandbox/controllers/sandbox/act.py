"""The Sandbox act step: :class:`SandboxWriter`, the writes that carry out one pass's plan.

Writes: creates with field manager ``sandbox-controller``; metadata changes as JSON merge
patches (an adoption carries the resourceVersion it was decided on, so it cannot overwrite a
concurrent owner change); deletes with a UID precondition. The status is written as a JSON merge
patch of ``/status`` holding only the fields that changed: this controller is the only writer of
a Sandbox's status and never runs one key twice at once, so a stale read cannot lose someone
else's write, and a stale cache is corrected by the pass our own write's watch event triggers.
Unlike upstream's PUT, a status write never fails with 409 Conflict.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
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
from agentsandbox.kube.resources import PERSISTENTVOLUMECLAIMS, PODS, SERVICES, Resource
from agentsandbox.kube.store import KubeObject

P = TypeVar("P", ChildStep, PodPlan)

FIELD_MANAGER: Final = "sandbox-controller"


class SandboxReconcileError(ApiError):
    """The child errors of one pass, reported together; the key is retried with backoff.

    An :class:`ApiError` so the runtime logs it as one expected line (they are conflicts with
    the world, such as a pod nobody may adopt, not bugs).
    """

    def __init__(
        self, sandbox: str, errors: list[str], *, retry_within: float | None = None
    ) -> None:
        super().__init__(0, "ReconcilerError", f"sandbox {sandbox}: " + "; ".join(errors))
        self.errors = errors
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

    def __init__(self, client: Client, recorder: EventRecorder | None) -> None:
        self.client = client
        self.recorder = recorder
        self.created_pods = CreatedPods()
        self.status_memory = StatusMemory()

    async def apply(
        self,
        resource: Resource,
        namespace: str,
        planned: P,
        step_of: Callable[[P], ChildStep],
        replan: Callable[[KubeObject], P],
        *,
        retried: bool = False,
    ) -> tuple[P, KubeObject | None, str | None]:
        """Do one child step; return (the plan done, the child it leaves, failure message).

        A create answered ``AlreadyExists`` reads the object from the API and re-plans the step
        with it, once: the object exists but our label-scoped cache does not show it.
        """
        step = step_of(planned)
        if step.error:
            return planned, None, None
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
            return planned, _as_object(step.kept), step.wrap + error_message(err)

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
    "SandboxReconcileError",
    "SandboxWriter",
    "error_message",
    "pod_step",
    "same_step",
]
