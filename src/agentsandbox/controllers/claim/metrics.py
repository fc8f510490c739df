"""The SandboxClaim controller's metric families (docs/metrics.md, "With `--extensions`: the
SandboxClaim families") and the helpers that record them.

Registered on :data:`agentsandbox.kube.metrics.REGISTRY` when this module is imported; until a
claim is counted they are exposed as ``# HELP``/``# TYPE`` lines without samples (Go's registry
leaves a vector with no children out entirely).

=====================================================  =========  ==========================
family                                                 type       labels
=====================================================  =========  ==========================
``agent_sandbox_claim_startup_latency_ms``             histogram  launch_type, sandbox_template
``agent_sandbox_claim_controller_startup_latency_ms``  histogram  launch_type, sandbox_template
``agent_sandbox_client_claim_startup_latency_ms``      histogram  launch_type, sandbox_template
``agent_sandbox_creation_latency_ms``                  histogram  namespace, launch_type,
                                                                  sandbox_template
``agent_sandbox_claim_creation_total``                 counter    namespace, sandbox_template,
                                                                  launch_type, warmpool_name,
                                                                  pod_condition, created_by
``agent_sandbox_warmpool_claims_served_total``         counter    namespace, pool, served
=====================================================  =========  ==========================

How the controller uses this module:

* every pass, before anything else: :func:`controller_first_observed` — merge the returned
  annotation into the claim (in memory always; persisted unless
  ``--disable-claim-observability-annotations``);
* on a warm adoption or a cold create: :func:`count_claim_creation`, and
  :func:`count_first_serving` (the pool adopted from, else the pool the claim wanted:
  :func:`wanted_pool`; counted only at the claim's :func:`first_serving`);
* when a pool is deleted: :func:`remove_served_series`;
* after the status write that turned the claim's Ready True for the first time:
  :func:`observe_first_ready`, then persist :func:`first_ready_annotations` (a merge patch) so
  that neither a readiness flap nor a restart counts the claim again (upstream #1114, #1087).

Histogram values are whole milliseconds, truncated (Go's ``Duration.Milliseconds()``).
``agent_sandbox_claim_startup_latency_ms`` measures from ``webhook-first-observed-at``, written
by upstream's optional mutating webhook; we have no webhook, so it stays empty unless a claim
carries that annotation from elsewhere. ``client_claim_startup`` measures from
``client-first-requested-at``, which the released Python client (1.0.8) writes with
``datetime.now(UTC).isoformat()`` (``+00:00``, microseconds); Go's RFC 3339 (``Z``, up to nine
fraction digits) parses as well, and a timestamp without a zone is read as UTC.
``agent_sandbox_claim_creation_total`` has upstream HEAD's ``created_by`` label (#1039): the
claim's ``agents.x-k8s.io/created-by`` label (``python-client`` from the 1.0.x client), empty when
the claim has none, ``unknown`` when it is not one of the known values (a bounded set).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from prometheus_client import Counter, Histogram

from agentsandbox.api import keys
from agentsandbox.api.conditions import CONDITION_READY, find_condition
from agentsandbox.api.timefmt import format_rfc3339_nano, parse_rfc3339
from agentsandbox.controllers.common.served import (
    COLD,
    OUTCOMES,
    SERVED,
    WARM_NOT_READY,
    WARM_READY,
    ServedCounts,
)
from agentsandbox.controllers.sandbox.metrics import created_by, launch_type, template_annotation
from agentsandbox.kube.metrics import REGISTRY

#: Upstream's buckets (ms) of the three claim startup histograms: 100 ms .. 4 min.
CLAIM_STARTUP_BUCKETS: Final[tuple[float, ...]] = (
    *(100, 250, 500, 750, 1000, 1250, 1500, 2000, 2500),
    *(5000, 10000, 30000, 60000, 120000, 240000),
)
#: Upstream's buckets (ms) of ``agent_sandbox_creation_latency_ms``: 50 ms .. 10 min.
CREATION_LATENCY_BUCKETS: Final[tuple[float, ...]] = (
    *(50, 100, 250, 500, 1000, 2500, 5000, 10000),
    *(30000, 60000, 120000, 240000, 300000, 600000),
)

LAUNCH_TYPE_UNKNOWN: Final = "unknown"
#: ``sandbox_template`` of the claim metrics when no template is known (upstream #899).
UNKNOWN_TEMPLATE: Final = "__unknown__"
#: ``warmpool_name`` of a cold create.
NO_POOL: Final = "none"
POD_READY: Final = "ready"
POD_NOT_READY: Final = "not_ready"
#: Value of ``agents.x-k8s.io/creation-latency-recorded``.
RECORDED: Final = "true"

CLAIM_STARTUP_LATENCY = Histogram(
    "agent_sandbox_claim_startup_latency_ms",
    "End-to-end latency from a mutating admission webhook first observing the SandboxClaim (the "
    "agents.x-k8s.io/webhook-first-observed-at annotation) to the claim reaching Ready in "
    "milliseconds. Note: Only recorded for claims carrying that annotation.",
    ["launch_type", "sandbox_template"],
    buckets=CLAIM_STARTUP_BUCKETS,
    registry=REGISTRY,
)
CLAIM_CONTROLLER_STARTUP_LATENCY = Histogram(
    "agent_sandbox_claim_controller_startup_latency_ms",
    "Latency from the controller first observing the SandboxClaim to the claim reaching Ready in "
    "milliseconds.",
    ["launch_type", "sandbox_template"],
    buckets=CLAIM_STARTUP_BUCKETS,
    registry=REGISTRY,
)
CLIENT_CLAIM_STARTUP_LATENCY = Histogram(
    "agent_sandbox_client_claim_startup_latency_ms",
    "End-to-end latency from the client-recorded request time (the "
    "agents.x-k8s.io/client-first-requested-at annotation) to the claim reaching Ready in "
    "milliseconds. Note: Only recorded for claims carrying that annotation, and may be affected "
    "by clock skew between the client and controller.",
    ["launch_type", "sandbox_template"],
    buckets=CLAIM_STARTUP_BUCKETS,
    registry=REGISTRY,
)
SANDBOX_CREATION_LATENCY = Histogram(
    "agent_sandbox_creation_latency_ms",
    "Latency from Sandbox creation to the Sandbox Ready condition in milliseconds. Note: For warm "
    "launches the Sandbox is created by the SandboxWarmPool, so this measures the pool's "
    "provisioning time; a claim may adopt the Sandbox before or after it becomes Ready.",
    ["namespace", "launch_type", "sandbox_template"],
    buckets=CREATION_LATENCY_BUCKETS,
    registry=REGISTRY,
)
CLAIM_CREATION_TOTAL = Counter(
    "agent_sandbox_claim_creation_total",
    "Total number of Sandboxes created or adopted for a SandboxClaim.",
    [
        "namespace",
        "sandbox_template",
        "launch_type",
        "warmpool_name",
        "pod_condition",
        "created_by",
    ],
    registry=REGISTRY,
)

WARMPOOL_CLAIMS_SERVED = Counter(
    "agent_sandbox_warmpool_claims_served_total",
    "Claims that asked for a warm pool, counted once at their first serving: warm_ready "
    "(adopted a Ready member of the pool), warm_not_ready (adopted a member not Ready yet) or "
    "cold (none to adopt: a sandbox was made for the claim). pool: the pool adopted from, else "
    "the pool the claim wanted; only pools that exist, removed with the pool.",
    ["namespace", "pool", "served"],
    registry=REGISTRY,
)
#: SERVED (re-exported): this process's served counts, per (namespace, pool), with a 10-minute
#: window in 10 s bins: what the SandboxWarmPoolAutoscaler reads (the claim controller writes it).

Obj = Mapping[str, Any]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


# --- label values ------------------------------------------------------------------------------
def claim_launch_type(sandbox: Obj | None) -> str:
    """``unknown`` without a sandbox, else the Sandbox's launch type
    (:func:`.sandbox_metrics.launch_type`: launch-type label first)."""
    return LAUNCH_TYPE_UNKNOWN if sandbox is None else launch_type(sandbox)


def claim_created_by(claim: Obj) -> str:
    """``created_by`` of ``agent_sandbox_claim_creation_total``: the claim's
    ``agents.x-k8s.io/created-by`` label (upstream #1039), ``""`` when it has none."""
    return created_by(claim)


def claim_template(claim: Obj, sandbox: Obj | None) -> str:
    """The ``sandbox-template-ref`` annotation of the claim's Sandbox (written by the
    controllers from the template they resolved), else ``__unknown__``, as upstream v1.0.1's
    ``resolveTemplateName``. Never the claim's own ``spec.sandboxTemplateRef.name``: the spec
    is mutable, so a user could otherwise pick the label value and grow the series without
    bound)."""
    del claim  # kept in the signature: the label is about the claim's sandbox
    if sandbox is not None:
        return template_annotation(sandbox) or UNKNOWN_TEMPLATE
    return UNKNOWN_TEMPLATE


# --- time --------------------------------------------------------------------------------------
def parse_timestamp(text: object) -> datetime | None:
    """An annotation's timestamp, leniently: RFC 3339 with ``Z`` or an offset, any fraction
    (nanoseconds truncated), Python ``isoformat()``; no zone ⇒ UTC. None if unparsable."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        return parse_rfc3339(text)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _micros(when: datetime) -> int:
    return (when - _EPOCH) // _MICROSECOND


def _elapsed_ms(start: datetime, end_us: int) -> int:
    """Whole milliseconds from ``start`` to ``end_us`` (µs since the epoch), truncated toward
    zero as Go's ``Duration.Milliseconds()``."""
    delta = end_us - _micros(start)
    return delta // 1000 if delta >= 0 else -((-delta) // 1000)


def _now_us(now: float) -> int:
    return round(now * 1_000_000)


def _annotations(obj: Obj) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("annotations") or {}


# --- the controller's calls ----------------------------------------------------------------------
def controller_first_observed(claim: Obj, now: float) -> dict[str, str] | None:
    """The ``agents.x-k8s.io/controller-first-observed-at`` annotation to add (RFC 3339 with
    nanoseconds, UTC) when the claim has none; None when it already carries one."""
    if _annotations(claim).get(keys.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT):
        return None
    when = datetime.fromtimestamp(now, UTC)
    return {keys.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT: format_rfc3339_nano(when)}


def count_claim_creation(
    namespace: str,
    template: str,
    launch_type: str,
    pool: str,
    ready: bool,
    *,
    created_by: str = "",
) -> None:
    """``agent_sandbox_claim_creation_total`` +1: a warm adoption (``warm``, the pool's name,
    the adopted Sandbox's readiness) or a cold create (``cold``, ``none``, not ready). An empty
    template counts as ``__unknown__``, an empty pool as ``none``. ``created_by``:
    :func:`claim_created_by` of the claim."""
    CLAIM_CREATION_TOTAL.labels(
        namespace,
        template or UNKNOWN_TEMPLATE,
        launch_type,
        pool or NO_POOL,
        POD_READY if ready else POD_NOT_READY,
        created_by,
    ).inc()


# --- the served warm share (autoscaler review #18) -------------------------------------------
def served_outcome(warm: bool, ready: bool) -> str:
    """``warm_ready``, ``warm_not_ready`` or ``cold``."""
    if not warm:
        return COLD
    return WARM_READY if ready else WARM_NOT_READY


def first_serving(claim: Obj) -> bool:
    """True when the claim was never served before: its status names no sandbox and it carries
    no first-Ready guard annotation. A claim whose sandbox was lost and is replaced is not
    counted again; nor, after a restart, a claim whose sandbox exists (the controller finds it
    and serves nothing)."""
    named = ((claim.get("status") or {}).get("sandbox") or {}).get("name")
    return not named and not already_recorded(claim)


def wanted_pool(pools: Sequence[Obj]) -> str:
    """The pool a claim served cold is counted under: the one it may draw from, or of several
    (a template with more than one pool) the first by name; ``""`` without any."""
    names = sorted(str(p["metadata"]["name"]) for p in pools)
    return names[0] if names else ""


def count_served(
    namespace: str, pool: str, outcome: str, served: ServedCounts | None = None
) -> None:
    """One claim served: ``agent_sandbox_warmpool_claims_served_total`` +1 and the in-process
    counts (``served``, default :data:`SERVED`). The caller passes only a pool that exists."""
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}")
    WARMPOOL_CLAIMS_SERVED.labels(namespace, pool, outcome).inc()
    (SERVED if served is None else served).add(namespace, pool, outcome)


