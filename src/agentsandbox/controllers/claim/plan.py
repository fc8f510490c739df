"""SandboxClaim: the decisions (pure). What a claim asks for, which pool sandbox may serve it,
what adopting one writes, what a cold sandbox looks like, and the claim's status.

Both released client generations are served by one schema (spec extensions §1.4, §9): the 0.4.x
form names a template (``spec.sandboxTemplateRef``, optional ``spec.warmpool`` policy), the 1.0.x
form names a pool (``spec.warmPoolRef``). Which reference is set decides, never the apiVersion.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentsandbox.api import keys
from agentsandbox.api.conditions import find_condition, is_sandbox_ready, set_status_condition
from agentsandbox.api.defaults import apply_sandbox_secure_defaults
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.kinds import SANDBOX, SANDBOX_CLAIM, SANDBOX_WARM_POOL
from agentsandbox.api.owners import controller_of, controller_reference
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

RESTRICTED_DOMAINS = ("kubernetes.io", "k8s.io", "agents.x-k8s.io")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

# pool labels a claimed sandbox sheds (the template-ref hash stays: upstream #864)
POOL_LABELS = (
    keys.LABEL_WARM_POOL_SANDBOX,
    keys.LABEL_SANDBOX_POD_TEMPLATE_HASH,
    keys.LABEL_SANDBOX_TEMPLATE_HASH,
)


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
    try:
        state = json.loads(raw)
    except (TypeError, ValueError):
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
    """Spec §5.8: (expired, seconds left) from ``spec.lifecycle`` — the earlier of
    ``shutdownTime`` and the claim's own ``Finished`` time + ``ttlSecondsAfterFinished``."""
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
) -> str | None:
    """Why ``sb`` may not serve a claim in ``namespace`` built from ``template``, or None.

    ``pool`` is the sandbox's controlling pool as cached (None if unknown): under a ``Recreate``
    pool a stale sandbox is about to be replaced and must not be handed out (upstream #1078).
    """
    meta = sb.get("metadata") or {}
    if meta.get("namespace") != namespace:
        return (
            f'cross-namespace adoption forbidden: sandbox is in "{meta.get("namespace")}", '
            f'claim is in "{namespace}"'
        )
    if not adoptable(sb):
        return "sandbox is not an adoptable pool sandbox"
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
        sb, template, pod_hash, {}, orphan=False
    ):
        return "stale under a Recreate pool"
    return None


# ---------------------------------------------------------------------------------- metadata
def _domain(key: str) -> str:
    return key.split("/", 1)[0].lower() if "/" in key else ""


def _key_problem(key: str) -> str | None:
    """Kubernetes qualified-name syntax: an optional DNS-subdomain prefix and a name of at most
    63 characters."""
    prefix, _, name = key.rpartition("/")
    if "/" in prefix:
        return "a key has at most one '/'"
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f'prefix "{prefix}" must be a lower-case DNS subdomain'
    if not name or len(name) > 63 or not _NAME.match(name):
        return (
            "name part must be 1-63 characters of alphanumerics, '-', '_' or '.', starting and "
            "ending with an alphanumeric character"
        )
    return None


def validate_additional_metadata(extra: Obj | None) -> str | None:
    """The rules for ``additionalPodMetadata`` (spec §5.7 and §9): valid keys, no system domains,
    valid label values, and never ``app=sandbox-router`` (that label is the ingress the default
    NetworkPolicy admits). The error text, or None."""
    if not extra:
        return None
    for kind, entries in (("label", extra.get("labels")), ("annotation", extra.get("annotations"))):
        for key, value in (entries or {}).items():
            problem = _key_problem(str(key))
            if problem is not None:
                return f'failed to validate {kind} "{key}": invalid key: {problem}'
            domain = _domain(key)
            if any(domain == d or domain.endswith("." + d) for d in RESTRICTED_DOMAINS):
                return (
                    f'failed to validate {kind} "{key}": restricted system domain: "{key}" is '
                    "not allowed in AdditionalPodMetadata"
                )
            if kind == "label" and (len(str(value)) > 63 or not _LABEL_VALUE.match(str(value))):
                return (
                    f'failed to validate label "{key}": invalid label value: "{value}" does not '
                    "match allowed pattern: must be no more than 63 characters and consist of "
                    "alphanumeric characters, '-', '_' or '.', starting and ending with an "
                    "alphanumeric character"
                )
            if kind == "label" and key == keys.LABEL_APP and value == keys.SANDBOX_ROUTER_APP:
                return (
                    f'failed to validate label "{key}": "{key}={value}" is reserved for the '
                    "sandbox router (the default NetworkPolicy admits traffic from it)"
                )
    return None


