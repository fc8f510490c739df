"""Informer pieces without a cluster: relist diffs, transforms, backoff, handlers, sharing."""

from __future__ import annotations

from typing import Any, cast

import pytest

from agentsandbox.kube.client import Client
from agentsandbox.kube.informer import (
    Backoff,
    Informer,
    InformerFactory,
    replace_store,
    strip_managed_fields,
)
from agentsandbox.kube.resources import CONFIGMAPS, NODES, PODS
from agentsandbox.kube.store import Store

NO_CLIENT = cast(Client, None)  # these tests never reach the API server


def cm(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


def test_relist_reports_vanished_objects_as_deletions() -> None:
    store = Store()
    for o in (cm("a", "1"), cm("b", "1"), cm("c", "1")):
        store.add(o)
    changes = replace_store(store, [cm("a", "1"), cm("b", "2"), cm("d", "3")])
    assert [o["metadata"]["name"] for o in changes.deleted] == ["c"]
    assert [o["metadata"]["name"] for o in changes.added] == ["d"]
    assert [
        (old["metadata"]["resourceVersion"], new["metadata"]["resourceVersion"])
        for old, new in changes.updated
    ] == [("1", "2")]
    assert sorted(store.keys()) == ["ns/a", "ns/b", "ns/d"]


def test_relist_of_an_unchanged_world_notifies_nobody() -> None:
    store = Store()
    store.add(cm("a", "7"))
    changes = replace_store(store, [cm("a", "7")])
    assert (changes.added, changes.updated, changes.deleted) == ([], [], [])


def test_managed_fields_are_stripped_in_place() -> None:
    o = {"metadata": {"name": "a", "managedFields": [{"manager": "kubectl"}]}, "data": {}}
    assert strip_managed_fields(o) is o
    assert o == {"metadata": {"name": "a"}, "data": {}}
    assert strip_managed_fields({"kind": "X"}) == {"kind": "X"}


def test_backoff_doubles_with_jitter_up_to_the_cap() -> None:
    low = Backoff(0.1, 1.0, rand=lambda: 0.0)
    high = Backoff(0.1, 1.0, rand=lambda: 1.0)
    assert [round(low.next(), 3) for _ in range(6)] == [0.05, 0.1, 0.2, 0.4, 0.5, 0.5]
    assert [round(high.next(), 3) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    high.reset()
    assert high.next() == pytest.approx(0.1)
    with pytest.raises(ValueError):
        Backoff(0, 1)


def test_a_late_handler_gets_an_add_for_each_cached_object() -> None:
    informer = Informer(NO_CLIENT, CONFIGMAPS, "ns")
    informer.store.add(cm("a", "1"))
    informer.store.add(cm("b", "1"))
    seen: list[str] = []
    informer.add_handler(on_add=lambda o: seen.append(o["metadata"]["name"]))
    assert sorted(seen) == ["a", "b"]


def test_a_failing_handler_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    informer = Informer(NO_CLIENT, CONFIGMAPS, "ns")
    informer.store.add(cm("a", "1"))

    def broken(o: dict[str, Any]) -> None:
        raise RuntimeError("handler bug")

    seen: list[str] = []
    informer.add_handler(on_add=broken)
    registration = informer.add_handler(on_add=lambda o: seen.append(o["metadata"]["name"]))
    assert seen == ["a"]
    assert "handler" in caplog.text
    informer.remove_handler(registration)
    assert len(informer._handlers) == 1


def test_cluster_scoped_resources_take_no_namespace() -> None:
    with pytest.raises(ValueError):
        Informer(NO_CLIENT, NODES, "ns")


def test_the_factory_shares_one_informer_per_scope() -> None:
    factory = InformerFactory(NO_CLIENT, min_watch_timeout=60)
    pods = factory.get_informer(PODS, "ns", "app=x")
    assert factory.get_informer(PODS, "ns", "app=x") is pods
    assert factory.get_informer(PODS, "ns") is not pods
    assert factory.get_informer(PODS, None) is factory.get_informer(PODS, "")
    assert len(factory.informers()) == 3
    assert not factory.has_synced()


def test_the_factory_refuses_a_second_different_transform() -> None:
    factory = InformerFactory(NO_CLIENT)

    def keep(o: dict[str, Any]) -> dict[str, Any]:
        return o

    informer = factory.get_informer(PODS, transform=keep)
    assert factory.get_informer(PODS) is informer
    assert factory.get_informer(PODS, transform=keep) is informer
    with pytest.raises(ValueError):
        factory.get_informer(PODS, transform=lambda o: o)
