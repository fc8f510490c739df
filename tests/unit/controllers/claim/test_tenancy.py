"""A claim never treats a Sandbox in another namespace as its own (security review #1).

Anyone who may create Sandboxes in namespace B and read a claim's UID in namespace A can write a
Sandbox whose controller reference names the claim. The claim's lookup by controller UID was
keyed by the UID alone: a claim with no sandbox yet took the foreign one (its name and pod IPs in
the claim's status), and a claim with its own sandbox saw two and deleted one of them, the real
one half the time (the order of a set).
"""

from __future__ import annotations

import copy
from typing import Any

from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES, SANDBOXES
from tests.unit.controllers.claim.test_controller import NS, Harness, claim_v1alpha1, template


def forged_for(claim: dict[str, Any], name: str, ns: str = "mallory") -> dict[str, Any]:
    meta = claim["metadata"]
    return {
        "apiVersion": "agents.x-k8s.io/v1alpha1",
        "kind": "Sandbox",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"forged-{name}",
            "ownerReferences": [
                {
                    "apiVersion": claim["apiVersion"],
                    "kind": "SandboxClaim",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                },
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "anchor", "uid": "cm-uid"},
            ],
        },
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "m", "image": "evil"}]}}},
        "status": {
            "podIPs": [{"ip": "10.66.6.6"}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "DependenciesReady"}],
        },
    }


async def test_a_new_claim_never_takes_a_sandbox_of_another_namespace() -> None:
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template())
    claim = h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    h.add(SANDBOXES.plural, forged_for(claim, "claim"))
    await h.reconcile()
    h.sync()
    status = h.claim()["status"]["sandbox"]
    assert status["name"] == "claim"
    assert "10.66.6.6" not in str(status), status
    own = h.api.stored(SANDBOXES.plural, NS, "claim")
    assert own is not None and own["metadata"]["uid"] != "forged-claim"  # created cold, here


async def test_a_claim_never_deletes_because_of_a_sandbox_in_another_namespace() -> None:
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template())
    claim = h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    await h.reconcile()
    h.sync()
    real = copy.deepcopy(h.sandbox("claim"))
    h.add(SANDBOXES.plural, forged_for(claim, "claim"))
    for _ in range(3):
        h.claims.put(h.api.stored(SANDBOX_CLAIMS.plural, NS, "claim"))  # touched
        await h.reconcile()
        h.sync()
    deletes = [c for c in h.api.calls if c[0] == "delete"]
    assert deletes == [], deletes
    assert h.sandbox("claim")["metadata"]["uid"] == real["metadata"]["uid"]
    assert "10.66.6.6" not in str(h.claim()["status"]), h.claim()["status"]
