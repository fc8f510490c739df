"""Claims stored by upstream's conversion webhook (docs/migrating.md, "Claims stored by upstream's
conversion webhook (shadow pools)"; docs/design/claim.md, "Which template and pools").

Upstream serves v1alpha1 claims through a conversion webhook to its v1beta1 storage. A v1alpha1
claim with ``warmpool`` ``default``/``none`` is stored with ``warmPoolRef.name:
shadow-pool-<template>`` (no such pool exists) and the whole v1alpha1 object, JSON, in the
annotation ``api.agents.x-k8s.io/v1alpha1-sandboxclaim-state``. After a takeover we read those
objects as stored (conversion ``None``): the claim is served as the v1alpha1 claim it was
(template + policy), never ``WarmPoolNotFound``; a claim already bound stays bound.
"""

from __future__ import annotations

import json
from typing import Any

from agentsandbox.api import keys
from agentsandbox.api.kinds import SANDBOX_CLAIM
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.controllers.claim.controller import MISSING_RECHECK
from agentsandbox.controllers.claim.handlers import claim_pool_index, claim_template_index
from agentsandbox.controllers.claim.plan import (
    POLICY_DEFAULT,
    POLICY_NONE,
    Source,
    claim_source,
    migrated_v1alpha1_spec,
)
from agentsandbox.kube.reconcile import Result
from tests.unit.controllers.claim.test_controller import (
    NS,
    Harness,
    claim_v1beta1,
    setup_pool,
    template,
)

STATE = keys.ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE


def upstream_state(name: str, tpl: str, warmpool: str | None = "default") -> str:
    """What upstream's ``ConvertTo`` writes: ``json.Marshal`` of the v1alpha1 SandboxClaim
    (TypeMeta, metadata without the state annotation, spec, status), compact, Go field order."""
    spec: dict[str, Any] = {"sandboxTemplateRef": {"name": tpl}}
    if warmpool is not None:
        spec["warmpool"] = warmpool
    spec["additionalPodMetadata"] = {}
    obj = {
        "kind": "SandboxClaim",
        "apiVersion": f"{SANDBOX_CLAIM.group}/v1alpha1",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": "3f0c5e9a-0000-4000-8000-000000000001",
            "generation": 1,
            "creationTimestamp": "2026-11-30T10:00:00Z",
        },
        "spec": spec,
        "status": {"sandbox": {}},
    }
    return json.dumps(obj, separators=(",", ":"))


def shadow_claim(
    name: str = "claim",
    tpl: str = "tpl",
    warmpool: str | None = "default",
    *,
    state: str | None = "upstream",
    ref: str | None = None,
) -> dict[str, Any]:
    """A claim as upstream's conversion stored it (read back through our v1beta1)."""
    claim = claim_v1beta1(name, pool_name=ref or f"shadow-pool-{tpl}")
    if state == "upstream":
        state = upstream_state(name, tpl, warmpool)
    if state is not None:
        claim["metadata"]["annotations"] = {STATE: state}
    return claim


# ------------------------------------------------------------------------------------ the source
def test_shadow_pool_claim_is_read_as_its_v1alpha1_template_and_policy() -> None:
    assert claim_source(shadow_claim()) == Source(
        template="tpl", pool=None, policy=POLICY_DEFAULT, by_pool_ref=False
    )
    assert claim_source(shadow_claim(warmpool="none")) == Source(
        template="tpl", pool=None, policy=POLICY_NONE, by_pool_ref=False
    )
    # upstream's v1alpha1 default is "default"; absent or "" mean the same
    for policy in (None, ""):
        assert claim_source(shadow_claim(warmpool=policy)).policy == POLICY_DEFAULT


def test_a_bare_v1alpha1_spec_in_the_annotation_is_accepted_too() -> None:
    bare = json.dumps({"sandboxTemplateRef": {"name": "tpl"}, "warmpool": "none"})
    assert migrated_v1alpha1_spec(shadow_claim(state=bare)) == {
        "sandboxTemplateRef": {"name": "tpl"},
        "warmpool": "none",
    }
    assert claim_source(shadow_claim(state=bare)).policy == POLICY_NONE


def test_without_a_usable_annotation_the_reference_is_taken_as_written() -> None:
    """No annotation, garbage, a JSON that is no claim, or a reference that is no longer the
    shadow pool of the annotated template (edited in v1beta1 since): the pool reference stands,
    exactly as for any 1.0.x claim (a real pool may be named ``shadow-pool-…``)."""
    as_written = Source(template=None, pool="shadow-pool-tpl", policy="pool", by_pool_ref=True)
    for state in (None, "", "{", "[]", "null", '{"spec": {"warmpool": "default"}}'):
        assert claim_source(shadow_claim(state=state)) == as_written, state
    other = shadow_claim(state=upstream_state("claim", "other-tpl"))
    assert claim_source(other) == as_written
    bad_policy = json.dumps({"spec": {"sandboxTemplateRef": {"name": "tpl"}, "warmpool": 3}})
    assert claim_source(shadow_claim(state=bad_policy)) == as_written


