"""A claim whose cold create a ResourceQuota refuses says so with one Warning Event per
transition into ``QuotaExceeded``, not one per retry."""

from __future__ import annotations

from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES
from agentsandbox.kube.errors import Forbidden
from agentsandbox.kube.reconcile import Result
from tests.unit.controllers.claim.test_controller import Harness, claim_v1alpha1, template


def quota_refusal(used: int) -> Forbidden:
    return Forbidden(
        403,
        "Forbidden",
        'sandboxes.agents.x-k8s.io "claim" is forbidden: exceeded quota: q, '
        f"requested: count/sandboxes.agents.x-k8s.io=1, used: {used}, limited: 2",
    )


async def test_quota_exceeded_warns_once_per_transition_not_every_retry() -> None:
    """claim review note 15: every retry (every 10 s) used to record another Warning."""
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template())
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    h.api.fail[("create", "sandboxes")] = [quota_refusal(2), quota_refusal(2), quota_refusal(3)]
    for _ in range(3):
        assert await h.reconcile() == Result(requeue_after=10.0)
        h.sync()
        assert h.ready()["reason"] == "QuotaExceeded"
    warnings = [e for e in h.recorder.events if e[:2] == ("Warning", "QuotaExceeded")]
    assert len(warnings) == 1, warnings
