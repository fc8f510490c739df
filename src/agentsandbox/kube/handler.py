"""Event mappers: an object from a watch event -> the requests to reconcile (the object itself,
its controlling owner, or whatever a map function says)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .reconcile import Request
from .resources import Resource
from .store import KubeObject

__all__ = [
    "Mapper",
    "api_group",
    "enqueue_for_object",
    "enqueue_for_owner",
    "owner_requests",
]

Mapper = Callable[[KubeObject], Iterable[Request]]
"""Maps an object (from an event) to the requests to enqueue."""


def api_group(api_version: str) -> str:
    """The group part of an ``apiVersion`` (``""`` for the core group's ``v1``)."""
    group, _, _ = api_version.rpartition("/")
    return group


def enqueue_for_object(obj: KubeObject) -> list[Request]:
    """The object's own key (the ``For`` mapping)."""
    return [Request.from_object(obj)]


def owner_requests(
    obj: KubeObject,
    owner_group: str,
    owner_kind: str,
    *,
    controller_only: bool = True,
    owner_namespaced: bool = True,
) -> list[Request]:
    """Requests for ``obj``'s owners of the given group and kind (version is ignored, as owner
    references survive version changes). ``controller_only``: only the reference marked
    ``controller: true``. A cluster-scoped owner gets an empty namespace."""
    meta = obj.get("metadata") or {}
    namespace = (meta.get("namespace") or "") if owner_namespaced else ""
    requests: list[Request] = []
    for ref in meta.get("ownerReferences") or ():
        if controller_only and not ref.get("controller"):
            continue
        if ref.get("kind") != owner_kind or api_group(ref.get("apiVersion") or "") != owner_group:
            continue
        name = ref.get("name")
        if name:
            requests.append(Request(namespace, name))
    return requests


def enqueue_for_owner(
    owner: Resource, *, controller_only: bool = True
) -> Callable[[KubeObject], list[Request]]:
    """The ``Owns`` mapping: the owner of kind ``owner`` that controls the object."""

    def mapper(obj: KubeObject) -> list[Request]:
        return owner_requests(
            obj,
            owner.group,
            owner.kind,
            controller_only=controller_only,
            owner_namespaced=owner.namespaced,
        )

    mapper.__name__ = f"enqueue_for_owner[{owner.kind}]"
    return mapper
