"""Autoscaler review finding 16: several autoscaled pools on one template each count every claim
that names the template (``warmpool`` absent or ``default``), so each is sized for the whole
rate. The autoscaler reports it: condition ``SharedTemplate`` naming the other autoscaled pools
of its target's template; absent when no other autoscaled pool shares it."""

from __future__ import annotations

import copy
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


def pool_obj(name: str, template: str) -> dict[str, Any]:
    return {
        "apiVersion": POOL_API,
        "kind": "SandboxWarmPool",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": 1},
        "spec": {"replicas": 3, "sandboxTemplateRef": {"name": template}},
    }


def other_autoscaler(name: str, pool: str) -> dict[str, Any]:
    obj = copy.deepcopy(autoscaler_obj())
    obj["metadata"].update(name=name, uid=f"uid-{name}")
    obj["spec"]["scaleTargetRef"]["name"] = pool
    return obj


def shared(api: FakeScaleApi) -> dict[str, Any] | None:
    assert api.autoscaler is not None
    conditions = api.autoscaler["status"]["conditions"]
    return next((c for c in conditions if c["type"] == "SharedTemplate"), None)


async def test_other_autoscaled_pools_of_the_template_are_named_in_a_condition() -> None:
    api = FakeScaleApi(replicas=3)
    rec, informer, _, clock = setup_reconciler(api, autoscaler_obj())
    for name, template in (("pool", "tpl"), ("pool-b", "tpl"), ("pool-c", "tpl"), ("x", "other")):
        rec.pools.put(pool_obj(name, template))  # type: ignore[attr-defined]
    # pool-b and x are autoscaled; pool-c (same template) is not
    informer.put(other_autoscaler("auto-b", "pool-b"))
    informer.put(other_autoscaler("auto-x", "x"))
    await rec.reconcile(Request(NS, "auto"))
    cond = shared(api)
    assert cond is not None
    assert cond["status"] == "True"
    assert "pool-b" in cond["message"] and "tpl" in cond["message"]
    assert "pool-c" not in cond["message"] and "auto-x" not in cond["message"]
    # the other autoscaler goes: the condition goes too
    informer.remove(other_autoscaler("auto-b", "pool-b"))
    refresh(informer, api)
    clock.now += 5.0
    await rec.reconcile(Request(NS, "auto"))
    assert shared(api) is None


async def test_a_pool_alone_on_its_template_has_no_shared_template_condition() -> None:
    api = FakeScaleApi(replicas=3)
    rec, _, _, _ = setup_reconciler(api, autoscaler_obj())
    rec.pools.put(pool_obj("pool", "tpl"))  # type: ignore[attr-defined]
    rec.pools.put(pool_obj("pool-c", "tpl"))  # type: ignore[attr-defined]
    await rec.reconcile(Request(NS, "auto"))
    assert shared(api) is None
    assert api.autoscaler is not None
    assert {c["type"] for c in api.autoscaler["status"]["conditions"]} == {
        "Ready",
        "AbleToScale",
        "ScalingActive",
    }
