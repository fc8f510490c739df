"""The SandboxWarmPoolAutoscaler against the real local control plane, windows of seconds.

The Sandbox, SandboxWarmPool, SandboxClaim and autoscaler controllers run in-process (a Manager,
leader election off); the tests act only through the API, as a user would: claims arrive, the
pool is resized through its /scale subresource, someone else patches the pool, the autoscaler is
deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agentsandbox.api import keys
from agentsandbox.api.kinds import SANDBOX_CLAIM, SANDBOX_WARM_POOL_AUTOSCALER
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOL_AUTOSCALERS,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.controllers.autoscaler import controller as autoscaler_controller
from agentsandbox.controllers.autoscaler.act import (
    CONFLICT,
    PATCH_DID_NOT_APPLY,
    SCALED,
    ScaleWriter,
    failed_test,
)
from agentsandbox.controllers.autoscaler.cycle import Rise
from agentsandbox.controllers.autoscaler.memory import Memory
from agentsandbox.controllers.autoscaler.settings import Settings as AutoscalerSettings
from agentsandbox.controllers.claim import controller as claim_controller
from agentsandbox.controllers.sandbox import controller as sandbox_controller
from agentsandbox.controllers.warmpool import controller as warmpool
from agentsandbox.controllers.warmpool.plan import Settings
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.kube import metrics as kube_metrics
from agentsandbox.kube.client import Client, PatchType
from agentsandbox.kube.errors import ApiError, Invalid
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.resources import Resource
from tests.polling import eventually, stays

from .invariants import SandboxHistory, checked_history
from .runtime_helpers import running
from .test_warmpool import pool_obj, template_obj

EVENTS = Resource("events.k8s.io", "v1", "events", "Event")
#: passes every 0.5 s, rates over the last 6 s (the defaults are 5 s and 10 min)
FAST = AutoscalerSettings(sync_period=0.5, min_interval=0.2, rate_window=6.0, burst_bin=2.0)


@pytest.fixture(autouse=True)
async def claim_history(
    cluster: DevCluster, namespace: str, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of each test, checked against the claim rules at its end
    (tests/integration/invariants.py)."""
    async with checked_history(cluster, request.node.nodeid) as history:
        yield history


@contextlib.asynccontextmanager
async def controllers(client: Client) -> AsyncIterator[Manager]:
    mgr = Manager(client)
    sandbox_controller.setup(mgr, 8, "cluster.local")
    warmpool.setup(mgr, Settings(), workers=4)
    claim_controller.setup(mgr, workers=8)
    autoscaler_controller.setup(mgr, FAST)
    async with running(mgr):
        await asyncio.wait_for(mgr.wait_started(), 20)
        yield mgr


def autoscaler_obj(name: str, pool: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_WARM_POOL_AUTOSCALER.api_version,
        "kind": SANDBOX_WARM_POOL_AUTOSCALER.kind,
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {
                "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                "kind": "SandboxWarmPool",
                "name": pool,
            },
            **spec,
        },
    }


def claim_obj(name: str, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_CLAIM.api_version,
        "kind": "SandboxClaim",
        "metadata": {"name": name},
        "spec": {"warmPoolRef": {"name": pool}},
    }


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == type_:
            return dict(cond)
    return {}


async def replicas(client: Client, ns: str, pool: str) -> int:
    scale = await client.get(SANDBOX_WARM_POOLS, pool, ns, subresource="scale")
    return int(scale["spec"].get("replicas", 0))  # a Scale leaves 0 out


async def event_reasons(client: Client, ns: str) -> list[str]:
    listed = await client.list(EVENTS, ns)
    return [
        str(e.get("reason"))
        for e in listed.items
        if (e.get("regarding") or {}).get("kind") == SANDBOX_WARM_POOL_AUTOSCALER.kind
    ]


async def test_the_crd_rejects_min_above_max_and_a_share_outside_0_1(
    client: Client, namespace: str
) -> None:
    for spec, message in (
        (
            {"minReplicas": 5, "maxReplicas": 2, "targetWarmShare": 0.9},
            "spec.minReplicas must not be greater than spec.maxReplicas",
        ),
        (
            {"maxReplicas": 2, "targetWarmShare": 1},
            "spec.targetWarmShare must be between 0 and 1",
        ),
        ({"maxReplicas": 2, "targetWarmShare": 0}, "spec.targetWarmShare must be between 0 and 1"),
    ):
        with pytest.raises(ApiError) as err:
            await client.create(
                SANDBOX_WARM_POOL_AUTOSCALERS, autoscaler_obj("bad", "p", **spec), namespace
            )
        assert message in str(err.value), err.value
    made = await client.create(
        SANDBOX_WARM_POOL_AUTOSCALERS,
        autoscaler_obj("good", "p", maxReplicas=3, targetWarmShare=0.99),
        namespace,
    )
    assert made["spec"]["minReplicas"] == 1  # the CRD default


