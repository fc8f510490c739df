"""Kinds, keys, owner references, timestamps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from agentsandbox.api import keys, kinds
from agentsandbox.api.owners import (
    AlreadyOwnedError,
    Ownership,
    controller_of,
    controller_reference,
    is_adoptable,
    ownership,
    with_controller_reference,
)
from agentsandbox.api.timefmt import format_rfc3339, format_rfc3339_nano, parse_rfc3339

POOL = {
    "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
    "kind": "SandboxWarmPool",
    "metadata": {"name": "pool", "namespace": "ns", "uid": "uid-pool"},
}


def test_kinds() -> None:
    assert kinds.SANDBOX.api_version == "agents.x-k8s.io/v1beta1"
    assert kinds.SANDBOX.crd_name == "sandboxes.agents.x-k8s.io"
    assert kinds.SANDBOX.short_names == ("sandbox",)
    assert kinds.SANDBOX_WARM_POOL.short_names == ("swp",)
    assert kinds.SANDBOX_CLAIM.list_kind == "SandboxClaimList"
    assert kinds.SANDBOX_TEMPLATE.singular == "sandboxtemplate"
    assert kinds.SANDBOX_WARM_POOL.path("ns", "p") == (
        "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/ns/sandboxwarmpools/p"
    )
    assert kinds.SANDBOX.path() == "/apis/agents.x-k8s.io/v1beta1/sandboxes"
    assert kinds.EXTENSIONS_API_VERSION == "extensions.agents.x-k8s.io/v1beta1"
    assert kinds.TEMPLATE_REF_FIELD == ".spec.sandboxTemplateRef.name"


def test_kind_of_accepts_both_served_versions() -> None:
    k = kinds.kind_of("agents.x-k8s.io/v1alpha1", "Sandbox")
    assert k is not None and k.version == "v1alpha1" and k.plural == "sandboxes"
    assert kinds.kind_of("agents.x-k8s.io/v1", "Sandbox") is None
    assert kinds.kind_of("v1", "Pod") is None


def test_keys_are_exact() -> None:
    assert keys.LABEL_SANDBOX_NAME_HASH == "agents.x-k8s.io/sandbox-name-hash"
    assert keys.LABEL_WARM_POOL_SANDBOX == "agents.x-k8s.io/warm-pool-sandbox"
    assert keys.LABEL_SANDBOX_TEMPLATE_REF_HASH == "agents.x-k8s.io/sandbox-template-ref-hash"
    assert keys.LABEL_SANDBOX_POD_TEMPLATE_HASH == "agents.x-k8s.io/sandbox-pod-template-hash"
    assert keys.LABEL_CLAIM_UID == "agents.x-k8s.io/claim-uid"
    assert keys.LABEL_SANDBOX_NAME == "agents.x-k8s.io/sandbox-name"
    assert keys.ANNOTATION_POD_NAME == "agents.x-k8s.io/pod-name"
    assert keys.ANNOTATION_SANDBOX_TEMPLATE_REF == "agents.x-k8s.io/sandbox-template-ref"
    assert keys.ANNOTATION_TRACE_CONTEXT == "opentelemetry.io/trace-context"
    assert keys.LABEL_ADOPTABLE == "agents.x-k8s.io/adoptable"


def test_controller_reference() -> None:
    assert controller_reference(POOL) == {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "name": "pool",
        "uid": "uid-pool",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_controller_reference_fills_in_kind_for_list_items() -> None:
    item = {"metadata": POOL["metadata"]}
    assert controller_reference(item, kinds.SANDBOX_WARM_POOL) == controller_reference(POOL)
    with pytest.raises(ValueError):
        controller_reference(item)


def _child(*refs: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "sb", "namespace": "ns", "ownerReferences": list(refs)}}


def test_ownership_classification() -> None:
    mine = controller_reference(POOL)
    other = {**mine, "uid": "uid-other", "name": "other"}
    not_controller = {**other, "controller": False}
    assert ownership(_child(), "uid-pool") is Ownership.UNOWNED
    assert ownership(_child(not_controller), "uid-pool") is Ownership.UNOWNED
    assert ownership(_child(mine), "uid-pool") is Ownership.OWNED
    assert ownership(_child(other), "uid-pool") is Ownership.OWNED_BY_OTHER
    assert controller_of(_child(not_controller, mine)) == mine


def test_with_controller_reference_adds_and_keeps_other_refs() -> None:
    plain = {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "u1"}
    child = _child(plain)
    out = with_controller_reference(child, controller_reference(POOL))
    assert out["metadata"]["ownerReferences"] == [plain, controller_reference(POOL)]
    assert child["metadata"]["ownerReferences"] == [plain]  # not mutated


def test_with_controller_reference_replaces_a_ref_to_the_same_owner() -> None:
    old = {**controller_reference(POOL), "controller": False}
    out = with_controller_reference(_child(old), controller_reference(POOL))
    assert out["metadata"]["ownerReferences"] == [controller_reference(POOL)]


def test_with_controller_reference_refuses_another_controller() -> None:
    other = {**controller_reference(POOL), "name": "other", "uid": "x"}
    with pytest.raises(AlreadyOwnedError, match="already owned"):
        with_controller_reference(_child(other), controller_reference(POOL))


def test_adoption_needs_the_opt_in_label() -> None:
    assert not is_adoptable({"metadata": {}})
    assert not is_adoptable({"metadata": {"labels": {keys.LABEL_ADOPTABLE: "yes"}}})
    assert is_adoptable({"metadata": {"labels": {keys.LABEL_ADOPTABLE: "true"}}})


def test_time_formats() -> None:
    t = datetime(2026, 5, 21, 10, 0, 1, 120000, tzinfo=UTC)
    assert format_rfc3339(t) == "2026-05-21T10:00:01Z"
    assert format_rfc3339_nano(t) == "2026-05-21T10:00:01.12Z"
    assert format_rfc3339_nano(t.replace(microsecond=0)) == "2026-05-21T10:00:01Z"
    local = t.astimezone(timezone(timedelta(hours=2)))
    assert format_rfc3339(local) == "2026-05-21T10:00:01Z"
    assert parse_rfc3339("2026-05-21T12:00:01.12+02:00") == t
    with pytest.raises(ValueError):
        format_rfc3339(datetime(2026, 1, 1))  # naive on purpose
    with pytest.raises(ValueError):
        parse_rfc3339("2026-05-21T10:00:00")
