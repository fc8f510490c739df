"""The SandboxWarmPool controller: observe (caches) -> decide (:mod:`.warmpool_plan`) -> act.

Wiring (spec extensions §4.1): ``For(SandboxWarmPool)``, ``Owns(Sandbox)`` (an update re-queues the
old and the new controller owner, so a claim adopting a sandbox re-queues the pool), and
``Watches(SandboxTemplate)`` fanned out through an index on ``.spec.sandboxTemplateRef.name``.

Acting follows the plan in the seed's order and aggregates every error instead of stopping at
the first. Expectations are recorded before each write, so a cache that lags our own creates
never makes a pool exceed ``spec.replicas``, however many workers run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace

from agentsandbox.api import keys
from agentsandbox.api.conditions import find_condition, is_sandbox_ready
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.kinds import SANDBOX_WARM_POOL, TEMPLATE_REF_FIELD
from agentsandbox.api.owners import controller_of
from agentsandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS, SANDBOXES
from agentsandbox.api.timefmt import parse_rfc3339
from agentsandbox.controllers.common.errors import ReconcileErrors
from agentsandbox.controllers.common.podcache import pod_informer
from agentsandbox.controllers.warmpool.act import (
    CONFLICT_RECHECK,
    EVENT_RELEASED,
    FIELD_MANAGER,
    LOST_EVENT_RECHECK,
    Outcome,
    PoolWriter,
    named,
)
from agentsandbox.controllers.warmpool.memory import PoolMemory, RefillBucket
from agentsandbox.controllers.warmpool.metrics import TIME_TO_READY, remove_series
from agentsandbox.controllers.warmpool.plan import (
    EVENT_NOT_PROGRESSING,
    ON_REPLENISH,
    RECREATE,
    Settings,
    Snapshot,
    not_progressing_reason,
    plan,
)
from agentsandbox.kube.controller import Controller, ControllerBuilder, Request, Result
from agentsandbox.kube.errors import KubeError
from agentsandbox.kube.expectations import Expectations
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.store import KubeObject, index_by_controller_uid

log = logging.getLogger("agentsandbox.warmpool")

# A pool's pass looks at every member, and each member's status change is an event: while a pool
# fills, events arrive faster than passes finish. Events within this long of a pass's start are
# served by one later pass (bench P5: passes per 1000-fill 2954 -> a few hundred). Claims never
# wait for it (they adopt through the claim controller); a refill starts at most this much later.
POOL_PASS_INTERVAL = 0.1
CONTROLLER_NAME = "sandboxwarmpool"
POOL_INDEX = "warm-pool"  # sandboxes by "<namespace>/<pool name hash>"
CONTROLLER_INDEX = "warm-pool-controller"  # sandboxes by their controller's UID
TEMPLATE_INDEX = TEMPLATE_REF_FIELD  # pools by "<namespace>/<template name>"


def pool_index(sb: KubeObject) -> list[str]:
    meta = sb.get("metadata") or {}
    value = (meta.get("labels") or {}).get(keys.LABEL_WARM_POOL_SANDBOX)
    return [f"{meta.get('namespace', '')}/{value}"] if value else []


def template_index(pool: KubeObject) -> list[str]:
    meta = pool.get("metadata") or {}
    name = ((pool.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name")
    return [f"{meta.get('namespace', '')}/{name}"] if name else []


def _pool_owner_uid(sb: KubeObject) -> str | None:
    """The UID of the SandboxWarmPool controlling ``sb`` (expectations are keyed by pool UID, so a
    pool deleted and re-created under the same name starts clean)."""
    ref = controller_of(sb)
    if ref is None or ref.get("kind") != SANDBOX_WARM_POOL.kind:
        return None
    if not str(ref.get("apiVersion", "")).startswith(SANDBOX_WARM_POOL.group + "/"):
        return None
    return str(ref.get("uid") or "") or None


class WarmPoolReconciler:
    """Keeps each SandboxWarmPool at ``spec.replicas`` ready sandboxes; ``writer`` makes the
    writes (its expectations are the ones the event handlers here lower)."""

    def __init__(
        self,
        pools: Informer,
        sandboxes: Informer,
        templates: Informer,
        pods: Informer | None,
        settings: Settings | None = None,
        clock: Callable[[], float] = time.time,
        *,
        writer: PoolWriter,
    ) -> None:
        self.writer = writer
        self.pools = pools
        self.sandboxes = sandboxes
        self.templates = templates
        self.pods = pods
        self.settings = settings or Settings()
        self.clock = clock
        self.expectations = writer.expectations
        # set when the controller shuts down: slow-start batches stop between two batches
        self.stopping: asyncio.Event | None = None
        self._memory: dict[str, PoolMemory] = {}  # by "<namespace>/<pool name>"
        self._ready_seen: set[str] = set()  # sandbox UIDs whose first Ready was measured
        sandboxes.add_index(POOL_INDEX, pool_index)
        sandboxes.add_index(CONTROLLER_INDEX, index_by_controller_uid)
        pools.add_index(TEMPLATE_INDEX, template_index)
        sandboxes.add_handler(self._on_add, self._on_update, self._on_delete)
        add_pool_handler = getattr(pools, "add_handler", None)
        if add_pool_handler is not None:
            add_pool_handler(None, self._on_pool_update, self._on_pool_delete)

    # ---------------------------------------------------------------- pool deletion
    def _on_pool_update(self, _old: KubeObject, new: KubeObject) -> None:
        if new["metadata"].get("deletionTimestamp"):
            self._pool_gone(new["metadata"].get("uid", ""))

    def _on_pool_delete(self, pool: KubeObject) -> None:
        self._pool_gone(pool["metadata"].get("uid", ""))

    def _pool_gone(self, uid: str) -> None:
        self.writer.pool_gone(uid)

    # ---------------------------------------------------------------- expectations observers
    def _on_add(self, sb: KubeObject) -> None:
        uid = _pool_owner_uid(sb)
        if uid is not None:
            self.expectations.creation_observed(uid)

    def _on_update(self, old: KubeObject, new: KubeObject) -> None:
        if new["metadata"].get("deletionTimestamp") and not old["metadata"].get(
            "deletionTimestamp"
        ):
            self._deletion_seen(new)
        if is_sandbox_ready(new) and not is_sandbox_ready(old):
            self._observe_time_to_ready(new)

    def _on_delete(self, sb: KubeObject) -> None:
        self._deletion_seen(sb)
        self._ready_seen.discard(sb["metadata"].get("uid", ""))

    def _deletion_seen(self, sb: KubeObject) -> None:
        uid = _pool_owner_uid(sb)
        if uid is not None:
            self.expectations.deletion_observed(uid, sb["metadata"].get("uid", ""))

    def _observe_time_to_ready(self, sb: KubeObject) -> None:
        """Creation to the first Ready=True of a pool sandbox (later flips are not measured)."""
        meta = sb["metadata"]
        ref = controller_of(sb)
        if _pool_owner_uid(sb) is None or ref is None or meta.get("uid") in self._ready_seen:
            return
        self._ready_seen.add(meta.get("uid", ""))
        cond = find_condition((sb.get("status") or {}).get("conditions"), "Ready")
        created = meta.get("creationTimestamp")
        if not cond or not cond.get("lastTransitionTime") or not created:
            return
        took = (parse_rfc3339(cond["lastTransitionTime"]) - parse_rfc3339(created)).total_seconds()
        if took >= 0:
            TIME_TO_READY.labels(meta.get("namespace", ""), ref.get("name")).observe(took)

    # ---------------------------------------------------------------- mapping
    def pools_for_template(self, template: KubeObject) -> list[Request]:
        meta = template.get("metadata") or {}
        ns = meta.get("namespace", "")
        return [
            Request(ns, p["metadata"]["name"])
            for p in self.pools.by_index(TEMPLATE_INDEX, f"{ns}/{meta.get('name')}")
        ]

    # ---------------------------------------------------------------- reconcile
    def _forget(self, key: str) -> None:
        memory = self._memory.pop(key, None)
        if memory is not None:
            self.expectations.delete(memory.uid)
            self.writer.forget(memory.uid)

    def _memory_of(self, key: str, pool: KubeObject) -> PoolMemory:
        uid = pool["metadata"].get("uid", "")
        memory = self._memory.get(key)
        if memory is None or memory.uid != uid:
            self._forget(key)  # a pool re-created under the same name starts clean
            memory = self._memory[key] = PoolMemory(
                uid=uid, reported=not_progressing_reason(pool.get("status") or {})
            )
        return memory

    async def reconcile(self, req: Request) -> Result | None:
        key = str(req)
        pool = self.pools.get(req.name, req.namespace)
        if pool is None:
            self._forget(key)
            remove_series(req.namespace, req.name)
            return None
        if pool["metadata"].get("deletionTimestamp"):
            return None
        memory = self._memory_of(key, pool)
        self._warn_unknown_strategy(key, pool, memory)
        await self.writer.resolve_doubts(pool)
        snap = self.observe(pool, memory)
        decision = plan(snap)
        outcome = Outcome()
        await self.writer.release(pool, decision.release, outcome)
        skipped = await self.writer.adopt(pool, decision.adopt, outcome)
        if skipped:  # a failed adoption is not counted (the seed's rule): decide again without it
            decision = plan(replace(snap, skip=snap.skip | skipped))
        memory.held = decision.held_uids
        memory.pod_missing_since = decision.pod_missing_since
        memory.members = decision.members
        memory.missing_since, memory.owed = decision.missing_since, decision.owed
        if memory.refill is not None:
            memory.refill.take(decision.create)
        await self.writer.act(pool, decision, outcome, stop=self.stopping)
        try:
            await self.writer.write_status(pool, decision, outcome.create_error, memory)
        except KubeError as err:
            outcome.errors.append(err)
        if outcome.errors:
            raise ReconcileErrors(outcome.errors)
        requeues = [] if decision.requeue_after is None else [decision.requeue_after]
        if outcome.conflicts:
            requeues.append(CONFLICT_RECHECK)
        if not self.expectations.satisfied(memory.uid):
            requeues.append(LOST_EVENT_RECHECK)  # in case an event of ours was lost
        return Result(requeue_after=min(requeues)) if requeues else None

    def _warn_unknown_strategy(self, key: str, pool: KubeObject, memory: PoolMemory) -> None:
        given = ((pool.get("spec") or {}).get("updateStrategy") or {}).get("type") or ""
        if given in ("", RECREATE, ON_REPLENISH) or memory.warned_strategy == given:
            return
        memory.warned_strategy = given
        log.warning(
            "unknown update strategy, defaulting to OnReplenish",
            extra={"pool": key, "strategy": given},
        )

    def _pod_of(self, sb: KubeObject) -> KubeObject | None:
        """The sandbox's live pod from the cache: the one its pod-name annotation names, else the
        one named like the sandbox; a terminating pod does not count."""
        if self.pods is None:
            return None
        meta = sb["metadata"]
        name = (meta.get("annotations") or {}).get(keys.ANNOTATION_POD_NAME) or meta["name"]
        pod = self.pods.get(name, meta["namespace"])
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return None
        return pod

    def observe(self, pool: KubeObject, memory: PoolMemory | None = None) -> Snapshot:
        meta = pool["metadata"]
        ns = meta["namespace"]
        sandboxes = self.sandboxes.by_index(POOL_INDEX, f"{ns}/{name_hash(meta['name'])}")
        ref = ((pool.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name", "")
        template = self.templates.get(ref, ns) if ref else None
        now = self.clock()
        tokens: float | None = None
        if self.settings.max_refill_rate > 0 and memory is not None:
            if memory.refill is None:
                memory.refill = RefillBucket.full(self.settings.max_refill_rate, now)
            tokens = memory.refill.available(now)
        pods: dict[str, KubeObject] = {}
        for sb in sandboxes:
            if not is_sandbox_ready(sb):
                pod = self._pod_of(sb)
                if pod is not None:
                    pods[sb["metadata"]["name"]] = pod
        return Snapshot(
            pool=pool,
            sandboxes=sandboxes,
            template=template,
            template_error=None if template is not None else "NotFound",
            now=now,
            pods=pods,
            expectations_satisfied=self.expectations.satisfied(meta.get("uid", "")),
            settings=self.settings,
            held_before=memory.held if memory else frozenset(),
            pod_missing_since=dict(memory.pod_missing_since) if memory else {},
            members_before=memory.members if memory else None,
            missing_since=memory.missing_since if memory else None,
            owed=memory.owed if memory else 0,
            refill_tokens=tokens,
            controlled=self.sandboxes.by_index(CONTROLLER_INDEX, meta.get("uid", "")),
        )


def setup(mgr: Manager, settings: Settings, workers: int = 1) -> Controller:
    """Register the SandboxWarmPool controller with a manager."""
    pools = mgr.get_informer(SANDBOX_WARM_POOLS)
    sandboxes = mgr.get_informer(SANDBOXES)
    templates = mgr.get_informer(SANDBOX_TEMPLATES)
    pods = pod_informer(mgr)
    writer = PoolWriter(
        mgr.client, mgr.event_recorder("warmpool-controller"), Expectations(), sandboxes
    )
    reconciler = WarmPoolReconciler(pools, sandboxes, templates, pods, settings, writer=writer)
    controller = (
        ControllerBuilder(mgr)
        .named(CONTROLLER_NAME)
        .for_(SANDBOX_WARM_POOLS)
        .owns(SANDBOXES)
        .watches(SANDBOX_TEMPLATES, reconciler.pools_for_template)
        .workers(workers)
        .with_min_interval(POOL_PASS_INTERVAL)
        .complete(reconciler)
    )
    reconciler.stopping = controller.stopping  # slow-start batches end between batches
    return controller


__all__ = [
    "CONFLICT_RECHECK",
    "EVENT_NOT_PROGRESSING",
    "EVENT_RELEASED",
    "FIELD_MANAGER",
    "WarmPoolReconciler",
    "named",
    "setup",
]
