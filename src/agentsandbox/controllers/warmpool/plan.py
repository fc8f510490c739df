"""SandboxWarmPool: the decision step (pure). Snapshot in, plan out; no I/O, no clock reads.

Follows upstream's reconcile order (docs/design/warmpool.md, "The rules, in order"): filter the
listed sandboxes (skip terminating, ignore foreign controllers, vet and adopt orphans, delete stale
ones), replace sandboxes stuck not Ready past the grace period, compute status from what remains,
then create or delete the difference, capped by the batch size. Later upstream fixes and our own
(docs/design/warmpool.md, "Differences from upstream 35b9757f, at a glance"):

- expectations: no creates or excess deletes while earlier writes are not yet visible in the cache;
  creates count the pool's own terminating sandboxes too, so the pool never exceeds
  ``spec.replicas``; when that holds creates back, the pool is looked at again shortly;
- a missing template (or one whose hash cannot be computed): orphans are neither adopted nor
  counted (upstream 35b9757f adopted them unvetted);
- an orphan is never adopted in the pass that deletes it (stale or stuck);
- sandboxes that cannot get a pod (unschedulable, pod creation rejected) are held, not churned;
  once unblocked, a held sandbox gets a fresh grace period from its pod's start;
- a ``Ready`` condition, ``observedGeneration``, and events on transitions.

What the reconciler remembers between passes (sandboxes it held, when it first saw a sandbox
report a pod its cache lacks, orphans whose adoption failed) comes in through the snapshot and
goes out through the plan, so this module stays free of state. The blueprint a create posts
and the staleness rules are in :mod:`.blueprint`.
"""

from __future__ import annotations

import copy
import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentsandbox.api import keys
from agentsandbox.api.conditions import find_condition, is_sandbox_ready, set_status_condition
from agentsandbox.api.gojson import GoJSONError
from agentsandbox.api.hashing import (
    name_hash,
    pod_template_hash,
    sandbox_blueprint_hash,
    warm_pool_selector,
)
from agentsandbox.api.owners import controller_of
from agentsandbox.api.timefmt import parse_rfc3339
from agentsandbox.controllers.warmpool.blueprint import (
    build_blueprint,
    is_sandbox_stale,
    with_eviction_annotation,
)

Obj = Mapping[str, Any]

RECREATE = "Recreate"
ON_REPLENISH = "OnReplenish"

# Ready condition reasons on the pool (ours; upstream later tried and dropped conditions).
REASON_READY = "PoolReady"
REASON_SCALING = "Scaling"
REASON_TEMPLATE_NOT_FOUND = "TemplateNotFound"
REASON_TEMPLATE_ERROR = "TemplateError"
REASON_BLOCKED = "SandboxesBlocked"
REASON_CREATE_FAILED = "SandboxCreateFailed"
REASON_WAITING = "WaitingForCache"

EVENT_NOT_PROGRESSING = "WarmPoolNotProgressing"
EVENT_PROGRESSING = "WarmPoolProgressing"

# Ready reasons under which the pool cannot progress on its own (a Warning event on entry).
NOT_PROGRESSING_REASONS = frozenset(
    {REASON_TEMPLATE_NOT_FOUND, REASON_TEMPLATE_ERROR, REASON_BLOCKED, REASON_CREATE_FAILED}
)

# How long a not-Ready sandbox that reports a pod our pod cache has not seen is given for the
# cache to catch up; after that upstream's stuck rule applies to it as to any other
# (docs/design/warmpool.md, "Stuck sandboxes").
POD_CACHE_WAIT = 10.0
# When creates are held back by the pool's own sandboxes still terminating, look again this soon
# (their deletion events re-queue the pool too; this is the safety net).
HELD_BACK_RECHECK = 5.0


@dataclass(frozen=True)
class Settings:
    max_batch_size: int = 300
    readiness_grace_period: float = 300.0
    unschedulable_recheck_interval: float = 60.0
    # --sandbox-warm-pool-replenish-delay: seconds a replacement for a departed member waits
    replenish_delay: float = 0.0
    # --sandbox-warm-pool-max-refill-rate: creates per second per pool (0: unlimited)
    max_refill_rate: float = 0.0
    # --enable-warm-pool-eviction: pool pods may be evicted by the cluster autoscaler
    warm_pool_eviction: bool = True


