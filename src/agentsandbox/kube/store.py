"""An indexed in-memory cache of Kubernetes objects (client-go's ``Indexer``).

Reconcilers read from this cache instead of the API server, so lookups such as "the sandboxes
owned by this pool" must cost the size of the answer, not the size of the cache (which may hold
tens of thousands of objects). Named indexes map an index value to the set of object keys and are
kept up to date on every write.

Objects are plain dicts owned by the cache and treated as immutable: the store never changes
one, and callers must copy before they change one.

An index function never stops the store: one that raises for an object (a hostile object, say a
deeply nested annotation a user wrote) files that object under no value of that index, and the
failure is logged once per object and period (:mod:`.guard`). The object is still cached.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .guard import RateLimitedLog

__all__ = [
    "IndexFunc",
    "KubeObject",
    "Store",
    "index_by_controller_uid",
    "index_by_label",
    "index_by_namespace",
    "index_by_namespaced_controller_uid",
    "index_by_owner_uid",
    "object_key",
]

log = logging.getLogger(__name__)

KubeObject = dict[str, Any]
IndexFunc = Callable[[KubeObject], Iterable[str]]
"""Maps an object to the index values it is filed under (none, one or many)."""


def object_key(obj: KubeObject) -> str:
    """``namespace/name``, or ``name`` for cluster-scoped objects, as client-go keys objects."""
    meta = obj.get("metadata") or {}
    name: str = meta.get("name") or ""
    namespace: str = meta.get("namespace") or ""
    if not name:
        raise ValueError("object has no metadata.name")
    return f"{namespace}/{name}" if namespace else name


# --- built-in index functions ---------------------------------------------------------------


def index_by_namespace(obj: KubeObject) -> list[str]:
    """The object's namespace (``""`` for cluster-scoped objects)."""
    return [(obj.get("metadata") or {}).get("namespace") or ""]


def _owner_references(obj: KubeObject) -> list[dict[str, Any]]:
    refs: list[dict[str, Any]] = (obj.get("metadata") or {}).get("ownerReferences") or []
    return refs


def index_by_controller_uid(obj: KubeObject) -> list[str]:
    """The UID of the owner reference marked ``controller: true``, if any (at most one)."""
    for ref in _owner_references(obj):
        if ref.get("controller") and ref.get("uid"):
            return [str(ref["uid"])]
    return []


def index_by_namespaced_controller_uid(obj: KubeObject) -> list[str]:
    """``<namespace>/<UID>`` of the owner reference marked ``controller: true``, if any.

    Owner references never cross namespaces, but anyone who may write an object in one namespace
    can name a UID from another in its references: a lookup of "what does this owner control"
    must ask for the owner's namespace and UID together, never for the UID alone.
    """
    namespace = (obj.get("metadata") or {}).get("namespace") or ""
    return [f"{namespace}/{uid}" for uid in index_by_controller_uid(obj)]


def index_by_owner_uid(obj: KubeObject) -> list[str]:
    """The UIDs of all owner references."""
    return [str(ref["uid"]) for ref in _owner_references(obj) if ref.get("uid")]


def index_by_label(label: str) -> IndexFunc:
    """An index function filing objects under the value of label ``label`` (if set)."""

    def index(obj: KubeObject) -> list[str]:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        value = labels.get(label)
        return [] if value is None else [str(value)]

    index.__name__ = f"index_by_label[{label}]"
    return index


# --- the store ------------------------------------------------------------------------------


