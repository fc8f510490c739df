#!/usr/bin/env python3
"""Generate the agent-sandbox CustomResourceDefinitions in ``deploy/crds/``.

Our own fields are declared below; the embedded Kubernetes types (PodSpec,
PersistentVolumeClaimSpec, NetworkPolicy ingress/egress rules) are converted from the OpenAPI v3
documents that a kube-apiserver serves, so that a mistyped container field is rejected exactly as
the Pod API would reject it.

    python hack/gen_crds.py --kubeconfig .cluster/kubeconfig   # refresh hack/openapi/, write CRDs
    python hack/gen_crds.py                                     # write CRDs from the snapshot
    python hack/gen_crds.py --check                             # fail if deploy/crds/ is stale
    python hack/gen_crds.py --go-structs                        # refresh api/gostructs.json (Go)

The snapshot (``hack/openapi/*.json``) holds only the definitions reachable from the embedded
types, without descriptions, so regeneration needs no cluster. ``--go-structs`` exports the Go
struct layout of the same Kubernetes types (``hack/openapi/gojson``, needs Go and the
k8s.io/api module) that ``agentsandbox.api.gojson`` uses to hash pod templates as Go does.
"""

from __future__ import annotations

import argparse
import base64
import copy
import difflib
import json
import os
import ssl
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT_DIR = ROOT / "hack" / "openapi"
OUT_DIR = ROOT / "deploy" / "crds"
GOJSON_DIR = ROOT / "hack" / "openapi" / "gojson"
GO_STRUCTS = ROOT / "src" / "agentsandbox" / "api" / "gostructs.json"

Schema = dict[str, Any]

CORE = "io.k8s.api.core.v1."
NET = "io.k8s.api.networking.v1."
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"

# snapshot file -> (apiserver path, definitions the CRDs embed)
SOURCES: dict[str, tuple[str, tuple[str, ...]]] = {
    "core-v1.json": ("/openapi/v3/api/v1", (CORE + "PodSpec", CORE + "PersistentVolumeClaimSpec")),
    "networking-v1.json": (
        "/openapi/v3/apis/networking.k8s.io/v1",
        (NET + "NetworkPolicyIngressRule", NET + "NetworkPolicyEgressRule"),
    ),
}

# Formats the apiserver understands and that carry meaning for clients.
KEPT_FORMATS = {"int32", "int64", "byte", "date-time"}
# Bounds and list/map semantics are valid in CRD structural schemas and are kept as served.
KEPT_KEYS = {
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
}
# Dropped on purpose: description (size), enum (the Pod API also accepts values the published
# enums omit, e.g. an empty toleration effect; controller-gen drops them too), uniqueItems
# (forbidden in CRDs), x-kubernetes-patch-* / -unions / -group-version-kind (not CRD keywords).
DROPPED_KEYS = {
    "description",
    "enum",
    "uniqueItems",
    "x-kubernetes-patch-strategy",
    "x-kubernetes-patch-merge-key",
    "x-kubernetes-unions",
    "x-kubernetes-group-version-kind",
    "x-kubernetes-validations",
}

# controller-gen marks structs that inline LocalObjectReference (+structType=atomic) atomic too;
# openapi-gen does not. Upstream's CRDs were made by controller-gen: keep their merge semantics.
MAP_TYPE_OVERRIDES = {
    CORE + "ConfigMapEnvSource": "atomic",
    CORE + "SecretEnvSource": "atomic",
    CORE + "ConfigMapVolumeSource": "atomic",
    CORE + "ConfigMapProjection": "atomic",
    CORE + "SecretProjection": "atomic",
}

# Fields that upstream's CRDs (k8s.io/api v0.35) accept but the snapshot's Kubernetes no longer
# serves. Kept so that manifests written against upstream still validate; the Pod API of the
# snapshot's version ignores them.
LEGACY_FIELDS: dict[str, dict[str, Any]] = {
    # PodSpec.workloadRef: alpha in 1.35 (Workload API), replaced by schedulingGroup in 1.36.
    CORE + "PodSpec": {
        "workloadRef": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "podGroup": {"type": "string"},
                "podGroupReplicaKey": {"type": "string"},
            },
            "required": ["name", "podGroup"],
        }
    },
}

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?"
    r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


# --------------------------------------------------------------------------- OpenAPI snapshot
def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield _ref_name(value)
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _strip_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: _strip_descriptions(v)
            for k, v in node.items()
            if not (k == "description" and isinstance(v, str))
        }
    if isinstance(node, list):
        return [_strip_descriptions(v) for v in node]
    return node


def trim(schemas: Mapping[str, Any], roots: tuple[str, ...]) -> dict[str, Any]:
    """The definitions reachable from ``roots``, without descriptions."""
    keep: dict[str, Any] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        if name not in schemas:
            raise SystemExit(f"OpenAPI document has no definition {name}")
        keep[name] = _strip_descriptions(schemas[name])
        todo.extend(_refs(keep[name]))
    return dict(sorted(keep.items()))


