"""What a claim may ask of its sandbox, pure rules and through the reconciler: env injection next
to ``envFrom``, the cluster-autoscaler annotation, the label-domain allow-list and volume claim
template names (docs/claims.md, the claim fields; docs/design/claim.md, "Pod metadata and env").
"""

from __future__ import annotations

from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES
from agentsandbox.controllers.claim.claimed_sandbox import inject_env, validate_additional_metadata
from agentsandbox.controllers.claim.plan import REASON_ENV_REJECTED, ClaimFailure
from tests.unit.controllers.claim.test_controller import (
    Harness,
    claim_v1beta1,
    setup_pool,
    template,
)

SAFE_TO_EVICT = keys.ANNOTATION_SAFE_TO_EVICT


# ------------------------------------------------------------------------ env next to envFrom
def envfrom_pod_spec() -> dict[str, Any]:
    """A template whose main container takes variables from a Secret (``DATABASE_URL``, say)
    and whose sidecar has none of its own."""
    return {
        "containers": [
            {"name": "main", "envFrom": [{"secretRef": {"name": "db"}}]},
            {"name": "sidecar"},
        ]
    }


@pytest.mark.parametrize("target", ["", "main"])
def test_allowed_policy_refuses_env_for_a_container_with_env_from(target: str) -> None:
    """Claim review #6: under ``envVarsInjectionPolicy: Allowed`` (add, never override) a claim
    variable for a container that has ``envFrom`` is refused: an explicit ``env`` entry wins
    over ``envFrom``, so ``DATABASE_URL=attacker`` would override the Secret's value. Default
    variables go to the first container, so both the default and the targeted form count."""
    var: dict[str, Any] = {"name": "DATABASE_URL", "value": "attacker"}
    if target:
        var["containerName"] = target
    spec = envfrom_pod_spec()
    with pytest.raises(ClaimFailure) as refused:
        inject_env(spec, [var], "Allowed")
    assert refused.value.reason == REASON_ENV_REJECTED
    assert '"main"' in refused.value.message and "envFrom" in refused.value.message
    assert "env" not in spec["containers"][0]


def test_env_from_elsewhere_and_overrides_policy_still_inject() -> None:
    """Claim review #6, the other side: under ``Overrides`` the template owner allowed
    overriding anything, ``envFrom`` included; under ``Allowed`` a container without
    ``envFrom`` still gets new variables even if another container has one."""
    spec = envfrom_pod_spec()
    inject_env(spec, [{"name": "DATABASE_URL", "value": "mine"}], "Overrides")
    assert spec["containers"][0]["env"] == [{"name": "DATABASE_URL", "value": "mine"}]
    spec = envfrom_pod_spec()
    inject_env(spec, [{"name": "MODE", "value": "x", "containerName": "sidecar"}], "Allowed")
    assert spec["containers"][1]["env"] == [{"name": "MODE", "value": "x"}]


async def test_a_claim_env_next_to_env_from_is_a_terminal_reason_and_no_sandbox() -> None:
    """Claim review #6 through the reconciler: ``EnvVarsInjectionRejected``, no retry, no
    sandbox."""
    h = Harness()
    t = template(envVarsInjectionPolicy="Allowed")
    t["spec"]["podTemplate"]["spec"]["containers"][0]["envFrom"] = [{"secretRef": {"name": "db"}}]
    h.add(SANDBOX_TEMPLATES.plural, t)
    setup_pool(h)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(env=[{"name": "DATABASE_URL", "value": "x"}]))
    assert await h.reconcile() is None, "terminal: no requeue"
    assert h.ready()["reason"] == REASON_ENV_REJECTED
    assert h.owned_by(h.claim()) == []


# ------------------------------------------------------------- the cluster-autoscaler annotation
def test_the_safe_to_evict_annotation_is_the_one_restricted_key_a_claim_may_set() -> None:
    """Claim review #7: ``cluster-autoscaler.kubernetes.io/safe-to-evict`` is in a restricted
    domain (``*.kubernetes.io``) but is how a pod asks not to be evicted by the cluster
    autoscaler, so a claim may set it as an annotation; the rest of that domain, and the same
    key as a label, are still refused."""
    assert validate_additional_metadata({"annotations": {SAFE_TO_EVICT: "false"}}) is None
    other = validate_additional_metadata(
        {"annotations": {"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"}}
    )
    assert other is not None and "restricted system domain" in other
    as_label = validate_additional_metadata({"labels": {SAFE_TO_EVICT: "false"}})
    assert as_label is not None


async def test_a_claim_asking_not_to_be_evicted_gets_a_cold_sandbox_carrying_it() -> None:
    """Claim review #7 through the reconciler: no ``InvalidMetadata``; the cold sandbox's pod
    template carries ``safe-to-evict: "false"``."""
    h = Harness()
    setup_pool(h)
    extra = {"annotations": {SAFE_TO_EVICT: "false"}}
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(additionalPodMetadata=extra))
    await h.reconcile()
    assert h.ready()["reason"] == "SandboxNotReady", h.ready()
    meta = h.sandbox("claim")["spec"]["podTemplate"]["metadata"]
    assert meta["annotations"][SAFE_TO_EVICT] == "false"
