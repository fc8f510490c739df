"""The SandboxWarmPool controller: observe (caches) -> decide (:mod:`.warmpool_plan`) -> act.

Wiring (spec extensions §4.1): ``For(SandboxWarmPool)``, ``Owns(Sandbox)`` (an update re-queues the
old and the new controller owner, so a claim adopting a sandbox re-queues the pool), and
``Watches(SandboxTemplate)`` fanned out through an index on ``.spec.sandboxTemplateRef.name``.

Acting follows the plan in the seed's order and aggregates every error instead of stopping at
the first. Expectations are recorded before each write, so a cache that lags our own creates
never makes a pool exceed ``spec.replicas``, however many workers run.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from agentsandbox.api import keys
from agentsandbox.api.conditions import find_condition, is_sandbox_ready
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.kinds import SANDBOX_WARM_POOL, TEMPLATE_REF_FIELD
from agentsandbox.api.owners import controller_of, controller_reference
from agentsandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS, SANDBOXES
from agentsandbox.api.timefmt import parse_rfc3339
from agentsandbox.kube import metrics as kube_metrics
from agentsandbox.kube.client import Client
from agentsandbox.kube.controller import Controller, ControllerBuilder, Request, Result
from agentsandbox.kube.errors import ApiError, KubeError, NotFound
from agentsandbox.kube.events import EventRecorder
from agentsandbox.kube.expectations import Expectations
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.resources import PODS
from agentsandbox.kube.store import KubeObject

from .batch import slow_start_batch
from .warmpool_plan import (
    EVENT_NOT_PROGRESSING,
    REASON_CREATE_FAILED,
    Plan,
    Settings,
    Snapshot,
    plan,
    transition_event,
)

log = logging.getLogger("agentsandbox.warmpool")

FIELD_MANAGER = "warmpool-controller"
CONTROLLER_NAME = "sandboxwarmpool"
POOL_INDEX = "warm-pool"  # sandboxes by "<namespace>/<pool name hash>"
TEMPLATE_INDEX = TEMPLATE_REF_FIELD  # pools by "<namespace>/<template name>"

_R = kube_metrics.REGISTRY
DESIRED = Gauge(
    "agent_sandbox_warmpool_desired_replicas",
    "spec.replicas of a warm pool",
    ["namespace", "pool"],
    registry=_R,
)
CURRENT = Gauge(
    "agent_sandbox_warmpool_replicas",
    "Active sandboxes of a warm pool",
    ["namespace", "pool"],
    registry=_R,
)
READY = Gauge(
    "agent_sandbox_warmpool_ready_replicas",
    "Ready sandboxes of a warm pool",
    ["namespace", "pool"],
    registry=_R,
)
CREATES = Counter(
    "agent_sandbox_warmpool_sandbox_creates_total",
    "Sandbox creates by warm pools",
    ["namespace", "pool", "result"],
    registry=_R,
)
DELETES = Counter(
    "agent_sandbox_warmpool_sandbox_deletes_total",
    "Sandbox deletes by warm pools (reason: stale, stuck, excess)",
    ["namespace", "pool", "reason"],
    registry=_R,
)
ADOPTIONS = Counter(
    "agent_sandbox_warmpool_adoptions_total",
    "Orphan sandboxes adopted by warm pools",
    ["namespace", "pool"],
    registry=_R,
)
TIME_TO_READY = Histogram(
    "agent_sandbox_warmpool_sandbox_time_to_ready_seconds",
    "From a pool sandbox's creation to its first Ready=True",
    ["namespace", "pool"],
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, float("inf")),
    registry=_R,
)


class ReconcileErrors(ApiError):
    """Several API errors from one reconcile, reported together (one log line)."""

    def __init__(self, errors: list[BaseException]) -> None:
        first = next((e for e in errors if isinstance(e, ApiError)), None)
        text = "; ".join(str(e) for e in errors)
        super().__init__(
            first.status if first else 0,
            first.reason if first else "Aggregate",
            f"{len(errors)} error(s): {text}",
        )
        self.errors = errors


def pool_index(sb: KubeObject) -> list[str]:
    meta = sb.get("metadata") or {}
    value = (meta.get("labels") or {}).get(keys.LABEL_WARM_POOL_SANDBOX)
    return [f"{meta.get('namespace', '')}/{value}"] if value else []


def template_index(pool: KubeObject) -> list[str]:
    meta = pool.get("metadata") or {}
    name = ((pool.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name")
    return [f"{meta.get('namespace', '')}/{name}"] if name else []


def _pool_owner_key(sb: KubeObject) -> str | None:
    ref = controller_of(sb)
    if ref is None or ref.get("kind") != SANDBOX_WARM_POOL.kind:
        return None
    if not str(ref.get("apiVersion", "")).startswith(SANDBOX_WARM_POOL.group + "/"):
        return None
    return f"{sb['metadata'].get('namespace', '')}/{ref.get('name')}"


class WarmPoolReconciler:
    """Keeps each SandboxWarmPool at ``spec.replicas`` ready sandboxes."""

    def __init__(
        self,
        client: Client,
        pools: Informer,
        sandboxes: Informer,
        templates: Informer,
        pods: Informer | None,
        recorder: EventRecorder | None,
        settings: Settings | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.pools = pools
        self.sandboxes = sandboxes
        self.templates = templates
        self.pods = pods
        self.recorder = recorder
        self.settings = settings or Settings()
        self.clock = clock
        self.expectations = Expectations()
        # pool key of each sandbox we asked to delete: orphans have no owner to map them back
        self._deleting: dict[str, str] = {}
        sandboxes.add_index(POOL_INDEX, pool_index)
        pools.add_index(TEMPLATE_INDEX, template_index)
        sandboxes.add_handler(self._on_add, self._on_update, self._on_delete)

    # ---------------------------------------------------------------- expectations observers
    def _on_add(self, sb: KubeObject) -> None:
        key = _pool_owner_key(sb)
        if key is not None:
            self.expectations.creation_observed(key)

    def _on_update(self, old: KubeObject, new: KubeObject) -> None:
        if new["metadata"].get("deletionTimestamp") and not old["metadata"].get(
            "deletionTimestamp"
        ):
            self._deletion_seen(new)
        key = _pool_owner_key(new)
        if key is not None and is_sandbox_ready(new) and not is_sandbox_ready(old):
            self._observe_time_to_ready(new, key)

    def _on_delete(self, sb: KubeObject) -> None:
        self._deletion_seen(sb)

    def _deletion_seen(self, sb: KubeObject) -> None:
        uid = sb["metadata"].get("uid", "")
        key = self._deleting.pop(uid, None) or _pool_owner_key(sb)
        if key is not None:
            self.expectations.deletion_observed(key, uid)

    def _observe_time_to_ready(self, sb: KubeObject, key: str) -> None:
        cond = find_condition((sb.get("status") or {}).get("conditions"), "Ready")
        created = sb["metadata"].get("creationTimestamp")
        if not cond or not cond.get("lastTransitionTime") or not created:
            return
        took = (parse_rfc3339(cond["lastTransitionTime"]) - parse_rfc3339(created)).total_seconds()
        if took >= 0:
            ns, _, pool = key.partition("/")
            TIME_TO_READY.labels(ns, pool).observe(took)

    # ---------------------------------------------------------------- mapping
    def pools_for_template(self, template: KubeObject) -> list[Request]:
        meta = template.get("metadata") or {}
        ns = meta.get("namespace", "")
        return [
            Request(ns, p["metadata"]["name"])
            for p in self.pools.by_index(TEMPLATE_INDEX, f"{ns}/{meta.get('name')}")
        ]

    # ---------------------------------------------------------------- reconcile
    async def reconcile(self, req: Request) -> Result | None:
        key = str(req)
        pool = self.pools.get(req.name, req.namespace)
        if pool is None:
            self.expectations.delete(key)
            for gauge in (DESIRED, CURRENT, READY):
                with contextlib.suppress(KeyError):
                    gauge.remove(req.namespace, req.name)
            return None
        if pool["metadata"].get("deletionTimestamp"):
            return None
        snap = self.observe(pool)
        decision = plan(snap)
        errors = await self.act(pool, decision)
        await self.write_status(pool, decision, errors)
        if errors:
            raise ReconcileErrors(errors)
        if decision.requeue_after is not None:
            return Result(requeue_after=decision.requeue_after)
        if not snap.expectations_satisfied:
            return Result(requeue_after=30.0)  # fallback if an event was lost
        return None

    def observe(self, pool: KubeObject) -> Snapshot:
        meta = pool["metadata"]
        ns = meta["namespace"]
        sandboxes = self.sandboxes.by_index(POOL_INDEX, f"{ns}/{name_hash(meta['name'])}")
        ref = ((pool.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name", "")
        template = self.templates.get(ref, ns) if ref else None
        pods: dict[str, KubeObject] = {}
        if self.pods is not None:
            for sb in sandboxes:
                if not is_sandbox_ready(sb):
                    pod = self.pods.get(sb["metadata"]["name"], ns)
                    if pod is not None:
                        pods[sb["metadata"]["name"]] = pod
        return Snapshot(
            pool=pool,
            sandboxes=sandboxes,
            template=template,
            template_error=None if template is not None else "NotFound",
            now=self.clock(),
            pods=pods,
            expectations_satisfied=self.expectations.satisfied(f"{ns}/{meta['name']}"),
            settings=self.settings,
        )

    async def act(self, pool: KubeObject, p: Plan) -> list[BaseException]:
        meta = pool["metadata"]
        ns, name = meta["namespace"], meta["name"]
        key = f"{ns}/{name}"
        errors: list[BaseException] = []

        for reason, group in (("stale", p.delete_stale), ("stuck", p.delete_stuck)):
            for sb in group:
                if reason == "stuck":
                    log.info(
                        "deleting sandbox not Ready after the grace period",
                        extra={"pool": key, "sandbox": sb["metadata"]["name"]},
                    )
                failed = await self._delete(key, sb, reason)
                if failed is not None:
                    errors.append(failed)

        owner = controller_reference(pool, SANDBOX_WARM_POOL)
        for sb in p.adopt:
            adopted = dict(sb)
            adopted["metadata"] = {
                **sb["metadata"],
                "ownerReferences": [*sb["metadata"].get("ownerReferences", []), owner],
            }
            try:
                await self.client.update(SANDBOXES, adopted, ns)
                ADOPTIONS.labels(ns, name).inc()
            except KubeError as err:
                errors.append(err)

        if p.create and p.blueprint is not None:
            blueprint = p.blueprint
            self.expectations.expect_creations(key, p.create)

            async def create(_: int) -> None:
                await self.client.create(SANDBOXES, blueprint, ns)

            ok, create_error = await slow_start_batch(p.create, 1, create)
            if ok < p.create:
                self.expectations.creation_failed(key, p.create - ok)
            CREATES.labels(ns, name, "success").inc(ok)
            if create_error is not None:
                CREATES.labels(ns, name, "error").inc()
                errors.append(create_error)

        if p.delete_excess:
            victims = p.delete_excess
            self.expectations.expect_deletions(key, [v["metadata"]["uid"] for v in victims])
            attempted: set[int] = set()

            async def delete(i: int) -> None:
                attempted.add(i)
                failure = await self._delete(key, victims[i], "excess", record=False)
                if failure is not None:
                    raise failure

            _, delete_error = await slow_start_batch(len(victims), 1, delete)
            for i, v in enumerate(victims):
                if i not in attempted:
                    self.expectations.deletion_failed(key, v["metadata"]["uid"])
            if delete_error is not None:
                errors.append(delete_error)
        return errors

    async def _delete(
        self, key: str, sb: Mapping[str, Any], reason: str, *, record: bool = True
    ) -> BaseException | None:
        meta = sb["metadata"]
        ns, pool = key.split("/", 1)
        if record:
            self.expectations.expect_deletions(key, [meta["uid"]])
        self._deleting[meta["uid"]] = key
        try:
            await self.client.delete(
                SANDBOXES,
                meta["name"],
                meta["namespace"],
                uid=meta["uid"],
                propagation_policy="Background",
            )
        except NotFound:
            self._deleting.pop(meta["uid"], None)
            self.expectations.deletion_observed(key, meta["uid"])
            return None
        except KubeError as err:
            self._deleting.pop(meta["uid"], None)
            self.expectations.deletion_failed(key, meta["uid"])
            return err
        DELETES.labels(ns, pool, reason).inc()
        return None

    async def write_status(
        self, pool: KubeObject, p: Plan, errors: Iterable[BaseException]
    ) -> None:
        """Write status when it changed (including counts going back to 0), raise events."""
        meta = pool["metadata"]
        ns, name = meta["namespace"], meta["name"]
        status = p.status
        create_errors = [e for e in errors if isinstance(e, ApiError)]
        if p.create and create_errors:
            status = _with_create_failure(status, create_errors[0])
        old = pool.get("status") or {}
        DESIRED.labels(ns, name).set(int((pool.get("spec") or {}).get("replicas") or 0))
        CURRENT.labels(ns, name).set(status["replicas"])
        READY.labels(ns, name).set(status["readyReplicas"])
        event = transition_event(old, status)
        if event is not None and self.recorder is not None:
            kind, reason, note = event
            self.recorder.event(pool, kind, reason, note, action="Reconcile")
        if all(old.get(k) == v for k, v in status.items()):
            return
        body = {
            "apiVersion": SANDBOX_WARM_POOL.api_version,
            "kind": SANDBOX_WARM_POOL.kind,
            "metadata": {"name": name, "namespace": ns},
            "status": status,
        }
        await self.client.apply(
            SANDBOX_WARM_POOLS,
            body,
            field_manager=FIELD_MANAGER,
            force=True,
            namespace=ns,
            subresource="status",
        )


def _with_create_failure(status: Mapping[str, Any], err: ApiError) -> dict[str, Any]:
    out = dict(status)
    conditions = []
    for cond in status.get("conditions", []):
        if cond.get("type") == "Ready":
            cond = {
                **cond,
                "status": "False",
                "reason": REASON_CREATE_FAILED,
                "message": f"creating sandboxes failed: {err.message or err}",
            }
        conditions.append(cond)
    out["conditions"] = conditions
    return out


def setup(mgr: Manager, settings: Settings, workers: int = 1) -> Controller:
    """Register the SandboxWarmPool controller with a manager."""
    pools = mgr.get_informer(SANDBOX_WARM_POOLS)
    sandboxes = mgr.get_informer(SANDBOXES)
    templates = mgr.get_informer(SANDBOX_TEMPLATES)
    pods = mgr.get_informer(PODS, label_selector=keys.LABEL_SANDBOX_NAME_HASH)
    reconciler = WarmPoolReconciler(
        mgr.client,
        pools,
        sandboxes,
        templates,
        pods,
        mgr.event_recorder("warmpool-controller"),
        settings,
    )
    return (
        ControllerBuilder(mgr)
        .named(CONTROLLER_NAME)
        .for_(SANDBOX_WARM_POOLS)
        .owns(SANDBOXES)
        .watches(SANDBOX_TEMPLATES, reconciler.pools_for_template)
        .workers(workers)
        .complete(reconciler)
    )


__all__ = ["EVENT_NOT_PROGRESSING", "WarmPoolReconciler", "setup"]
