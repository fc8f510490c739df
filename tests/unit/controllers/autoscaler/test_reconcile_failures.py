"""The autoscaler's pass when its target cannot be read, is not a SandboxWarmPool, or refuses
the /scale write: what it reports (status conditions, Warning events) and what it leaves
unwritten, through the fake /scale API of tests/unit/controllers/autoscaler/test_act.py."""

from __future__ import annotations

from typing import Any

import pytest

from agentsandbox.controllers.autoscaler.act import ScaleWriter, TargetError
from agentsandbox.kube.errors import Forbidden, MethodNotAllowed, ServiceUnavailable
from agentsandbox.kube.reconcile import Request
from tests.unit.controllers.autoscaler.test_act import (
    NS,
    FakeScaleApi,
    autoscaler_obj,
    refresh,
    setup_reconciler,
)


def condition(api: FakeScaleApi, type_: str) -> tuple[str, str, str]:
    assert api.autoscaler is not None
    found = next(c for c in api.autoscaler["status"]["conditions"] if c["type"] == type_)
    return found["status"], found["reason"], found.get("message", "")


def scale_writes(api: FakeScaleApi) -> list[Any]:
    return [body for _, path, body in api.writes() if path.endswith("/scale")]


async def test_a_missing_target_is_reported_once_and_never_written() -> None:
    api = FakeScaleApi()
    spec = {"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool"}
    rec, informer, recorder, _ = setup_reconciler(
        api, autoscaler_obj(scaleTargetRef={**spec, "name": "nope"})
    )
    result = await rec.reconcile(Request(NS, "auto"))
    assert result is not None and result.requeue_after == 2.0
    assert condition(api, "AbleToScale")[:2] == ("False", "FailedGetScale")
    assert condition(api, "ScalingActive")[:2] == ("False", "FailedGetScale")
    assert scale_writes(api) == []
    assert [e[:2] for e in recorder.events] == [("Warning", "FailedGetScale")]
    refresh(informer, api)
    await rec.reconcile(Request(NS, "auto"))
    assert len(recorder.events) == 1  # the same failure is not announced again


async def test_a_target_of_another_kind_is_read_but_never_scaled() -> None:
    """Any kind with /scale can be read, but only a SandboxWarmPool has claim arrivals and
    refill times: ScalingActive=False/UnsupportedTarget, nothing written to the target."""
    api = FakeScaleApi()
    api.discovery["/apis/example.com/v1"] = {
        "resources": [
            {"name": "sandboxwarmpools", "kind": "Widget", "namespaced": True},
            {"name": "sandboxwarmpools/scale", "kind": "Scale"},
        ]
    }
    ref = {"apiVersion": "example.com/v1", "kind": "Widget", "name": "pool"}
    rec, _, recorder, _ = setup_reconciler(api, autoscaler_obj(scaleTargetRef=ref))
    await rec.reconcile(Request(NS, "auto"))
    status, reason, message = condition(api, "ScalingActive")
    assert (status, reason) == ("False", "UnsupportedTarget")
    assert "only SandboxWarmPool targets" in message
    # autoscaler review #17: it cannot scale this target, and says so
    assert condition(api, "AbleToScale")[:2] == ("False", "UnsupportedTarget")
    assert condition(api, "Ready")[:2] == ("False", "UnsupportedTarget")
    assert scale_writes(api) == [] and recorder.events == []
    assert api.autoscaler is not None and api.autoscaler["status"]["currentReplicas"] == 2


DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}
POOL = {"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool"}


