"""The SandboxClaim CRD is the union of both client generations, the same in both versions.

0.4.6 sends ``extensions.agents.x-k8s.io/v1alpha1`` with ``sandboxTemplateRef`` (+ ``warmpool``),
1.0.8 sends ``v1beta1`` with ``warmPoolRef``, ``env``, ``additionalPodMetadata``,
``volumeClaimTemplates``, ``lifecycle``. With conversion ``None`` both versions must keep every
one of those fields, or structural pruning drops them silently.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

CRD_DIR = Path(__file__).resolve().parents[3] / "deploy" / "crds"
CLAIM = "sandboxclaims.extensions.agents.x-k8s.io"
SANDBOX = "sandboxes.agents.x-k8s.io"
ONE_REF = "exactly one of spec.sandboxTemplateRef and spec.warmPoolRef must be set"
WARMPOOL_WITH_TEMPLATE = (
    "spec.warmpool is only allowed with spec.sandboxTemplateRef; with spec.warmPoolRef the pool "
    "is already chosen"
)


@functools.cache
def crds() -> dict[str, dict[str, Any]]:
    """The committed CRDs by name (read-only)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    docs = [yaml.load(p.read_text(), Loader=loader) for p in sorted(CRD_DIR.glob("*.yaml"))]
    return {d["metadata"]["name"]: d for d in docs}


def versions() -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in crds()[CLAIM]["spec"]["versions"]}


def spec_schema(version: str = "v1beta1") -> dict[str, Any]:
    root = versions()[version]["schema"]["openAPIV3Schema"]
    return dict(root["properties"]["spec"])


def test_claim_schema_is_identical_in_both_versions_without_conversion() -> None:
    crd = crds()[CLAIM]
    assert crd["spec"]["conversion"] == {"strategy": "None"}
    beta, alpha = versions()["v1beta1"], versions()["v1alpha1"]
    assert alpha["schema"] == beta["schema"]
    assert alpha["additionalPrinterColumns"] == beta["additionalPrinterColumns"]


def test_claim_spec_has_the_fields_of_both_clients() -> None:
    props = spec_schema()["properties"]
    assert sorted(props) == [
        "additionalPodMetadata",
        "env",
        "lifecycle",
        "sandboxTemplateRef",
        "volumeClaimTemplates",
        "warmPoolRef",
        "warmpool",
    ]
    for ref in ("sandboxTemplateRef", "warmPoolRef"):
        assert props[ref]["type"] == "object"
        assert props[ref]["required"] == ["name"]
        assert props[ref]["properties"]["name"]["type"] == "string"
    assert sorted(props["additionalPodMetadata"]["properties"]) == ["annotations", "labels"]
    assert sorted(props["env"]["items"]["properties"]) == ["containerName", "name", "value"]
    assert props["env"]["items"]["required"] == ["name", "value"]
    assert sorted(props["lifecycle"]["properties"]) == [
        "shutdownPolicy",
        "shutdownTime",
        "ttlSecondsAfterFinished",
    ]


def test_no_reference_is_required_by_the_schema_but_exactly_one_by_a_rule() -> None:
    spec = spec_schema()
    assert "required" not in spec
    assert spec["x-kubernetes-validations"] == [
        {"rule": "has(self.sandboxTemplateRef) != has(self.warmPoolRef)", "message": ONE_REF},
        {
            "rule": "!has(self.warmpool) || has(self.sandboxTemplateRef)",
            "message": WARMPOOL_WITH_TEMPLATE,
        },
    ]


def test_warm_pool_ref_name_must_not_be_empty() -> None:
    name = spec_schema()["properties"]["warmPoolRef"]["properties"]["name"]
    assert name["x-kubernetes-validations"] == [
        {
            "rule": "size(self) > 0",
            "message": "warmPoolRef.name must name a SandboxWarmPool in the same namespace",
        }
    ]


