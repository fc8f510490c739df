"""The SandboxTemplate controller's event mapping: a NetworkPolicy event -> the template to
reconcile, whoever owns the policy."""

from __future__ import annotations

from agentsandbox.controllers.template.plan import template_for_network_policy
from agentsandbox.kube.reconcile import Request
from agentsandbox.kube.store import KubeObject


def template_for_policy(np: KubeObject) -> list[Request]:
    meta = np.get("metadata") or {}
    name = template_for_network_policy(str(meta.get("name") or ""))
    return [Request(meta.get("namespace") or "", name)] if name else []


__all__ = ["template_for_policy"]
