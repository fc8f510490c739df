"""Small fakes for act-step unit tests: an informer cache that tests feed, and an in-memory API
server that keeps resourceVersions and enforces preconditions like the real one.

The API fake is deliberately small: create (with generateName), get, JSON merge patch (with a
``metadata.resourceVersion`` precondition, on the object or its status), JSON patch (RFC 6902;
a failed ``test`` operation is refused as the API server refuses it: 422 Invalid, nothing
written), delete (UID and resourceVersion preconditions). Every call is recorded in order;
``fail`` scripts errors.
"""

from __future__ import annotations

import copy
import datetime as dt
import itertools
from collections.abc import Callable
from typing import Any

from agentsandbox.kube.errors import AlreadyExists, Conflict, Invalid, NotFound
from agentsandbox.kube.resources import Resource
from agentsandbox.kube.store import Store

Obj = dict[str, Any]


class FakeInformer:
    """A cache with the informer's read, index and handler contract; tests push events."""

    def __init__(self) -> None:
        self.store = Store()
        self.handlers: list[tuple[Any, Any, Any]] = []
        self.listing = False  # the events pushed come from a (re)list

    def list_pending_since(self) -> float | None:
        """Like the informer's: not None while a list is being handed to the handlers."""
        return 0.0 if self.listing else None

    def add_index(self, name: str, fn: Any) -> None:
        self.store.add_index(name, fn)

    def by_index(self, index: str, value: str) -> list[Obj]:
        return self.store.by_index(index, value)

    def get(self, name: str, namespace: str | None = None) -> Obj | None:
        return self.store.get_by_key(f"{namespace}/{name}" if namespace else name)

    def list(self) -> list[Obj]:
        return self.store.list()

    def add_handler(self, on_add: Any = None, on_update: Any = None, on_delete: Any = None) -> Any:
        registration = (on_add, on_update, on_delete)
        self.handlers.append(registration)
        for obj in self.store.list():
            if on_add is not None:
                on_add(obj)
        return registration

    def remove_handler(self, registration: Any) -> None:
        self.handlers.remove(registration)

    async def wait_synced(self) -> None:
        return None

    def put(self, obj: Obj) -> None:
        old = self.store.add(obj)
        for on_add, on_update, _ in self.handlers:
            if old is None and on_add is not None:
                on_add(obj)
            elif old is not None and on_update is not None:
                on_update(old, obj)

    def remove(self, obj: Obj) -> None:
        self.store.delete(obj)
        for _, _, on_delete in self.handlers:
            if on_delete is not None:
                on_delete(obj)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


#: What kube-apiserver (1.36) answers, with no details, to a JSON patch that does not apply.
PATCH_DID_NOT_APPLY = "the server rejected our request due to an error in our request"


def _did_not_apply() -> Invalid:
    return Invalid(422, "Invalid", PATCH_DID_NOT_APPLY)


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _did_not_apply()
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """RFC 6902 JSON patch (``test``, ``add``, ``replace``, ``remove`` on objects), all or
    nothing, refused as the API server refuses a patch that does not apply (a failed ``test``, a
    missing member): 422 Invalid, the generic message :data:`PATCH_DID_NOT_APPLY`, no causes
    (the patch library's own words are not sent). As that library, a ``test`` of a missing
    member passes only against ``null``."""
    out = copy.deepcopy(doc)
    for op in ops:
        kind, path = op.get("op"), str(op.get("path", ""))
        *parents, last = _pointer(path) or [""]
        node = out
        for part in parents:
            if not isinstance(node, dict) or part not in node:
                raise _did_not_apply()
            node = node[part]
        if not isinstance(node, dict):
            raise _did_not_apply()
        if kind == "test":
            if node.get(last) != op.get("value"):  # a missing member is null
                raise _did_not_apply()
        elif kind == "add":
            node[last] = copy.deepcopy(op.get("value"))
        elif kind in ("replace", "remove"):
            if last not in node:
                raise _did_not_apply()
            if kind == "replace":
                node[last] = copy.deepcopy(op.get("value"))
            else:
                del node[last]
        else:
            raise _did_not_apply()
    return out


