"""Other writers on our objects while the controllers run (issue 13, item 4).

A second client edits the same pool, claim and sandboxes the controllers are writing: labels and
annotations on all of them, and spec fields the controllers do not own (the pool's replicas and
update strategy, the claim's lifecycle, a sandbox's shutdown time), as fast as it can for a few
seconds. Every value the writer sets carries a counter that only grows, and a watch sees every
version of every object, so a controller that wrote back a stale copy (a lost update) or dropped
a key it does not own would show as a counter going down or a key disappearing.

Every fifth round it also writes lies into our status (pool replicas 999, the claim's sandbox
"bogus" with a made-up IP).

Then: no crash, everything converges (the pool at the replicas the writer left, all Ready, its
status true again; the claim still Ready on the sandbox it had, its status true again), and
every key of the writer is still there with its last value. Our own writes go where
docs/design/architecture.md, "How each controller writes", puts them: pool status by server-side
apply on ``/status``, claim status by a JSON merge patch on ``/status``, adoption by a merge patch
with a resourceVersion precondition, so none of them can carry stale copies of another writer's
fields.

A writer that removes a key we own (the pool label of a member) gets the member replaced; the
stripped sandbox is released by the pool (it used to leak; docs/design/warmpool.md, "Sorting the
members").
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.controllers.claim import controller as claim_controller
from agentsandbox.controllers.sandbox import controller as sandbox_controller
from agentsandbox.controllers.warmpool import controller as warmpool
from agentsandbox.controllers.warmpool.plan import Settings
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import Conflict, NotFound
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.resources import NAMESPACES, Resource
from tests.polling import eventually

from .invariants import SandboxHistory, checked_history, wait_claims_ready
from .runtime_helpers import running, sample
from .test_warmpool import pool_obj, template_obj

LABEL = "example.com/edited"  # a label key we do not own
NOTE = "example.com/note"  # an annotation key we do not own
LABEL_POOL = keys.LABEL_WARM_POOL_SANDBOX  # a label we own
EDIT_SECONDS = 5.0
FAR = dt.datetime(2099, 1, 1, tzinfo=dt.UTC)
FORGED_IP = "192.0.2.1"
OTHER_WRITER = "other-writer"


@pytest.fixture(autouse=True)
async def claim_history(
    cluster: DevCluster, namespace: str, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of each test, checked against the claim rules at its end
    (tests/integration/invariants.py)."""
    async with checked_history(cluster, request.node.nodeid) as history:
        yield history


