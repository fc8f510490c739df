"""``apply_sandbox_secure_defaults`` (docs/design/template.md, "Secure defaults for sandbox pods"):
one test per rule."""

from __future__ import annotations

import copy
from typing import Any

from agentsandbox.api.defaults import apply_sandbox_secure_defaults, is_secure_by_default

SECURE_DNS = {"nameservers": ["8.8.8.8", "1.1.1.1"]}


def template(**spec: Any) -> dict[str, Any]:
    return {"spec": {"podTemplate": {"spec": {"containers": []}}, **spec}}


def pod(**extra: Any) -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": "i"}], **extra}


# rule 1: automountServiceAccountToken
def test_rule1_unset_automount_token_becomes_false() -> None:
    assert apply_sandbox_secure_defaults(template(), pod())["automountServiceAccountToken"] is False


def test_rule1_explicit_automount_token_true_is_kept() -> None:
    out = apply_sandbox_secure_defaults(template(), pod(automountServiceAccountToken=True))
    assert out["automountServiceAccountToken"] is True


def test_rule1_explicit_automount_token_false_is_kept() -> None:
    out = apply_sandbox_secure_defaults(template(), pod(automountServiceAccountToken=False))
    assert out["automountServiceAccountToken"] is False


# rule 2: secure by default = Managed (or unset) management and no custom networkPolicy
def test_rule2_secure_by_default_with_unset_management() -> None:
    assert is_secure_by_default(template())


def test_rule2_secure_by_default_with_managed_or_empty_management() -> None:
    assert is_secure_by_default(template(networkPolicyManagement="Managed"))
    assert is_secure_by_default(template(networkPolicyManagement=""))


def test_rule2_not_secure_by_default_with_a_custom_network_policy() -> None:
    assert not is_secure_by_default(template(networkPolicy={"egress": []}))
    assert not is_secure_by_default(template(networkPolicy={}))


def test_rule2_not_secure_by_default_when_unmanaged() -> None:
    assert not is_secure_by_default(template(networkPolicyManagement="Unmanaged"))


# rule 3: DNS only when secure by default and the pod has no dnsPolicy
def test_rule3_secure_by_default_sets_public_dns() -> None:
    out = apply_sandbox_secure_defaults(template(), pod())
    assert out["dnsPolicy"] == "None"
    assert out["dnsConfig"] == SECURE_DNS


def test_rule3_secure_dns_replaces_an_existing_dns_config() -> None:
    existing = {"nameservers": ["10.0.0.10"], "searches": ["x"], "options": [{"name": "ndots"}]}
    out = apply_sandbox_secure_defaults(template(), pod(dnsConfig=existing))
    assert out["dnsConfig"] == SECURE_DNS


def test_rule3_explicit_dns_policy_is_left_alone() -> None:
    out = apply_sandbox_secure_defaults(
        template(), pod(dnsPolicy="ClusterFirst", dnsConfig={"searches": ["a"]})
    )
    assert out["dnsPolicy"] == "ClusterFirst"
    assert out["dnsConfig"] == {"searches": ["a"]}


def test_rule3_custom_network_policy_leaves_dns_alone() -> None:
    out = apply_sandbox_secure_defaults(template(networkPolicy={"ingress": []}), pod())
    assert "dnsPolicy" not in out and "dnsConfig" not in out


def test_rule3_unmanaged_leaves_dns_alone() -> None:
    out = apply_sandbox_secure_defaults(template(networkPolicyManagement="Unmanaged"), pod())
    assert "dnsPolicy" not in out and "dnsConfig" not in out


# not mutating
def test_input_pod_spec_is_not_modified() -> None:
    original = pod(dnsConfig={"nameservers": ["1.2.3.4"]})
    before = copy.deepcopy(original)
    out = apply_sandbox_secure_defaults(template(), original)
    assert original == before
    out["containers"][0]["image"] = "changed"
    assert original["containers"][0]["image"] == "i"


def test_result_is_idempotent() -> None:
    once = apply_sandbox_secure_defaults(template(), pod())
    assert apply_sandbox_secure_defaults(template(), once) == once