@dataclass(frozen=True)
class Snapshot:
    """What one reconcile sees. ``template_error`` is None, ``"NotFound"`` or a message."""

    pool: Obj
    sandboxes: Sequence[Obj]
    template: Obj | None
    template_error: str | None
    now: float
    pods: Mapping[str, Obj] = field(default_factory=dict)
    expectations_satisfied: bool = True
    settings: Settings = Settings()
    # UIDs of sandboxes an earlier pass held as blocked (only they get a fresh grace period)
    held_before: frozenset[str] = frozenset()
    # sandbox UID -> when a pass first saw it report a pod the pod cache lacks
    pod_missing_since: Mapping[str, float] = field(default_factory=dict)
    # orphans to leave alone this pass (their adoption just failed): neither adopted nor counted
    skip: frozenset[str] = frozenset()
    # replenish delay: the members the previous pass kept (None: no earlier pass in this
    # process), when a departure was last first seen, and how many replacements wait for it
    members_before: frozenset[str] | None = None
    missing_since: float | None = None
    owed: int = 0
    # tokens in the pool's refill bucket (None: no --sandbox-warm-pool-max-refill-rate)
    refill_tokens: float | None = None
    # sandboxes the pool controls, found by their controller reference (the members are found
    # by the pool label): one whose label another writer removed is released (see plan)
    controlled: Sequence[Obj] = ()


@dataclass
class Plan:
    delete_stale: list[Obj] = field(default_factory=list)
    adopt: list[Obj] = field(default_factory=list)
    delete_stuck: list[Obj] = field(default_factory=list)
    held: list[tuple[Obj, str]] = field(default_factory=list)
    create: int = 0
    blueprint: dict[str, Any] | None = None
    delete_excess: list[Obj] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)
    requeue_after: float | None = None
    active: int = 0
    ready: int = 0
    strategy: str = ON_REPLENISH
    # creates this pass would have made but did not, because pool sandboxes are still terminating
    held_back: int = 0
    # to remember for the next pass (see Snapshot)
    held_uids: frozenset[str] = frozenset()
    pod_missing_since: dict[str, float] = field(default_factory=dict)
    template_error: str | None = None
    members: frozenset[str] = frozenset()
    missing_since: float | None = None
    owed: int = 0
    # creates this pass did not make: replacements still inside the replenish delay, and
    # creates over the refill rate
    replenish_held: int = 0
    rate_held: int = 0
    # sandboxes the pool controls that no longer carry its label: let go, as a ReplicaSet
    # releases a pod that stops matching its selector (neither counted nor deleted)
    release: list[Obj] = field(default_factory=list)


# ---------------------------------------------------------------------------------- helpers
def update_strategy(pool: Obj) -> str:
    strategy = (pool.get("spec", {}).get("updateStrategy") or {}).get("type") or ON_REPLENISH
    return RECREATE if strategy == RECREATE else ON_REPLENISH


def blocked_reason(sb: Obj, pod: Obj | None) -> str | None:
    """Why a not-Ready sandbox cannot progress on its own, or None.

    Replacing such a sandbox only churns: its successor meets the same quota, admission rule or
    full cluster. So it is held and reported instead (upstream later did the same for
    unschedulable pods).
    """
    if pod is not None:
        for cond in pod.get("status", {}).get("conditions") or []:
            if (
                cond.get("type") == "PodScheduled"
                and cond.get("status") == "False"
                and cond.get("reason") == "Unschedulable"
            ):
                return f"pod unschedulable: {cond.get('message', '')}".strip()
        return None
    ready = find_condition(sb.get("status", {}).get("conditions"), "Ready")
    if ready is not None and ready.get("reason") == "ReconcilerError":
        return str(ready.get("message") or "the sandbox controller cannot create its pod")
    return None


