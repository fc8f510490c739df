"""Hostile claim input, pure rules: the volume claim templates a claim may add and the pod
metadata it may ask for (docs/design/claim.md, "Pod metadata and env")."""

from __future__ import annotations

from typing import Any

import pytest

from agentsandbox.controllers.claim.claimed_sandbox import (
    cold_sandbox,
    validate_additional_metadata,
)
from agentsandbox.controllers.claim.plan import REASON_VCT_ERROR, ClaimFailure

NS = "ns"


def template(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "tpl", "namespace": NS, "uid": "tpl-uid"},
        "spec": {
            "podTemplate": {
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "img",
                            "volumeMounts": [{"name": "cfg", "mountPath": "/etc/proxy"}],
                        }
                    ],
                    "volumes": [{"name": "cfg", "configMap": {"name": "proxy-cfg"}}],
                }
            },
            **spec,
        },
    }


def claim(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": {"name": "c", "namespace": NS, "uid": "claim-uid"},
        "spec": {"sandboxTemplateRef": {"name": "tpl"}, **spec},
    }


def vct(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


# ------------------------------------------------------------- volume claim templates (#10)
def test_allowed_policy_never_replaces_a_template_pod_volume() -> None:
    """Security review #10: under ``volumeClaimTemplatesPolicy: Allowed`` a claim may only add
    volumes. A claim VCT named like a pod volume of the template (here the configMap ``cfg``
    a trusted container mounts) would replace it, so it is refused; so are two claim VCTs of the
    same name. A new name is still added, and ``Overrides`` still replaces a template VCT."""
    allowed = template(volumeClaimTemplatesPolicy="Allowed")
    with pytest.raises(ClaimFailure) as shadow:
        cold_sandbox(claim(volumeClaimTemplates=[vct("cfg")]), allowed)
    assert shadow.value.reason == REASON_VCT_ERROR and '"cfg"' in shadow.value.message
    with pytest.raises(ClaimFailure) as twice:
        cold_sandbox(claim(volumeClaimTemplates=[vct("ws"), vct("ws")]), allowed)
    assert twice.value.reason == REASON_VCT_ERROR and "duplicate" in twice.value.message
    added = cold_sandbox(claim(volumeClaimTemplates=[vct("ws")]), allowed)
    assert [v["metadata"]["name"] for v in added["spec"]["volumeClaimTemplates"]] == ["ws"]
    overrides = template(volumeClaimTemplatesPolicy="Overrides", volumeClaimTemplates=[vct("ws")])
    mine = vct("ws")
    mine["spec"]["resources"]["requests"]["storage"] = "2Gi"
    replaced = cold_sandbox(claim(volumeClaimTemplates=[mine]), overrides)
    assert replaced["spec"]["volumeClaimTemplates"] == [mine]


# ------------------------------------------------------------- additional pod metadata (#4)
@pytest.mark.parametrize(
    ("kind", "key", "value"),
    [
        # unprefixed labels select Services and NetworkPolicies (app=web, role=db-client)
        ("labels", "app", "web"),
        ("labels", "role", "x"),
        # mesh: sidecar injection and egress capture, as annotations and as labels
        ("annotations", "sidecar.istio.io/inject", "false"),
        ("annotations", "traffic.sidecar.istio.io/excludeOutboundIPRanges", "0.0.0.0/0"),
        ("labels", "sidecar.istio.io/inject", "false"),
        ("annotations", "istio.io/rev", "canary"),
        ("annotations", "linkerd.io/inject", "disabled"),
        ("annotations", "config.linkerd.io/skip-outbound-ports", "1-65535"),
        # sandbox runtimes (reversed-domain keys with no prefix)
        ("annotations", "io.kubernetes.cri-o.Devices", "/dev/kvm"),
        ("annotations", "io.katacontainers.config.hypervisor.kernel_params", "x"),
        ("annotations", "dev.gvisor.spec.mount.data.share", "shared"),
        # node pinning
        ("annotations", "karpenter.sh/do-not-disrupt", "true"),
    ],
)
def test_mesh_runtime_and_selector_metadata_is_refused(kind: str, key: str, value: str) -> None:
    """Security review #4: ``additionalPodMetadata`` must not opt the sandbox pod into other
    label-selected NetworkPolicies and Services (an unprefixed label, as upstream v1.0.1
    refuses) nor set service-mesh or sandbox-runtime annotations or labels (``*.istio.io``,
    ``linkerd.io``, ``io.kubernetes.cri-o.*``, ``io.katacontainers.*``, ``dev.gvisor.*``,
    ``karpenter.sh``)."""
    problem = validate_additional_metadata({kind: {key: value}})
    assert problem is not None and f'"{key}"' in problem, problem


def test_prefixed_user_metadata_is_still_accepted() -> None:
    """Security review #4, the other side: what a claim may still ask for."""
    extra = {
        "labels": {"sandbox.users.io/team": "a", "tier.sandbox.users.io/x": "gold"},
        "annotations": {"note": "b", "example.com/owner": "c", "notistio.io/x": "d"},
    }
    assert validate_additional_metadata(extra) is None
