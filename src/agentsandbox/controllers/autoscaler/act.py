"""The SandboxWarmPoolAutoscaler's act step: :class:`ScaleWriter`, its writes to the API.

- the target's ``/scale`` subresource: read (GET), and set (a JSON patch that *tests*
  ``spec.replicas`` against the value read in the same pass, then replaces it). The precondition
  is on the field, not on the object's resourceVersion: the pool controller writes the pool's
  status on every adoption — during a burst, exactly when a scale-up matters — and those writes
  must not fail the scale write; another writer's ``spec.replicas`` in between (an HPA,
  ``kubectl scale``) fails the test (422 Invalid, :func:`failed_test`), and the pass looks
  again instead of overwriting what it did not see;
- its own ``/status`` (a JSON merge patch with the resourceVersion it decided on).

Its only other writes are Events on itself, which the reconciler records through the manager's
recorder.

Nothing else of the target is ever written. The target is a SandboxWarmPool (the CRD refuses
any other ``scaleTargetRef``; the RBAC grants ``get``/``patch`` on ``sandboxwarmpools/scale``
only). A refusal to read it — 403 without that RBAC, or any other client error but a 404 — is a
:class:`TargetError` the reconciler reports, not an exception retried with backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from agentsandbox.api.kinds import EXTENSIONS_GROUP, SANDBOX_WARM_POOL, SERVED_VERSIONS
from agentsandbox.api.resources import SANDBOX_WARM_POOL_AUTOSCALERS
from agentsandbox.kube.client import PatchType
from agentsandbox.kube.errors import ApiError, Conflict, Invalid, KubeError, NotFound
from agentsandbox.kube.resources import Resource

log = logging.getLogger("agentsandbox.autoscaler")

FIELD_MANAGER = "warmpool-autoscaler"
SCALE = "scale"


class ScaleClient(Protocol):
    """The part of :class:`~agentsandbox.kube.client.Client` the act step uses."""

    async def get(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]: ...

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> dict[str, Any]: ...

    async def raw(self, method: str, path: str) -> Any: ...


class TargetError(Exception):
    """The target cannot be scaled (yet); ``reason`` is the condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Scale:
    """A target's ``/scale``: its replicas (what the write tests) and the resourceVersion they
    were read at."""

    replicas: int
    resource_version: str


# What a scale write came to.
SCALED, CONFLICT = "scaled", "conflict"


def refused(err: KubeError) -> bool:
    """A client error that asking again will not change: 4xx but a timeout (408), a conflict
    (409) or too many requests (429). A 404 is handled where it means something."""
    return (
        isinstance(err, ApiError) and 400 <= err.status < 500 and err.status not in (408, 409, 429)
    )


def scale_patch(current: int, desired: int) -> list[dict[str, Any]]:
    """The JSON patch setting a ``/scale``'s replicas from ``current`` (as read) to ``desired``:
    a ``test`` of the value read, then the new value. A Scale (``autoscaling/v1``) leaves
    ``replicas`` out of its JSON when it is 0, so from 0 the test is of an empty ``spec`` and
    the value is added."""
    if current:
        return [
            {"op": "test", "path": "/spec/replicas", "value": current},
            {"op": "replace", "path": "/spec/replicas", "value": desired},
        ]
    return [
        {"op": "test", "path": "/spec", "value": {}},
        {"op": "add", "path": "/spec/replicas", "value": desired},
    ]


#: kube-apiserver's whole answer to a JSON patch that does not apply (a failed ``test``): 422
#: Invalid with this generic message and no causes — the patch library's own words ("testing
#: value /spec/replicas failed") are not sent (checked against kube-apiserver 1.36 by
#: tests/integration/test_autoscaler.py).
PATCH_DID_NOT_APPLY = "the server rejected our request due to an error in our request"


def failed_test(err: KubeError) -> bool:
    """Our ``/scale`` JSON patch did not apply: its ``test`` did not hold (its other operation
    applies to any Scale the test holds for). Any other 422 — the target refusing the value,
    with the field in ``causes`` — is an error to report, not a race."""
    return isinstance(err, Invalid) and not err.causes and err.message == PATCH_DID_NOT_APPLY


def is_sandbox_warm_pool(api_version: str, kind: str) -> bool:
    group, _, version = api_version.rpartition("/")
    return (
        group == EXTENSIONS_GROUP and kind == SANDBOX_WARM_POOL.kind and version in SERVED_VERSIONS
    )


