"""Taking over from upstream's controller (docs/migrating.md) against the real control plane.

The objects upstream's controller left behind are literal YAML in ``tests/testdata/upstream/``,
label values included (written as data, never computed here): a template, a pool of 20 (10
sandboxes as upstream 35b9757f wrote them, 10 as today's upstream writes them), and a claim made
by a 0.4.x client, stored by upstream's conversion webhook (``shadow-pool-<template>`` + the
v1alpha1 state annotation) and bound to a sandbox upstream adopted for it. Only UIDs (which
cannot be literal) and the namespace are filled in. Then our controllers start, and must take all
of it over with no churn: the pool Ready at 20 with **no write to any sandbox beyond its status**
(no create, no delete, no update or patch of the object itself), the claim still bound to its
sandbox, Ready.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentsandbox.api import keys
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.kube.client import Client
from agentsandbox.kube.resources import Resource
from tests.polling import eventually, stays

from .invariants import SandboxHistory, checked_history
from .test_claims import controllers

TESTDATA = Path(__file__).resolve().parents[1] / "testdata" / "upstream"
PLACEHOLDER = "FILLED-BY-TEST"
CLAIM_CRD_FILE = "extensions.agents.x-k8s.io_sandboxclaims.yaml"


@pytest.fixture(autouse=True)
async def claim_history(
    cluster: DevCluster, namespace: str, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of each test, checked against the claim rules at its end
    (tests/integration/invariants.py)."""
    async with checked_history(cluster, request.node.nodeid) as history:
        yield history


def load(name: str) -> list[dict[str, Any]]:
    with open(TESTDATA / name) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def fill(obj: Any, value: str) -> Any:
    """``obj`` with every ``FILLED-BY-TEST`` string replaced by ``value``."""
    if isinstance(obj, dict):
        return {k: fill(v, value) for k, v in obj.items()}
    if isinstance(obj, list):
        return [fill(v, value) for v in obj]
    return value if obj == PLACEHOLDER else obj


# where each Client write method takes its namespace when it is passed positionally
NAMESPACE_ARG = {"create": 1, "update": 1, "patch": 2, "delete": 1, "delete_collection": 0}


class WriteCounter:
    """Counts the client's writes by (verb, plural, subresource, namespace) while installed.
    The in-process controllers also serve what earlier tests left behind (pools in namespaces
    being torn down keep trying to create), so counts are read per namespace."""

    def __init__(self, client: Client) -> None:
        self.counts: Counter[tuple[str, str, str, str]] = Counter()
        for verb in ("create", "update", "patch", "apply", "delete", "delete_collection"):
            setattr(client, verb, self._wrap(verb, getattr(client, verb)))

    def _wrap(self, verb: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def call(resource: Resource, *args: Any, **kwargs: Any) -> Any:
            ns = kwargs.get("namespace")
            if ns is None and verb == "apply" and args and isinstance(args[0], dict):
                ns = args[0].get("metadata", {}).get("namespace")
            elif ns is None and len(args) > NAMESPACE_ARG.get(verb, 99):
                ns = args[NAMESPACE_ARG[verb]]
            sub = kwargs.get("subresource") or ""
            self.counts[(verb, resource.plural, sub, str(ns or ""))] += 1
            return await fn(resource, *args, **kwargs)

        return call

    def of(self, plural: str, namespace: str) -> dict[tuple[str, str], int]:
        return {
            (v, sub): n
            for (v, p, sub, ns), n in self.counts.items()
            if p == plural and ns == namespace
        }


async def churn_watch(
    client: Client,
    namespace: str,
    resource_version: str,
    before: dict[str, dict[str, Any]],
    versions: dict[str, str],
) -> list[tuple[str, str]]:
    """Watch the namespace's sandboxes from ``resource_version`` until cancelled; return
    ``(kind, name)`` per event: ``status`` for a change of the status only, else ``added``,
    ``deleted`` or ``rewritten`` (the object itself changed). ``versions`` follows the last
    resourceVersion seen of each sandbox."""
    seen: list[tuple[str, str]] = []
    last = dict(before)
    try:
        async for ev in client.watch(SANDBOXES, namespace, resource_version=resource_version):
            if ev.type == "BOOKMARK":
                continue
            name = ev.object["metadata"]["name"]
            versions[name] = ev.object["metadata"]["resourceVersion"]
            now = identity(ev.object)
            if ev.type == "ADDED":
                seen.append(("added", name))
            elif ev.type == "DELETED":
                seen.append(("deleted", name))
            elif last.get(name) != now:
                seen.append(("rewritten", name))
            else:
                seen.append(("status", name))
            last[name] = now
    except asyncio.CancelledError:
        pass
    return seen


def identity(sb: dict[str, Any]) -> dict[str, Any]:
    """What a takeover must leave alone: the object itself (not its status)."""
    meta = sb["metadata"]
    return {
        "uid": meta["uid"],
        "generation": meta.get("generation"),
        "labels": meta.get("labels"),
        "annotations": meta.get("annotations"),
        "ownerReferences": meta.get("ownerReferences"),
        "finalizers": meta.get("finalizers"),
        "spec": sb.get("spec"),
    }


async def identities(client: Client, namespace: str) -> dict[str, dict[str, Any]]:
    return {
        sb["metadata"]["name"]: identity(sb)
        for sb in (await client.list(SANDBOXES, namespace)).items
    }


def ready_condition(obj: dict[str, Any]) -> dict[str, Any]:
    conds = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == "Ready"), {})


