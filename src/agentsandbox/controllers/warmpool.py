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
import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from agentsandbox.api import keys
from agentsandbox.api.conditions import find_condition, is_sandbox_ready
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.kinds import SANDBOX_WARM_POOL, TEMPLATE_REF_FIELD
from agentsandbox.api.owners import (
    AlreadyOwnedError,
    controller_of,
    controller_reference,
    with_controller_reference,
)
from agentsandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS, SANDBOXES
from agentsandbox.api.timefmt import parse_rfc3339
from agentsandbox.controllers.podcache import pod_informer
from agentsandbox.kube import metrics as kube_metrics
from agentsandbox.kube.client import Client
from agentsandbox.kube.controller import Controller, ControllerBuilder, Request, Result
from agentsandbox.kube.errors import (
    AlreadyExists,
    ApiConnectionError,
    ApiError,
    Conflict,
    KubeError,
    NotFound,
)
from agentsandbox.kube.events import EventRecorder
from agentsandbox.kube.expectations import Expectations
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.store import KubeObject, index_by_controller_uid

from .batch import BatchCancelled, slow_start_batch
from .warmpool_plan import (
    EVENT_NOT_PROGRESSING,
    ON_REPLENISH,
    REASON_CREATE_FAILED,
    RECREATE,
    Plan,
    Settings,
    Snapshot,
    not_progressing_reason,
    plan,
    pool_replicas,
    transition_event,
)

log = logging.getLogger("agentsandbox.warmpool")

FIELD_MANAGER = "warmpool-controller"
# A pool's pass looks at every member, and each member's status change is an event: while a pool
# fills, events arrive faster than passes finish. Events within this long of a pass's start are
# served by one later pass (bench P5: passes per 1000-fill 2954 -> a few hundred). Claims never
# wait for it (they adopt through the claim controller); a refill starts at most this much later.
POOL_PASS_INTERVAL = 0.1
# pool sandboxes are named here, in generateName's format (see named())
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's util/rand alphabet
NAME_SUFFIX = 5
MAX_GENERATED_PREFIX = 63 - NAME_SUFFIX  # apimachinery's maxGeneratedNameLength
NAME_ATTEMPTS = 3
# a create whose answer a connection error lost is sent again with the same name, this often
LOST_ANSWER_RETRIES = 3
LOST_ANSWER_BACKOFF = 0.5  # seconds, doubled each time


def named(blueprint: Mapping[str, Any]) -> dict[str, Any]:
    """The blueprint with a name chosen here, as the apiserver would from its ``generateName``
    (prefix cut to 58 characters + 5 random characters of the same alphabet), and the Sandbox's
    ``agents.x-k8s.io/pod-name`` annotation already naming its pod. Upstream lets the apiserver
    pick the name, so the Sandbox controller has to write the annotation in a second request
    after the pod exists; naming it here saves that write for every pool sandbox (bench P6).
    ``generateName`` stays in the body (the apiserver stores it, as for upstream's sandboxes)."""
    meta = blueprint["metadata"]
    prefix = str(meta.get("generateName") or "")[:MAX_GENERATED_PREFIX]
    suffix = "".join(secrets.choice(NAME_ALPHABET) for _ in range(NAME_SUFFIX))
    name = prefix + suffix
    annotations = {**(meta.get("annotations") or {}), keys.ANNOTATION_POD_NAME: name}
    return {**blueprint, "metadata": {**meta, "name": name, "annotations": annotations}}


CONTROLLER_NAME = "sandboxwarmpool"
POOL_INDEX = "warm-pool"  # sandboxes by "<namespace>/<pool name hash>"
EVENT_RELEASED = "SandboxReleased"
CONTROLLER_INDEX = "warm-pool-controller"  # sandboxes by their controller's UID
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


