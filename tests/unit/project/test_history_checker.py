"""The claim history checker of tests/integration/invariants.py (``history_violations``, the
recorder ``SandboxHistory`` and the audit log reader), on synthetic histories: a clean one
passes, and each way of breaking a claim rule is flagged."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agentsandbox.api.resources import SANDBOXES
from agentsandbox.kube.client import ObjectList
from agentsandbox.kube.errors import Gone
from agentsandbox.kube.resources import Resource
from agentsandbox.kube.watch import WatchEvent
from tests.integration.invariants import (
    OUR_AGENT,
    OUR_MANAGER,
    AuditDelete,
    SandboxHistory,
    Version,
    _slim,
    history_violations,
    read_audit,
)
from tests.polling import eventually

NS = "ns"
BORN = "2026-01-01T00:00:00Z"
T0 = 1767225600.0  # BORN in epoch seconds
GC = "kube-controller-manager/v1.31.0 (linux/amd64) kubernetes/abc/generic-garbage-collector"
TESTS = "Python-urllib/3.11"
EXPIRED = Gone(410, "Expired", "too old resource version: 3 (9)")


def sandbox(
    rv: int,
    name: str = "s1",
    *,
    claim: str | None = None,
    claims: tuple[str, ...] = (),
    event: str = "MODIFIED",
    deleting: bool = False,
    shutdown: str | None = None,
) -> Version:
    refs = [
        {"kind": "SandboxClaim", "name": c, "uid": c, "controller": i == 0}
        for i, c in enumerate(claims or ((claim,) if claim else ()))
    ]
    if not refs:
        refs = [{"kind": "SandboxWarmPool", "name": "pool", "uid": "pool", "controller": True}]
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "uid": f"uid-{name}",
        "resourceVersion": str(rv),
        "creationTimestamp": BORN,
        "ownerReferences": refs,
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    spec = {"shutdownTime": shutdown} if shutdown else {}
    return Version(rv, event, {"kind": "Sandbox", "metadata": meta, "spec": spec})


def claim(
    rv: int,
    name: str = "c1",
    *,
    ready_with: str = "",
    names: str = "",
    reason: str = "Ready",
    event: str = "MODIFIED",
    deleting: bool = False,
    shutdown: str | None = None,
) -> Version:
    """Claim ``name`` (uid = name); Ready with ``ready_with``, or not Ready naming ``names``."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NS,
        "uid": name,
        "resourceVersion": str(rv),
        "creationTimestamp": BORN,
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    ready = "True" if ready_with else "False"
    status = {
        "sandbox": {"name": ready_with or names},
        "conditions": [{"type": "Ready", "status": ready, "reason": reason}],
    }
    spec: dict[str, Any] = {"warmPoolRef": {"name": "pool"}}
    if shutdown:
        spec["lifecycle"] = {"shutdownTime": shutdown, "shutdownPolicy": "Delete"}
    return Version(
        rv, event, {"kind": "SandboxClaim", "metadata": meta, "spec": spec, "status": status}
    )


def deleted(name: str, at: float, agent: str, code: int = 200) -> AuditDelete:
    return AuditDelete(T0 + at, "sandboxes", NS, name, agent, code)


def adoption() -> list[Version]:
    """A pool sandbox s1, claim c1 adopts it and is Ready with it."""
    return [
        sandbox(1, event="ADDED"),
        claim(2, event="ADDED"),
        sandbox(3, claim="c1"),
        claim(4, ready_with="s1"),
    ]


def claim_deleted_then_gc(start: int) -> list[Version]:
    return [
        claim(start, ready_with="s1", deleting=True),
        claim(start + 1, ready_with="s1", event="DELETED"),
        sandbox(start + 2, claim="c1", deleting=True),
        sandbox(start + 3, claim="c1", event="DELETED"),
    ]


def test_a_clean_history_passes() -> None:
    """Adopted, Ready, the claim deleted, the garbage collector deletes its sandbox."""
    history = [*adoption(), *claim_deleted_then_gc(5)]
    assert history_violations(history, [deleted("s1", 10, GC)]) == []


def test_versions_are_judged_in_resource_version_order_not_arrival_order() -> None:
    history = [*adoption(), *claim_deleted_then_gc(5)]
    assert history_violations(reversed(history), [deleted("s1", 10, GC)]) == []


