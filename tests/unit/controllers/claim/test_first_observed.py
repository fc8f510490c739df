"""The claim's first-observed annotation is written no later than the status write that makes the
claim Ready (docs/design/claim.md, "Observability"), through the in-memory API of
tests/unit/fakes.py: the order of the claim's writes (a warm claim's first write carries it
together with the claim's choice of sandbox), the ``resourceVersion`` precondition of that write
and the status write chained on its answer, and what a failure of each write leaves behind."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.resources import SANDBOX_CLAIMS, Resource
from agentsandbox.api.timefmt import parse_rfc3339
from agentsandbox.controllers.claim.controller import CONFLICT_RECHECK
from agentsandbox.kube.errors import InternalError
from tests.unit.controllers.claim.test_controller import (
    NS,
    Harness,
    claim_v1beta1,
    setup_pool,
)
from tests.unit.fakes import FakeApi

OBSERVED = keys.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT
CHOSEN = "agents.x-k8s.io/sandbox-name"
GUARDS = (keys.ANNOTATION_CLAIM_FIRST_READY_AT, keys.ANNOTATION_CREATION_LATENCY_RECORDED)


class RecordingApi(FakeApi):
    """The fake API, keeping each claim patch's body and every version of the claim it stored
    (what a watcher of the claim would be shown, in order)."""

    def __init__(self) -> None:
        super().__init__()
        self.claim_patches: list[tuple[str, dict[str, Any]]] = []  # (verb, body)
        self.versions: list[dict[str, Any]] = []

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: dict[str, Any],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        **kw: Any,
    ) -> dict[str, Any]:
        if resource.plural == SANDBOX_CLAIMS.plural:
            verb = "patch-status" if subresource == "status" else "patch"
            self.claim_patches.append((verb, copy.deepcopy(patch)))
        out = await super().patch(resource, name, patch, namespace, subresource=subresource, **kw)
        if resource.plural == SANDBOX_CLAIMS.plural:
            self.versions.append(copy.deepcopy(out))
        return out


def warm_claim() -> tuple[Harness, RecordingApi]:
    api = RecordingApi()
    h = Harness(api)
    setup_pool(h)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    api.calls.clear()
    return h, api


def is_ready(claim: dict[str, Any]) -> bool:
    conds = (claim.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def claim_writes(api: FakeApi) -> list[tuple[str, str]]:
    return [(v, p) for v, p, _ in api.writes()]


async def test_the_annotation_is_written_first_and_the_status_is_chained_on_its_answer() -> None:
    h, api = warm_claim()
    cached_rv = h.claims.get("claim", NS)["metadata"]["resourceVersion"]  # type: ignore[index]
    assert await h.reconcile() is None
    assert claim_writes(api) == [
        ("patch", "sandboxclaims"),  # controller-first-observed-at, with the claim's choice
        ("patch", "sandboxes"),  # the adoption
        ("patch-status", "sandboxclaims"),  # Ready=True
        ("patch", "sandboxclaims"),  # the first-Ready guards
    ]
    (_, annotated), (_, status), (_, guards) = api.claim_patches
    chosen = h.claim()["status"]["sandbox"]["name"]
    assert annotated == {
        "metadata": {
            "resourceVersion": cached_rv,
            "annotations": {OBSERVED: "2027-01-15T08:00:00Z", CHOSEN: chosen},  # harness clock
        }
    }
    assert status["metadata"] == {
        "resourceVersion": api.versions[0]["metadata"]["resourceVersion"]
    }, "the status write's precondition is the version the annotation write made"
    assert set(guards["metadata"]["annotations"]) == set(GUARDS)
    assert "resourceVersion" not in guards["metadata"]
    # what a watcher sees: the annotation, then Ready on a version carrying it, then the guards
    assert [(OBSERVED in v["metadata"]["annotations"], is_ready(v)) for v in api.versions] == [
        (True, False),
        (True, True),
        (True, True),
    ]
    assert not any(g in api.versions[1]["metadata"]["annotations"] for g in GUARDS)
    stored = h.claim()["metadata"]["annotations"]
    assert stored[OBSERVED] == "2027-01-15T08:00:00Z"
    assert parse_rfc3339(stored[OBSERVED]).timestamp() == 1_800_000_000.0


async def test_a_changed_claim_refuses_the_first_write_and_the_pass_goes_on_from_it() -> None:
    """The claim changed after the cache saw it: the first write (the choice and the annotation)
    is refused by its precondition; the pass reads the claim again and, nothing else having been
    chosen, writes both at the claim's current version, then adopts once."""
    h, api = warm_claim()
    api.objects[(SANDBOX_CLAIMS.plural, NS, "claim")]["metadata"]["resourceVersion"] = "9999"
    assert await h.reconcile() is None
    assert claim_writes(api) == [
        ("patch", "sandboxclaims"),  # refused
        ("patch", "sandboxclaims"),
        ("patch", "sandboxes"),
        ("patch-status", "sandboxclaims"),
        ("patch", "sandboxclaims"),
    ]
    assert ("get", "sandboxclaims", "claim") in api.calls
    assert api.claim_patches[1][1]["metadata"]["resourceVersion"] == "9999"
    assert OBSERVED in api.claim_patches[1][1]["metadata"]["annotations"]
    assert is_ready(h.claim()) and OBSERVED in h.claim()["metadata"]["annotations"]
    assert len(h.owned_by(h.claim())) == 1


