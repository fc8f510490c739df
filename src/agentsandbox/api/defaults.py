"""Secure defaults applied to the pods of template-built sandboxes (docs/design/template.md,
"Secure defaults for sandbox pods")."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["apply_sandbox_secure_defaults", "is_secure_by_default"]

#: Public resolvers used when the template gets the default-deny NetworkPolicy, which also
#: blocks the cluster DNS.
SECURE_DNS_NAMESERVERS: Final = ("8.8.8.8", "1.1.1.1")
NETWORK_POLICY_MANAGED: Final = "Managed"
NETWORK_POLICY_UNMANAGED: Final = "Unmanaged"


def is_secure_by_default(template: Mapping[str, Any]) -> bool:
    """The template gets the controller's default NetworkPolicy: management is ``Managed`` (or
    unset) and it declares no ``networkPolicy`` of its own."""
    spec = template.get("spec") or {}
    management = spec.get("networkPolicyManagement") or ""
    return management in ("", NETWORK_POLICY_MANAGED) and spec.get("networkPolicy") is None


def apply_sandbox_secure_defaults(
    template: Mapping[str, Any], pod_spec: Mapping[str, Any]
) -> dict[str, Any]:
    """A copy of ``pod_spec`` with the secure defaults of ``template`` (a SandboxTemplate) applied.

    1. ``automountServiceAccountToken`` unset → ``false`` (an explicit value is kept);
    2. secure by default (see :func:`is_secure_by_default`) and no ``dnsPolicy`` →
       ``dnsPolicy: None`` with ``dnsConfig: {nameservers: [8.8.8.8, 1.1.1.1]}``, replacing any
       ``dnsConfig``; otherwise DNS is left alone.

    The input is not modified.
    """
    spec = copy.deepcopy(dict(pod_spec))
    if spec.get("automountServiceAccountToken") is None:
        spec["automountServiceAccountToken"] = False
    if is_secure_by_default(template) and not spec.get("dnsPolicy"):
        spec["dnsPolicy"] = "None"
        spec["dnsConfig"] = {"nameservers": list(SECURE_DNS_NAMESERVERS)}
    return spec
