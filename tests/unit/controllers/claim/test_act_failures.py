"""The claim's act steps when a write fails: the adoption patch (NotFound, Conflict and what the
re-read finds), the cold create (AlreadyExists and what the re-read finds, Forbidden), and the
lookup of the sandbox the claim's status names, each through the in-memory API of
tests/unit/fakes.py (resourceVersion and UID preconditions as the real one)."""

from __future__ import annotations

from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.kinds import SANDBOX_CLAIM
from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES, SANDBOXES
from agentsandbox.controllers.claim.act import MAX_ADOPTION_ATTEMPTS
from agentsandbox.controllers.claim.controller import RetryLater
from agentsandbox.kube.errors import Forbidden
from tests.unit.controllers.claim.test_controller import (
    NS,
    Harness,
    claim_v1alpha1,
    claim_v1beta1,
    setup_pool,
    template,
)


def sandbox_patches(h: Harness) -> list[str]:
    return [name for verb, plural, name in h.api.calls if (verb, plural) == ("patch", "sandboxes")]


def claimed_by(h: Harness, name: str) -> str | None:
    refs = h.sandbox(name)["metadata"].get("ownerReferences") or []
    return next((r["name"] for r in refs if r.get("kind") == "SandboxClaim"), None)


# --------------------------------------------------------------------------- adoption patch
async def test_a_candidate_deleted_since_the_cache_saw_it_is_skipped_for_the_next() -> None:
    h = Harness()
    _, _, sbs = setup_pool(h, members=2)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    gone: list[str] = []

    def deleted_meanwhile(verb: str, plural: str, name: str) -> None:
        if (verb, plural) == ("patch", "sandboxes") and not gone:
            gone.append(name)
            del h.api.objects[(plural, NS, name)]

    h.api.before = deleted_meanwhile
    await h.reconcile()
    (other,) = {s["metadata"]["name"] for s in sbs} - set(gone)
    assert sandbox_patches(h) == [gone[0], other]
    assert h.claim()["status"]["sandbox"]["name"] == other
    assert claimed_by(h, other) == "claim"
    assert not [c for c in h.api.calls if c[:2] == ("create", "sandboxes")]


async def test_a_conflict_on_a_candidate_deleted_before_the_re_read_takes_the_next() -> None:
    h = Harness()
    _, _, sbs = setup_pool(h, members=2)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    raced: list[str] = []

    def changed_then_deleted(verb: str, plural: str, name: str) -> None:
        if plural != "sandboxes":
            return
        if verb == "patch" and not raced:
            raced.append(name)
            h.api.objects[(plural, NS, name)]["metadata"]["resourceVersion"] = "999"
        elif verb == "get" and name == raced[0] and (plural, NS, name) in h.api.objects:
            del h.api.objects[(plural, NS, name)]

    h.api.before = changed_then_deleted
    await h.reconcile()
    (other,) = {s["metadata"]["name"] for s in sbs} - set(raced)
    assert ("get", "sandboxes", raced[0]) in h.api.calls
    assert sandbox_patches(h) == [raced[0], other]
    assert h.claim()["status"]["sandbox"]["name"] == other


async def test_repeated_failures_on_free_candidates_fall_back_to_a_cold_start() -> None:
    """Each candidate is still free when re-read but its second patch conflicts too (something
    keeps writing it): after MAX_ADOPTION_ATTEMPTS such failures the claim goes cold rather
    than looping over the pool, and no pool sandbox is left half adopted."""
    h = Harness()
    _, _, sbs = setup_pool(h, members=MAX_ADOPTION_ATTEMPTS + 2)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    bumps = iter(range(1000, 2000))

    def always_moving(verb: str, plural: str, name: str) -> None:
        if (verb, plural) == ("patch", "sandboxes"):
            h.api.objects[(plural, NS, name)]["metadata"]["resourceVersion"] = str(next(bumps))

    h.api.before = always_moving
    await h.reconcile()
    patched = sandbox_patches(h)
    assert len(patched) == 2 * MAX_ADOPTION_ATTEMPTS  # each: the patch and the one retry
    assert len(set(patched)) == MAX_ADOPTION_ATTEMPTS
    assert all(claimed_by(h, s["metadata"]["name"]) is None for s in sbs)
    assert ("create", "sandboxes", "claim") in h.api.calls
    assert h.claim()["status"]["sandbox"]["name"] == "claim"
    assert h.sandbox("claim")["metadata"]["labels"][keys.LABEL_LAUNCH_TYPE] == "cold"


