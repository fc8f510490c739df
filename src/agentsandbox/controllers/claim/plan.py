"""SandboxClaim: the decisions (pure): what a claim asks for, which pool sandbox may serve it,
and the claim's status (the Sandbox it gets is shaped in :mod:`.claimed_sandbox`).

Both released client generations are served by one schema (docs/design/claim.md, "Which
template and pools"): the 0.4.x form names a template (``spec.sandboxTemplateRef``, optional
``spec.warmpool`` policy), the 1.0.x form names a pool (``spec.warmPoolRef``). Which reference is
set decides, never the apiVersion.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from agentsandbox.api import keys
from agentsandbox.api.conditions import find_condition, is_sandbox_ready, set_status_condition
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.kinds import SANDBOX_WARM_POOL
from agentsandbox.api.owners import controller_of
from agentsandbox.api.timefmt import parse_rfc3339
from agentsandbox.controllers.warmpool.blueprint import is_sandbox_stale
from agentsandbox.controllers.warmpool.plan import RECREATE, update_strategy

Obj = Mapping[str, Any]

POLICY_NONE = "none"
POLICY_DEFAULT = "default"

# Ready reasons a claim can carry (terminal ones make the 1.0.x client fail at once).
REASON_TEMPLATE_NOT_FOUND = "TemplateNotFound"
REASON_WARM_POOL_NOT_FOUND = "WarmPoolNotFound"
REASON_INVALID_METADATA = "InvalidMetadata"
REASON_ENV_REJECTED = "EnvVarsInjectionRejected"
REASON_VCT_ERROR = "VolumeClaimTemplatesError"
REASON_RECONCILER_ERROR = "ReconcilerError"
REASON_SANDBOX_MISSING = "SandboxMissing"
REASON_SANDBOX_NOT_READY = "SandboxNotReady"
REASON_SANDBOX_EXPIRED = "SandboxExpired"
REASON_CREATE_PENDING = "SandboxCreatePending"
REASON_CLAIM_EXPIRED = "ClaimExpired"
REASON_QUOTA_EXCEEDED = "QuotaExceeded"
# internal: the expired claim's sandbox belongs to someone else (reported as ClaimExpired)
SANDBOX_NOT_OWNED = "SandboxNotOwned"

EVENT_ADOPTED = "SandboxAdopted"
EVENT_PROVISIONED = "SandboxProvisioned"
EVENT_CLAIM_EXPIRED = "ClaimExpired"
EVENT_COLD_START_FORCED = "ColdStartForced"
EVENT_QUOTA_EXCEEDED = "QuotaExceeded"

POLICY_RETAIN = "Retain"
POLICY_DELETE = "Delete"
POLICY_DELETE_FOREGROUND = "DeleteForeground"

MESSAGE_EXPIRED = "Claim expired. Sandbox cleanup initiated."


class ClaimFailure(Exception):
    """A reason the claim cannot be served now. ``terminal``: retrying will not help until the
    user changes something (reported, not retried with backoff)."""

    def __init__(self, reason: str, message: str, *, terminal: bool = True) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.terminal = terminal


# ---------------------------------------------------------------------------------- the ask
@dataclass(frozen=True)
class Source:
    """Where a claim's sandbox comes from."""

    template: str | None  # the template named by the claim (0.4.x form)
    pool: str | None  # a specific pool (1.0.x warmPoolRef, or a 0.4.x policy naming a pool)
    policy: str  # "none", "default" or "pool"
    by_pool_ref: bool  # the pool is the claim's only reference (1.0.x)


SHADOW_POOL_PREFIX = "shadow-pool-"