async def test_the_status_keeps_the_bursts_rises_a_restart_takes_back(
    client: Client, namespace: str
) -> None:
    """The schedule of bursts is learnt from the rises kept in ``status.estimates.burstRises``:
    a schema without the field would prune them on the status write, and a restart would learn
    the schedule again over seven bursts. Written as the controller writes them, read back
    unchanged, and taken back by a new process's memory; more than 12 are refused."""
    made = await client.create(
        SANDBOX_WARM_POOL_AUTOSCALERS,
        autoscaler_obj("rises", "p", maxReplicas=3, targetWarmShare=0.99),
        namespace,
    )
    memory = Memory()
    memory.bursts.rises = [Rise(1000.0 + 600.0 * k, 1016.0 + 600.0 * k) for k in range(7)]
    memory.bursts.rises.append(Rise(5300.0))  # one going on
    estimates = memory.estimates()
    written = await client.update_status(
        SANDBOX_WARM_POOL_AUTOSCALERS, {**made, "status": {"estimates": estimates}}, namespace
    )
    got = await client.get(SANDBOX_WARM_POOL_AUTOSCALERS, "rises", namespace)
    assert got["status"]["estimates"]["burstRises"] == estimates["burstRises"]
    fresh = Memory()
    fresh.restore(None, 5400.0, 3, got["status"]["estimates"])
    assert [(r.start, r.end) for r in fresh.bursts.rises] == [
        (r.start, r.end) for r in memory.bursts.rises
    ]
    too_many = [{"start": float(k)} for k in range(13)]
    with pytest.raises(ApiError) as err:
        await client.update_status(
            SANDBOX_WARM_POOL_AUTOSCALERS,
            {**written, "status": {"estimates": {"burstRises": too_many}}},
            namespace,
        )
    assert "burstRises" in str(err.value), err.value


TARGET_RULE = "spec.scaleTargetRef must name a SandboxWarmPool"


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [
        ("apps/v1", "Deployment"),
        ("agents.x-k8s.io/v1alpha1", "SandboxWarmPool"),  # the core group has no pools
        ("extensions.agents.x-k8s.io/v1beta1", "SandboxClaim"),
        ("extensions.agents.x-k8s.io", "SandboxWarmPool"),  # no version
    ],
)
async def test_the_crd_refuses_a_target_that_is_not_a_sandbox_warm_pool(
    client: Client, namespace: str, api_version: str, kind: str
) -> None:
    """Autoscaler review #17: only a SandboxWarmPool has claim arrivals and refill times to
    measure (and our RBAC covers only sandboxwarmpools/scale): any other target is refused by
    the API with the rule's message, instead of an autoscaler that can never work."""
    bad = autoscaler_obj("bad", "web", maxReplicas=3, targetWarmShare=0.9)
    bad["spec"]["scaleTargetRef"].update(apiVersion=api_version, kind=kind)
    with pytest.raises(Invalid) as err:
        await client.create(SANDBOX_WARM_POOL_AUTOSCALERS, bad, namespace)
    assert TARGET_RULE in str(err.value), err.value
    good = autoscaler_obj("good", "web", maxReplicas=3, targetWarmShare=0.9)
    good["spec"]["scaleTargetRef"]["apiVersion"] = "extensions.agents.x-k8s.io/v1alpha1"
    await client.create(SANDBOX_WARM_POOL_AUTOSCALERS, good, namespace)


async def test_the_scale_write_carries_a_precondition_the_api_server_enforces(
    client: Client, namespace: str
) -> None:
    """A JSON patch of /scale testing the replicas read: after another writer's replicas it is
    refused (a conflict, nothing written); fresh, it goes through."""
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 1), namespace)
    writer = ScaleWriter(client)
    read = await writer.read_scale(SANDBOX_WARM_POOLS, namespace, "pool")
    await client.patch(SANDBOX_WARM_POOLS, "pool", {"spec": {"replicas": 2}}, namespace)
    assert await writer.write_scale(SANDBOX_WARM_POOLS, namespace, "pool", 5, read) == CONFLICT
    assert await replicas(client, namespace, "pool") == 2
    fresh = await writer.read_scale(SANDBOX_WARM_POOLS, namespace, "pool")
    assert fresh.replicas == 2
    assert await writer.write_scale(SANDBOX_WARM_POOLS, namespace, "pool", 5, fresh) == SCALED
    assert await replicas(client, namespace, "pool") == 5