def stamp(i: int) -> str:
    return (FAR + dt.timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%SZ")


def counter(obj: dict[str, Any]) -> dict[str, int]:
    """The writer's counters visible on ``obj``: label, annotation, spec field."""
    meta = obj["metadata"]
    out: dict[str, int] = {}
    if LABEL in (meta.get("labels") or {}):
        out["label"] = int(meta["labels"][LABEL].removeprefix("v"))
    if NOTE in (meta.get("annotations") or {}):
        out["annotation"] = int(meta["annotations"][NOTE])
    spec = obj.get("spec") or {}
    when = spec.get("shutdownTime") or (spec.get("lifecycle") or {}).get("shutdownTime")
    if when:
        parsed = dt.datetime.strptime(when, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
        out["spec"] = int((parsed - FAR).total_seconds())
    return out


class Witness:
    """Watches one kind; records every time a writer's counter went down or vanished."""

    def __init__(self, client: Client, resource: Resource, ns: str) -> None:
        self.informer = Informer(client, resource, ns)
        self.informer.add_handler(None, self.on_update)
        self.kind = resource.kind
        self.regressions: list[str] = []
        self.updates = 0
        self.high: dict[str, dict[str, int]] = {}

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.updates += 1
        name = new["metadata"]["name"]
        if new["metadata"].get("deletionTimestamp"):
            return
        before, after = counter(old), counter(new)
        for key, value in before.items():
            if key not in after:
                self.regressions.append(f"{self.kind} {name}: {key} {value} dropped")
            elif after[key] < value:
                self.regressions.append(f"{self.kind} {name}: {key} {value} -> {after[key]}")


@pytest.fixture(scope="module")
async def manager(module_client: Client) -> AsyncIterator[Manager]:
    """The Sandbox, pool and claim controllers, one set for the module."""
    mgr = Manager(module_client)
    sandbox_controller.setup(mgr, 4, "cluster.local")
    warmpool.setup(mgr, Settings(), workers=2)
    claim_controller.setup(mgr, workers=4)
    async with running(mgr) as task:
        await asyncio.wait_for(mgr.wait_started(), 20)
        yield mgr
        assert not task.done(), "the manager stopped while others wrote"


@contextlib.asynccontextmanager
async def namespace_of(client: Client) -> AsyncIterator[str]:
    ns = f"t-{uuid.uuid4().hex[:10]}"
    await client.create(NAMESPACES, {"metadata": {"name": ns}})
    try:
        yield ns
    finally:
        with contextlib.suppress(NotFound):
            await client.delete(NAMESPACES, ns)


async def writer(client: Client, ns: str, stop: float, edits: dict[str, int]) -> None:
    """Edit the pool, the claim and every sandbox of the namespace in turn until ``stop``."""
    i = 0
    while time.monotonic() < stop:
        i += 1
        meta = {"labels": {LABEL: f"v{i}"}, "annotations": {NOTE: str(i)}}
        pool_spec: dict[str, Any] = {
            "replicas": 3 + i % 2,  # 3, 4, 3, ...: the pool scales under its feet
            "updateStrategy": {"type": "Recreate" if i % 3 else "OnReplenish"},
        }
        writes: list[tuple[Resource, str, dict[str, Any]]] = [
            (SANDBOX_WARM_POOLS, "pool", {"metadata": meta, "spec": pool_spec}),
            (
                SANDBOX_CLAIMS,
                "c",
                {"metadata": meta, "spec": {"lifecycle": {"shutdownTime": stamp(i)}}},
            ),
        ]
        for sb in (await client.list(SANDBOXES, ns)).items:
            if sb["metadata"].get("deletionTimestamp"):
                continue
            writes.append(
                (
                    SANDBOXES,
                    sb["metadata"]["name"],
                    {"metadata": meta, "spec": {"shutdownTime": stamp(i)}},
                )
            )
        for resource, name, patch in writes:
            try:
                await client.patch(resource, name, patch, ns)
            except (NotFound, Conflict):
                continue  # deleted meanwhile (a replaced pool sandbox)
            edits[resource.kind] = edits.get(resource.kind, 0) + 1
        if i % 5 == 0:  # and a writer of lies into our status
            lie: dict[str, Any] = {"status": {"replicas": 999, "readyReplicas": 999}}
            await client.patch(SANDBOX_WARM_POOLS, "pool", lie, ns, subresource="status")
            lie = {"status": {"sandbox": {"name": "bogus", "podIPs": [FORGED_IP]}}}
            await client.patch(  # a field manager of its own: the claim history sees who lied
                SANDBOX_CLAIMS, "c", lie, ns, subresource="status", field_manager=OTHER_WRITER
            )
            edits["status"] = edits.get("status", 0) + 2
        await asyncio.sleep(0.02)


@pytest.mark.usefixtures("manager")
async def test_other_writers_editing_pool_claim_and_sandboxes(client: Client) -> None:
    async with namespace_of(client) as ns:
        await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), ns)
        await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 3), ns)
        witnesses = [
            Witness(client, r, ns) for r in (SANDBOX_WARM_POOLS, SANDBOX_CLAIMS, SANDBOXES)
        ]
        for w in witnesses:
            w.informer.start()
        errors_before = sum(
            sample("controller_runtime_reconcile_errors_total", {"controller": c})
            for c in ("sandbox", "sandboxwarmpool", "sandboxclaim")
        )
        try:
            for w in witnesses:
                await asyncio.wait_for(w.informer.wait_synced(), 10)
            await client.create(
                SANDBOX_CLAIMS,
                {
                    "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                    "kind": "SandboxClaim",
                    "metadata": {"name": "c"},
                    "spec": {"warmPoolRef": {"name": "pool"}},
                },
                ns,
            )
            (bound,) = await wait_claims_ready(client, ns, {"c"}, within=30)
            served = bound["status"]["sandbox"]["name"]
            edits: dict[str, int] = {}
            await writer(client, ns, time.monotonic() + EDIT_SECONDS, edits)
            # converged: the replicas the writer left, all Ready and the status saying so (the
            # forged status replaced by the truth)
            final = (await client.get(SANDBOX_WARM_POOLS, "pool", ns))["spec"]["replicas"]
            await wait_pool_converged(client, ns, final)
            (after,) = await wait_claims_ready(client, ns, {"c"}, within=30)
            assert after["status"]["sandbox"]["name"] == served, "the claim was re-bound"
            assert FORGED_IP not in after["status"]["sandbox"]["podIPs"]
            last = {
                "pool": await client.get(SANDBOX_WARM_POOLS, "pool", ns),
                "claim": after,
                "served": await client.get(SANDBOXES, served, ns),
            }
        finally:
            for w in witnesses:
                await w.informer.stop()
    errors = (
        sum(
            sample("controller_runtime_reconcile_errors_total", {"controller": c})
            for c in ("sandbox", "sandboxwarmpool", "sandboxclaim")
        )
        - errors_before
    )
    print(
        f"\nother writers: {edits} patches in {EDIT_SECONDS:.0f}s; updates seen "
        f"{ {w.kind: w.updates for w in witnesses} }; reconcile errors {errors:.0f}; pool ended "
        f"at {final} replicas"
    )
    for w in witnesses:
        assert w.regressions == [], w.regressions[:5]
    assert edits.get("SandboxWarmPool", 0) >= 8 and edits.get("Sandbox", 0) >= 24  # under load too
    # the writer's last values are all there, ours too
    n = max(counter(last["pool"])["label"], 1)
    assert counter(last["pool"]) == {"label": n, "annotation": n}
    assert counter(last["claim"]) == {"label": n, "annotation": n, "spec": n}
    assert counter(last["served"]) == {"label": n, "annotation": n, "spec": n}
    assert (
        last["served"]["metadata"]["labels"]["agents.x-k8s.io/claim-uid"]
        == (last["claim"]["metadata"]["uid"])
    )
    assert last["pool"]["spec"]["updateStrategy"]["type"] == (
        "Recreate" if n % 3 else "OnReplenish"
    )


