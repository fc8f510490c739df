"""The Sandbox controller: wiring, observe (caches) and the reconciler: observe -> decide -> act.

The decision is :mod:`.plan` (with :mod:`.children` and :mod:`.status`), the writes are
:mod:`.act`, the child-event mapping :mod:`.handlers`.

Wiring (docs/design/sandbox.md, "Watches and caches"): ``For(Sandbox)`` with no predicate, and
the Pods and Services that carry the tracking label ``agents.x-k8s.io/sandbox-name-hash``, each
mapped to its controlling Sandbox (or, for an unowned child, to the Sandbox of the same name, so
that labelling it adoptable takes effect at once). Pods, Services and PVCs are read from shared
informers scoped by that label; the pod informer is the same one the warm pool controller uses.

The caches only hold children that carry the tracking label. A child without it (a user's pod
named like the Sandbox, say) shows up when our create is answered ``AlreadyExists``: the act step
then reads it from the API and re-plans that one child with it, which is how upstream reaches
its "existing pod" path too.

The writes (and their preconditions) are :class:`~.act.SandboxWriter`'s, which the reconciler
holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final

from agentsandbox.api import keys
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.resources import SANDBOXES
from agentsandbox.controllers.common.podcache import pod_informer
from agentsandbox.controllers.sandbox.act import (
    SandboxReconcileError,
    SandboxWriter,
    WriteBehind,
    error_message,
    pod_step,
    same_step,
)
from agentsandbox.controllers.sandbox.children import plan_pod, plan_pvc, plan_service, pvc_name
from agentsandbox.controllers.sandbox.handlers import sandbox_for_child
from agentsandbox.controllers.sandbox.memory import (
    CREATED_POD_TTL,
    FirstStatusHold,
    MigrationPace,
)
from agentsandbox.controllers.sandbox.plan import (
    plan,
    pod_to_confirm,
    with_pod,
    with_pod_error,
    with_pvc,
    with_service,
)
from agentsandbox.controllers.sandbox.status import compute_status, error_events, finish
from agentsandbox.controllers.sandbox.types import (
    DEFAULT_CLUSTER_DOMAIN,
    MIN_EXPIRY_REQUEUE,
    WRAP_POD_GET,
    Action,
    ChildStep,
    Event,
    Phase,
    Plan,
    Snapshot,
)
from agentsandbox.kube.builder import ControllerBuilder
from agentsandbox.kube.controller import Controller
from agentsandbox.kube.errors import KubeError, NotFound
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.predicate import LabelSelectorPredicate
from agentsandbox.kube.reconcile import Request, Result
from agentsandbox.kube.resources import PERSISTENTVOLUMECLAIMS, PODS, SERVICES
from agentsandbox.kube.store import KubeObject

log = logging.getLogger("agentsandbox.sandbox")

CONTROLLER_NAME: Final = "sandbox"
#: Pod index: ``<namespace>/<tracking label value>``, to notice several pods for one Sandbox.
POD_HASH_INDEX: Final = "sandbox-name-hash"
EVENT_REPORTER: Final = "sandbox-controller"


def pod_hash_index(pod: KubeObject) -> list[str]:
    meta = pod.get("metadata") or {}
    value = (meta.get("labels") or {}).get(keys.LABEL_SANDBOX_NAME_HASH)
    return [f"{meta.get('namespace', '')}/{value}"] if value else []


class SandboxReconciler:
    """Turns each Sandbox into its Pod (+ PVCs, + headless Service) and reports status."""

    def __init__(
        self,
        writer: SandboxWriter,
        sandboxes: Informer,
        pods: Informer,
        services: Informer,
        pvcs: Informer,
        cluster_domain: str = DEFAULT_CLUSTER_DOMAIN,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.writer = writer
        self.sandboxes = sandboxes
        self.pods = pods
        self.services = services
        self.pvcs = pvcs
        self.cluster_domain = cluster_domain
        self.clock = clock
        pods.add_index(POD_HASH_INDEX, pod_hash_index)
        # sandboxes decided on a pod the writer created that the pod cache has not shown yet
        self._unconfirmed: set[tuple[str, str]] = set()
        self.first_status = FirstStatusHold()  # see memory.py
        self.migration_pace = MigrationPace()  # see memory.py
        self.status_memory = writer.status_memory  # the writer's: its last status writes
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
            created = self.writer.created_pods.stand_in(ns, n, pod)
            if created is not None:
                pod = created  # ours, just created: the cache has not seen it yet
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
            self.writer.write_behind.clear((req.namespace, req.name))
            self.migration_pace.forget({"metadata": {"namespace": req.namespace, "name": req.name}})
            return None  # no finalizer: children go with the garbage collector
        sandbox = self.status_memory.apply(cached)  # our last status write, if the cache lags
        snap = self.observe(sandbox)
        decision = plan(snap)
        unseen = pod_to_confirm(snap, decision)
        if unseen is not None:  # about to report a suspended Sandbox's pod gone: make sure
            snap = await self._look_up_pod(snap, unseen)
            decision = plan(snap)
        if decision.phase is Phase.MARK_EXPIRED:
            self.writer.record(sandbox, decision.events)
            try:
                await self.writer.write_status(sandbox, decision.status or {})
            except KubeError as err:  # the expiry is due: retry it soon, whatever the backoff
                raise SandboxReconcileError(
                    f"{req.namespace}/{req.name}",
                    [f"status update failed: {error_message(err)}"],
                    retry_within=MIN_EXPIRY_REQUEUE,
                ) from err
            return Result(requeue_after=decision.requeue_after)
        if decision.phase is Phase.EXPIRED:
            assert decision.expiry is not None
            self.writer.write_behind.clear((req.namespace, req.name))
            await self.writer.expire(snap, decision.expiry, decision.status)
            return None
        return await self._reconcile_children(snap, decision)

    async def _look_up_pod(self, snap: Snapshot, name: str) -> Snapshot:
        """The snapshot with the pod ``name`` as the API has it (the caches may not show it)."""
        try:
            live = await self.writer.client.get(PODS, name, snap.sandbox["metadata"]["namespace"])
        except NotFound:
            return snap
        except KubeError as err:
            return with_pod_error(snap, WRAP_POD_GET + error_message(err))
        return with_pod(snap, live)

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
            step, _, failure = await self.writer.apply(
                PERSISTENTVOLUMECLAIMS, ns, planned, same_step, _pvc_replanner(snap, index)
            )
            if step.error or (failure is not None and step.action is Action.PATCH):
                blocking.append(step.name)
            if outcome(step, failure):
                break

        # The pod, then the pod-name annotation its plan asks for. A repair of the pod's
        # labels and annotations may wait (--sandbox-write-behind-window; act.WriteBehind).
        assert decision.pod is not None
        planned_pod = plan_pod(snap, blocking) if blocking else decision.pod
        deferral = self.writer.deferral(ns, meta["name"])
        pod_plan, pod, failure = await self.writer.apply(
            PODS,
            ns,
            planned_pod,
            pod_step,
            lambda live: plan_pod(with_pod(snap, live), blocking),
            deferral=deferral,
        )
        outcome(pod_plan.step, failure)
        if snap.pod_error is not None:
            errors.append((snap.pod_error, False))
        if pod_plan.step.action is Action.CREATE and failure is None and pod is not None:
            self.first_status.pod_created(ns, meta["name"])
        if failure is not None:  # the pod write failed: the annotation stays as it is
            annotation = (meta.get("annotations") or {}).get(keys.ANNOTATION_POD_NAME) or None
        else:
            annotation = pod_plan.annotation
        annotation_failure = await self.writer.ensure_pod_name_annotation(sandbox, annotation)
        if annotation_failure is not None:
            errors.append((annotation_failure, False))

        # The Service.
        assert decision.service is not None
        svc_step, service, failure = await self.writer.apply(
            SERVICES,
            ns,
            decision.service,
            same_step,
            lambda live: plan_service(with_service(snap, live)),
        )
        outcome(svc_step, failure)

        messages = [message for message, _ in errors]
        pod_failed = (pod_plan.step.error is not None or failure is not None) and pod is None
        status = compute_status(snap, pod, service, messages, self.clock(), pod_failed=pod_failed)
        done = finish(snap, status, self.clock())
        self.writer.record(sandbox, [*events, *error_events(errors), *done.events])
        held = None if messages else self.first_status.left(sandbox, done.status)
        if held is None and not messages:  # an upgrade's status catch-up takes its turn
            held = self.migration_pace.wait(sandbox, sandbox.get("status") or {}, done.status)
        try:
            if held is None:
                await self.writer.write_status(sandbox, done.status)
        except KubeError as err:
            messages.append(f"status update failed: {error_message(err)}")
        put_off = deferral.wait if deferral is not None else None
        if messages:
            # however long the backoff has grown, retry no later than the pass would have
            # requeued by itself (an expiry due in that time, a pod repair put off, must not be
            # postponed)
            bound = min(filter(None, (done.requeue_after, put_off)), default=None)
            raise SandboxReconcileError(f"{ns}/{meta['name']}", messages, retry_within=bound)
        if deferral is not None:
            deferral.settle()
        requeue = done.requeue_after
        if put_off is not None:  # the pass that writes the repair put off here
            requeue = min(requeue or put_off, put_off)
        if held is not None:  # the pod's Ready event comes first, or this pass writes it
            requeue = min(requeue or held, held)
        if (ns, meta["name"]) in self._unconfirmed:
            # decided on a pod the cache has not confirmed: look again once it must have
            self._unconfirmed.discard((ns, meta["name"]))
            requeue = min(requeue or CREATED_POD_TTL, CREATED_POD_TTL)
        return Result(requeue_after=requeue) if requeue else None


def _pvc_replanner(snap: Snapshot, index: int) -> Callable[[KubeObject], ChildStep]:
    return lambda live: plan_pvc(with_pvc(snap, live), index)


def setup(
    mgr: Manager,
    workers: int = 1,
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN,
    write_behind_window: float = 0.0,
) -> Controller:
    """Register the Sandbox controller with a manager (``--sandbox-concurrent-workers``,
    ``--cluster-domain``, ``--sandbox-write-behind-window``)."""
    tracked = keys.LABEL_SANDBOX_NAME_HASH
    sandboxes = mgr.get_informer(SANDBOXES)
    pods = pod_informer(mgr)  # before the watch below asks for it without the transform
    services = mgr.get_informer(SERVICES, label_selector=tracked)
    pvcs = mgr.get_informer(PERSISTENTVOLUMECLAIMS, label_selector=tracked)
    reconciler = SandboxReconciler(
        SandboxWriter(
            mgr.client, mgr.event_recorder(EVENT_REPORTER), WriteBehind(write_behind_window)
        ),
        sandboxes,
        pods,
        services,
        pvcs,
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


__all__ = ["SandboxReconciler", "setup"]
