"""Hostile claim input, pure rules: the volume claim templates a claim may add and the pod
metadata it may ask for (docs/design/claim.md, "Pod metadata and env")."""

from __future__ import annotations

from typing import Any

import pytest

from agentsandbox.controllers.claim.claimed_sandbox import cold_sandbox
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