def count_first_serving(
    claim: Obj,
    pool: str,
    ready: bool | None,
    pools: Any,
    served: ServedCounts | None = None,
) -> None:
    """:func:`count_served` for a claim at its :func:`first_serving`: warm from ``pool``
    (``ready``: the adopted member's Ready) or cold (``ready`` None) for the pool it wanted;
    only when ``pools`` (the pool informer) shows ``pool``: its deletion then removes the
    series, so the label values stay the pools that exist. Nothing for ``pool`` ``""``."""
    ns = str(claim["metadata"]["namespace"])
    if pool and first_serving(claim) and pools.get(pool, ns) is not None:
        count_served(ns, pool, served_outcome(ready is not None, bool(ready)), served)


def remove_served_series(pool: Obj, served: ServedCounts | None = None) -> None:
    """A pool was deleted: drop its series and its in-process counts."""
    namespace, name = str(pool["metadata"].get("namespace", "")), str(pool["metadata"]["name"])
    for outcome in OUTCOMES:
        with contextlib.suppress(KeyError):
            WARMPOOL_CLAIMS_SERVED.remove(namespace, name, outcome)
    (SERVED if served is None else served).forget(namespace, name)


def already_recorded(claim: Obj) -> bool:
    """True when the claim carries either guard annotation (its first Ready was counted)."""
    ann = _annotations(claim)
    return bool(
        ann.get(keys.ANNOTATION_CREATION_LATENCY_RECORDED)
        or ann.get(keys.ANNOTATION_CLAIM_FIRST_READY_AT)
    )