async def test_a_claim_deleted_under_the_annotation_write_writes_nothing_else() -> None:
    h, api = warm_claim()
    del api.objects[(SANDBOX_CLAIMS.plural, NS, "claim")]
    result = await h.reconcile()
    assert result is not None and result.requeue_after == CONFLICT_RECHECK
    assert claim_writes(api) == [("patch", "sandboxclaims")]
    assert not any(
        r.get("kind") == "SandboxClaim"
        for sb in api.all("sandboxes")
        for r in sb["metadata"].get("ownerReferences") or []
    )


async def test_a_failed_annotation_write_leaves_the_claim_and_the_pool_untouched() -> None:
    """The first write (the choice and the annotation) fails (a 500): no sandbox is touched,
    the pool sandbox goes back on the queue; the pass reports the error in the status, the
    annotation written first on its own; the retry adopts."""
    h, api = warm_claim()
    api.fail[("patch", "sandboxclaims")] = [InternalError(message="etcd timeout")]
    with pytest.raises(InternalError):
        await h.reconcile()
    assert claim_writes(api) == [
        ("patch", "sandboxclaims"),  # refused
        ("patch", "sandboxclaims"),  # the annotation alone
        ("patch-status", "sandboxclaims"),  # ReconcilerError
    ]
    assert h.owned_by(h.claim()) == []
    assert not (h.claim()["status"].get("sandbox") or {}).get("name")
    assert OBSERVED in h.claim()["metadata"]["annotations"]
    assert CHOSEN not in h.claim()["metadata"]["annotations"]
    h.sync()
    api.calls.clear()
    assert await h.reconcile() is None  # the retry
    assert claim_writes(api)[0] == ("patch", "sandboxclaims")
    assert is_ready(h.claim()) and len(h.owned_by(h.claim())) == 1


@pytest.mark.parametrize("error", ["conflict", "server"])
async def test_a_failed_status_write_leaves_the_annotation_and_the_adoption(error: str) -> None:
    """The annotation and the adoption are written, the status is not (409: a user changed the
    claim in between; or a 500): the claim is not Ready; the next pass keeps the annotation's
    value, adopts nothing more and writes the status."""
    h, api = warm_claim()
    if error == "conflict":

        def user_edit(verb: str, plural: str, name: str) -> None:
            if (verb, plural) == ("patch-status", "sandboxclaims") and api.before is not None:
                api.before = None
                stored = api.objects[(plural, NS, name)]
                stored["metadata"]["resourceVersion"] = "changed-by-a-user"

        api.before = user_edit
        result = await h.reconcile()
        assert result is not None and result.requeue_after == CONFLICT_RECHECK
    else:
        api.fail[("patch-status", "sandboxclaims")] = [InternalError(message="etcd timeout")]
        with pytest.raises(InternalError):
            await h.reconcile()
    assert claim_writes(api) == [
        ("patch", "sandboxclaims"),
        ("patch", "sandboxes"),
        ("patch-status", "sandboxclaims"),
    ]
    left = h.claim()
    value = left["metadata"]["annotations"][OBSERVED]
    assert not is_ready(left)
    (adopted,) = h.owned_by(left)
    h.sync()
    api.calls.clear()
    assert await h.reconcile() is None
    assert claim_writes(api) == [
        ("patch-status", "sandboxclaims"),
        ("patch", "sandboxclaims"),  # the guards
    ]
    done = h.claim()
    assert is_ready(done) and done["status"]["sandbox"]["name"] == adopted["metadata"]["name"]
    assert done["metadata"]["annotations"][OBSERVED] == value