async def leave_upstream_objects(client: Client, namespace: str) -> dict[str, str]:
    """Create what upstream's controller left (its Deployment scaled to 0 already): the template,
    the pool (status empty), its 20 sandboxes, and the bound migrated claim with its sandbox."""
    (template,) = load("template.yaml")
    (pool,) = load("warmpool.yaml")
    pool_sandboxes = load("sandboxes.yaml")
    claim, claimed = load("claimed.yaml")
    assert len(pool_sandboxes) == 20
    await client.create(SANDBOX_TEMPLATES, template, namespace)
    created_pool = await client.create(SANDBOX_WARM_POOLS, pool, namespace)
    assert not created_pool.get("status")
    pool_uid = created_pool["metadata"]["uid"]
    await asyncio.gather(
        *(client.create(SANDBOXES, fill(sb, pool_uid), namespace) for sb in pool_sandboxes)
    )
    claim_status = claim.pop("status")
    created_claim = await client.create(SANDBOX_CLAIMS, claim, namespace)
    claim_name, claim_uid = created_claim["metadata"]["name"], created_claim["metadata"]["uid"]
    await client.patch(
        SANDBOX_CLAIMS, claim_name, {"status": claim_status}, namespace, subresource="status"
    )
    await client.create(SANDBOXES, fill(claimed, claim_uid), namespace)
    assert claim_status["sandbox"]["name"] == claimed["metadata"]["name"]
    return {
        "pool": pool["metadata"]["name"],
        "pool_uid": pool_uid,
        "claim": claim_name,
        "claim_uid": claim_uid,
        "claimed": claimed["metadata"]["name"],
    }


async def pool_ready(client: Client, namespace: str, name: str) -> Any:
    p = await client.get(SANDBOX_WARM_POOLS, name, namespace)
    status = p.get("status") or {}
    return status.get("replicas") == 20 and status.get("readyReplicas") == 20 and status