def observe_first_ready(claim: Obj, sandbox: Obj | None, now: float) -> None:
    """Record the latency histograms for a claim whose Ready just turned True (upstream's
    ``recordCreationLatencyMetric``).

    ``claim`` is the claim as written (its new status); ``sandbox`` the Sandbox it owns, if
    known; ``now`` seconds since the epoch. Does nothing when the claim's Ready is not True or
    the claim already carries a guard annotation (:func:`first_ready_annotations`). Each startup
    histogram is skipped when its annotation is missing, unparsable or in the future; the
    creation latency (Sandbox Ready lastTransitionTime - creationTimestamp) when the Sandbox is
    absent, not Ready, lacks either time, or the difference is negative.
    """
    if already_recorded(claim):
        return
    ready = find_condition((claim.get("status") or {}).get("conditions"), CONDITION_READY)
    if ready is None or ready.get("status") != "True":
        return
    launch = claim_launch_type(sandbox)
    template = claim_template(claim, sandbox)
    ann = _annotations(claim)
    end_us = _now_us(now)
    for histogram, key in (
        (CLAIM_STARTUP_LATENCY, keys.ANNOTATION_WEBHOOK_FIRST_OBSERVED_AT),
        (CLAIM_CONTROLLER_STARTUP_LATENCY, keys.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT),
        (CLIENT_CLAIM_STARTUP_LATENCY, keys.ANNOTATION_CLIENT_FIRST_REQUESTED_AT),
    ):
        start = parse_timestamp(ann.get(key))
        if start is None:
            continue
        ms = _elapsed_ms(start, end_us)
        if ms >= 0:
            histogram.labels(launch, template).observe(ms)
    if sandbox is not None:
        ms_or_none = sandbox_creation_ms(sandbox)
        if ms_or_none is not None:
            namespace = str((sandbox.get("metadata") or {}).get("namespace", ""))
            SANDBOX_CREATION_LATENCY.labels(namespace, launch, template).observe(ms_or_none)


