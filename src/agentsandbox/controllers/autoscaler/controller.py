"""The SandboxWarmPoolAutoscaler controller: wiring, observe and the reconciler: observe -> decide
(:mod:`.plan`, then the other-writer rule of :mod:`.rules`) -> act (:mod:`.act`); the windows
the observations come from are in :mod:`.source`, the handlers that feed them in :mod:`.handlers`,
the settings and the spec's ``Policy`` in :mod:`.settings`.

Observe. Claim arrivals and pool refill times are recorded by informer handlers as they happen,
into windows kept in memory (a restart refills them from the objects' timestamps):

- an *arrival* is a claim that may take a sandbox from the pool: ``spec.warmPoolRef`` names it,
  or ``spec.sandboxTemplateRef`` names its template with ``warmpool`` absent/``default`` or the
  pool's name (docs/design/claim.md, "Which template and pools"); not ``warmpool: none``, nor a
  claim that sets ``env``, ``volumeClaimTemplates`` or ``additionalPodMetadata`` (those are
  always served cold). Its time is when this process first saw it, if that is within 2 s of its
  ``creationTimestamp`` (which has whole seconds only), else the ``creationTimestamp``;
- a *refill time* is a pool-controlled sandbox's create -> Ready, on this process's monotonic
  clock: from the watch event that first shows it (not Ready) to the watch event showing it
  Ready. A member not seen so (listed at start or by a relist after a watch gap, or its Ready
  transition shown by a relist) gives no sample: ``creationTimestamp`` is the API server's
  clock and the Ready condition's ``lastTransitionTime`` the sandbox controller's, and a skew
  between them would bias the sample or drop it. After a restart the decision is ``NoData``
  (holding the current size) until the first member created since is Ready.

The circuit breaker's inputs (:func:`.plan.decide`) are read from the caches at each pass: the
pool's Ready condition, the ``creationTimestamp`` of its not-Ready members (an index of the
sandbox informer by controlling pool) and the last Ready transition of a member the windows saw.

Each pass reads the target's ``/scale``, decides, applies the other-writer rule, writes
``/scale`` if allowed, then the status; Events on every size change and writer conflict. The
status carries a ``SharedTemplate`` condition while other pools of the target's template are
autoscaled too (each counts every claim naming the template). Passes
come on events (a claim, a sandbox turning Ready, the pool or the autoscaler changing; at most
one per second per autoscaler) and every ``sync_period`` seconds.

Deleting an autoscaler leaves the target at its last size: the target is never owned by the
autoscaler, and the autoscaler has no finalizer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agentsandbox.api.conditions import FALSE, TRUE, find_condition, is_sandbox_ready
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_WARM_POOL_AUTOSCALERS,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.api.timefmt import format_rfc3339, parse_rfc3339
from agentsandbox.controllers.autoscaler.act import (
    CONFLICT,
    ScaleWriter,
    TargetError,
    is_sandbox_warm_pool,
)
from agentsandbox.controllers.autoscaler.handlers import (
    POOL_MEMBER_INDEX,
    POOL_TEMPLATE_INDEX,
    TARGET_INDEX,
    AutoscalerWatches,
    target_index,
)
from agentsandbox.controllers.autoscaler.metrics import record, remove_series
from agentsandbox.controllers.autoscaler.plan import (
    ArrivalBins,
    Memory,
    Observation,
    Policy,
    decide,
    occupancy_span,
)
from agentsandbox.controllers.autoscaler.rules import (
    EVENT_AMBIGUOUS_TARGET,
    EVENT_FAILED_GET_SCALE,
    EVENT_FAILED_RESCALE,
    EVENT_SUCCESSFUL_RESCALE,
    REASON_AMBIGUOUS_TARGET,
    REASON_FAILED_UPDATE_SCALE,
    REASON_SUCCEEDED_RESCALE,
    REASON_UNSUPPORTED_TARGET,
    Ownership,
    StatusInput,
    arbitrate,
    build_status,
    condition_reason,
    merge_conditions,
)
from agentsandbox.controllers.autoscaler.settings import Settings, policy_of
from agentsandbox.controllers.autoscaler.source import Windows
from agentsandbox.controllers.common.served import SERVED, ServedCounts
from agentsandbox.controllers.warmpool.plan import NOT_PROGRESSING_REASONS
from agentsandbox.kube.builder import ControllerBuilder
from agentsandbox.kube.controller import Controller
from agentsandbox.kube.errors import Conflict, KubeError
from agentsandbox.kube.events import EventRecorder
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.predicate import GenerationChangedPredicate
from agentsandbox.kube.reconcile import Request, Result
from agentsandbox.kube.store import KubeObject

log = logging.getLogger("agentsandbox.autoscaler")


CONTROLLER_NAME = "sandboxwarmpoolautoscaler"
REPORTING_CONTROLLER = "warmpool-autoscaler"
CONFLICT_RECHECK = 1.0


@dataclass
class AutoscalerMemory:
    uid: str
    plan: Memory = field(default_factory=Memory)
    ownership: Ownership | None = None
    # the status write of ours the cache may not show yet: (rv written on, rv returned), and
    # the status it wrote
    written: tuple[str, str] | None = None
    last_status: dict[str, Any] | None = None
    failure: str | None = None  # the last failure announced by an Event
    seeded: bool = False  # the current size entered as a recommendation (first pass)


class AutoscalerReconciler:
    """Sizes each SandboxWarmPoolAutoscaler's target through its ``/scale``."""

    def __init__(
        self,
        writer: ScaleWriter,
        autoscalers: Informer,
        claims: Informer,
        sandboxes: Informer,
        pools: Informer,
        recorder: EventRecorder | None,
        settings: Settings | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] | None = None,
        served: ServedCounts | None = None,
    ) -> None:
        self.writer = writer
        # the claim controller's counts of the claims each pool served warm and cold
        self.served = SERVED if served is None else served
        self.autoscalers = autoscalers
        self.pools = pools
        self.sandboxes = sandboxes
        self.recorder = recorder
        self.settings = settings or Settings()
        self.clock = clock
        # refill times on a monotonic clock: time.monotonic with the real wall clock, else the
        # injected one (tests move one clock)
        if monotonic is None:
            monotonic = time.monotonic if clock is time.time else clock
        self.bin_width = (
            self.settings.burst_bin
            if self.settings.burst_bin is not None
            else Policy(0, 0, 0.5).bin_width
        )
        self.windows = Windows(self.settings.rate_window, clock, monotonic, self.bin_width)
        self._memory: dict[str, AutoscalerMemory] = {}
        # the indexes, the claim and sandbox handlers feeding the windows, the pool mapping
        self.watches = AutoscalerWatches(self.windows, autoscalers, claims, sandboxes, pools)

    # ---------------------------------------------------------------- observe
    def rivals(self, autoscaler: KubeObject) -> list[str]:
        """The names of the other live autoscalers targeting the same SandboxWarmPool."""
        uid = autoscaler["metadata"].get("uid")
        return [
            str(other["metadata"]["name"])
            for key in target_index(autoscaler)
            for other in self.autoscalers.by_index(TARGET_INDEX, key)
            if other["metadata"].get("uid") != uid
            and not other["metadata"].get("deletionTimestamp")
        ]

    def shared_template(self, namespace: str, pool_name: str) -> str | None:
        """The SharedTemplate message when other pools of the target's template have a live
        autoscaler: each of them counts every claim that names the template."""
        pool = self.pools.get(pool_name, namespace)
        template = (((pool or {}).get("spec") or {}).get("sandboxTemplateRef") or {}).get("name")
        if not template:
            return None
        others = []
        for other in self.pools.by_index(POOL_TEMPLATE_INDEX, f"{namespace}/{template}"):
            name = str(other["metadata"]["name"])
            if name == pool_name:
                continue
            autoscalers = sorted(
                str(a["metadata"]["name"])
                for a in self.autoscalers.by_index(TARGET_INDEX, f"{namespace}/{name}")
                if not a["metadata"].get("deletionTimestamp")
            )
            if autoscalers:
                others.append(f"{name} (autoscaler {', '.join(autoscalers)})")
        if not others:
            return None
        return (
            f"SandboxTemplate {template} is also the template of the autoscaled pools "
            f"{', '.join(sorted(others))}: a claim naming the template (warmpool absent or "
            f"default) is counted by each of the {len(others) + 1} pools' autoscalers, so "
            "together they are sized for those claims several times over; claims that name "
            "their pool (warmPoolRef, or warmpool: <pool>) are counted once"
        )

    def claim_keys_of(self, namespace: str, pool_name: str) -> list[str]:
        """The windows' keys of a pool's claims: by pool, and by its template."""
        pool = self.pools.get(pool_name, namespace)
        keys = [f"{namespace}/pool/{pool_name}"]
        template = ((pool or {}).get("spec") or {}).get("sandboxTemplateRef") or {}
        if template.get("name"):
            keys.append(f"{namespace}/template/{template['name']}")
        return keys

    def observe(self, namespace: str, pool_name: str, current: int) -> Observation:
        pool = self.pools.get(pool_name, namespace)
        keys = self.claim_keys_of(namespace, pool_name)
        now = self.clock()
        # the circuit breaker's inputs: the pool's Ready condition, and its not-Ready members'
        # age (creationTimestamp is the API server's clock: a skew of seconds against a limit
        # of minutes)
        cond = find_condition(((pool or {}).get("status") or {}).get("conditions"), "Ready") or {}
        stuck = cond.get("status") != TRUE and cond.get("reason") in NOT_PROGRESSING_REASONS
        created = [
            parse_rfc3339(str(sb["metadata"]["creationTimestamp"])).timestamp()
            for sb in self.sandboxes.by_index(POOL_MEMBER_INDEX, f"{namespace}/{pool_name}")
            if not is_sandbox_ready(sb)
            and not sb["metadata"].get("deletionTimestamp")
            and sb["metadata"].get("creationTimestamp")
        ]
        ready, not_ready, cold = self.served.window(namespace, pool_name)
        total_ready, total_not_ready, total_cold = self.served.snapshot(namespace, pool_name)
        return Observation(
            now=now,
            arrivals=(),
            bins=self.windows.bins_for(keys),
            served=(ready + not_ready, cold),
            served_total=(total_ready + total_not_ready, total_cold),
            refill_seconds=[
                s + self.settings.slot_extra
                for s in self.windows.refills_for(f"{namespace}/{pool_name}")
            ],
            current_replicas=current,
            oldest_not_ready_age=max(0.0, now - min(created)) if created else None,
            pool_progressing=not stuck,
            pool_condition=f"{cond.get('reason')}: {cond.get('message') or ''}".rstrip(": ")
            if stuck
            else "",
            last_ready_age=self.windows.last_ready_age(f"{namespace}/{pool_name}"),
        )

    def _memory_of(self, autoscaler: KubeObject) -> AutoscalerMemory:
        meta = autoscaler["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        uid = str(meta.get("uid", ""))
        memory = self._memory.get(key)
        if memory is None or memory.uid != uid:
            memory = self._memory[key] = AutoscalerMemory(uid)
            memory.ownership = Ownership.from_status(
                meta.get("generation"), autoscaler.get("status") or {}
            )
        return memory

    # ---------------------------------------------------------------- reconcile
    async def reconcile(self, req: Request) -> Result | None:
        autoscaler = self.autoscalers.get(req.name, req.namespace)
        if autoscaler is None:
            self._memory.pop(str(req), None)
            remove_series(req.namespace, req.name)
            return None
        if autoscaler["metadata"].get("deletionTimestamp"):
            return None
        memory = self._memory_of(autoscaler)
        meta = autoscaler["metadata"]
        generation = int(meta.get("generation") or 0)
        spec = autoscaler.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
        target_text = f"{ref.get('kind')}/{ref.get('name')}"
        shared = (
            self.shared_template(req.namespace, str(ref.get("name")))
            if is_sandbox_warm_pool(str(ref.get("apiVersion")), str(ref.get("kind")))
            else None
        )
        now = self.clock()
        now_text = format_rfc3339(datetime.fromtimestamp(now, UTC))
        requeue = self.settings.sync_period

        rivals = self.rivals(autoscaler)
        if rivals:
            # two autoscalers of one pool would undo each other's sizes: as an HPA with an
            # ambiguous selector, none of them writes until one is left (each re-checks every
            # sync period, so deleting the others lets the last one resume within one)
            names = ", ".join(sorted([str(meta["name"]), *rivals]))
            message = (
                f"{target_text} is the target of {len(rivals) + 1} autoscalers ({names}): none of "
                "them scales it until only one is left"
            )
            self._event(
                autoscaler,
                "Warning",
                EVENT_AMBIGUOUS_TARGET,
                message,
                memory,
                key=REASON_AMBIGUOUS_TARGET,
            )
            stopped = (FALSE, REASON_AMBIGUOUS_TARGET, message)
            await self._write_status(
                autoscaler,
                memory,
                StatusInput(generation, None, None, stopped, stopped, shared_template=shared),
                now_text,
            )
            return Result(requeue_after=requeue)

        try:
            resource = await self.writer.resolve(
                str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")
            )
            scale = await self.writer.read_scale(resource, req.namespace, str(ref.get("name")))
        except TargetError as err:
            self._event(
                autoscaler, "Warning", EVENT_FAILED_GET_SCALE, err.message, memory, key=err.reason
            )
            failed = (FALSE, err.reason, err.message)
            await self._write_status(
                autoscaler,
                memory,
                StatusInput(generation, None, None, failed, failed, shared_template=shared),
                now_text,
            )
            return Result(requeue_after=requeue)

        memory.failure = None  # the target answered: a later failure is announced again
        if not is_sandbox_warm_pool(str(ref.get("apiVersion")), str(ref.get("kind"))):
            # only an autoscaler stored before the CRD's rule on scaleTargetRef gets here: it
            # reads the target but never writes it
            unsupported = (
                FALSE,
                REASON_UNSUPPORTED_TARGET,
                f"{target_text}: only SandboxWarmPool targets have claim arrivals and refill "
                "times to measure; this autoscaler never scales it",
            )
            await self._write_status(
                autoscaler,
                memory,
                StatusInput(generation, scale.replicas, None, unsupported, unsupported),
                now_text,
            )
            return Result(requeue_after=requeue)

        obs = self.observe(req.namespace, str(ref.get("name")), scale.replicas)
        if not memory.seeded:
            # a new process (or autoscaler) holds the current size for one stabilisation window
            # before any scale-down, as if it had recommended it, and takes back the arrival
            # window a previous process kept in the status (the claims deleted since are in it)
            memory.seeded = True
            kept_status = autoscaler.get("status") or {}
            kept = ArrivalBins.from_status(kept_status.get("window"), self.bin_width)
            memory.plan.restore(kept, obs.now, scale.replicas, kept_status.get("estimates"))
        tripped = memory.plan.breaker_since
        policy = policy_of(spec, self.settings)
        decision = decide(obs, policy, memory.plan)
        self.windows.set_span(
            self.claim_keys_of(req.namespace, str(ref.get("name"))),
            occupancy_span(policy, memory.plan),
        )
        record(req.namespace, req.name, decision, scale.replicas, str(ref.get("name")))
        if decision.stalled and memory.plan.breaker_since != tripped:
            # the circuit breaker tripped in this pass: one Warning per trip
            self._emit(autoscaler, "Warning", decision.reason, decision.message)
        own = memory.ownership or Ownership()
        verdict = arbitrate(generation, own, target_text, scale.replicas, decision.replicas)
        memory.ownership = verdict.ownership
        for type_, reason, note in verdict.events:
            self._emit(autoscaler, type_, reason, note)
        active = (
            FALSE if decision.stalled else TRUE,
            condition_reason(decision.reason),
            decision.message,
        )
        window = memory.plan.window
        status_in = StatusInput(
            generation,
            scale.replicas,
            decision,
            verdict.able,
            active,
            shared_template=shared,
            window=None if window is None else window.to_status(before=obs.now),
            estimates=memory.plan.estimates(),
        )
        if verdict.write is None:
            written = await self._write_status(autoscaler, memory, status_in, now_text)
            return Result(requeue_after=requeue if written else min(requeue, CONFLICT_RECHECK))

        # announce the recommendation first (a restart then knows the value is ours), then write
        announced = (autoscaler.get("status") or {}).get("desiredReplicas") == verdict.write
        if not announced and not await self._write_status(autoscaler, memory, status_in, now_text):
            return Result(requeue_after=CONFLICT_RECHECK)
        try:
            outcome = await self.writer.write_scale(
                resource, req.namespace, str(ref.get("name")), verdict.write, scale
            )
        except KubeError as err:
            failed = (
                FALSE,
                REASON_FAILED_UPDATE_SCALE,
                f"setting {target_text} to {verdict.write}: {err}",
            )
            self._emit(autoscaler, "Warning", EVENT_FAILED_RESCALE, failed[2])
            await self._write_status(
                autoscaler,
                memory,
                StatusInput(
                    generation, scale.replicas, decision, failed, active, shared_template=shared
                ),
                now_text,
            )
            raise
        if outcome == CONFLICT:  # the target changed since we read it: look again
            return Result(requeue_after=CONFLICT_RECHECK)
        note = (
            f"New size: {verdict.write} (was {scale.replicas}); reason: {decision.reason}: "
            f"{decision.message}"
        )
        log.info(
            "scaled target",
            extra={
                "autoscaler": str(req),
                "target": target_text,
                "from": scale.replicas,
                "to": verdict.write,
            },
        )
        self._emit(autoscaler, "Normal", EVENT_SUCCESSFUL_RESCALE, note)
        memory.ownership = Ownership(generation, frozenset({verdict.write}))
        done = StatusInput(
            generation,
            verdict.write,
            decision,
            (TRUE, REASON_SUCCEEDED_RESCALE, f"set {target_text} to {verdict.write} replicas"),
            active,
            last_scaled=verdict.write,
            last_scale={
                "time": now_text,
                "fromReplicas": scale.replicas,
                "toReplicas": verdict.write,
                "reason": condition_reason(decision.reason),
                "message": decision.message,
            },
            shared_template=shared,
        )
        await self._write_status(autoscaler, memory, done, now_text)
        return Result(requeue_after=requeue)

    # ---------------------------------------------------------------- act helpers
    async def _write_status(
        self, autoscaler: KubeObject, memory: AutoscalerMemory, given: StatusInput, now_text: str
    ) -> bool:
        """Write the status if it changed; False after a 409 (the next pass looks again)."""
        meta = autoscaler["metadata"]
        cached_rv = str(meta.get("resourceVersion") or "")
        before = dict(autoscaler.get("status") or {})
        rv = cached_rv
        if memory.written is not None and memory.written[0] == cached_rv:
            rv = memory.written[1]  # our last write is not in the cache yet
            if memory.last_status is not None:
                before = dict(memory.last_status)
        fields, conditions = build_status(before, given, now_text)
        fields["conditions"] = merge_conditions(before.get("conditions"), conditions, now_text)
        if _same(before, fields):
            return True
        try:
            new_rv = await self.writer.write_status(autoscaler, fields, rv)
        except Conflict:
            return False
        memory.written = (cached_rv, new_rv)
        memory.last_status = fields
        return True

    def _emit(self, autoscaler: KubeObject, type_: str, reason: str, note: str) -> None:
        if self.recorder is not None:
            self.recorder.event(autoscaler, type_, reason, note)

    def _event(
        self,
        autoscaler: KubeObject,
        type_: str,
        reason: str,
        note: str,
        memory: AutoscalerMemory,
        *,
        key: str,
    ) -> None:
        """An event for a failure, once per distinct failure (not every sync)."""
        marker = f"{key}:{note}"
        if memory.failure == marker:
            return
        memory.failure = marker
        self._emit(autoscaler, type_, reason, note)


def _same(before: Mapping[str, Any], fields: Mapping[str, Any]) -> bool:
    return all(before.get(k) == v for k, v in fields.items())


def setup(mgr: Manager, settings: Settings | None = None, workers: int = 1) -> Controller:
    """Register the SandboxWarmPoolAutoscaler controller with a manager."""
    settings = settings or Settings()
    autoscalers = mgr.get_informer(SANDBOX_WARM_POOL_AUTOSCALERS)
    pools = mgr.get_informer(SANDBOX_WARM_POOLS)
    reconciler = AutoscalerReconciler(
        ScaleWriter(mgr.client),
        autoscalers,
        mgr.get_informer(SANDBOX_CLAIMS),
        mgr.get_informer(SANDBOXES),
        pools,
        mgr.event_recorder(REPORTING_CONTROLLER),
        settings,
    )
    controller = (
        ControllerBuilder(mgr)
        .named(CONTROLLER_NAME)
        .for_(SANDBOX_WARM_POOL_AUTOSCALERS)
        # the pool's spec (replicas: another writer), not its every status write
        .watches(
            SANDBOX_WARM_POOLS,
            reconciler.watches.for_pool,
            predicates=[GenerationChangedPredicate()],
        )
        .workers(workers)
        .with_min_interval(settings.min_interval)
        .complete(reconciler)
    )
    reconciler.watches.enqueue = controller.enqueue
    return controller
