"""Hostile tenants, against the real control plane and the controller in its own process.

A namespace editor may create SandboxClaims; in many installs a namespace user may create
Sandboxes too. Nothing such a user writes in their own namespace may change what another
namespace gets, nor stop the controllers for everyone.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentsandbox.api import keys
from agentsandbox.api.kinds import SANDBOX, SANDBOX_CLAIM, SANDBOX_TEMPLATE, SANDBOX_WARM_POOL
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.devcluster.cluster import DevCluster, free_port
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import NotFound
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.resources import CONFIGMAPS, NAMESPACES
from tests.polling import eventually, stays

from .invariants import (
    SandboxHistory,
    checked_history,
    controller_process,
    ready_reason,
    wait_claims_ready,
    wait_ready_pool,
)

IMAGE = "example/python:1"
NESTING = 3000


@pytest.fixture(autouse=True)
async def claim_history(
    cluster: DevCluster, namespace: str, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of each test, checked against the claim rules at its end
    (tests/integration/invariants.py)."""
    async with checked_history(cluster, request.node.nodeid) as history:
        yield history


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


# ----------------------------------------------------------------------- forged owners
CLAIMS = ("x0", "x1", "x2", "x3")
LATE = "late"  # a claim first served while the attack runs
LATE_ROUND = 3
FORGE_SECONDS = 5.0  # per controller process: 10 s in all
CADENCE = 0.2


def owner(obj: dict[str, Any], *, controller: bool) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": controller,
    }


def sandbox_of(claim: dict[str, Any]) -> dict[str, Any]:
    return dict((claim.get("status") or {}).get("sandbox") or {})


def controller_uid(obj: dict[str, Any]) -> str | None:
    refs = obj["metadata"].get("ownerReferences") or []
    return next((r.get("uid") for r in refs if r.get("controller")), None)


