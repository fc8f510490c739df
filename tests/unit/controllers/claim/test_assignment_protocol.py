"""The claim's assignment protocol (docs/claims.md, "Which sandbox a claim gets"): the claim's
choice is written on the claim first, then the sandbox is patched; a pass that finds a written
choice finishes or clears that one; a published, live sandbox is never replaced; a candidate an
adoption write failed on goes back on the warm queue. Through the in-memory API of
tests/unit/fakes.py (resourceVersion and UID preconditions as the real one)."""

from __future__ import annotations

from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.kinds import SANDBOX_CLAIM
from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from agentsandbox.kube.errors import (
    ApiConnectionError,
    Forbidden,
    InternalError,
    Invalid,
    KubeError,
)
from agentsandbox.kube.metrics import REGISTRY
from tests.unit.controllers.claim.history import HistoryApi
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
    h.sync(SANDBOX_CLAIMS.plural)  # the claim's failure status arrives; no sandbox event
    await h.reconcile()  # the retry (an idle Ready pool sandbox gets no event to re-queue it)
    assert status_name(h) == sb["metadata"]["name"]
    assert not [c for c in h.api.calls if c[:2] == ("create", SANDBOXES.plural)]


# --------------------------------------------------------------------------- lost answers
@pytest.mark.parametrize("members", [1, 2, 3, 4])
async def test_an_adoption_applied_but_unanswered_is_finished_not_doubled(members: int) -> None:
    """claim review #1b: the adoption patch reaches the API server and is applied, but its
    answer is lost (a client timeout). The retries come before the sandbox watch delivers the
    change (the sandbox cache still shows the pool sandbox free; the claim cache follows): they
    must finish that adoption, never adopt a second pool sandbox."""
    api = HistoryApi()
    h = Harness(api)
    _, p, _ = setup_pool(h, members=members)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    api.lose[("patch", SANDBOXES.plural)] = 1
    with pytest.raises(KubeError):
        await h.reconcile()
    (first,) = h.owned_by(h.claim())  # the write was applied
    for _ in range(3):  # retries, the sandbox cache never catching up
        h.sync(SANDBOX_CLAIMS.plural)
        await h.reconcile()
    owned = [sb["metadata"]["name"] for sb in h.owned_by(h.claim())]
    assert owned == [first["metadata"]["name"]], "one adoption, the first one"
    assert status_name(h) == first["metadata"]["name"] and ready_status(h) == "True"
    h.sync()
    free = {
        sb["metadata"]["name"]
        for sb in api.all(SANDBOXES.plural)
        if sb["metadata"]["name"] != first["metadata"]["name"]
    }
    assert set(h.r.queue.names((NS, p["metadata"]["name"]))) == free
    assert api.violations == []


# --------------------------------------------------------------------------- two processes
async def test_a_published_sandbox_is_never_replaced_nor_deleted_by_a_lagging_process() -> None:
    """claim review #3 (split brain: leader election off, or overlapping leaders). P1 adopts X
    and publishes it (Ready). P2, whose caches lag, adopts Y for the same claim; its status
    write is refused (the claim moved), so it remembers Y. P2's claim cache then catches up
    (the status names X) while its sandbox cache still shows neither X nor Y as the claim's.
    P2 must keep X: the status never names another sandbox while X lives, and X is never
    deleted; Y is the duplicate."""
    api = HistoryApi()
    p1, p2 = Harness(api), Harness(api)
    p1.r.observability_annotations = p2.r.observability_annotations = False
    setup_pool(p1, members=2)
    p1.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    p2.sync()
    await p1.reconcile()
    x = status_name(p1)
    assert x and ready_status(p1) == "True"
    # P2: both caches as before P1's pass; its queue order makes it try the other sandbox
    p2.r.queue.remove(NS, x)
    await p2.reconcile()
    p2.sync(SANDBOX_CLAIMS.plural)  # the claim watch catches up, the sandbox watch does not
    for _ in range(2):
        await p2.reconcile()
        p2.sync(SANDBOX_CLAIMS.plural)
    assert status_name(p1) == x, "the published sandbox is still the one named"
    for h in (p1, p2, p1, p2):  # then everything catches up
        h.sync()
        await h.reconcile()
    assert api.violations == []
    assert status_name(p1) == x and ready_status(p1) == "True"
    assert [sb["metadata"]["name"] for sb in p1.owned_by(p1.claim())] == [x]


