"""Process faults: the controller is killed with SIGKILL mid pool-fill and mid-adoption (between
its writes, with 16 workers writing at once) and a new process, with an empty queue and no
memory, finishes the job. Invariants (tests/integration/invariants.py): pools exactly at
replicas and Ready, every claim Ready with exactly one sandbox, no sandbox ever with two claim
owners, nothing orphaned, and no sandbox created beyond need.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.devcluster.cluster import DevCluster
from agentsandbox.kube.client import Client
from tests.integration.invariants import (
    KillMissed,
    SandboxHistory,
    bound_claims,
    check_converged,
    checked_history,
    claim_progress,
    controller_process,
    kill_in_flight,
    kill_when,
)
from tests.integration.test_claims import claim_obj
from tests.integration.test_warmpool import pool_obj, template_obj


@pytest.fixture(autouse=True)
async def claim_history(
    cluster: DevCluster, namespace: str, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of each test, checked against the claim rules at its end
    (tests/integration/invariants.py)."""
    async with checked_history(cluster, request.node.nodeid) as history:
        yield history


async def _count(client: Client, ns: str) -> int:
    return len((await client.list(SANDBOXES, ns)).items)


async def test_kill_9_mid_pool_fill_twice_then_exactly_replicas_and_no_extra_create(
    client: Client, namespace: str, cluster: DevCluster, tmp_path: Path
) -> None:
    """About 30 s (up to three times if a kill misses): two pools (40 and 15) fill from nothing;
    the controller is SIGKILLed when 10 and again when 30 sandboxes exist (and the second process
    has created one at least), each time replaced by a new process. Both kills must land mid-fill:
    once the process is dead, it created some (more sandboxes than the previous kill left) and
    left some to create (fewer than 55), or the scenario runs again in a fresh namespace (three
    tries, then the test fails)."""

    async def attempt(ns: str) -> tuple[list[int], float, SandboxHistory]:
        await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), ns)
        log = tmp_path / f"controller-{ns}.log"
        t0 = time.monotonic()
        async with SandboxHistory(client, ns) as history:
            with contextlib.ExitStack() as stack:
                proc = stack.enter_context(controller_process(cluster, log))
                at_kill: list[int] = []
                for threshold in (10, 30):
                    need = max([threshold] + [n + 1 for n in at_kill[-1:]])  # this one's work
                    killer = asyncio.create_task(
                        kill_when(
                            client,
                            SANDBOXES,
                            ns,
                            proc,
                            lambda sandboxes, need=need: len(sandboxes) >= need,
                            what=f"{need} sandboxes",
                        )
                    )
                    try:
                        if not at_kill:  # the pools, while the watch is on
                            await client.create(SANDBOX_WARM_POOLS, pool_obj("a", "tpl", 40), ns)
                            await client.create(SANDBOX_WARM_POOLS, pool_obj("b", "tpl", 15), ns)
                        await killer
                    finally:
                        killer.cancel()  # a no-op once it is done
                    at_kill.append(await _count(client, ns))  # what the dead one left
                    if at_kill[-1] >= 55:
                        raise KillMissed(f"kill -9 at {at_kill} of 55 sandboxes: not mid-fill")
                    proc = stack.enter_context(controller_process(cluster, log))
                await check_converged(client, ns, pools={"a": 40, "b": 15}, history=history)
        return at_kill, time.monotonic() - t0, history

    at_kill, took, history = await kill_in_flight(cluster, namespace, attempt)
    print(
        f"\nkill -9 at {at_kill} of 55 sandboxes; converged in {took:.1f}s; "
        f"{history.created} created"
    )
    assert 10 <= at_kill[0] < at_kill[1] < 55, at_kill
    assert history.extra(0, 55) == 0, f"{history.extra(0, 55)} sandboxes created beyond 55"


async def test_kill_9_mid_adoption_twice_then_every_claim_served_once(
    client: Client, namespace: str, cluster: DevCluster, tmp_path: Path
) -> None:
    """About 40 s (up to three times if a kill misses): 60 claims on a ready pool of 20. The
    controller is SIGKILLed once 5 and then 25 claims are bound (and the second process has bound
    one at least), from a watch on the claims, so within milliseconds, while its 16 workers
    adopt and create; each time a new process takes over. Once the process is dead the test
    counts what it left, which is what the next process inherits: each kill must land mid-burst
    (the dead process bound claims, and left claims to bind) and one of them must leave a claim
    between its writes (its sandbox controlled by it, its status not naming it yet), or the
    scenario runs again in a fresh namespace (three tries, then the test fails)."""

    async def attempt(ns: str) -> tuple[list[tuple[int, int, int]], float, SandboxHistory, int]:
        await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), ns)
        await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 20), ns)
        log = tmp_path / f"controller-{ns}.log"
        names = {f"c-{i:02d}" for i in range(60)}
        with contextlib.ExitStack() as stack:
            proc = stack.enter_context(controller_process(cluster, log))
            await check_converged(client, ns, pools={"pool": 20}, within=60)
            async with SandboxHistory(client, ns) as history:
                t0 = time.monotonic()
                kills: list[tuple[int, int, int]] = []  # (bound, between, adoptions between)
                for threshold in (5, 25):
                    done = kills[-1][0] if kills else 0  # bound by the processes killed before
                    need = max(threshold, done + 1)
                    killer = asyncio.create_task(
                        kill_when(
                            client,
                            SANDBOX_CLAIMS,
                            ns,
                            proc,
                            lambda claims, need=need: bound_claims(claims) >= need,
                            what=f"{need} claims bound",
                        )
                    )
                    try:
                        if not kills:  # the burst, while the watch is on
                            await asyncio.gather(
                                *(
                                    client.create(SANDBOX_CLAIMS, claim_obj(n, pool="pool"), ns)
                                    for n in names
                                )
                            )
                        await killer
                    finally:
                        killer.cancel()  # a no-op once it is done
                    bound, between = await claim_progress(client, ns)  # what the dead one left
                    adopting = (await claim_progress(client, ns, history.pool_born))[1]
                    kills.append((bound, between, adopting))
                    if not done < bound < 60:
                        raise KillMissed(f"kill -9 at (bound, between) {kills}: not mid-burst")
                    proc = stack.enter_context(controller_process(cluster, log))
                if not any(between for _, between, _ in kills):
                    raise KillMissed(f"kill -9 at (bound, between) {kills}: none between writes")
                served = await check_converged(
                    client, ns, pools={"pool": 20}, claims=names, history=history
                )
                took = time.monotonic() - t0
        return kills, took, history, len(served)

    kills, took, history, served = await kill_in_flight(cluster, namespace, attempt)
    print(
        f"\nkill -9 at (bound, between writes, adoptions between writes) {kills}; "
        f"60 claims served in {took:.1f}s; {history.created} sandboxes seen"
    )
    assert 0 < kills[0][0] < kills[1][0] < 60 and any(k[1] for k in kills), kills
    assert served == 60
    # 20 members at the start, 60 claims: each claim needs one sandbox, the pool ends with 20
    assert history.extra(60, 20) == 0, f"{history.extra(60, 20)} sandboxes beyond need"