def test_a_claim_naming_a_second_sandbox_while_its_first_lives_is_flagged() -> None:
    history = [
        *adoption(),
        sandbox(5, "s2", claim="c1", event="ADDED"),
        claim(6, ready_with="s2"),
    ]
    (found,) = history_violations(history, [])
    assert "claim ns/c1 names s2 at rv 6 while s1" in found


def test_a_claim_naming_a_second_sandbox_while_not_ready_is_flagged_too() -> None:
    history = [*adoption(), sandbox(5, "s2", claim="c1", event="ADDED"), claim(6, names="s2")]
    (found,) = history_violations(history, [])
    assert "names s2 at rv 6" in found


def test_a_claim_status_another_field_manager_wrote_is_not_judged_as_ours() -> None:
    """A forged status (another writer's field manager owns ``status.sandbox.name``) is not
    the controller swapping the claim; the same status written by our manager is."""
    forged = claim(6, names="s2")
    forged.obj["writer"] = "other-writer"
    history = [*adoption(), sandbox(5, "s2", claim="c1", event="ADDED"), forged]
    assert history_violations(history, []) == []
    forged.obj["writer"] = OUR_MANAGER
    (found,) = history_violations(history, [])
    assert "names s2 at rv 6" in found


def test_the_writer_of_a_claim_status_is_read_from_its_managed_fields() -> None:
    status_fields: dict[str, Any] = {"f:status": {"f:sandbox": {"f:name": {}, "f:podIPs": {}}}}
    meta = {
        "name": "c1",
        "uid": "c1",
        "resourceVersion": "3",
        "managedFields": [
            {"manager": "kubectl", "fieldsV1": {"f:spec": {"f:warmPoolRef": {}}}},
            {"manager": "other-writer", "subresource": "status", "fieldsV1": status_fields},
        ],
    }
    assert _slim({"kind": "SandboxClaim", "metadata": meta})["writer"] == "other-writer"
    del meta["managedFields"]
    assert _slim({"kind": "SandboxClaim", "metadata": meta})["writer"] is None


def test_a_claim_may_name_another_sandbox_once_its_first_one_is_being_deleted() -> None:
    """The test deleted the claim's sandbox; the claim is served by a new one."""
    history = [
        *adoption(),
        sandbox(5, claim="c1", deleting=True),
        sandbox(6, claim="c1", event="DELETED"),
        sandbox(7, "s2", claim="c1", event="ADDED"),
        claim(8, ready_with="s2"),
    ]
    assert history_violations(history, [deleted("s1", 5, TESTS)]) == []


def test_a_claim_ready_with_a_sandbox_not_made_yet_is_bound_to_the_one_made_next() -> None:
    """A status written before its sandbox (by a test, or copied from another cluster): the
    sandbox made next under that name is the claim's first Ready sandbox."""
    history = [
        claim(1, event="ADDED"),
        claim(2, ready_with="s1"),
        sandbox(3, event="ADDED", claim="c1"),
        sandbox(4, "s2", event="ADDED", claim="c1"),
        claim(5, ready_with="s2"),
    ]
    (found,) = history_violations(history, [])
    assert "claim ns/c1 names s2 at rv 5 while s1" in found
    assert history_violations(history[:4], []) == []


def test_a_sandbox_with_two_claim_owners_at_once_is_flagged() -> None:
    history = [sandbox(1, event="ADDED"), sandbox(2, claims=("c1", "c2"))]
    found = history_violations(history, [])
    assert any("has 2 claim owners at once (rv 2)" in f for f in found), found


def test_a_sandbox_controlled_by_two_claims_one_after_the_other_is_flagged() -> None:
    history = [sandbox(1, event="ADDED"), sandbox(2, claim="c1"), sandbox(3, claim="c2")]
    (found,) = history_violations(history, [])
    assert "controlled by two claims one after the other (rv 3)" in found


def test_a_sandbox_two_claims_are_first_ready_with_is_flagged() -> None:
    history = [*adoption(), claim(5, "c2", event="ADDED"), claim(6, "c2", ready_with="s1")]
    (found,) = history_violations(history, [])
    assert "s1 is the first Ready sandbox of two claims: c1 and c2 (rv 6)" in found