#: The creationTimestamp of everything the fake API server creates unless a test passes a clock.
CREATED_AT = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class FakeApi:
    """An in-memory API server for a few resources (by plural), with resourceVersions.
    ``now`` is its wall clock (it stamps ``creationTimestamp``): a fixed instant by default."""

    def __init__(self, now: Callable[[], dt.datetime] = lambda: CREATED_AT) -> None:
        self.now = now
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.calls: list[tuple[str, str, str]] = []  # (verb, plural, name)
        self.fail: dict[tuple[str, str], list[BaseException]] = {}  # (verb, plural) -> errors
        self._rv = itertools.count(100)
        self._uid = itertools.count(1)
        self.before: Callable[[str, str, str], None] | None = None

    # --- helpers for tests
    def seed(self, plural: str, obj: Obj) -> Obj:
        """Store ``obj`` as if created earlier (gets uid/resourceVersion if missing)."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{next(self._uid)}")
        meta["resourceVersion"] = str(next(self._rv))
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        self.objects[(plural, meta.get("namespace", ""), meta["name"])] = obj
        return copy.deepcopy(obj)

    def stored(self, plural: str, ns: str, name: str) -> Obj | None:
        found = self.objects.get((plural, ns, name))
        return copy.deepcopy(found) if found is not None else None

    def all(self, plural: str) -> list[Obj]:
        return [copy.deepcopy(o) for (p, _, _), o in self.objects.items() if p == plural]

    def writes(self) -> list[tuple[str, str, str]]:
        return [c for c in self.calls if c[0] != "get"]

    def _record(self, verb: str, plural: str, name: str) -> None:
        self.calls.append((verb, plural, name))
        if self.before is not None:
            self.before(verb, plural, name)
        queue = self.fail.get((verb, plural))
        if queue:
            raise queue.pop(0)

    # --- the client surface
    async def get(
        self, resource: Resource, name: str, namespace: str | None = None, **_: Any
    ) -> Obj:
        self._record("get", resource.plural, name)
        found = self.objects.get((resource.plural, namespace or "", name))
        if found is None:
            raise NotFound(404, "NotFound", f'{resource.plural} "{name}" not found')
        return copy.deepcopy(found)

    async def create(
        self, resource: Resource, obj: Obj, namespace: str | None = None, **_: Any
    ) -> Obj:
        new = copy.deepcopy(obj)
        meta = new.setdefault("metadata", {})
        if not meta.get("name"):
            meta["name"] = f"{meta.pop('generateName')}{next(self._uid):05d}"
        self._record("create", resource.plural, meta["name"])
        ns = namespace or meta.get("namespace", "")
        if (resource.plural, ns, meta["name"]) in self.objects:
            raise AlreadyExists(409, "AlreadyExists", f'{resource.plural} "{meta["name"]}" exists')
        meta["namespace"] = ns
        meta["uid"] = f"uid-{next(self._uid)}"
        meta["resourceVersion"] = str(next(self._rv))
        meta["creationTimestamp"] = self.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        self.objects[(resource.plural, ns, meta["name"])] = new
        return copy.deepcopy(new)

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Obj | list[Obj],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        **_: Any,
    ) -> Obj:
        verb = "patch-status" if subresource == "status" else "patch"
        self._record(verb, resource.plural, name)
        key = (resource.plural, namespace or "", name)
        found = self.objects.get(key)
        if found is None:
            raise NotFound(404, "NotFound", f'{resource.plural} "{name}" not found')
        if isinstance(patch, list):  # a JSON patch: applied to the object as stored
            patched = json_patch(found, patch)
            # a status patch changes only the status; any other, everything but the status
            kept, changed = (found, patched) if subresource == "status" else (patched, found)
            updated = {k: copy.deepcopy(v) for k, v in kept.items() if k != "status"}
            if "status" in changed:
                updated["status"] = copy.deepcopy(changed["status"])
            updated["metadata"]["resourceVersion"] = str(next(self._rv))
            self.objects[key] = updated
            return copy.deepcopy(updated)
        want = (patch.get("metadata") or {}).get("resourceVersion")
        if want is not None and want != found["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", "the object has been modified")
        if subresource == "status":
            updated = copy.deepcopy(found)
            updated["status"] = merge_patch(found.get("status") or {}, patch.get("status") or {})
        else:
            body = {k: v for k, v in patch.items() if k != "status"}
            updated = merge_patch(found, body)
        updated["metadata"]["resourceVersion"] = str(next(self._rv))
        self.objects[key] = updated
        return copy.deepcopy(updated)

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        **_: Any,
    ) -> Obj:
        self._record("delete", resource.plural, name)
        key = (resource.plural, namespace or "", name)
        found = self.objects.get(key)
        if found is None:
            raise NotFound(404, "NotFound", f'{resource.plural} "{name}" not found')
        meta = found["metadata"]
        if (uid is not None and uid != meta["uid"]) or (
            resource_version is not None and resource_version != meta["resourceVersion"]
        ):
            raise Conflict(409, "Conflict", "precondition failed")
        del self.objects[key]
        return {}


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str | None]] = []

    def event(
        self,
        regarding: Any,
        type: str,
        reason: str,
        note: str = "",
        *,
        action: str | None = None,
        related: Any = None,
    ) -> bool:
        self.events.append((type, reason, note, action))
        return True