# --------------------------------------------------------------------------- choices on claims
CHOSEN = "agents.x-k8s.io/sandbox-name"


def claim_owner_ref(claim: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_CLAIM.api_version,
        "kind": "SandboxClaim",
        "name": claim["metadata"]["name"],
        "uid": claim["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def choose(h: Harness, sb_name: str, *, label: bool = False) -> dict[str, Any]:
    """A claim carrying a choice of ``sb_name`` as upstream's controller writes it (the
    annotation; before v1.0.1 the label of the same key), caches caught up."""
    body = claim_v1beta1()
    body["metadata"]["labels" if label else "annotations"] = {CHOSEN: sb_name}
    claim = h.add(SANDBOX_CLAIMS.plural, body)
    return claim


def adopted_by_upstream(h: Harness, sb: dict[str, Any], claim: dict[str, Any]) -> None:
    stored = h.api.objects[(SANDBOXES.plural, NS, sb["metadata"]["name"])]
    stored["metadata"]["ownerReferences"] = [claim_owner_ref(claim)]
    for key in (keys.LABEL_WARM_POOL_SANDBOX, keys.LABEL_SANDBOX_POD_TEMPLATE_HASH):
        stored["metadata"]["labels"].pop(key, None)
    stored["metadata"]["resourceVersion"] = "7000"


def sandbox_writes(h: Harness) -> list[tuple[str, str]]:
    return [(v, n) for v, p, n in h.api.writes() if p == SANDBOXES.plural]


@pytest.mark.parametrize("label", [False, True], ids=["annotation", "label"])
async def test_a_choice_upstream_adopted_is_published_not_doubled(label: bool) -> None:
    """Upstream's controller chose X and adopted it, then stopped before the claim's status
    (switching controllers). The claim gets X, nothing else is adopted or created; a choice in
    the deprecated label is moved to the annotation."""
    h = Harness()
    _, _, (x, _) = setup_pool(h, members=2)
    claim = choose(h, x["metadata"]["name"], label=label)
    adopted_by_upstream(h, x, claim)
    h.sync()
    h.api.calls.clear()
    await h.reconcile()
    assert status_name(h) == x["metadata"]["name"]
    assert sandbox_writes(h) == []
    assert [sb["metadata"]["name"] for sb in h.owned_by(h.claim())] == [x["metadata"]["name"]]
    meta = h.claim()["metadata"]
    assert meta["annotations"][CHOSEN] == x["metadata"]["name"]
    assert CHOSEN not in (meta.get("labels") or {})


@pytest.mark.parametrize("label", [False, True], ids=["annotation", "label"])
@pytest.mark.parametrize("fresh_process", [False, True], ids=["same", "restarted"])
async def test_a_choice_caught_mid_adoption_is_finished_not_doubled(
    label: bool, fresh_process: bool
) -> None:
    """The claim chose X (written by upstream's controller, or by us before a crash), X is still
    the pool's: the pass adopts X, and only X, though other pool sandboxes wait in the queue."""
    api = HistoryApi()
    h = Harness(api)
    _, p, sbs = setup_pool(h, members=3)
    x = sbs[1]
    choose(h, x["metadata"]["name"], label=label)
    if fresh_process:
        h = Harness(api)
        h.sync()
    api.calls.clear()
    await h.reconcile()
    assert sandbox_writes(h) == [("patch", x["metadata"]["name"])]
    assert status_name(h) == x["metadata"]["name"] and ready_status(h) == "True"
    assert [sb["metadata"]["name"] for sb in h.owned_by(h.claim())] == [x["metadata"]["name"]]
    meta = h.claim()["metadata"]
    assert meta["annotations"][CHOSEN] == x["metadata"]["name"]
    assert CHOSEN not in (meta.get("labels") or {})
    h.sync()
    left = {s["metadata"]["name"] for s in sbs} - {x["metadata"]["name"]}
    assert set(h.r.queue.names((NS, p["metadata"]["name"]))) == left
    assert api.violations == []


@pytest.mark.parametrize("fate", ["deleted", "another_claims", "not_a_pool_sandbox"])
@pytest.mark.parametrize("label", [False, True], ids=["annotation", "label"])
async def test_a_dead_choice_is_cleared_then_one_sandbox_is_adopted(fate: str, label: bool) -> None:
    """The chosen X is gone, another claim's, or no longer a pool sandbox (its pool released
    it): the choice is cleared (a write preconditioned on the claim's version) and the claim
    adopts one other pool sandbox; X is left alone."""
    api = HistoryApi()
    h = Harness(api)
    _, _, (x, y) = setup_pool(h, members=2)
    x_name = x["metadata"]["name"]
    choose(h, x_name, label=label)
    if fate == "deleted":
        del api.objects[(SANDBOXES.plural, NS, x_name)]
    elif fate == "another_claims":
        other = h.add(SANDBOX_CLAIMS.plural, claim_v1beta1("other"))
        adopted_by_upstream(h, x, other)
    else:
        api.objects[(SANDBOXES.plural, NS, x_name)]["metadata"]["ownerReferences"] = []
    # the sandbox cache still shows X as a free pool sandbox: only the API knows
    api.calls.clear()
    await h.reconcile()
    h.sync(SANDBOX_CLAIMS.plural)
    if status_name(h) == "":
        await h.reconcile()  # the pass that cleared the choice may look again
    assert status_name(h) == y["metadata"]["name"]
    assert [sb["metadata"]["name"] for sb in h.owned_by(h.claim())] == [y["metadata"]["name"]]
    meta = h.claim()["metadata"]
    assert meta["annotations"][CHOSEN] == y["metadata"]["name"]
    assert CHOSEN not in (meta.get("labels") or {})
    assert ("patch", x_name) not in sandbox_writes(h)
    assert api.violations == []


@pytest.mark.parametrize("failure", ["500", "conflict"])
async def test_a_failed_finish_keeps_the_choice_and_the_sandbox_queued(failure: str) -> None:
    """Finishing a chosen X fails (a 500; or X keeps changing: a 409 on every try): X stays
    free and queued, the claim keeps its choice, and a later pass adopts X, no other."""
    api = HistoryApi()
    h = Harness(api)
    _, p, sbs = setup_pool(h, members=2)
    x = sbs[0]["metadata"]["name"]
    choose(h, x)
    if failure == "500":
        api.fail[("patch", SANDBOXES.plural)] = [InternalError(message="etcd timeout")]
        with pytest.raises(KubeError):
            await h.reconcile()
    else:
        bumps = iter(range(8000, 9000))

        def keeps_changing(verb: str, plural: str, name: str) -> None:
            if (verb, plural, name) == ("patch", SANDBOXES.plural, x):
                api.objects[(plural, NS, name)]["metadata"]["resourceVersion"] = str(next(bumps))

        api.before = keeps_changing
        await h.reconcile()
        api.before = None
    assert h.owned_by(h.claim()) == []
    assert h.claim()["metadata"]["annotations"][CHOSEN] == x
    assert x in set(h.r.queue.names((NS, p["metadata"]["name"])))
    h.sync(SANDBOX_CLAIMS.plural)
    await h.reconcile()
    assert [sb["metadata"]["name"] for sb in h.owned_by(h.claim())] == [x]
    assert status_name(h) == x
    assert api.violations == []


async def test_without_annotations_a_warm_claim_still_records_its_controller_latency() -> None:
    """With --disable-claim-observability-annotations the first-observed time lives in memory;
    the claim's choice write returns the claim without it, and the first Ready must still be
    measured from it."""
    h = Harness()
    h.r.observability_annotations = False
    setup_pool(h, members=1)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    labels = {"launch_type": "warm", "sandbox_template": "tpl"}
    family = "agent_sandbox_claim_controller_startup_latency_ms_count"
    before = REGISTRY.get_sample_value(family, labels) or 0.0
    await h.reconcile()
    assert ready_status(h) == "True"
    assert (REGISTRY.get_sample_value(family, labels) or 0.0) == before + 1