def test_a_claimed_sandbox_deleted_by_us_while_its_claim_lives_is_flagged() -> None:
    history = [*adoption(), sandbox(5, claim="c1", event="DELETED")]
    (found,) = history_violations(history, [deleted("s1", 5, OUR_AGENT + "0.1.0")])
    assert "s1, the first Ready sandbox of claim ns/c1, began to be deleted at rv 5" in found
    assert "deleted by us" in found


def test_a_claimed_sandbox_deleted_by_someone_else_while_its_claim_lives_passes() -> None:
    """The test's own delete (or any other actor's) is not the controller losing a claim."""
    history = [*adoption(), sandbox(5, claim="c1", event="DELETED")]
    assert history_violations(history, [deleted("s1", 5, TESTS)]) == []


def test_the_first_successful_delete_since_the_sandbox_was_created_is_the_one_judged() -> None:
    """A refused delete of ours (a stale precondition, 409) and one of an older sandbox of the
    same name (before this one was created) are not the delete that ended it."""
    history = [*adoption(), sandbox(5, claim="c1", event="DELETED")]
    ours = OUR_AGENT + "0.1.0"
    records = [deleted("s1", -5, ours), deleted("s1", 3, ours, code=409), deleted("s1", 4, TESTS)]
    assert history_violations(history, records) == []


def test_a_claimed_sandbox_deleted_by_us_after_its_claim_expired_passes() -> None:
    history = [
        sandbox(1, event="ADDED"),
        claim(2, event="ADDED", shutdown="2026-01-01T00:00:30Z"),
        sandbox(3, claim="c1"),
        claim(4, ready_with="s1", shutdown="2026-01-01T00:00:30Z"),
        sandbox(5, claim="c1", event="DELETED"),
    ]
    ours = OUR_AGENT + "0.1.0"
    assert history_violations(history, [deleted("s1", 31, ours)]) == []
    (early,) = history_violations(history, [deleted("s1", 29, ours)])
    assert "had not expired: deleted by us" in early


def test_a_claimed_sandbox_deleted_by_us_after_the_claim_said_it_expired_passes() -> None:
    history = [
        *adoption(),
        claim(5, names="s1", reason="ClaimExpired"),
        sandbox(6, claim="c1", event="DELETED"),
    ]
    assert history_violations(history, [deleted("s1", 6, OUR_AGENT + "0.1.0")]) == []


def test_a_claimed_sandbox_deleted_by_us_after_its_own_shutdown_time_passes() -> None:
    history = [
        *adoption(),
        sandbox(5, claim="c1", shutdown="2026-01-01T00:00:10Z"),
        sandbox(6, claim="c1", event="DELETED", shutdown="2026-01-01T00:00:10Z"),
    ]
    assert history_violations(history, [deleted("s1", 11, OUR_AGENT + "0.1.0")]) == []


def test_a_claimed_sandbox_deleted_by_us_once_the_claim_is_being_deleted_passes() -> None:
    history = [*adoption(), *claim_deleted_then_gc(5)]
    assert history_violations(history, [deleted("s1", 10, OUR_AGENT + "0.1.0")]) == []


def test_a_claimed_sandbox_deleted_without_an_audit_record_is_flagged() -> None:
    history = [*adoption(), sandbox(5, claim="c1", event="DELETED")]
    (no_record,) = history_violations(history, [])
    assert "the audit log has no record of the delete" in no_record
    (no_log,) = history_violations(history, None)
    assert "there is no audit log to tell who deleted it" in no_log


def test_a_gap_in_the_watch_is_flagged() -> None:
    (found,) = history_violations(adoption(), [], ["sandboxes in ns from rv 3 (410 Gone)"])
    assert "the watch of sandboxes in ns from rv 3 (410 Gone) had to relist" in found