class ApiServer:
    """Just enough of a client to GET the OpenAPI documents with an admin kubeconfig."""

    def __init__(self, kubeconfig: Path) -> None:
        cfg = yaml.safe_load(kubeconfig.read_text())
        ctx_name = cfg.get("current-context")
        ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in cfg.get("users", []) if u["name"] == ctx["user"])
        self.server = cluster["server"].rstrip("/")
        base = kubeconfig.parent
        self._tmp = tempfile.TemporaryDirectory(prefix="gen-crds-")
        ssl_ctx = ssl.create_default_context()
        if cluster.get("insecure-skip-tls-verify"):
            ssl_ctx.check_hostname = False
            ssl_ctx.verify_mode = ssl.CERT_NONE
        elif "certificate-authority-data" in cluster:
            ssl_ctx.load_verify_locations(
                cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
            )
        elif "certificate-authority" in cluster:
            ssl_ctx.load_verify_locations(cafile=str(base / cluster["certificate-authority"]))
        cert = self._file(user, "client-certificate", base)
        key = self._file(user, "client-key", base)
        if cert and key:
            ssl_ctx.load_cert_chain(cert, key)
        self.token = user.get("token")
        if not self.token and user.get("tokenFile"):
            self.token = (base / user["tokenFile"]).read_text().strip()
        self.ssl = ssl_ctx

    def _file(self, user: Mapping[str, Any], field: str, base: Path) -> str | None:
        if f"{field}-data" in user:
            path = Path(self._tmp.name) / field
            path.write_bytes(base64.b64decode(user[f"{field}-data"]))
            return str(path)
        if field in user:
            return str(base / user[field])
        return None

    def get(self, path: str) -> Any:
        req = urllib.request.Request(self.server + path, headers={"Accept": "application/json"})
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, timeout=60, context=self.ssl) as resp:
            return json.loads(resp.read())


def refresh_snapshot(kubeconfig: Path, snapshot_dir: Path) -> None:
    api = ApiServer(kubeconfig)
    version = api.get("/version").get("gitVersion", "unknown")
    snapshot_dir.mkdir(parents=True, exist_ok=True)
    for filename, (path, roots) in SOURCES.items():
        doc = api.get(path)
        snap = {
            "source": path,
            "kubernetes": version,
            "note": "Trimmed by hack/gen_crds.py: only definitions reachable from the roots, "
            "descriptions removed.",
            "roots": list(roots),
            "schemas": trim(doc["components"]["schemas"], roots),
        }
        (snapshot_dir / filename).write_text(json.dumps(snap, indent=1, sort_keys=True) + "\n")
        print(f"wrote {snapshot_dir / filename} ({len(snap['schemas'])} definitions, {version})")


def refresh_go_structs(target: Path) -> None:
    """Export the Go struct layout with the real k8s.io/api types (``go run . structs``)."""
    env = dict(os.environ)
    env.setdefault("GOFLAGS", "-mod=mod")
    out = subprocess.run(
        ["go", "run", ".", "structs"],
        cwd=GOJSON_DIR,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"go run {GOJSON_DIR} structs failed:\n{out.stderr}")
    table = json.loads(out.stdout)
    target.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {target} ({len(table['structs'])} structs, k8s.io/api {table['k8s.io/api']})")


def load_snapshot(snapshot_dir: Path) -> tuple[dict[str, Any], str]:
    schemas: dict[str, Any] = {}
    versions = set()
    for filename in SOURCES:
        snap = json.loads((snapshot_dir / filename).read_text())
        schemas.update(snap["schemas"])
        versions.add(snap["kubernetes"])
    if len(versions) != 1:
        raise SystemExit(f"snapshot files come from different apiservers: {sorted(versions)}")
    return schemas, versions.pop()


# --------------------------------------------------------------------------- OpenAPI -> CRD schema
# Size bounds of what a claim (written by any namespace editor) may carry; a deliberate
# difference from upstream v1.0.1, whose claim schema has none (docs/api.md, "Size bounds").
CLAIM_MAX_ENV = 128
CLAIM_MAX_VALUE = 32 * 1024
CLAIM_MAX_MAP_ENTRIES = 64
CLAIM_MAX_VOLUME_CLAIM_TEMPLATES = 8


def _string_map(*, bounded: bool = False) -> Schema:
    if not bounded:
        return {"type": "object", "additionalProperties": {"type": "string"}}
    return {
        "type": "object",
        "maxProperties": CLAIM_MAX_MAP_ENTRIES,
        "additionalProperties": {"type": "string", "maxLength": CLAIM_MAX_VALUE},
    }


def labels_and_annotations(*, name: bool = False, bounded: bool = False) -> Schema:
    """ObjectMeta as our templates accept it: labels and annotations (and optionally a name).
    ``bounded``: a claim's, at most :data:`CLAIM_MAX_MAP_ENTRIES` entries of at most
    :data:`CLAIM_MAX_VALUE` bytes per map."""
    props: Schema = {
        "annotations": _string_map(bounded=bounded),
        "labels": _string_map(bounded=bounded),
    }
    if name:
        props["name"] = {"type": "string"}
    return {"type": "object", "properties": props}


SPECIAL: dict[str, Callable[[], Schema]] = {
    QUANTITY: lambda: {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
    },
    INT_OR_STRING: lambda: {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
    },
    # Inside a pod (ephemeral volume claim templates) only labels and annotations are allowed.
    META + "ObjectMeta": labels_and_annotations,
    META + "Time": lambda: {"type": "string", "format": "date-time"},
}


