"""Every write of a claim's act step failing in every way, in one process or two, checked against
the history rules of tests/unit/controllers/claim/history.py (docs/claims.md, "Which sandbox a
claim gets").

The writes: the claim's choice of a pool sandbox (``commit``), the sandbox's adoption
(``adopt``), the claim's status (``status``), the clearing of a choice found dead (``clear``).
The failures: a 5xx; a timeout after the write was applied; an admission webhook's refusal; a
404 (the object deleted just before); a 409 (the object changed just before); a crash right
after the write was applied (a fresh reconciler with fresh caches resumes). The topologies: one
process whose sandbox watch lags, or two processes (leader election off) with caches lagging
differently.

Two claims race for three pool sandboxes; one of them carries a choice of a sandbox that no
longer exists (so that every pass has a choice to clear). After each case: the history rules
held after every write; each live claim ends Ready with exactly one sandbox; every pool sandbox
ends adopted once or free and queued in every running process.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from agentsandbox.controllers.claim.plan import adoptable
from agentsandbox.kube.errors import (
    ApiConnectionError,
    InternalError,
    Invalid,
    KubeError,
)
from agentsandbox.kube.resources import Resource
from tests.unit.controllers.claim.history import HistoryApi, free_pool_sandboxes_not_queued
from tests.unit.controllers.claim.test_controller import NS, Harness, claim_v1beta1, setup_pool

CHOSEN = "agents.x-k8s.io/sandbox-name"
CLAIMS = ("a", "b")
WRITES = ("commit", "adopt", "status", "clear")
FAULTS = ("5xx", "timeout", "admission", "404", "409", "crash")


class Crash(Exception):
    """The process died right after the write was applied."""


def _kind(plural: str, body: dict[str, Any], subresource: str | None) -> str:
    if plural == SANDBOXES.plural:
        return "adopt"
    if subresource == "status":
        return "status"
    meta = body.get("metadata") or {}
    values = [
        (meta.get("annotations") or {}).get(CHOSEN, "-"),
        (meta.get("labels") or {}).get(CHOSEN, "-"),
    ]
    if None in values:
        return "clear"
    if any(v != "-" for v in values):
        return "commit"
    return "other"


class FaultyApi(HistoryApi):
    """Fails the first write of kind ``target`` with ``fault`` (once)."""

    def __init__(self, target: str, fault: str) -> None:
        super().__init__()
        self.target, self.fault = target, fault
        self.fired = False

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
        if self.fired or _kind(resource.plural, patch, subresource) != self.target:
            return await super().patch(
                resource, name, patch, namespace, subresource=subresource, **kw
            )
        self.fired = True
        key = (resource.plural, namespace or "", name)
        if self.fault == "5xx":
            raise InternalError(message="etcd timeout")
        if self.fault == "admission":
            raise Invalid(
                422, "Invalid", 'admission webhook "policy.example.com" denied the request'
            )
        if self.fault == "404":
            self.objects.pop(key, None)
        elif self.fault == "409":
            self.objects[key]["metadata"]["resourceVersion"] = str(next(self._rv))
        out = await super().patch(resource, name, patch, namespace, subresource=subresource, **kw)
        if self.fault == "timeout":
            raise ApiConnectionError("timed out after the write was sent", method="PATCH")
        if self.fault == "crash":
            raise Crash(f"killed after {self.target} {name}")
        return out


def lagging_sync(h: Harness, process: int, step: int) -> None:
    """The caches catch up, some later than others: process 0's sandbox watch lags one step
    behind its claim watch; process 1's claim and sandbox watches lag on alternate steps."""
    if process == 0:
        h.sync(SANDBOX_CLAIMS.plural)
        if step % 2:
            h.sync(SANDBOXES.plural)
    else:
        h.sync(SANDBOX_CLAIMS.plural if step % 2 else SANDBOXES.plural)


@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("write", WRITES)
async def test_a_failed_write_never_swaps_doubles_or_loses_a_sandbox(
    write: str, fault: str, processes: int
) -> None:
    api = FaultyApi(write, fault)
    first = Harness(api)
    setup_pool(first, members=3)
    first.add(SANDBOX_CLAIMS.plural, claim_v1beta1("a"))
    b = claim_v1beta1("b")
    b["metadata"]["annotations"] = {CHOSEN: "gone-00000"}  # chosen, then deleted
    first.add(SANDBOX_CLAIMS.plural, b)
    hs = [first] + [Harness(api) for _ in range(processes - 1)]
    for h in hs[1:]:
        h.sync()
    crashed = 0
    for step in range(6):
        for i in range(len(hs)):
            for name in CLAIMS if (step + i) % 2 == 0 else reversed(CLAIMS):
                try:
                    await hs[i].reconcile(name)
                except KubeError:
                    pass  # retried by the next step (backoff)
                except Crash:
                    crashed += 1
                    hs[i] = Harness(api)  # a new process: empty queue, no memory
                    hs[i].sync()
            lagging_sync(hs[i], i, step)
    for _ in range(2):  # the watches catch up; the passes settle
        for h in hs:
            h.sync()
            for name in CLAIMS:
                await h.reconcile(name)
    assert api.fired, f"no {write} write happened"
    assert crashed == (fault == "crash")
    assert api.violations == []
    for name in CLAIMS:
        claim = api.stored(SANDBOX_CLAIMS.plural, NS, name)
        if claim is None:
            continue  # deleted (the 404 cases): its sandbox goes with it
        named = ((claim.get("status") or {}).get("sandbox") or {}).get("name")
        owned = [sb["metadata"]["name"] for sb in hs[0].owned_by(claim)]
        assert owned == [named], (name, owned, named)
        ready = next(c for c in claim["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True", (name, ready)
    for h in hs:
        h.sync()
    assert free_pool_sandboxes_not_queued(api, [h.r.queue for h in hs]) == []
    for sb in api.all(SANDBOXES.plural):  # free (and queued, above) or a claim's
        owner = next(
            (r for r in sb["metadata"].get("ownerReferences") or [] if r.get("controller")), {}
        )
        assert adoptable(sb) or owner.get("kind") == "SandboxClaim", sb["metadata"]["name"]