@contextlib.contextmanager
def garbage_collector_paused(cluster: DevCluster) -> Iterator[None]:
    """kube-controller-manager (the garbage collector) stopped with SIGSTOP, resumed at exit."""
    component = cluster.components["kube-controller-manager"]
    assert component.proc is not None, "the session's control plane was not started by us"
    os.kill(component.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(component.proc.pid, signal.SIGCONT)


async def test_forged_owners_in_another_namespace_change_nothing(
    cluster: DevCluster, tmp_path: Path
) -> None:
    """security review #1: a user in namespace B re-applies, every 200 ms for 10 s, Sandboxes
    whose controller reference names a claim of namespace A by its UID (with a second, valid
    owner in B, a ConfigMap, so the garbage collector would keep the sandbox), and one naming
    A's warm pool; A's claims are touched every round and the controller restarts once. Every
    version of each claim seen keeps its sandbox (name and UID) and never shows B's pod IPs; a
    claim of A first served during the attack gets a sandbox of its own in A; no sandbox of A
    is created or deleted; the pool's status and members stay.

    The garbage collector strips a cross-namespace owner reference within milliseconds, so an
    attacker re-applying it wins only part of the time; this test takes the timing out of it
    (no real-time luck): kube-controller-manager is paused (SIGSTOP) while the attack runs, as
    if every re-apply landed before the collector's strip. With that, the code before the fix
    (a controller-UID index without the namespace) fails deterministically: the claim served
    during the attack names B's sandbox and pod IPs. Four claims served before, because which
    of two "owned" sandboxes such code kept was the order of a set of keys.
    Runs ~30-40 s: the claims and the pool made Ready, 10 s of forging, two controller
    start-ups and a quiet period after."""
    log = tmp_path / "controller.log"
    async with (
        Client.from_kubeconfig(str(cluster.kubeconfig), qps=0) as client,
        namespaces(client, 2) as (alice, mallory),
        contextlib.AsyncExitStack() as watching,
    ):
        await client.create(SANDBOX_TEMPLATES, template_body(), alice)
        pool = await client.create(
            SANDBOX_WARM_POOLS,
            {
                "apiVersion": SANDBOX_WARM_POOL.api_version,
                "kind": "SandboxWarmPool",
                "metadata": {"name": "pool"},
                "spec": {"replicas": 1, "sandboxTemplateRef": {"name": "tpl"}},
            },
            alice,
        )
        anchor = await client.create(CONFIGMAPS, {"metadata": {"name": "anchor"}}, mallory)
        anchor = {**anchor, "apiVersion": "v1", "kind": "ConfigMap"}
        claim_versions: list[tuple[str, Any]] = []
        alice_events: list[tuple[str, str, str]] = []  # (event, name, uid)
        pool_replicas: list[Any] = []
        forged_seen: list[str] = []  # names of B sandboxes seen carrying a forged controller
        b_pod_ips: set[str] = set()  # every pod IP a sandbox of B ever showed
        watches = [
            Informer(client, SANDBOX_CLAIMS, alice),
            Informer(client, SANDBOXES, alice),
            Informer(client, SANDBOX_WARM_POOLS, alice),
            Informer(client, SANDBOXES, mallory),
        ]
        with controller_process(cluster, log) as first:
            for name in CLAIMS:
                await client.create(
                    SANDBOX_CLAIMS,
                    claim_body(name, sandboxTemplateRef={"name": "tpl"}, warmpool="none"),
                    alice,
                )
            claims = {
                c["metadata"]["name"]: c
                for c in await wait_claims_ready(client, alice, set(CLAIMS), within=60)
            }
            # served only once the attack is on: its template comes during the forging
            late = await client.create(
                SANDBOX_CLAIMS,
                claim_body(LATE, sandboxTemplateRef={"name": "tpl-late"}, warmpool="none"),
                alice,
            )
            members = await wait_ready_pool(client, alice, "pool", 1)
            baseline = {n: c["status"]["sandbox"] for n, c in claims.items()}
            assert all(sb.get("podIPs") for sb in baseline.values()), baseline
            own = {n: (await client.get(SANDBOXES, n, alice))["metadata"]["uid"] for n in CLAIMS}
            member_uids = {m["metadata"]["uid"] for m in members}
            forged = {
                name: sandbox_body(
                    name, [owner(claims[name], controller=True), owner(anchor, controller=False)]
                )
                for name in CLAIMS
            }
            forged[LATE] = sandbox_body(
                LATE, [owner(late, controller=True), owner(anchor, controller=False)]
            )
            forged["pool"] = sandbox_body(
                "pool", [owner(pool, controller=True), owner(anchor, controller=False)]
            )
            forged_uids = {c["metadata"]["uid"] for c in [*claims.values(), late]} | {
                pool["metadata"]["uid"]
            }

            watches[0].add_handler(
                lambda c: claim_versions.append((c["metadata"]["name"], sandbox_of(c))),
                lambda _, c: claim_versions.append((c["metadata"]["name"], sandbox_of(c))),
            )
            watches[1].add_handler(
                None,
                None,
                lambda sb: alice_events.append(
                    ("DELETED", sb["metadata"]["name"], sb["metadata"]["uid"])
                ),
            )
            watches[2].add_handler(
                None, lambda _, p: pool_replicas.append((p.get("status") or {}).get("replicas"))
            )

            def on_forged(*objs: dict[str, Any]) -> None:
                b_pod_ips.update((objs[-1].get("status") or {}).get("podIPs") or ())
                if controller_uid(objs[-1]) in forged_uids:
                    forged_seen.append(objs[-1]["metadata"]["name"])

            watches[3].add_handler(on_forged, on_forged)
            for w in watches:
                await watching.enter_async_context(w)  # started; stopped at the end
            for w in watches:
                await w.wait_synced()
            known = {sb["metadata"]["uid"] for sb in watches[1].list()}
            watches[1].add_handler(
                lambda sb: (
                    None
                    if sb["metadata"]["uid"] in known
                    else alice_events.append(
                        ("ADDED", sb["metadata"]["name"], sb["metadata"]["uid"])
                    )
                )
            )
            rounds = itertools.count()

            async def forge() -> bool:
                """One round of the attack: the forged owners back, every claim touched."""
                i = next(rounds)
                for name, body in forged.items():
                    try:
                        current = await client.get(SANDBOXES, name, mallory)
                    except NotFound:
                        await client.create(SANDBOXES, body, mallory)
                        continue
                    if controller_uid(current) not in forged_uids:
                        refs = body["metadata"]["ownerReferences"]
                        await client.patch(
                            SANDBOXES, name, {"metadata": {"ownerReferences": refs}}, mallory
                        )
                for name in CLAIMS:
                    touch = {"metadata": {"annotations": {"example.com/touched": str(i)}}}
                    await client.patch(SANDBOX_CLAIMS, name, touch, alice)
                if i == LATE_ROUND:  # B's forged sandboxes are in every cache by now
                    await client.create(SANDBOX_TEMPLATES, template_body("tpl-late"), alice)
                return True

            with garbage_collector_paused(cluster):
                await stays(forge, for_=FORGE_SECONDS, interval=CADENCE, what="forging")
            assert first.poll() is None, "the first controller exited"
        with controller_process(cluster, log) as second:
            with garbage_collector_paused(cluster):
                await stays(forge, for_=FORGE_SECONDS, interval=CADENCE, what="forging")
            await stays(  # a quiet period: the restarted controller has passed over all
                lambda: second.poll() is None, for_=3.0, what="the controller running"
            )
            (late_now,) = await wait_claims_ready(client, alice, {LATE}, within=30)
        now = {sb["metadata"]["name"]: sb for sb in (await client.list(SANDBOXES, alice)).items}
        replaced = [n for n in CLAIMS if n not in now or now[n]["metadata"]["uid"] != own[n]]
        assert replaced == [], f"claim sandboxes of A deleted or replaced: {replaced}"
        pool_now = await client.get(SANDBOX_WARM_POOLS, "pool", alice)
        print(
            f"\n{next(rounds)} forging rounds, {len(forged_seen)} forged versions seen, "
            f"{len(claim_versions)} claim versions, {len(pool_replicas)} pool versions"
        )
        assert set(forged_seen) >= {*CLAIMS, "pool"}, f"the attack never landed: {forged_seen}"
        wrong = [(n, sb) for n, sb in claim_versions if n != LATE and sb != baseline[n]]
        assert wrong == [], f"claim status changed: {wrong[:3]}"
        assert b_pod_ips, "B's sandboxes never got pod IPs: the attack had nothing to leak"
        leaked = [(n, sb) for n, sb in claim_versions if set(sb.get("podIPs") or ()) & b_pod_ips]
        assert leaked == [], f"a claim of A showed the pod IPs of B's sandbox: {leaked[:3]}"
        mine = await client.get(SANDBOXES, late_now["status"]["sandbox"]["name"], alice)
        assert controller_uid(mine) == late["metadata"]["uid"], mine["metadata"]
        assert len(claim_versions) >= len(CLAIMS) * 10  # the touches were seen
        created_late = [("ADDED", LATE, mine["metadata"]["uid"])]
        assert alice_events == created_late, f"sandboxes of A created or deleted: {alice_events}"
        assert set(pool_replicas) <= {1}, pool_replicas
        assert pool_now["status"]["replicas"] == 1
        still = {
            sb["metadata"]["uid"]
            for sb in now.values()
            if controller_uid(sb) == pool["metadata"]["uid"]
        }
        assert still == member_uids, (still, member_uids)


# ----------------------------------------------------------------------- a name held Terminating
HOLD = "example.com/hold"
PENDING_SECONDS = 10.0


def conflicting_posts(port: int) -> float:
    """POSTs the controller got 409 (AlreadyExists) for, from its own /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "rest_client_requests_total"
        and sample.labels.get("method") == "POST"
        and sample.labels.get("code") == "409"
    )


async def test_a_claim_whose_name_is_held_terminating_waits_with_backoff(
    cluster: DevCluster, tmp_path: Path
) -> None:
    """security review #9: a Sandbox ``x`` held Terminating by a finalizer (any editor can do
    this), then claim ``x``. Before the fix the claim was re-queued every 0.2 s forever (a POST
    answered 409, then a GET, five times a second: ~50 POSTs in 10 s); now with the work
    queue's exponential backoff: at most 20 in 10 s. Once the finalizer is removed the claim is
    served within 10 s (the Sandbox's deletion event re-queues it, whatever the backoff). Runs
    ~25 s: the 10 s window measured, the controller start and the claim served after."""
    port = free_port()
    async with (
        Client.from_kubeconfig(str(cluster.kubeconfig), qps=0) as client,
        namespaces(client, 1) as (ns,),
    ):
        await client.create(SANDBOX_TEMPLATES, template_body(), ns)
        held = sandbox_body("x")
        held["metadata"]["finalizers"] = [HOLD]
        await client.create(SANDBOXES, held, ns)
        await client.delete(SANDBOXES, "x", ns)
        with controller_process(cluster, tmp_path / "controller.log", port) as proc:
            await eventually(
                lambda: conflicting_posts(port) >= 0,
                within=30,
                what="the controller serving /metrics",
                ignoring=OSError,
            )
            await client.create(
                SANDBOX_CLAIMS, claim_body("x", sandboxTemplateRef={"name": "tpl"}), ns
            )
            first = await eventually(
                lambda: conflicting_posts(port),
                within=30,
                what="the first create refused (AlreadyExists)",
            )
            await stays(
                lambda: proc.poll() is None, for_=PENDING_SECONDS, what="the controller running"
            )
            posts = conflicting_posts(port) - first
            claim = await client.get(SANDBOX_CLAIMS, "x", ns)
            assert ready_reason(claim) == ("False", "SandboxCreatePending"), claim.get("status")
            print(f"\n{posts:.0f} conflicting POSTs in {PENDING_SECONDS:.0f} s after the first")
            assert posts <= 20, f"{posts} POSTs in {PENDING_SECONDS} s: polled, not backed off"
            await client.patch(SANDBOXES, "x", {"metadata": {"finalizers": None}}, ns)
            await wait_claims_ready(client, ns, {"x"}, within=10)