class Converter:
    """Turns OpenAPI v3 definitions into CRD structural schemas with every $ref inlined."""

    def __init__(self, schemas: Mapping[str, Any]) -> None:
        self.schemas = schemas
        self.used: set[str] = set()

    def named(self, name: str, stack: tuple[str, ...] = ()) -> Schema:
        if name in stack:
            raise SystemExit(f"recursive schema: {' -> '.join((*stack, name))}")
        self.used.add(name)
        if name in SPECIAL:
            return SPECIAL[name]()
        if name not in self.schemas:
            raise SystemExit(f"definition {name} is not in the snapshot; refresh it")
        out = self.convert(self.schemas[name], (*stack, name))
        if name in MAP_TYPE_OVERRIDES:
            out["x-kubernetes-map-type"] = MAP_TYPE_OVERRIDES[name]
        for field, schema in LEGACY_FIELDS.get(name, {}).items():
            if field in out.get("properties", {}):
                raise SystemExit(f"{name}.{field} is served again: drop it from LEGACY_FIELDS")
            out.setdefault("properties", {})[field] = copy.deepcopy(schema)
        return out

    def convert(self, node: Mapping[str, Any], stack: tuple[str, ...]) -> Schema:
        ref = node.get("$ref")
        if ref is None and "allOf" in node:
            parts = node["allOf"]
            if len(parts) != 1 or "$ref" not in parts[0]:
                raise SystemExit(f"unsupported allOf under {stack[-1]}: {parts}")
            ref = parts[0]["$ref"]
        if ref is not None:
            out = self.named(_ref_name(ref), stack)
            # Keys next to the reference refine it (map type); defaults of whole objects are not
            # carried over: they would add empty objects to every stored Sandbox.
            for key, value in node.items():
                if key in KEPT_KEYS:
                    out[key] = copy.deepcopy(value)
            return out
        if "oneOf" in node or "anyOf" in node:
            raise SystemExit(f"unsupported oneOf/anyOf under {stack[-1]}: {node}")

        out = {}
        for key, value in node.items():
            if key in DROPPED_KEYS or key == "default":
                continue
            if key == "type":
                out["type"] = value
            elif key == "format":
                if value in KEPT_FORMATS:
                    out["format"] = value
            elif key in KEPT_KEYS or key == "required":
                out[key] = copy.deepcopy(value)
            elif key == "properties":
                required = set(node.get("required", ()))
                props = {}
                for prop, sub in value.items():
                    conv = self.convert(sub, stack)
                    default = sub.get("default")
                    # Scalar defaults of optional fields are real API defaults (TCP, ext4, ...).
                    # Defaults of required fields would defeat `required`; object defaults ({})
                    # would add empty objects.
                    if (
                        default is not None
                        and not isinstance(default, dict | list)
                        and prop not in required
                    ):
                        conv["default"] = default
                    props[prop] = conv
                out["properties"] = props
            elif key == "items":
                out["items"] = self.convert(value, stack)
            elif key == "additionalProperties":
                if isinstance(value, dict):
                    out["additionalProperties"] = self.convert(value, stack)
                elif value is not False:
                    raise SystemExit(f"unsupported additionalProperties under {stack[-1]}")
            else:
                raise SystemExit(f"unknown OpenAPI keyword {key!r} under {stack[-1]}")
        if "type" not in out:
            raise SystemExit(f"schema without a type under {stack[-1]}: {node}")
        return out


# --------------------------------------------------------------------------- our schemas
# Our own fields carry one short line of description (for `kubectl explain`); embedded Kubernetes
# types carry none, which keeps every CRD well below the 256 KiB client-side apply limit.
def string(description: str = "", **extra: Any) -> Schema:
    return _described({"type": "string", **extra}, description)


def int32(description: str = "", **extra: Any) -> Schema:
    return _described({"type": "integer", "format": "int32", **extra}, description)


def int64(description: str = "", **extra: Any) -> Schema:
    return _described({"type": "integer", "format": "int64", **extra}, description)


def number(description: str = "", **extra: Any) -> Schema:
    return _described({"type": "number", **extra}, description)


def boolean(description: str = "") -> Schema:
    return _described({"type": "boolean"}, description)


def string_list(description: str = "") -> Schema:
    return _described({"type": "array", "items": {"type": "string"}}, description)


def obj(
    properties: Schema,
    description: str = "",
    *,
    required: list[str] | None = None,
    rules: list[dict[str, str]] | None = None,
) -> Schema:
    out: Schema = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    if rules:
        out["x-kubernetes-validations"] = rules
    return _described(out, description)


def _described(schema: Schema, description: str) -> Schema:
    if description:
        schema["description"] = description
    return schema


def rule(expr: str, message: str) -> dict[str, str]:
    """A CEL validation rule; the message is what `kubectl apply` prints when it fails."""
    return {"rule": expr, "message": message}


# spec.operatingMode (upstream HEAD, #801) and spec.replicas (35b9757f) say the same thing; an
# object may set either or both, but not two different things.
OPERATING_MODE_RULE = rule(
    "!has(self.operatingMode) || !has(self.replicas) || "
    "(self.operatingMode == 'Suspended') == (self.replicas == 0)",
    "spec.operatingMode and spec.replicas disagree: Suspended means replicas 0 and Running "
    "means replicas 1; change both together, or remove spec.replicas",
)

# Upstream v1.0.1 makes a Sandbox's volumeClaimTemplates immutable (its own e2e test
# TestSandboxVolumeClaimTemplatesImmutable): the PVCs exist under those names already. Setting,
# changing and removing them are all refused; the message starts as upstream's does.
VOLUME_CLAIMS_IMMUTABLE_RULE = rule(
    "has(self.volumeClaimTemplates) == has(oldSelf.volumeClaimTemplates) && "
    "(!has(self.volumeClaimTemplates) || "
    "self.volumeClaimTemplates == oldSelf.volumeClaimTemplates)",
    "volumeClaimTemplates is immutable: the sandbox's PVCs are made from them; create a new "
    "Sandbox for other volumes",
)

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def conditions() -> Schema:
    """metav1.Condition, with the bounds and patterns Kubernetes declares for it."""
    item = obj(
        {
            "lastTransitionTime": string(format="date-time"),
            "message": string(maxLength=32768),
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
            "reason": string(
                maxLength=1024,
                minLength=1,
                pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
            ),
            "status": string(enum=["True", "False", "Unknown"]),
            "type": string(
                maxLength=316,
                pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
            ),
        },
        required=["lastTransitionTime", "message", "reason", "status", "type"],
    )
    return {"type": "array", "items": item, "description": "Current state (Ready, ...)."}


