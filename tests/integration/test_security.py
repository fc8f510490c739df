"""Security, against the real control plane (issue 13, item 6).

One controller process (``agent-sandbox-controller --extensions --zap-log-level=debug``) serves
a warm pool, warm and cold claims in a namespace that also holds objects planted to mislead it:

- **forged pool sandboxes**: an orphan carrying the pool's labels (and its hashes) but another
  pod spec, and one whose owner reference names the pool but not its UID: never adopted by the
  pool nor by a claim (every version of them the watch saw is checked);
- **objects of another controller** (``controller: true`` to a ConfigMap): a Sandbox with the
  pool's labels and the template's exact pod spec, a Sandbox with the name a cold claim will
  want, a Pod with the name a Sandbox wants, the NetworkPolicy name a template wants: never
  written (the Pod's and the NetworkPolicy's resourceVersion unchanged after all that activity;
  the Sandboxes, which the Sandbox controller serves whoever controls them, keep their spec,
  labels and owner references);
- **secrets**: a random 32-character canary in a claim's ``env`` value, in claim and pod
  template annotations and in a Secret the pods read (the controller runs with admin rights, so
  it could read it): it never appears in any log line, raw or base64-encoded, although debug
  logging is on (and shown to be, by counting debug lines), nor in any Event.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import secrets
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.defaults import apply_sandbox_secure_defaults
from agentsandbox.api.hashing import name_hash, pod_template_hash, sandbox_blueprint_hash
from agentsandbox.api.kinds import SANDBOX, SANDBOX_CLAIM, SANDBOX_TEMPLATE, SANDBOX_WARM_POOL
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import NotFound
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.resources import (
    CONFIGMAPS,
    EVENTS,
    NAMESPACES,
    NETWORKPOLICIES,
    PODS,
    SECRETS,
    Resource,
)
from tests.polling import eventually, settles, stays

from .invariants import SandboxHistory, checked_history, controller_process, wait_claims_ready

IMAGE = "example/python:1"
FAKE_POOL_UID = "00000000-0000-4000-8000-000000000001"


@pytest.fixture(autouse=True)
async def claim_history(
    cluster: DevCluster, namespace: str, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of each test, checked against the claim rules at its end
    (tests/integration/invariants.py)."""
    async with checked_history(cluster, request.node.nodeid) as history:
        yield history


def template_body(name: str, canary: str) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_TEMPLATE.api_version,
        "kind": "SandboxTemplate",
        "metadata": {"name": name},
        "spec": {
            "envVarsInjectionPolicy": "Allowed",
            "podTemplate": {
                "metadata": {"annotations": {"example.com/note": canary}},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": IMAGE,
                            "env": [
                                {
                                    "name": "FROM_SECRET",
                                    "valueFrom": {
                                        "secretKeyRef": {"name": "creds", "key": "token"}
                                    },
                                }
                            ],
                        }
                    ]
                },
            },
        },
    }


def claim_body(name: str, canary: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_CLAIM.api_version,
        "kind": "SandboxClaim",
        "metadata": {"name": name, "annotations": {"example.com/api-key": canary}},
        "spec": spec,
    }


def controlled_by(owner: dict[str, Any], *, controller: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": controller,
    }


def pool_sandbox_body(
    name: str, tpl: dict[str, Any], image: str, owners: list[dict[str, Any]]
) -> dict[str, Any]:
    """A Sandbox labelled exactly as the pool labels its own (the hashes too)."""
    labels = {
        keys.LABEL_WARM_POOL_SANDBOX: name_hash("pool"),
        keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("tpl"),
        keys.LABEL_SANDBOX_POD_TEMPLATE_HASH: pod_template_hash(tpl["spec"]["podTemplate"]),
        keys.LABEL_SANDBOX_TEMPLATE_HASH: sandbox_blueprint_hash(tpl["spec"]),
    }
    pod_spec = apply_sandbox_secure_defaults(
        tpl, json.loads(json.dumps(tpl["spec"]["podTemplate"]["spec"]))
    )
    pod_spec["containers"][0]["image"] = image
    return {
        "apiVersion": SANDBOX.api_version,
        "kind": "Sandbox",
        "metadata": {"name": name, "labels": labels, "ownerReferences": owners},
        "spec": {
            "replicas": 1,
            "podTemplate": {
                "metadata": {"labels": dict(labels), **({})},
                "spec": pod_spec,
            },
        },
    }