class Store:
    """Objects by key, plus named indexes ``index name -> value -> set of keys``.

    ``add``/``update`` are the same upsert (the watch may deliver either for a key we have not
    seen, for example after a relist); both return the object they replaced.
    """

    def __init__(
        self,
        indexers: dict[str, IndexFunc] | None = None,
        key_func: Callable[[KubeObject], str] = object_key,
    ) -> None:
        self._key = key_func
        self._items: dict[str, KubeObject] = {}
        self._indexers: dict[str, IndexFunc] = {}
        self._indices: dict[str, dict[str, set[str]]] = {}
        self._hostile = RateLimitedLog(log)
        for name, fn in (indexers or {}).items():
            self.add_index(name, fn)

    # --- reads

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[KubeObject]:
        return iter(list(self._items.values()))

    def key_of(self, obj: KubeObject) -> str:
        return self._key(obj)

    def get(self, obj: KubeObject) -> KubeObject | None:
        """The cached version of ``obj`` (looked up by its key)."""
        return self._items.get(self._key(obj))

    def get_by_key(self, key: str) -> KubeObject | None:
        return self._items.get(key)

    def list(self) -> builtins.list[KubeObject]:
        return list(self._items.values())

    def keys(self) -> builtins.list[str]:
        return list(self._items)

    # --- writes

    def add(self, obj: KubeObject) -> KubeObject | None:
        """Insert or replace ``obj``; returns the object previously stored under its key."""
        key = self._key(obj)
        old = self._items.get(key)
        self._items[key] = obj
        self._reindex(key, old, obj)
        return old

    update = add

    def delete(self, obj: KubeObject) -> KubeObject | None:
        """Remove the object with ``obj``'s key; returns the stored version, if any."""
        return self.delete_by_key(self._key(obj))

    def delete_by_key(self, key: str) -> KubeObject | None:
        old = self._items.pop(key, None)
        if old is not None:
            self._reindex(key, old, None)
        return old

    def replace(self, objects: Iterable[KubeObject]) -> builtins.list[KubeObject]:
        """Make the store hold exactly ``objects`` (a relist); returns the objects that vanished.

        An informer emits a deletion for each returned object, since their DELETE events were
        lost while it was not watching.
        """
        items = {self._key(obj): obj for obj in objects}
        removed = [old for key, old in self._items.items() if key not in items]
        indices = {name: self._build_index(name, fn, items) for name, fn in self._indexers.items()}
        self._items, self._indices = items, indices  # swapped together: never half a relist
        return removed

    # --- indexes

    def add_index(self, name: str, fn: IndexFunc) -> None:
        """Register index ``name``; objects already cached are indexed at once."""
        if name in self._indexers:
            raise ValueError(f"index {name!r} already exists")
        self._indices[name] = self._build_index(name, fn, self._items)
        self._indexers[name] = fn

    def by_index(self, name: str, value: str) -> builtins.list[KubeObject]:
        """Objects filed under ``value`` in index ``name``; costs the size of the result."""
        items = self._items
        return [items[key] for key in self._index(name).get(value, ())]

    def index_keys(self, name: str, value: str) -> builtins.list[str]:
        """Keys of the objects filed under ``value`` in index ``name``."""
        return list(self._index(name).get(value, ()))

    def index_values(self, name: str) -> builtins.list[str]:
        """Every value that has at least one object in index ``name``."""
        return list(self._index(name))

    # --- internals

    def _index(self, name: str) -> dict[str, set[str]]:
        try:
            return self._indices[name]
        except KeyError:
            raise KeyError(f"no index named {name!r}") from None

    def _values(self, name: str, fn: IndexFunc, key: str, obj: KubeObject | None) -> set[str]:
        """The values ``obj`` is filed under in index ``name``; none if ``fn`` raises for it."""
        if obj is None:
            return set()
        try:
            return set(fn(obj))
        except Exception as err:  # RecursionError included: any object, never a stopped cache
            self._hostile.warning(
                f"{name}\0{key}",
                "index %r cannot file %s (left out of that index): %s: %.200s",
                name,
                key,
                type(err).__name__,
                err,
            )
            return set()

    def _build_index(
        self, name: str, fn: IndexFunc, items: dict[str, KubeObject]
    ) -> dict[str, set[str]]:
        index: dict[str, set[str]] = {}
        for key, obj in items.items():
            for value in self._values(name, fn, key, obj):
                index.setdefault(value, set()).add(key)
        return index

    def _reindex(self, key: str, old: KubeObject | None, new: KubeObject | None) -> None:
        for name, fn in self._indexers.items():
            old_values = self._values(name, fn, key, old)
            new_values = self._values(name, fn, key, new)
            if old_values == new_values:
                continue
            index = self._indices[name]
            for value in old_values - new_values:
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]  # no empty sets left behind by churn
            for value in new_values - old_values:
                index.setdefault(value, set()).add(key)