def _named_ref(field: str, target: str, description: str) -> Schema:
    """``{name}`` pointing at an object of kind ``target`` in the same namespace.

    Two rules on the reference turn mistakes that could never work into a clear message (issue
    13, bad input): a name that no object can have (``Bad_Name``, 300 characters), and a
    ``namespace`` key. Undeclared, that key would be pruned without a word under the API's
    default field validation (``Warn``), and the object would then silently use a template or
    pool of its own namespace; declared, every client gets the rule's message instead.
    """
    name = string(
        "",
        maxLength=253,
        **{
            "x-kubernetes-validations": [
                rule("size(self) > 0", f"{field}.name must name a {target} in the same namespace")
            ]
        },
    )
    namespace = string(
        "Not supported: the referenced object is always in this object's namespace.",
        maxLength=253,
    )
    return obj(
        {"name": name, "namespace": namespace},
        description,
        required=["name"],
        rules=[
            {
                **rule(
                    f"size(self.name) == 0 || self.name.matches('{DNS_SUBDOMAIN}')",
                    f"{field}.name must be the name of a {target}: lower-case letters, digits, "
                    "'-' and '.', starting and ending with a letter or a digit",
                ),
                "fieldPath": ".name",
            },
            {
                **rule(
                    "!has(self.namespace)",
                    f"{field}.namespace is not supported: the {target} must be in the same "
                    "namespace as this object; remove the key (and create this object in the "
                    f"{target}'s namespace)",
                ),
                "fieldPath": ".namespace",
                "reason": "FieldValueForbidden",
            },
        ],
    )


def template_ref() -> Schema:
    return _named_ref(
        "sandboxTemplateRef",
        "SandboxTemplate",
        "The SandboxTemplate (same namespace) to build sandboxes from.",
    )


def warm_pool_ref() -> Schema:
    return _named_ref(
        "warmPoolRef",
        "SandboxWarmPool",
        "The SandboxWarmPool (same namespace) to adopt from; its template builds one if none is "
        "ready.",
    )


#: The claim spec is the union of both client generations (0.4.6: sandboxTemplateRef + warmpool;
#: 1.0.8: warmPoolRef); exactly one reference says which one a claim uses.
CLAIM_ONE_REF = rule(
    "has(self.sandboxTemplateRef) != has(self.warmPoolRef)",
    "exactly one of spec.sandboxTemplateRef and spec.warmPoolRef must be set",
)
CLAIM_WARMPOOL_WITH_TEMPLATE = rule(
    "!has(self.warmpool) || has(self.sandboxTemplateRef)",
    "spec.warmpool is only allowed with spec.sandboxTemplateRef; with spec.warmPoolRef the "
    "pool is already chosen",
)


#: A managed template's NetworkPolicy is ``<template>-network-policy`` (15 characters more), and an
#: object name has at most 253: a longer template name would leave its sandboxes without the
#: policy (issue 13, bad input). Unmanaged templates have no policy, so no limit beyond 253.
TEMPLATE_NAME_FITS_ITS_NETWORK_POLICY = rule(
    "size(self.metadata.name) <= 238 || (has(self.spec.networkPolicyManagement) && "
    "self.spec.networkPolicyManagement == 'Unmanaged')",
    "a SandboxTemplate name has at most 238 characters (its NetworkPolicy is named "
    "<name>-network-policy, at most 253), unless spec.networkPolicyManagement is Unmanaged",
)


