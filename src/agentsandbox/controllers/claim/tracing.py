"""The SandboxClaim controller's spans (``--enable-tracing``): one trace per claim.

Every reconcile pass of a claim is a ``ReconcileSandboxClaim`` span (upstream's name) whose
parent is the W3C context in the claim's ``opentelemetry.io/trace-context`` annotation, the one
the released client writes when its own tracing is on. So the client's span, every pass, the
adoption or the cold create, the status writes and the pass that makes the claim Ready form one
connected trace::

    <client span>                               (from the annotation)
    └── ReconcileSandboxClaim                   one per pass
        ├── adoptWarmSandbox                    warm: the adoption patch(es)
        ├── createColdSandbox                   cold: the Sandbox create
        ├── writeClaimStatus                    the status patch
        └── claimReady                          the pass that saw Ready turn True

A claim without a usable annotation (missing, not JSON, no valid ``traceparent``) is never an
error: its first pass starts a new trace, and this process remembers that pass's context so that
the claim's later passes join the same trace (until the claim is deleted; not persisted).

Tracing off, each decorated method costs one extra call (see :func:`agentsandbox.kube.tracing.
traced`) and nothing of OpenTelemetry is imported.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Protocol

from agentsandbox.api import keys
from agentsandbox.api.conditions import find_condition
from agentsandbox.controllers.claim.plan import status_patch
from agentsandbox.kube import tracing as kt
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.reconcile import Request, Result
from agentsandbox.kube.store import KubeObject

SPAN_RECONCILE = "ReconcileSandboxClaim"
SPAN_ADOPT = "adoptWarmSandbox"
SPAN_CREATE = "createColdSandbox"
SPAN_WRITE_STATUS = "writeClaimStatus"
SPAN_READY = "claimReady"

ATTR_CLAIM_NAMESPACE = "sandboxclaim.namespace"
ATTR_CLAIM_NAME = "sandboxclaim.name"
ATTR_CLAIM_UID = "sandboxclaim.uid"
ATTR_LAUNCH_TYPE = "sandboxclaim.launch_type"  # "warm" or "cold" (the sandbox's launch-type)
ATTR_ADOPTED = "sandboxclaim.adopted"  # the adoption span: a pool sandbox was adopted
ATTR_READY = "sandboxclaim.ready"  # the Ready status written (or reached, on the parent)
ATTR_READY_REASON = "sandboxclaim.ready_reason"
ATTR_STATUS_CHANGED = "sandboxclaim.status_changed"  # False: nothing to write (no API call)
ATTR_STATUS_WRITTEN = "sandboxclaim.status_written"  # False: the claim changed under us
ATTR_REQUEUE_AFTER = "sandboxclaim.requeue_after_seconds"
ATTR_POOL = "sandboxwarmpool.name"  # the pool drawn from (when the claim could use only one)
ATTR_POOLS = "sandboxwarmpool.candidates"  # the pools the claim could draw from, comma-separated
ATTR_TEMPLATE = "sandboxtemplate.name"
ATTR_SANDBOX = "sandbox.name"

MAX_REMEMBERED = 100_000  # claims without an annotation whose trace this process remembers


class _Reconciler(Protocol):
    claims: Informer


# "<ns>/<name>" -> (claim UID, W3C headers of its first pass) for claims without an annotation
_roots: dict[str, tuple[str, dict[str, str]]] = {}


def claim_carrier(claim: Mapping[str, Any]) -> dict[str, str] | None:
    """The W3C headers of the claim's trace-context annotation (None: missing or malformed)."""
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    return kt.carrier_from_annotation(annotations.get(keys.ANNOTATION_TRACE_CONTEXT))


def claim_attributes(claim: Mapping[str, Any]) -> dict[str, str | None]:
    meta = claim.get("metadata") or {}
    sandbox = ((claim.get("status") or {}).get("sandbox") or {}).get("name")
    return {
        ATTR_CLAIM_NAMESPACE: meta.get("namespace"),
        ATTR_CLAIM_NAME: meta.get("name"),
        ATTR_CLAIM_UID: meta.get("uid"),
        ATTR_SANDBOX: sandbox or None,
    }


def _requeue(result: Result | None) -> dict[str, float | None]:
    after = None if result is None else result.requeue_after
    return {ATTR_REQUEUE_AFTER: after}