def migrated_v1alpha1_spec(claim: Obj) -> Obj | None:
    """The v1alpha1 spec of a claim stored by upstream's conversion webhook, or None.

    Upstream's webhook (v1alpha1 served, v1beta1 storage; ``sandboxclaim_conversion.go``) maps a
    v1alpha1 claim with ``warmpool`` ``default``/``none`` to ``warmPoolRef.name:
    shadow-pool-<template>`` (a pool that does not exist) and keeps the whole v1alpha1 object,
    ``json.Marshal``-ed, in the annotation ``api.agents.x-k8s.io/v1alpha1-sandboxclaim-state``:
    ``{"kind":"SandboxClaim","apiVersion":"extensions.agents.x-k8s.io/v1alpha1","metadata":{…},
    "spec":{"sandboxTemplateRef":{"name":…},"warmpool":…,…},"status":{…}}``. A bare spec
    (``{"sandboxTemplateRef":…,"warmpool":…}``) is accepted too. Only when the reference is still
    the shadow pool of the annotated template (upstream's own test before restoring the v1alpha1
    fields) is the claim served as what it was; otherwise the reference is taken as written.

    Any namespace editor writes this annotation: it is parsed with a nesting limit (orjson's,
    1,024 levels), and a value too deep, malformed or not a string is no migration at all.
    """
    spec = claim.get("spec") or {}
    pool_ref = (spec.get("warmPoolRef") or {}).get("name") or ""
    if not pool_ref.startswith(SHADOW_POOL_PREFIX):
        return None
    raw = ((claim.get("metadata") or {}).get("annotations") or {}).get(
        keys.ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE
    )
    if not raw:
        return None
    if not isinstance(raw, str):
        return None
    try:
        state = orjson.loads(raw)
    except (orjson.JSONDecodeError, RecursionError, TypeError, ValueError):
        return None
    if not isinstance(state, dict):
        return None
    inner = state.get("spec")
    old: dict[str, Any] = inner if isinstance(inner, dict) else state
    ref = old.get("sandboxTemplateRef")
    template = ref.get("name") if isinstance(ref, dict) else None
    policy = old.get("warmpool")
    if not isinstance(template, str) or not template or not isinstance(policy, str | None):
        return None
    if pool_ref != SHADOW_POOL_PREFIX + template:
        return None
    return old


def claim_source(claim: Obj) -> Source:
    spec = claim.get("spec") or {}
    pool_ref = (spec.get("warmPoolRef") or {}).get("name")
    migrated = migrated_v1alpha1_spec(claim) if pool_ref else None
    if migrated is not None:
        spec = migrated  # served as the v1alpha1 claim it was: template + policy
    elif pool_ref:
        return Source(template=None, pool=pool_ref, policy="pool", by_pool_ref=True)
    template = (spec.get("sandboxTemplateRef") or {}).get("name") or None
    policy = spec.get("warmpool") or POLICY_DEFAULT
    if policy in (POLICY_NONE, POLICY_DEFAULT):
        return Source(template=template, pool=None, policy=policy, by_pool_ref=False)
    return Source(template=template, pool=policy, policy="pool", by_pool_ref=False)


def forces_cold_start(claim: Obj) -> str | None:
    """The field that makes a pool sandbox unusable for this claim, or None: env and volume
    claims only exist in a pod made for them, and additional pod metadata must be there when the
    pod starts (the Downward API reads it at container start)."""
    spec = claim.get("spec") or {}
    for field in ("env", "volumeClaimTemplates", "additionalPodMetadata"):
        value = spec.get(field)
        if field == "additionalPodMetadata":
            value = value and (value.get("labels") or value.get("annotations"))
        if value:
            return field
    return None


def expiry(claim: Obj, now: float) -> tuple[bool, float | None]:
    """(expired, seconds left) from ``spec.lifecycle`` — the earlier of ``shutdownTime`` and
    the claim's own ``Finished`` time + ``ttlSecondsAfterFinished`` (docs/design/claim.md,
    "Expiry")."""
    lifecycle = (claim.get("spec") or {}).get("lifecycle") or {}
    if not lifecycle:
        return False, None
    terms: list[float] = []
    if lifecycle.get("shutdownTime"):
        terms.append(parse_rfc3339(lifecycle["shutdownTime"]).timestamp())
    ttl = lifecycle.get("ttlSecondsAfterFinished")
    finished = find_condition((claim.get("status") or {}).get("conditions"), "Finished")
    if (
        ttl is not None
        and finished is not None
        and finished.get("status") == "True"
        and finished.get("lastTransitionTime")
    ):
        terms.append(parse_rfc3339(finished["lastTransitionTime"]).timestamp() + float(ttl))
    if not terms:
        return False, None
    at = min(terms)
    return (True, None) if now >= at else (False, at - now)


def shutdown_policy(claim: Obj) -> str:
    return str(((claim.get("spec") or {}).get("lifecycle") or {}).get("shutdownPolicy") or "")