class Schemas:
    """The spec/status schemas of our four kinds."""

    def __init__(self, conv: Converter) -> None:
        self.conv = conv

    def pod_template(self) -> Schema:
        return obj(
            {
                "metadata": _described(
                    labels_and_annotations(), "Labels and annotations for the pod."
                ),
                "spec": self.conv.named(CORE + "PodSpec"),
            },
            "The pod to run (a PodSpec plus pod labels and annotations).",
            required=["spec"],
            rules=[
                rule(
                    "size(self.spec.containers) > 0",
                    "podTemplate.spec.containers must list at least one container",
                )
            ],
        )

    def volume_claim_templates(self, *, bounded: bool = False) -> Schema:
        """``bounded``: a claim's, at most :data:`CLAIM_MAX_VOLUME_CLAIM_TEMPLATES` items with
        bounded metadata maps."""
        item = obj(
            {
                "metadata": labels_and_annotations(name=True, bounded=bounded),
                "spec": self.conv.named(CORE + "PersistentVolumeClaimSpec"),
            },
            required=["spec"],
            rules=[
                rule(
                    "has(self.metadata) && has(self.metadata.name) && size(self.metadata.name) > 0",
                    "volumeClaimTemplates[].metadata.name is required: it names the PVC "
                    "(<name>-<sandbox name>) and the pod volume",
                )
            ],
        )
        out: Schema = {
            "type": "array",
            "x-kubernetes-list-type": "atomic",
            "items": item,
            "description": "PVCs created per sandbox (named <name>-<sandbox>), mounted as "
            "volumes <name>.",
        }
        if bounded:
            out["maxItems"] = CLAIM_MAX_VOLUME_CLAIM_TEMPLATES
        return out

    def sandbox(self) -> tuple[Schema, Schema]:
        spec = obj(
            {
                "podTemplate": self.pod_template(),
                "volumeClaimTemplates": self.volume_claim_templates(),
                "shutdownTime": string("When the sandbox expires (RFC 3339).", format="date-time"),
                "shutdownPolicy": string(
                    "What happens at shutdownTime: Delete the Sandbox or Retain it (pod removed).",
                    default="Retain",
                    enum=["Delete", "Retain"],
                ),
                # No default (upstream 35b9757f defaults it to 1): a default would turn an
                # upstream-HEAD object `operatingMode: Suspended` (no replicas) into a
                # contradiction. Unset replicas and operatingMode mean running.
                "replicas": int32(
                    "1 runs the pod, 0 suspends the sandbox (pod deleted, PVCs kept). Unset: "
                    "as operatingMode.",
                    minimum=0,
                    maximum=1,
                ),
                # upstream HEAD's replacement of replicas (#801); both are served, same meaning
                "operatingMode": string(
                    "Running (as replicas 1) or Suspended (as replicas 0). Unset: replicas "
                    "decides.",
                    enum=["Running", "Suspended"],
                ),
                "service": boolean(
                    "true: keep a headless Service; false: delete it; unset: keep an existing one."
                ),
            },
            "Desired state of the Sandbox.",
            required=["podTemplate"],
            rules=[OPERATING_MODE_RULE, VOLUME_CLAIMS_IMMUTABLE_RULE],
        )
        status = obj(
            {
                "conditions": conditions(),
                "nodeName": string(
                    "Node the sandbox pod is scheduled to; cleared while there is no pod."
                ),
                "podIPs": string_list("IPs of the sandbox pod."),
                "replicas": int32("1 while a pod exists, else 0.", minimum=0),
                "selector": string("Label selector of the sandbox pod (scale subresource)."),
                "service": string("Name of the headless Service, when one is in use."),
                "serviceFQDN": string("DNS name of the headless Service."),
            },
            "Observed state of the Sandbox.",
        )
        return spec, status

    def template(self) -> Schema:
        rule_types = {
            "ingress": NET + "NetworkPolicyIngressRule",
            "egress": NET + "NetworkPolicyEgressRule",
        }
        network_policy = obj(
            {
                key: {
                    "type": "array",
                    "x-kubernetes-list-type": "atomic",
                    "items": self.conv.named(name),
                }
                for key, name in rule_types.items()
            },
            "Ingress/egress rules of the NetworkPolicy made for the template's sandboxes.",
        )
        return obj(
            {
                "podTemplate": self.pod_template(),
                "volumeClaimTemplates": self.volume_claim_templates(),
                "networkPolicy": network_policy,
                "networkPolicyManagement": string(
                    "Managed: the controller owns a NetworkPolicy; Unmanaged: bring your own.",
                    default="Managed",
                    enum=["Managed", "Unmanaged"],
                ),
                "envVarsInjectionPolicy": string(
                    "Whether claims may add (Allowed) or override (Overrides) container env.",
                    default="Disallowed",
                    enum=["Allowed", "Overrides", "Disallowed"],
                ),
                "volumeClaimTemplatesPolicy": string(
                    "Whether claims may add volume claim templates (Allowed) or also replace the "
                    "template's own of the same name (Overrides).",
                    default="Disallowed",
                    enum=["Allowed", "Overrides", "Disallowed"],
                ),
                "service": boolean("Copied to spec.service of the sandboxes."),
            },
            "The sandbox blueprint shared by warm pools and claims.",
            required=["podTemplate"],
        )

    def claim(self) -> tuple[Schema, Schema]:
        env_item = obj(
            {
                "name": string(),
                "value": string(maxLength=CLAIM_MAX_VALUE),
                "containerName": string("Only this container (default: all)."),
            },
            required=["name", "value"],
            rules=[rule("size(self.name) > 0", "env[].name must not be empty")],
        )
        spec = obj(
            {
                "sandboxTemplateRef": template_ref(),
                "warmPoolRef": warm_pool_ref(),
                # No CRD default: absent means "default" (the controller's reading), and a
                # default would put warmpool beside a warmPoolRef, which the spec rule forbids.
                "warmpool": string(
                    'Only with sandboxTemplateRef: "none", "default" (absent: any pool of the '
                    "template) or a pool name.",
                    maxLength=253,
                    **{
                        "x-kubernetes-validations": [
                            rule(
                                "self in ['none', 'default', ''] || "
                                f"self.matches('{DNS_SUBDOMAIN}')",
                                'warmpool must be "none", "default" or the name of a '
                                "SandboxWarmPool",
                            )
                        ]
                    },
                ),
                "lifecycle": obj(
                    {
                        "shutdownTime": string(
                            "When the claim expires (RFC 3339).", format="date-time"
                        ),
                        "ttlSecondsAfterFinished": int32(
                            "Delete the claim this long after its sandbox finished.", minimum=0
                        ),
                        "shutdownPolicy": string(
                            "What happens at shutdownTime.",
                            default="Retain",
                            enum=["Delete", "DeleteForeground", "Retain"],
                        ),
                    },
                    "Expiry of the claim.",
                ),
                "additionalPodMetadata": _described(
                    labels_and_annotations(bounded=True),
                    "Extra labels and annotations for the pod.",
                ),
                "env": {
                    "type": "array",
                    "x-kubernetes-list-type": "atomic",
                    "maxItems": CLAIM_MAX_ENV,
                    "items": env_item,
                    "description": "Environment variables to inject (see the template's "
                    "envVarsInjectionPolicy).",
                },
                "volumeClaimTemplates": self.volume_claim_templates(bounded=True),
            },
            "Desired state of the SandboxClaim: sandboxTemplateRef (+ warmpool) or warmPoolRef.",
            rules=[CLAIM_ONE_REF, CLAIM_WARMPOOL_WITH_TEMPLATE],
        )
        status = obj(
            {
                "conditions": conditions(),
                "sandbox": obj(
                    {
                        "name": string("Name of the Sandbox serving this claim."),
                        "podIPs": string_list("IPs of the sandbox pod."),
                    },
                    "The Sandbox bound to this claim.",
                ),
            },
            "Observed state of the SandboxClaim.",
        )
        return spec, status

    def warm_pool(self) -> tuple[Schema, Schema]:
        spec = obj(
            {
                # optional, default 1 (upstream #975)
                "replicas": int32("Number of warm sandboxes to keep.", default=1, minimum=0),
                "sandboxTemplateRef": template_ref(),
                "updateStrategy": obj(
                    {
                        "type": string(
                            "Recreate replaces stale sandboxes at once; OnReplenish only "
                            "builds new ones from the current template.",
                            default="OnReplenish",
                            enum=["Recreate", "OnReplenish"],
                        )
                    },
                    "How sandboxes built from an older template are replaced.",
                ),
            },
            "Desired state of the SandboxWarmPool.",
            required=["sandboxTemplateRef"],
        )
        status = obj(
            {
                "conditions": conditions(),
                "observedGeneration": int64("The generation of the spec this status describes."),
                "readyReplicas": int32("Warm sandboxes that are Ready."),
                "replicas": int32("Warm sandboxes in the pool."),
                "selector": string("Label selector of the pool's sandboxes (scale subresource)."),
            },
            "Observed state of the SandboxWarmPool.",
        )
        return spec, status


