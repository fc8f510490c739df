"""The SandboxWarmPoolAutoscaler's act step: :class:`ScaleWriter`, its writes to the API.

- the target's ``/scale`` subresource: read (GET), and set (a JSON merge patch of
  ``spec.replicas`` carrying the ``metadata.resourceVersion`` read in the same pass, so a change
  in between — another writer, the pool's own status write — answers 409 and the pass looks
  again instead of overwriting what it did not see);
- its own ``/status`` (a JSON merge patch with the resourceVersion it decided on).

Its only other writes are Events on itself, which the reconciler records through the manager's
recorder.

Nothing else of the target is ever written, so it works with any object that serves ``/scale``
(the RBAC grants ``get``/``patch`` on ``sandboxwarmpools/scale`` only).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from agentsandbox.api.kinds import EXTENSIONS_GROUP, SANDBOX_WARM_POOL, SERVED_VERSIONS
from agentsandbox.api.resources import SANDBOX_WARM_POOL_AUTOSCALERS
from agentsandbox.kube.errors import Conflict, KubeError, NotFound
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
    """A target's ``/scale``: its replicas and the resourceVersion they were read at."""

    replicas: int
    resource_version: str


# What a scale write came to.
SCALED, CONFLICT = "scaled", "conflict"


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
        """GET the target's ``/scale``; a missing target is a :class:`TargetError`."""
        try:
            scale = await self.client.get(resource, name, namespace, subresource=SCALE)
        except NotFound:
            raise TargetError(
                "FailedGetScale", f"{resource.kind} {name!r} not found in namespace {namespace}"
            ) from None
        spec = scale.get("spec") or {}
        meta = scale.get("metadata") or {}
        return Scale(int(spec.get("replicas") or 0), str(meta.get("resourceVersion") or ""))

    async def write_scale(
        self, resource: Resource, namespace: str, name: str, replicas: int, read: Scale
    ) -> str:
        """Set the target's replicas, conditioned on the resourceVersion ``read`` carries.
        Returns :data:`SCALED`, or :data:`CONFLICT` when the target changed since (look again);
        any other error is raised."""
        body: dict[str, Any] = {"spec": {"replicas": replicas}}
        if read.resource_version:
            body["metadata"] = {"resourceVersion": read.resource_version}
        try:
            await self.client.patch(
                resource, name, body, namespace, subresource=SCALE, field_manager=FIELD_MANAGER
            )
        except Conflict:
            return CONFLICT
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
    "SCALED",
    "KubeError",
    "Scale",
    "ScaleWriter",
    "TargetError",
    "is_sandbox_warm_pool",
]