class ScaleWriter:
    """Reads and writes targets' ``/scale`` and the autoscaler's status."""

    def __init__(self, client: ScaleClient) -> None:
        self.client = client
        self._resources: dict[tuple[str, str], Resource] = {}

    async def resolve(self, api_version: str, kind: str) -> Resource:
        """The REST resource of ``kind`` in ``api_version``, which must serve ``/scale``
        (discovery, as an HPA's REST mapper; a success is cached)."""
        key = (api_version, kind)
        found = self._resources.get(key)
        if found is not None:
            return found
        group, _, version = api_version.rpartition("/")
        if not version:
            raise TargetError(
                "InvalidTarget", f"scaleTargetRef.apiVersion {api_version!r} is invalid"
            )
        if is_sandbox_warm_pool(api_version, kind):
            resource = Resource(group, version, SANDBOX_WARM_POOL.plural, kind)
            self._resources[key] = resource
            return resource
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            listing = await self.client.raw("GET", path)
        except NotFound:
            raise TargetError(
                "InvalidTarget", f"the API {api_version} is not served: check scaleTargetRef"
            ) from None
        except KubeError as err:
            if not refused(err):
                raise
            raise TargetError(
                "FailedGetScale", f"reading the API {api_version} to find {kind}: {err}"
            ) from None
        names = {r.get("name") for r in (listing or {}).get("resources") or ()}
        for res in (listing or {}).get("resources") or ():
            name = str(res.get("name") or "")
            if res.get("kind") != kind or "/" in name:
                continue
            if f"{name}/{SCALE}" not in names:
                raise TargetError(
                    "InvalidTarget", f"{kind} ({api_version}) has no /scale subresource"
                )
            resource = Resource(group, version, name, kind, bool(res.get("namespaced", True)))
            self._resources[key] = resource
            return resource
        raise TargetError("InvalidTarget", f"the API {api_version} serves no kind {kind}")

    async def read_scale(self, resource: Resource, namespace: str, name: str) -> Scale:
        """GET the target's ``/scale``; a missing target, or a refusal (:func:`refused`: 403,
        405, ...), is a :class:`TargetError` (``FailedGetScale``) naming the target and the
        error. Anything else (5xx, 429, no connection) is raised: retried with backoff."""
        try:
            scale = await self.client.get(resource, name, namespace, subresource=SCALE)
        except NotFound:
            raise TargetError(
                "FailedGetScale", f"{resource.kind} {name!r} not found in namespace {namespace}"
            ) from None
        except KubeError as err:
            if not refused(err):
                raise
            raise TargetError(
                "FailedGetScale",
                f"reading the /scale of {resource.kind} {name!r} in namespace {namespace}: {err}",
            ) from None
        spec = scale.get("spec") or {}
        meta = scale.get("metadata") or {}
        return Scale(int(spec.get("replicas") or 0), str(meta.get("resourceVersion") or ""))

    async def write_scale(
        self, resource: Resource, namespace: str, name: str, replicas: int, read: Scale
    ) -> str:
        """Set the target's replicas, conditioned on the replicas ``read`` carries (a JSON
        patch test, :func:`scale_patch`): a write of the target's status in between does not
        matter, a write of its replicas does. Returns :data:`SCALED`, or :data:`CONFLICT` when
        the replicas changed since (look again); any other error is raised."""
        try:
            await self.client.patch(
                resource,
                name,
                scale_patch(read.replicas, replicas),
                namespace,
                patch_type=PatchType.JSON,
                subresource=SCALE,
                field_manager=FIELD_MANAGER,
            )
        except Conflict:
            return CONFLICT
        except Invalid as err:
            if failed_test(err):
                return CONFLICT
            raise
        return SCALED

    async def write_status(
        self, autoscaler: Mapping[str, Any], status: Mapping[str, Any], resource_version: str
    ) -> str:
        """Merge-patch the autoscaler's status, conditioned on ``resource_version``; returns
        the new resourceVersion. A 409 (:class:`Conflict`) is raised: the caller looks again."""
        meta = autoscaler["metadata"]
        body = {"metadata": {"resourceVersion": resource_version}, "status": dict(status)}
        answer = await self.client.patch(
            SANDBOX_WARM_POOL_AUTOSCALERS,
            meta["name"],
            body,
            meta["namespace"],
            subresource="status",
            field_manager=FIELD_MANAGER,
        )
        return str((answer.get("metadata") or {}).get("resourceVersion") or "")


__all__ = [
    "CONFLICT",
    "FIELD_MANAGER",
    "PATCH_DID_NOT_APPLY",
    "SCALED",
    "KubeError",
    "Scale",
    "ScaleWriter",
    "TargetError",
    "failed_test",
    "is_sandbox_warm_pool",
    "refused",
    "scale_patch",
]