def merge_pod_metadata(base: Obj, extra: Obj | None) -> dict[str, Any]:
    """``base`` (pod template metadata) plus the claim's extras; a key the template sets to
    another value is a conflict (:class:`ClaimFailure` ``InvalidMetadata``)."""
    out: dict[str, Any] = {
        "labels": dict(base.get("labels") or {}),
        "annotations": dict(base.get("annotations") or {}),
    }
    for kind, plural in (("label", "labels"), ("annotation", "annotations")):
        for key, value in ((extra or {}).get(plural) or {}).items():
            have = out[plural].get(key)
            if have is not None and have != value:
                raise ClaimFailure(
                    REASON_INVALID_METADATA,
                    f'metadata override conflict: {kind} "{key}" is defined in template with '
                    f'value "{have}", but claim requests "{value}"',
                )
            out[plural][key] = value
    return {k: v for k, v in out.items() if v}


def claimed_pod_metadata(claim: Obj, template: Obj | None, current: Obj | None) -> dict[str, Any]:
    """The pod template metadata of a claimed sandbox: the template's pod metadata (or, without
    a template, what the sandbox has minus the pool labels), the claim's UID and template-ref
    hash, then the claim's additional pod metadata."""
    if template is not None:
        base = copy.deepcopy((template.get("spec") or {}).get("podTemplate", {}).get("metadata"))
        ref_hash = name_hash(template["metadata"]["name"])
    else:
        base = copy.deepcopy(dict(current or {}))
        for label in POOL_LABELS:
            (base.get("labels") or {}).pop(label, None)
        ref_hash = (base.get("labels") or {}).get(keys.LABEL_SANDBOX_TEMPLATE_REF_HASH, "")
    base = dict(base or {})
    labels = dict(base.get("labels") or {})
    labels[keys.LABEL_CLAIM_UID] = claim["metadata"]["uid"]
    if ref_hash:
        labels[keys.LABEL_SANDBOX_TEMPLATE_REF_HASH] = ref_hash
    base["labels"] = labels
    return merge_pod_metadata(base, (claim.get("spec") or {}).get("additionalPodMetadata"))


def _map_patch(old: Obj | None, new: Obj) -> dict[str, Any]:
    """Merge-patch entries turning map ``old`` into ``new`` (null removes a key)."""
    old = old or {}
    patch: dict[str, Any] = {k: None for k in old if k not in new}
    patch.update({k: v for k, v in new.items() if old.get(k) != v})
    return patch


# ---------------------------------------------------------------------------------- adoption
def _without_pool_eviction(pod_meta: Obj, template: Obj | None) -> Obj:
    """The pool's ``safe-to-evict: "true"`` (``--enable-warm-pool-eviction``) does not follow
    a sandbox out of the pool: dropped unless the template sets that key itself."""
    tpl = ((template or {}).get("spec") or {}).get("podTemplate", {}).get("metadata") or {}
    annotations = pod_meta.get("annotations") or {}
    key = keys.ANNOTATION_SAFE_TO_EVICT
    if annotations.get(key) != "true" or key in (tpl.get("annotations") or {}):
        return pod_meta
    kept = {k: v for k, v in annotations.items() if k != key}
    return {**pod_meta, "annotations": kept}