# An autoscaler measures its target's claim arrivals and refill times, which only a
# SandboxWarmPool has, and the controller's RBAC covers only sandboxwarmpools/scale: any other
# target could never work (a Deployment answered 403 on every pass).
AUTOSCALER_TARGET_RULE = rule(
    "self.kind == 'SandboxWarmPool' && "
    "self.apiVersion.matches('^extensions[.]agents[.]x-k8s[.]io/v[0-9]+((alpha|beta)[0-9]+)?$')",
    "spec.scaleTargetRef must name a SandboxWarmPool (apiVersion "
    "extensions.agents.x-k8s.io/<version>, kind SandboxWarmPool): the autoscaler sizes warm "
    "pools only",
)


def scaling_rules(description: str) -> Schema:
    policy = obj(
        {
            "type": _described(
                {"type": "string", "enum": ["Pods", "Percent"]},
                "Pods: at most value sandboxes; Percent: at most value percent of the size.",
            ),
            "value": int32("How many (Pods) or how much (Percent) per period.", minimum=1),
            "periodSeconds": int32("The period, in seconds (1..1800).", minimum=1, maximum=1800),
        },
        "One limit.",
        required=["type", "value", "periodSeconds"],
    )
    return obj(
        {
            "policies": _described(
                {"type": "array", "items": policy, "maxItems": 10}, "The limits of this direction."
            ),
            "selectPolicy": _described(
                {"type": "string", "enum": ["Max", "Min", "Disabled"]},
                "Max (default): the limit allowing the larger change; Min; Disabled: no change.",
            ),
        },
        description,
    )


def autoscaler() -> tuple[Schema, Schema]:
    """The SandboxWarmPoolAutoscaler (ours only, autoscaling.agentsandbox.dev): no embedded
    Kubernetes types, so it needs no converter."""
    target = obj(
        {
            "apiVersion": string(
                "API version of the target: extensions.agents.x-k8s.io/v1beta1 (or v1alpha1).",
                minLength=1,
            ),
            "kind": string("Kind of the target: SandboxWarmPool (the only one).", minLength=1),
            "name": string(
                "Name of the target, in this object's namespace.",
                minLength=1,
                maxLength=253,
                **{
                    "x-kubernetes-validations": [
                        rule(
                            f"self.matches('{DNS_SUBDOMAIN}')",
                            "scaleTargetRef.name must be the name of an object: lower-case "
                            "letters, digits, '-' and '.'",
                        )
                    ]
                },
            ),
        },
        "The SandboxWarmPool whose /scale subresource is sized (same namespace).",
        required=["apiVersion", "kind", "name"],
        rules=[AUTOSCALER_TARGET_RULE],
    )
    spec = obj(
        {
            "scaleTargetRef": target,
            "minReplicas": int32("Fewest replicas the target is given.", default=1, minimum=0),
            "maxReplicas": int32("Most replicas the target is given.", minimum=0),
            "targetWarmShare": number(
                "Share of claims to serve warm, between 0 and 1 exclusive (e.g. 0.99)."
            ),
            "scaleDownStabilizationSeconds": int32(
                "Scale down only to the highest size recommended this long (default 300).",
                minimum=0,
            ),
            "behavior": obj(
                {
                    "scaleUp": scaling_rules("Limits on growth (default: 100% or 4 per 15s)."),
                    "scaleDown": scaling_rules("Limits on shrinking (default: 100% per 15s)."),
                },
                "Rate limits on size changes, as HorizontalPodAutoscaler's behavior has them.",
            ),
        },
        "Desired state of the SandboxWarmPoolAutoscaler.",
        required=["scaleTargetRef", "maxReplicas", "targetWarmShare"],
        rules=[
            rule(
                "self.minReplicas <= self.maxReplicas",
                "spec.minReplicas must not be greater than spec.maxReplicas",
            ),
            rule(
                "self.targetWarmShare > 0.0 && self.targetWarmShare < 1.0",
                "spec.targetWarmShare must be between 0 and 1, both excluded (e.g. 0.99 for 99% "
                "of claims served warm)",
            ),
        ],
    )
    status = obj(
        {
            "conditions": conditions(),
            "observedGeneration": int64("The generation of the spec this status describes."),
            "currentReplicas": int32("The target's replicas, as last read from /scale."),
            "desiredReplicas": int32("The replicas last recommended."),
            "lastScaledReplicas": int32("The replicas this autoscaler last wrote to /scale."),
            "lastScaleTime": string("When it last changed the target's size.", format="date-time"),
            "lastScale": obj(
                {
                    "fromReplicas": int32("Size before."),
                    "toReplicas": int32("Size after."),
                    "reason": string("Why (one CamelCase word)."),
                    "message": string("Why, in a sentence."),
                },
                "The last size change and why.",
            ),
            "arrivalRate": number("Claims per second arriving for the target, measured."),
            "refillSeconds": number("Mean create-to-Ready time of the target's sandboxes."),
            "predictedWarmShare": number("Share of claims served warm at desiredReplicas."),
            "realisedWarmShare": number("Share of the window's claims served warm (measured)."),
            "window": obj(
                {
                    "binSeconds": number("Seconds per bin.", minimum=1),
                    "firstBin": int64("Index of the first bin (its start / binSeconds)."),
                    "claims": _described(
                        {
                            "type": "array",
                            "items": {"type": "integer", "format": "int64", "minimum": 0},
                            "maxItems": 4096,
                        },
                        "Claims per bin.",
                    ),
                    "groupSquares": _described(
                        {
                            "type": "array",
                            "items": {"type": "integer", "format": "int64", "minimum": 0},
                            "maxItems": 4096,
                        },
                        "Sum of squared group sizes per bin (grouped arrivals).",
                    ),
                    "largestGroups": _described(
                        {
                            "type": "array",
                            "items": {"type": "integer", "format": "int64", "minimum": 0},
                            "maxItems": 4096,
                        },
                        "The largest group of claims begun in each bin.",
                    ),
                    "occupancy": _described(
                        {
                            "type": "array",
                            "items": {
                                "type": "array",
                                "items": {"type": "integer", "format": "int64", "minimum": 0},
                                "maxItems": 1024,
                            },
                            "maxItems": 4096,
                        },
                        "Per bin, (occupancy, claims) pairs: claims that found so many claims "
                        "within a refill time.",
                    ),
                },
                "The claim arrivals of the last rate window, kept across restarts.",
            ),
            "estimates": obj(
                {
                    "refillMeanSeconds": number(
                        "Mean create-to-Ready time of the target's sandboxes, as measured.",
                        minimum=0,
                    ),
                    "refillP99Seconds": number(
                        "99th percentile of the create-to-Ready times, as measured.", minimum=0
                    ),
                    "refillKappa": number(
                        "Peakedness factor of the refill times (1 for a constant refill).",
                        minimum=0,
                    ),
                    "allowanceScale": number(
                        "Correction of the cold-claim allowance from the realised warm share.",
                        minimum=0,
                    ),
                    "scaleDownStretch": number(
                        "Factor the scale-down window is stretched by after misses.", minimum=1
                    ),
                    "burstRises": _described(
                        {
                            "type": "array",
                            "items": obj(
                                {
                                    "start": number("When the rise was detected (seconds)."),
                                    "end": number("When it was over; absent: it went on."),
                                },
                                required=["start"],
                            ),
                            "maxItems": 12,
                        },
                        "The latest panics' rises (controller clock): the bursts' schedule "
                        "is learnt from them.",
                    ),
                },
                "What the sizing has measured and learnt, kept across restarts.",
            ),
        },
        "Observed state of the SandboxWarmPoolAutoscaler.",
    )
    return spec, status


