"""The edges of the claim's assignment protocol (docs/claims.md, "Which sandbox a claim gets"):
duplicates deleted only once the API confirms the kept sandbox, a choice another pass committed
first, a claim that moves or is replaced under a pass, a chosen sandbox found going, a failed
re-read or retry of an adoption, a refused label migration, the bound on the candidates one
pass looks at. Through the in-memory API of tests/unit/fakes.py (resourceVersion and UID
preconditions as the real one) and its history checker (tests/unit/controllers/claim/history.py).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from agentsandbox.api.kinds import SANDBOX_CLAIM
from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from agentsandbox.controllers.claim.act import MAX_ADOPTION_LOOKS, MAX_COMMIT_TRIES
from agentsandbox.controllers.claim.controller import CONFLICT_RECHECK
from agentsandbox.kube.errors import Conflict, InternalError, KubeError
from agentsandbox.kube.reconcile import Result
from tests.unit.controllers.claim.history import HistoryApi
from tests.unit.controllers.claim.test_act_failures import claimed_by, sandbox_patches
from tests.unit.controllers.claim.test_assignment_protocol import (
    CHOSEN,
    adopted_by_upstream,
    choose,
    ready_status,
    ready_warm_claim,
    sandbox_writes,
    status_name,
)
from tests.unit.controllers.claim.test_controller import (
    NS,
    Harness,
    claim_v1beta1,
    setup_pool,
)

KEY = f"{NS}/claim"


def name_of(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def queued(h: Harness, pool_name: str = "pool") -> set[str]:
    return set(h.r.queue.names((NS, pool_name)))


def chosen(h: Harness) -> tuple[str | None, str | None]:
    """The claim's choice in the API: (annotation, deprecated label)."""
    meta = h.claim()["metadata"]
    return (meta.get("annotations") or {}).get(CHOSEN), (meta.get("labels") or {}).get(CHOSEN)


def claim_moved(h: Harness) -> None:
    """Someone else wrote the claim in the API since the claim cache saw it."""
    stored = h.api.objects[(SANDBOX_CLAIMS.plural, NS, "claim")]
    stored["metadata"]["resourceVersion"] = str(int(stored["metadata"]["resourceVersion"]) + 5000)


def chosen_elsewhere(h: Harness, sb_name: str, *, label: bool) -> None:
    """Another pass (another process) wrote the claim's choice of ``sb_name`` in the API; this
    process's claim cache does not show it yet."""
    stored = h.api.objects[(SANDBOX_CLAIMS.plural, NS, "claim")]
    stored["metadata"].setdefault("labels" if label else "annotations", {})[CHOSEN] = sb_name
    claim_moved(h)


# --------------------------------------------------------------------------- duplicates
@pytest.mark.parametrize("fate", ["ours", "still_the_pools"])
async def test_a_sandbox_this_process_made_besides_the_named_one_is_deleted_only_if_ours(
    fate: str,
) -> None:
    """A sandbox this process remembers making for the claim, other than the one its status
    names, is deleted as a duplicate when the API shows the claim controls it, and left alone
    otherwise; either way the named sandbox stays and the memory is dropped."""
    api = HistoryApi()
    h = Harness(api)
    _, _, sbs = setup_pool(h, members=2)
    x = await ready_warm_claim(h)
    y = next(sb for sb in sbs if name_of(sb) != name_of(x))
    claim = h.claim()
    if fate == "ours":
        adopted_by_upstream(h, y, claim)  # in the API only: the sandbox cache does not show it
    h.r.writer.bound[KEY] = (claim["metadata"]["uid"], name_of(y))
    api.calls.clear()
    await h.reconcile()
    deleted = [c for c in api.calls if c[:2] == ("delete", SANDBOXES.plural)]
    if fate == "ours":
        assert deleted == [("delete", SANDBOXES.plural, name_of(y))]
        assert api.stored(SANDBOXES.plural, NS, name_of(y)) is None
    else:
        assert deleted == []
        assert claimed_by(h, name_of(y)) is None, "still the pool's"
        assert name_of(y) in queued(h)
    assert status_name(h) == name_of(x) and ready_status(h) == "True"
    assert [name_of(sb) for sb in h.owned_by(h.claim())] == [name_of(x)]
    assert KEY not in h.r.writer.bound
    assert api.violations == []


