"""A history checker for claim act-step tests: an in-memory API (tests/unit/fakes.py) that can
lose the answer to a write it applied, and checks after every write it applies the rules a
claim's clients rely on (docs/claims.md, "Which sandbox a claim gets"):

(a) the first sandbox a claim was Ready with is the only one its status names while that
    sandbox lives (exists, not being deleted);
(b) no sandbox has two claims among its owners, and no sandbox is ever controlled by a second
    claim once one controlled it (adopted at most once);
(c) no sandbox a Ready claim's status names is deleted while that claim lives and has not
    expired.

``violations`` lists what broke, in order; tests assert it stays empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from agentsandbox.controllers.claim.plan import REASON_CLAIM_EXPIRED, adoptable, pool_owner
from agentsandbox.kube.errors import ApiConnectionError
from agentsandbox.kube.resources import Resource
from tests.unit.fakes import FakeApi

Obj = dict[str, Any]


def _ready(claim: Obj) -> dict[str, Any] | None:
    conds = (claim.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == "Ready"), None)


def _named(claim: Obj) -> str:
    return str(((claim.get("status") or {}).get("sandbox") or {}).get("name") or "")


def _claim_owners(sb: Obj) -> list[str]:
    return [
        str(r.get("uid"))
        for r in sb["metadata"].get("ownerReferences") or []
        if r.get("kind") == "SandboxClaim"
    ]


class HistoryApi(FakeApi):
    """The fake API, checking the history rules after each write it applies; ``lose`` makes
    the next ``n`` calls of a ``(verb, plural)`` apply and then raise a connection error."""

    def __init__(self) -> None:
        super().__init__()
        self.lose: dict[tuple[str, str], int] = {}
        self.violations: list[str] = []
        self.pinned: dict[str, str] = {}  # claim UID -> the sandbox it was first Ready with
        self.controllers: dict[str, set[str]] = {}  # sandbox UID -> claim UIDs that owned it

    # ---------------------------------------------------------------- the rules
    def _live_sandbox(self, ns: str, name: str) -> bool:
        sb = self.objects.get((SANDBOXES.plural, ns, name))
        return sb is not None and not sb["metadata"].get("deletionTimestamp")

    def _claim_written(self, claim: Obj) -> None:
        meta = claim["metadata"]
        uid, named = meta["uid"], _named(claim)
        pinned = self.pinned.get(uid)
        if pinned is not None and named != pinned and self._live_sandbox(meta["namespace"], pinned):
            self.violations.append(
                f"(a) claim {meta['name']} was Ready with {pinned}, its status now names "
                f"{named!r} while {pinned} lives"
            )
        ready = _ready(claim)
        if pinned is None and named and ready is not None and ready.get("status") == "True":
            self.pinned[uid] = named

    def _sandbox_written(self, sb: Obj) -> None:
        owners = _claim_owners(sb)
        name = sb["metadata"]["name"]
        if len(owners) > 1:
            self.violations.append(f"(b) sandbox {name} has claim owners {owners}")
        seen = self.controllers.setdefault(sb["metadata"]["uid"], set())
        seen.update(owners)
        if len(seen) > 1:
            self.violations.append(f"(b) sandbox {name} was owned by claims {sorted(seen)}")

    def _sandbox_deleted(self, ns: str, name: str) -> None:
        for (plural, cns, _), claim in self.objects.items():
            if plural != SANDBOX_CLAIMS.plural or cns != ns:
                continue
            ready = _ready(claim) or {}
            if (
                self.pinned.get(claim["metadata"]["uid"]) == name
                and _named(claim) == name
                and ready.get("reason") != REASON_CLAIM_EXPIRED
            ):
                self.violations.append(
                    f"(c) sandbox {name} deleted while claim {claim['metadata']['name']} names it"
                )

    def _lost(self, verb: str, plural: str) -> None:
        left = self.lose.get((verb, plural), 0)
        if left:
            self.lose[(verb, plural)] = left - 1
            raise ApiConnectionError("timed out after the write was sent", method=verb.upper())

    # ---------------------------------------------------------------- the client surface
    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        **kw: Any,
    ) -> Obj:
        out = await super().patch(resource, name, patch, namespace, subresource=subresource, **kw)
        if resource.plural == SANDBOX_CLAIMS.plural:
            self._claim_written(out)
        elif resource.plural == SANDBOXES.plural:
            self._sandbox_written(out)
        self._lost("patch-status" if subresource == "status" else "patch", resource.plural)
        return out

    async def create(
        self, resource: Resource, obj: Obj, namespace: str | None = None, **kw: Any
    ) -> Obj:
        out = await super().create(resource, obj, namespace, **kw)
        if resource.plural == SANDBOXES.plural:
            self._sandbox_written(out)
        self._lost("create", resource.plural)
        return out

    async def delete(
        self, resource: Resource, name: str, namespace: str | None = None, **kw: Any
    ) -> Obj:
        out = await super().delete(resource, name, namespace, **kw)
        if resource.plural == SANDBOXES.plural:
            self._sandbox_deleted(namespace or "", name)
        self._lost("delete", resource.plural)
        return out


def free_pool_sandboxes_not_queued(api: FakeApi, queues: Iterable[Any]) -> list[str]:
    """The pool sandboxes still free (adoptable) that some process's warm queue lacks."""
    missing = []
    for sb in api.all(SANDBOXES.plural):
        if not adoptable(sb):
            continue
        meta = sb["metadata"]
        key = (meta["namespace"], pool_owner(sb))
        for i, queue in enumerate(queues):
            if meta["name"] not in set(queue.names(key)):
                missing.append(f"{meta['name']} (process {i})")
    return missing