# --------------------------------------------------------------------------- CRD documents
def column(name: str, type_: str, path: str, priority: int = 0, **extra: str) -> Schema:
    out: Schema = {"name": name, "type": type_, "jsonPath": path, **extra}
    if priority:
        out["priority"] = priority
    return out


AGE = column("Age", "date", ".metadata.creationTimestamp")
READY_STATUS = '.status.conditions[?(@.type=="Ready")].status'
READY_REASON = '.status.conditions[?(@.type=="Ready")].reason'


def crd(
    *,
    group: str,
    kind: str,
    plural: str,
    short_names: list[str],
    spec: Schema,
    status: Schema | None,
    columns: list[Schema],
    scale: bool,
    description: str,
    served: tuple[str, ...] = ("v1beta1", "v1alpha1"),
    storage: str = "v1beta1",
    rules: list[dict[str, str]] | None = None,
) -> Schema:
    props: Schema = {
        "apiVersion": string(),
        "kind": string(),
        "metadata": {"type": "object"},
        "spec": spec,
    }
    if status is not None:
        props["status"] = status
    root = obj(props, description, required=["spec"], rules=rules)
    subresources: Schema = {}
    if status is not None:
        subresources["status"] = {}
    if scale:
        subresources["scale"] = {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }

    def version(name: str) -> Schema:
        out: Schema = {
            "name": name,
            "served": True,
            "storage": name == storage,
            "schema": {"openAPIV3Schema": copy.deepcopy(root)},
            "additionalPrinterColumns": copy.deepcopy(columns),
        }
        if subresources:
            out["subresources"] = copy.deepcopy(subresources)
        if name == "v1alpha1" and name != storage:
            out["deprecated"] = True
            out["deprecationWarning"] = (
                f"{group}/v1alpha1 {kind} is deprecated; use {group}/v1beta1 {kind} instead"
            )
        return out

    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["agent-sandbox"],
            },
            "scope": "Namespaced",
            "conversion": {"strategy": "None"},
            # v1beta1 first: it is the storage version and the one `kubectl explain` shows.
            "versions": [version(v) for v in served],
        },
    }


