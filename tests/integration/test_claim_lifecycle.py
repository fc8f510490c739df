"""Claims, part two, against the real control plane: expiry under each shutdown policy, TTL after
the sandbox finished, refused metadata (no sandbox, no hot loop), env on a warm-pool claim (cold,
Ready, an event) and a ResourceQuota refusing the third of three cold claims.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.devcluster.cluster import LIFECYCLE_LABEL, DevCluster
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import NotFound
from agentsandbox.kube.resources import PODS, Resource
from tests.polling import eventually, stays

from .invariants import SandboxHistory, checked_history
from .test_claims import claim_obj, controllers, ready_reason, wait_claims_ready
from .test_warmpool import (
    pool_obj,
    pool_sandboxes,
    template_obj,
    wait_ready_pool,
)

RESOURCE_QUOTAS = Resource("", "v1", "resourcequotas", "ResourceQuota")
EVENTS = Resource("events.k8s.io", "v1", "events", "Event")


@pytest.fixture(autouse=True)
async def claim_history(
    cluster: DevCluster, namespace: str, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of each test, checked against the claim rules at its end
    (tests/integration/invariants.py)."""
    async with checked_history(cluster, request.node.nodeid) as history:
        yield history


def in_seconds(seconds: float) -> str:
    when = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


async def gone(client: Client, resource: Resource, name: str, ns: str, within: float) -> bool:
    async def missing() -> bool:
        try:
            await client.get(resource, name, ns)
        except NotFound:
            return True
        return False

    try:
        await eventually(missing, within=within, what=f"{resource.kind} {name} gone")
    except AssertionError:
        return False
    return True


async def wait_reason(
    client: Client,
    ns: str,
    name: str,
    reason: str,
    within: float = 30,
) -> dict[str, Any]:
    claim: dict[str, Any] = await eventually(
        lambda: client.get(SANDBOX_CLAIMS, name, ns),
        accept=lambda claim: ready_reason(claim)[1] == reason,
        within=within,
        what=f"{name}: Ready reason {reason}",
    )
    return claim


async def event_reasons(client: Client, ns: str) -> list[tuple[str, str, str]]:
    items = (await client.list(EVENTS, ns)).items
    return [
        (e.get("reason", ""), e.get("note", ""), e.get("reportingController", "")) for e in items
    ]


@pytest.mark.parametrize("policy", ["Retain", "Delete", "DeleteForeground"])
async def test_expiry_under_each_shutdown_policy(
    client: Client,
    namespace: str,
    policy: str,
) -> None:
    """shutdownTime 3 s ahead: Ready=ClaimExpired; Retain keeps the claim and deletes its
    sandbox, Delete and DeleteForeground delete the claim (the sandbox goes by GC)."""
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), namespace)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 1), namespace)
    async with controllers(client):
        await wait_ready_pool(client, namespace, "pool", 1)
        lifecycle = {"shutdownTime": in_seconds(3), "shutdownPolicy": policy}
        await client.create(
            SANDBOX_CLAIMS, claim_obj("c", pool="pool", lifecycle=lifecycle), namespace
        )
        (c,) = await wait_claims_ready(client, namespace, {"c"}, 20)
        name = c["status"]["sandbox"]["name"]
        assert await gone(client, SANDBOXES, name, namespace, 30), "sandbox not removed at expiry"
        if policy == "Retain":
            await wait_reason(client, namespace, "c", "ClaimExpired")
            # ClaimExpired is written before the clean-up; the name is cleared by the pass that
            # sees the sandbox gone (its delete event), so wait for that pass, do not sample once
            claim = await eventually(
                lambda: client.get(SANDBOX_CLAIMS, "c", namespace),
                accept=lambda claim: (
                    ((claim.get("status") or {}).get("sandbox") or {}).get("name", "") == ""
                ),
                within=10,
                what="the status to name no sandbox",
            )
            assert ready_reason(claim)[1] == "ClaimExpired"
        else:
            assert await gone(client, SANDBOX_CLAIMS, "c", namespace, 30)
        assert await gone(client, PODS, name, namespace, 30)
        wanted = [("ClaimExpired", "Claim expired", "sandboxclaim-controller")]
        if policy != "Retain":
            wanted.append(
                (
                    "ClaimExpired",
                    f"Deleting Claim (ShutdownPolicy={policy})",
                    "sandboxclaim-controller",
                )
            )
        # events are sent by the recorder in the background: on a loaded machine the last one
        # may land a moment after the deletes the test waited for
        reasons = await eventually(
            lambda: event_reasons(client, namespace),
            accept=lambda reasons: all(w in reasons for w in wanted),
            within=10,
            what=f"the events {wanted}",
        )
    for w in wanted:
        assert w in reasons