@pytest.mark.parametrize("change", ["claim_replaced", "kept_gone", "kept_deleting"])
async def test_duplicates_are_deleted_only_once_the_api_confirms_the_kept_sandbox(
    change: str,
) -> None:
    """The claim controls two sandboxes and its status names X: the other is deleted only when
    the API confirms that this very claim's status names X and that X lives and is the claim's;
    a claim replaced meanwhile, or X gone or being deleted, deletes nothing."""
    api = HistoryApi()
    h = Harness(api)
    _, _, sbs = setup_pool(h, members=2)
    x = await ready_warm_claim(h)
    y = next(sb for sb in sbs if name_of(sb) != name_of(x))
    adopted_by_upstream(h, y, h.claim())
    h.sync()
    assert sorted(name_of(sb) for sb in h.owned_by(h.claim())) == sorted([name_of(x), name_of(y)])
    # the change reaches the API, not the caches
    if change == "claim_replaced":
        del api.objects[(SANDBOX_CLAIMS.plural, NS, "claim")]
        api.seed(SANDBOX_CLAIMS.plural, claim_v1beta1())
    elif change == "kept_gone":
        del api.objects[(SANDBOXES.plural, NS, name_of(x))]
    else:
        api.objects[(SANDBOXES.plural, NS, name_of(x))]["metadata"]["deletionTimestamp"] = (
            "2026-01-01T00:10:00Z"
        )
    api.calls.clear()
    await h.reconcile()
    assert ("get", SANDBOX_CLAIMS.plural, "claim") in api.calls, "the claim was re-read"
    assert [c for c in api.calls if c[0] == "delete"] == []
    assert api.stored(SANDBOXES.plural, NS, name_of(y)) is not None
    if change == "claim_replaced":
        assert "status" not in h.claim(), "nothing written on the new claim"
        assert chosen(h) == (None, None)
    assert api.violations == []


# --------------------------------------------------------------------------- the choice write
@pytest.mark.parametrize("label", [False, True], ids=["annotation", "label"])
@pytest.mark.parametrize("fate", ["adopted", "free", "gone"])
async def test_a_choice_another_pass_committed_first_is_finished_before_ours(
    fate: str, label: bool
) -> None:
    """Our choice write is refused because another pass already chose X on the claim: our
    candidate goes back on the warm queue and X is finished (adopted, or taken as it is when
    already the claim's); only once X is found gone is that choice cleared and ours adopted."""
    api = HistoryApi()
    h = Harness(api)
    _, _, (x, y) = setup_pool(h, members=2)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    chosen_elsewhere(h, name_of(x), label=label)
    if fate == "adopted":
        adopted_by_upstream(h, x, h.claim())
    elif fate == "gone":
        del api.objects[(SANDBOXES.plural, NS, name_of(x))]
    h.r.queue.remove(NS, name_of(x))  # our queue order makes us try Y
    api.calls.clear()
    await h.reconcile()
    claim_writes = [c for c in api.calls if c[:2] == ("patch", SANDBOX_CLAIMS.plural)]
    if fate == "gone":
        assert status_name(h) == name_of(y) and ready_status(h) == "True"
        assert sandbox_writes(h) == [("patch", name_of(y))]
        assert chosen(h) == (name_of(y), None)
        assert len(claim_writes) >= 3, "ours refused, X's cleared, then ours written"
    else:
        assert status_name(h) == name_of(x) and ready_status(h) == "True"
        assert sandbox_writes(h) == ([] if fate == "adopted" else [("patch", name_of(x))])
        assert chosen(h) == (name_of(x), None), "a label choice is moved to the annotation"
        assert claimed_by(h, name_of(y)) is None
        h.sync()
        assert name_of(y) in queued(h), "our candidate went back on the warm queue"
    assert len(h.owned_by(h.claim())) == 1
    assert api.violations == []


async def test_a_claim_replaced_under_a_pass_gets_no_choice_and_the_candidate_is_requeued() -> None:
    """The claim was deleted and made again under the same name since the cache saw it: the pass
    writes nothing on the new claim, adopts nothing, puts its candidate back on the warm queue,
    and looks again shortly."""
    h = Harness()
    _, _, (x,) = setup_pool(h, members=1)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    del h.api.objects[(SANDBOX_CLAIMS.plural, NS, "claim")]
    new = h.api.seed(SANDBOX_CLAIMS.plural, claim_v1beta1())
    h.api.calls.clear()
    assert await h.reconcile() == Result(requeue_after=CONFLICT_RECHECK)
    assert h.claim()["metadata"] == new["metadata"], "the new claim is untouched"
    assert "status" not in h.claim()
    assert sandbox_writes(h) == []
    assert claimed_by(h, name_of(x)) is None
    assert queued(h) == {name_of(x)}


