"""The warm pool when other writers touch its sandboxes, against the real control plane.

What a claim adoption does to a pool sandbox (pool labels stripped, another controller) must
cost the pool exactly one replacement and never the adopted sandbox; a pool delete decided on a
stale view must lose to the writer that changed the sandbox (the apiserver enforces the
resourceVersion precondition); a template change reaches every pool using it and no other.
"""

from __future__ import annotations

from typing import Any

from agentsandbox.api import keys
from agentsandbox.api.hashing import name_hash
from agentsandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS, SANDBOXES
from agentsandbox.controllers.warmpool.plan import Plan
from agentsandbox.kube.client import Client
from agentsandbox.kube.resources import CONFIGMAPS
from tests.polling import eventually, stays

from .test_warmpool import (
    controllers,
    image_of,
    pool_obj,
    pool_sandboxes,
    template_obj,
    wait_ready_pool,
)


def _claim_like_patch(owner: dict[str, Any]) -> dict[str, Any]:
    """A merge patch doing to a sandbox what a claim's adoption does to its metadata."""
    return {
        "metadata": {
            "labels": {
                keys.LABEL_WARM_POOL_SANDBOX: None,
                keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: None,
                keys.LABEL_SANDBOX_POD_TEMPLATE_HASH: None,
            },
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ],
        }
    }


async def test_sandbox_taken_from_the_pool_gets_exactly_one_replacement(
    client: Client,
    namespace: str,
) -> None:
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), namespace)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 3), namespace)
    # a real owner, so the garbage collector keeps the taken sandbox
    taker = await client.create(
        CONFIGMAPS, {"metadata": {"name": "claim-stand-in"}, "data": {}}, namespace
    )
    async with controllers(client):
        members = await wait_ready_pool(client, namespace, "pool", 3)
        names_seen = {s["metadata"]["name"] for s in members}
        taken = members[0]["metadata"]["name"]
        await client.patch(SANDBOXES, taken, _claim_like_patch(taker), namespace)
        after = await wait_ready_pool(client, namespace, "pool", 3)
        names_seen |= {s["metadata"]["name"] for s in after}
        now = await stays(  # a second replacement would show up now
            lambda: pool_sandboxes(client, namespace, "pool"),
            accept=lambda now: len(names_seen | {s["metadata"]["name"] for s in now}) == 4,
            for_=1.5,
            what="exactly one replacement",
        )
        names_seen |= {s["metadata"]["name"] for s in now}
    assert taken not in {s["metadata"]["name"] for s in now}
    assert len(now) == 3
    assert len(names_seen) == 4, f"exactly one replacement, saw {sorted(names_seen)}"
    kept = await client.get(SANDBOXES, taken, namespace)
    assert not kept["metadata"].get("deletionTimestamp"), "the pool deleted a taken sandbox"


async def test_pool_delete_decided_on_a_stale_view_spares_the_changed_sandbox(
    client: Client,
    namespace: str,
) -> None:
    """Through the real apiserver: the pool decides to delete an excess sandbox, a claim adopts
    it before the DELETE lands; the precondition makes the DELETE a 409 (docs/design/warmpool.md,
    "Replenishing the pool")."""
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), namespace)
    pool = await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 1), namespace)
    taker = await client.create(
        CONFIGMAPS, {"metadata": {"name": "claim-stand-in"}, "data": {}}, namespace
    )
    async with controllers(client) as mgr:
        (member,) = await wait_ready_pool(client, namespace, "pool", 1)
        reconciler = next(
            c._reconcile.__self__  # type: ignore[attr-defined]
            for c in mgr._runnables  # type: ignore[attr-defined]
            if getattr(c, "name", "") == "sandboxwarmpool"
        )
        stale_view = member  # what the pool saw when it decided
        await client.patch(
            SANDBOXES, member["metadata"]["name"], _claim_like_patch(taker), namespace
        )
        outcome = await reconciler.writer.act(pool, Plan(delete_excess=[stale_view]))
    assert outcome.conflicts == 1 and outcome.errors == []
    survivor = await client.get(SANDBOXES, member["metadata"]["name"], namespace)
    assert not survivor["metadata"].get("deletionTimestamp")


async def test_template_change_reaches_every_pool_using_it_and_no_other(
    client: Client,
    namespace: str,
) -> None:
    """Upstream TestFindWarmPoolsForTemplate end to end: a template's pools roll, others stay."""
    await client.create(SANDBOX_TEMPLATES, template_obj("shared", image="app:v1"), namespace)
    await client.create(SANDBOX_TEMPLATES, template_obj("other", image="app:v1"), namespace)
    for name, tpl in (("a", "shared"), ("b", "shared"), ("c", "other")):
        await client.create(SANDBOX_WARM_POOLS, pool_obj(name, tpl, 2, "Recreate"), namespace)
    async with controllers(client):
        before = {
            name: {s["metadata"]["name"] for s in await wait_ready_pool(client, namespace, name, 2)}
            for name in ("a", "b", "c")
        }
        tpl = await client.get(SANDBOX_TEMPLATES, "shared", namespace)
        tpl["spec"]["podTemplate"]["spec"]["containers"][0]["image"] = "app:v2"
        await client.update(SANDBOX_TEMPLATES, tpl, namespace)

        async def images() -> list[list[str]]:
            return [
                [image_of(s) for s in await pool_sandboxes(client, namespace, name)]
                for name in ("a", "b")
            ]

        await eventually(
            images,
            accept=lambda rolled: all(images == ["app:v2", "app:v2"] for images in rolled),
            within=60,
            what="pools a and b rolled to app:v2",
        )
        await wait_ready_pool(client, namespace, "a", 2)
        await wait_ready_pool(client, namespace, "b", 2)
        untouched = await pool_sandboxes(client, namespace, "c")
    assert {s["metadata"]["name"] for s in untouched} == before["c"]
    assert {image_of(s) for s in untouched} == {"app:v1"}
    labels = {s["metadata"]["labels"][keys.LABEL_WARM_POOL_SANDBOX] for s in untouched}
    assert labels == {name_hash("c")}