async def test_the_scale_write_survives_a_pool_status_write_but_not_another_replicas(
    client: Client, namespace: str
) -> None:
    """Autoscaler review #12: the /scale write is conditioned on the replicas read, not on the
    resourceVersion. A pool status write in between (the pool controller writes it on every
    adoption) does not stop it; another writer's spec.replicas does (a failed JSON patch test:
    the API server answers 422 Invalid with a generic message, taken as a conflict, nothing
    written) — also from and
    to 0, which the Scale's JSON leaves out."""
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 1), namespace)
    writer = ScaleWriter(client)
    read = await writer.read_scale(SANDBOX_WARM_POOLS, namespace, "pool")
    await client.patch(
        SANDBOX_WARM_POOLS, "pool", {"status": {"replicas": 1}}, namespace, subresource="status"
    )
    assert await writer.write_scale(SANDBOX_WARM_POOLS, namespace, "pool", 4, read) == SCALED
    assert await replicas(client, namespace, "pool") == 4
    # what the API server answers to a failed test operation
    with pytest.raises(Invalid) as err:
        await client.patch(
            SANDBOX_WARM_POOLS,
            "pool",
            [{"op": "test", "path": "/spec/replicas", "value": 9}],
            namespace,
            patch_type=PatchType.JSON,
            subresource="scale",
        )
    assert (err.value.status, err.value.reason) == (422, "Invalid")
    # a generic message, no causes: the patch library's words are not sent
    assert err.value.message == PATCH_DID_NOT_APPLY and not err.value.causes, err.value
    assert failed_test(err.value)
    for before, other in ((4, 2), (2, 0), (0, 3)):
        read = await writer.read_scale(SANDBOX_WARM_POOLS, namespace, "pool")
        assert read.replicas == before
        await client.patch(SANDBOX_WARM_POOLS, "pool", {"spec": {"replicas": other}}, namespace)
        assert await writer.write_scale(SANDBOX_WARM_POOLS, namespace, "pool", 7, read) == CONFLICT
        assert await replicas(client, namespace, "pool") == other
    await client.patch(SANDBOX_WARM_POOLS, "pool", {"spec": {"replicas": 0}}, namespace)
    read = await writer.read_scale(SANDBOX_WARM_POOLS, namespace, "pool")
    assert await writer.write_scale(SANDBOX_WARM_POOLS, namespace, "pool", 2, read) == SCALED
    assert await replicas(client, namespace, "pool") == 2


