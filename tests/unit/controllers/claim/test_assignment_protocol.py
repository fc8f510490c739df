"""The claim's assignment protocol (docs/claims.md, "Which sandbox a claim gets"): the claim's
choice is written on the claim first, then the sandbox is patched; a pass that finds a written
choice finishes or clears that one; a published, live sandbox is never replaced; a candidate an
adoption write failed on goes back on the warm queue. Through the in-memory API of
tests/unit/fakes.py (resourceVersion and UID preconditions as the real one)."""

from __future__ import annotations

from typing import Any

import pytest

from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from agentsandbox.kube.errors import (
    ApiConnectionError,
    Forbidden,
    InternalError,
    Invalid,
    KubeError,
)
from tests.unit.controllers.claim.test_controller import (
    NS,
    Harness,
    claim_v1beta1,
    setup_pool,
)


def status_name(h: Harness, name: str = "claim") -> str:
    return str(((h.claim(name).get("status") or {}).get("sandbox") or {}).get("name") or "")


def ready_status(h: Harness, name: str = "claim") -> str | None:
    conds = (h.claim(name).get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conds if c["type"] == "Ready"), None)


async def ready_warm_claim(h: Harness, name: str = "claim") -> dict[str, Any]:
    """A claim served from the pool and Ready, the caches caught up."""
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(name))
    await h.reconcile(name)
    h.sync()
    assert ready_status(h, name) == "True"
    return h.sandbox(status_name(h, name))


# --------------------------------------------------------------------------- status kept
async def test_a_failed_lookup_keeps_the_published_sandbox_in_the_status() -> None:
    """claim review note 12: a pass that fails on a transient API error (here the GET of the
    sandbox the status names, which the sandbox cache does not show) must not clear
    ``status.sandbox``: only a sandbox found gone or not the claim's is unnamed."""
    h = Harness()
    setup_pool(h)
    sb = await ready_warm_claim(h)
    name = sb["metadata"]["name"]
    h.sandboxes.remove(sb)  # the sandbox cache lags (a relist in flight)
    h.api.fail[("get", SANDBOXES.plural)] = [InternalError(message="etcd timeout")]
    with pytest.raises(KubeError):
        await h.reconcile()
    status = h.claim()["status"]["sandbox"]
    assert status["name"] == name, "the published sandbox is still named"
    assert status["podIPs"] == sb["status"]["podIPs"]
    assert h.sandbox(name)["metadata"]["ownerReferences"][0]["kind"] == "SandboxClaim"
    h.sync()
    await h.reconcile()
    assert status_name(h) == name and ready_status(h) == "True"


async def test_a_status_named_sandbox_found_gone_is_unnamed() -> None:
    """The other half of the rule: the named sandbox is gone (404 from the API, not only a
    cache miss), and no new one can be made now (a transient failure of the cold create): the
    status no longer names the gone one."""
    h = Harness()
    setup_pool(h, members=1)
    sb = await ready_warm_claim(h)
    del h.api.objects[(SANDBOXES.plural, NS, sb["metadata"]["name"])]
    h.sync()
    h.api.fail[("create", SANDBOXES.plural)] = [InternalError(message="etcd timeout")]
    with pytest.raises(KubeError):
        await h.reconcile()
    assert status_name(h) == ""


# --------------------------------------------------------------------------- warm queue
ADOPTION_FAILURES = {
    "500": lambda: InternalError(message="etcd timeout"),
    "admission": lambda: Invalid(
        422,
        "Invalid",
        'admission webhook "policy.example.com" denied the request: label missing',
    ),
    "forbidden": lambda: Forbidden(
        403, "Forbidden", 'admission webhook "gatekeeper" denied the request'
    ),
    "timeout": lambda: ApiConnectionError("timed out", method="PATCH"),
}


@pytest.mark.parametrize("failure", sorted(ADOPTION_FAILURES))
async def test_a_candidate_whose_adoption_write_failed_goes_back_on_the_warm_queue(
    failure: str,
) -> None:
    """claim review #1a: an adoption write that fails with anything but 404 (gone) or 409
    (taken) leaves the pool sandbox free; it must be queued again, and the claim's retry adopts
    a pool sandbox instead of going cold."""
    h = Harness()
    _, p, sbs = setup_pool(h, members=1)
    (sb,) = sbs
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    h.api.fail[("patch", SANDBOXES.plural)] = [ADOPTION_FAILURES[failure]()]
    with pytest.raises(KubeError):
        await h.reconcile()
    assert h.owned_by(h.claim()) == []
    assert list(h.r.queue.names((NS, p["metadata"]["name"]))) == [sb["metadata"]["name"]]
    await h.reconcile()  # the retry, no watch event in between (an idle Ready sandbox has none)
    assert status_name(h) == sb["metadata"]["name"]
    assert not [c for c in h.api.calls if c[:2] == ("create", SANDBOXES.plural)]
