"""Hostile tenants, against the real control plane and the controller in its own process.

A namespace editor may create SandboxClaims; in many installs a namespace user may create
Sandboxes too. Nothing such a user writes in their own namespace may change what another
namespace gets, nor stop the controllers for everyone.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agentsandbox.api import keys
from agentsandbox.api.kinds import SANDBOX, SANDBOX_CLAIM, SANDBOX_TEMPLATE
from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES, SANDBOXES
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import NotFound
from agentsandbox.kube.resources import NAMESPACES
from tests.polling import eventually, stays

from .invariants import controller_process, ready_reason, wait_claims_ready

IMAGE = "example/python:1"
NESTING = 3000


def template_body(name: str = "tpl") -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_TEMPLATE.api_version,
        "kind": "SandboxTemplate",
        "metadata": {"name": name},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "main", "image": IMAGE}]}}},
    }


def claim_body(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_CLAIM.api_version,
        "kind": "SandboxClaim",
        "metadata": {"name": name},
        "spec": spec,
    }


def sandbox_body(name: str, owners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if owners:
        meta["ownerReferences"] = owners
    return {
        "apiVersion": SANDBOX.api_version,
        "kind": "Sandbox",
        "metadata": meta,
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "main", "image": IMAGE}]}}},
    }


@contextlib.asynccontextmanager
async def namespaces(client: Client, n: int) -> AsyncIterator[list[str]]:
    names = [f"t-{uuid.uuid4().hex[:10]}" for _ in range(n)]
    for ns in names:
        await client.create(NAMESPACES, {"metadata": {"name": ns}})
    try:
        yield names
    finally:
        for ns in names:
            with contextlib.suppress(NotFound):
                await client.delete(NAMESPACES, ns)


async def sandbox_ready(client: Client, name: str, ns: str) -> bool:
    return ready_reason(await client.get(SANDBOXES, name, ns))[0] == "True"


# ----------------------------------------------------------------------- the nested annotation
async def test_a_nested_migration_annotation_stops_no_controller(
    cluster: DevCluster, tmp_path: Path
) -> None:
    """security review #2: a claim with ``warmPoolRef: shadow-pool-x`` and a 3,000-deep nested
    migration annotation, then a controller restart. Before the fix the claim informer's index
    function raised RecursionError on it, the cache never synced after the restart and no
    controller started: here, within 60 s of the restart, a new plain Sandbox goes Ready and a
    new claim in another namespace goes Ready. (Up to ~70 s when it fails: the 60 s budget.)"""
    log = tmp_path / "controller.log"
    async with (
        Client.from_kubeconfig(str(cluster.kubeconfig), qps=0) as client,
        namespaces(client, 2) as (mallory, alice),
    ):
        nested = "[" * NESTING + "]" * NESTING
        hostile = claim_body("x", warmPoolRef={"name": "shadow-pool-x"})
        hostile["metadata"]["annotations"] = {keys.ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE: nested}
        await client.create(SANDBOX_TEMPLATES, template_body(), alice)
        with controller_process(cluster, log) as first:
            stored = await client.create(SANDBOX_CLAIMS, hostile, mallory)
            state = stored["metadata"]["annotations"][keys.ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE]
            assert state == nested, "the hostile annotation was not stored as written"
            await stays(  # the running controller meets the claim (its watch event)
                lambda: first.poll() is None, for_=3.0, what="the first controller running"
            )
        with controller_process(cluster, log) as second:
            await client.create(SANDBOXES, sandbox_body("plain"), mallory)
            await client.create(
                SANDBOX_CLAIMS, claim_body("c", sandboxTemplateRef={"name": "tpl"}), alice
            )
            await eventually(
                lambda: sandbox_ready(client, "plain", mallory),
                within=60,
                what="the plain Sandbox Ready after the restart",
                interval=0.5,
                ignoring=NotFound,
            )
            await wait_claims_ready(client, alice, {"c"}, within=30)
            assert second.poll() is None, "the controller exited"
