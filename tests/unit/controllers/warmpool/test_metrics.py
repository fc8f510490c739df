"""A warm pool's churn series (autoscaler review #18): the sandboxes it deletes before they were
Ready, counted where it deletes them, beside the creates it already counts; removed with the
pool."""

from __future__ import annotations

from agentsandbox.kube import metrics as kube_metrics
from agentsandbox.kube.reconcile import Request

from .test_act import NS, Harness, conflict, pool, sandbox, template

BEFORE_READY = "agent_sandbox_warmpool_sandbox_deletes_before_ready_total"
LABELS = {"namespace": NS, "pool": "pool"}


def count(name: str = BEFORE_READY, **extra: str) -> float:
    return kube_metrics.REGISTRY.get_sample_value(name, {**LABELS, **extra}) or 0.0


async def test_deletes_of_members_not_ready_are_counted_and_of_ready_ones_not() -> None:
    """Stuck, stale and excess deletes of a member whose Ready is not True are counted; a Ready
    member's delete, a delete that lost a race (409) and an orphan's delete are not."""
    t = template("v2")
    cases = []
    # stuck: not Ready after the grace period
    p = pool(1)
    cases.append((Harness(p, t, sandbox(p, t, ready=False, age=600)), 1))
    # stale (Recreate), not Ready yet
    p = pool(1, updateStrategy={"type": "Recreate"})
    cases.append((Harness(p, t, sandbox(p, template("v1"), ready=False, age=5)), 1))
    # excess: one not Ready, one Ready
    p = pool(0)
    cases.append((Harness(p, t, sandbox(p, t, ready=False, age=5), sandbox(p, t)), 1))
    # a stale Ready member: not counted
    p = pool(1, updateStrategy={"type": "Recreate"})
    cases.append((Harness(p, t, sandbox(p, template("v1"))), 0))
    # a stuck orphan (not the pool's member): not counted
    p = pool(1)
    cases.append((Harness(p, t, sandbox(p, t, owned=False, ready=False, age=600)), 0))
    for i, (h, deleted) in enumerate(cases):
        before = count()
        await h.reconcile()
        assert "delete" in [v for v, _ in h.verbs()], i
        assert count() - before == deleted, i
    # a delete refused by its precondition (the member changed) is not counted
    p = pool(0)
    h = Harness(p, t, sandbox(p, t, ready=False, age=5))
    h.client.fail["delete"] = [conflict()]
    before = count()
    await h.reconcile()
    assert count() == before


async def test_the_churn_series_exists_from_the_pools_first_pass_and_goes_with_the_pool() -> None:
    """A pool's deletes-before-Ready series is there (at 0) once the pool is reconciled, so a
    ratio over it is defined, and removed when the pool is deleted."""
    t = template()
    p = pool(1)
    p["metadata"]["name"] = "churn"
    h = Harness(p, t)
    await h.reconciler.reconcile(Request(NS, "churn"))
    labels = {"namespace": NS, "pool": "churn"}
    assert kube_metrics.REGISTRY.get_sample_value(BEFORE_READY, labels) == 0.0
    h.pools.remove(p)
    assert await h.reconciler.reconcile(Request(NS, "churn")) is None
    assert kube_metrics.REGISTRY.get_sample_value(BEFORE_READY, labels) is None