def sandbox_creation_ms(sandbox: Obj) -> int | None:
    """Sandbox Ready lastTransitionTime - creationTimestamp in whole ms; None when the Sandbox
    is not Ready, lacks either time, or the difference is negative."""
    created = parse_timestamp((sandbox.get("metadata") or {}).get("creationTimestamp"))
    ready = find_condition((sandbox.get("status") or {}).get("conditions"), CONDITION_READY)
    if created is None or ready is None or ready.get("status") != "True":
        return None
    transition = parse_timestamp(ready.get("lastTransitionTime"))
    if transition is None:
        return None
    ms = _elapsed_ms(created, _micros(transition))
    return ms if ms >= 0 else None


def first_ready_annotations(claim: Obj, now: float) -> dict[str, str]:
    """The guard annotations to persist (merge patch) once :func:`observe_first_ready` ran:
    ``agents.x-k8s.io/creation-latency-recorded: "true"`` and
    ``agents.x-k8s.io/claim-first-ready-at: <now, RFC 3339 with nanoseconds>``. Keys the claim
    already carries (non-empty) are left out; ``{}`` means nothing to write."""
    ann = _annotations(claim)
    out: dict[str, str] = {}
    if not ann.get(keys.ANNOTATION_CREATION_LATENCY_RECORDED):
        out[keys.ANNOTATION_CREATION_LATENCY_RECORDED] = RECORDED
    if not ann.get(keys.ANNOTATION_CLAIM_FIRST_READY_AT):
        when = datetime.fromtimestamp(now, UTC)
        out[keys.ANNOTATION_CLAIM_FIRST_READY_AT] = format_rfc3339_nano(when)
    return out


__all__ = [
    "CLAIM_CONTROLLER_STARTUP_LATENCY",
    "CLAIM_CREATION_TOTAL",
    "CLAIM_STARTUP_BUCKETS",
    "CLAIM_STARTUP_LATENCY",
    "CLIENT_CLAIM_STARTUP_LATENCY",
    "CREATION_LATENCY_BUCKETS",
    "SANDBOX_CREATION_LATENCY",
    "SERVED",
    "UNKNOWN_TEMPLATE",
    "WARMPOOL_CLAIMS_SERVED",
    "already_recorded",
    "claim_created_by",
    "claim_launch_type",
    "claim_template",
    "controller_first_observed",
    "count_claim_creation",
    "count_first_serving",
    "count_served",
    "first_ready_annotations",
    "first_serving",
    "observe_first_ready",
    "parse_timestamp",
    "remove_served_series",
    "sandbox_creation_ms",
    "served_outcome",
    "wanted_pool",
]