def adoption_patch(sb: Obj, claim: Obj, template: Obj | None) -> dict[str, Any]:
    """The one merge patch that hands pool sandbox ``sb`` to ``claim`` (spec §5.10, with §9):

    - ``metadata.resourceVersion`` = the version we vetted: the apiserver refuses the patch
      (409) if anyone changed the sandbox since, e.g. another claim adopting it;
    - the claim becomes the only owner (controller, blockOwnerDeletion); the pool lets go;
    - the pool labels go, ``claim-uid`` comes; ``pod-name`` names the sandbox's pod;
    - the pod template metadata becomes the claimed one (:func:`claimed_pod_metadata`), which
      the Sandbox controller then carries to the running pod. The PodSpec is not touched.
    """
    meta = sb.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    new_labels = {k: v for k, v in labels.items() if k not in POOL_LABELS}
    new_labels[keys.LABEL_CLAIM_UID] = claim["metadata"]["uid"]
    new_labels[keys.LABEL_LAUNCH_TYPE] = keys.LAUNCH_TYPE_WARM
    new_labels.update(created_by_label(claim))  # replaces the pool's "controller", if set
    annotations: dict[str, Any] = {}
    current_annotations = meta.get("annotations") or {}
    if current_annotations.get(keys.ANNOTATION_POD_NAME) != meta["name"]:
        annotations[keys.ANNOTATION_POD_NAME] = meta["name"]
    trace = ((claim.get("metadata") or {}).get("annotations") or {}).get(
        keys.ANNOTATION_TRACE_CONTEXT
    )
    if trace and current_annotations.get(keys.ANNOTATION_TRACE_CONTEXT) != trace:
        annotations[keys.ANNOTATION_TRACE_CONTEXT] = trace
    current_pod_meta = (sb.get("spec") or {}).get("podTemplate", {}).get("metadata") or {}
    pod_meta = claimed_pod_metadata(
        claim, template, _without_pool_eviction(current_pod_meta, template)
    )
    pod_patch: dict[str, Any] = {}
    for field in ("labels", "annotations"):
        diff = _map_patch(current_pod_meta.get(field), pod_meta.get(field) or {})
        if diff:
            pod_patch[field] = diff
    metadata: dict[str, Any] = {
        "resourceVersion": meta["resourceVersion"],
        "labels": _map_patch(labels, new_labels),
        "ownerReferences": [controller_reference(claim, SANDBOX_CLAIM)],
    }
    if annotations:
        metadata["annotations"] = annotations
    patch: dict[str, Any] = {"metadata": metadata}
    if pod_patch:
        patch["spec"] = {"podTemplate": {"metadata": pod_patch}}
    return patch


# ---------------------------------------------------------------------------------- cold path
def inject_env(pod_spec: dict[str, Any], env: Sequence[Obj], policy: str) -> None:
    """Spec §5.7 env injection into ``pod_spec`` (in place), or :class:`ClaimFailure`."""
    if policy not in ("Allowed", "Overrides"):
        raise ClaimFailure(
            REASON_ENV_REJECTED,
            "environment variable injection is not allowed by the template policy",
        )
    init = pod_spec.get("initContainers") or []
    regular = pod_spec.get("containers") or []
    names = {c.get("name") for c in [*init, *regular]}
    targeted: dict[str, list[Obj]] = {}
    default: list[Obj] = []
    for var in env:
        target = var.get("containerName")
        if target:
            targeted.setdefault(target, []).append(var)
        else:
            default.append(var)
    for target, vars_ in targeted.items():
        if target not in names:
            raise ClaimFailure(
                REASON_ENV_REJECTED,
                f'target container "{target}" not found in template for environment variable '
                f'"{vars_[0].get("name")}"',
            )
    for container in init:
        _set_env(container, targeted.get(container.get("name"), []), policy)
    for i, container in enumerate(regular):
        wanted = list(targeted.get(container.get("name"), []))
        if i == 0:
            wanted += default
        _set_env(container, wanted, policy)


def _set_env(container: dict[str, Any], wanted: Sequence[Obj], policy: str) -> None:
    if not wanted:
        return
    env = container.setdefault("env", [])
    for var in wanted:
        entry = {"name": var["name"], "value": var.get("value", "")}
        for i, existing in enumerate(env):
            if existing.get("name") == var["name"]:
                if policy != "Overrides":
                    raise ClaimFailure(
                        REASON_ENV_REJECTED,
                        "environment variable override is not allowed by the template policy "
                        f'for variable "{var["name"]}"',
                    )
                env[i] = entry
                break
        else:
            env.append(entry)