# What a delete came to. A Conflict means the sandbox changed (a claim adopting it, a status
# write) or is no longer the object we saw: the normal case of a race, so look again.
DELETED, GONE, CONFLICT, FAILED = "deleted", "gone", "conflict", "failed"
CONFLICT_RECHECK = 1.0  # seconds: look again this soon after a write lost a race
LOST_EVENT_RECHECK = 30.0  # seconds: look again this soon while our writes are unobserved


@dataclass
class Outcome:
    """What acting on one plan came to."""

    errors: list[BaseException] = field(default_factory=list)
    create_error: BaseException | None = None
    conflicts: int = 0


@dataclass
class PoolMemory:
    """What the reconciler remembers about one pool between passes (lost on restart; each
    piece degrades to the seed's behaviour when empty)."""

    uid: str
    held: frozenset[str] = frozenset()
    pod_missing_since: dict[str, float] = field(default_factory=dict)
    # the not-progressing reason last announced by an event (None: progressing)
    reported: str | None = None
    warned_strategy: str | None = None
    # replenish delay (see warmpool_plan.Snapshot): members kept by the last pass, when a
    # departure was last first seen, replacements still waiting
    members: frozenset[str] | None = None
    missing_since: float | None = None
    owed: int = 0
    refill: RefillBucket | None = None


@dataclass
class RefillBucket:
    """``--sandbox-warm-pool-max-refill-rate``: a pool's token bucket. It refills at ``rate``
    tokens per second up to ``max(1, rate)``, starts full, and each create takes one token. The
    time comes from the reconciler's (injectable) clock."""

    rate: float
    tokens: float
    last: float

    @classmethod
    def full(cls, rate: float, now: float) -> RefillBucket:
        return cls(rate, max(1.0, rate), now)

    @property
    def capacity(self) -> float:
        return max(1.0, self.rate)

    def available(self, now: float) -> float:
        if now > self.last:
            self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate)
            self.last = now
        return self.tokens

    def take(self, n: int) -> None:
        self.tokens -= n


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


def _remove_series(ns: str, name: str) -> None:
    """Drop every metric series of a deleted pool."""
    series: list[tuple[Any, tuple[str, ...]]] = [
        (DESIRED, ()),
        (CURRENT, ()),
        (READY, ()),
        (ADOPTIONS, ()),
        (TIME_TO_READY, ()),
        (CREATES, ("success",)),
        (CREATES, ("error",)),
        *((DELETES, (reason,)) for reason in DELETE_REASONS),
    ]
    for metric, extra in series:
        with contextlib.suppress(KeyError):
            metric.remove(ns, name, *extra)