async def test_a_claim_that_keeps_changing_is_looked_at_again_with_its_candidate_requeued() -> None:
    """Every choice write is refused because someone else keeps writing the claim (and no
    choice appears on it): after MAX_COMMIT_TRIES writes the pass gives up without adopting,
    its candidate back on the warm queue, and a later pass adopts that candidate."""
    h = Harness()
    _, _, (x,) = setup_pool(h, members=1)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())

    def someone_writes_the_claim(verb: str, plural: str, name: str) -> None:
        if (verb, plural) == ("patch", SANDBOX_CLAIMS.plural):
            claim_moved(h)

    h.api.before = someone_writes_the_claim
    h.api.calls.clear()
    assert await h.reconcile() == Result(requeue_after=CONFLICT_RECHECK)
    claim_writes = [c for c in h.api.calls if c[:2] == ("patch", SANDBOX_CLAIMS.plural)]
    assert len(claim_writes) == MAX_COMMIT_TRIES
    assert sandbox_writes(h) == []
    assert chosen(h) == (None, None)
    assert "status" not in h.claim()
    assert queued(h) == {name_of(x)}
    h.api.before = None
    h.sync(SANDBOX_CLAIMS.plural)
    await h.reconcile()
    assert status_name(h) == name_of(x) and ready_status(h) == "True"


# --------------------------------------------------------------------------- the adoption write
@pytest.mark.parametrize("failing", ["re_read", "second_try"])
async def test_a_failure_after_an_adoption_conflict_keeps_the_choice_and_requeues_the_sandbox(
    failing: str,
) -> None:
    """The adoption patch conflicts (the sandbox changed since the cache saw it), then the
    re-read of the sandbox or the one retry at its current version fails with a 500: the
    sandbox stays free and goes back on the warm queue, the claim keeps its choice, the error is
    reported, and the next pass adopts that sandbox."""
    api = HistoryApi()
    h = Harness(api)
    _, _, (x,) = setup_pool(h, members=1)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    patches: list[str] = []

    def status_moves_then_fails(verb: str, plural: str, name: str) -> None:
        if (verb, plural) != ("patch", SANDBOXES.plural):
            return
        patches.append(name)
        if len(patches) == 1:  # only its status moved: still a free pool sandbox
            api.objects[(plural, NS, name)]["metadata"]["resourceVersion"] = "9000"
        elif failing == "second_try" and len(patches) == 2:
            raise InternalError(message="etcd timeout")

    api.before = status_moves_then_fails
    if failing == "re_read":
        api.fail[("get", SANDBOXES.plural)] = [InternalError(message="etcd timeout")]
    with pytest.raises(KubeError):
        await h.reconcile()
    assert patches == [name_of(x)] * (1 if failing == "re_read" else 2)
    assert claimed_by(h, name_of(x)) is None
    assert queued(h) == {name_of(x)}
    assert chosen(h) == (name_of(x), None)
    assert ready_status(h) == "False" and status_name(h) == ""
    api.before = None
    h.sync(SANDBOX_CLAIMS.plural)
    await h.reconcile()
    assert status_name(h) == name_of(x) and ready_status(h) == "True"
    assert api.violations == []


