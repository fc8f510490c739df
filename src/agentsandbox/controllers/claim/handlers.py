"""SandboxClaim controller: the event side (controller-runtime's handler/source half).

The informer indexes the claim controller reads through, the warm queue kept current from
Sandbox, pool and template events (never a reconcile request: a claim never waits for warm
capacity), and the mappings that re-queue unbound claims when the pool or template they name
appears or changes.
"""

from __future__ import annotations

from agentsandbox.api.conditions import find_condition
from agentsandbox.controllers.claim.plan import (
    REASON_CLAIM_EXPIRED,
    adoptable,
    claim_source,
    pool_owner,
)
from agentsandbox.controllers.claim.warm_index import WarmQueue
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.reconcile import Request
from agentsandbox.kube.store import KubeObject, index_by_namespaced_controller_uid

OWNER_INDEX = "claim-controller-uid"  # sandboxes by "<ns>/<UID of their controller>"
CLAIM_TEMPLATE_INDEX = "claim-template"  # claims by "<ns>/<template>"
CLAIM_POOL_INDEX = "claim-pool"  # claims by "<ns>/<pool>" (warmPoolRef or a pool policy)
POOL_TEMPLATE_INDEX = "claim-pool-template"  # pools by "<ns>/<template>"


def _ns_key(obj: KubeObject, value: str | None) -> list[str]:
    return [f"{obj['metadata'].get('namespace', '')}/{value}"] if value else []


def claim_template_index(claim: KubeObject) -> list[str]:
    return _ns_key(claim, claim_source(claim).template)


def claim_pool_index(claim: KubeObject) -> list[str]:
    return _ns_key(claim, claim_source(claim).pool)


def pool_template_index(pool: KubeObject) -> list[str]:
    return _ns_key(pool, ((pool.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name"))


def _condition(sb: KubeObject, kind: str) -> object:
    return find_condition((sb.get("status") or {}).get("conditions"), kind)


def sandbox_change_matters(old: KubeObject, new: KubeObject) -> bool:
    """An update of a claim-owned Sandbox that the claim reads: its Ready or Finished condition
    (each compared in full: an expiry shows only in Ready's reason), its pod IPs, the start of
    its deletion, or its owner references (an adoption, a release). Labels, annotations, spec
    and other conditions are not read by the claim, so their writes re-queue nothing."""
    o_meta, n_meta = old.get("metadata") or {}, new.get("metadata") or {}
    if bool(o_meta.get("deletionTimestamp")) != bool(n_meta.get("deletionTimestamp")):
        return True
    if (o_meta.get("ownerReferences") or []) != (n_meta.get("ownerReferences") or []):
        return True
    if ((old.get("status") or {}).get("podIPs") or []) != (
        (new.get("status") or {}).get("podIPs") or []
    ):
        return True
    return any(_condition(old, kind) != _condition(new, kind) for kind in ("Ready", "Finished"))


def unbound(claim: KubeObject) -> bool:
    """A live claim whose status names no sandbox yet, and that may still get one: an expired
    claim (its Ready says ``ClaimExpired``) waits for nothing from a pool or template."""
    meta = claim["metadata"]
    status = claim.get("status") or {}
    if meta.get("deletionTimestamp") or (status.get("sandbox") or {}).get("name"):
        return False
    ready = find_condition(status.get("conditions"), "Ready")
    return ready is None or ready.get("reason") != REASON_CLAIM_EXPIRED


class ClaimWatches:
    """Registers the indexes and event handlers on the shared informers; owns the warm queue."""

    def __init__(
        self, claims: Informer, sandboxes: Informer, pools: Informer, templates: Informer
    ) -> None:
        self.claims = claims
        self.sandboxes = sandboxes
        self.pools = pools
        self.queue = WarmQueue()
        sandboxes.add_index(OWNER_INDEX, index_by_namespaced_controller_uid)
        claims.add_index(CLAIM_TEMPLATE_INDEX, claim_template_index)
        claims.add_index(CLAIM_POOL_INDEX, claim_pool_index)
        pools.add_index(POOL_TEMPLATE_INDEX, pool_template_index)
        sandboxes.add_handler(self._track, lambda _, new: self._track(new), self._untrack)
        pools.add_handler(None, None, self._pool_deleted)
        templates.add_handler(self._template_added, None, self._template_deleted)

    # ---------------------------------------------------------------- the warm queue
    def _track(self, sb: KubeObject) -> None:
        meta = sb["metadata"]
        pool = pool_owner(sb)
        if pool is not None and adoptable(sb):
            self.queue.add((meta.get("namespace", ""), pool), meta["name"])
        else:
            self.queue.remove(meta.get("namespace", ""), meta["name"])

    def _untrack(self, sb: KubeObject) -> None:
        meta = sb["metadata"]
        self.queue.remove(meta.get("namespace", ""), meta["name"])

    def _pool_deleted(self, pool: KubeObject) -> None:
        meta = pool["metadata"]
        self.queue.drop_queue((meta.get("namespace", ""), meta["name"]))

    def pools_of_template(self, template: KubeObject) -> list[KubeObject]:
        meta = template["metadata"]
        return self.pools.by_index(
            POOL_TEMPLATE_INDEX, f"{meta.get('namespace', '')}/{meta['name']}"
        )

    def _template_deleted(self, template: KubeObject) -> None:
        for pool in self.pools_of_template(template):
            self._pool_deleted(pool)

    def _template_added(self, template: KubeObject) -> None:
        """A template (re)appeared: queue its pools' adoptable sandboxes again (each pool's
        members through the controller-UID index, never a scan of every sandbox)."""
        ns = template["metadata"].get("namespace", "")
        for pool in self.pools_of_template(template):
            name, uid = pool["metadata"]["name"], pool["metadata"].get("uid")
            if not uid:
                continue
            for sb in self.sandboxes.by_index(OWNER_INDEX, f"{ns}/{uid}"):
                if pool_owner(sb) == name:
                    self._track(sb)

    # ---------------------------------------------------------------- mapping
    def claims_for_pool(self, pool: KubeObject) -> list[Request]:
        meta = pool["metadata"]
        key = f"{meta.get('namespace', '')}/{meta['name']}"
        return [
            Request.from_object(c)
            for c in self.claims.by_index(CLAIM_POOL_INDEX, key)
            if unbound(c)
        ]

    def claim_for_freed_name(self, sb: KubeObject) -> list[Request]:
        """A Sandbox gone: the claim of the same name, if it waits for a sandbox. A cold
        sandbox takes its claim's name, so a same-name Sandbox of someone else (held
        Terminating, say) keeps the claim retrying with backoff; its deletion is the event the
        claim waits for, whatever the backoff has grown to."""
        meta = sb["metadata"]
        claim = self.claims.get(meta["name"], meta.get("namespace", ""))
        return [Request.from_object(claim)] if claim is not None and unbound(claim) else []

    def claims_for_template(self, template: KubeObject) -> list[Request]:
        meta = template["metadata"]
        ns = meta.get("namespace", "")
        found = {
            str(Request.from_object(c)): c
            for c in self.claims.by_index(CLAIM_TEMPLATE_INDEX, f"{ns}/{meta['name']}")
        }
        for pool in self.pools_of_template(template):
            for c in self.claims.by_index(CLAIM_POOL_INDEX, f"{ns}/{pool['metadata']['name']}"):
                found[str(Request.from_object(c))] = c
        return [Request.from_object(c) for c in found.values() if unbound(c)]
