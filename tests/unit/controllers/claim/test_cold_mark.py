"""A cold create and an adoption by two processes cannot both go ahead for one claim
(docs/claims.md, "Which sandbox a claim gets"): the cold path marks the claim
(``agentsandbox.dev/cold-start``, with the claim's ``resourceVersion``) before it creates, and a
pass that reads the mark, or whose choice write the mark refused, adopts nothing. Two
reconcilers over one in-memory API (tests/unit/fakes.py) play the two processes; the first is
held just before its create while the second runs a whole pass."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.kube.errors import Conflict, InternalError, KubeError
from agentsandbox.kube.resources import Resource
from tests.unit.controllers.claim.history import HistoryApi
from tests.unit.controllers.claim.test_assignment_protocol import ready_status, status_name
from tests.unit.controllers.claim.test_controller import NS, Harness, claim_v1beta1, setup_pool

MARK = keys.ANNOTATION_COLD_START


class HeldCreateApi(HistoryApi):
    """The API, running ``before_create`` once just before it applies a Sandbox create."""

    def __init__(self) -> None:
        super().__init__()
        self.before_create: Callable[[], Awaitable[None]] | None = None

    async def create(
        self, resource: Resource, obj: dict[str, Any], namespace: str | None = None, **kw: Any
    ) -> dict[str, Any]:
        hook, self.before_create = self.before_create, None
        if resource.plural == SANDBOXES.plural and hook is not None:
            await hook()
        return await super().create(resource, obj, namespace, **kw)


def two_processes() -> tuple[HeldCreateApi, Harness, Harness, list[dict[str, Any]]]:
    """Process 1 sees the pool but none of its sandboxes (its cache lags): it goes cold.
    Process 2 sees one free, Ready pool sandbox."""
    api = HeldCreateApi()
    two = Harness(api)
    _, _, sbs = setup_pool(two, members=1)
    one = Harness(api)
    one.sync(SANDBOX_TEMPLATES.plural, SANDBOX_WARM_POOLS.plural)
    two.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    one.sync(SANDBOX_CLAIMS.plural)
    return api, one, two, sbs


@pytest.mark.parametrize("seen", ["before_the_mark", "after_the_mark"])
async def test_a_claim_going_cold_in_one_process_is_not_adopted_for_by_another(seen: str) -> None:
    """Process 2 runs a whole pass while process 1 is about to create the claim's cold sandbox,
    having read the claim either before process 1 marked it (its choice write is then refused)
    or after. The claim ends with one sandbox, the cold one, and the pool sandbox stays free."""
    api, one, two, (pool_sb,) = two_processes()
    if seen == "before_the_mark":

        async def race() -> None:
            await two.reconcile()

    else:

        async def race() -> None:
            two.sync(SANDBOX_CLAIMS.plural)
            await two.reconcile()

    api.before_create = race
    await one.reconcile()
    for h in (two, one, two):  # both settle
        h.sync()
        await h.reconcile()
    owned = [sb["metadata"]["name"] for sb in one.owned_by(one.claim())]
    assert owned == ["claim"], f"the claim controls {owned}"
    assert status_name(one) == "claim" and ready_status(one) is not None
    free = api.stored(SANDBOXES.plural, NS, pool_sb["metadata"]["name"])
    assert free is not None and free["metadata"]["ownerReferences"][0]["kind"] == "SandboxWarmPool"
    assert one.claim()["metadata"]["annotations"][MARK] == "1"
    assert api.violations == []


async def test_a_claim_whose_cold_sandbox_is_gone_may_adopt_and_loses_its_mark() -> None:
    """The mark bars adoption only while the sandbox it was written for may live: once the
    sandbox the status names is found gone, the claim adopts a pool sandbox, and the choice
    write removes the mark."""
    api, one, two, (pool_sb,) = two_processes()
    await one.reconcile()
    one.sync()
    assert status_name(one) == "claim"
    del api.objects[(SANDBOXES.plural, NS, "claim")]
    two.sync()
    await two.reconcile()
    assert status_name(two) == pool_sb["metadata"]["name"]
    annotations = two.claim()["metadata"]["annotations"]
    assert MARK not in annotations
    assert annotations[keys.LABEL_SANDBOX_NAME] == pool_sb["metadata"]["name"]


async def test_a_claim_made_cold_again_gets_a_new_mark() -> None:
    """The claim's cold sandbox is gone and no pool sandbox is free: the claim is marked anew
    (the count moves on, so the write moves the claim's resourceVersion) before its next cold
    sandbox is created."""
    api, one, _, (pool_sb,) = two_processes()
    await one.reconcile()
    one.sync()
    for name in ("claim", pool_sb["metadata"]["name"]):
        del api.objects[(SANDBOXES.plural, NS, name)]
    one.sync()
    api.calls.clear()
    await one.reconcile()
    writes = [w for w in api.writes() if w[0] != "patch-status"]
    assert writes[:2] == [
        ("patch", SANDBOX_CLAIMS.plural, "claim"),
        ("create", SANDBOXES.plural, "claim"),
    ]
    assert one.claim()["metadata"]["annotations"][MARK] == "2"
    assert status_name(one) == "claim"


@pytest.mark.parametrize("annotations", [True, False], ids=["annotations", "no_annotations"])
async def test_a_cold_claim_is_marked_in_its_first_write_before_the_create(
    annotations: bool,
) -> None:
    """One claim write before the create: the mark, with the first-observed time when the
    observability annotations are on (no extra write then); then the create, then the
    status."""
    h = Harness()
    h.r.observability_annotations = annotations
    setup_pool(h, members=0)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    at_create: list[dict[str, str]] = []

    def before(verb: str, plural: str, name: str) -> None:
        if (verb, plural) == ("create", SANDBOXES.plural):
            at_create.append(dict(h.claim()["metadata"].get("annotations") or {}))

    h.api.before = before
    h.api.calls.clear()
    await h.reconcile()
    assert h.api.writes()[:3] == [
        ("patch", SANDBOX_CLAIMS.plural, "claim"),
        ("create", SANDBOXES.plural, "claim"),
        ("patch-status", SANDBOX_CLAIMS.plural, "claim"),
    ]
    (seen,) = at_create
    assert seen[MARK] == "1"
    assert (keys.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT in seen) is annotations


@pytest.mark.parametrize("fault", ["409", "5xx", "timeout_after_applied"])
async def test_a_failed_mark_write_creates_nothing_and_the_next_pass_goes_cold_once(
    fault: str,
) -> None:
    """The mark's claim write fails (the claim changed, a 5xx, or a timeout after the API applied
    it): the pass creates nothing. The next pass marks the claim if the mark is not there (a
    timed-out write may have landed: it is not written again, the count stays "1") and then
    creates the one cold sandbox."""
    api = HistoryApi()
    h = Harness(api)
    setup_pool(h, members=0)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    if fault == "409":
        api.fail[("patch", SANDBOX_CLAIMS.plural)] = [
            Conflict(409, "Conflict", "the object has been modified")
        ]
    elif fault == "5xx":
        api.fail[("patch", SANDBOX_CLAIMS.plural)] = [InternalError(message="etcd timeout")]
    else:
        api.lose[("patch", SANDBOX_CLAIMS.plural)] = 1
    with contextlib.suppress(KubeError):
        await h.reconcile()
    assert api.stored(SANDBOXES.plural, NS, "claim") is None, "no create after a failed mark"
    h.sync()
    await h.reconcile()
    assert [sb["metadata"]["name"] for sb in h.owned_by(h.claim())] == ["claim"]
    assert h.claim()["metadata"]["annotations"][MARK] == "1"
    assert status_name(h) == "claim"
    assert api.violations == []
