"""Retiring an expired ``Retain`` claim's sandbox finds it by its controller (the claim's UID),
not only by the name the claim's status gives or the claim's own name."""

from __future__ import annotations

from typing import Any

from agentsandbox.api.kinds import SANDBOX_CLAIM
from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from tests.unit.controllers.claim.test_controller import (
    NS,
    TWO_HOURS_AGO,
    Harness,
    claim_v1beta1,
    setup_pool,
)


def owned_by_claim(sb: dict[str, Any], claim: dict[str, Any]) -> dict[str, Any]:
    sb["metadata"]["ownerReferences"] = [
        {
            "apiVersion": SANDBOX_CLAIM.api_version,
            "kind": "SandboxClaim",
            "name": claim["metadata"]["name"],
            "uid": claim["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return sb


async def test_retain_expiry_deletes_a_sandbox_the_claim_controls_that_no_status_names() -> None:
    """claim review note 14: the claim controls a warm sandbox (not named after the claim)
    whose name its status no longer gives; its expiry still deletes it."""
    h = Harness()
    _, _, (member,) = setup_pool(h, members=1)
    c = h.add(
        SANDBOX_CLAIMS.plural,
        claim_v1beta1(lifecycle={"shutdownTime": TWO_HOURS_AGO, "shutdownPolicy": "Retain"}),
    )
    name = member["metadata"]["name"]
    h.add(SANDBOXES.plural, owned_by_claim(h.sandbox(name), c))
    for _ in range(3):
        await h.reconcile()
        h.sync()
    assert h.ready()["reason"] == "ClaimExpired"
    assert h.api.stored(SANDBOXES.plural, NS, name) is None, "the claim's sandbox survived"
