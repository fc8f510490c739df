"""The Sandbox controller: observe (caches) -> decide (:mod:`.sandbox_plan`) -> act.

Wiring (core spec §2.10): ``For(Sandbox)`` with no predicate, and the Pods and Services that carry
the tracking label ``agents.x-k8s.io/sandbox-name-hash``, each mapped to its controlling Sandbox
(or, for an unowned child, to the Sandbox of the same name, so that labelling it adoptable takes
effect at once). Pods, Services and PVCs are read from shared informers scoped by that label; the
pod informer is the same one the warm pool controller uses.

The caches only hold children that carry the tracking label. A child without it (a user's pod
named like the Sandbox, say) shows up when our create is answered ``AlreadyExists``: the act step
then reads it from the API and re-plans that one child with it, which is how upstream reaches
its "existing pod" path too.

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
import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

from agentsandbox.api import keys
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.kinds import SANDBOX
from agentsandbox.api.owners import controller_of
from agentsandbox.api.resources import SANDBOXES
from agentsandbox.controllers.common.podcache import pod_informer
from agentsandbox.controllers.sandbox.children import plan_pod, plan_pvc, plan_service, pvc_name
from agentsandbox.controllers.sandbox.memory import FirstStatusHold, StatusMemory
from agentsandbox.controllers.sandbox.plan import plan, with_pod, with_pvc, with_service
from agentsandbox.controllers.sandbox.status import (
    compute_status,
    error_events,
    finish,
    status_patch,
)
from agentsandbox.controllers.sandbox.types import (
    DEFAULT_CLUSTER_DOMAIN,
    MIN_EXPIRY_REQUEUE,
    Action,
    ChildStep,
    Event,
    ExpiryPlan,
    Phase,
    Plan,
    PodPlan,
    Snapshot,
)
from agentsandbox.kube.builder import ControllerBuilder
from agentsandbox.kube.client import Client
from agentsandbox.kube.controller import Controller
from agentsandbox.kube.errors import AlreadyExists, ApiError, KubeError, NotFound
from agentsandbox.kube.events import EventRecorder
from agentsandbox.kube.handler import api_group
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.predicate import LabelSelectorPredicate
from agentsandbox.kube.reconcile import Request, Result
from agentsandbox.kube.resources import PERSISTENTVOLUMECLAIMS, PODS, SERVICES, Resource
from agentsandbox.kube.store import KubeObject

P = TypeVar("P", ChildStep, PodPlan)

log = logging.getLogger("agentsandbox.sandbox")
CREATED_POD_TTL = 10.0  # seconds a created pod may stay unseen by the cache before it is forgotten

CONTROLLER_NAME: Final = "sandbox"
#: Pod index: ``<namespace>/<tracking label value>``, to notice several pods for one Sandbox.
POD_HASH_INDEX: Final = "sandbox-name-hash"
FIELD_MANAGER: Final = "sandbox-controller"
EVENT_REPORTER: Final = "sandbox-controller"


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


def _message(err: BaseException) -> str:
    """The server's own text for API errors (what Go's ``err.Error()`` shows), else str()."""
    if isinstance(err, ApiError):
        return err.message
    return str(err)


def pod_hash_index(pod: KubeObject) -> list[str]:
    meta = pod.get("metadata") or {}
    value = (meta.get("labels") or {}).get(keys.LABEL_SANDBOX_NAME_HASH)
    return [f"{meta.get('namespace', '')}/{value}"] if value else []


def sandbox_for_child(obj: KubeObject) -> list[Request]:
    """A Pod/Service event -> its controlling Sandbox; an unowned child -> the Sandbox of the
    same name (the one that could adopt it)."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    ref = controller_of(obj)
    if ref is None:
        return [Request(namespace, meta["name"])] if meta.get("name") else []
    if ref.get("kind") != SANDBOX.kind or api_group(ref.get("apiVersion") or "") != SANDBOX.group:
        return []
    return [Request(namespace, ref["name"])] if ref.get("name") else []


