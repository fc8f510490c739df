"""The warm share each warm pool delivers, measured by the claim controller (autoscaler review
#18: "No metrics, and the warm share is never measured").

Every claim that asked for a pool (its ``warmPoolRef``, a pool its v1alpha1 ``warmpool`` names, or
the pools of its template) is counted once, when it is first served: ``warm_ready`` (adopted a
Ready member), ``warm_not_ready`` (adopted a member not Ready yet) or ``cold`` (none to adopt),
under the pool it wanted, in ``agent_sandbox_warmpool_claims_served_total`` and in the
in-process :class:`~agentsandbox.controllers.common.served.ServedCounts` the autoscaler will read.

The counter lives on the process-wide registry: each test uses a pool name of its own.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.controllers.common.served import (
    COLD,
    WARM_NOT_READY,
    WARM_READY,
    ServedCounts,
)
from agentsandbox.kube.metrics import REGISTRY
from tests.unit.controllers.claim.test_controller import (
    NS,
    Harness,
    claim_v1alpha1,
    claim_v1beta1,
    pool,
    setup_pool,
    template,
)

FAMILY = "agent_sandbox_warmpool_claims_served_total"
T0 = 1_800_000_000.0


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def served_total(pool_name: str, served: str, ns: str = NS) -> float | None:
    return REGISTRY.get_sample_value(FAMILY, {"namespace": ns, "pool": pool_name, "served": served})


def harness(api: Any = None) -> tuple[Harness, ServedCounts]:
    h = Harness(api)
    served = ServedCounts(clock=Clock())
    h.r.writer.served = served
    return h, served


def unique(prefix: str = "pool") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ------------------------------------------------------------------------------ what is counted
async def test_a_claim_served_from_a_ready_member_counts_warm_ready_for_its_pool() -> None:
    h, served = harness()
    name = unique()
    setup_pool(h, name=name)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(pool_name=name))
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"].startswith(name)
    assert served.snapshot(NS, name) == (1, 0, 0)
    assert served_total(name, WARM_READY) == 1
    assert served_total(name, COLD) is None


async def test_a_claim_served_from_a_not_ready_member_counts_warm_not_ready() -> None:
    h, served = harness()
    name = unique()
    setup_pool(h, name=name, ready=False)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(pool_name=name))
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"].startswith(name)
    assert served.snapshot(NS, name) == (0, 1, 0)
    assert served_total(name, WARM_NOT_READY) == 1


async def test_a_claim_that_went_cold_because_its_pool_was_empty_counts_cold_for_that_pool() -> (
    None
):
    """The existing ``agent_sandbox_claim_creation_total`` says ``warmpool_name="none"`` for a
    cold create; the served counter names the pool the claim wanted."""
    h, served = harness()
    name = unique()
    setup_pool(h, name=name, members=0)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(pool_name=name))
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == "claim", "served cold"
    assert served.snapshot(NS, name) == (0, 0, 1)
    assert served_total(name, COLD) == 1


async def test_a_template_claim_that_went_cold_counts_cold_for_its_templates_pool() -> None:
    h, served = harness()
    name, tpl = unique(), unique("tpl")
    setup_pool(h, name=name, tpl=tpl, members=0)
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(tpl=tpl))
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == "claim"
    assert served.snapshot(NS, name) == (0, 0, 1)


async def test_a_template_claim_served_warm_counts_for_the_pool_it_adopted_from() -> None:
    h, served = harness()
    empty, full, tpl = unique("a"), unique("b"), unique("tpl")
    setup_pool(h, name=empty, tpl=tpl, members=0)
    setup_pool(h, name=full, tpl=tpl, members=1)
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(tpl=tpl))
    await h.reconcile()
    assert served.snapshot(NS, full) == (1, 0, 0)
    assert served.snapshot(NS, empty) == (0, 0, 0)


async def test_claims_that_asked_no_existing_pool_or_cannot_be_warm_are_not_counted() -> None:
    """Label values come from a bounded set: only pools that exist. A v1alpha1 claim naming a
    pool that does not exist, a ``warmpool: none`` claim, and a claim whose env forces a cold
    start (no pool can serve it) add no series."""
    h, served = harness()
    name, ghost = unique(), unique("ghost")
    h.add(SANDBOX_TEMPLATES.plural, template(envVarsInjectionPolicy="Allowed"))
    h.add(SANDBOX_WARM_POOLS.plural, pool(name))
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1("c1", warmpool=ghost))
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1("c2", warmpool="none"))
    h.add(
        SANDBOX_CLAIMS.plural,
        claim_v1beta1("c3", pool_name=name, env=[{"name": "A", "value": "b"}]),
    )
    for c in ("c1", "c2", "c3"):
        await h.reconcile(c)
        assert h.claim(c)["status"]["sandbox"]["name"] == c, "served cold"
    for p in (name, ghost, "none"):
        assert served.snapshot(NS, p) == (0, 0, 0), p
        for kind in (WARM_READY, WARM_NOT_READY, COLD):
            assert served_total(p, kind) is None, (p, kind)


# ------------------------------------------------------------------------------ counted once
async def test_a_second_reconcile_of_a_served_claim_does_not_count_again() -> None:
    h, served = harness()
    name = unique()
    setup_pool(h, name=name)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(pool_name=name))
    await h.reconcile()
    for _ in range(2):
        h.sync()
        await h.reconcile()
    assert served.snapshot(NS, name) == (1, 0, 0)
    assert served_total(name, WARM_READY) == 1


async def test_a_restarted_controller_does_not_count_a_served_claim_again() -> None:
    h, _ = harness()
    name = unique()
    setup_pool(h, name=name)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(pool_name=name))
    await h.reconcile()
    fresh, served = harness(h.api)
    fresh.sync()
    await fresh.reconcile()
    assert served.snapshot(NS, name) == (0, 0, 0)
    assert served_total(name, WARM_READY) == 1


async def test_a_claim_whose_sandbox_is_replaced_is_not_counted_again() -> None:
    """A served claim whose sandbox was deleted gets a new (cold) one: not a first serving."""
    h, served = harness()
    name = unique()
    setup_pool(h, name=name, members=0)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(pool_name=name))
    await h.reconcile()
    assert served.snapshot(NS, name) == (0, 0, 1)
    h.api.objects.pop((SANDBOXES.plural, NS, "claim"))
    h.sync()
    await h.reconcile()
    h.sync()
    await h.reconcile()
    assert h.api.stored(SANDBOXES.plural, NS, "claim") is not None, "replaced"
    assert served.snapshot(NS, name) == (0, 0, 1)
    assert served_total(name, COLD) == 1


# ------------------------------------------------------------------------------ pool deletion
async def test_a_deleted_pools_series_and_counts_are_removed() -> None:
    h, served = harness()
    name = unique()
    _, p, _ = setup_pool(h, name=name, members=1)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(pool_name=name))
    await h.reconcile()
    assert served_total(name, WARM_READY) == 1
    h.api.objects.pop((SANDBOX_WARM_POOLS.plural, NS, name))
    h.sync(SANDBOX_WARM_POOLS.plural)
    assert h.pools.get(p["metadata"]["name"], NS) is None
    for kind in (WARM_READY, WARM_NOT_READY, COLD):
        assert served_total(name, kind) is None, kind
    assert served.snapshot(NS, name) == (0, 0, 0)
    assert served.window(NS, name) == (0, 0, 0)


# ------------------------------------------------------------------------------ ServedCounts
def test_windowed_counts_drop_old_bins_and_keep_the_totals() -> None:
    clock = Clock()
    s = ServedCounts(clock=clock, window=600.0, bin_seconds=10.0)
    s.add(NS, "p", WARM_READY)
    s.add(NS, "p", COLD)
    clock.now += 300
    s.add(NS, "p", WARM_READY)
    s.add(NS, "p", WARM_NOT_READY)
    assert s.window(NS, "p") == (2, 1, 1)
    assert s.window(NS, "p", 60.0) == (1, 1, 0), "only the last minute"
    assert s.warm_share(NS, "p") == 0.75
    clock.now += 301  # the first two are older than the window now
    assert s.window(NS, "p") == (1, 1, 0)
    assert s.snapshot(NS, "p") == (2, 1, 1), "the totals are not windowed"
    clock.now += 600
    assert s.window(NS, "p") == (0, 0, 0)
    assert s.warm_share(NS, "p") is None, "no claims: no share"
    assert s.bins(NS, "p") == 0, "the old bins are gone"
    assert s.snapshot(NS, "p") == (2, 1, 1)


def test_memory_is_one_bin_per_bin_width_and_empty_keys_are_removed() -> None:
    clock = Clock()
    s = ServedCounts(clock=clock, window=600.0, bin_seconds=10.0)
    for _ in range(10_000):
        s.add(NS, "p", COLD)
        clock.now += 1.0
    assert s.bins(NS, "p") <= 61
    s.forget(NS, "p")
    assert s.keys() == []
    assert s.snapshot(NS, "p") == (0, 0, 0)
    s.add(NS, "q", COLD)
    clock.now += 10_000
    s.prune()
    assert s.bins(NS, "q") == 0


@pytest.mark.parametrize(("window", "bin_seconds"), [(0.0, 10.0), (600.0, 0.0), (-1.0, 10.0)])
def test_a_window_or_bin_that_is_not_positive_is_refused(window: float, bin_seconds: float) -> None:
    """The windowed counts need a positive window and bin width: anything else is a clear
    error at construction, not a division by zero (or an unbounded ring) later."""
    with pytest.raises(ValueError, match="must be positive"):
        ServedCounts(window=window, bin_seconds=bin_seconds)
