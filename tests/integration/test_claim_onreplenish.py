"""An ``OnReplenish`` pool pointed at another template, against the real control plane: claims
that name the pool keep being served warm from the members of the previous template, and the
pool refills from the new one as they are adopted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from agentsandbox.api import keys
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.kube.client import Client
from tests.polling import eventually

from .invariants import SandboxHistory, check_invariants, checked_history, wait_claims_ready
from .test_claims import claim_obj, controllers
from .test_warmpool import image_of, pool_obj, template_obj, wait_ready_pool

MEMBERS = 3
WARM_WITHIN = 10.0  # seconds from a claim's create to Ready, on a loaded 2-core machine


@pytest.fixture(autouse=True)
async def claim_history(
    cluster: DevCluster, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of each test, checked against the claim rules at its end
    (tests/integration/invariants.py)."""
    async with checked_history(cluster, request.node.nodeid) as history:
        yield history


async def test_onreplenish_pool_switched_to_another_template_serves_warm_then_refills(
    client: Client, namespace: str
) -> None:
    """claim review #2: after ``sandboxTemplateRef`` moves from tpl-v1 to tpl-v2, every claim
    naming the pool is Ready with one of the pool's tpl-v1 members (launch type warm), and the
    pool then holds only tpl-v2 members, all Ready."""
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl-v1", "app:v1"), namespace)
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl-v2", "app:v2"), namespace)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl-v1", MEMBERS), namespace)
    async with controllers(client):
        old = {
            s["metadata"]["name"] for s in await wait_ready_pool(client, namespace, "pool", MEMBERS)
        }
        await client.patch(
            SANDBOX_WARM_POOLS,
            "pool",
            {"spec": {"sandboxTemplateRef": {"name": "tpl-v2"}}},
            namespace,
        )

        async def observed() -> bool:
            pool = await client.get(SANDBOX_WARM_POOLS, "pool", namespace)
            status = pool.get("status") or {}
            return bool(
                status.get("observedGeneration") == pool["metadata"]["generation"]
                and status.get("readyReplicas") == MEMBERS
            )

        await eventually(observed, within=20, what="the pool saw its new template, still full")
        names = {f"c-{i}" for i in range(MEMBERS)}
        t0 = time.monotonic()
        await asyncio.gather(
            *(client.create(SANDBOX_CLAIMS, claim_obj(n, pool="pool"), namespace) for n in names)
        )
        claims = await wait_claims_ready(client, namespace, names, WARM_WITHIN)
        took = time.monotonic() - t0
        served = await check_invariants(client, namespace, claims)
        refilled = await wait_ready_pool(client, namespace, "pool", MEMBERS)
        launch = {
            name: (await client.get(SANDBOXES, name, namespace))["metadata"]["labels"].get(
                keys.LABEL_LAUNCH_TYPE
            )
            for name in served.values()
        }
    assert set(served.values()) == old, f"not served from the old members: {served} vs {old}"
    assert set(launch.values()) == {keys.LAUNCH_TYPE_WARM}, launch
    assert {image_of(s) for s in refilled} == {"app:v2"}, "refilled from the new template"
    assert all(
        s["metadata"]["labels"][keys.LABEL_SANDBOX_TEMPLATE_REF_HASH] == name_hash("tpl-v2")
        for s in refilled
    )
    assert not {s["metadata"]["name"] for s in refilled} & old
    print(f"\n{MEMBERS} claims on a re-pointed OnReplenish pool Ready in {took * 1000:.0f} ms")