def merge_volume_claim_templates(
    base: Sequence[Obj], extra: Sequence[Obj], policy: str
) -> list[dict[str, Any]]:
    """The template's volume claim templates plus the claim's, by the template's
    ``volumeClaimTemplatesPolicy`` (upstream #960): ``Disallowed`` (default) refuses any,
    ``Allowed`` adds new names only, ``Overrides`` may also replace one of the template's."""
    out = [copy.deepcopy(dict(v)) for v in base]
    if not extra:
        return out
    if policy not in ("Allowed", "Overrides"):
        raise ClaimFailure(
            REASON_VCT_ERROR,
            "volume claim templates are not allowed by the template policy "
            "(volumeClaimTemplatesPolicy: Disallowed)",
        )
    for vct in extra:
        name = (vct.get("metadata") or {}).get("name")
        at = next(
            (i for i, v in enumerate(out) if (v.get("metadata") or {}).get("name") == name), None
        )
        if at is None:
            out.append(copy.deepcopy(dict(vct)))
        elif policy == "Overrides":
            out[at] = copy.deepcopy(dict(vct))
        else:
            raise ClaimFailure(
                REASON_VCT_ERROR,
                f'volume claim template "{name}" is defined by the template and the template '
                "policy does not allow overriding it (volumeClaimTemplatesPolicy: Allowed)",
            )
    return out


def created_by_label(claim: Obj) -> dict[str, str]:
    """The claim's ``agents.x-k8s.io/created-by`` label (e.g. ``python-client``), for the
    Sandbox it gets (upstream #1039); empty when the claim has none."""
    value = ((claim.get("metadata") or {}).get("labels") or {}).get(keys.LABEL_CREATED_BY)
    return {keys.LABEL_CREATED_BY: str(value)} if value else {}


def cold_sandbox(claim: Obj, template: Obj) -> dict[str, Any]:
    """The Sandbox a claim creates when no pool sandbox serves it (spec §5.11)."""
    meta = claim["metadata"]
    tspec = template.get("spec") or {}
    spec = claim.get("spec") or {}
    volume_claims = merge_volume_claim_templates(
        tspec.get("volumeClaimTemplates") or [],
        spec.get("volumeClaimTemplates") or [],
        str(tspec.get("volumeClaimTemplatesPolicy") or "Disallowed"),
    )
    pod_template = copy.deepcopy(tspec.get("podTemplate") or {})
    pod_spec = dict(pod_template.get("spec") or {})
    if spec.get("env"):
        inject_env(pod_spec, spec["env"], str(tspec.get("envVarsInjectionPolicy") or ""))
    pod_template["spec"] = apply_sandbox_secure_defaults(template, pod_spec)
    pod_template["metadata"] = claimed_pod_metadata(claim, template, None)
    annotations = {keys.ANNOTATION_SANDBOX_TEMPLATE_REF: template["metadata"]["name"]}
    trace = (meta.get("annotations") or {}).get(keys.ANNOTATION_TRACE_CONTEXT)
    if trace:
        annotations[keys.ANNOTATION_TRACE_CONTEXT] = trace
    sandbox_spec: dict[str, Any] = {"replicas": 1, "podTemplate": pod_template}
    if tspec.get("service") is not None:
        sandbox_spec["service"] = tspec["service"]
    if volume_claims:
        sandbox_spec["volumeClaimTemplates"] = volume_claims
    return {
        "apiVersion": SANDBOX.api_version,
        "kind": SANDBOX.kind,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": {
                keys.LABEL_CLAIM_UID: meta["uid"],
                keys.LABEL_LAUNCH_TYPE: keys.LAUNCH_TYPE_COLD,
                **created_by_label(claim),
            },
            "annotations": annotations,
            "ownerReferences": [controller_reference(claim, SANDBOX_CLAIM)],
        },
        "spec": sandbox_spec,
    }


# ---------------------------------------------------------------------------------- status
def ready_condition(
    claim: Obj, sandbox: Obj | None, failure: ClaimFailure | None, expired: bool = False
) -> dict[str, Any]:
    """Spec §5.9's table (first match wins); a forwarded condition carries the claim's
    generation (upstream #1317)."""
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
) -> dict[str, Any]:
    """The whole claim status: the bound sandbox (name, pod IPs), Ready, Finished mirrored
    (kept as it is when an expired claim has no sandbox left)."""
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
