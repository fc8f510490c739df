"""The generated CRDs (docs/api.md): up to date, small enough for client-side apply, shaped as
upstream's."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.project.scripts import load_script

ROOT = Path(__file__).resolve().parents[3]
CRD_DIR = ROOT / "deploy" / "crds"
GEN = ROOT / "hack" / "gen_crds.py"
#: kubectl apply (client-side) stores the object in an annotation; annotations are capped at
#: 256 KiB in total.
ANNOTATION_LIMIT = 256 * 1024


gen = load_script(GEN)


@functools.cache
def crds() -> dict[str, dict[str, Any]]:
    """The CRDs as committed (parsed once; treat as read-only)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        docs = [d for d in yaml.load_all(path.read_text(), Loader=loader) if d]
        assert len(docs) == 1, f"{path.name}: one CRD per file"
        out[docs[0]["metadata"]["name"]] = docs[0]
    return out


def walk(schema: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if not isinstance(schema, dict):
        return
    yield path, schema
    for key, sub in schema.get("properties", {}).items():
        yield from walk(sub, f"{path}.{key}")
    if "items" in schema:
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


def test_gen_crds_check_passes() -> None:
    out = subprocess.run(
        [sys.executable, str(GEN), "--check"], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr


def test_gen_crds_check_detects_a_stale_file(tmp_path: Path) -> None:
    for path in CRD_DIR.glob("*.yaml"):
        (tmp_path / path.name).write_text(path.read_text())
    victim = tmp_path / "agents.x-k8s.io_sandboxes.yaml"
    victim.write_text(victim.read_text().replace("maximum: 1\n", "maximum: 2\n", 1))
    out = subprocess.run(
        [sys.executable, str(GEN), "--check", "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 1
    assert "stale" in out.stderr


#: Ours only (autoscaling.agentsandbox.dev): a new API, served at v1alpha1 alone.
OURS_ONLY = {"sandboxwarmpoolautoscalers.autoscaling.agentsandbox.dev"}


def test_deploy_crds_holds_exactly_our_four_crds_and_the_autoscaler() -> None:
    assert sorted(crds()) == [
        "sandboxclaims.extensions.agents.x-k8s.io",
        "sandboxes.agents.x-k8s.io",
        "sandboxtemplates.extensions.agents.x-k8s.io",
        "sandboxwarmpoolautoscalers.autoscaling.agentsandbox.dev",
        "sandboxwarmpools.extensions.agents.x-k8s.io",
    ]


@pytest.mark.parametrize("name", sorted(OURS_ONLY))
def test_the_autoscaler_crd_is_v1alpha1_only(name: str) -> None:
    crd = crds()[name]
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert not version.get("deprecated")
    assert version["subresources"] == {"status": {}}
    assert crd["spec"]["names"]["shortNames"] == ["swpa"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert {r["rule"] for r in spec["x-kubernetes-validations"]} == {
        "self.minReplicas <= self.maxReplicas",
        "self.targetWarmShare > 0.0 && self.targetWarmShare < 1.0",
    }


@pytest.mark.parametrize("name", sorted(crds()))
def test_crd_fits_the_client_side_apply_annotation(name: str) -> None:
    size = len(json.dumps(crds()[name], separators=(",", ":")).encode())
    assert size < ANNOTATION_LIMIT * 0.6, f"{name} is {size} bytes as JSON"


@pytest.mark.parametrize("name", sorted(set(crds()) - OURS_ONLY))
def test_versions_v1beta1_storage_and_v1alpha1_deprecated_with_the_same_schema(name: str) -> None:
    crd = crds()[name]
    assert crd["spec"]["conversion"] == {"strategy": "None"}
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    assert set(versions) == {"v1beta1", "v1alpha1"}
    beta, alpha = versions["v1beta1"], versions["v1alpha1"]
    assert beta["served"] and beta["storage"] and not beta.get("deprecated")
    assert alpha["served"] and not alpha["storage"] and alpha["deprecated"]
    kind = crd["spec"]["names"]["kind"]
    group = crd["spec"]["group"]
    assert alpha["deprecationWarning"] == (
        f"{group}/v1alpha1 {kind} is deprecated; use {group}/v1beta1 {kind} instead"
    )
    for key in ("schema", "subresources", "additionalPrinterColumns"):
        assert alpha.get(key) == beta.get(key)


@pytest.mark.parametrize("name", sorted(crds()))
def test_schemas_are_structural(name: str) -> None:
    """No $ref/allOf/oneOf, every node typed (or int-or-string), no uniqueItems."""
    for version in crds()[name]["spec"]["versions"]:
        for path, node in walk(version["schema"]["openAPIV3Schema"]):
            assert not {"$ref", "allOf", "oneOf", "uniqueItems"} & node.keys(), path
            if node.get("x-kubernetes-int-or-string"):
                assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            else:
                assert "type" in node, path
            assert len(node.get("description", "")) <= 120, path


SPEC_NAMES = {
    "sandboxes.agents.x-k8s.io": ("Sandbox", "sandboxes", ["sandbox"], True, True),
    "sandboxtemplates.extensions.agents.x-k8s.io": (
        "SandboxTemplate",
        "sandboxtemplates",
        ["sandboxtemplate"],
        False,
        False,
    ),
    "sandboxclaims.extensions.agents.x-k8s.io": (
        "SandboxClaim",
        "sandboxclaims",
        ["sandboxclaim"],
        True,
        False,
    ),
    "sandboxwarmpools.extensions.agents.x-k8s.io": (
        "SandboxWarmPool",
        "sandboxwarmpools",
        ["swp"],
        True,
        True,
    ),
}


@pytest.mark.parametrize("name", sorted(SPEC_NAMES))
def test_names_scope_and_subresources(name: str) -> None:
    kind, plural, short, status, scale = SPEC_NAMES[name]
    crd = crds()[name]
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"]) == (kind, plural, short)
    assert names["singular"] == kind.lower() and names["listKind"] == f"{kind}List"
    assert crd["spec"]["scope"] == "Namespaced"
    sub = crd["spec"]["versions"][0].get("subresources", {})
    assert ("status" in sub) is status
    if scale:
        assert sub["scale"] == {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }
    else:
        assert "scale" not in sub


@pytest.mark.parametrize(
    ("name", "columns"),
    [
        ("sandboxes.agents.x-k8s.io", ["Ready", "Reason", "Replicas", "Age"]),
        ("sandboxwarmpools.extensions.agents.x-k8s.io", ["Desired", "Ready", "Template", "Age"]),
        ("sandboxclaims.extensions.agents.x-k8s.io", ["Ready", "Sandbox", "Reason", "Age"]),
        ("sandboxtemplates.extensions.agents.x-k8s.io", ["Age"]),
    ],
)
def test_printer_columns(name: str, columns: list[str]) -> None:
    shown = [
        c["name"]
        for c in crds()[name]["spec"]["versions"][0]["additionalPrinterColumns"]
        if not c.get("priority")
    ]
    assert [c for c in shown if c in columns] == columns


def _spec_schema(name: str) -> dict[str, Any]:
    schema = crds()[name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return dict(schema["properties"]["spec"])


def test_sandbox_spec_fields() -> None:
    spec = _spec_schema("sandboxes.agents.x-k8s.io")
    props = spec["properties"]
    assert spec["required"] == ["podTemplate"]
    # no default: `operatingMode: Suspended` alone must not become a contradiction
    assert props["replicas"] == {
        "description": props["replicas"]["description"],
        "format": "int32",
        "maximum": 1,
        "minimum": 0,
        "type": "integer",
    }
    assert props["operatingMode"] == {
        "description": props["operatingMode"]["description"],
        "enum": ["Running", "Suspended"],
        "type": "string",
    }
    mode_rule, vct_rule = spec["x-kubernetes-validations"]
    assert mode_rule["message"].startswith("spec.operatingMode and spec.replicas disagree")
    # upstream v1.0.1's rule: set, changed or removed after creation is refused
    assert vct_rule["message"].startswith("volumeClaimTemplates is immutable")
    assert "oldSelf.volumeClaimTemplates" in vct_rule["rule"]
    assert props["shutdownPolicy"]["enum"] == ["Delete", "Retain"]
    assert props["shutdownPolicy"]["default"] == "Retain"
    assert props["shutdownTime"]["format"] == "date-time"
    assert props["volumeClaimTemplates"]["x-kubernetes-list-type"] == "atomic"
    pod_meta = props["podTemplate"]["properties"]["metadata"]["properties"]
    assert sorted(pod_meta) == ["annotations", "labels"]


def test_embedded_pod_spec_is_the_real_schema() -> None:
    pod = _spec_schema("sandboxes.agents.x-k8s.io")["properties"]["podTemplate"]["properties"][
        "spec"
    ]
    container = pod["properties"]["containers"]["items"]
    assert pod["required"] == ["containers"]
    assert pod["properties"]["containers"]["x-kubernetes-list-map-keys"] == ["name"]
    assert "image" in container["properties"] and "imagee" not in container["properties"]
    assert container["required"] == ["name"]
    ports = container["properties"]["ports"]
    assert ports["x-kubernetes-list-map-keys"] == ["containerPort", "protocol"]
    assert ports["items"]["properties"]["protocol"]["default"] == "TCP"
    limits = container["properties"]["resources"]["properties"]["limits"]["additionalProperties"]
    assert limits["x-kubernetes-int-or-string"] is True and "pattern" in limits
    port = container["properties"]["readinessProbe"]["properties"]["httpGet"]["properties"]["port"]
    assert port["x-kubernetes-int-or-string"] is True
    eph = pod["properties"]["volumes"]["items"]["properties"]["ephemeral"]
    meta = eph["properties"]["volumeClaimTemplate"]["properties"]["metadata"]
    assert sorted(meta["properties"]) == ["annotations", "labels"]


def test_template_network_policy_rules_are_real_schemas() -> None:
    np = _spec_schema("sandboxtemplates.extensions.agents.x-k8s.io")["properties"]["networkPolicy"]
    egress = np["properties"]["egress"]["items"]["properties"]
    assert {"to", "ports"} <= set(egress)
    assert "ipBlock" in egress["to"]["items"]["properties"]
    ingress = np["properties"]["ingress"]["items"]["properties"]
    assert {"from", "ports"} <= set(ingress)


def _rules(name: str) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    schema = crds()[name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk(schema):
        if "x-kubernetes-validations" in node:
            out[path] = node["x-kubernetes-validations"]
    return out


def test_validation_rules_have_messages() -> None:
    for name in crds():
        for path, rules in _rules(name).items():
            for r in rules:
                assert r["rule"] and r["message"], (name, path)


def test_warm_pool_replicas_is_optional_with_default_one() -> None:
    spec = _spec_schema("sandboxwarmpools.extensions.agents.x-k8s.io")
    assert spec["required"] == ["sandboxTemplateRef"]  # upstream #975
    assert spec["properties"]["replicas"]["default"] == 1
    assert spec["properties"]["replicas"]["minimum"] == 0


def test_validation_rules_where_expected() -> None:
    assert set(_rules("sandboxes.agents.x-k8s.io")) == {
        ".spec",
        ".spec.podTemplate",
        ".spec.volumeClaimTemplates[]",
    }
    assert set(_rules("sandboxclaims.extensions.agents.x-k8s.io")) == {
        ".spec",
        ".spec.sandboxTemplateRef",  # name syntax, no namespace key (issue 13, bad input)
        ".spec.sandboxTemplateRef.name",
        ".spec.warmPoolRef",
        ".spec.warmPoolRef.name",
        ".spec.warmpool",
        ".spec.env[]",
        ".spec.volumeClaimTemplates[]",
    }
    assert set(_rules("sandboxwarmpools.extensions.agents.x-k8s.io")) == {
        ".spec.sandboxTemplateRef",
        ".spec.sandboxTemplateRef.name",
    }


# --------------------------------------------------------------------------- the converter
QTY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
IOS = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def test_converter_inlines_refs_and_maps_special_types() -> None:
    defs = {
        "A": {
            "type": "object",
            "description": "dropped",
            "required": ["b", "port"],
            "properties": {
                "b": {"allOf": [_ref("B")], "default": {}},
                "port": _ref(IOS),
                "limits": {"type": "object", "additionalProperties": _ref(QTY)},
                "proto": {"type": "string", "default": "TCP", "enum": ["TCP", "UDP"]},
                "name": {"type": "string", "default": ""},
                "tags": {
                    "type": "array",
                    "items": {"type": "string", "default": ""},
                    "x-kubernetes-list-type": "set",
                    "x-kubernetes-patch-strategy": "merge",
                },
                "n": {"type": "integer", "format": "int32"},
                "odd": {"type": "string", "format": "uuid"},
            },
        },
        "B": {"type": "object", "properties": {"c": {"type": "boolean", "default": False}}},
    }
    out = gen.Converter(defs).named("A")
    props = out["properties"]
    assert "description" not in out
    assert props["b"] == {
        "type": "object",
        "properties": {"c": {"type": "boolean", "default": False}},
    }
    assert props["port"] == {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
    }
    assert props["limits"]["additionalProperties"]["pattern"] == gen.QUANTITY_PATTERN
    assert props["proto"] == {"type": "string", "default": "TCP"}  # enum dropped, default kept
    assert props["name"] == {"type": "string", "default": ""}
    assert props["tags"] == {
        "type": "array",
        "items": {"type": "string"},
        "x-kubernetes-list-type": "set",
    }
    assert props["n"]["format"] == "int32"
    assert "format" not in props["odd"]


def test_converter_drops_defaults_of_required_fields() -> None:
    defs = {
        "A": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string", "default": ""}},
        }
    }
    assert gen.Converter(defs).named("A")["properties"]["name"] == {"type": "string"}


def test_converter_reduces_object_meta_to_labels_and_annotations() -> None:
    meta = gen.Converter({}).named("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
    assert sorted(meta["properties"]) == ["annotations", "labels"]


def test_converter_refuses_recursion_and_unknown_keywords() -> None:
    with pytest.raises(SystemExit, match="recursive"):
        gen.Converter({"A": {"type": "object", "properties": {"a": _ref("A")}}}).named("A")
    with pytest.raises(SystemExit, match="unknown OpenAPI keyword"):
        gen.Converter({"A": {"type": "object", "not": {}}}).named("A")
    with pytest.raises(SystemExit, match="not in the snapshot"):
        gen.Converter({}).named("Missing")


def test_trim_keeps_only_reachable_definitions_without_descriptions() -> None:
    schemas = {
        "A": {"type": "object", "description": "x", "properties": {"b": _ref("B")}},
        "B": {"type": "string", "description": "y"},
        "C": {"type": "string"},
    }
    assert gen.trim(schemas, ("A",)) == {
        "A": {"type": "object", "properties": {"b": _ref("B")}},
        "B": {"type": "string"},
    }
