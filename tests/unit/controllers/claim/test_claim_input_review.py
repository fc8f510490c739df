"""What a claim may ask of its sandbox, pure rules and through the reconciler: env injection next
to ``envFrom``, the cluster-autoscaler annotation, the label-domain allow-list and volume claim
template names (docs/claims.md, the claim fields; docs/design/claim.md, "Pod metadata and env").
"""

from __future__ import annotations

from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES
from agentsandbox.controllers.claim.claimed_sandbox import (
    cold_sandbox,
    inject_env,
    validate_additional_metadata,
)
from agentsandbox.controllers.claim.plan import REASON_ENV_REJECTED, REASON_VCT_ERROR, ClaimFailure
from tests.unit.controllers.claim.test_controller import (
    Harness,
    claim_v1alpha1,
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


# ---------------------------------------------------------------- volume claim template names
def vct(name: str | None) -> dict[str, Any]:
    return {
        "metadata": {} if name is None else {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


NAME_PROBLEMS = {
    "empty": ([vct("ws"), vct("")], "volumeClaimTemplates[1] has no name"),
    "missing": ([vct(None)], "volumeClaimTemplates[0] has no name"),
    "duplicate": ([vct("ws"), vct("ws")], 'duplicate volume claim template name "ws"'),
}


@pytest.mark.parametrize("policy", ["Disallowed", "Allowed", "Overrides"])
@pytest.mark.parametrize("problem", sorted(NAME_PROBLEMS))
@pytest.mark.parametrize("side", ["claim", "template"])
def test_volume_claim_template_names_must_be_present_and_unique_on_both_sides(
    side: str, problem: str, policy: str
) -> None:
    """Claim review note 16: an empty or repeated volume claim template name, in the claim or
    in the template, is a terminal ``VolumeClaimTemplatesError`` naming the problem, under
    every policy (before the policy is even looked at). Under ``Overrides`` two claim VCTs of
    one name were collapsed (the last won); repeated names in the template reached the Sandbox,
    whose pod would then have two volumes of one name."""
    bad, why = NAME_PROBLEMS[problem]
    if side == "claim":
        tpl = review_template(volumeClaimTemplatesPolicy=policy)
        c = review_claim(volumeClaimTemplates=bad)
    else:
        tpl = review_template(volumeClaimTemplatesPolicy=policy, volumeClaimTemplates=bad)
        c = review_claim(volumeClaimTemplates=[vct("scratch")])
    with pytest.raises(ClaimFailure) as refused:
        cold_sandbox(c, tpl)
    assert refused.value.reason == REASON_VCT_ERROR and refused.value.terminal
    assert f"the {side}'s {why}" in refused.value.message, refused.value.message


def test_a_template_with_repeated_volume_claim_template_names_fails_claims_without_any() -> None:
    """Claim review note 16: the template's names are checked even when the claim brings no
    volume claim template of its own (its Sandbox would get the repeated names)."""
    tpl = review_template(volumeClaimTemplates=[vct("ws"), vct("ws")])
    with pytest.raises(ClaimFailure) as refused:
        cold_sandbox(review_claim(), tpl)
    assert refused.value.reason == REASON_VCT_ERROR
    assert "the template's duplicate" in refused.value.message


@pytest.mark.parametrize("side", ["claim", "template"])
async def test_repeated_volume_names_are_a_terminal_reason_and_no_sandbox(side: str) -> None:
    """Claim review note 16 through the reconciler, for a cold claim: repeated names in the
    claim (refused before already, under ``Allowed`` and ``Overrides``) or in the template."""
    h = Harness()
    twice = [vct("ws"), vct("ws")]
    spec: dict[str, Any] = {"volumeClaimTemplatesPolicy": "Overrides"}
    if side == "template":
        spec["volumeClaimTemplates"] = twice
    h.add(SANDBOX_TEMPLATES.plural, template(**spec))
    body = {"volumeClaimTemplates": twice} if side == "claim" else {}
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none", **body))
    assert await h.reconcile() is None, "terminal: no requeue"
    assert h.ready()["reason"] == REASON_VCT_ERROR
    assert h.owned_by(h.claim()) == []


def review_template(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "tpl", "namespace": "ns", "uid": "tpl-uid"},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "main"}]}}, **spec},
    }


def review_claim(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": {"name": "c", "namespace": "ns", "uid": "claim-uid"},
        "spec": {"sandboxTemplateRef": {"name": "tpl"}, **spec},
    }