def reconcile_span(
    fn: Callable[[Any, Request], Coroutine[Any, Any, Result | None]],
) -> Callable[[Any, Request], Coroutine[Any, Any, Result | None]]:
    """Decorate ``ClaimReconciler.reconcile``: the pass runs in a ``ReconcileSandboxClaim`` span
    parented by the claim's annotation (or the claim's remembered first pass). No span for a
    claim that is gone or being deleted."""

    @functools.wraps(fn)
    async def wrapper(self: _Reconciler, req: Request) -> Result | None:
        if not kt.enabled():
            return await fn(self, req)
        key = f"{req.namespace}/{req.name}"
        claim = self.claims.get(req.name, req.namespace)
        if claim is None:
            _roots.pop(key, None)
            return await fn(self, req)
        meta = claim["metadata"]
        if meta.get("deletionTimestamp"):
            return await fn(self, req)
        carrier = claim_carrier(claim)
        remember = False
        if carrier is None:
            seen = _roots.get(key)
            if seen is not None and seen[0] == meta.get("uid"):
                carrier = seen[1]
            else:
                remember = True
        with kt.span(SPAN_RECONCILE, carrier=carrier, attributes=claim_attributes(claim)) as s:
            if remember:
                if len(_roots) >= MAX_REMEMBERED:
                    _roots.pop(next(iter(_roots)))
                _roots[key] = (str(meta.get("uid")), kt.current_carrier())
            result = await fn(self, req)
            kt.set_attributes(s, _requeue(result))
            return result

    return wrapper


# ------------------------------------------------------------------------- child spans
def _adopt_attributes(
    _self: object, claim: KubeObject, template: KubeObject, pools: Sequence[KubeObject], *_: Any
) -> dict[str, str | None]:
    names = [str(p["metadata"]["name"]) for p in pools]
    return {
        ATTR_TEMPLATE: template["metadata"]["name"],
        ATTR_POOLS: ",".join(names),
        ATTR_POOL: names[0] if len(names) == 1 else None,
    }


def _adopted(sandbox: KubeObject | None) -> dict[str, str | bool | None]:
    if sandbox is None:
        return {ATTR_ADOPTED: False}
    return {
        ATTR_ADOPTED: True,
        ATTR_LAUNCH_TYPE: keys.LAUNCH_TYPE_WARM,
        ATTR_SANDBOX: sandbox["metadata"]["name"],
    }


def _create_attributes(
    _self: object, claim: KubeObject, template: KubeObject, *_: Any
) -> dict[str, str]:
    return {ATTR_TEMPLATE: template["metadata"]["name"]}


def _created(sandbox: KubeObject) -> dict[str, str]:
    return {ATTR_LAUNCH_TYPE: keys.LAUNCH_TYPE_COLD, ATTR_SANDBOX: sandbox["metadata"]["name"]}


def _status_attributes(
    _self: object, claim: KubeObject, status: Mapping[str, Any], *_: Any
) -> dict[str, str | bool | None]:
    ready = find_condition(status.get("conditions"), "Ready") or {}
    return {
        ATTR_STATUS_CHANGED: status_patch(claim.get("status") or {}, status) is not None,
        ATTR_READY: ready.get("status"),
        ATTR_READY_REASON: ready.get("reason"),
        ATTR_SANDBOX: (status.get("sandbox") or {}).get("name") or None,
    }


def _written(written: bool) -> dict[str, bool]:
    return {ATTR_STATUS_WRITTEN: written}


def _ready_attributes(
    _self: object, key: str, claim: KubeObject, sandbox: KubeObject | None, *_: Any
) -> dict[str, str | None]:
    labels = ((sandbox or {}).get("metadata") or {}).get("labels") or {}
    return {
        ATTR_SANDBOX: ((sandbox or {}).get("metadata") or {}).get("name"),
        ATTR_LAUNCH_TYPE: labels.get(keys.LABEL_LAUNCH_TYPE),
    }


def _reached_ready(_: object) -> dict[str, str]:
    return {ATTR_READY: "True"}


adopt_span = kt.traced(SPAN_ADOPT, _adopt_attributes, _adopted, on_parent=True)
create_span = kt.traced(SPAN_CREATE, _create_attributes, _created, on_parent=True)
status_span = kt.traced(SPAN_WRITE_STATUS, _status_attributes, _written)
ready_span = kt.traced(SPAN_READY, _ready_attributes, _reached_ready, on_parent=True)


__all__ = [
    "SPAN_ADOPT",
    "SPAN_CREATE",
    "SPAN_READY",
    "SPAN_RECONCILE",
    "SPAN_WRITE_STATUS",
    "adopt_span",
    "claim_carrier",
    "create_span",
    "ready_span",
    "reconcile_span",
    "status_span",
]