def test_the_audit_reader_keeps_the_deletes_of_sandboxes_and_claims_after_the_offset(
    tmp_path: Path,
) -> None:
    def record(verb: str, resource: str, name: str, agent: str = TESTS) -> bytes:
        ev = {
            "verb": verb,
            "objectRef": {"resource": resource, "namespace": NS, "name": name},
            "userAgent": agent,
            "requestReceivedTimestamp": "2026-01-01T00:00:01.500000Z",
            "responseStatus": {"code": 200},
        }
        return json.dumps(ev).encode() + b"\n"

    log = tmp_path / "audit.log"
    before = record("delete", "sandboxes", "old")
    log.write_bytes(
        before
        + record("delete", "sandboxes", "s1", GC)
        + record("update", "sandboxes", "s1")
        + record("delete", "pods", "p")
        + record("deletecollection", "sandboxclaims", "")
        + b'{"verb": "delete", "objectRef"'  # being written
    )
    assert read_audit(log, len(before)) == [
        AuditDelete(T0 + 1.5, "sandboxes", NS, "s1", GC, 200),
        AuditDelete(T0 + 1.5, "sandboxclaims", NS, "", TESTS, 200),
    ]


# ------------------------------------------------------------------------------------ recorder
class GoneStream:
    """A watch that delivers ``events`` and then ends with 410 Gone."""

    def __init__(self, events: list[WatchEvent]) -> None:
        self.events = events
        self.resource_version: str | None = None

    async def __aenter__(self) -> GoneStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[WatchEvent]:
        for ev in self.events:
            self.resource_version = ev.object["metadata"]["resourceVersion"]
            yield ev
        raise EXPIRED


class HangingStream(GoneStream):
    """A watch that never delivers anything."""

    async def _events(self) -> AsyncIterator[WatchEvent]:
        await asyncio.Event().wait()
        yield WatchEvent("BOOKMARK", {})


class ExpiringClient:
    """A client whose sandbox watch expires once (after one event); every other watch hangs."""

    def __init__(self) -> None:
        self.watched: list[tuple[str, str | None]] = []

    async def list(self, resource: Resource, namespace: str | None = None) -> ObjectList:
        rv = "9" if self.watched else "1"
        return ObjectList([], rv)

    async def list_page(self, resource: Resource, namespace: str | None = None, **_: Any) -> Any:
        return {}

    def watch(
        self, resource: Resource, namespace: str | None = None, *, resource_version: str
    ) -> GoneStream:
        self.watched.append((resource.plural, resource_version))
        if resource is SANDBOXES and len([w for w in self.watched if w[0] == "sandboxes"]) == 1:
            added = sandbox(3, event="ADDED").obj
            return GoneStream([WatchEvent("ADDED", added)])
        return HangingStream([])


async def test_the_recorder_reports_a_watch_that_had_to_relist_as_a_gap() -> None:
    """A 410 Gone is a gap (the history cannot be trusted), not a silent relist: ``check``
    fails; the watch resumes from the relist's resourceVersion."""
    fake = ExpiringClient()
    async with SandboxHistory(fake, NS) as history:  # type: ignore[arg-type]
        await eventually(lambda: len(fake.watched) >= 3, within=5, what="the rewatch")
    assert fake.watched == [("sandboxclaims", "1"), ("sandboxes", "1"), ("sandboxes", "9")]
    assert history.created == 1
    assert history.gaps == [f"sandboxes in ns from rv 3 ({EXPIRED})"]
    try:
        history.check()
    except AssertionError as err:
        assert "had to relist" in str(err)
    else:
        raise AssertionError("a history with a gap passed its check")


# ------------------------------------------------------------------------------------ coverage
ROOT = Path(__file__).resolve().parents[3]
MAKES_CLAIMS = re.compile(r'SANDBOX_CLAIMS|"kind": "SandboxClaim"|claim_obj\(|warm_claim\(')
# modules that make claims without the autouse history: why
UNCHECKED = {
    "tests/integration/test_claim_history.py": "breaks the rules on purpose, with its own history",
}


def test_every_module_whose_tests_make_claims_checks_their_history() -> None:
    """Each integration and fault module that makes claims (by the names it uses to) has an
    autouse fixture of ``checked_history``."""
    modules = sorted(
        [*ROOT.glob("tests/integration/test_*.py"), *ROOT.glob("tests/faults/test_*.py")]
    )
    making = [m for m in modules if MAKES_CLAIMS.search(m.read_text())]
    assert len(making) > 10, making
    unchecked = [
        m.relative_to(ROOT).as_posix()
        for m in making
        if "checked_history(" not in m.read_text()
        and m.relative_to(ROOT).as_posix() not in UNCHECKED
    ]
    assert not unchecked, f"modules making claims with no checked_history fixture: {unchecked}"
