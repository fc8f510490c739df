"""Go ``encoding/json`` output for Kubernetes types, reproduced in Python.

Upstream hashes ``json.Marshal`` of typed Go structs, so a byte-identical hash needs Go's layout:
fields in struct order, ``omitempty``/``omitzero`` rules, non-pointer structs always written
(``"resources":{}``), absent non-``omitempty`` fields written as their zero value, map keys
sorted, quantities in canonical form, HTML-safe string escaping. The layout of every struct
reachable from the pod template is exported from the real Go types into ``gostructs.json``
(``hack/openapi/gojson``); this module walks a JSON object along that layout.

Type expressions in the table: ``*T`` pointer, ``[]T`` slice, ``map[string]T``, ``@name`` struct,
scalars ``string``/``int``/``bool``/``float``, and types with their own JSON form: ``quantity``,
``intorstring``, ``time``, ``microtime``, ``rawjson``, ``bytes``, ``any``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any

from agentsandbox.api.quantity import QuantityError, parse_quantity

__all__ = [
    "GoJSONError",
    "GoTypes",
    "go_string",
    "go_types",
    "marshal",
]


class GoJSONError(TypeError):
    """The object does not decode into the Go type (Go's json.Unmarshal would fail)."""


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: str
    omitempty: bool
    omitzero: bool


@dataclass(frozen=True, slots=True)
class GoTypes:
    """The exported struct layout: struct name -> fields in encoding order."""

    structs: Mapping[str, tuple[Field, ...]]
    roots: Mapping[str, str]
    k8s_api_version: str

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> GoTypes:
        structs = {
            name: tuple(
                Field(
                    name=f["name"],
                    type=f["type"],
                    omitempty="omitempty" in f.get("flags", "").split(","),
                    omitzero="omitzero" in f.get("flags", "").split(","),
                )
                for f in fields
            )
            for name, fields in table["structs"].items()
        }
        return cls(structs, dict(table["roots"]), str(table["k8s.io/api"]))


@cache
def go_types() -> GoTypes:
    """The layout shipped with the package (k8s.io/api version in ``k8s_api_version``)."""
    text = resources.files("agentsandbox.api").joinpath("gostructs.json").read_text()
    return GoTypes.from_table(json.loads(text))


_HTML_UNSAFE = re.compile("[<>&\u2028\u2029]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def go_string(value: str) -> str:
    """A JSON string literal as Go writes it (``<``, ``>``, ``&``, U+2028/9 escaped)."""
    value = _SURROGATE.sub("\ufffd", value)
    out = json.dumps(value, ensure_ascii=False)
    return _HTML_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", out)


def marshal(value: Any, type_expr: str, types: GoTypes | None = None) -> str:
    """``json.Marshal`` of ``value`` decoded into the Go type ``type_expr``."""
    enc = _Encoder(types or go_types())
    out: list[str] = []
    enc.encode(value, type_expr, out)
    return "".join(out)


class _Encoder:
    def __init__(self, types: GoTypes) -> None:
        self.types = types

    def struct(self, type_expr: str) -> tuple[Field, ...]:
        try:
            return self.types.structs[type_expr[1:]]
        except KeyError:
            raise GoJSONError(f"no layout for Go struct {type_expr[1:]}") from None

    def encode(self, v: Any, t: str, out: list[str]) -> None:
        if t.startswith("*"):
            if v is None:
                out.append("null")
            else:
                self.encode(v, t[1:], out)
        elif t.startswith("[]"):
            if v is None:
                out.append("null")
                return
            if not isinstance(v, list):
                raise GoJSONError(f"expected a list for {t}, got {type(v).__name__}")
            out.append("[")
            for i, item in enumerate(v):
                if i:
                    out.append(",")
                self.encode(item, t[2:], out)
            out.append("]")
        elif t.startswith("map[string]"):
            if v is None:
                out.append("null")
                return
            if not isinstance(v, Mapping):
                raise GoJSONError(f"expected an object for {t}, got {type(v).__name__}")
            out.append("{")
            for i, key in enumerate(sorted(v)):
                if i:
                    out.append(",")
                out.append(go_string(key))
                out.append(":")
                self.encode(v[key], t[11:], out)
            out.append("}")
        elif t.startswith("@"):
            if v is None:
                v = {}
            if not isinstance(v, Mapping):
                raise GoJSONError(f"expected an object for {t[1:]}, got {type(v).__name__}")
            out.append("{")
            first = True
            for f in self.struct(t):
                fv = v.get(f.name)
                if f.omitempty and self.is_empty(fv, f.type):
                    continue
                if f.omitzero and self.is_zero(fv, f.type):
                    continue
                if not first:
                    out.append(",")
                first = False
                out.append(go_string(f.name))
                out.append(":")
                self.encode(fv, f.type, out)
            out.append("}")
        else:
            out.append(_scalar(v, t))

    def is_empty(self, v: Any, t: str) -> bool:
        """Go's omitempty test on the decoded value (structs are never empty)."""
        if t.startswith("*") or t == "any":
            return v is None
        if t.startswith(("[]", "map[")) or t == "bytes":
            return v is None or len(v) == 0
        if t == "string":
            return v is None or v == ""
        if t in ("int", "float"):
            return v is None or (not isinstance(v, bool) and v == 0)
        if t == "bool":
            return v is None or v is False
        return False  # structs, including quantity, intorstring, time and rawjson

    def is_zero(self, v: Any, t: str) -> bool:
        """Go's omitzero test: IsZero() where defined, else the type's zero value."""
        if t.startswith(("*", "[]", "map[")) or t in ("any", "bytes", "rawjson"):
            return v is None
        if t in ("time", "microtime"):
            return v is None or _parse_time(v) == _ZERO_TIME
        if t == "quantity":
            return v is None or _quantity(v).is_zero()
        if t == "intorstring":
            return v is None or (isinstance(v, int) and not isinstance(v, bool) and v == 0)
        if t.startswith("@"):
            if v is None:
                return True
            return all(self.is_zero(v.get(f.name), f.type) for f in self.struct(t))
        return self.is_empty(v, t)


_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)


def _quantity(v: Any) -> Any:
    try:
        return parse_quantity(v)
    except QuantityError as err:
        raise GoJSONError(str(err)) from None


def _parse_time(v: Any) -> datetime:
    if not isinstance(v, str):
        raise GoJSONError(f"expected an RFC 3339 time, got {v!r}")
    try:
        parsed = datetime.fromisoformat(v.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise GoJSONError(f"expected an RFC 3339 time, got {v!r}") from None
    if parsed.tzinfo is None:
        raise GoJSONError(f"RFC 3339 time without an offset: {v!r}")
    return parsed.astimezone(UTC)


def _scalar(v: Any, t: str) -> str:
    if t == "string":
        if v is None:
            return '""'
        if not isinstance(v, str):
            raise GoJSONError(f"expected a string, got {v!r}")
        return go_string(v)
    if t == "int":
        if v is None:
            return "0"
        if isinstance(v, bool) or not isinstance(v, int):
            raise GoJSONError(f"expected an integer, got {v!r}")
        return str(v)
    if t == "bool":
        if v is None:
            return "false"
        if not isinstance(v, bool):
            raise GoJSONError(f"expected a boolean, got {v!r}")
        return "true" if v else "false"
    if t == "float":
        if v is None:
            return "0"
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise GoJSONError(f"expected a number, got {v!r}")
        return str(int(v)) if float(v).is_integer() and abs(v) < 1e21 else repr(float(v))
    if t == "quantity":
        return '"0"' if v is None else f'"{_quantity(v).canonical()}"'
    if t == "intorstring":
        if v is None:
            return "0"
        if isinstance(v, str):
            return go_string(v)
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)
        raise GoJSONError(f"expected an integer or a string, got {v!r}")
    if t == "time":
        if v is None:
            return "null"
        return '"' + _parse_time(v).strftime("%Y-%m-%dT%H:%M:%SZ") + '"'
    if t == "microtime":
        if v is None:
            return "null"
        return '"' + _parse_time(v).strftime("%Y-%m-%dT%H:%M:%S.%fZ") + '"'
    if t == "bytes":
        return "null" if v is None else go_string(str(v))
    if t in ("rawjson", "any"):
        return "null" if v is None else json.dumps(v, separators=(",", ":"), sort_keys=True)
    raise GoJSONError(f"unknown Go type expression {t!r}")
