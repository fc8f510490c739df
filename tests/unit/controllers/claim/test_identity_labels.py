"""A claimed Sandbox carries its claim's identity: the ``agents.x-k8s.io/created-by`` label is
the claim's, on the Sandbox and on its pod template, or absent when the claim has none (a pool
sandbox's ``created-by: controller`` does not survive its adoption)."""

from __future__ import annotations

from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS
from tests.unit.controllers.claim.test_controller import (
    Harness,
    claim_v1alpha1,
    claim_v1beta1,
    pool,
    pool_sandbox,
    template,
)

CREATED_BY = keys.LABEL_CREATED_BY


def labelled_template() -> dict[str, Any]:
    """A template whose pod metadata sets created-by itself."""
    t = template()
    t["spec"]["podTemplate"]["metadata"]["labels"][CREATED_BY] = "controller"
    return t


def with_created_by(claim: dict[str, Any], value: str | None) -> dict[str, Any]:
    if value is not None:
        claim["metadata"]["labels"] = {CREATED_BY: value}
    return claim


@pytest.mark.parametrize("value", ["python-client", None])
async def test_an_adopted_sandbox_carries_the_claims_created_by_or_none(value: str | None) -> None:
    """claim review #11: the pool's created-by goes with the adoption, on the Sandbox and on
    its pod template; the claim's value (if any) comes."""
    h = Harness()
    t = h.add(SANDBOX_TEMPLATES.plural, labelled_template())
    p = h.add(SANDBOX_WARM_POOLS.plural, pool())
    member = pool_sandbox(p, t)
    member["metadata"]["labels"][CREATED_BY] = "controller"  # as the pool makes its members
    h.add("sandboxes", member)
    h.add(SANDBOX_CLAIMS.plural, with_created_by(claim_v1beta1(), value))
    await h.reconcile()
    name = h.claim()["status"]["sandbox"]["name"]
    assert name == member["metadata"]["name"], "adopted"
    sb = h.sandbox(name)
    assert sb["metadata"]["labels"].get(CREATED_BY) == value
    assert sb["spec"]["podTemplate"]["metadata"]["labels"].get(CREATED_BY) == value


@pytest.mark.parametrize("value", ["python-client", None])
async def test_a_cold_sandbox_pod_template_carries_the_claims_created_by_or_none(
    value: str | None,
) -> None:
    """claim review #11: the cold sandbox's pod template gets the claim's created-by too, and
    loses one the template sets when the claim has none."""
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, labelled_template())
    h.add(SANDBOX_CLAIMS.plural, with_created_by(claim_v1alpha1(warmpool="none"), value))
    await h.reconcile()
    sb = h.sandbox("claim")
    assert sb["metadata"]["labels"].get(CREATED_BY) == value
    assert sb["spec"]["podTemplate"]["metadata"]["labels"].get(CREATED_BY) == value