async def test_takeover_of_an_upstream_pool_of_20_and_a_migrated_claim_with_no_churn(
    client: Client,
    namespace: str,
) -> None:
    left = await leave_upstream_objects(client, namespace)
    pool_uid, claim_name, claim_uid = left["pool_uid"], left["claim"], left["claim_uid"]
    claimed_name = left["claimed"]

    listed = await client.list(SANDBOXES, namespace)
    before = {sb["metadata"]["name"]: identity(sb) for sb in listed.items}
    assert len(before) == 21
    # every writer's changes to this namespace's sandboxes, from the listed version on (a watch
    # is namespace-scoped; the apiserver's request counter is cluster-wide and counted other
    # tests' teardown)
    versions = {sb["metadata"]["name"]: sb["metadata"]["resourceVersion"] for sb in listed.items}
    changes = asyncio.create_task(
        churn_watch(client, namespace, listed.resource_version, before, versions)
    )

    # --- our controllers take over
    writes = WriteCounter(client)
    async with controllers(client):

        def pool_is_ready() -> Awaitable[Any]:
            return pool_ready(client, namespace, left["pool"])

        await eventually(pool_is_ready, within=90, what="the taken-over pool at 20 Ready")

        async def claim_ready() -> Any:
            c = await client.get(SANDBOX_CLAIMS, claim_name, namespace)
            bound = (c.get("status") or {}).get("sandbox", {}).get("name")
            return bound == claimed_name and ready_condition(c).get("status") == "True" and c

        migrated = await eventually(
            claim_ready, within=60, what="the migrated claim bound and Ready"
        )
        # a quiet while: nothing more is done to the sandboxes once everything is Ready
        await stays(
            lambda: identities(client, namespace),
            accept=lambda now: now == before,
            for_=3,
            what="the sandboxes left alone",
        )
        await eventually(pool_is_ready, within=10, what="the pool still at 20 Ready")

    # the claim kept its stored form: our conversion is None, nothing rewrote it
    assert migrated["spec"]["warmPoolRef"] == {"name": "shadow-pool-python-runtime"}
    assert keys.ANNOTATION_V1ALPHA1_SANDBOXCLAIM_STATE in migrated["metadata"]["annotations"]
    assert ready_condition(migrated)["reason"] != "WarmPoolNotFound"

    after_list = (await client.list(SANDBOXES, namespace)).items
    after = {sb["metadata"]["name"]: identity(sb) for sb in after_list}
    assert after == before, "a sandbox was created, deleted or rewritten"
    for sb in after_list:
        assert ready_condition(sb).get("status") == "True", sb["metadata"]["name"]

    # our client: status writes only
    mine = writes.of(SANDBOXES.plural, namespace)
    assert {k: n for k, n in mine.items() if k[1] != "status"} == {}, mine
    assert set(mine) <= {("patch", "status"), ("update", "status"), ("apply", "status")}, mine
    # every writer (the watch): no sandbox added or deleted, none changed beyond its status

    async def watch_caught_up() -> bool:
        listed = (await client.list(SANDBOXES, namespace)).items
        return all(
            versions.get(sb["metadata"]["name"]) == sb["metadata"]["resourceVersion"]
            for sb in listed
        )

    await eventually(watch_caught_up, within=10, what="the watch to see everything up to now")
    changes.cancel()
    seen = await changes
    churn = [c for c in seen if c[0] != "status"]
    assert churn == [], churn
    status_writes = sum(1 for c in seen if c[0] == "status")
    print(f"\ntakeover: sandbox writes by our client {dict(mine)}; watch saw {status_writes}")
    assert status_writes >= 20  # each pool sandbox got our Ready status
    # the claim never got another sandbox, nor a cold one
    owners = Counter(
        ref.get("uid")
        for sb in after_list
        for ref in sb["metadata"].get("ownerReferences") or []
        if ref.get("controller")
    )
    assert owners == Counter({pool_uid: 20, claim_uid: 1})
    assert after[claimed_name]["ownerReferences"][0]["uid"] == claim_uid


