"""The SandboxWarmPool controller: its wiring, the observe step and the reconciler.

Wiring (docs/design/warmpool.md, "Wiring"): ``For(SandboxWarmPool)``, ``Owns(Sandbox)`` (an
update re-queues the old and the new controller owner, so a claim adopting a sandbox re-queues
the pool), and ``Watches(SandboxTemplate)`` fanned out through an index on
``.spec.sandboxTemplateRef.name``.

Each pass observes (the caches, through the indexes of :mod:`.handlers`), decides
(:mod:`.plan`), then acts through the :class:`~.act.PoolWriter` the reconciler holds.
Acting follows the plan in upstream's order (docs/design/warmpool.md, "Acting, in order") and
aggregates every error instead of stopping at the first. Expectations are recorded before each
write, so a cache that lags our own creates never makes a pool exceed ``spec.replicas``, however
many workers run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace

from agentsandbox.api import keys
from agentsandbox.api.conditions import is_sandbox_ready
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS, SANDBOXES
from agentsandbox.controllers.common.errors import ReconcileErrors
from agentsandbox.controllers.common.podcache import pod_informer
from agentsandbox.controllers.warmpool.act import (
    CONFLICT_RECHECK,
    LOST_EVENT_RECHECK,
    Outcome,
    PoolWriter,
)
from agentsandbox.controllers.warmpool.handlers import CONTROLLER_INDEX, POOL_INDEX, PoolWatches
from agentsandbox.controllers.warmpool.memory import PoolMemory, RefillBucket
from agentsandbox.controllers.warmpool.metrics import remove_series
from agentsandbox.controllers.warmpool.plan import (
    ON_REPLENISH,
    RECREATE,
    Settings,
    Snapshot,
    not_progressing_reason,
    plan,
)
from agentsandbox.kube.builder import ControllerBuilder
from agentsandbox.kube.controller import Controller
from agentsandbox.kube.errors import KubeError
from agentsandbox.kube.expectations import Expectations
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.reconcile import Request, Result
from agentsandbox.kube.store import KubeObject

log = logging.getLogger("agentsandbox.warmpool")

# A pool's pass looks at every member, and each member's status change is an event: while a pool
# fills, events arrive faster than passes finish. Events within this long of a pass's start are
# served by one later pass, which cuts the passes (and CPU) of a fill (the pool's CPU cost is
# measured by docs/benchmarks.md). Claims never wait for it (they adopt through the claim
# controller); a refill starts at most this much later.
POOL_PASS_INTERVAL = 0.1
CONTROLLER_NAME = "sandboxwarmpool"


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
        # the indexes, the expectations observers, the template -> pools mapping
        self.watches = PoolWatches(pools, sandboxes, self.expectations, writer.pool_gone)
        self.pools_for_template = self.watches.pools_for_template

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
        if skipped:  # a failed adoption is not counted (upstream's rule): decide again without it
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
            controlled=self.sandboxes.by_index(CONTROLLER_INDEX, f"{ns}/{meta.get('uid', '')}"),
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
    "CONTROLLER_NAME",
    "POOL_PASS_INTERVAL",
    "WarmPoolReconciler",
    "setup",
]
