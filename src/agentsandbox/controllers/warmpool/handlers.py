"""SandboxWarmPool controller: the event side (controller-runtime's handler/source half).

The informer indexes the reconciler reads through, the Sandbox event handlers that lower the
pool's expectations and measure a member's time to its first Ready, the pool deletion signal
that stops a running create batch, and the mapping that re-queues a template's pools.
"""

from __future__ import annotations

from collections.abc import Callable

from agentsandbox.api import keys
from agentsandbox.api.conditions import find_condition, is_sandbox_ready
from agentsandbox.api.kinds import SANDBOX_WARM_POOL, TEMPLATE_REF_FIELD
from agentsandbox.api.owners import controller_of
from agentsandbox.api.timefmt import parse_rfc3339
from agentsandbox.controllers.warmpool.metrics import TIME_TO_READY
from agentsandbox.kube.expectations import Expectations
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.reconcile import Request
from agentsandbox.kube.store import KubeObject, index_by_namespaced_controller_uid

POOL_INDEX = "warm-pool"  # sandboxes by "<namespace>/<pool name hash>"
CONTROLLER_INDEX = "warm-pool-controller"  # sandboxes by "<ns>/<their controller's UID>"
TEMPLATE_INDEX = TEMPLATE_REF_FIELD  # pools by "<namespace>/<template name>"


def pool_index(sb: KubeObject) -> list[str]:
    meta = sb.get("metadata") or {}
    value = (meta.get("labels") or {}).get(keys.LABEL_WARM_POOL_SANDBOX)
    return [f"{meta.get('namespace', '')}/{value}"] if value else []


def template_index(pool: KubeObject) -> list[str]:
    meta = pool.get("metadata") or {}
    name = ((pool.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name")
    return [f"{meta.get('namespace', '')}/{name}"] if name else []


def _pool_owner_uid(sb: KubeObject) -> str | None:
    """The UID of the SandboxWarmPool controlling ``sb`` (expectations are keyed by pool UID, so a
    pool deleted and re-created under the same name starts clean)."""
    ref = controller_of(sb)
    if ref is None or ref.get("kind") != SANDBOX_WARM_POOL.kind:
        return None
    if not str(ref.get("apiVersion", "")).startswith(SANDBOX_WARM_POOL.group + "/"):
        return None
    return str(ref.get("uid") or "") or None


class PoolWatches:
    """Registers the indexes and event handlers on the shared informers. ``expectations`` are
    the pool writer's; ``on_pool_gone`` is called with the UID of a pool deleted (or being
    deleted)."""

    def __init__(
        self,
        pools: Informer,
        sandboxes: Informer,
        expectations: Expectations,
        on_pool_gone: Callable[[str], None],
    ) -> None:
        self.pools = pools
        self.expectations = expectations
        self.on_pool_gone = on_pool_gone
        self._ready_seen: set[str] = set()  # sandbox UIDs whose first Ready was measured
        sandboxes.add_index(POOL_INDEX, pool_index)
        sandboxes.add_index(CONTROLLER_INDEX, index_by_namespaced_controller_uid)
        pools.add_index(TEMPLATE_INDEX, template_index)
        sandboxes.add_handler(self._on_add, self._on_update, self._on_delete)
        add_pool_handler = getattr(pools, "add_handler", None)
        if add_pool_handler is not None:
            add_pool_handler(None, self._on_pool_update, self._on_pool_delete)

    # ---------------------------------------------------------------- pool deletion
    def _on_pool_update(self, _old: KubeObject, new: KubeObject) -> None:
        if new["metadata"].get("deletionTimestamp"):
            self.on_pool_gone(new["metadata"].get("uid", ""))

    def _on_pool_delete(self, pool: KubeObject) -> None:
        self.on_pool_gone(pool["metadata"].get("uid", ""))

    # ---------------------------------------------------------------- expectations observers
    def _own_pool_uid(self, sb: KubeObject) -> str | None:
        """The UID of the pool controlling ``sb`` if that pool is in ``sb``'s own namespace (a
        reference may name any UID: a sandbox elsewhere naming our pool is not the pool's)."""
        uid = _pool_owner_uid(sb)
        get = getattr(self.pools, "get", None)
        if uid is None or get is None:
            return uid
        ref = controller_of(sb) or {}
        pool = get(str(ref.get("name") or ""), sb["metadata"].get("namespace"))
        return uid if pool is not None and pool["metadata"].get("uid") == uid else None

    def _on_add(self, sb: KubeObject) -> None:
        uid = self._own_pool_uid(sb)
        if uid is not None:
            self.expectations.creation_observed(uid)

    def _on_update(self, old: KubeObject, new: KubeObject) -> None:
        if new["metadata"].get("deletionTimestamp") and not old["metadata"].get(
            "deletionTimestamp"
        ):
            self._deletion_seen(new)
        if is_sandbox_ready(new) and not is_sandbox_ready(old):
            self._observe_time_to_ready(new)

    def _on_delete(self, sb: KubeObject) -> None:
        self._deletion_seen(sb)
        self._ready_seen.discard(sb["metadata"].get("uid", ""))

    def _deletion_seen(self, sb: KubeObject) -> None:
        uid = self._own_pool_uid(sb)
        if uid is not None:
            self.expectations.deletion_observed(uid, sb["metadata"].get("uid", ""))

    def _observe_time_to_ready(self, sb: KubeObject) -> None:
        """Creation to the first Ready=True of a pool sandbox (later flips are not measured)."""
        meta = sb["metadata"]
        ref = controller_of(sb)
        if self._own_pool_uid(sb) is None or ref is None or meta.get("uid") in self._ready_seen:
            return
        self._ready_seen.add(meta.get("uid", ""))
        cond = find_condition((sb.get("status") or {}).get("conditions"), "Ready")
        created = meta.get("creationTimestamp")
        if not cond or not cond.get("lastTransitionTime") or not created:
            return
        took = (parse_rfc3339(cond["lastTransitionTime"]) - parse_rfc3339(created)).total_seconds()
        if took >= 0:
            TIME_TO_READY.labels(meta.get("namespace", ""), ref.get("name")).observe(took)

    # ---------------------------------------------------------------- mapping
    def pools_for_template(self, template: KubeObject) -> list[Request]:
        meta = template.get("metadata") or {}
        ns = meta.get("namespace", "")
        return [
            Request(ns, p["metadata"]["name"])
            for p in self.pools.by_index(TEMPLATE_INDEX, f"{ns}/{meta.get('name')}")
        ]


__all__ = [
    "CONTROLLER_INDEX",
    "POOL_INDEX",
    "TEMPLATE_INDEX",
    "PoolWatches",
    "pool_index",
    "template_index",
]
