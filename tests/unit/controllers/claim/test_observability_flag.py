"""The first-Ready bookkeeping with and without observability annotations
(``--disable-claim-observability-annotations``): what is persisted, what is counted, and what
the controller keeps in memory meanwhile."""

from __future__ import annotations

from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.kinds import SANDBOX_CLAIM
from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES, SANDBOXES
from agentsandbox.kube.metrics import REGISTRY
from tests.unit.controllers.claim.test_controller import (
    NS,
    Harness,
    claim_v1alpha1,
    claim_v1beta1,
    pool,
    pool_sandbox,
    setup_pool,
    template,
)

CONTROLLER_STARTUP = "agent_sandbox_claim_controller_startup_latency_ms_count"


def startup_samples(template: str = "tpl") -> float:
    return (
        REGISTRY.get_sample_value(
            CONTROLLER_STARTUP, {"launch_type": "warm", "sandbox_template": template}
        )
        or 0.0
    )


def set_sandbox_ready(h: Harness, name: str, ready: bool, rv: str) -> None:
    """The Sandbox controller flips the sandbox's Ready condition; the caches see it."""
    stored: dict[str, Any] = h.api.objects[(SANDBOXES.plural, NS, name)]
    stored["status"]["conditions"][0].update(
        status="True" if ready else "False",
        reason="DependenciesReady" if ready else "DependenciesNotReady",
        message="Pod is Ready" if ready else "Pod is not Ready",
    )
    stored["metadata"]["resourceVersion"] = rv
    h.sync()


async def test_a_ready_flap_without_observability_annotations_is_counted_once() -> None:
    """claim review #9: with the annotations off, the guard annotations (claim-first-ready-at,
    creation-latency-recorded) are still persisted at the first Ready, so a Ready flap
    (True -> False -> True) records the startup latency once; only
    controller-first-observed-at is left unwritten."""
    h = Harness()
    h.r.observability_annotations = False
    setup_pool(h, members=1)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1("flap"))
    before = startup_samples()
    await h.reconcile("flap")
    h.sync()
    assert h.ready("flap")["status"] == "True"
    name = h.claim("flap")["status"]["sandbox"]["name"]
    set_sandbox_ready(h, name, False, "9001")
    await h.reconcile("flap")
    h.sync()
    assert h.ready("flap")["status"] == "False"
    set_sandbox_ready(h, name, True, "9002")
    await h.reconcile("flap")
    h.sync()
    assert h.ready("flap")["status"] == "True"
    assert startup_samples() - before == 1, "a Ready flap counted the claim's startup again"
    annotations = h.claim("flap")["metadata"].get("annotations") or {}
    assert annotations.get(keys.ANNOTATION_CREATION_LATENCY_RECORDED) == "true"
    assert annotations.get(keys.ANNOTATION_CLAIM_FIRST_READY_AT)
    assert keys.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT not in annotations


# ------------------------------------------------------------------------------------ memory
def ready_bound_claim(h: Harness, name: str, *, guarded: bool = False) -> None:
    """A claim already Ready on a Ready sandbox it controls, as a restarted process finds it."""
    annotations = {keys.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT: "2027-01-15T07:59:00Z"}
    if guarded:
        annotations[keys.ANNOTATION_CLAIM_FIRST_READY_AT] = "2027-01-15T07:59:30Z"
    body = claim_v1alpha1(name, warmpool="none")
    body["metadata"]["annotations"] = annotations
    body["status"] = {
        "sandbox": {"name": name},
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "DependenciesReady",
                "message": "Pod is Ready",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "observedGeneration": 1,
            }
        ],
    }
    c = h.add(SANDBOX_CLAIMS.plural, body)
    sb = pool_sandbox(pool(), template(), owner="orphan")
    sb["metadata"]["name"] = name
    sb["metadata"]["ownerReferences"] = [
        {
            "apiVersion": SANDBOX_CLAIM.api_version,
            "kind": "SandboxClaim",
            "name": name,
            "uid": c["metadata"]["uid"],
            "controller": True,
        }
    ]
    h.add(SANDBOXES.plural, sb)


@pytest.mark.parametrize("annotations_on", [True, False])
async def test_no_first_observed_time_is_kept_for_claims_already_ready(
    annotations_on: bool,
) -> None:
    """claim review note 15 (upstream TestSandboxClaimReconcileCleanup, "already-Ready claims
    are cleaned up after restart simulation" and "post-Ready ... cleaned on next reconcile"):
    the in-memory first-observed times hold only claims whose first Ready is still to come, so
    a restart over many Ready claims, and later passes of them, keep nothing."""
    h = Harness()
    h.r.observability_annotations = annotations_on
    h.add(SANDBOX_TEMPLATES.plural, template())
    names = [f"ready-{i}" for i in range(10)]
    for i, name in enumerate(names):
        ready_bound_claim(h, name, guarded=i % 2 == 0)
    for _ in range(2):
        for name in names:
            await h.reconcile(name)
        h.sync()
    assert all(h.ready(n)["status"] == "True" for n in names)
    assert h.r._observed == {}, "first-observed times kept for claims already Ready"


@pytest.mark.parametrize("annotations_on", [True, False])
async def test_a_first_observed_time_is_kept_until_the_first_ready_only(
    annotations_on: bool,
) -> None:
    """claim review note 15 (upstream "new claim transitioning to Ready cleans its entry"): a
    claim waiting for its first Ready is remembered (with the annotations off, memory is the
    only record of when it was first seen), and forgotten at its first Ready; a claim that is
    gone is forgotten too."""
    h = Harness()
    h.r.observability_annotations = annotations_on
    _, _, (member,) = setup_pool(h, members=1, ready=False)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1("new"))
    await h.reconcile("new")
    h.sync()
    assert h.ready("new")["status"] == "False"
    if not annotations_on:
        assert set(h.r._observed) == {f"{NS}/new"}, "the only record of the start is missing"
    set_sandbox_ready(h, member["metadata"]["name"], True, "9100")
    await h.reconcile("new")
    h.sync()
    assert h.ready("new")["status"] == "True"
    assert h.r._observed == {}, "kept after the first Ready"
    await h.reconcile("new")
    assert h.r._observed == {}, "made again by a pass after the first Ready"
    h.r._observed[f"{NS}/gone"] = ("uid-gone", 0.0)
    await h.reconcile("gone")
    assert h.r._observed == {}, "kept for a claim that is gone"
