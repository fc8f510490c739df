"""A claim whose sandbox name is held by a sandbox being deleted waits with backoff (security
review #9).

Any namespace editor can hold a Sandbox in Terminating forever (a foreground delete of its claim
and a finalizer on the pod) and then re-create the claim. The claim was re-queued every 0.2 s,
forever: a POST, an AlreadyExists and a GET five times a second per claim, under the
controller's identity. Now the pass reports ``SandboxCreatePending`` and raises ``RetryLater``:
the work queue's per-key exponential backoff paces the retries, and the Sandbox's deletion
event re-queues the claim at once when the name frees up (the claim controller owns Sandboxes).
"""

from __future__ import annotations

import pytest

from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES, SANDBOXES
from agentsandbox.controllers.claim.controller import RetryLater
from tests.unit.controllers.claim.test_act_failures import _same_name_sandbox
from tests.unit.controllers.claim.test_controller import NS, Harness, claim_v1alpha1, template


async def test_a_sandbox_stuck_terminating_is_retried_with_backoff_not_polled() -> None:
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template())
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    held = h.add(SANDBOXES.plural, _same_name_sandbox("previous-claim", deleting=True))
    for _ in range(3):
        with pytest.raises(RetryLater, match="still being deleted"):
            await h.reconcile()
        h.sync()
    assert h.ready()["reason"] == "SandboxCreatePending"
    assert h.api.stored(SANDBOXES.plural, NS, "claim") == held
    status_writes = [c for c in h.api.writes() if c[:2] == ("patch-status", "sandboxclaims")]
    assert len(status_writes) <= 1, "the same status written again on every retry"


async def test_a_sandbox_gone_between_create_and_read_is_retried_with_backoff() -> None:
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template())
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    h.add(SANDBOXES.plural, _same_name_sandbox("previous-claim"), cache=False)

    def gone_before_the_read(verb: str, plural: str, name: str) -> None:
        if (verb, plural) == ("get", "sandboxes") and (plural, NS, name) in h.api.objects:
            del h.api.objects[(plural, NS, name)]

    h.api.before = gone_before_the_read
    with pytest.raises(RetryLater, match="is being replaced"):
        await h.reconcile()
    assert h.ready()["reason"] == "SandboxCreatePending"
