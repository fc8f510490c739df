"""The SandboxWarmPoolAutoscaler controller's event side: the informer indexes, the claim and
sandbox handlers that feed the arrival and refill windows, and the mapping of those events (and a
pool's) to the autoscalers to reconcile."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from agentsandbox.controllers.autoscaler.act import is_sandbox_warm_pool
from agentsandbox.controllers.autoscaler.source import Windows, pool_of
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.reconcile import Request
from agentsandbox.kube.store import KubeObject

TARGET_INDEX = "autoscaler-target"  # autoscalers by "<namespace>/<pool name>"
POOL_TEMPLATE_INDEX = "autoscaler-pool-template"  # pools by "<namespace>/<template name>"
POOL_MEMBER_INDEX = "autoscaler-pool-member"  # sandboxes by "<namespace>/<controlling pool>"


def target_index(autoscaler: KubeObject) -> list[str]:
    meta = autoscaler.get("metadata") or {}
    ref = (autoscaler.get("spec") or {}).get("scaleTargetRef") or {}
    if not is_sandbox_warm_pool(str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")):
        return []
    name = ref.get("name")
    return [f"{meta.get('namespace', '')}/{name}"] if name else []


def pool_template_index(pool: KubeObject) -> list[str]:
    meta = pool.get("metadata") or {}
    name = ((pool.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name")
    return [f"{meta.get('namespace', '')}/{name}"] if name else []


def pool_member_index(sb: KubeObject) -> list[str]:
    pool = pool_of(sb)
    return [pool] if pool is not None else []


class AutoscalerWatches:
    """Registers the indexes and the claim/sandbox handlers on the shared informers, records
    what they see into ``windows``, and re-queues the autoscalers of the pools concerned."""

    def __init__(
        self,
        windows: Windows,
        autoscalers: Informer,
        claims: Informer,
        sandboxes: Informer,
        pools: Informer,
    ) -> None:
        self.windows = windows
        self.autoscalers = autoscalers
        self.pools = pools
        self.sandboxes = sandboxes
        self.claims = claims
        self.enqueue: Callable[[Request], None] | None = None  # set by setup()
        autoscalers.add_index(TARGET_INDEX, target_index)
        pools.add_index(POOL_TEMPLATE_INDEX, pool_template_index)
        sandboxes.add_index(POOL_MEMBER_INDEX, pool_member_index)
        self._replaying = True  # add_handler hands over the cached objects: not seen created
        try:
            claims.add_handler(self._on_claim, None, None)
            sandboxes.add_handler(
                self._on_sandbox_add, self._on_sandbox_update, self.windows.sandbox_deleted
            )
        finally:
            self._replaying = False

    # ---------------------------------------------------------------- recording + mapping
    def _on_claim(self, claim: KubeObject) -> None:
        listed = self._replaying or self.claims.list_pending_since() is not None
        keys = self.windows.claim_added(claim, listed=listed)
        if keys and self.enqueue is not None:
            for req in self._requests_for_keys(keys):
                self.enqueue(req)

    def _listed(self) -> bool:
        """The sandbox event comes from a (re)list or the replay of the cache, not the watch:
        when this process sees it is not when it happened."""
        return self._replaying or self.sandboxes.list_pending_since() is not None

    def _on_sandbox_add(self, sb: KubeObject) -> None:
        self._poke(self.windows.sandbox_added(sb, listed=self._listed()))

    def _on_sandbox_update(self, old: KubeObject, new: KubeObject) -> None:
        self._poke(self.windows.sandbox_updated(old, new, listed=self._listed()))

    def _poke(self, pool: str | None) -> None:
        if pool is not None and self.enqueue is not None:
            for req in self.for_pool_key(pool):
                self.enqueue(req)

    def for_pool_key(self, key: str) -> list[Request]:
        return [Request.from_object(a) for a in self.autoscalers.by_index(TARGET_INDEX, key)]

    def for_pool(self, pool: KubeObject) -> list[Request]:
        meta = pool.get("metadata") or {}
        return self.for_pool_key(f"{meta.get('namespace', '')}/{meta.get('name')}")

    def _requests_for_keys(self, keys: Iterable[str]) -> list[Request]:
        out: list[Request] = []
        for key in keys:
            ns, kind, name = key.split("/", 2)
            if kind == "pool":
                out += self.for_pool_key(f"{ns}/{name}")
            else:
                for pool in self.pools.by_index(POOL_TEMPLATE_INDEX, f"{ns}/{name}"):
                    out += self.for_pool(pool)
        return out


__all__ = [
    "POOL_MEMBER_INDEX",
    "POOL_TEMPLATE_INDEX",
    "TARGET_INDEX",
    "AutoscalerWatches",
    "pool_member_index",
    "pool_template_index",
    "target_index",
]