# ---------------------------------------------------------------------------------- candidates
def pool_owner(sb: Obj) -> str | None:
    """The name of the SandboxWarmPool controlling ``sb`` (group and kind checked, any version)."""
    ref = controller_of(sb)
    if ref is None or ref.get("kind") != SANDBOX_WARM_POOL.kind:
        return None
    if str(ref.get("apiVersion", "")).rpartition("/")[0] != SANDBOX_WARM_POOL.group:
        return None
    name = ref.get("name")
    return str(name) if name else None


def adoptable(sb: Obj) -> bool:
    """A live pool sandbox: controlled by a SandboxWarmPool and carrying the pool labels.
    Orphans and sandboxes of any other controller never are (upstream #875)."""
    meta = sb.get("metadata") or {}
    labels = meta.get("labels") or {}
    return (
        not meta.get("deletionTimestamp")
        and bool(labels.get(keys.LABEL_WARM_POOL_SANDBOX))
        and bool(labels.get(keys.LABEL_SANDBOX_TEMPLATE_REF_HASH))
        and pool_owner(sb) is not None
    )


def candidate_problem(
    sb: Obj,
    namespace: str,
    template: Obj,
    pool: Obj | None,
    pod_hash: str,
    *,
    by_pool_ref: bool = False,
    blueprint_hash: str | None = None,
    vetted: dict[str, bool] | None = None,
) -> str | None:
    """Why ``sb`` may not serve a claim in ``namespace`` built from ``template``, or None.

    ``pool`` is the sandbox's controlling pool as cached (None if unknown): under a ``Recreate``
    pool a stale sandbox is about to be replaced and must not be handed out (upstream #1078).
    ``pod_hash``, ``blueprint_hash`` (computed when not given) and the ``vetted`` memo serve
    that staleness test only: one adoption pass computes them once, and only for such a pool.

    ``by_pool_ref``: the claim names only the pool (1.0.x), and ``template`` is the pool's
    current one. Any member of the pool serves it then, whatever template the member was built
    from: an ``OnReplenish`` pool keeps its members across a template change and builds the new
    template's only as replacements. A claim naming a template (0.4.x) gets only sandboxes of
    that template; under ``Recreate`` a member of another template is stale (the pool deletes
    it).
    """
    meta = sb.get("metadata") or {}
    if meta.get("namespace") != namespace:
        return (
            f'cross-namespace adoption forbidden: sandbox is in "{meta.get("namespace")}", '
            f'claim is in "{namespace}"'
        )
    if not adoptable(sb):
        return "sandbox is not an adoptable pool sandbox"
    if not by_pool_ref:
        want = name_hash(template["metadata"]["name"])
        got = (meta.get("labels") or {}).get(keys.LABEL_SANDBOX_TEMPLATE_REF_HASH)
        if got != want:
            return f"incorrect template hash, expected {want}, got {got}"
    if pool is None or pool["metadata"].get("name") != pool_owner(sb):
        return "the sandbox's pool is not known"
    if (controller_of(sb) or {}).get("uid") != pool["metadata"].get("uid"):
        # an owner reference naming the pool but not carrying its UID was not written by it
        return "the sandbox's controller reference does not match its pool"
    if update_strategy(pool) == RECREATE and is_sandbox_stale(
        sb,
        template,
        pod_hash,
        {} if vetted is None else vetted,
        orphan=False,
        blueprint_hash=blueprint_hash,
    ):
        return "stale under a Recreate pool"
    return None


# ---------------------------------------------------------------------------------- status
def ready_condition(
    claim: Obj, sandbox: Obj | None, failure: ClaimFailure | None, expired: bool = False
) -> dict[str, Any]:
    """The table of docs/design/claim.md, "The claim's status" (first match wins); a forwarded
    condition carries the claim's generation (upstream #1317)."""
    generation = (claim.get("metadata") or {}).get("generation")

    def cond(status: str, reason: str, message: str) -> dict[str, Any]:
        out = {"type": "Ready", "status": status, "reason": reason, "message": message}
        if generation is not None:
            out["observedGeneration"] = generation
        return out

    if failure is not None:
        if failure.reason == REASON_RECONCILER_ERROR:
            return cond("False", failure.reason, f"Error seen: {failure.message}")
        if failure.reason == SANDBOX_NOT_OWNED:
            return cond(
                "False",
                REASON_CLAIM_EXPIRED,
                f"Claim expired. {failure.message}; deletion skipped.",
            )
        return cond("False", failure.reason, failure.message)
    if expired:
        return cond("False", REASON_CLAIM_EXPIRED, MESSAGE_EXPIRED)
    if sandbox is None:
        return cond("False", REASON_SANDBOX_MISSING, "Sandbox does not exist")
    ready = find_condition((sandbox.get("status") or {}).get("conditions"), "Ready")
    if ready is not None and ready.get("reason") == REASON_SANDBOX_EXPIRED:
        return cond(
            "False",
            REASON_SANDBOX_EXPIRED,
            "Underlying Sandbox resource has expired independently of the Claim.",
        )
    if ready is not None:
        out = {k: v for k, v in ready.items() if k != "observedGeneration"}
        if generation is not None:
            out["observedGeneration"] = generation
        return out
    return cond("False", REASON_SANDBOX_NOT_READY, "Sandbox is not ready")


