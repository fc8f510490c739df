"""API faults on a private control plane (this module's own, audit log on): kube-apiserver
SIGKILLed and restarted mid-fill and mid-burst (etcd keeps running), watches expired (410 Gone)
by an etcd compaction, connection resets and latency on every controller connection, API
priority and fairness throttling the controller's user to one seat (429s), and a slow etcd.

Each test checks the invariants of tests/integration/invariants.py once the fault is over:
pools exactly at replicas and Ready, every claim Ready with exactly one sandbox, no sandbox ever
with two claim owners, nothing orphaned; and counts the sandboxes created beyond need.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.devcluster import DevCluster
from agentsandbox.kube.client import Client
from agentsandbox.kube.config import load_kubeconfig
from tests.integration.invariants import SandboxHistory, check_converged, controller_process
from tests.integration.test_claims import claim_obj
from tests.integration.test_warmpool import pool_obj, template_obj

from .faultkit import (
    audit_creates,
    restart_apiserver,
)


@pytest.fixture
async def pclient(private_cluster: DevCluster) -> AsyncIterator[Client]:
    c = Client(await load_kubeconfig(str(private_cluster.kubeconfig)), qps=0, pool_size=100)
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
def pns(private_cluster: DevCluster) -> Iterator[str]:
    name = f"f-{uuid.uuid4().hex[:10]}"
    private_cluster.api("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    yield name
    with contextlib.suppress(OSError):
        private_cluster.api("DELETE", f"/api/v1/namespaces/{name}")


@contextlib.contextmanager
def apiserver_with(
    cluster: DevCluster, *, etcd_servers: str | None = None, extra: Sequence[str] = ()
) -> Iterator[None]:
    """kube-apiserver restarted with other flags for the body, then restarted as it was."""
    restart_apiserver(cluster, etcd_servers=etcd_servers, extra=extra)
    try:
        yield
    finally:
        restart_apiserver(cluster)


async def _sandbox_count(client: Client, ns: str) -> int:
    while True:
        try:
            return len((await client.list(SANDBOXES, ns)).items)
        except Exception:  # the apiserver may be restarting under the test's own client
            await asyncio.sleep(0.1)


async def _bound(client: Client, ns: str) -> int:
    claims = (await client.list(SANDBOX_CLAIMS, ns)).items
    return sum(1 for c in claims if ((c.get("status") or {}).get("sandbox") or {}).get("name"))


async def _until(check: Any, within: float, what: str) -> Any:
    deadline = time.monotonic() + within
    while not (value := await check()):
        assert time.monotonic() < deadline, f"{what} not reached within {within}s"
        await asyncio.sleep(0.02)
    return value


async def _setup_pool(client: Client, ns: str, replicas: int) -> None:
    await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), ns)
    await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", replicas), ns)


async def _claims(client: Client, ns: str, n: int) -> set[str]:
    names = {f"c-{i:02d}" for i in range(n)}
    await asyncio.gather(
        *(client.create(SANDBOX_CLAIMS, claim_obj(c, pool="pool"), ns) for c in names)
    )
    return names


# ------------------------------------------------------------------------------------ restart
async def test_apiserver_restart_mid_fill(
    private_cluster: DevCluster, pclient: Client, pns: str, tmp_path: Path
) -> None:
    """In make test. About 25 s: a private control plane (~8 s to start), a pool of 40 filling;
    kube-apiserver is SIGKILLed once 10 sandboxes exist and restarted after 1 s."""
    log = tmp_path / "controller.log"
    with controller_process(private_cluster, log) as proc:
        async with SandboxHistory(pclient, pns) as history:
            t0 = time.monotonic()
            await _setup_pool(pclient, pns, 40)
            await _until(lambda: _at_least(pclient, pns, 10), 30, "10 sandboxes before the restart")
            at_kill = await _sandbox_count(pclient, pns)
            down = await asyncio.to_thread(restart_apiserver, private_cluster, down=1.0)
            await check_converged(pclient, pns, pools={"pool": 40}, history=history)
            took = time.monotonic() - t0
        assert proc.poll() is None, "the controller exited"
    print(
        f"\napiserver killed at {at_kill}/40 sandboxes, down {down:.1f}s; pool at 40 Ready "
        f"{took:.1f}s after the pool's create; {history.created} created"
    )
    assert at_kill < 40, "the restart did not land mid-fill"
    audit = audit_creates(private_cluster, pns)
    print(f"sandbox creates in the audit log by status: {audit}")
    # both are lower bounds (the informer may miss what lived between two lists, the audit log
    # a create in flight at the kill): neither may show a sandbox beyond the 40
    assert history.extra(0, 40) == 0, f"{history.extra(0, 40)} sandboxes created beyond 40"
    assert audit.get(201, 0) <= 40, audit


async def _at_least(client: Client, ns: str, n: int) -> bool:
    return await _sandbox_count(client, ns) >= n


async def test_apiserver_restart_mid_claim_burst(
    private_cluster: DevCluster, pclient: Client, pns: str, tmp_path: Path
) -> None:
    """About 25 s: 50 claims on a ready pool of 20; kube-apiserver is SIGKILLed once 10 are
    bound and restarted after 1 s."""
    log = tmp_path / "controller.log"
    with controller_process(private_cluster, log) as proc:
        await _setup_pool(pclient, pns, 20)
        await check_converged(pclient, pns, pools={"pool": 20})
        async with SandboxHistory(pclient, pns) as history:
            t0 = time.monotonic()
            names = await _claims(pclient, pns, 50)
            bound = await _until(lambda: _bound_at_least(pclient, pns, 10), 30, "10 claims bound")
            down = await asyncio.to_thread(restart_apiserver, private_cluster, down=1.0)
            served = await check_converged(
                pclient, pns, pools={"pool": 20}, claims=names, history=history
            )
            took = time.monotonic() - t0
        assert proc.poll() is None, "the controller exited"
    print(
        f"\napiserver killed with {bound}/50 claims bound, down {down:.1f}s; all served in "
        f"{took:.1f}s; {history.created} sandboxes seen"
    )
    assert bound < 50, "the restart did not land mid-burst"
    assert len(served) == 50
    audit = audit_creates(private_cluster, pns)
    print(f"sandbox creates in the audit log by status: {audit}")
    assert history.extra(50, 20) == 0, f"{history.extra(50, 20)} sandboxes beyond need"
    assert audit.get(201, 0) <= 50 + 20, audit


async def _bound_at_least(client: Client, ns: str, n: int) -> int:
    bound = await _bound(client, ns)
    return bound if bound >= n else 0
