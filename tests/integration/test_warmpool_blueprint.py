"""Warm pool staleness over the whole SandboxBlueprint (upstream c409f9fa, #1102).

A template change that touches only the volume claim templates or only ``service`` leaves the
pod template (and its deprecated hash label) unchanged, but changes the blueprint hash label
``agents.x-k8s.io/sandbox-template-hash``: a ``Recreate`` pool rolls, an ``OnReplenish`` pool only
builds its replacements from the new template. Sandboxes carrying only the deprecated label (an
older controller's) are not churned while nothing changed.

No PV provisioner runs on the local control plane, so a sandbox with a volume claim template
keeps its pod Pending: those checks look at the pool's sandboxes, not at readiness.
"""

from __future__ import annotations

from typing import Any

from agentsandbox.api import keys
from agentsandbox.api.hashing import pod_template_hash, sandbox_blueprint_hash
from agentsandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS, SANDBOXES
from agentsandbox.kube.client import Client
from tests.polling import eventually, stays

from .test_warmpool import (
    controllers,
    pool_obj,
    pool_sandboxes,
    ready,
    template_obj,
    wait_ready_pool,
)

VCT = {
    "metadata": {"name": "data"},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
}


def names(sbs: list[dict[str, Any]]) -> set[str]:
    return {s["metadata"]["name"] for s in sbs}


def vcts(sb: dict[str, Any]) -> list[str]:
    return [v["metadata"]["name"] for v in sb["spec"].get("volumeClaimTemplates") or []]


async def start_pool(client: Client, ns: str, strategy: str) -> tuple[set[str], dict[str, Any]]:
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), ns)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 2, strategy), ns)
    before = await wait_ready_pool(client, ns, "pool", 2)
    tpl = await client.get(SANDBOX_TEMPLATES, "tpl", ns)
    for sb in before:  # both labels, on the Sandbox and on its pod template
        for labels in (sb["metadata"]["labels"], sb["spec"]["podTemplate"]["metadata"]["labels"]):
            assert labels[keys.LABEL_SANDBOX_TEMPLATE_HASH] == sandbox_blueprint_hash(tpl["spec"])
            assert labels[keys.LABEL_SANDBOX_POD_TEMPLATE_HASH] == pod_template_hash(
                tpl["spec"]["podTemplate"]
            )
    return names(before), tpl


async def change_template(client: Client, ns: str, tpl: dict[str, Any], **spec: Any) -> str:
    """Apply a blueprint-only change; returns the new blueprint hash (pod hash unchanged)."""
    pod_hash = pod_template_hash(tpl["spec"]["podTemplate"])
    tpl["spec"].update(spec)
    updated = await client.update(SANDBOX_TEMPLATES, tpl, ns)
    assert pod_template_hash(updated["spec"]["podTemplate"]) == pod_hash
    return sandbox_blueprint_hash(updated["spec"])


async def test_vct_only_change_rolls_a_recreate_pool(client: Client, namespace: str) -> None:
    async with controllers(client):
        old, tpl = await start_pool(client, namespace, "Recreate")
        new_hash = await change_template(client, namespace, tpl, volumeClaimTemplates=[VCT])

        async def rolled() -> list[dict[str, Any]] | None:
            sbs = await pool_sandboxes(client, namespace, "pool")
            if len(sbs) == 2 and not names(sbs) & old and all(vcts(s) == ["data"] for s in sbs):
                return sbs
            return None

        sbs = await eventually(
            rolled, within=60, what="Recreate to roll the pool onto the new VCTs"
        )
    for sb in sbs:
        assert sb["metadata"]["labels"][keys.LABEL_SANDBOX_TEMPLATE_HASH] == new_hash


async def test_vct_only_change_under_on_replenish_only_affects_replacements(
    client: Client, namespace: str
) -> None:
    async with controllers(client):
        old, tpl = await start_pool(client, namespace, "OnReplenish")
        await change_template(client, namespace, tpl, volumeClaimTemplates=[VCT])
        await stays(  # give a wrong implementation time to roll
            lambda: pool_sandboxes(client, namespace, "pool"),
            accept=lambda now: names(now) == old and all(vcts(s) == [] for s in now),
            for_=2.0,
            what="the pool's sandboxes kept, without the new VCTs",
        )
        gone = sorted(old)[0]
        await client.delete(SANDBOXES, gone, namespace)

        async def replaced() -> list[dict[str, Any]] | None:
            sbs = await pool_sandboxes(client, namespace, "pool")
            return sbs if len(sbs) == 2 and gone not in names(sbs) else None

        sbs = await eventually(replaced, within=60, what="the replacement of the deleted member")
        members = names(sbs)
        sbs = await stays(  # and nothing else moves
            lambda: pool_sandboxes(client, namespace, "pool"),
            accept=lambda now: names(now) == members,
            for_=1.0,
            what="the pool's sandboxes unchanged after the replacement",
        )
    kept = [s for s in sbs if s["metadata"]["name"] in old]
    new = [s for s in sbs if s["metadata"]["name"] not in old]
    assert len(kept) == 1 and len(new) == 1
    assert vcts(kept[0]) == [] and vcts(new[0]) == ["data"]


async def test_service_only_change_rolls_a_recreate_pool(client: Client, namespace: str) -> None:
    async with controllers(client):
        old, tpl = await start_pool(client, namespace, "Recreate")
        new_hash = await change_template(client, namespace, tpl, service=True)

        async def rolled() -> list[dict[str, Any]] | None:
            sbs = await pool_sandboxes(client, namespace, "pool")
            if (
                len(sbs) == 2
                and not names(sbs) & old
                and all(s["spec"].get("service") is True and ready(s) for s in sbs)
            ):
                return sbs
            return None

        sbs = await eventually(
            rolled, within=60, what="Recreate to roll the pool onto service: true"
        )
    for sb in sbs:
        assert sb["metadata"]["labels"][keys.LABEL_SANDBOX_TEMPLATE_HASH] == new_hash
        assert sb["status"].get("service") == sb["metadata"]["name"]


async def test_old_label_only_sandboxes_are_not_churned(client: Client, namespace: str) -> None:
    """Sandboxes of an older controller (only the deprecated pod-template hash label) stay in a
    Recreate pool while the template is unchanged, and roll once only the VCTs change."""
    async with controllers(client):
        old, tpl = await start_pool(client, namespace, "Recreate")
        for name in old:
            await client.patch(
                SANDBOXES,
                name,
                {"metadata": {"labels": {keys.LABEL_SANDBOX_TEMPLATE_HASH: None}}},
                namespace,
            )
        await stays(  # give a wrong implementation time to churn
            lambda: pool_sandboxes(client, namespace, "pool"),
            accept=lambda now: (
                names(now) == old
                and all(
                    keys.LABEL_SANDBOX_TEMPLATE_HASH not in s["metadata"]["labels"] for s in now
                )
            ),
            for_=2.0,
            what="the old-label-only sandboxes kept, unlabelled",
        )

        await change_template(client, namespace, tpl, volumeClaimTemplates=[VCT])

        async def rolled() -> list[dict[str, Any]] | None:
            sbs = await pool_sandboxes(client, namespace, "pool")
            if len(sbs) == 2 and not names(sbs) & old and all(vcts(s) == ["data"] for s in sbs):
                return sbs
            return None

        await eventually(
            rolled, within=60, what="Recreate to roll old-label-only sandboxes onto the new VCTs"
        )