async def wait_pool_converged(
    client: Client, ns: str, replicas: int, within: float = 60, *, labelled: bool = False
) -> None:
    """The pool's own sandboxes (by controller reference; with ``labelled``, only those that
    also carry the pool label) number ``replicas``, all Ready, and its status says so."""

    async def converged() -> bool:
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
            and (not labelled or LABEL_POOL in (sb["metadata"].get("labels") or {}))
        ]
        ready = [
            sb
            for sb in own
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (sb.get("status") or {}).get("conditions") or []
            )
        ]
        st = p.get("status") or {}
        assert (
            len(own) == len(ready) == replicas
            and st.get("replicas") == st.get("readyReplicas") == replicas
            and st.get("observedGeneration") == p["metadata"]["generation"]
        ), f"pool not back at {replicas}: {st}, own {len(own)}"
        return True

    await eventually(
        converged, within=within, what=f"the pool at {replicas}", ignoring=AssertionError
    )


class StillControlled(AssertionError):
    """The stripped sandbox is still the pool's (fixed: the pool releases it, warmpool_act.py
    ``release``)."""


@pytest.mark.usefixtures("manager")
async def test_a_member_stripped_of_the_pool_label_is_replaced_and_let_go(client: Client) -> None:
    """Another writer removes the pool label (a key we own) from a pool member: the pool must
    replace it, and must not keep controlling a sandbox it no longer counts (release it, as a
    ReplicaSet releases a pod that stops matching, or delete it)."""
    async with namespace_of(client) as ns:
        await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), ns)
        await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 2), ns)
        await wait_pool_converged(client, ns, 2, labelled=True)
        listed = await client.list(SANDBOXES, ns)
        stripped = listed.items[0]["metadata"]["name"]
        await client.patch(SANDBOXES, stripped, {"metadata": {"labels": {LABEL_POOL: None}}}, ns)
        # replaced: two labelled members again
        await wait_pool_converged(client, ns, 2, labelled=True)

        async def let_go() -> bool:
            sb = await client.get(SANDBOXES, stripped, ns)
            pool_uid = (await client.get(SANDBOX_WARM_POOLS, "pool", ns))["metadata"]["uid"]
            return bool(sb["metadata"].get("deletionTimestamp")) or not any(
                o.get("controller") and o.get("uid") == pool_uid
                for o in sb["metadata"].get("ownerReferences") or []
            )

        try:
            await eventually(let_go, within=2.0, what=f"{stripped} let go of")
        except AssertionError:
            raise StillControlled(f"{stripped} is still the pool's, uncounted") from None