def pool_replicas(pool: Obj) -> int:
    """``spec.replicas``; optional with default 1 (upstream #975). The CRD defaults it; an
    object that never went through that default (an older CRD, a test) means 1 too."""
    value = (pool.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def _created_at(sb: Obj) -> float | None:
    stamp = sb.get("metadata", {}).get("creationTimestamp")
    return parse_rfc3339(stamp).timestamp() if stamp else None


def progress_started(sb: Obj, pod: Obj | None) -> float | None:
    """When a sandbox that was held as blocked last got a chance to become Ready: the latest of
    its creation, its pod's creation and the pod's scheduling. Only for held sandboxes: one held
    back by a quota or a full cluster gets a fresh grace period once it is unblocked, instead of
    being replaced at once as "stuck". Every other sandbox is timed from its own creation
    (upstream's rule), so a pod that keeps being recreated cannot keep its sandbox alive forever
    (docs/design/warmpool.md, "Stuck sandboxes")."""
    start = _created_at(sb)
    if start is None or pod is None:
        return start
    stamps = [start, _created_at(pod) or start]
    scheduled = find_condition((pod.get("status") or {}).get("conditions"), "PodScheduled")
    if scheduled and scheduled.get("status") == "True" and scheduled.get("lastTransitionTime"):
        stamps.append(parse_rfc3339(scheduled["lastTransitionTime"]).timestamp())
    return max(stamps)


def _deletion_order(sandboxes: Sequence[Obj]) -> list[Obj]:
    """Not-Ready first, then newest first (docs/design/warmpool.md, "Replenishing the pool")."""
    return sorted(
        sandboxes,
        key=lambda sb: (is_sandbox_ready(sb), -(_created_at(sb) or 0.0)),
    )


# ---------------------------------------------------------------------------------- decide
def _uid(sb: Obj) -> str:
    return str(sb.get("metadata", {}).get("uid", ""))


def plan(snap: Snapshot) -> Plan:
    pool = snap.pool
    meta = pool["metadata"]
    settings = snap.settings
    out = Plan(strategy=update_strategy(pool))
    out.template_error = snap.template_error
    template = snap.template if snap.template_error is None else None
    pod_hash = blueprint_hash = ""
    if template is not None:
        try:
            pod_hash = pod_template_hash(template.get("spec", {}).get("podTemplate", {}))
            blueprint_hash = sandbox_blueprint_hash(template.get("spec") or {})
        except (GoJSONError, TypeError, ValueError) as err:
            # upstream's template error: no creates, no staleness checks, reported
            out.template_error = (
                f"cannot hash the {'blueprint' if pod_hash else 'pod template'}: {err}"
            )
            template = None

    label = name_hash(meta["name"])
    out.release = [  # the label test first: it rules out every member, cheaply (CPU per pass)
        sb
        for sb in snap.controlled
        if (sb["metadata"].get("labels") or {}).get(keys.LABEL_WARM_POOL_SANDBOX) != label
        and not sb["metadata"].get("deletionTimestamp")
        and (controller_of(sb) or {}).get("uid") == meta["uid"]
    ]
    vetted: dict[str, bool] = {}
    active: list[Obj] = []
    orphans: set[str] = set()
    terminating = 0  # the pool's own sandboxes on their way out
    own_deletes = 0  # the pool's own sandboxes this pass deletes as stale or stuck
    for sb in snap.sandboxes:
        ref = controller_of(sb)
        mine = ref is not None and ref.get("uid") == meta["uid"]
        if sb.get("metadata", {}).get("deletionTimestamp"):
            terminating += mine
            continue
        orphan = ref is None
        if not orphan and not mine:
            continue  # foreign controller: not ours to count or touch
        if orphan and (template is None or _uid(sb) in snap.skip):
            continue  # deviation: never adopt what we cannot vet; a failed adoption is not counted
        if (
            template is not None
            and (out.strategy == RECREATE or orphan)
            and is_sandbox_stale(
                sb, template, pod_hash, vetted, orphan=orphan, blueprint_hash=blueprint_hash
            )
        ):
            out.delete_stale.append(sb)
            own_deletes += mine
            continue
        if orphan:
            orphans.add(_uid(sb))
        active.append(sb)

    # stuck sandboxes: replace after the grace period, unless replacing cannot help
    kept: list[Obj] = []
    held: set[str] = set()
    next_deadline: float | None = None

    def wake_at(t: float) -> None:
        nonlocal next_deadline
        next_deadline = t if next_deadline is None else min(next_deadline, t)

    ready = 0
    for sb in active:
        if is_sandbox_ready(sb):
            kept.append(sb)
            ready += 1
            continue
        uid = _uid(sb)
        pod = snap.pods.get(sb["metadata"]["name"])
        if pod is None and (sb.get("status") or {}).get("replicas"):
            # the Sandbox reports a pod our pod cache has not seen: give the cache a moment
            since = snap.pod_missing_since.get(uid, snap.now)
            out.pod_missing_since[uid] = since
            if snap.now - since < POD_CACHE_WAIT:
                wake_at(since + POD_CACHE_WAIT)
                kept.append(sb)
                continue
        was_held = uid in snap.held_before
        created = progress_started(sb, pod) if was_held else _created_at(sb)
        if created is None:
            kept.append(sb)
            continue
        if snap.now - created > settings.readiness_grace_period:
            reason = blocked_reason(sb, pod)
            if reason is not None:
                out.held.append((sb, reason))
                held.add(uid)
                kept.append(sb)
                continue
            out.delete_stuck.append(sb)
            own_deletes += uid not in orphans
            continue
        if was_held:
            held.add(uid)  # unblocked but not Ready yet: keep its fresh grace period
        wake_at(created + settings.readiness_grace_period)
        kept.append(sb)
    active = kept
    out.held_uids = frozenset(held)
    # adopt only what this pass keeps (never an orphan it is about to delete)
    out.adopt = [sb for sb in active if _uid(sb) in orphans] if orphans else []

    desired = pool_replicas(pool)
    current = len(active)
    out.active, out.ready = current, ready
    # the members by UID matter to the replenish delay only (a set of every member per pass
    # is not free: the pool's CPU cost, docs/benchmarks.md)
    members = frozenset(_uid(sb) for sb in active) if settings.replenish_delay > 0 else frozenset()
    own_deleted = {_uid(sb) for sb in out.delete_stale + out.delete_stuck}
    replenish_due = _replenish_hold(snap, out, members, own_deleted, max(0, desired - current))

    if snap.expectations_satisfied:
        if current < desired and template is not None:
            # never exceed spec.replicas while our old objects are still on their way out
            wanted = min(desired - current, settings.max_batch_size)
            room = desired - current - terminating - own_deletes
            allowed = max(0, min(room, settings.max_batch_size))
            out.held_back = wanted - allowed
            # replacements of departed members wait for the replenish delay; scale-up does not
            unheld = max(0, min(allowed, desired - current - out.owed))
            out.replenish_held = allowed - unheld
            out.create = unheld
            if snap.refill_tokens is not None:
                out.create = min(unheld, max(0, math.floor(snap.refill_tokens)))
                out.rate_held = unheld - out.create
            if out.create:
                out.blueprint = build_blueprint(pool, template, pod_hash, blueprint_hash)
                if settings.warm_pool_eviction:
                    out.blueprint = with_eviction_annotation(out.blueprint, template)
        elif current > desired:
            n = min(current - desired, settings.max_batch_size, current)
            out.delete_excess = _deletion_order(active)[:n]
    out.members = members - {_uid(sb) for sb in out.delete_excess}

    out.status = _status(snap, out, desired, pod_hash)
    requeues = []
    if next_deadline is not None:
        requeues.append(max(next_deadline - snap.now, 0.0) + 1.0)
    if out.held:
        requeues.append(settings.unschedulable_recheck_interval)
    if out.held_back:
        requeues.append(HELD_BACK_RECHECK)
    if replenish_due is not None:
        requeues.append(max(replenish_due - snap.now, 0.0))
    if out.rate_held and snap.refill_tokens is not None and settings.max_refill_rate > 0:
        missing = 1.0 - (snap.refill_tokens - math.floor(snap.refill_tokens))
        requeues.append(missing / settings.max_refill_rate)
    out.requeue_after = min(requeues) if requeues else None
    return out


def _replenish_hold(
    snap: Snapshot, out: Plan, members: frozenset[str], own_deleted: set[str], deficit: int
) -> float | None:
    """The replenish delay (``--sandbox-warm-pool-replenish-delay``): sets ``out.owed`` (the
    replacements that must still wait) and ``out.missing_since``; returns when they are due.

    A member *left* the pool when the previous pass kept it and this pass does not see it as an
    active member, unless this pass deletes it itself (stale, stuck): a claim adopted it, or
    someone deleted it. Counted by UID, so a departure and a new member seen in the same pass do
    not cancel out. Every departure re-arms the hold (``missing_since`` = now); replacements are
    owed at most up to the deficit, so a scale-down forgives them and a scale-up is never held.
    Without a previous pass in this process (start-up, initial fill) nothing is owed.
    """
    delay = snap.settings.replenish_delay
    if delay <= 0:
        return None
    missing_since, owed = snap.missing_since, snap.owed
    if snap.members_before is not None:
        departed = len(snap.members_before - members - own_deleted)
        if departed:
            missing_since, owed = snap.now, owed + departed
    owed = min(owed, deficit)
    if owed <= 0 or missing_since is None or snap.now >= missing_since + delay:
        return None
    out.owed, out.missing_since = owed, missing_since
    return missing_since + delay


def _status(snap: Snapshot, out: Plan, desired: int, pod_hash: str) -> dict[str, Any]:
    pool = snap.pool
    old = pool.get("status") or {}
    conditions = copy.deepcopy(old.get("conditions") or [])
    generation = pool.get("metadata", {}).get("generation")
    if out.template_error == "NotFound":
        ref = pool["spec"]["sandboxTemplateRef"]["name"]
        cond = ("False", REASON_TEMPLATE_NOT_FOUND, f'SandboxTemplate "{ref}" not found')
    elif out.template_error is not None:
        cond = ("False", REASON_TEMPLATE_ERROR, out.template_error)
    elif out.held:
        sb, why = out.held[0]
        cond = (
            "False",
            REASON_BLOCKED,
            f"{len(out.held)} sandbox(es) cannot become Ready, e.g. "
            f'"{sb["metadata"]["name"]}": {why}',
        )
    elif out.active == desired and out.ready == desired:
        cond = ("True", REASON_READY, f"{out.ready}/{desired} sandboxes ready")
    elif not snap.expectations_satisfied:
        cond = ("False", REASON_WAITING, f"{out.ready}/{desired} ready; waiting for earlier writes")
    else:
        cond = ("False", REASON_SCALING, f"{out.ready}/{desired} sandboxes ready")
    conditions, _ = set_status_condition(
        conditions,
        {
            "type": "Ready",
            "status": cond[0],
            "reason": cond[1],
            "message": cond[2],
            "observedGeneration": generation,
        },
        dt.datetime.fromtimestamp(snap.now, dt.UTC),
    )
    status: dict[str, Any] = {
        "replicas": out.active,
        "readyReplicas": out.ready,
        "selector": warm_pool_selector(pool["metadata"]["name"]),
        "conditions": conditions,
    }
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def not_progressing_reason(status: Obj) -> str | None:
    """The Ready reason of a pool status when the pool cannot progress on its own, else None."""
    reason = (find_condition(status.get("conditions"), "Ready") or {}).get("reason")
    return str(reason) if reason in NOT_PROGRESSING_REASONS else None


def transition_event(reported: str | None, new_status: Obj) -> tuple[str, str, str] | None:
    """(type, reason, note) when the pool starts or stops being able to progress.

    ``reported`` is the not-progressing reason last announced for this pool (None: it was
    progressing). A Warning goes out on entering a not-progressing reason or changing to another
    one; a Normal event when the pool can progress again.
    """
    now = not_progressing_reason(new_status)
    message = str((find_condition(new_status.get("conditions"), "Ready") or {}).get("message", ""))
    if now is not None and now != reported:
        return ("Warning", EVENT_NOT_PROGRESSING, message)
    if reported is not None and now is None:
        return ("Normal", EVENT_PROGRESSING, message)
    return None
