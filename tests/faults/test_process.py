"""Process faults: the controller is killed with SIGKILL mid pool-fill and mid-adoption (between
its writes, with 16 workers writing at once) and a new process, with an empty queue and no
memory, finishes the job. Invariants (tests/integration/invariants.py): pools exactly at
replicas and Ready, every claim Ready with exactly one sandbox, no sandbox ever with two claim
owners, nothing orphaned, and no sandbox created beyond need.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.kube.client import Client
from tests.integration.invariants import (
    SandboxHistory,
    check_converged,
    controller_process,
)
from tests.integration.test_claims import claim_obj
from tests.integration.test_warmpool import pool_obj, template_obj
from tests.polling import eventually


async def _count(client: Client, ns: str) -> int:
    return len((await client.list(SANDBOXES, ns)).items)


async def _bound(client: Client, ns: str) -> tuple[int, bool]:
    """(claims whose status names a sandbox, whether some sandbox is adopted by a claim whose
    status does not name it yet: the controller is between the adoption's two writes)."""
    claims = (await client.list(SANDBOX_CLAIMS, ns)).items
    named = {
        c["metadata"]["uid"]
        for c in claims
        if ((c.get("status") or {}).get("sandbox") or {}).get("name")
    }
    between = False
    for sb in (await client.list(SANDBOXES, ns)).items:
        for ref in sb["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == "SandboxClaim" and ref["uid"] not in named:
                between = True
    return len(named), between


async def test_kill_9_mid_pool_fill_twice_then_exactly_replicas_and_no_extra_create(
    client: Client, namespace: str, cluster: DevCluster, tmp_path: Path
) -> None:
    """About 30 s: two pools (40 and 15) fill from nothing; the controller is SIGKILLed when 10
    and again when 30 sandboxes exist, each time replaced by a new process."""
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), namespace)
    log = tmp_path / "controller.log"
    t0 = time.monotonic()
    async with SandboxHistory(client, namespace) as history:
        with contextlib.ExitStack() as stack:
            proc = stack.enter_context(controller_process(cluster, log))
            await client.create(SANDBOX_WARM_POOLS, pool_obj("a", "tpl", 40), namespace)
            await client.create(SANDBOX_WARM_POOLS, pool_obj("b", "tpl", 15), namespace)
            at_kill = []
            for threshold in (10, 30):
                await eventually(
                    lambda: _count(client, namespace),
                    accept=lambda n, threshold=threshold: n >= threshold,
                    within=30,
                    what=f"{threshold} sandboxes",
                    interval=0.02,
                )
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
                at_kill.append(await _count(client, namespace))
                proc = stack.enter_context(controller_process(cluster, log))
            await check_converged(client, namespace, pools={"a": 40, "b": 15}, history=history)
        took = time.monotonic() - t0
    print(
        f"\nkill -9 at {at_kill} of 55 sandboxes; converged in {took:.1f}s; "
        f"{history.created} created"
    )
    assert at_kill[0] < 55 and at_kill[1] < 55, "the kills did not land mid-fill"
    assert history.extra(0, 55) == 0, f"{history.extra(0, 55)} sandboxes created beyond 55"


async def test_kill_9_mid_adoption_twice_then_every_claim_served_once(
    client: Client, namespace: str, cluster: DevCluster, tmp_path: Path
) -> None:
    """About 40 s: 60 claims on a ready pool of 20. The controller is SIGKILLed when it is seen
    between an adoption's writes (a sandbox already controlled by a claim whose status does not
    name it yet) or, failing that, once 5 and then 25 claims are bound; each time a new process
    takes over."""
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), namespace)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 20), namespace)
    log = tmp_path / "controller.log"
    names = {f"c-{i:02d}" for i in range(60)}
    with contextlib.ExitStack() as stack:
        proc = stack.enter_context(controller_process(cluster, log))
        await check_converged(client, namespace, pools={"pool": 20}, within=60)
        async with SandboxHistory(client, namespace) as history:
            t0 = time.monotonic()
            await asyncio.gather(
                *(
                    client.create(SANDBOX_CLAIMS, claim_obj(n, pool="pool"), namespace)
                    for n in names
                )
            )
            kills = []
            for threshold in (5, 25):
                bound, between = await eventually(
                    lambda: _bound(client, namespace),
                    accept=lambda got, threshold=threshold: (
                        (got[1] and got[0] >= threshold // 2) or got[0] >= threshold
                    ),
                    within=30,
                    what=f"{threshold} claims bound (or half as many, one between its writes)",
                    interval=0.005,
                )
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
                kills.append((bound, between))
                proc = stack.enter_context(controller_process(cluster, log))
            served = await check_converged(
                client, namespace, pools={"pool": 20}, claims=names, history=history
            )
            took = time.monotonic() - t0
    print(
        f"\nkill -9 at (bound, between writes) {kills}; 60 claims served in {took:.1f}s; "
        f"{history.created} sandboxes seen"
    )
    assert all(bound < 60 for bound, _ in kills), "the kills did not land mid-burst"
    assert len(served) == 60
    # 20 members at the start, 60 claims: each claim needs one sandbox, the pool ends with 20
    assert history.extra(60, 20) == 0, f"{history.extra(60, 20)} sandboxes beyond need"
