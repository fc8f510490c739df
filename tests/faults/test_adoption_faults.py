"""Faults in the claim controller's adoption writes (the write that hands a free pool sandbox to
a claim), on a private control plane (this module's own, audit log on):

- answered 500 (an HTTP proxy between the controller and kube-apiserver answers the first
  adoption writes itself: they never reach kube-apiserver);
- applied, then the answer lost (the proxy sends the write on, kube-apiserver applies it, and
  the proxy cuts the connection instead of answering: to the controller, a timeout or a reset
  after the write was done), while the controller's watch of sandboxes lags behind by a few
  seconds (so its cache cannot tell it that the write was applied);
- refused by admission (a ValidatingAdmissionPolicy on kube-apiserver, no webhook server,
  refuses an update that gives a sandbox a claim owner while a namespace label is on).

Each scenario: a Ready pool of 4, a burst of 6 claims while the fault is on, the fault off once
it has failed 3 adoption writes. Then: every claim Ready with exactly one sandbox, the pool back
at its replicas, nothing orphaned, no sandbox ever controlled by two claims (``check_converged``);
and every sandbox the pool held before the burst either adopted once (by the one claim whose
status names it) or still free (pool-owned, Ready, counted by the pool). A free one must still
be adoptable: as many new claims as there are free pool sandboxes, and two more, take every one
of them (a sandbox the controller forgot would stay free for good).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentsandbox.api.kinds import SANDBOX
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import Forbidden
from tests.integration.invariants import (
    SandboxHistory,
    check_converged,
    checked_history,
    controller_process,
)
from tests.integration.test_claims import claim_obj
from tests.integration.test_warmpool import (
    pool_obj,
    pool_sandboxes,
    ready,
    template_obj,
    wait_ready_pool,
)
from tests.polling import eventually

from .faultkit import (
    ProxyProcess,
    admission_refusal,
    audit_writes,
    namespace_flag,
)

POOL = "pool"
REPLICAS = 4
BURST = 6
FAULTS = 3  # adoption writes failed before the fault goes off
EXTRA = 2  # claims beyond the free pool sandboxes in the second round
ADOPTION_BODY = r'"kind":\s*"SandboxClaim"'  # the write gives the sandbox a claim owner
ADOPTION_METHOD = "PATCH|PUT"
WATCH_LAG = 3.0  # seconds the sandbox watch lags behind a write whose answer was lost
REFUSAL_FLAG = "faults.agentsandbox.test/refuse-adoptions"


def adoption_path(ns: str) -> str:
    return rf"/apis/agents\.x-k8s\.io/[^/]+/namespaces/{ns}/sandboxes/[^/]+"


@dataclass
class Fault:
    """How a scenario turns its fault on, learns that it failed ``FAULTS`` adoption writes
    (returns how many it failed), and turns it off."""

    what: str
    on: Callable[[], Awaitable[None]]
    landed: Callable[[], Awaitable[int]]
    off: Callable[[], Awaitable[None]]


# ------------------------------------------------------------------------------------ checks
def check_history(history: SandboxHistory, claim_names: dict[str, str]) -> None:
    """What the informer saw over the whole scenario: no sandbox ever with two claim owners,
    at once or one after the other; and no claim that ever controlled two sandboxes (a second
    adoption or a cold create after a write that was applied: one of the two is deleted later).
    ``claim_names``: claim uid -> name. A checker of each sandbox's whole ownership timeline
    (from the pool to at most one claim, never back) belongs here too, from invariants.py."""
    history.check()
    controlled: dict[str, list[str]] = {}
    for uid, claims in history.claims_of.items():
        for claim in claims:
            controlled.setdefault(claim_names.get(claim, claim), []).append(history.uids[uid])
    twice = {claim: sorted(sbs) for claim, sbs in sorted(controlled.items()) if len(sbs) > 1}
    assert not twice, f"claims that controlled more than one sandbox over time: {twice}"


async def check_pool_members(
    client: Client,
    ns: str,
    history: SandboxHistory,
    members: dict[str, str],
    served: dict[str, str],
) -> set[str]:
    """Every sandbox in ``members`` (name -> uid: the pool's before the burst) is either
    adopted once: alive, controlled by a claim, the only claim that ever controlled it, and the
    one whose status names it (``served``: claim -> sandbox); or free: alive, controlled by the
    pool, Ready, and one of the pool's members (so counted in its status). Returns the free ones;
    AssertionError naming every member that is neither."""
    pool = await client.get(SANDBOX_WARM_POOLS, POOL, ns)
    counted = {s["metadata"]["name"] for s in await pool_sandboxes(client, ns, POOL)}
    live = {
        s["metadata"]["name"]: s
        for s in (await client.list(SANDBOXES, ns)).items
        if not s["metadata"].get("deletionTimestamp")
    }
    claim_of = {sb: claim for claim, sb in served.items()}
    claim_uids = await _claim_names(client, ns)
    free: set[str] = set()
    wrong: list[str] = []
    for name, uid in sorted(members.items()):
        ever = sorted(claim_uids.get(c, c) for c in history.claims_of.get(uid, set()))
        sb = live.get(name)
        if sb is None or sb["metadata"]["uid"] != uid:
            wrong.append(f"{name}: deleted (controlled by claims {ever} before)")
            continue
        ref: dict[str, Any] = next(
            (r for r in sb["metadata"].get("ownerReferences") or [] if r.get("controller")), {}
        )
        if ref.get("kind") == "SandboxClaim":
            if claim_of.get(name) != ref.get("name") or ever != [ref.get("name")]:
                wrong.append(
                    f"{name}: controlled by claim {ref.get('name')}, whose status names "
                    f"{served.get(str(ref.get('name')))}; claims that ever controlled it: {ever}"
                )
        elif ref.get("kind") == "SandboxWarmPool" and ref.get("uid") == pool["metadata"]["uid"]:
            if not ready(sb) or name not in counted or ever:
                wrong.append(
                    f"{name}: pool-owned but Ready={ready(sb)}, counted={name in counted}, "
                    f"claims that ever controlled it: {ever}"
                )
            free.add(name)
        else:
            wrong.append(f"{name}: controlled by {ref or 'nothing'}")
    assert not wrong, f"pool sandboxes neither adopted once nor free and counted: {wrong}"
    return free


async def _claims_now(client: Client, ns: str) -> list[dict[str, Any]]:
    return list((await client.list(SANDBOX_CLAIMS, ns)).items)


async def _claim_names(client: Client, ns: str) -> dict[str, str]:
    return {c["metadata"]["uid"]: c["metadata"]["name"] for c in await _claims_now(client, ns)}


# ------------------------------------------------------------------------------------ scenario
async def _burst(client: Client, ns: str, prefix: str, n: int) -> set[str]:
    names = {f"{prefix}-{i:02d}" for i in range(n)}
    await asyncio.gather(
        *(client.create(SANDBOX_CLAIMS, claim_obj(c, pool=POOL), ns) for c in names)
    )
    return names


async def adoption_fault_scenario(client: Client, ns: str, fault: Fault) -> None:
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), ns)
    await client.create(SANDBOX_WARM_POOLS, pool_obj(POOL, "tpl", REPLICAS), ns)
    members = {
        s["metadata"]["name"]: s["metadata"]["uid"]
        for s in await wait_ready_pool(client, ns, POOL, REPLICAS)
    }
    async with SandboxHistory(client, ns) as history:
        t0 = time.monotonic()
        await fault.on()
        burst = await _burst(client, ns, "c", BURST)
        failed = await fault.landed()
        await fault.off()
        served = await check_converged(
            client, ns, pools={POOL: REPLICAS}, claims=burst, history=history
        )
        warm = sorted(sb for sb in served.values() if sb in members)
        print(
            f"\n{fault.what}: {failed} adoption writes failed; {BURST} claims served in "
            f"{time.monotonic() - t0:.1f}s, {len(warm)} by the pool's {REPLICAS} sandboxes; "
            f"{history.created} sandboxes seen, {len(history.deleted)} deleted"
        )
        check_history(history, await _claim_names(client, ns))
        free = await check_pool_members(client, ns, history, members, served)
        more = await _burst(client, ns, "d", len(free) + EXTRA)
        served = await check_converged(
            client, ns, pools={POOL: REPLICAS}, claims=burst | more, history=history
        )
        print(
            f"then {len(more)} claims for the {len(free)} still free: "
            f"{dict(sorted((c, served[c]) for c in more))}"
        )
        check_history(history, await _claim_names(client, ns))
        left = await check_pool_members(client, ns, history, members, served)
        assert not left, (
            f"pool sandboxes {sorted(left)} stayed free while {len(more)} new claims were "
            f"served: {dict(sorted((c, served[c]) for c in more))}"
        )


# ------------------------------------------------------------------------------------ proxy


@pytest.fixture(autouse=True)
async def claim_history(
    private_cluster: DevCluster, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of each test, checked against the claim rules at its end
    (tests/integration/invariants.py)."""
    async with checked_history(private_cluster, request.node.nodeid) as history:
        yield history


def proxy_fault(px: ProxyProcess, ns: str, what: str, **rule: object) -> Fault:
    async def on() -> None:
        px.set_faults(
            {
                "method": ADOPTION_METHOD,
                "path": adoption_path(ns),
                "body": ADOPTION_BODY,
                "count": FAULTS,
                **rule,
            }
        )

    async def landed() -> int:
        hits: int = await eventually(
            lambda: int(str(px.faults()[0]["hits"])),
            accept=lambda n: n >= FAULTS,
            within=30,
            what=f"{FAULTS} adoption writes {what}",
        )
        return hits

    async def off() -> None:
        px.set_faults()

    return Fault(what, on, landed, off)


async def test_adoption_answered_500_loses_no_pool_sandbox(
    fault_proxy: ProxyProcess, pclient: Client, pns: str
) -> None:
    """claim review #1 (a): an adoption write answered 500 (it never reached kube-apiserver)
    leaves the pool sandbox free, and the controller must still hand it to a later claim."""
    fault = proxy_fault(fault_proxy, pns, "answered 500", action="status", status=500)
    await adoption_fault_scenario(pclient, pns, fault)


async def test_adoption_applied_but_unanswered_adopts_once(
    fault_proxy: ProxyProcess, pclient: Client, pns: str
) -> None:
    """claim review #1 (b): an adoption write that kube-apiserver applied but whose answer was
    lost (the connection cut after it, the controller's sandbox watch 3 s behind) is the
    claim's adoption: the claim must not adopt a second pool sandbox, and none may be deleted.
    (The controller's request timeout is a minute: a cut connection stands in for it.)"""
    fault = proxy_fault(
        fault_proxy,
        pns,
        "applied, answer lost",
        action="lose",
        hold=0.0,
        stall=rf"/apis/agents\.x-k8s\.io/[^/]+/(namespaces/{pns}/)?sandboxes",
        stall_for=WATCH_LAG,
    )
    await adoption_fault_scenario(pclient, pns, fault)


# ------------------------------------------------------------------------------------ admission
PROBE = "adoption-probe"


def _probe_sandbox() -> dict[str, Any]:
    """A sandbox no pool holds, only for dry-run writes that show whether the refusal is in
    force (a pool sandbox could be adopted between the look and the dry run)."""
    return {
        "apiVersion": SANDBOX.api_version,
        "kind": "Sandbox",
        "metadata": {"name": PROBE},
        "spec": {
            "podTemplate": {"spec": {"containers": [{"name": "main", "image": "example/p:1"}]}}
        },
    }


async def _refused(client: Client, ns: str) -> bool:
    """A dry-run update giving the probe sandbox a claim owner: refused by admission?"""
    owner = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "name": "probe",
        "uid": "00000000-0000-0000-0000-000000000000",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    try:
        await client.patch(
            SANDBOXES, PROBE, {"metadata": {"ownerReferences": [owner]}}, ns, dry_run=True
        )
    except Forbidden:
        return True
    return False


def _refusals(cluster: DevCluster, ns: str) -> int:
    return sum(audit_writes(cluster, ns, verb).get(403, 0) for verb in ("patch", "update"))


async def test_adoption_refused_by_admission_loses_no_pool_sandbox(
    private_cluster: DevCluster, pclient: Client, pns: str, tmp_path: Path
) -> None:
    """claim review #1 (a): an adoption write refused by admission (as a policy engine's
    webhook would) leaves the pool sandbox free, and the controller must still hand it to a
    later claim once admission lets adoptions through again."""
    await pclient.create(SANDBOXES, _probe_sandbox(), pns)

    async def on() -> None:
        namespace_flag(private_cluster, pns, REFUSAL_FLAG, True)
        await eventually(
            lambda: _refused(pclient, pns), within=30, what="the admission refusal in force"
        )

    async def landed() -> int:
        refused: int = await eventually(
            lambda: _refusals(private_cluster, pns),
            accept=lambda n: n >= FAULTS,
            within=30,
            what=f"{FAULTS} adoption writes refused by admission",
        )
        return refused

    async def off() -> None:
        namespace_flag(private_cluster, pns, REFUSAL_FLAG, False)
        await eventually(
            lambda: _refused(pclient, pns),
            accept=lambda refused: not refused,
            within=30,
            what="the admission refusal gone",
        )
        await pclient.delete(SANDBOXES, PROBE, pns)

    with (
        admission_refusal(
            private_cluster,
            f"refuse-adoptions-{pns}",
            rules=[
                {
                    "apiGroups": ["agents.x-k8s.io"],
                    "apiVersions": ["*"],
                    "operations": ["UPDATE"],
                    "resources": ["sandboxes"],
                }
            ],
            refuse_when=(
                "object.metadata.?ownerReferences.orValue([])"
                ".exists(r, r.kind == 'SandboxClaim') && "
                "!oldObject.metadata.?ownerReferences.orValue([])"
                ".exists(r, r.kind == 'SandboxClaim')"
            ),
            message="adoptions are refused in this namespace for now",
            flag=REFUSAL_FLAG,
        ),
        controller_process(private_cluster, tmp_path / "controller.log") as proc,
    ):
        fault = Fault("refused by admission", on, landed, off)
        await adoption_fault_scenario(pclient, pns, fault)
        assert proc.poll() is None, "the controller exited"