async def test_a_failed_guard_write_leaves_ready_and_the_annotation() -> None:
    """The last write (the first-Ready guards) failing is logged: the claim stays Ready with its
    first-observed annotation; only the guards are missing."""
    h, api = warm_claim()

    def second_claim_patch_fails(verb: str, plural: str, name: str) -> None:
        if (verb, plural) == ("patch", "sandboxclaims") and len(api.claim_patches) == 3:
            raise InternalError(message="etcd timeout")

    api.before = second_claim_patch_fails
    assert await h.reconcile() is None
    assert claim_writes(api) == [
        ("patch", "sandboxclaims"),
        ("patch", "sandboxes"),
        ("patch-status", "sandboxclaims"),
        ("patch", "sandboxclaims"),
    ]
    left = h.claim()
    assert is_ready(left) and OBSERVED in left["metadata"]["annotations"]
    assert not any(g in left["metadata"]["annotations"] for g in GUARDS)


async def test_a_stale_cache_after_our_annotation_write_never_writes_a_second_value() -> None:
    """The pass right after ours sees the claim as it was before our write (the cache lags):
    its annotation write is refused (the precondition) and it looks again; the value stays."""
    h, api = warm_claim()
    await h.reconcile()
    value = h.claim()["metadata"]["annotations"][OBSERVED]
    api.calls.clear()
    result = await h.reconcile()  # no sync: the cache still shows the claim before our writes
    assert result is not None and result.requeue_after == CONFLICT_RECHECK
    assert claim_writes(api) == [("patch", "sandboxclaims")]
    assert h.claim()["metadata"]["annotations"][OBSERVED] == value
    assert len(h.owned_by(h.claim())) == 1


async def test_a_claim_that_carries_the_annotation_is_not_written_again() -> None:
    """E.g. written by an earlier process, or before a 409 on the status write."""
    h, api = warm_claim()
    stored = api.objects[(SANDBOX_CLAIMS.plural, NS, "claim")]["metadata"]
    stored["annotations"] = {OBSERVED: "2027-01-15T07:59:59.5Z"}
    stored["resourceVersion"] = "5000"
    h.sync()
    api.calls.clear()
    await h.reconcile()
    assert claim_writes(api) == [
        ("patch", "sandboxclaims"),  # the choice only
        ("patch", "sandboxes"),
        ("patch-status", "sandboxclaims"),
        ("patch", "sandboxclaims"),
    ]
    assert list(api.claim_patches[0][1]["metadata"]["annotations"]) == [CHOSEN]
    assert h.claim()["metadata"]["annotations"][OBSERVED] == "2027-01-15T07:59:59.5Z"


async def test_without_observability_annotations_only_the_first_ready_guards_are_written() -> None:
    h, api = warm_claim()
    h.r.observability_annotations = False
    await h.reconcile()
    assert claim_writes(api) == [
        ("patch", "sandboxclaims"),  # the choice only
        ("patch", "sandboxes"),
        ("patch-status", "sandboxclaims"),
        ("patch", "sandboxclaims"),  # the first-Ready guards
    ]
    assert list(api.claim_patches[0][1]["metadata"]["annotations"]) == [CHOSEN]
    assert OBSERVED not in (h.claim()["metadata"].get("annotations") or {})