def fingerprint(obj: dict[str, Any]) -> str:
    """What another controller's object must keep. A Pod or a NetworkPolicy: every byte (its
    resourceVersion). A Sandbox is ours to serve whoever controls it (the Sandbox controller
    writes its status and the pod-name annotation): its spec (generation), labels and owner
    references must stay."""
    meta = obj["metadata"]
    if obj.get("kind") != "Sandbox":
        return str(meta["resourceVersion"])
    return json.dumps(
        [meta.get("generation"), meta.get("labels"), meta.get("ownerReferences")], sort_keys=True
    )


async def wait_pool(client: Client, ns: str, n: int, within: float = 60) -> None:
    """The pool at ``n`` Ready sandboxes of its own (sandboxes with its labels but another
    controller live beside them here, so a label count would not do)."""

    async def at_n() -> bool:
        p = await client.get(SANDBOX_WARM_POOLS, "pool", ns)
        uid = p["metadata"]["uid"]
        own = [
            sb
            for sb in (await client.list(SANDBOXES, ns)).items
            if not sb["metadata"].get("deletionTimestamp")
            and any(
                o.get("controller") and o.get("uid") == uid
                for o in sb["metadata"].get("ownerReferences") or []
            )
        ]
        st = p.get("status") or {}
        ready = [
            sb
            for sb in own
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (sb.get("status") or {}).get("conditions") or []
            )
        ]
        assert len(own) == len(ready) == st.get("readyReplicas") == st.get("replicas") == n, (
            f"pool not at {n}: {st}, own {len(own)}"
        )
        return True

    await eventually(at_n, within=within, what=f"the pool at {n}", ignoring=AssertionError)


@dataclass
class Run:
    ns: str
    canary: str
    log: Path
    # every owner reference list each forged sandbox was ever seen with
    owners_seen: dict[str, list[list[dict[str, Any]]]] = field(default_factory=dict)
    # (kind, name) -> (fingerprint before the controller ran, after)
    versions: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    taken_claim: dict[str, Any] = field(default_factory=dict)
    event_notes: list[str] = field(default_factory=list)


FORGED = ("forged-orphan", "forged-owner")


@pytest.fixture(scope="module")
async def run(cluster: DevCluster, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Run]:
    async with Client.from_kubeconfig(str(cluster.kubeconfig), qps=0) as client:
        ns = f"t-{uuid.uuid4().hex[:10]}"
        await client.create(NAMESPACES, {"metadata": {"name": ns}})
        try:
            yield await _scenario(client, cluster, ns, tmp_path_factory.mktemp("security"))
        finally:
            with contextlib.suppress(NotFound):
                await client.delete(NAMESPACES, ns)


