"""The autoscaler's circuit breaker as the controller reports it (autoscaler review finding 14):
a pool member not Ready for far longer than a refill, or the pool's Ready condition saying it
cannot progress, sets ScalingActive=False with a reason, one Warning Event per trip (not per
pass), and a member turning Ready resets it — through the fake /scale API of test_act.py."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from agentsandbox.kube.reconcile import Request
from tests.unit.controllers.autoscaler.test_act import (
    NS,
    POOL_API,
    FakeScaleApi,
    autoscaler_obj,
    refresh,
    setup_reconciler,
)
from tests.unit.controllers.autoscaler.test_reconcile_failures import condition


def stamp(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pool_obj(reason: str = "Scaling", ready: str = "False") -> dict[str, Any]:
    return {
        "apiVersion": POOL_API,
        "kind": "SandboxWarmPool",
        "metadata": {"name": "pool", "namespace": NS, "uid": "pool-uid", "generation": 1},
        "spec": {"replicas": 3, "sandboxTemplateRef": {"name": "tpl"}},
        "status": {"conditions": [{"type": "Ready", "status": ready, "reason": reason}]},
    }


def member(name: str, created: float, ready: bool) -> dict[str, Any]:
    return {
        "apiVersion": "agents.x-k8s.io/v1alpha1",
        "kind": "Sandbox",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "creationTimestamp": stamp(created),
            "ownerReferences": [
                {
                    "apiVersion": POOL_API,
                    "kind": "SandboxWarmPool",
                    "name": "pool",
                    "uid": "pool-uid",
                    "controller": True,
                }
            ],
        },
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "DependenciesReady" if ready else "DependenciesNotReady",
                }
            ]
        },
    }


def warnings(events: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    return [e for e in events if e[0] == "Warning"]


async def test_a_member_never_ready_stops_scaling_with_one_warning_until_one_is_ready() -> None:
    api = FakeScaleApi(replicas=3)
    rec, informer, recorder, clock = setup_reconciler(api, autoscaler_obj())
    rec.pools.put(pool_obj())  # type: ignore[attr-defined]
    stuck = member("stuck", clock.now - 900.0, ready=False)
    rec.watches.sandboxes.put(stuck)  # type: ignore[attr-defined]
    for _ in range(3):  # three passes: one trip, one Warning
        await rec.reconcile(Request(NS, "auto"))
        refresh(informer, api)
        clock.now += 5.0
    status, reason, message = condition(api, "ScalingActive")
    assert (status, reason) == ("False", "MembersNeverReady")
    assert "not Ready" in message
    assert condition(api, "Ready")[:2] == ("False", "MembersNeverReady")
    assert api.pool["spec"]["replicas"] <= 3  # never grown while tripped
    assert [e[:2] for e in warnings(recorder.events)] == [("Warning", "MembersNeverReady")]
    # the member turns Ready: the breaker resets, scaling is active again
    now_ready = copy.deepcopy(stuck)
    now_ready["status"]["conditions"][0].update(status="True", reason="DependenciesReady")
    rec.watches.sandboxes.put(now_ready)  # type: ignore[attr-defined]
    await rec.reconcile(Request(NS, "auto"))
    assert condition(api, "ScalingActive")[0] == "True"
    assert len(warnings(recorder.events)) == 1


async def test_a_pool_that_cannot_progress_stops_scaling_with_one_warning() -> None:
    api = FakeScaleApi(replicas=3)
    rec, informer, recorder, clock = setup_reconciler(api, autoscaler_obj())
    rec.pools.put(pool_obj("SandboxCreateFailed"))  # type: ignore[attr-defined]
    for _ in range(3):
        await rec.reconcile(Request(NS, "auto"))
        refresh(informer, api)
        clock.now += 5.0
    status, reason, message = condition(api, "ScalingActive")
    assert (status, reason) == ("False", "PoolNotReady")
    assert "SandboxCreateFailed" in message
    assert [e[:2] for e in warnings(recorder.events)] == [("Warning", "PoolNotReady")]


async def test_a_stuck_member_replaced_keeps_one_warning_and_scaling_inactive() -> None:
    """The pool deletes a stuck member at its readiness deadline and creates the replacement in
    a later pass; the autoscaler may look in between, when no member is not Ready. That look
    reset the breaker: ScalingActive went True and a second Warning followed a limit later."""
    api = FakeScaleApi(replicas=3)
    rec, informer, recorder, clock = setup_reconciler(api, autoscaler_obj())
    rec.pools.put(pool_obj())  # type: ignore[attr-defined]
    stuck = member("stuck", clock.now - 900.0, ready=False)
    rec.watches.sandboxes.put(stuck)  # type: ignore[attr-defined]
    await rec.reconcile(Request(NS, "auto"))
    refresh(informer, api)
    assert condition(api, "ScalingActive")[:2] == ("False", "MembersNeverReady")
    rec.watches.sandboxes.remove(stuck)  # type: ignore[attr-defined]
    clock.now += 5.0
    await rec.reconcile(Request(NS, "auto"))  # no member not Ready, for a moment
    refresh(informer, api)
    assert condition(api, "ScalingActive")[:2] == ("False", "MembersNeverReady")
    rec.watches.sandboxes.put(member("stuck-2", clock.now, ready=False))  # type: ignore[attr-defined]
    for _ in range(60):  # five minutes: the replacement grows older than the limit too
        clock.now += 5.0
        await rec.reconcile(Request(NS, "auto"))
        refresh(informer, api)
        assert condition(api, "ScalingActive")[0] == "False"
        assert api.pool["spec"]["replicas"] <= 3
    assert [e[:2] for e in warnings(recorder.events)] == [("Warning", "MembersNeverReady")]