async def test_a_pass_looks_at_a_bounded_number_of_candidates_then_clears_its_choice() -> None:
    """Every candidate tried is found taken by another claim (our cache lags): after
    MAX_ADOPTION_LOOKS candidates the pass stops looking, clears its own last choice from the
    claim and starts the claim cold; the pool sandbox it never looked at stays queued."""
    h = Harness()
    _, _, sbs = setup_pool(h, members=MAX_ADOPTION_LOOKS + 1)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    taken: list[str] = []

    def another_claim_takes_it(verb: str, plural: str, name: str) -> None:
        if (verb, plural) == ("patch", SANDBOXES.plural) and name not in taken:
            taken.append(name)
            stored = h.api.objects[(plural, NS, name)]
            stored["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": SANDBOX_CLAIM.api_version,
                    "kind": "SandboxClaim",
                    "name": f"other-{len(taken)}",
                    "uid": f"other-uid-{len(taken)}",
                    "controller": True,
                }
            ]
            stored["metadata"]["resourceVersion"] = str(20000 + len(taken))

    h.api.before = another_claim_takes_it
    await h.reconcile()
    assert len(sandbox_patches(h)) == len(taken) == MAX_ADOPTION_LOOKS
    assert ("create", SANDBOXES.plural, "claim") in h.api.calls
    assert status_name(h) == "claim", "cold"
    assert chosen(h) == (None, None), "the dead choice was cleared"
    (untried,) = {name_of(sb) for sb in sbs} - set(taken)
    assert claimed_by(h, untried) is None
    assert queued(h) == {untried}


# --------------------------------------------------------------------------- finishing a choice
@pytest.mark.parametrize("label", [False, True], ids=["annotation", "label"])
async def test_a_chosen_sandbox_of_the_claim_being_deleted_is_cleared_and_another_adopted(
    label: bool,
) -> None:
    """The claim's chosen X is the claim's but being deleted: the choice is cleared (from where
    it was written) and one other pool sandbox is adopted; X is not written."""
    api = HistoryApi()
    h = Harness(api)
    _, _, (x, y) = setup_pool(h, members=2)
    claim = choose(h, name_of(x), label=label)
    adopted_by_upstream(h, x, claim)
    api.objects[(SANDBOXES.plural, NS, name_of(x))]["metadata"]["deletionTimestamp"] = (
        "2026-01-01T00:10:00Z"
    )
    h.sync()
    api.calls.clear()
    await h.reconcile()
    assert sandbox_writes(h) == [("patch", name_of(y))]
    assert status_name(h) == name_of(y) and ready_status(h) == "True"
    assert chosen(h) == (name_of(y), None)
    assert api.violations == []


async def test_a_chosen_sandbox_deleted_during_its_adoption_is_cleared_and_another_adopted() -> (
    None
):
    """The claim's chosen X is deleted between its vetting and its adoption patch (a 404): the
    choice is cleared and one other pool sandbox is adopted instead."""
    api = HistoryApi()
    h = Harness(api)
    _, _, (x, y) = setup_pool(h, members=2)
    choose(h, name_of(x))

    def deleted_meanwhile(verb: str, plural: str, name: str) -> None:
        if (verb, plural, name) == ("patch", SANDBOXES.plural, name_of(x)):
            api.objects.pop((plural, NS, name), None)

    api.before = deleted_meanwhile
    api.calls.clear()
    await h.reconcile()
    assert sandbox_writes(h) == [("patch", name_of(x)), ("patch", name_of(y))]
    assert status_name(h) == name_of(y) and ready_status(h) == "True"
    assert chosen(h) == (name_of(y), None)
    assert [name_of(sb) for sb in h.owned_by(h.claim())] == [name_of(y)]
    assert api.violations == []


async def test_a_refused_label_migration_keeps_the_label_and_still_publishes_the_sandbox(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Moving a choice read from the deprecated label to the annotation is refused (the claim
    changed): that is logged and not an error, the label keeps naming the sandbox, and the claim
    still gets that sandbox, on this pass and the next, with no sandbox write."""
    h = Harness()
    _, _, (x, _) = setup_pool(h, members=2)
    claim = choose(h, name_of(x), label=True)
    adopted_by_upstream(h, x, claim)
    h.sync()
    h.api.fail[("patch", SANDBOX_CLAIMS.plural)] = [Conflict(409, "Conflict", "modified")]
    h.api.calls.clear()
    with caplog.at_level(logging.INFO, logger="agentsandbox.claim"):
        await h.reconcile()
    assert any("could not move the claim's sandbox label" in r.message for r in caplog.records)
    assert chosen(h) == (None, name_of(x))
    assert status_name(h) == name_of(x) and ready_status(h) == "True"
    assert sandbox_writes(h) == []
    h.sync()
    await h.reconcile()
    assert status_name(h) == name_of(x) and ready_status(h) == "True"
    assert chosen(h)[1] == name_of(x)
    assert sandbox_writes(h) == []
    assert [name_of(sb) for sb in h.owned_by(h.claim())] == [name_of(x)]