async def _scenario(client: Client, cluster: DevCluster, ns: str, tmp: Path) -> Run:
    canary = secrets.token_hex(16)  # 32 characters
    out = Run(ns=ns, canary=canary, log=tmp / "controller.log")
    await client.create(
        SECRETS, {"metadata": {"name": "creds"}, "stringData": {"token": canary}}, ns
    )
    other = await client.create(CONFIGMAPS, {"metadata": {"name": "other-owner"}}, ns)
    tpl = await client.create(SANDBOX_TEMPLATES, template_body("tpl", canary), ns)
    await client.create(SANDBOX_TEMPLATES, template_body("tpl2", canary), ns)
    await client.create(
        SANDBOX_WARM_POOLS,
        {
            "apiVersion": SANDBOX_WARM_POOL.api_version,
            "kind": "SandboxWarmPool",
            "metadata": {"name": "pool"},
            "spec": {"replicas": 2, "sandboxTemplateRef": {"name": "tpl"}},
        },
        ns,
    )
    # forged pool sandboxes (created in the burst below, racing the pool's own clean-up):
    # the pool's labels and hashes, another pod spec; the second's owner reference names the
    # pool but not its UID (the garbage collector soon strips such a dangling reference, the
    # unit properties cover it as it is)
    forged_orphan = pool_sandbox_body("forged-orphan", tpl, "evil/miner:1", [])
    forged_owner = pool_sandbox_body(
        "forged-owner",
        tpl,
        "evil/miner:2",
        [
            {
                "apiVersion": SANDBOX_WARM_POOL.api_version,
                "kind": "SandboxWarmPool",
                "name": "pool",
                "uid": FAKE_POOL_UID,
                "controller": True,
            },
            # a second, real owner: the garbage collector does not delete it for the fake one
            controlled_by(other, controller=False),
        ],
    )
    # objects of another controller
    foreign: list[tuple[Resource, dict[str, Any]]] = [
        (SANDBOXES, pool_sandbox_body("foreign-member", tpl, IMAGE, [controlled_by(other)])),
        (
            SANDBOXES,
            {
                "apiVersion": SANDBOX.api_version,
                "kind": "Sandbox",
                "metadata": {"name": "cold-taken", "ownerReferences": [controlled_by(other)]},
                "spec": {"podTemplate": {"spec": {"containers": [{"name": "m", "image": IMAGE}]}}},
            },
        ),
        (
            PODS,
            {
                "metadata": {"name": "plain", "ownerReferences": [controlled_by(other)]},
                "spec": {"containers": [{"name": "m", "image": IMAGE}]},
            },
        ),
        (
            NETWORKPOLICIES,
            {
                "metadata": {
                    "name": "tpl2-network-policy",
                    "ownerReferences": [controlled_by(other)],
                },
                "spec": {"podSelector": {"matchLabels": {"app": "other"}}},
            },
        ),
    ]
    for resource, body in foreign:
        await client.create(resource, body, ns)
    # the foreign Pod once the scheduler and kwok are done with it (their writes are not ours)
    await eventually(
        lambda: client.get(PODS, "plain", ns),
        accept=lambda pod: pod.get("status", {}).get("phase") == "Running",
        within=30,
        what="the foreign pod running",
    )

    async def fingerprints() -> dict[tuple[str, str], str]:
        prints: dict[tuple[str, str], str] = {}
        for resource, body in foreign:
            current = await client.get(resource, body["metadata"]["name"], ns)
            prints[(resource.kind, body["metadata"]["name"])] = fingerprint(current)
        return prints

    before = await settles(
        fingerprints, for_=0.5, within=30, what="the foreign objects left alone by the others"
    )
    # the Sandbox that wants the foreign Pod's name
    await client.create(
        SANDBOXES,
        {
            "apiVersion": SANDBOX.api_version,
            "kind": "Sandbox",
            "metadata": {"name": "plain"},
            "spec": {"podTemplate": {"spec": {"containers": [{"name": "m", "image": IMAGE}]}}},
        },
        ns,
    )

    def seen(*objs: dict[str, Any]) -> None:
        sb = objs[-1]
        name = sb["metadata"]["name"]
        if name in FORGED:
            out.owners_seen.setdefault(name, []).append(sb["metadata"].get("ownerReferences", []))

    watch = Informer(client, SANDBOXES, ns)
    watch.add_handler(seen, seen)
    watch.start()
    try:
        await asyncio.wait_for(watch.wait_synced(), 10)
        flags = ["--zap-log-level=debug", "--sandbox-warm-pool-max-batch-size=300"]
        with controller_process(cluster, out.log, flags=flags) as proc:
            await wait_pool(client, ns, 2)
            # in one burst: the forged pool sandboxes, three warm claims for two pool sandboxes
            # (the third must not settle for a forged one), a cold claim with env, and a cold
            # claim whose sandbox name is taken
            warm = {f"warm-{i}" for i in range(3)}
            bodies = [
                (SANDBOXES, forged_orphan),
                (SANDBOXES, forged_owner),
                *[
                    (SANDBOX_CLAIMS, claim_body(n, canary, warmPoolRef={"name": "pool"}))
                    for n in sorted(warm)
                ],
                (
                    SANDBOX_CLAIMS,
                    claim_body(
                        "cold",
                        canary,
                        sandboxTemplateRef={"name": "tpl"},
                        warmpool="none",
                        env=[{"name": "API_KEY", "value": canary}],
                    ),
                ),
                (
                    SANDBOX_CLAIMS,
                    claim_body(
                        "cold-taken", canary, sandboxTemplateRef={"name": "tpl"}, warmpool="none"
                    ),
                ),
            ]
            await asyncio.gather(*(client.create(r, b, ns) for r, b in bodies))
            ready = await wait_claims_ready(client, ns, {*warm, "cold"}, within=60)
            out.claims = {c["metadata"]["name"]: c for c in ready}
            out.taken_claim = await eventually(
                lambda: client.get(SANDBOX_CLAIMS, "cold-taken", ns),
                accept=lambda taken: any(
                    c["type"] == "Ready" and c["status"] == "False"
                    for c in (taken.get("status") or {}).get("conditions") or []
                ),
                within=20,
                what="cold-taken reported",
                interval=0.2,
            )
            await wait_pool(client, ns, 2)
            await stays(  # more passes over everything, the pool refilled
                lambda: proc.poll() is None, for_=2.0, what="the controller running"
            )
    finally:
        await watch.stop()
    out.event_notes = [
        f"{ev.get('reason')}: {ev.get('note')}" for ev in (await client.list(EVENTS, ns)).items
    ]
    for resource, body in foreign:
        name = body["metadata"]["name"]
        now = await client.get(resource, name, ns)
        out.versions[(resource.kind, name)] = (before[(resource.kind, name)], fingerprint(now))
    return out