def test_a_converted_claim_naming_a_real_pool_keeps_its_pool_reference() -> None:
    """A v1alpha1 claim with a specific ``warmpool`` is stored with that pool as
    ``warmPoolRef``; the annotation is there too but changes nothing."""
    claim = shadow_claim(ref="python-pool", state=upstream_state("claim", "tpl", "python-pool"))
    assert claim_source(claim) == Source(
        template=None, pool="python-pool", policy="pool", by_pool_ref=True
    )


def test_shadow_claims_are_indexed_by_template_not_by_the_shadow_pool() -> None:
    claim = shadow_claim()
    claim["metadata"]["namespace"] = NS
    assert claim_template_index(claim) == [f"{NS}/tpl"]
    assert claim_pool_index(claim) == []
    h = Harness()
    h.add(SANDBOX_CLAIMS.plural, claim)
    assert [r.name for r in h.r.claims_for_template(template("tpl"))] == ["claim"]


# ------------------------------------------------------------------------------------ reconcile
async def test_unbound_shadow_claim_adopts_warm_from_a_pool_of_its_template() -> None:
    h = Harness()
    _, _, sbs = setup_pool(h, name="python-pool")
    h.add(SANDBOX_CLAIMS.plural, shadow_claim())
    await h.reconcile()
    assert ("get", SANDBOX_WARM_POOLS.plural, "shadow-pool-tpl") not in h.api.calls
    assert h.claim()["status"]["sandbox"]["name"] in {s["metadata"]["name"] for s in sbs}
    assert h.ready()["status"] == "True"
    # the claim itself is not rewritten: its reference and annotation stay as stored
    assert h.claim()["spec"]["warmPoolRef"] == {"name": "shadow-pool-tpl"}
    assert STATE in h.claim()["metadata"]["annotations"]


async def test_unbound_shadow_claim_with_policy_none_goes_cold() -> None:
    h = Harness()
    _, _, sbs = setup_pool(h)
    h.add(SANDBOX_CLAIMS.plural, shadow_claim(warmpool="none"))
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == "claim"
    assert h.ready()["reason"] == "SandboxNotReady"
    assert all(
        h.sandbox(s["metadata"]["name"])["metadata"]["ownerReferences"][0]["kind"]
        == "SandboxWarmPool"
        for s in sbs
    )


async def test_shadow_claim_without_pools_goes_cold_and_never_reports_warm_pool_not_found() -> None:
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template())
    h.add(SANDBOX_CLAIMS.plural, shadow_claim())
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == "claim"
    assert "WarmPoolNotFound" not in json.dumps(h.claim()["status"])


async def test_shadow_claim_whose_template_is_missing_is_template_not_found() -> None:
    h = Harness()
    h.add(SANDBOX_CLAIMS.plural, shadow_claim())
    assert await h.reconcile() == Result(requeue_after=MISSING_RECHECK)
    ready = h.ready()
    assert (ready["reason"], ready["message"]) == (
        "TemplateNotFound",
        'SandboxTemplate "tpl" not found',
    )


async def test_bound_migrated_claim_stays_bound_before_any_pool_or_template_lookup() -> None:
    """A claim upstream bound (the sandbox it adopted is controlled by the claim's UID, the claim's
    status names it) needs neither its template nor any pool: the lookup of the sandbox it
    controls comes first. Proven with the template and every pool gone and even a claim whose
    annotation was lost (its ``shadow-pool-…`` reference alone would be WarmPoolNotFound)."""
    for state in ("upstream", None):
        h = Harness()
        _, _, sbs = setup_pool(h)
        claim = h.add(SANDBOX_CLAIMS.plural, shadow_claim(state=state))
        sb = sbs[0]
        name = sb["metadata"]["name"]
        # what upstream's adoption left: the claim controls it, the pool labels are gone
        stored = h.sandbox(name)
        stored["metadata"]["ownerReferences"] = [
            {
                "apiVersion": SANDBOX_CLAIM.api_version,
                "kind": "SandboxClaim",
                "name": "claim",
                "uid": claim["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        for key in (keys.LABEL_WARM_POOL_SANDBOX, keys.LABEL_SANDBOX_POD_TEMPLATE_HASH):
            stored["metadata"]["labels"].pop(key)
        stored["metadata"]["labels"][keys.LABEL_CLAIM_UID] = claim["metadata"]["uid"]
        h.api.seed(SANDBOXES.plural, stored)
        bound = h.claim()
        bound["status"] = {"sandbox": {"name": name}}
        h.api.seed(SANDBOX_CLAIMS.plural, bound)
        del h.api.objects[(SANDBOX_TEMPLATES.plural, NS, "tpl")]
        del h.api.objects[(SANDBOX_WARM_POOLS.plural, NS, "pool")]
        h.sync()
        h.r.observability_annotations = False
        h.api.calls.clear()
        await h.reconcile()
        assert not [c for c in h.api.calls if c[1] in ("sandboxtemplates", "sandboxwarmpools")]
        assert [w for w in h.api.writes() if w[1] == SANDBOXES.plural] == []
        assert h.claim()["status"]["sandbox"]["name"] == name
        assert h.ready()["status"] == "True", state
        assert len(h.owned_by(h.claim())) == 1