async def test_a_pool_grows_under_steady_claims_and_shrinks_after_the_window(
    client: Client, namespace: str
) -> None:
    """Claims at ~8/s for 5 s: the autoscaler, measuring arrivals and refill times, raises the
    pool above its minimum while the claims still come (before they drain it), says why in its
    status and Events; once they stop it gives the sandboxes back after the stabilisation
    window, to the minimum."""
    ns = namespace
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), ns)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 1), ns)
    await client.create(
        SANDBOX_WARM_POOL_AUTOSCALERS,
        autoscaler_obj(
            "auto",
            "pool",
            minReplicas=1,
            maxReplicas=30,
            targetWarmShare=0.99,
            scaleDownStabilizationSeconds=3,
        ),
        ns,
    )
    async with controllers(client):
        # the pool's first sandbox gives the first refill time; the autoscaler reports
        auto = await eventually(
            lambda: _get_if(client, ns, lambda a: condition(a, "Ready").get("status") == "True"),
            within=20,
            what="the autoscaler Ready",
        )
        assert auto["status"]["currentReplicas"] == 1
        assert condition(auto, "AbleToScale")["status"] == "True"
        peak = 1
        t0 = time.monotonic()
        for i in range(40):  # ~8 claims/s for 5 s
            await client.create(SANDBOX_CLAIMS, claim_obj(f"c{i}", "pool"), ns)
            peak = max(peak, await replicas(client, ns, "pool"))
            await asyncio.sleep(max(0.0, t0 + (i + 1) * 0.125 - time.monotonic()))
        assert peak > 1, "the pool did not grow while the claims came"
        # it grew in time: (nearly) every claim adopted a warm sandbox (40 of 40 on an idle
        # machine), which a pool left at 1, one sandbox refilled at a time, could not promise
        served = await eventually(
            lambda: _launch_types(client, ns, 40), within=20, what="every claim served"
        )
        assert served.get("warm", 0) >= 30, served
        auto = await client.get(SANDBOX_WARM_POOL_AUTOSCALERS, "auto", ns)
        status = auto["status"]
        assert status["arrivalRate"] > 1.0 and status["refillSeconds"] > 0
        assert status["lastScale"]["reason"] == "ScaledUp", status
        assert status["lastScale"]["fromReplicas"] < status["lastScale"]["toReplicas"]
        assert "Erlang-B" in status["lastScale"]["message"]
        # the arrival window is kept in the status (a restart takes it back), and the share of
        # the pool's claims the claim controller counted warm is reported beside the prediction
        assert sum(status["window"]["claims"]) >= 20, status["window"]
        # so are the estimates a restart takes back (the CRD's schema keeps them, not prunes)
        estimates = status["estimates"]
        assert estimates["refillP99Seconds"] >= estimates["refillMeanSeconds"] > 0, estimates
        assert estimates["allowanceScale"] >= 1 and estimates["scaleDownStretch"] >= 1
        assert 0.5 < status["realisedWarmShare"] <= 1
        assert 0 < status["predictedWarmShare"] <= 1

        # the claims stop: after the rate window (6 s) and the stabilisation window (3 s) the
        # pool goes back to its minimum, and the status says why
        shrunk = await eventually(
            lambda: _get_if(
                client,
                ns,
                lambda a: (
                    (a.get("status") or {}).get("lastScaledReplicas") == 1
                    and (a["status"].get("lastScale") or {}).get("reason") == "ScaledDown"
                ),
            ),
            within=25,
            what="the pool scaled back down to 1",
        )
        assert await replicas(client, ns, "pool") == 1
        assert shrunk["status"]["lastScale"]["toReplicas"] == 1
        assert condition(shrunk, "Ready")["status"] == "True"
        reasons = await eventually(
            lambda: _reasons_if(client, ns, {"SuccessfulRescale"}),
            within=5,
            what="SuccessfulRescale Events",
        )
        assert "ConflictingWriter" not in reasons


async def test_another_writer_is_reported_not_fought_and_deleting_leaves_the_last_size(
    client: Client, namespace: str
) -> None:
    ns = namespace
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), ns)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 1), ns)
    await client.create(
        SANDBOX_WARM_POOL_AUTOSCALERS,
        autoscaler_obj("auto", "pool", minReplicas=2, maxReplicas=10, targetWarmShare=0.95),
        ns,
    )
    async with controllers(client):
        # taken over: no claims, so the minimum
        await eventually(
            lambda: _replicas_are(client, ns, 2), within=20, what="the pool set to the minimum 2"
        )
        # someone else (an HPA, GitOps, kubectl) sets the pool's replicas directly
        await client.patch(SANDBOX_WARM_POOLS, "pool", {"spec": {"replicas": 6}}, ns)
        auto = await eventually(
            lambda: _get_if(
                client,
                ns,
                lambda a: condition(a, "AbleToScale").get("reason") == "ConflictingWriter",
            ),
            within=10,
            what="ConflictingWriter reported",
        )
        able = condition(auto, "AbleToScale")
        assert able["status"] == "False" and "6" in able["message"], able
        assert condition(auto, "Ready")["reason"] == "ConflictingWriter"
        await eventually(
            lambda: _reasons_if(client, ns, {"ConflictingWriter"}), within=5, what="a Warning Event"
        )
        await stays(  # several passes: not fought
            lambda: replicas(client, ns, "pool"),
            accept=lambda n: n == 6,
            for_=2.0,
            what="the pool left at the other writer's 6",
        )

        # a spec change takes the pool over again
        await client.patch(SANDBOX_WARM_POOL_AUTOSCALERS, "auto", {"spec": {"minReplicas": 3}}, ns)
        await eventually(
            lambda: _replicas_are(client, ns, 3), within=10, what="the pool taken over at 3"
        )
        auto = await eventually(
            lambda: _get_if(
                client, ns, lambda a: condition(a, "AbleToScale").get("status") == "True"
            ),
            within=10,
            what="AbleToScale again",
        )
        # its decisions are scraped (autoscaler review #18)
        await eventually(
            lambda: _scraped("agent_sandbox_warmpool_autoscaler_desired_replicas", ns) == [3.0],
            within=5,
            what="the desired size in /metrics",
        )

        # deleting the autoscaler leaves the pool at its last size (no owner, no finalizer)
        await client.delete(SANDBOX_WARM_POOL_AUTOSCALERS, "auto", ns)
        await eventually(lambda: _gone(client, ns), within=10, what="the autoscaler gone")
        await eventually(
            lambda: _scraped("agent_sandbox_warmpool_autoscaler_", ns) == [],
            within=10,
            what="the autoscaler's series gone from /metrics",
        )
        await stays(
            lambda: client.get(SANDBOX_WARM_POOLS, "pool", ns),
            accept=lambda pool: (
                pool["spec"]["replicas"] == 3 and not pool["metadata"].get("ownerReferences")
            ),
            for_=1.5,
            what="the pool left at 3, with no owner",
        )