DELETE_REASONS = ("stale", "stuck", "excess")


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
        # set when the controller shuts down: slow-start batches stop between two batches
        self.stopping: asyncio.Event | None = None
        self._memory: dict[str, PoolMemory] = {}  # by "<namespace>/<pool name>"
        self._ready_seen: set[str] = set()  # sandbox UIDs whose first Ready was measured
        sandboxes.add_index(POOL_INDEX, pool_index)
        sandboxes.add_index(CONTROLLER_INDEX, index_by_controller_uid)
        pools.add_index(TEMPLATE_INDEX, template_index)
        sandboxes.add_handler(self._on_add, self._on_update, self._on_delete)
        # pool UID -> set once the pool is deleted (or being deleted): its create batch stops
        self._gone: dict[str, asyncio.Event] = {}
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
        gone = self._gone.pop(uid, None)
        if gone is not None:
            gone.set()

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
            _remove_series(req.namespace, req.name)
            return None
        if pool["metadata"].get("deletionTimestamp"):
            return None
        memory = self._memory_of(key, pool)
        self._warn_unknown_strategy(key, pool, memory)
        snap = self.observe(pool, memory)
        decision = plan(snap)
        outcome = Outcome()
        await self.release(pool, decision.release, outcome)
        skipped = await self.adopt(pool, decision.adopt, outcome)
        if skipped:  # a failed adoption is not counted (the seed's rule): decide again without it
            decision = plan(replace(snap, skip=snap.skip | skipped))
        memory.held = decision.held_uids
        memory.pod_missing_since = decision.pod_missing_since
        memory.members = decision.members
        memory.missing_since, memory.owed = decision.missing_since, decision.owed
        if memory.refill is not None:
            memory.refill.take(decision.create)
        await self.act(pool, decision, outcome)
        try:
            await self.write_status(pool, decision, outcome.create_error, memory)
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

    async def adopt(
        self, pool: KubeObject, orphans: Iterable[Mapping[str, Any]], outcome: Outcome
    ) -> frozenset[str]:
        """Make the pool the controller of each vetted orphan (PUT with its resourceVersion).
        Returns the UIDs whose adoption did not happen: they are not counted this pass."""
        meta = pool["metadata"]
        ns, name = meta["namespace"], meta["name"]
        skipped: set[str] = set()
        for sb in orphans:
            try:
                adopted = with_controller_reference(
                    sb, controller_reference(pool, SANDBOX_WARM_POOL)
                )
                await self.client.update(SANDBOXES, adopted, ns)
            except (NotFound, Conflict, AlreadyOwnedError):
                outcome.conflicts += 1  # gone or changed (another owner?): look again
            except KubeError as err:
                outcome.errors.append(err)
            else:
                ADOPTIONS.labels(ns, name).inc()
                continue
            skipped.add(sb["metadata"]["uid"])
        return frozenset(skipped)

    async def release(
        self, pool: KubeObject, sandboxes: Iterable[Mapping[str, Any]], outcome: Outcome
    ) -> None:
        """Let go of sandboxes the pool controls but no longer labels (another writer removed
        the label): a merge patch dropping the pool's owner reference, preconditioned on the
        resourceVersion we decided on; a 409 or 404 means look again."""
        pmeta = pool["metadata"]
        ns, name, uid = pmeta["namespace"], pmeta["name"], pmeta.get("uid", "")
        for sb in sandboxes:
            meta = sb["metadata"]
            refs = [r for r in meta.get("ownerReferences") or () if r.get("uid") != uid]
            body = {
                "metadata": {"resourceVersion": meta["resourceVersion"], "ownerReferences": refs}
            }
            try:
                await self.client.patch(SANDBOXES, meta["name"], body, ns)
            except (NotFound, Conflict):
                outcome.conflicts += 1
                continue
            except KubeError as err:
                outcome.errors.append(err)
                continue
            log.info(
                "released a sandbox that no longer carries the pool label",
                extra={"pool": f"{ns}/{name}", "sandbox": meta["name"]},
            )
            if self.recorder is not None:
                self.recorder.event(
                    pool,
                    "Normal",
                    EVENT_RELEASED,
                    f'Released sandbox "{meta["name"]}": it no longer carries the pool label',
                    action="Release",
                )

    async def act(self, pool: KubeObject, p: Plan, outcome: Outcome | None = None) -> Outcome:
        """Stale deletes, stuck deletes, then creates or excess deletes (adoptions come first,
        in :meth:`adopt`). Every delete carries the UID and resourceVersion we decided on."""
        outcome = outcome if outcome is not None else Outcome()
        meta = pool["metadata"]
        ns, name, uid = meta["namespace"], meta["name"], meta.get("uid", "")
        key = f"{ns}/{name}"

        for reason, group in (("stale", p.delete_stale), ("stuck", p.delete_stuck)):
            for sb in group:
                if reason == "stuck":
                    log.info(
                        "deleting sandbox not Ready after the grace period",
                        extra={"pool": key, "sandbox": sb["metadata"]["name"]},
                    )
                await self._delete(pool, sb, reason, outcome)

        if p.create and p.blueprint is not None:
            await self._create(pool, p.create, p.blueprint, outcome)

        if p.delete_excess:
            victims = p.delete_excess
            self.expectations.expect_deletions(uid, [v["metadata"]["uid"] for v in victims])
            attempted: set[int] = set()

            async def delete(i: int) -> None:
                attempted.add(i)
                if await self._delete(pool, victims[i], "excess", outcome, record=False) == FAILED:
                    raise _BatchStop()

            try:
                await slow_start_batch(len(victims), 1, delete, stop=self.stopping)
            finally:  # also on cancellation: what was never sent will never be observed
                for i, v in enumerate(victims):
                    if i not in attempted:
                        self.expectations.deletion_failed(uid, v["metadata"]["uid"])
        return outcome

    async def _create(
        self, pool: KubeObject, count: int, blueprint: Mapping[str, Any], outcome: Outcome
    ) -> None:
        meta = pool["metadata"]
        ns, name, uid = meta["namespace"], meta["name"], meta.get("uid", "")
        self.expectations.expect_creations(uid, count)
        ok = 0

        async def create(_: int) -> None:
            nonlocal ok
            try:
                for attempt in range(NAME_ATTEMPTS):
                    try:
                        await self._create_named(named(blueprint), ns, uid)
                        break
                    except AlreadyExists:  # a generated name taken: another one
                        if attempt == NAME_ATTEMPTS - 1:
                            raise
            except Exception:
                CREATES.labels(ns, name, "error").inc()
                raise
            ok += 1
            CREATES.labels(ns, name, "success").inc()

        error: BaseException | None = None
        gone = self._gone.setdefault(uid, asyncio.Event())
        try:
            # the batch (its creates wait in the client's rate limiter) is cancelled the moment
            # the pool is deleted: nothing is created for a pool that is gone
            _, error = await _unless(gone, slow_start_batch(count, 1, create, stop=self.stopping))
        finally:  # failed, never sent, or cancelled: those creates will never be observed
            if ok < count:
                self.expectations.creation_failed(uid, count - ok)
        if isinstance(error, BatchCancelled):
            return  # shutting down, or the pool is gone: the next leader carries on
        if error is not None:
            outcome.create_error = error
            outcome.errors.append(error)

    async def _create_named(self, body: Mapping[str, Any], ns: str, pool_uid: str) -> None:
        """POST one named pool sandbox. A connection error may have lost the answer of a create
        that was done: the same name is sent again (after 0.5, 1, 2 s), and ``AlreadyExists``
        for a sandbox this pool controls then means the first try made it. Without that, the
        next pass (whose cache cannot show a sandbox while the apiserver is unreachable) would
        create another under a new name, and one would be trimmed later."""
        name = body["metadata"]["name"]
        for attempt in range(LOST_ANSWER_RETRIES + 1):
            try:
                await self.client.create(SANDBOXES, body, ns)
                return
            except ApiConnectionError as err:
                if attempt == LOST_ANSWER_RETRIES:
                    raise
                log.info(
                    "pool sandbox create got no answer (%s); sending it again",
                    err,
                    extra={"namespace": ns, "sandbox": name},
                )
                await asyncio.sleep(LOST_ANSWER_BACKOFF * 2**attempt)
            except AlreadyExists:
                if attempt == 0:
                    raise  # the name was taken before we sent it: the caller picks another
                existing = await self.client.get(SANDBOXES, name, ns)
                if (controller_of(existing) or {}).get("uid") == pool_uid:
                    return  # ours: an earlier try whose answer was lost
                raise

    async def _delete(
        self,
        pool: KubeObject,
        sb: Mapping[str, Any],
        reason: str,
        outcome: Outcome,
        *,
        record: bool = True,
    ) -> str:
        """Delete one sandbox if it is still exactly the object we decided on.

        Only the pool's own sandboxes raise expectations (an orphan's deletion is not counted,
        so nothing needs to wait for it)."""
        meta = sb["metadata"]
        pmeta = pool["metadata"]
        ns, name, pool_uid = pmeta["namespace"], pmeta["name"], pmeta.get("uid", "")
        ref = controller_of(sb)
        mine = ref is not None and ref.get("uid") == pool_uid
        if record and mine:
            self.expectations.expect_deletions(pool_uid, [meta["uid"]])
        try:
            await self.client.delete(
                SANDBOXES,
                meta["name"],
                meta["namespace"],
                uid=meta["uid"],
                resource_version=meta.get("resourceVersion"),
                propagation_policy="Background",
            )
        except NotFound:
            self.expectations.deletion_observed(pool_uid, meta["uid"])
            return GONE
        except Conflict:
            # changed since we looked (adopted by a claim, a status write) or replaced: not an
            # error, look again
            self.expectations.deletion_failed(pool_uid, meta["uid"])
            outcome.conflicts += 1
            log.debug(
                "sandbox changed before its delete; looking again",
                extra={"pool": f"{ns}/{name}", "sandbox": meta["name"], "reason": reason},
            )
            return CONFLICT
        except KubeError as err:
            self.expectations.deletion_failed(pool_uid, meta["uid"])
            outcome.errors.append(err)
            return FAILED
        except asyncio.CancelledError:
            self.expectations.deletion_failed(pool_uid, meta["uid"])
            raise
        DELETES.labels(ns, name, reason).inc()
        return DELETED

    async def write_status(
        self,
        pool: KubeObject,
        p: Plan,
        create_error: BaseException | None = None,
        memory: PoolMemory | None = None,
    ) -> None:
        """Write status when it changed (including counts going back to 0); then, once it is
        written, announce a transition with an event (once, however often the pass repeats)."""
        meta = pool["metadata"]
        ns, name = meta["namespace"], meta["name"]
        status = p.status
        if create_error is not None:
            status = _with_create_failure(status, create_error)
        old = pool.get("status") or {}
        DESIRED.labels(ns, name).set(pool_replicas(pool))
        CURRENT.labels(ns, name).set(status["replicas"])
        READY.labels(ns, name).set(status["readyReplicas"])
        if not all(old.get(k) == v for k, v in status.items()):
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
        reported = memory.reported if memory else not_progressing_reason(old)
        event = transition_event(reported, status)
        if memory is not None:
            memory.reported = not_progressing_reason(status)
        if event is not None and self.recorder is not None:
            kind, reason, note = event
            self.recorder.event(pool, kind, reason, note, action="Reconciling")


