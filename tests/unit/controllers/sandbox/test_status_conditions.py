"""The Sandbox's Suspended and PodScheduled conditions and ``status.nodeName``, as upstream
v1.0.1 reports them (docs/design/sandbox.md, "The Suspended condition" and "The PodScheduled
condition"): the decision step (pure) and the one API read the reconciler adds for them.

Condition lists are compared whole (type, status, reason, message, observedGeneration,
lastTransitionTime, in order), because the order a watcher sees them in is part of the API.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from agentsandbox.api import keys
from agentsandbox.api.timefmt import format_rfc3339
from agentsandbox.controllers.sandbox.plan import plan, pod_to_confirm, with_pod_error
from agentsandbox.controllers.sandbox.status import compute_status, status_patch
from agentsandbox.controllers.sandbox.types import Phase
from agentsandbox.kube.errors import NotFound
from tests.unit.controllers.sandbox.test_act import POD, boom, rig, settled
from tests.unit.controllers.sandbox.test_plan import (
    HASH,
    NOW,
    cond,
    owner_ref,
    pod,
    running_pod,
    sandbox,
    service_obj,
    snap,
)

T = format_rfc3339(NOW)
EARLIER = "2026-05-21T09:00:00Z"
SELECTOR = f"{keys.LABEL_SANDBOX_NAME_HASH}={HASH}"


def c(type_: str, status: str, reason: str, message: str, gen: int = 1, at: str = T) -> Any:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": gen,
        "lastTransitionTime": at,
    }


def not_suspended(gen: int = 1, at: str = T) -> Any:
    return c("Suspended", "False", "NotSuspended", "Sandbox is not suspended", gen, at)


def scheduled(gen: int = 1, at: str = T) -> Any:
    return c("PodScheduled", "True", "PodScheduled", "", gen, at)


def ready_true(gen: int = 1, at: str = T) -> Any:
    return c("Ready", "True", "DependenciesReady", "Pod is Ready; Service Exists", gen, at)


def bound(p: dict[str, Any], node: str = "kwok-node-0", **cond_fields: str) -> dict[str, Any]:
    """``p`` bound to ``node``, with the PodScheduled condition the scheduler writes (status
    True, no reason) unless ``cond_fields`` say otherwise."""
    p["spec"]["nodeName"] = node
    condition = {"type": "PodScheduled", "status": "True", **cond_fields}
    p["status"].setdefault("conditions", []).insert(0, condition)
    return p


def status_of(p: Any) -> dict[str, Any]:
    assert p.status is not None
    status: dict[str, Any] = p.status
    return status


# ---------------------------------------------------------------------------------- running
def test_a_ready_sandbox_reports_not_suspended_pod_scheduled_and_ready_in_upstreams_order() -> None:
    p = plan(snap(sandbox(service=True), bound(running_pod()), service=service_obj()))
    status = status_of(p)
    assert status["conditions"] == [not_suspended(), scheduled(), ready_true()]
    assert status["nodeName"] == "kwok-node-0"
    assert status["podIPs"] == ["10.0.0.7"]
    assert status["selector"] == SELECTOR


def test_every_condition_carries_the_generation_it_was_computed_for() -> None:
    p = plan(snap(sandbox(service=True, generation=7), bound(running_pod()), service=service_obj()))
    assert status_of(p)["conditions"] == [not_suspended(7), scheduled(7), ready_true(7)]


def test_a_pod_not_yet_bound_has_pod_scheduled_unknown_and_no_node_name() -> None:
    p = plan(snap(sandbox(), pod(phase="Pending")))
    assert cond(p, "PodScheduled") == c(
        "PodScheduled",
        "Unknown",
        "PodSchedulingUnknown",
        "Pod has not reported a PodScheduled condition yet",
    )
    assert "nodeName" not in status_of(p)


def test_a_new_pod_just_created_has_pod_scheduled_unknown() -> None:
    p = plan(snap(sandbox()))
    assert [x["type"] for x in status_of(p)["conditions"]] == ["Suspended", "PodScheduled", "Ready"]
    scheduled_cond = cond(p, "PodScheduled")
    assert scheduled_cond is not None and scheduled_cond["status"] == "Unknown"


def test_an_unschedulable_pod_is_mirrored_verbatim() -> None:
    message = "0/3 nodes are available: 3 Insufficient cpu."
    unschedulable = bound(
        pod(phase="Pending"), status="False", reason="Unschedulable", message=message
    )
    unschedulable["spec"].pop("nodeName")
    p = plan(snap(sandbox(), unschedulable))
    assert cond(p, "PodScheduled") == c("PodScheduled", "False", "Unschedulable", message)
    assert "nodeName" not in status_of(p)


def test_a_pod_scheduled_condition_without_a_reason_gets_one() -> None:
    p = plan(snap(sandbox(), bound(pod(phase="Pending"), status="False")))
    assert cond(p, "PodScheduled") == c("PodScheduled", "False", "PodSchedulingUnknown", "")
    p = plan(snap(sandbox(), bound(pod(phase="Pending"), reason="Bound", message="m")))
    assert cond(p, "PodScheduled") == c("PodScheduled", "True", "Bound", "m")


def test_a_pod_step_that_failed_without_a_pod_makes_pod_scheduled_unknown() -> None:
    # an unowned pod without the opt-in label: adoption refused, no pod of ours
    p = plan(snap(sandbox(), running_pod(owner=None)))
    assert cond(p, "PodScheduled") == c(
        "PodScheduled",
        "Unknown",
        "PodSchedulingUnknown",
        "Pod state is unknown. Pod scheduling cannot be determined",
    )
    assert cond(p, "Suspended") == not_suspended()
    assert "nodeName" not in status_of(p) and "podIPs" not in status_of(p)


def test_a_restarted_pod_keeps_suspended_false_and_its_transition_time() -> None:
    before = {"conditions": [not_suspended(at=EARLIER), scheduled(at=EARLIER)]}
    p = plan(snap(sandbox(status=before)))  # the pod was deleted: a new one is created
    assert cond(p, "Suspended") == not_suspended(at=EARLIER)
    assert cond(p, "PodScheduled") == c(
        "PodScheduled",
        "Unknown",
        "PodSchedulingUnknown",
        "Pod has not reported a PodScheduled condition yet",
    )


# ---------------------------------------------------------------------------------- suspending
def _running_status() -> dict[str, Any]:
    sb = sandbox(service=True)
    return status_of(plan(snap(sb, bound(running_pod()), service=service_obj())))


def test_suspending_with_our_pod_reports_pod_terminating_and_keeps_its_node_and_ips() -> None:
    sb = sandbox(replicas=0, service=True, generation=2, status=_running_status())
    p = plan(snap(sb, bound(running_pod()), service=service_obj()))
    status = status_of(p)
    assert status["conditions"] == [
        c("Suspended", "False", "PodTerminating", "Pod is terminating. Sandbox is suspending", 2),
        scheduled(2),
        c("Ready", "False", "SandboxSuspended", "Sandbox is suspending", 2),
    ]
    assert status["nodeName"] == "kwok-node-0" and status["podIPs"] == ["10.0.0.7"]
    assert "replicas" not in status


def test_suspending_keeps_the_suspended_transition_time_from_false_to_false() -> None:
    before = _running_status()
    for x in before["conditions"]:
        x["lastTransitionTime"] = EARLIER
    sb = sandbox(replicas=0, service=True, generation=2, status=before)
    suspending = status_of(plan(snap(sb, bound(running_pod(terminating=True)))))
    s = cond(suspending, "Suspended")
    assert s is not None and s["lastTransitionTime"] == EARLIER  # False -> False
    gone = sandbox(replicas=0, service=True, generation=2, status=suspending)
    s = cond(plan(snap(gone)), "Suspended")
    assert s is not None and (s["status"], s["lastTransitionTime"]) == ("True", T)


def test_suspending_beside_a_pod_that_is_not_ours_reports_pod_not_owned() -> None:
    for owner in (None, owner_ref("rs-uid", "web", "ReplicaSet")):
        p = plan(snap(sandbox(replicas=0, service=True), running_pod(owner=owner)))
        status = status_of(p)
        assert status["conditions"] == [
            c(
                "Suspended",
                "False",
                "PodNotOwned",
                "Refused to delete pod because it is not owned by this sandbox",
            ),
            c("Ready", "False", "SandboxSuspended", "Sandbox is suspending"),
        ]
        assert status["selector"] == SELECTOR  # a pod holds the name
        assert "nodeName" not in status and "podIPs" not in status  # not ours to report


def test_a_failed_pod_lookup_makes_suspended_unknown_and_is_an_error() -> None:
    s = with_pod_error(snap(sandbox(replicas=0)), "pod get failed: etcdserver: request timed out")
    p = plan(s)
    assert status_of(p)["conditions"] == [
        c(
            "Suspended",
            "Unknown",
            "PodStateUnknown",
            "Pod state is unknown. Sandbox suspension cannot be confirmed",
        ),
        c(
            "PodScheduled",
            "Unknown",
            "PodSchedulingUnknown",
            "Pod state is unknown. Pod scheduling cannot be determined",
        ),
        c(
            "Ready",
            "False",
            "ReconcilerError",
            "Error seen: pod get failed: etcdserver: request timed out",
        ),
    ]
    assert [e.reason for e in p.events] == ["ReconcilerError"]


def test_a_failed_suspend_delete_still_reports_the_pod_as_terminating() -> None:
    status = compute_status(
        snap(sandbox(replicas=0), running_pod()), None, None, ["failed to delete pod: x"], NOW
    )
    s = cond(status, "Suspended")
    assert s is not None and s["reason"] == "PodTerminating"


# ---------------------------------------------------------------------------------- suspended
def test_suspended_once_the_pod_is_gone_clears_node_name_and_pod_scheduled() -> None:
    suspending = plan(snap(sandbox(replicas=0, status=_running_status()), bound(running_pod())))
    old = status_of(suspending)
    p = plan(snap(sandbox(replicas=0, status=old)))
    status = status_of(p)
    assert status["conditions"] == [
        c("Suspended", "True", "PodTerminated", "Pod has been terminated. Sandbox is suspended"),
        c("Ready", "False", "SandboxSuspended", "Sandbox is suspended"),
    ]
    patch = status_patch(old, status)
    assert patch is not None
    assert patch["status"]["nodeName"] is None and patch["status"]["podIPs"] is None


def test_a_suspended_sandbox_with_a_finished_pod_of_ours_reports_finished_until_it_goes() -> None:
    p = plan(snap(sandbox(replicas=0), pod(phase="Succeeded", terminating=True)))
    assert [x["type"] for x in status_of(p)["conditions"]] == [
        "Suspended",
        "Finished",
        "PodScheduled",
        "Ready",
    ]


def test_expiry_drops_pod_scheduled_and_keeps_suspended() -> None:
    running = _running_status()
    sb = sandbox(service=True, generation=2, shutdown=NOW - timedelta(seconds=1), status=running)
    marked = plan(snap(sb, bound(running_pod()), service=service_obj()))
    assert marked.phase is Phase.MARK_EXPIRED
    assert [x["type"] for x in status_of(marked)["conditions"]] == ["Suspended", "Ready"]
    sb["status"] = status_of(marked)
    retained = plan(snap(sb))
    assert status_of(retained) == {
        "conditions": [
            not_suspended(),
            c("Ready", "False", "SandboxExpired", "Sandbox has expired", 2),
        ]
    }


# ---------------------------------------------------------------------------------- migration
def test_a_status_written_before_these_conditions_gets_them_on_the_next_pass() -> None:
    """A Sandbox whose status an older controller wrote (Ready only, no nodeName) is brought up
    to date by its next pass: one status write; Ready keeps its place and transition time."""
    old_ready = {
        "type": "Ready",
        "status": "True",
        "reason": "DependenciesReady",
        "message": "Pod is Ready; Service Exists",
        "observedGeneration": 1,
        "lastTransitionTime": EARLIER,
    }
    old = {
        "replicas": 1,
        "selector": SELECTOR,
        "podIPs": ["10.0.0.7"],
        "service": "my-sandbox",
        "serviceFQDN": "my-sandbox.default.svc.cluster.local",
        "conditions": [old_ready],
    }
    sb = sandbox(service=True, status=old)
    p = plan(snap(sb, bound(running_pod()), service=service_obj()))
    assert status_patch(old, status_of(p)) == {
        "status": {
            "nodeName": "kwok-node-0",
            "conditions": [old_ready, not_suspended(), scheduled()],
        }
    }


def test_an_old_suspended_condition_is_rewritten_in_the_new_terms() -> None:
    lingering = c(
        "Suspended",
        "True",
        "PodTerminated",
        "Pod has been terminated. Sandbox is not operational.",
        at=EARLIER,
    )
    running = sandbox(status={"conditions": [lingering]})
    assert cond(plan(snap(running, running_pod())), "Suspended") == not_suspended()
    suspended = sandbox(replicas=0, status={"conditions": [lingering]})
    assert cond(plan(snap(suspended)), "Suspended") == c(
        "Suspended",
        "True",
        "PodTerminated",
        "Pod has been terminated. Sandbox is suspended",
        at=EARLIER,  # still True: the transition time stays
    )


def test_a_migrated_status_is_stable() -> None:
    sb = sandbox(service=True)
    first = status_of(plan(snap(sb, bound(running_pod()), service=service_obj())))
    again = plan(
        snap(sandbox(service=True, status=first), bound(running_pod()), service=service_obj())
    )
    assert status_patch(first, status_of(again)) is None


# ---------------------------------------------------------------------------------- the lookup
def test_the_pod_name_is_looked_up_only_before_a_status_says_the_pod_is_gone() -> None:
    suspended = sandbox(replicas=0)
    s = snap(suspended)
    assert pod_to_confirm(s, plan(s)) == "my-sandbox"
    # written already: a pass that writes nothing looks nothing up
    settled_sb = sandbox(replicas=0, status=status_of(plan(s)))
    s = snap(settled_sb)
    assert pod_to_confirm(s, plan(s)) is None
    # a pod in the cache, a running Sandbox, a lookup already made: nothing to confirm
    for s in (
        snap(suspended, running_pod()),
        snap(sandbox()),
        with_pod_error(snap(suspended), "pod get failed: x"),
    ):
        assert pod_to_confirm(s, plan(s)) is None


async def test_a_pod_the_caches_do_not_show_is_found_and_reported_not_owned() -> None:
    unlabelled = running_pod(owner=None, labels={})
    r = rig(sandbox(replicas=0, service=True), service=service_obj())
    r.client.objects[(POD, "my-sandbox")] = unlabelled
    await r.run()
    assert ("get", POD, "my-sandbox") in r.client.sent()
    assert ("delete", POD, "my-sandbox") not in r.client.sent()
    [status] = r.client.status_patches()
    assert status["conditions"][0]["reason"] == "PodNotOwned"
    assert status["selector"] == SELECTOR


async def test_a_pod_confirmed_gone_makes_suspended_true() -> None:
    r = rig(sandbox(replicas=0))
    await r.run()
    assert r.client.sent()[0] == ("get", POD, "my-sandbox")
    [status] = r.client.status_patches()
    assert status["conditions"][0]["reason"] == "PodTerminated"


async def test_a_failed_lookup_is_reported_and_retried() -> None:
    r = rig(sandbox(replicas=0))
    r.client.fail[("get", POD, "my-sandbox")] = boom()
    err = await r.fails()
    assert err.errors == ["pod get failed: etcdserver: request timed out"]
    [status] = r.client.status_patches()
    assert status["conditions"][0]["reason"] == "PodStateUnknown"


async def test_a_settled_suspended_sandbox_reads_nothing() -> None:
    sb = settled(sandbox(replicas=0))
    r = rig(sb)
    r.client.fail[("get", POD, "my-sandbox")] = NotFound(message="must not be asked")
    assert await r.run() is None
    assert r.client.sent() == []  # no lookup, no status write