@pytest.mark.parametrize(
    ("ref", "error"),
    [
        (  # a target of another kind: our RBAC covers only sandboxwarmpools/scale
            DEPLOYMENT,
            Forbidden(
                403,
                "Forbidden",
                'deployments.apps "web" is forbidden: User "system:serviceaccount:x:y" cannot '
                'get resource "deployments/scale" in API group "apps" in the namespace "ns"',
            ),
        ),
        (  # a pool, with the RBAC for /scale missing
            {**POOL, "name": "pool"},
            Forbidden(403, "Forbidden", 'sandboxwarmpools "pool" is forbidden: cannot get'),
        ),
        ({**POOL, "name": "pool"}, MethodNotAllowed(405, "MethodNotAllowed", "not allowed")),
    ],
)
async def test_a_refused_scale_read_is_reported_once_not_retried_silently(
    ref: dict[str, str], error: Exception
) -> None:
    """Autoscaler review #17: a refusal to read the target's /scale (403, or any other non-404
    client error) is reported — AbleToScale=False/FailedGetScale naming the target and the
    error, one Warning Event per transition — and looked at again every sync period, instead
    of an exception out of the pass (backoff retries, no status, no Event)."""
    api = FakeScaleApi()
    api.discovery["/apis/apps/v1"] = {
        "resources": [
            {"name": "deployments", "kind": "Deployment", "namespaced": True},
            {"name": "deployments/scale", "kind": "Scale"},
        ]
    }
    refused = True
    original = api.get

    async def get(resource: Any, name: str, *a: Any, **kw: Any) -> Any:
        if refused and kw.get("subresource") == "scale":
            api.calls.append(("get", f"{resource.plural}/{name}/scale", None))
            raise error
        return await original(resource, name, *a, **kw)

    api.get = get  # type: ignore[method-assign]
    rec, informer, recorder, clock = setup_reconciler(api, autoscaler_obj(scaleTargetRef=ref))
    result = await rec.reconcile(Request(NS, "auto"))
    assert result is not None and result.requeue_after == 2.0
    status, reason, message = condition(api, "AbleToScale")
    assert (status, reason) == ("False", "FailedGetScale")
    assert f"{ref['kind']} {ref['name']!r}" in message and str(error) in message
    assert condition(api, "Ready")[:2] == ("False", "FailedGetScale")
    assert [e[:2] for e in recorder.events] == [("Warning", "FailedGetScale")]
    assert str(error) in recorder.events[0][2]
    for _ in range(2):  # the same refusal: no second Event
        refresh(informer, api)
        clock.now += 2
        await rec.reconcile(Request(NS, "auto"))
    assert len(recorder.events) == 1 and scale_writes(api) == []


async def test_a_transient_error_reading_the_scale_is_still_retried_with_backoff() -> None:
    api = FakeScaleApi()

    async def unavailable(*_: Any, **__: Any) -> Any:
        raise ServiceUnavailable(503, "ServiceUnavailable", "etcd is down")

    api.get = unavailable  # type: ignore[method-assign]
    rec, _, recorder, _ = setup_reconciler(api, autoscaler_obj())
    with pytest.raises(ServiceUnavailable):
        await rec.reconcile(Request(NS, "auto"))
    assert recorder.events == []


async def test_a_refused_scale_write_is_reported_and_raised() -> None:
    api = FakeScaleApi(replicas=1)
    rec, _, recorder, _ = setup_reconciler(api, autoscaler_obj())
    original = api.patch

    async def refuse_scale(resource: Any, name: str, patch: Any, *a: Any, **kw: Any) -> Any:
        if kw.get("subresource") == "scale":
            api.calls.append(("patch", f"{resource.plural}/{name}/scale", patch))
            raise Forbidden(403, "Forbidden", "cannot patch sandboxwarmpools/scale")
        return await original(resource, name, patch, *a, **kw)

    api.patch = refuse_scale  # type: ignore[method-assign]
    with pytest.raises(Forbidden):
        await rec.reconcile(Request(NS, "auto"))
    assert api.pool["spec"]["replicas"] == 1
    status, reason, message = condition(api, "AbleToScale")
    assert (status, reason) == ("False", "FailedUpdateScale")
    assert "to 3" in message and "cannot patch" in message
    assert [e[:2] for e in recorder.events] == [("Warning", "FailedRescale")]


@pytest.mark.parametrize(
    ("api_version", "kind", "says"),
    [
        ("v1beta1", "SandboxWarmPool", "v1beta1 is not served"),  # the core group has none
        ("", "SandboxWarmPool", "is invalid"),
        ("example.com/v1", "Gizmo", "serves no kind Gizmo"),
    ],
)
async def test_a_target_that_cannot_be_resolved_is_an_invalid_target(
    api_version: str, kind: str, says: str
) -> None:
    api = FakeScaleApi()
    api.discovery["/apis/example.com/v1"] = {"resources": [{"name": "widgets", "kind": "Widget"}]}
    with pytest.raises(TargetError, match=says) as err:
        await ScaleWriter(api).resolve(api_version, kind)
    assert err.value.reason == "InvalidTarget"