async def _unless(
    gone: asyncio.Event, work: Coroutine[Any, Any, tuple[int, BaseException | None]]
) -> tuple[int, BaseException | None]:
    """Run a slow-start batch ``work``; cancel it when ``gone`` is set first."""
    if gone.is_set():
        work.close()
        return 0, BatchCancelled()
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(gone.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        return 0, BatchCancelled()
    return task.result()


class _BatchStop(Exception):
    """Ends a slow-start batch after a failed delete (the error is already in the outcome)."""


def _with_create_failure(status: Mapping[str, Any], err: BaseException) -> dict[str, Any]:
    out = dict(status)
    message = err.message if isinstance(err, ApiError) and err.message else str(err)
    conditions = []
    for cond in status.get("conditions", []):
        if cond.get("type") == "Ready":
            cond = {
                **cond,
                "status": "False",
                "reason": REASON_CREATE_FAILED,
                "message": f"creating sandboxes failed: {message}",
            }
        conditions.append(cond)
    out["conditions"] = conditions
    return out


def setup(mgr: Manager, settings: Settings, workers: int = 1) -> Controller:
    """Register the SandboxWarmPool controller with a manager."""
    pools = mgr.get_informer(SANDBOX_WARM_POOLS)
    sandboxes = mgr.get_informer(SANDBOXES)
    templates = mgr.get_informer(SANDBOX_TEMPLATES)
    pods = pod_informer(mgr)
    reconciler = WarmPoolReconciler(
        mgr.client,
        pools,
        sandboxes,
        templates,
        pods,
        mgr.event_recorder("warmpool-controller"),
        settings,
    )
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


__all__ = ["EVENT_NOT_PROGRESSING", "WarmPoolReconciler", "setup"]
