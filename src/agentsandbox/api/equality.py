"""Semantic equality, as apimachinery's ``equality.Semantic.DeepEqual`` judges typed objects.

Two flavours:

- :func:`typed_equal` / :func:`pod_spec_equal` walk both objects along the Go struct layout
  (``gostructs.json``), so they know what Go knows: a nil pointer differs from a pointer to a zero
  value (``automountServiceAccountToken`` absent ≠ ``false``), an absent non-pointer scalar equals
  its zero value, nil and empty slices/maps are equal, quantities compare by value, times as
  instants, and fields Go does not have are ignored.
- :func:`semantic_equal` works on any JSON without a schema: ``None``, ``""``, ``[]`` and ``{}``
  are dropped from objects (``false`` and ``0`` are kept), values of resource maps (``limits``,
  ``requests``, ...) and quantity fields compare by value, and timestamps as instants.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from agentsandbox.api.gojson import GoTypes, go_types
from agentsandbox.api.quantity import Quantity, QuantityError, parse_quantity, quantities_equal
from agentsandbox.api.timefmt import parse_rfc3339

__all__ = ["pod_spec_equal", "semantic_equal", "typed_equal"]

POD_SPEC: Final = "@k8s.io/api/core/v1.PodSpec"

#: Objects whose values are quantities (ResourceList and friends).
QUANTITY_MAPS: Final = frozenset({"limits", "requests", "overhead", "capacity", "allocatable"})
#: Fields holding one quantity.
QUANTITY_FIELDS: Final = frozenset({"sizeLimit", "divisor"})
#: Fields holding a ``metav1.Time``.
TIME_FIELDS: Final = frozenset(
    {
        "creationTimestamp",
        "deletionTimestamp",
        "lastTransitionTime",
        "lastProbeTime",
        "lastHeartbeatTime",
        "lastUpdateTime",
        "shutdownTime",
        "startedAt",
        "finishedAt",
        "startTime",
    }
)


# --------------------------------------------------------------------------- typed (Go layout)
def typed_equal(a: Any, b: Any, type_expr: str, types: GoTypes | None = None) -> bool:
    """``Semantic.DeepEqual`` of ``a`` and ``b`` decoded into the Go type ``type_expr``."""
    return _TypedComparer(types or go_types()).eq(a, b, type_expr)


def pod_spec_equal(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two ``core/v1.PodSpec`` objects are semantically equal."""
    return typed_equal(a, b, POD_SPEC)


class _TypedComparer:
    def __init__(self, types: GoTypes) -> None:
        self.types = types

    def eq(self, a: Any, b: Any, t: str) -> bool:
        if t.startswith("*"):
            if a is None or b is None:
                return a is None and b is None
            return self.eq(a, b, t[1:])
        if t.startswith("[]"):
            la, lb = a or [], b or []
            return len(la) == len(lb) and all(
                self.eq(x, y, t[2:]) for x, y in zip(la, lb, strict=True)
            )
        if t.startswith("map[string]"):
            da, db = a or {}, b or {}
            return da.keys() == db.keys() and all(self.eq(da[k], db[k], t[11:]) for k in da)
        if t.startswith("@"):
            da, db = a or {}, b or {}
            fields = self.types.structs[t[1:]]
            return all(self.eq(da.get(f.name), db.get(f.name), f.type) for f in fields)
        return _scalar_equal(a, b, t)


def _scalar_equal(a: Any, b: Any, t: str) -> bool:
    if t == "string":
        return (a or "") == (b or "")
    if t in ("int", "float"):
        return bool(_number(a) == _number(b))
    if t == "bool":
        return bool(a) is bool(b)
    if t == "quantity":
        return quantities_equal(a, b)
    if t == "intorstring":
        return bool(_int_or_string(a) == _int_or_string(b))
    if t in ("time", "microtime"):
        return bool(_instant(a) == _instant(b))
    return bool(a == b)  # any, rawjson, bytes


def _number(v: Any) -> Any:
    if v is None:
        return 0
    return ("bool", v) if isinstance(v, bool) else v


def _int_or_string(v: Any) -> tuple[bool, Any]:
    if v is None:
        return (False, 0)
    return (isinstance(v, str), v)


def _instant(v: Any) -> Any:
    if v is None:
        return None
    try:
        return parse_rfc3339(v)
    except (TypeError, ValueError, AttributeError):
        return v


# --------------------------------------------------------------------------- untyped JSON
def semantic_equal(a: Any, b: Any) -> bool:
    """Semantic equality of two JSON values without a schema (see the module docstring)."""
    return _same(_normalise(a, None), _normalise(b, None))


_EMPTY: Final = object()


def _normalise(v: Any, key: str | None) -> Any:
    if isinstance(v, Mapping):
        out = {}
        for k, item in v.items():
            norm = _normalise_child(item, k, key)
            if norm is not _EMPTY:
                out[k] = norm
        return out or _EMPTY
    if isinstance(v, list):
        return [_normalise(item, key) for item in v] or _EMPTY
    if v is None or (isinstance(v, str) and v == ""):
        return _EMPTY
    return v


def _normalise_child(item: Any, key: str, parent_key: str | None) -> Any:
    if parent_key in QUANTITY_MAPS or key in QUANTITY_FIELDS:
        q = _as_quantity(item)
        if q is not None:
            return q
    if key in TIME_FIELDS and isinstance(item, str) and item:
        try:
            return parse_rfc3339(item)
        except ValueError:
            return item
    return _normalise(item, key)


def _as_quantity(v: Any) -> Quantity | None:
    if isinstance(v, bool) or not isinstance(v, str | int):
        return None
    try:
        return parse_quantity(v)
    except QuantityError:
        return None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Quantity) or isinstance(b, Quantity):
        return isinstance(a, Quantity) and isinstance(b, Quantity) and a == b
    if isinstance(a, datetime) or isinstance(b, datetime):
        return isinstance(a, datetime) and isinstance(b, datetime) and a == b
    return bool(a is b or a == b)
