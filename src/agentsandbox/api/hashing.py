"""The hashes written into labels: all are 32-bit FNV-1a rendered as 8 lower-case hex digits.

- :func:`name_hash` — tracking label of a Sandbox's pod/service/PVCs, warm-pool label values;
- :func:`template_ref_hash` — hash of a template *name* (not its content or namespace);
- :func:`pod_template_hash` — hash of the template's ``spec.podTemplate`` serialised exactly as
  Go's ``encoding/json`` serialises the typed struct (see :mod:`agentsandbox.api.gojson`), so
  that sandboxes made by the Go controllers and by us carry the same label value;
- :func:`sandbox_blueprint_hash` — hash of the whole ``SandboxBlueprint`` of a template's spec
  (``podTemplate``, ``volumeClaimTemplates``, ``service``; upstream #1102), serialised the same
  way; the value of ``agents.x-k8s.io/sandbox-template-hash``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentsandbox.api import keys
from agentsandbox.api.gojson import GoTypes, go_types, marshal

__all__ = [
    "fnv1a32",
    "name_hash",
    "pod_template_hash",
    "pod_template_json",
    "sandbox_blueprint_hash",
    "sandbox_blueprint_json",
    "sandbox_selector",
    "template_ref_hash",
    "warm_pool_selector",
]

_OFFSET_BASIS = 0x811C9DC5
_PRIME = 0x01000193


def fnv1a32(data: bytes) -> int:
    """32-bit FNV-1a: xor each byte in, then multiply by the FNV prime, modulo 2³²."""
    h = _OFFSET_BASIS
    for byte in data:
        h = ((h ^ byte) * _PRIME) & 0xFFFFFFFF
    return h


def name_hash(value: str) -> str:
    """``NameHash``: FNV-1a of the UTF-8 bytes, ``%08x``."""
    return f"{fnv1a32(value.encode()):08x}"


def template_ref_hash(template_name: str) -> str:
    """Value of ``agents.x-k8s.io/sandbox-template-ref-hash``: the hash of the template name."""
    return name_hash(template_name)


def pod_template_json(pod_template: Mapping[str, Any], types: GoTypes | None = None) -> str:
    """``json.Marshal`` of the typed ``PodTemplate`` (``spec`` first, then ``metadata``)."""
    types = types or go_types()
    return marshal(pod_template, types.roots["podTemplate"], types)


def pod_template_hash(pod_template: Mapping[str, Any], types: GoTypes | None = None) -> str:
    """Value of ``agents.x-k8s.io/sandbox-pod-template-hash`` for a template's ``podTemplate``.

    Raises :class:`~agentsandbox.api.gojson.GoJSONError` when the object would not decode into
    the Go types (upstream then reports the template as unusable).
    """
    return name_hash(pod_template_json(pod_template, types))


def sandbox_blueprint_json(spec: Mapping[str, Any], types: GoTypes | None = None) -> str:
    """``json.Marshal`` of the typed ``SandboxBlueprint`` read from a template (or sandbox) spec.

    Fields in upstream's order: ``podTemplate``, ``volumeClaimTemplates`` (omitempty; each
    ``{"metadata":{name,labels,annotations},"spec":PersistentVolumeClaimSpec}``), ``service``
    (``*bool``, omitempty). Every other key of ``spec`` is ignored, as Go's decoding would.
    """
    types = types or go_types()
    return marshal(spec, types.roots["sandboxBlueprint"], types)


def sandbox_blueprint_hash(spec: Mapping[str, Any], types: GoTypes | None = None) -> str:
    """Value of ``agents.x-k8s.io/sandbox-template-hash`` for a template's ``spec``.

    Raises :class:`~agentsandbox.api.gojson.GoJSONError` like :func:`pod_template_hash`.
    """
    return name_hash(sandbox_blueprint_json(spec, types))


def sandbox_selector(sandbox_name: str) -> str:
    """``status.selector`` of a Sandbox: its tracking label as a selector."""
    return f"{keys.LABEL_SANDBOX_NAME_HASH}={name_hash(sandbox_name)}"


def warm_pool_selector(pool_name: str) -> str:
    """``status.selector`` of a SandboxWarmPool, also how a pool lists its sandboxes."""
    return f"{keys.LABEL_WARM_POOL_SANDBOX}={name_hash(pool_name)}"