def build(schemas: Mapping[str, Any]) -> dict[str, Schema]:
    """file name -> CRD document."""
    s = Schemas(Converter(schemas))
    core, ext = "agents.x-k8s.io", "extensions.agents.x-k8s.io"
    sb_spec, sb_status = s.sandbox()
    claim_spec, claim_status = s.claim()
    pool_spec, pool_status = s.warm_pool()
    docs = {
        f"{core}_sandboxes.yaml": crd(
            group=core,
            kind="Sandbox",
            plural="sandboxes",
            short_names=["sandbox"],
            description="A Sandbox is one isolated, stateful pod with a stable name, optional "
            "storage and an optional headless Service.",
            spec=sb_spec,
            status=sb_status,
            scale=True,
            columns=[
                column("Ready", "string", READY_STATUS),
                column("Reason", "string", READY_REASON),
                column("Replicas", "integer", ".status.replicas"),
                AGE,
                column("Pod IPs", "string", ".status.podIPs", priority=1),
                column("Service", "string", ".status.serviceFQDN", priority=1),
                column("Shutdown Time", "string", ".spec.shutdownTime", priority=1),
            ],
        ),
        f"{ext}_sandboxtemplates.yaml": crd(
            group=ext,
            kind="SandboxTemplate",
            plural="sandboxtemplates",
            short_names=["sandboxtemplate"],
            description="A SandboxTemplate describes the sandboxes that warm pools and claims "
            "create.",
            spec=s.template(),
            status=None,
            scale=False,
            rules=[TEMPLATE_NAME_FITS_ITS_NETWORK_POLICY],
            columns=[
                AGE,
                column("Network Policy", "string", ".spec.networkPolicyManagement", priority=1),
                column("Env Injection", "string", ".spec.envVarsInjectionPolicy", priority=1),
            ],
        ),
        f"{ext}_sandboxclaims.yaml": crd(
            group=ext,
            kind="SandboxClaim",
            plural="sandboxclaims",
            short_names=["sandboxclaim"],
            description="A SandboxClaim asks for a Sandbox from a template or a warm pool, taken "
            "from a warm pool when one is ready.",
            spec=claim_spec,
            status=claim_status,
            scale=False,
            columns=[
                # Upstream's columns (#984), in upstream's order; the rest only with -o wide.
                column("Ready", "string", READY_STATUS),
                column("Sandbox", "string", ".status.sandbox.name"),
                column("Reason", "string", READY_REASON),
                AGE,
                column("Template", "string", ".spec.sandboxTemplateRef.name", priority=1),
                column("Warm Pool", "string", ".spec.warmPoolRef.name", priority=1),
                column("Warm Pool Policy", "string", ".spec.warmpool", priority=1),
            ],
        ),
        f"{ext}_sandboxwarmpools.yaml": crd(
            group=ext,
            kind="SandboxWarmPool",
            plural="sandboxwarmpools",
            short_names=["swp"],
            description="A SandboxWarmPool keeps a number of ready Sandboxes from a template for "
            "claims to adopt.",
            spec=pool_spec,
            status=pool_status,
            scale=True,
            columns=[
                column("Desired", "integer", ".spec.replicas"),
                column("Current", "integer", ".status.replicas"),
                column("Ready", "integer", ".status.readyReplicas"),
                column("Template", "string", ".spec.sandboxTemplateRef.name"),
                AGE,
                column("Strategy", "string", ".spec.updateStrategy.type", priority=1),
            ],
        ),
    }
    as_spec, as_status = autoscaler()
    docs["autoscaling.agentsandbox.dev_sandboxwarmpoolautoscalers.yaml"] = crd(
        group="autoscaling.agentsandbox.dev",
        kind="SandboxWarmPoolAutoscaler",
        plural="sandboxwarmpoolautoscalers",
        short_names=["swpa"],
        description="A SandboxWarmPoolAutoscaler sizes a warm pool through /scale from its "
        "claim arrival rate and refill time.",
        spec=as_spec,
        status=as_status,
        scale=False,
        served=("v1alpha1",),
        storage="v1alpha1",
        columns=[
            column("Target", "string", ".spec.scaleTargetRef.name"),
            column("Min", "integer", ".spec.minReplicas"),
            column("Max", "integer", ".spec.maxReplicas"),
            column("Current", "integer", ".status.currentReplicas"),
            column("Desired", "integer", ".status.desiredReplicas"),
            column("Ready", "string", READY_STATUS),
            AGE,
            column("Target Warm Share", "number", ".spec.targetWarmShare", priority=1),
            column("Arrival Rate", "number", ".status.arrivalRate", priority=1),
            column("Refill Seconds", "number", ".status.refillSeconds", priority=1),
            column("Reason", "string", READY_REASON, priority=1),
        ],
    )
    return docs


HEADER = (
    "# Generated by hack/gen_crds.py from the Kubernetes {version} OpenAPI snapshot in "
    "hack/openapi/.\n# Do not edit by hand: change the generator and run "
    "`python hack/gen_crds.py`.\n"
)


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def render(doc: Schema, version: str) -> str:
    body = yaml.dump(doc, Dumper=_Dumper, sort_keys=True, default_flow_style=False, width=10_000)
    return HEADER.format(version=version) + "---\n" + body


def generate(snapshot_dir: Path) -> dict[str, str]:
    schemas, version = load_snapshot(snapshot_dir)
    return {name: render(doc, version) for name, doc in build(schemas).items()}


def check(out_dir: Path, rendered: Mapping[str, str]) -> int:
    stale = []
    for name, text in rendered.items():
        path = out_dir / name
        current = path.read_text() if path.exists() else ""
        if current != text:
            diff = difflib.unified_diff(
                current.splitlines(keepends=True),
                text.splitlines(keepends=True),
                f"{path} (committed)",
                f"{path} (generated)",
                n=1,
            )
            stale.append("".join(list(diff)[:40]))
    extra = (
        sorted(p.name for p in out_dir.glob("*.yaml") if p.name not in rendered)
        if out_dir.is_dir()
        else []
    )
    for name in extra:
        stale.append(f"{out_dir / name}: not produced by the generator\n")
    if stale:
        sys.stderr.write("".join(stale))
        sys.stderr.write("deploy/crds is stale: run `python hack/gen_crds.py`\n")
        return 1
    print(f"{len(rendered)} CRDs up to date")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        help="refresh the OpenAPI snapshot from this apiserver first",
    )
    parser.add_argument("--snapshot-dir", type=Path, default=SNAPSHOT_DIR)
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    parser.add_argument(
        "--check", action="store_true", help="verify the committed CRDs are up to date"
    )
    parser.add_argument(
        "--go-structs",
        action="store_true",
        help=f"also refresh {GO_STRUCTS.relative_to(ROOT)} from the Go types (needs Go)",
    )
    args = parser.parse_args(argv)
    if args.kubeconfig and args.check:
        parser.error("--check works from the committed snapshot; drop --kubeconfig")
    if args.kubeconfig:
        refresh_snapshot(args.kubeconfig, args.snapshot_dir)
    if args.go_structs:
        refresh_go_structs(GO_STRUCTS)
    rendered = generate(args.snapshot_dir)
    if args.check:
        return check(args.out_dir, rendered)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in rendered.items():
        (args.out_dir / name).write_text(text)
        size = len(json.dumps(yaml.safe_load(text), separators=(",", ":")))
        print(f"wrote {args.out_dir / name} ({size} bytes as JSON)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