def with_ready(claim: Obj, ready: Mapping[str, Any], now: float) -> dict[str, Any]:
    """The claim's current status with only its Ready condition replaced."""
    old = dict(claim.get("status") or {})
    conditions, _ = set_status_condition(
        old.get("conditions"), ready, dt.datetime.fromtimestamp(now, dt.UTC)
    )
    conditions.sort(key=lambda c: str(c.get("type")))
    sandbox = old.get("sandbox") or {}
    return {
        "conditions": conditions,
        "sandbox": {"name": sandbox.get("name") or "", "podIPs": sandbox.get("podIPs") or None},
    }


def claim_status(
    claim: Obj,
    sandbox: Obj | None,
    failure: ClaimFailure | None,
    now: float,
    expired: bool = False,
    *,
    keep_sandbox: bool = False,
) -> dict[str, Any]:
    """The whole claim status: the bound sandbox (name, pod IPs), Ready, Finished mirrored
    (kept as it is when an expired claim has no sandbox left).

    With no ``sandbox``, ``status.sandbox`` is emptied, unless ``keep_sandbox``: the pass failed
    for a reason that says nothing about the sandbox the status names (an API error on the way),
    and the next pass must still find it there."""
    old = claim.get("status") or {}
    when = dt.datetime.fromtimestamp(now, dt.UTC)
    conditions, _ = set_status_condition(
        old.get("conditions"), ready_condition(claim, sandbox, failure, expired), when
    )
    if sandbox is not None or not expired:
        finished = (
            find_condition((sandbox.get("status") or {}).get("conditions"), "Finished")
            if sandbox is not None
            else None
        )
        conditions = [c for c in conditions if c.get("type") != "Finished"]
        if finished is not None:
            conditions.append(dict(finished))
    conditions.sort(key=lambda c: str(c.get("type")))
    status: dict[str, Any] = {"conditions": conditions}
    if sandbox is not None:
        status["sandbox"] = {
            "name": sandbox["metadata"]["name"],
            "podIPs": list((sandbox.get("status") or {}).get("podIPs") or []),
        }
    elif keep_sandbox:
        kept = old.get("sandbox") or {}
        status["sandbox"] = {"name": kept.get("name") or "", "podIPs": kept.get("podIPs") or None}
    else:
        status["sandbox"] = {"name": "", "podIPs": None}
    return status


def with_status(claim: Obj, status: Mapping[str, Any]) -> dict[str, Any]:
    """``claim`` as it will be once ``status`` is written."""
    return {**claim, "status": {**(claim.get("status") or {}), **status}}


def status_patch(old: Obj, new: Obj) -> dict[str, Any] | None:
    """The merge patch turning status ``old`` into ``new``, or None when nothing changed."""
    patch: dict[str, Any] = {}
    if (old.get("conditions") or []) != new["conditions"]:
        patch["conditions"] = new["conditions"]
    old_sb = old.get("sandbox") or {}
    new_sb = new["sandbox"]
    if (old_sb.get("name") or "") != new_sb["name"] or (old_sb.get("podIPs") or None) != (
        new_sb["podIPs"] or None
    ):
        patch["sandbox"] = new_sb
    return patch or None


def pick_kept(owned: Sequence[Obj], status_name: str) -> Obj:
    """Of several sandboxes a claim controls, the one to keep: the one its status names, else
    the oldest Ready, else the oldest."""
    for sb in owned:
        if sb["metadata"]["name"] == status_name:
            return sb

    def age_key(sb: Obj) -> tuple[bool, str, str]:
        meta = sb["metadata"]
        return (not is_sandbox_ready(sb), meta.get("creationTimestamp", ""), meta["name"])

    return sorted(owned, key=age_key)[0]
