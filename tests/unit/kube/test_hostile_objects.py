"""A hostile object never stops an informer (security review #2).

A claim whose ``warmPoolRef`` starts with ``shadow-pool-`` and whose migration annotation holds
deeply nested JSON made ``json.loads`` raise RecursionError inside the claim informer's index
functions: the watch event failed, every relist failed, the claim cache never synced again and,
after a restart, no controller started at all. Here: an index, transform or handler that raises
for one object is logged (once per object and period, not per event) and that object is skipped
in that place; the rest of the cache is kept and the informer syncs. The migration annotation
itself is parsed with a depth limit, so the claim is simply not read as a migrated one.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any, cast

import pytest

from agentsandbox.api import keys
from agentsandbox.controllers.claim.handlers import claim_pool_index, claim_template_index
from agentsandbox.controllers.claim.plan import claim_source, migrated_v1alpha1_spec
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import Forbidden
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.resources import CONFIGMAPS
from agentsandbox.kube.store import KubeObject, Store

DEPTH = 3000
NESTED = "[" * DEPTH + "]" * DEPTH


def hostile_claim(name: str = "evil", annotation: str = NESTED) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": "1",
            "annotations": {keys.ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE: annotation},
        },
        "spec": {"warmPoolRef": {"name": "shadow-pool-x"}},
    }


def plain(name: str, rv: str = "1", **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv, "labels": labels}}


def explodes_on_evil(obj: KubeObject) -> list[str]:
    if obj["metadata"].get("annotations"):
        raise RecursionError("maximum recursion depth exceeded")
    return [obj["metadata"].get("labels", {}).get("app", "none")]


# ------------------------------------------------------------------ the migration annotation
def test_a_deeply_nested_migration_annotation_is_not_a_migrated_claim() -> None:
    claim = hostile_claim()
    assert migrated_v1alpha1_spec(claim) is None
    source = claim_source(claim)
    assert (source.pool, source.template, source.by_pool_ref) == ("shadow-pool-x", None, True)
    assert claim_template_index(claim) == []
    assert claim_pool_index(claim) == ["ns/shadow-pool-x"]


def test_a_nested_annotation_wrapped_in_an_object_is_refused_too() -> None:
    deep = '{"spec":' * DEPTH + "1" + "}" * DEPTH
    assert migrated_v1alpha1_spec(hostile_claim(annotation=deep)) is None


# ------------------------------------------------------------------ the store
def test_an_index_function_that_raises_skips_that_object_in_that_index() -> None:
    store = Store({"app": explodes_on_evil})
    store.add(plain("a", app="web"))
    store.add(hostile_claim())  # must not raise
    assert store.get_by_key("ns/evil") is not None  # cached: reads by key still see it
    assert [o["metadata"]["name"] for o in store.by_index("app", "web")] == ["a"]
    assert sorted(store.index_values("app")) == ["web"]


def test_an_object_turning_hostile_leaves_its_old_index_entries() -> None:
    store = Store({"app": explodes_on_evil})
    store.add(plain("evil", app="web"))
    store.add(plain("b", app="web"))
    store.update(hostile_claim("evil"))  # the same key, now hostile: must not raise
    assert [o["metadata"]["name"] for o in store.by_index("app", "web")] == ["b"]
    store.update(plain("evil", rv="3", app="db"))  # harmless again: indexed again
    assert [o["metadata"]["name"] for o in store.by_index("app", "db")] == ["evil"]


def test_a_relist_with_a_hostile_object_keeps_the_store_consistent() -> None:
    store = Store({"app": explodes_on_evil})
    store.add(plain("a", app="web"))
    removed = store.replace([plain("b", app="db"), hostile_claim()])  # must not raise
    assert [o["metadata"]["name"] for o in removed] == ["a"]
    assert sorted(store.keys()) == ["ns/b", "ns/evil"]
    assert store.by_index("app", "web") == []
    assert [o["metadata"]["name"] for o in store.by_index("app", "db")] == ["b"]


def test_an_index_added_late_skips_a_hostile_object_already_cached() -> None:
    store = Store()
    store.add(hostile_claim())
    store.add(plain("a", app="web"))
    store.add_index("app", explodes_on_evil)
    assert [o["metadata"]["name"] for o in store.by_index("app", "web")] == ["a"]


def test_a_hostile_object_is_logged_once_not_per_event(caplog: pytest.LogCaptureFixture) -> None:
    store = Store({"app": explodes_on_evil})
    with caplog.at_level(logging.WARNING):
        for rv in range(50):
            bad = hostile_claim()
            bad["metadata"]["resourceVersion"] = str(rv)
            store.add(bad)
    lines = [r for r in caplog.records if "ns/evil" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert "app" in lines[0].getMessage()  # names the index


# ------------------------------------------------------------------ the informer
class OneList:
    """A client whose LIST returns the given objects (the informer's first sync, no watch)."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    async def list(self, *args: Any, **kwargs: Any) -> Any:
        return SimpleNamespace(items=[dict(o) for o in self.items], resource_version="9")


async def test_an_informer_syncs_past_a_hostile_object_in_an_index() -> None:
    client = cast(Client, OneList([plain("a", app="web"), hostile_claim()]))
    informer = Informer(client, CONFIGMAPS, "ns", indexers={"app": explodes_on_evil})
    added: list[str] = []
    informer.add_handler(on_add=lambda o: added.append(o["metadata"]["name"]))
    await informer._list()
    assert informer.has_synced()
    assert sorted(added) == ["a", "evil"]
    assert [o["metadata"]["name"] for o in informer.by_index("app", "web")] == ["a"]


async def test_an_informer_syncs_past_an_object_its_transform_cannot_take() -> None:
    def transform(obj: KubeObject) -> KubeObject:
        if obj["metadata"].get("annotations"):
            raise RecursionError("maximum recursion depth exceeded")
        return obj

    client = cast(Client, OneList([plain("a"), hostile_claim()]))
    informer = Informer(client, CONFIGMAPS, "ns", transform=transform)
    await informer._list()
    assert informer.has_synced()
    assert sorted(informer.store.keys()) == ["ns/a"]  # the hostile object is skipped


def test_a_handler_failing_on_one_object_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    informer = Informer(cast(Client, None), CONFIGMAPS, "ns")

    def broken(obj: KubeObject) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    informer.add_handler(on_add=broken)
    with caplog.at_level(logging.WARNING):
        for _ in range(20):
            informer._notify_add(hostile_claim())
    assert len([r for r in caplog.records if "ns/evil" in r.getMessage()]) == 1


# ------------------------------------------------------------------ sync timeout and health
class ListRefused:
    """A client whose LIST is always refused (RBAC denied, say): the informer never syncs."""

    refuse = True

    async def list(self, *args: Any, **kwargs: Any) -> Any:
        if self.refuse:
            raise Forbidden(message="configmaps is forbidden")
        return SimpleNamespace(items=[], resource_version="1")


def test_the_manager_bounds_the_cache_sync_by_default() -> None:
    """controller-runtime's CacheSyncTimeout (2 minutes): the caches never syncing is an exit,
    not a process that stays up forever with nothing started."""
    assert Manager(cast(Client, None))._cache_sync_timeout == 120.0


async def test_healthz_fails_while_an_informer_cannot_list_past_the_sync_timeout() -> None:
    client = ListRefused()
    mgr = Manager(cast(Client, client), cache_sync_timeout=0.0)
    informer = mgr.get_informer(CONFIGMAPS, "ns")
    assert mgr.healthy()  # nothing tried yet
    with pytest.raises(Forbidden):
        await informer._list()
    assert not mgr.healthy()
    assert not mgr.ready()
    client.refuse = False
    await informer._list()
    assert mgr.healthy() and mgr.ready()


async def test_healthz_holds_while_a_failing_list_is_within_the_sync_timeout() -> None:
    mgr = Manager(cast(Client, ListRefused()), cache_sync_timeout=3600.0)
    informer = mgr.get_informer(CONFIGMAPS, "ns")
    with pytest.raises(Forbidden):
        await informer._list()
    assert mgr.healthy()
    assert not mgr.ready()  # not synced: not ready
