"""The indexed object cache: keys, upserts, deletes, relists and incrementally kept indexes."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentsandbox.kube.store import (
    Store,
    index_by_controller_uid,
    index_by_label,
    index_by_namespace,
    index_by_owner_uid,
    object_key,
)


def obj(
    name: str,
    namespace: str | None = "ns",
    *,
    labels: dict[str, str] | None = None,
    owners: list[dict[str, Any]] | None = None,
    rv: str = "1",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": rv}
    if namespace is not None:
        meta["namespace"] = namespace
    if labels is not None:
        meta["labels"] = labels
    if owners is not None:
        meta["ownerReferences"] = owners
    return {"apiVersion": "v1", "kind": "Thing", "metadata": meta}


def owner(uid: str, controller: bool = False) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Owner", "name": uid, "uid": uid, "controller": controller}


def names(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objects)


def full_store() -> Store:
    return Store(
        {
            "namespace": index_by_namespace,
            "controller": index_by_controller_uid,
            "owner": index_by_owner_uid,
            "pool": index_by_label("pool"),
        }
    )


# --- keys -----------------------------------------------------------------------------------


def test_namespaced_objects_are_keyed_namespace_slash_name() -> None:
    assert object_key(obj("a", "ns1")) == "ns1/a"


def test_cluster_scoped_objects_are_keyed_by_name() -> None:
    assert object_key(obj("node-1", None)) == "node-1"


def test_object_without_a_name_has_no_key() -> None:
    with pytest.raises(ValueError):
        object_key({"metadata": {"namespace": "ns"}})


# --- basic reads and writes -----------------------------------------------------------------


def test_add_get_update_delete() -> None:
    store = Store()
    a1 = obj("a", rv="1")
    assert store.add(a1) is None
    assert store.get_by_key("ns/a") is a1
    assert store.get(obj("a")) is a1
    a2 = obj("a", rv="2")
    assert store.update(a2) is a1, "update returns the replaced object"
    assert store.get_by_key("ns/a") is a2
    assert len(store) == 1
    assert "ns/a" in store
    assert store.delete(obj("a", rv="3")) is a2, "delete returns the stored version"
    assert store.get_by_key("ns/a") is None
    assert len(store) == 0
    assert store.delete(obj("a")) is None


def test_list_and_keys_return_every_object() -> None:
    store = Store()
    store.add(obj("a"))
    store.add(obj("b", "other"))
    assert sorted(store.keys()) == ["ns/a", "other/b"]
    assert names(store.list()) == ["a", "b"]
    assert names(list(store)) == ["a", "b"]


def test_store_never_mutates_the_objects_it_holds() -> None:
    store = full_store()
    original = obj("a", labels={"pool": "p"}, owners=[owner("u1", True)])
    snapshot = copy.deepcopy(original)
    store.add(original)
    store.update(obj("a", labels={"pool": "q"}))
    store.replace([original])
    store.delete(original)
    assert original == snapshot


# --- indexes --------------------------------------------------------------------------------


def test_index_is_maintained_on_add_update_and_delete() -> None:
    store = full_store()
    store.add(obj("a", labels={"pool": "p1"}))
    store.add(obj("b", labels={"pool": "p1"}))
    store.add(obj("c", labels={"pool": "p2"}))
    assert names(store.by_index("pool", "p1")) == ["a", "b"]
    store.update(obj("b", labels={"pool": "p2"}))
    assert names(store.by_index("pool", "p1")) == ["a"]
    assert names(store.by_index("pool", "p2")) == ["b", "c"]
    store.update(obj("c"))  # label removed
    assert names(store.by_index("pool", "p2")) == ["b"]
    store.delete(obj("a"))
    assert store.by_index("pool", "p1") == []
    assert sorted(store.index_values("pool")) == ["p2"], "emptied values are dropped"


def test_by_index_returns_the_current_object_version() -> None:
    store = full_store()
    store.add(obj("a", labels={"pool": "p"}, rv="1"))
    newer = obj("a", labels={"pool": "p"}, rv="2")
    store.update(newer)
    assert store.by_index("pool", "p") == [newer]


def test_index_keys_returns_keys_filed_under_a_value() -> None:
    store = full_store()
    store.add(obj("a", "x"))
    store.add(obj("b", "x"))
    store.add(obj("c", "y"))
    assert sorted(store.index_keys("namespace", "x")) == ["x/a", "x/b"]
    assert store.index_keys("namespace", "none") == []


def test_namespace_index_files_cluster_scoped_objects_under_empty_namespace() -> None:
    store = full_store()
    store.add(obj("node", None))
    store.add(obj("a", "ns"))
    assert names(store.by_index("namespace", "")) == ["node"]
    assert names(store.by_index("namespace", "ns")) == ["a"]


def test_controller_uid_index_uses_only_the_controlling_owner() -> None:
    store = full_store()
    store.add(obj("a", owners=[owner("gc-owner"), owner("pool-uid", controller=True)]))
    store.add(obj("b", owners=[owner("gc-owner")]))
    store.add(obj("c"))
    assert names(store.by_index("controller", "pool-uid")) == ["a"]
    assert store.by_index("controller", "gc-owner") == []


def test_owner_uid_index_files_an_object_under_every_owner() -> None:
    store = full_store()
    store.add(obj("a", owners=[owner("u1"), owner("u2", controller=True)]))
    store.add(obj("b", owners=[owner("u1")]))
    assert names(store.by_index("owner", "u1")) == ["a", "b"]
    assert names(store.by_index("owner", "u2")) == ["a"]


def test_owner_change_moves_object_between_controller_index_values() -> None:
    store = full_store()
    store.add(obj("a", owners=[owner("pool", controller=True)]))
    store.update(obj("a", owners=[owner("claim", controller=True)]))  # adoption
    assert store.by_index("controller", "pool") == []
    assert names(store.by_index("controller", "claim")) == ["a"]


def test_index_added_late_indexes_existing_objects() -> None:
    store = Store()
    store.add(obj("a", labels={"tier": "gold"}))
    store.add(obj("b", labels={"tier": "silver"}))
    store.add_index("tier", index_by_label("tier"))
    assert names(store.by_index("tier", "gold")) == ["a"]
    store.add(obj("c", labels={"tier": "gold"}))
    assert names(store.by_index("tier", "gold")) == ["a", "c"]


def test_adding_an_index_twice_is_an_error() -> None:
    store = full_store()
    with pytest.raises(ValueError):
        store.add_index("pool", index_by_label("pool"))


def test_unknown_index_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        Store().by_index("nope", "x")


def test_index_function_returning_duplicate_values_files_object_once() -> None:
    store = Store({"dup": lambda o: ["v", "v"]})
    store.add(obj("a"))
    assert names(store.by_index("dup", "v")) == ["a"]


def test_writes_reindex_only_the_written_object_and_reads_call_no_index_function() -> None:
    calls: list[str] = []

    def counting(o: dict[str, Any]) -> list[str]:
        calls.append(o["metadata"]["name"])
        return [o["metadata"]["labels"]["pool"]]

    store = Store({"pool": counting})
    for i in range(5000):
        store.add(obj(f"s{i}", labels={"pool": f"p{i % 50}"}))
    calls.clear()
    assert len(store.by_index("pool", "p7")) == 100
    assert calls == []
    store.update(obj("s7", labels={"pool": "p8"}))
    assert calls == ["s7", "s7"], "old and new version of the one written object"
    assert len(store.by_index("pool", "p8")) == 101


# --- replace (relist) -----------------------------------------------------------------------


def test_replace_reports_vanished_objects() -> None:
    store = full_store()
    a, b, c = obj("a"), obj("b"), obj("c")
    for o in (a, b, c):
        store.add(o)
    removed = store.replace([obj("b", rv="2"), obj("d")])
    assert names(removed) == ["a", "c"]
    assert all(r is a or r is c for r in removed), "the last stored versions are reported"
    assert sorted(store.keys()) == ["ns/b", "ns/d"]
    assert store.get_by_key("ns/b") == obj("b", rv="2")


def test_replace_rebuilds_indexes() -> None:
    store = full_store()
    store.add(obj("a", labels={"pool": "p1"}))
    store.add(obj("b", labels={"pool": "p1"}))
    store.replace([obj("b", labels={"pool": "p2"}), obj("c", labels={"pool": "p1"})])
    assert names(store.by_index("pool", "p1")) == ["c"]
    assert names(store.by_index("pool", "p2")) == ["b"]
    store.delete(obj("c"))
    assert store.by_index("pool", "p1") == []


def test_replace_with_nothing_empties_the_store() -> None:
    store = full_store()
    store.add(obj("a", labels={"pool": "p"}))
    assert names(store.replace([])) == ["a"]
    assert len(store) == 0
    assert store.index_values("pool") == []


# --- property: indexes always equal a from-scratch recomputation ----------------------------

NAMES = st.sampled_from(["a", "b", "c", "d", "e"])
POOLS = st.sampled_from([None, "p1", "p2"])
OWNERS = st.lists(st.sampled_from(["u1", "u2", "u3"]), max_size=2, unique=True)


@st.composite
def objects(draw: st.DrawFn) -> dict[str, Any]:
    pool = draw(POOLS)
    owner_uids = draw(OWNERS)
    controller_at = draw(st.integers(-1, len(owner_uids) - 1))
    return obj(
        draw(NAMES),
        draw(st.sampled_from(["ns1", "ns2"])),
        labels={"pool": pool} if pool else {},
        owners=[owner(u, i == controller_at) for i, u in enumerate(owner_uids)],
    )


OPS = st.one_of(
    st.tuples(st.just("add"), objects()),
    st.tuples(st.just("delete"), objects()),
    st.tuples(st.just("replace"), st.lists(objects(), max_size=4)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(OPS, max_size=30))
def test_indexes_always_match_a_full_recomputation(ops: list[tuple[str, Any]]) -> None:
    store = full_store()
    indexers = {
        "namespace": index_by_namespace,
        "controller": index_by_controller_uid,
        "owner": index_by_owner_uid,
        "pool": index_by_label("pool"),
    }
    model: dict[str, dict[str, Any]] = {}
    for op, arg in ops:
        if op == "add":
            store.add(arg)
            model[object_key(arg)] = arg
        elif op == "delete":
            store.delete(arg)
            model.pop(object_key(arg), None)
        else:
            new = {object_key(o): o for o in arg}
            removed = store.replace(arg)
            assert sorted(object_key(o) for o in removed) == sorted(set(model) - set(new))
            model = new
        assert sorted(store.keys()) == sorted(model)
        for name, fn in indexers.items():
            expected: dict[str, set[str]] = {}
            for key, o in model.items():
                for value in fn(o):
                    expected.setdefault(value, set()).add(key)
            assert {v: set(store.index_keys(name, v)) for v in store.index_values(name)} == expected