async def test_ttl_after_the_sandbox_finished_deletes_the_claim(
    client: Client,
    namespace: str,
) -> None:
    """The pod succeeds (kwok), the sandbox reports Finished, the claim mirrors it and is deleted
    ttlSecondsAfterFinished (1 s) later."""
    tpl = template_obj("job", **{LIFECYCLE_LABEL: "succeed"})
    await client.create(SANDBOX_TEMPLATES, tpl, namespace)
    async with controllers(client):
        lifecycle = {"ttlSecondsAfterFinished": 1, "shutdownPolicy": "Delete"}
        body = claim_obj("c", template="job", warmpool="none", lifecycle=lifecycle)
        await client.create(SANDBOX_CLAIMS, body, namespace)
        finished = False

        async def deleted() -> bool:
            nonlocal finished
            try:
                claim = await client.get(SANDBOX_CLAIMS, "c", namespace)
            except NotFound:
                return True
            conds = {x["type"]: x for x in (claim.get("status") or {}).get("conditions") or []}
            finished = finished or conds.get("Finished", {}).get("status") == "True"
            return False

        await eventually(deleted, within=40, what="the claim deleted after its TTL")
    assert finished, "the claim never showed the mirrored Finished condition"


async def test_invalid_metadata_is_reported_with_no_sandbox_and_no_hot_loop(
    client: Client,
    namespace: str,
) -> None:
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), namespace)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 1), namespace)
    async with controllers(client):
        await wait_ready_pool(client, namespace, "pool", 1)
        extra = {"labels": {"kubernetes.io/owner": "me"}}
        await client.create(
            SANDBOX_CLAIMS, claim_obj("c", pool="pool", additionalPodMetadata=extra), namespace
        )
        claim = await wait_reason(client, namespace, "c", "InvalidMetadata")
        rv = claim["metadata"]["resourceVersion"]
        again = await stays(
            lambda: client.get(SANDBOX_CLAIMS, "c", namespace),
            accept=lambda again: again["metadata"]["resourceVersion"] == rv,
            for_=3.0,
            what="the claim not rewritten",
        )
        sandboxes = [s["metadata"]["name"] for s in (await client.list(SANDBOXES, namespace)).items]
        members = [s["metadata"]["name"] for s in await pool_sandboxes(client, namespace, "pool")]
    assert again["metadata"]["resourceVersion"] == rv, "the claim keeps being rewritten"
    assert "restricted system domain" in ready_reason(again)[1] or "kubernetes.io/owner" in str(
        again["status"]
    )
    assert sandboxes == members, "no sandbox was made or taken for the claim"


async def test_env_on_a_warm_pool_claim_starts_cold_becomes_ready_and_says_so(
    client: Client,
    namespace: str,
) -> None:
    tpl = template_obj("tpl")
    tpl["spec"]["envVarsInjectionPolicy"] = "Allowed"
    await client.create(SANDBOX_TEMPLATES, tpl, namespace)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 1), namespace)
    async with controllers(client):
        (member,) = await wait_ready_pool(client, namespace, "pool", 1)
        env = [{"name": "MODE", "value": "fast"}]
        await client.create(SANDBOX_CLAIMS, claim_obj("c", pool="pool", env=env), namespace)
        (c,) = await wait_claims_ready(client, namespace, {"c"}, 30)
        reasons = await event_reasons(client, namespace)
    assert c["status"]["sandbox"]["name"] == "c" != member["metadata"]["name"]
    pod = await client.get(PODS, "c", namespace)
    assert {"name": "MODE", "value": "fast"} in pod["spec"]["containers"][0]["env"]
    assert any(r == "ColdStartForced" and "spec.env" in n for r, n, _ in reasons), reasons


async def test_a_quota_of_two_sandboxes_makes_the_third_cold_claim_say_why(
    client: Client,
    namespace: str,
) -> None:
    await client.create(
        RESOURCE_QUOTAS,
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "two-sandboxes"},
            "spec": {"hard": {"count/sandboxes.agents.x-k8s.io": "2"}},
        },
        namespace,
    )
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), namespace)
    async with controllers(client):
        for name in ("a", "b"):
            body = claim_obj(name, template="tpl", warmpool="none")
            await client.create(SANDBOX_CLAIMS, body, namespace)
            await wait_claims_ready(client, namespace, {name}, 30)
        await client.create(
            SANDBOX_CLAIMS, claim_obj("c", template="tpl", warmpool="none"), namespace
        )
        claim = await wait_reason(client, namespace, "c", "QuotaExceeded")
        reasons = await event_reasons(client, namespace)
        # room again: the claim is served within the bounded retry (10 s)
        await client.delete(SANDBOX_CLAIMS, "a", namespace)
        assert await gone(client, SANDBOXES, "a", namespace, 30)
        await wait_claims_ready(client, namespace, {"c"}, 30)
    message = next(c["message"] for c in claim["status"]["conditions"] if c["type"] == "Ready")
    assert "exceeded quota" in message
    assert any(r == "QuotaExceeded" for r, _, _ in reasons)
