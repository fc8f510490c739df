"""Owner references: building them, finding the controller, deciding who owns a child."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from enum import Enum
from typing import Any

from agentsandbox.api import keys
from agentsandbox.api.kinds import Kind

__all__ = [
    "AlreadyOwnedError",
    "Ownership",
    "controller_of",
    "controller_reference",
    "is_adoptable",
    "ownership",
    "with_controller_reference",
]


class Ownership(Enum):
    """How a child relates to a would-be owner, by its *controller* owner reference."""

    UNOWNED = "unowned"
    OWNED = "owned"
    OWNED_BY_OTHER = "owned-by-other"


class AlreadyOwnedError(ValueError):
    """The child already has a different controller (``SetControllerReference`` refuses)."""

    def __init__(self, child: Mapping[str, Any], ref: Mapping[str, Any]) -> None:
        meta = child.get("metadata") or {}
        super().__init__(
            f"object {meta.get('namespace', '')}/{meta.get('name', '')} is already owned by "
            f"another {ref.get('kind')} controller {ref.get('name')}"
        )
        self.owner_ref = dict(ref)


def controller_reference(
    owner: Mapping[str, Any], kind: Kind | None = None, *, block_owner_deletion: bool = True
) -> dict[str, Any]:
    """``{apiVersion, kind, name, uid, controller: true, blockOwnerDeletion: true}`` for ``owner``.

    ``kind`` supplies apiVersion/kind when the object lacks them (list items from the API).
    """
    meta = owner.get("metadata") or {}
    api_version = kind.api_version if kind else owner.get("apiVersion")
    kind_name = kind.kind if kind else owner.get("kind")
    if not api_version or not kind_name or not meta.get("name") or not meta.get("uid"):
        raise ValueError("owner needs apiVersion, kind, metadata.name and metadata.uid")
    return {
        "apiVersion": api_version,
        "kind": kind_name,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": block_owner_deletion,
    }


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The owner reference with ``controller: true``, if any."""
    refs: list[Mapping[str, Any]] = (obj.get("metadata") or {}).get("ownerReferences") or []
    for ref in refs:
        if ref.get("controller") is True:
            return ref
    return None


def ownership(child: Mapping[str, Any], owner_uid: str) -> Ownership:
    ref = controller_of(child)
    if ref is None:
        return Ownership.UNOWNED
    return Ownership.OWNED if ref.get("uid") == owner_uid else Ownership.OWNED_BY_OTHER


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def _same_object(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return (
        _group(str(a.get("apiVersion", ""))) == _group(str(b.get("apiVersion", "")))
        and a.get("kind") == b.get("kind")
        and a.get("name") == b.get("name")
    )


def with_controller_reference(
    child: Mapping[str, Any], owner_ref: Mapping[str, Any]
) -> dict[str, Any]:
    """A copy of ``child`` whose controller is ``owner_ref`` (``SetControllerReference``).

    Other owner references are kept; a reference to the same owner (same group, kind and name)
    is replaced. Raises :class:`AlreadyOwnedError` if another object is the controller.
    """
    existing = controller_of(child)
    if existing is not None and not _same_object(existing, owner_ref):
        raise AlreadyOwnedError(child, existing)
    out = copy.deepcopy(dict(child))
    meta = out.setdefault("metadata", {})
    refs = [r for r in meta.get("ownerReferences") or () if not _same_object(r, owner_ref)]
    refs.append(dict(owner_ref))
    meta["ownerReferences"] = refs
    return out


def is_adoptable(obj: Mapping[str, Any]) -> bool:
    """Whether an unowned child opted in to adoption (``agents.x-k8s.io/adoptable: "true"``)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(keys.LABEL_ADOPTABLE) == keys.ADOPTABLE_TRUE
