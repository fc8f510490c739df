"""Which SandboxWarmPool controls a sandbox (the claim's view of a pool sandbox): the group and
kind of the controller reference are checked, any version. The property tests of
tests/unit/controllers/test_plan_invariants.py reach these branches only when their random
inputs happen to; these examples always do."""

from __future__ import annotations

from typing import Any

import pytest

from agentsandbox.controllers.claim.plan import pool_owner


def controlled_by(api_version: str, kind: str, name: str = "pool") -> dict[str, Any]:
    ref = {"apiVersion": api_version, "kind": kind, "name": name, "uid": "u", "controller": True}
    return {"metadata": {"name": "sb", "ownerReferences": [ref]}}


@pytest.mark.parametrize("version", ["v1alpha1", "v1beta1", "v9"])
def test_a_pool_of_our_group_in_any_version(version: str) -> None:
    assert pool_owner(controlled_by(f"extensions.agents.x-k8s.io/{version}", "SandboxWarmPool"))


@pytest.mark.parametrize(
    "sb",
    [
        controlled_by("example.com/v1", "SandboxWarmPool"),  # same kind, another group
        controlled_by("extensions.agents.x-k8s.io/v1beta1", "SandboxTemplate"),
        controlled_by("extensions.agents.x-k8s.io/v1beta1", "SandboxWarmPool", name=""),
        {"metadata": {"name": "sb"}},
    ],
    ids=["other-group", "other-kind", "no-name", "no-controller"],
)
def test_anything_else_is_no_pool(sb: dict[str, Any]) -> None:
    assert pool_owner(sb) is None
