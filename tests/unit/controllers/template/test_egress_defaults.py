"""Secure defaults that reach further: the default NetworkPolicy's egress excepts, the extra
except-CIDRs flag, and ``enableServiceLinks: false`` on sandbox pods, which must not make any
existing warm-pool member stale (docs/design/template.md, "Secure defaults for sandbox pods")."""

from __future__ import annotations

import copy
from typing import Any

from agentsandbox.api import keys
from agentsandbox.api.defaults import apply_sandbox_secure_defaults
from agentsandbox.api.hashing import name_hash, pod_template_hash, sandbox_blueprint_hash
from agentsandbox.cli.options import Options, build_flagset, given_flags
from agentsandbox.controllers.claim.claimed_sandbox import cold_sandbox
from agentsandbox.controllers.template.plan import Action, Snapshot, plan
from agentsandbox.controllers.warmpool.blueprint import (
    blueprints_match,
    build_blueprint,
    is_sandbox_stale,
)

NS = "ns"


def template(**pod_spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "tpl", "namespace": NS, "uid": "tpl-uid"},
        "spec": {
            "podTemplate": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "main", "image": "img"}], **pod_spec},
            }
        },
    }


def pool() -> dict[str, Any]:
    return {
        "metadata": {"name": "pool", "namespace": NS, "uid": "pool-uid"},
        "spec": {"replicas": 1, "sandboxTemplateRef": {"name": "tpl"}},
    }


def excepts(spec: dict[str, Any]) -> dict[str, list[str]]:
    blocks = [peer["ipBlock"] for peer in spec["egress"][0]["to"]]
    return {block["cidr"]: block["except"] for block in blocks}


def options(*argv: str) -> Options:
    values, _ = build_flagset().parse(list(argv))
    return Options.from_values(values, given_flags(list(argv)))


def test_default_egress_excepts_cgnat_reserved_and_nat64_and_the_flags_extras() -> None:
    """Security review #11: the default policy's "public internet only" egress also excepts
    100.64.0.0/10 (CGNAT pod ranges, a cloud metadata server), 240.0.0.0/4 (reserved, used as
    pod/service ranges) and the NAT64 prefix 64:ff9b::/96 (reaches internal IPv4), and the
    except-CIDRs given with --network-policy-egress-except, IPv4 and IPv6 each in its block."""
    created = plan(Snapshot(template(), None))
    assert created.action is Action.CREATE and created.body is not None
    got = excepts(created.body["spec"])
    assert {"100.64.0.0/10", "240.0.0.0/4"} <= set(got["0.0.0.0/0"])
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"} <= set(
        got["0.0.0.0/0"]
    )
    assert {"64:ff9b::/96", "fc00::/7", "fe80::/10"} <= set(got["::/0"])
    opts = options("--network-policy-egress-except=203.0.113.0/24,2001:db8::/32")
    assert opts.errors() == []
    assert opts.network_policy_egress_except == ("203.0.113.0/24", "2001:db8::/32")
    extra = plan(Snapshot(template(), None, egress_except=opts.network_policy_egress_except))
    assert extra.body is not None
    got = excepts(extra.body["spec"])
    assert "203.0.113.0/24" in got["0.0.0.0/0"] and "203.0.113.0/24" not in got["::/0"]
    assert "2001:db8::/32" in got["::/0"] and "2001:db8::/32" not in got["0.0.0.0/0"]
    for bad in ("nope", "10.0.0.1/8", "0.0.0.0/0", "::/0"):
        assert options(f"--network-policy-egress-except={bad}").errors(), bad


def test_sandbox_pods_get_service_links_off_and_no_member_goes_stale() -> None:
    """Security review #11: ``enableServiceLinks: false`` on sandbox pods unless the template
    sets it (every namespace Service's address in every container's environment defeats the
    default policy's aim of no service discovery). Existing warm-pool members, made by our
    previous version or taken over from upstream without the field, stay fresh under every
    staleness path (labels trusted, labels differing, no labels, orphan): nothing is
    recreated."""
    tpl = template()
    assert apply_sandbox_secure_defaults(tpl, {})["enableServiceLinks"] is False
    kept = apply_sandbox_secure_defaults(
        template(enableServiceLinks=True), {"enableServiceLinks": True}
    )
    assert kept["enableServiceLinks"] is True
    claim = {"metadata": {"name": "c", "namespace": NS, "uid": "u"}, "spec": {}}
    assert cold_sandbox(claim, tpl)["spec"]["podTemplate"]["spec"]["enableServiceLinks"] is False
    pod_hash = pod_template_hash(tpl["spec"]["podTemplate"])
    blueprint_hash = sandbox_blueprint_hash(tpl["spec"])
    new = build_blueprint(pool(), tpl, pod_hash)
    assert new["spec"]["podTemplate"]["spec"]["enableServiceLinks"] is False
    old = copy.deepcopy(new)  # a member as our previous version or upstream wrote it
    del old["spec"]["podTemplate"]["spec"]["enableServiceLinks"]
    for member in (new, old):
        assert blueprints_match(tpl, member)
        labels = member["metadata"]["labels"]
        variants = [
            labels,  # blueprint hash trusted
            {**labels, keys.LABEL_SANDBOX_TEMPLATE_HASH: "deadbeef"},  # differs: full compare
            {  # only the deprecated pod-template hash, and it differs
                keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("tpl"),
                keys.LABEL_SANDBOX_POD_TEMPLATE_HASH: "deadbeef",
            },
            {keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("tpl")},  # no hash label
        ]
        for variant in variants:
            sb = copy.deepcopy(member)
            sb["metadata"]["labels"] = variant
            for orphan in (False, True):
                stale = is_sandbox_stale(
                    sb, tpl, pod_hash, {}, orphan=orphan, blueprint_hash=blueprint_hash
                )
                assert not stale, (variant, orphan)
    # a member whose pod really turns service links on still differs from the template
    on = copy.deepcopy(new)
    on["spec"]["podTemplate"]["spec"]["enableServiceLinks"] = True
    assert not blueprints_match(tpl, on)
