"""Secure defaults applied to the pods of template-built sandboxes (docs/design/template.md,
"Secure defaults for sandbox pods")."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["apply_sandbox_secure_defaults", "is_secure_by_default", "service_links_defaulted"]

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
       ``dnsConfig``; otherwise DNS is left alone;
    3. ``enableServiceLinks`` unset → ``false`` (ours, not upstream's: the kubelet would put
       every Service of the namespace into every container's environment, service discovery
       the default NetworkPolicy means to deny; an explicit value is kept). A pod spec written
       before this default, without the field, still compares equal: see
       :func:`service_links_defaulted`.

    The input is not modified.
    """
    spec = copy.deepcopy(dict(pod_spec))
    if spec.get("automountServiceAccountToken") is None:
        spec["automountServiceAccountToken"] = False
    if spec.get("enableServiceLinks") is None:
        spec["enableServiceLinks"] = False
    if is_secure_by_default(template) and not spec.get("dnsPolicy"):
        spec["dnsPolicy"] = "None"
        spec["dnsConfig"] = {"nameservers": list(SECURE_DNS_NAMESERVERS)}
    return spec


def service_links_defaulted(
    template_pod_spec: Mapping[str, Any], actual: Mapping[str, Any]
) -> bool:
    """True when ``enableServiceLinks`` in ``actual`` (a sandbox's pod spec) differs from the
    defaulted template only by that default: the template leaves the field unset and the
    sandbox has none (made by an earlier version of this controller, or by upstream's). Such a
    sandbox is not stale: the default must not recreate a warm pool."""
    return (
        template_pod_spec.get("enableServiceLinks") is None
        and actual.get("enableServiceLinks") is None
    )