def controller_kinds(owners: list[dict[str, Any]]) -> list[str]:
    return [f"{o.get('kind')}/{str(o.get('uid'))[:8]}" for o in owners if o.get("controller")]


def test_forged_pool_sandboxes_are_never_adopted(run: Run) -> None:
    for name in FORGED:
        history = run.owners_seen.get(name)
        assert history, f"the watch never saw {name}"
        for owners in history:
            kinds = {(o.get("kind"), o.get("uid")) for o in owners if o.get("controller")}
            assert ("SandboxClaim",) not in {(k,) for k, _ in kinds}, f"a claim adopted {name}"
            assert not any(k == "SandboxWarmPool" and uid != FAKE_POOL_UID for k, uid in kinds), (
                f"the pool adopted {name}: {owners}"
            )
    print(
        "\nforged sandboxes: "
        + ", ".join(
            f"{name} seen {len(h)}x, controllers {[controller_kinds(o) for o in h]}"
            for name, h in run.owners_seen.items()
        )
    )
    served = {c["status"]["sandbox"]["name"] for c in run.claims.values()}
    assert not served & set(FORGED), served
    assert len(served) == len(run.claims) == 4


def test_objects_of_another_controller_are_never_written(run: Run) -> None:
    changed = {key: rv for key, rv in run.versions.items() if rv[0] != rv[1]}
    assert changed == {}, f"written by the controller: {changed}"
    assert len(run.versions) == 4
    # the claim whose sandbox name was taken says so, and did not take it
    cond = next(c for c in run.taken_claim["status"]["conditions"] if c["type"] == "Ready")
    assert cond["reason"] == "ReconcilerError"
    assert 'sandbox "cold-taken" is not controlled by claim "cold-taken"' in cond["message"]


def test_no_secret_in_any_log_line(run: Run) -> None:
    text = run.log.read_text(errors="replace")
    lines = text.splitlines()
    debug = [ln for ln in lines if '"level":"debug"' in ln]
    assert len(debug) >= 20, f"debug logging is not on ({len(debug)} debug lines)"
    forms = {
        run.canary,
        base64.b64encode(run.canary.encode()).decode(),
        run.canary.upper(),
    }
    leaks = [ln for ln in lines for form in forms if form in ln]
    assert leaks == [], f"{len(leaks)} log lines carry the canary, e.g. {leaks[0][:300]}"
    # Events are read by more people than logs: none of ours repeats the canary either
    assert len(run.event_notes) >= 5
    assert [n for n in run.event_notes if any(f in n for f in forms)] == []
    print(
        f"\n{len(lines)} log lines ({len(debug)} debug), {len(run.event_notes)} events, no canary"
    )