def test_warmpool_has_no_default_and_keeps_its_validation() -> None:
    warmpool = spec_schema()["properties"]["warmpool"]
    assert "default" not in warmpool
    assert warmpool["type"] == "string"
    assert warmpool["maxLength"] == 253
    (check,) = warmpool["x-kubernetes-validations"]
    assert check["rule"].startswith("self in ['none', 'default', ''] || self.matches(")
    assert check["message"] == 'warmpool must be "none", "default" or the name of a SandboxWarmPool'


def test_lifecycle_shutdown_policy_default_is_upstreams() -> None:
    """Enum Delete|DeleteForeground|Retain, default Retain (docs/api.md, "The SandboxClaim: one
    schema for both client generations")."""
    policy = spec_schema()["properties"]["lifecycle"]["properties"]["shutdownPolicy"]
    assert policy["default"] == "Retain"
    assert policy["enum"] == ["Delete", "DeleteForeground", "Retain"]


def test_volume_claim_templates_have_the_sandbox_shape() -> None:
    """The Sandbox's shape, plus the claim's size bounds (test_claim_sizes_are_bounded...)."""
    ours = copy.deepcopy(spec_schema()["properties"]["volumeClaimTemplates"])
    sandbox = crds()[SANDBOX]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert ours.pop("maxItems") == 8
    for field in ("labels", "annotations"):
        meta = ours["items"]["properties"]["metadata"]["properties"][field]
        assert (meta.pop("maxProperties"), meta["additionalProperties"].pop("maxLength")) == (
            64,
            32 * 1024,
        )
    assert ours == sandbox["properties"]["spec"]["properties"]["volumeClaimTemplates"]
    item = ours["items"]
    assert sorted(item["properties"]["metadata"]["properties"]) == ["annotations", "labels", "name"]
    assert "accessModes" in item["properties"]["spec"]["properties"]


def test_status_is_unchanged() -> None:
    root = versions()["v1beta1"]["schema"]["openAPIV3Schema"]
    status = root["properties"]["status"]["properties"]
    assert sorted(status) == ["conditions", "sandbox"]
    assert sorted(status["sandbox"]["properties"]) == ["name", "podIPs"]


def test_printer_columns_are_upstreams_then_wide_extras() -> None:
    columns = versions()["v1beta1"]["additionalPrinterColumns"]
    assert [c["name"] for c in columns if not c.get("priority")] == [
        "Ready",
        "Sandbox",
        "Reason",
        "Age",
    ]
    wide = {c["name"]: c["jsonPath"] for c in columns if c.get("priority")}
    assert wide == {
        "Template": ".spec.sandboxTemplateRef.name",
        "Warm Pool": ".spec.warmPoolRef.name",
        "Warm Pool Policy": ".spec.warmpool",
    }


def test_claim_sizes_are_bounded_in_both_versions() -> None:
    """Security review #12: an editor's claim must not grow without bound (each is cached, and a
    cold claim's env is copied into its Sandbox): ``env`` at most 128 items, each ``value`` at
    most 32 KiB, the ``additionalPodMetadata`` maps at most 64 entries with values of at most
    32 KiB, at most 8 ``volumeClaimTemplates`` whose metadata maps hold at most 64 entries.
    Upstream v1.0.1's claim schema has no such bounds (a deliberate difference)."""
    for version in ("v1beta1", "v1alpha1"):
        props = spec_schema(version)["properties"]
        assert props["env"]["maxItems"] == 128
        assert props["env"]["items"]["properties"]["value"]["maxLength"] == 32 * 1024
        for field in ("labels", "annotations"):
            meta = props["additionalPodMetadata"]["properties"][field]
            assert meta["maxProperties"] == 64, (version, field)
            assert meta["additionalProperties"]["maxLength"] == 32 * 1024, (version, field)
        vcts = props["volumeClaimTemplates"]
        assert vcts["maxItems"] == 8
        for field in ("labels", "annotations"):
            assert (
                vcts["items"]["properties"]["metadata"]["properties"][field]["maxProperties"] == 64
            )
