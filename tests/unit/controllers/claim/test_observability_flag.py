"""The first-Ready bookkeeping with and without observability annotations
(``--disable-claim-observability-annotations``): what is persisted, what is counted, and what
the controller keeps in memory meanwhile."""

from __future__ import annotations

from typing import Any

from agentsandbox.api import keys
from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOXES
from agentsandbox.kube.metrics import REGISTRY
from tests.unit.controllers.claim.test_controller import (
    NS,
    Harness,
    claim_v1beta1,
    setup_pool,
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