async def test_a_candidate_changed_by_a_non_claim_writer_counts_as_a_failure() -> None:
    """Re-read after the conflict, the candidate is no pool sandbox any more (another controller,
    not a claim, took it over): it is left alone and the next candidate is tried."""
    h = Harness()
    _, _, sbs = setup_pool(h, members=2)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    changed: list[str] = []

    def relabelled(verb: str, plural: str, name: str) -> None:
        if (verb, plural) == ("patch", "sandboxes") and not changed:
            changed.append(name)
            stored = h.api.objects[(plural, NS, name)]
            stored["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "rs",
                    "uid": "rs-uid",
                    "controller": True,
                }
            ]
            stored["metadata"]["resourceVersion"] = "999"

    h.api.before = relabelled
    await h.reconcile()
    (other,) = {s["metadata"]["name"] for s in sbs} - set(changed)
    assert sandbox_patches(h) == [changed[0], other]  # no second try on the changed one
    assert claimed_by(h, changed[0]) is None
    assert h.claim()["status"]["sandbox"]["name"] == other


# --------------------------------------------------------------------------- cold create
def _same_name_sandbox(owner_uid: str | None, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "claim", "namespace": NS}
    if owner_uid is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": SANDBOX_CLAIM.api_version,
                "kind": "SandboxClaim",
                "name": "claim",
                "uid": owner_uid,
                "controller": True,
            }
        ]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        meta["finalizers"] = ["example.com/hold"]
    return {"apiVersion": "agents.x-k8s.io/v1alpha1", "kind": "Sandbox", "metadata": meta}


async def test_create_conflicting_with_our_own_sandbox_the_cache_missed_uses_it() -> None:
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template())
    c = h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    ours = h.add(SANDBOXES.plural, _same_name_sandbox(c["metadata"]["uid"]), cache=False)
    await h.reconcile()
    assert [c[:2] for c in h.api.writes()] == [
        ("patch", "sandboxclaims"),  # the first-observed annotation
        ("create", "sandboxes"),
        ("patch-status", "sandboxclaims"),
    ]
    assert h.sandbox("claim") == ours  # used as it is, not written
    assert h.claim()["status"]["sandbox"]["name"] == "claim"
    assert h.ready()["reason"] != "ReconcilerError"


async def test_create_conflicting_with_someone_elses_sandbox_is_a_reconciler_error() -> None:
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template())
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    theirs = h.add(SANDBOXES.plural, _same_name_sandbox("someone-else"), cache=False)
    with pytest.raises(RetryLater):
        await h.reconcile()
    assert h.sandbox("claim") == theirs
    assert h.ready()["reason"] == "ReconcilerError"
    assert 'sandbox "claim" is not controlled by claim "claim"' in h.ready()["message"]


async def test_create_conflicting_with_a_sandbox_being_deleted_waits_for_it() -> None:
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template())
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    old = h.add(SANDBOXES.plural, _same_name_sandbox("previous-claim", deleting=True), cache=False)
    with pytest.raises(RetryLater):  # backoff (security review #9); its deletion re-queues us
        await h.reconcile()
    assert h.sandbox("claim") == old
    ready = h.ready()
    assert ready["reason"] == "SandboxCreatePending"
    assert "still being deleted" in ready["message"]


async def test_create_conflicting_with_a_sandbox_gone_before_the_re_read_retries() -> None:
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template())
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    h.add(SANDBOXES.plural, _same_name_sandbox("previous-claim"), cache=False)

    def gone_before_the_read(verb: str, plural: str, name: str) -> None:
        if (verb, plural) == ("get", "sandboxes") and (plural, NS, name) in h.api.objects:
            del h.api.objects[(plural, NS, name)]

    h.api.before = gone_before_the_read
    with pytest.raises(RetryLater):
        await h.reconcile()
    assert h.ready()["reason"] == "SandboxCreatePending"
    assert "is being replaced" in h.ready()["message"]
    assert h.api.stored(SANDBOXES.plural, NS, "claim") is None


async def test_a_create_forbidden_for_another_reason_than_a_quota_is_an_error() -> None:
    """Not a quota: the API error itself is raised (retried with backoff, logged) after the
    claim's status says ReconcilerError with the server's message."""
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template())
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    h.api.fail[("create", "sandboxes")] = [
        Forbidden(403, "Forbidden", 'sandboxes is forbidden: User "x" cannot create')
    ]
    with pytest.raises(Forbidden):
        await h.reconcile()
    ready = h.ready()
    assert ready["reason"] == "ReconcilerError" and "cannot create" in ready["message"]
    assert h.api.stored(SANDBOXES.plural, NS, "claim") is None


# --------------------------------------------------------------------------- lookup
async def test_a_status_naming_a_sandbox_that_is_gone_provides_a_new_one() -> None:
    """The claim's status names a sandbox the cache does not have and the API says is gone:
    the lookup moves on and the claim is served again (here: cold, as it asks)."""
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template())
    claim = claim_v1alpha1(warmpool="none")
    claim["status"] = {"sandbox": {"name": "vanished"}}
    h.add(SANDBOX_CLAIMS.plural, claim)
    await h.reconcile()
    assert ("get", "sandboxes", "vanished") in h.api.calls
    assert h.claim()["status"]["sandbox"]["name"] == "claim"
    assert h.api.stored(SANDBOXES.plural, NS, "claim") is not None