async def test_unbound_shadow_pool_claims_are_served_as_their_v1alpha1_form_after_takeover(
    client: Client,
    namespace: str,
) -> None:
    """Claims upstream's webhook stored but upstream's controller never served: ``default``
    adopts a sandbox of a pool of its template, ``none`` starts cold; neither is ever reported
    ``WarmPoolNotFound`` (there is no pool ``shadow-pool-python-runtime``)."""
    left = await leave_upstream_objects(client, namespace)
    pool_names = {sb["metadata"]["name"] for sb in load("sandboxes.yaml")}
    async with controllers(client):
        await eventually(
            lambda: pool_ready(client, namespace, left["pool"]),
            within=90,
            what="the pool at 20 Ready",
        )
        reasons: dict[str, set[str]] = {}
        for claim in load("unbound-claims.yaml"):
            await client.create(SANDBOX_CLAIMS, claim, namespace)

        async def both_ready() -> Any:
            got = {}
            for name in ("agent-session-2", "agent-session-3"):
                c = await client.get(SANDBOX_CLAIMS, name, namespace)
                cond = ready_condition(c)
                reasons.setdefault(name, set()).add(str(cond.get("reason")))
                if cond.get("status") != "True":
                    return False
                got[name] = c["status"]["sandbox"]["name"]
            return got

        bound = await eventually(both_ready, within=60, what="both migrated claims Ready")
    assert bound["agent-session-2"] in pool_names  # warm, from the taken-over pool
    assert bound["agent-session-3"] == "agent-session-3"  # cold, named after the claim
    assert not any("WarmPoolNotFound" in r for r in reasons.values()), reasons
    sb = await client.get(SANDBOXES, bound["agent-session-2"], namespace)
    assert sb["metadata"]["labels"][keys.LABEL_LAUNCH_TYPE] == keys.LAUNCH_TYPE_WARM


def test_documented_crd_replacement_turns_a_webhook_conversion_into_none(
    cluster: DevCluster, tmp_path: Path
) -> None:
    """docs/migrating.md step 3 on a copy of our claim CRD under a throwaway group (the real CRDs
    serve the rest of the session): installed the way upstream's installer does it (its own
    field manager, ``conversion: Webhook``, both versions in ``storedVersions``), our apply alone
    is refused while the ``webhook`` block stays; the documented JSON patch + apply switch it to
    ``None`` and keep ``storedVersions``."""
    repo = Path(__file__).resolve().parents[2]
    (ours,) = [
        d for d in yaml.safe_load_all((repo / "deploy/crds" / CLAIM_CRD_FILE).read_text()) if d
    ]
    group = "migration-check.example.com"
    ours["metadata"]["name"] = f"{ours['spec']['names']['plural']}.{group}"
    ours["spec"]["group"] = group
    name = ours["metadata"]["name"]
    theirs = copy.deepcopy(ours)
    theirs["spec"]["conversion"] = {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {
                "service": {
                    "name": "agent-sandbox-webhook-service",
                    "namespace": "agent-sandbox-system",
                    "path": "/convert",
                    "port": 443,
                }
            },
            "conversionReviewVersions": ["v1", "v1beta1"],
        },
    }
    (tmp_path / "theirs.yaml").write_text(yaml.safe_dump(theirs))
    (tmp_path / "ours.yaml").write_text(yaml.safe_dump(ours))
    patch = '[{"op":"replace","path":"/spec/conversion","value":{"strategy":"None"}}]'
    try:
        cluster.kubectl(
            "apply",
            "--server-side",
            "--field-manager=upstream-installer",
            "-f",
            str(tmp_path / "theirs.yaml"),
        )
        cluster.kubectl(
            "patch",
            "crd",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            '{"status":{"storedVersions":["v1alpha1","v1beta1"]}}',
        )
        refused = cluster.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            str(tmp_path / "ours.yaml"),
            check=False,
        )
        assert refused.returncode != 0
        assert "webhook" in refused.stderr, refused.stderr
        cluster.kubectl("patch", "crd", name, "--type=json", "-p", patch)
        cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", str(tmp_path / "ours.yaml")
        )
        got = json.loads(cluster.kubectl("get", "crd", name, "-o", "json").stdout)
        assert got["spec"]["conversion"] == {"strategy": "None"}
        assert got["status"]["storedVersions"] == ["v1alpha1", "v1beta1"]
        assert [(v["name"], v["served"], v["storage"]) for v in got["spec"]["versions"]] == [
            ("v1beta1", True, True),
            ("v1alpha1", True, False),
        ]
    finally:
        cluster.kubectl("delete", "crd", name, "--ignore-not-found", check=False)