class SandboxReconciler:
    """Turns each Sandbox into its Pod (+ PVCs, + headless Service) and reports status."""

    def __init__(
        self,
        client: Client,
        sandboxes: Informer,
        pods: Informer,
        services: Informer,
        pvcs: Informer,
        recorder: EventRecorder | None,
        cluster_domain: str = DEFAULT_CLUSTER_DOMAIN,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.sandboxes = sandboxes
        self.pods = pods
        self.services = services
        self.pvcs = pvcs
        self.recorder = recorder
        self.cluster_domain = cluster_domain
        self.clock = clock
        pods.add_index(POD_HASH_INDEX, pod_hash_index)
        # pods this process created that the pod cache has not shown yet: a pass that runs
        # before the cache catches up uses the create's answer instead of creating again
        # (which the apiserver refuses with AlreadyExists, then a GET: bench P1 saw 96 such
        # pairs for 650 sandboxes at 30 claims/s)
        self._created_pods: dict[tuple[str, str], tuple[float, KubeObject]] = {}
        self._unconfirmed: set[tuple[str, str]] = set()  # sandboxes decided on such a pod
        self.first_status = FirstStatusHold()  # see sandbox_memory
        self.status_memory = StatusMemory()
        add_handler = getattr(sandboxes, "add_handler", None)
        if add_handler is not None:
            memory = self.status_memory
            add_handler(memory.seen, memory.seen_update, memory.seen_delete)

    # ---------------------------------------------------------------- observe
    def observe(self, sandbox: KubeObject) -> Snapshot:
        meta = sandbox["metadata"]
        ns, name = meta["namespace"], meta["name"]
        candidates = {name}
        annotated = (meta.get("annotations") or {}).get(keys.ANNOTATION_POD_NAME)
        if annotated:
            candidates.add(annotated)
        pods: dict[str, KubeObject] = {}
        for n in candidates:
            pod = self.pods.get(n, ns)
            created = self._created_pods.get((ns, n))
            if created is not None and (
                pod is not None or time.monotonic() - created[0] > CREATED_POD_TTL
            ):
                del self._created_pods[(ns, n)]  # the cache has it now (or it never came)
            elif pod is None and created is not None:
                pod = created[1]  # ours, just created: the cache has not seen it yet
                self._unconfirmed.add((ns, name))
            if pod is not None:
                pods[n] = pod
        tracked = [
            p["metadata"]["name"]
            for p in self.pods.by_index(POD_HASH_INDEX, f"{ns}/{name_hash(name)}")
            if not p["metadata"].get("deletionTimestamp")
        ]
        if len(tracked) > 1:
            log.info("sandbox %s/%s: multiple pods carry its label: %s", ns, name, sorted(tracked))
        pvcs: dict[str, KubeObject] = {}
        for vct in (sandbox.get("spec") or {}).get("volumeClaimTemplates") or ():
            claim = pvc_name(str((vct.get("metadata") or {}).get("name") or ""), name)
            found = self.pvcs.get(claim, ns)
            if found is not None:
                pvcs[claim] = found
        return Snapshot(
            sandbox=sandbox,
            now=self.clock(),
            pods=pods,
            service=self.services.get(name, ns),
            pvcs=pvcs,
            cluster_domain=self.cluster_domain,
        )

    # ---------------------------------------------------------------- reconcile
    async def reconcile(self, req: Request) -> Result | None:
        self._unconfirmed.discard((req.namespace, req.name))
        cached = self.sandboxes.get(req.name, req.namespace)
        if cached is None or cached["metadata"].get("deletionTimestamp"):
            return None  # no finalizer: children go with the garbage collector
        sandbox = self.status_memory.apply(cached)  # our last status write, if the cache lags
        snap = self.observe(sandbox)
        decision = plan(snap)
        if decision.phase is Phase.MARK_EXPIRED:
            self._record(sandbox, decision.events)
            try:
                await self._write_status(sandbox, decision.status or {})
            except KubeError as err:  # the expiry is due: retry it soon, whatever the backoff
                raise SandboxReconcileError(
                    f"{req.namespace}/{req.name}",
                    [f"status update failed: {_message(err)}"],
                    retry_within=MIN_EXPIRY_REQUEUE,
                ) from err
            return Result(requeue_after=decision.requeue_after)
        if decision.phase is Phase.EXPIRED:
            assert decision.expiry is not None
            await self._expire(snap, decision.expiry, decision.status)
            return None
        return await self._reconcile_children(snap, decision)

    async def _reconcile_children(self, snap: Snapshot, decision: Plan) -> Result | None:
        sandbox = snap.sandbox
        meta = sandbox["metadata"]
        ns = meta["namespace"]
        errors: list[tuple[str, bool]] = []  # (message, refused adoption?) in pass order
        events: list[Event] = []

        def outcome(step: ChildStep, failure: str | None) -> bool:
            if step.error:
                errors.append((step.error, step.refused))
            elif failure is not None:
                errors.append((failure, False))
            elif step.action is not Action.NONE and step.event is not None:
                events.append(step.event)
            return bool(step.error or failure)

        # PVCs, in template order; an error stops the remaining templates. A PVC that is not
        # ours (someone else's, refused, or an adoption that failed) blocks creating the pod; a
        # failed create does not (the pod waits for its claim as any pod does).
        blocking: list[str] = []
        for index, planned in enumerate(decision.pvcs):
            step, _, failure = await self._apply(
                PERSISTENTVOLUMECLAIMS, ns, planned, _same, _pvc_replanner(snap, index)
            )
            if step.error or (failure is not None and step.action is Action.PATCH):
                blocking.append(step.name)
            if outcome(step, failure):
                break

        # The pod, then the pod-name annotation its plan asks for.
        assert decision.pod is not None
        planned_pod = plan_pod(snap, blocking) if blocking else decision.pod
        pod_plan, pod, failure = await self._apply(
            PODS,
            ns,
            planned_pod,
            _pod_step,
            lambda live: plan_pod(with_pod(snap, live), blocking),
        )
        outcome(pod_plan.step, failure)
        if pod_plan.step.action is Action.CREATE and failure is None and pod is not None:
            self.first_status.pod_created(ns, meta["name"])
        if failure is not None:  # the pod write failed: the annotation stays as it is
            annotation = (meta.get("annotations") or {}).get(keys.ANNOTATION_POD_NAME) or None
        else:
            annotation = pod_plan.annotation
        annotation_failure = await self._ensure_pod_name_annotation(sandbox, annotation)
        if annotation_failure is not None:
            errors.append((annotation_failure, False))

        # The Service.
        assert decision.service is not None
        svc_step, service, failure = await self._apply(
            SERVICES,
            ns,
            decision.service,
            _same,
            lambda live: plan_service(with_service(snap, live)),
        )
        outcome(svc_step, failure)

        messages = [message for message, _ in errors]
        status = compute_status(snap, pod, service, messages, self.clock())
        done = finish(snap, status, self.clock())
        self._record(sandbox, [*events, *error_events(errors), *done.events])
        held = None if messages else self.first_status.left(sandbox, done.status)
        try:
            if held is None:
                await self._write_status(sandbox, done.status)
        except KubeError as err:
            messages.append(f"status update failed: {_message(err)}")
        if messages:
            # however long the backoff has grown, retry no later than the pass would have
            # requeued by itself (an expiry due in that time must not be postponed)
            raise SandboxReconcileError(
                f"{ns}/{meta['name']}", messages, retry_within=done.requeue_after
            )
        requeue = done.requeue_after
        if held is not None:  # the pod's Ready event comes first, or this pass writes it
            requeue = min(requeue or held, held)
        if (ns, meta["name"]) in self._unconfirmed:
            # decided on a pod the cache has not confirmed: look again once it must have
            self._unconfirmed.discard((ns, meta["name"]))
            requeue = min(requeue or CREATED_POD_TTL, CREATED_POD_TTL)
        return Result(requeue_after=requeue) if requeue else None

    # ---------------------------------------------------------------- act helpers
    async def _apply(
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
                    self._remember_created_pod(namespace, step.name, created)
                return planned, created, None
            if step.action is Action.PATCH:
                patched = await self.client.patch(resource, step.name, step.body, namespace)
                return planned, patched, None
            if step.action is Action.DELETE:
                if resource is PODS:  # gone as far as we know: never stand in for it again
                    self._created_pods.pop((namespace, step.name), None)
                with contextlib.suppress(NotFound):
                    await self.client.delete(resource, step.name, namespace, uid=step.uid)
                return planned, None, None
            return planned, _as_object(step.result), None
        except AlreadyExists as err:
            if retried:
                return planned, None, _message(err)
            try:
                live = await self.client.get(resource, step.name, namespace)
            except KubeError as get_err:
                return planned, None, get_wrap + _message(get_err)
            return await self._apply(
                resource, namespace, replan(live), step_of, replan, retried=True
            )
        except KubeError as err:
            # a failed metadata sync leaves our child as it was: still report it; a child we
            # failed to create, delete or adopt is reported as none
            return planned, _as_object(step.kept), step.wrap + _message(err)

    def _remember_created_pod(self, namespace: str, name: str, pod: KubeObject) -> None:
        now = time.monotonic()
        memory = self._created_pods
        memory[(namespace, name)] = (now, pod)
        if len(memory) > 1024:  # sandboxes never looked at again (deleted at once)
            for key in [k for k, (t, _) in memory.items() if now - t > CREATED_POD_TTL]:
                del memory[key]

    async def _ensure_pod_name_annotation(
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
            return f"failed to {verb} pod name annotation: {_message(err)}"
        return None

    async def _expire(
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
            _, _, failure = await self._apply(resource, ns, step, _same, _keep(step))
            if failure is not None:
                errors.append(failure)
        if expiry.delete_sandbox:
            try:
                await self.client.delete(SANDBOXES, meta["name"], ns, uid=meta.get("uid"))
            except NotFound:
                pass
            except KubeError as err:
                errors.append(f"failed to delete the expired sandbox: {_message(err)}")
                self._record(sandbox, error_events([(e, False) for e in errors]))
                raise SandboxReconcileError(
                    f"{ns}/{meta['name']}", errors, retry_within=MIN_EXPIRY_REQUEUE
                ) from err
            return
        if errors:
            self._record(sandbox, error_events([(e, False) for e in errors]))
            raise SandboxReconcileError(
                f"{ns}/{meta['name']}", errors, retry_within=MIN_EXPIRY_REQUEUE
            )
        await self._write_status(sandbox, status or {})

    async def _write_status(self, sandbox: Mapping[str, Any], status: Mapping[str, Any]) -> None:
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

    def _record(self, sandbox: Mapping[str, Any], events: list[Event] | tuple[Event, ...]) -> None:
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


def _same(step: ChildStep) -> ChildStep:
    return step


def _pod_step(pod_plan: PodPlan) -> ChildStep:
    return pod_plan.step


def _keep(step: ChildStep) -> Callable[[KubeObject], ChildStep]:
    return lambda _live: step


def _pvc_replanner(snap: Snapshot, index: int) -> Callable[[KubeObject], ChildStep]:
    return lambda live: plan_pvc(with_pvc(snap, live), index)


def setup(
    mgr: Manager, workers: int = 1, cluster_domain: str = DEFAULT_CLUSTER_DOMAIN
) -> Controller:
    """Register the Sandbox controller with a manager (``--sandbox-concurrent-workers``,
    ``--cluster-domain``)."""
    tracked = keys.LABEL_SANDBOX_NAME_HASH
    sandboxes = mgr.get_informer(SANDBOXES)
    pods = pod_informer(mgr)  # before the watch below asks for it without the transform
    services = mgr.get_informer(SERVICES, label_selector=tracked)
    pvcs = mgr.get_informer(PERSISTENTVOLUMECLAIMS, label_selector=tracked)
    reconciler = SandboxReconciler(
        mgr.client,
        sandboxes,
        pods,
        services,
        pvcs,
        mgr.event_recorder(EVENT_REPORTER),
        cluster_domain,
    )
    has_tracking_label = LabelSelectorPredicate(tracked)
    return (
        ControllerBuilder(mgr)
        .named(CONTROLLER_NAME)
        .for_(SANDBOXES)
        .watches(PODS, sandbox_for_child, predicates=[has_tracking_label], label_selector=tracked)
        .watches(
            SERVICES, sandbox_for_child, predicates=[has_tracking_label], label_selector=tracked
        )
        .workers(workers)
        .complete(reconciler)
    )


__all__ = ["SandboxReconcileError", "SandboxReconciler", "sandbox_for_child", "setup"]
