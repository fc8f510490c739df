"""The Sandbox controller's event mapping: a Pod or Service event -> the Sandbox to reconcile."""

from __future__ import annotations

from agentsandbox.api.kinds import SANDBOX
from agentsandbox.api.owners import controller_of
from agentsandbox.kube.handler import api_group
from agentsandbox.kube.reconcile import Request
from agentsandbox.kube.store import KubeObject


def sandbox_for_child(obj: KubeObject) -> list[Request]:
    """A Pod/Service event -> its controlling Sandbox; an unowned child -> the Sandbox of the
    same name (the one that could adopt it)."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    ref = controller_of(obj)
    if ref is None:
        return [Request(namespace, meta["name"])] if meta.get("name") else []
    if ref.get("kind") != SANDBOX.kind or api_group(ref.get("apiVersion") or "") != SANDBOX.group:
        return []
    return [Request(namespace, ref["name"])] if ref.get("name") else []


__all__ = ["sandbox_for_child"]