async def test_two_autoscalers_of_one_pool_stand_back_until_one_is_left(
    client: Client, namespace: str
) -> None:
    """Both report AmbiguousTarget and neither writes /scale; deleting one lets the other scale
    (within one sync period, 0.5 s here)."""
    ns = namespace
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), ns)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 1), ns)
    for name, low in (("auto", 2), ("rival", 4)):
        await client.create(
            SANDBOX_WARM_POOL_AUTOSCALERS,
            autoscaler_obj(name, "pool", minReplicas=low, maxReplicas=10, targetWarmShare=0.95),
            ns,
        )
    async with controllers(client):
        for name in ("auto", "rival"):
            got = await eventually(
                lambda name=name: _get_if(
                    client,
                    ns,
                    lambda a: condition(a, "ScalingActive").get("reason") == "AmbiguousTarget",
                    name,
                ),
                within=10,
                what=f"{name}: AmbiguousTarget",
            )
            assert condition(got, "AbleToScale")["status"] == "False"
            assert "auto, rival" in condition(got, "ScalingActive")["message"]
        await eventually(
            lambda: _reasons_if(client, ns, {"AmbiguousTarget"}), within=5, what="a Warning Event"
        )
        await stays(  # three sync periods: nobody wrote
            lambda: replicas(client, ns, "pool"),
            accept=lambda n: n == 1,
            for_=1.5,
            what="the pool left at 1",
        )
        await client.delete(SANDBOX_WARM_POOL_AUTOSCALERS, "rival", ns)
        await eventually(
            lambda: _replicas_are(client, ns, 2),
            within=10,
            what="the last one scaling to its min 2",
        )


async def _get_if(client: Client, ns: str, pred: Any, name: str = "auto") -> dict[str, Any] | None:
    obj = await client.get(SANDBOX_WARM_POOL_AUTOSCALERS, name, ns)
    return obj if pred(obj) else None


async def _replicas_are(client: Client, ns: str, n: int) -> bool:
    return await replicas(client, ns, "pool") == n


async def _reasons_if(client: Client, ns: str, wanted: set[str]) -> list[str] | None:
    found = await event_reasons(client, ns)
    return found if wanted <= set(found) else None


async def _gone(client: Client, ns: str) -> bool:
    try:
        await client.get(SANDBOX_WARM_POOL_AUTOSCALERS, "auto", ns)
    except ApiError as err:
        return err.status == 404
    return False


async def _launch_types(client: Client, ns: str, n: int) -> dict[str, int] | None:
    """Claimed sandboxes by launch type (warm: adopted from the pool), once ``n`` are there."""
    listed = await client.list(SANDBOXES, ns, label_selector=keys.LABEL_LAUNCH_TYPE)
    counts: dict[str, int] = {}
    for sb in listed.items:
        kind = sb["metadata"]["labels"][keys.LABEL_LAUNCH_TYPE]
        counts[kind] = counts.get(kind, 0) + 1
    return counts if sum(counts.values()) >= n else None


def _scraped(prefix: str, ns: str) -> list[float]:
    """The values of the samples named ``prefix``... of autoscaler ``auto`` in ``ns``, from the
    process's /metrics text (the controllers run in this process)."""
    text = generate_latest(kube_metrics.REGISTRY).decode()
    return [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith(prefix)
        and s.labels.get("autoscaler") == "auto"
        and s.labels.get("namespace") == ns
    ]
