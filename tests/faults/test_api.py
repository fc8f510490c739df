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

import pytest

from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.devcluster.cluster import DevCluster, free_port
from agentsandbox.kube.client import Client
from tests.integration.invariants import (
    SandboxHistory,
    check_converged,
    checked_history,
    controller_process,
)
from tests.integration.runtime_helpers import compact_etcd
from tests.integration.test_claims import claim_obj
from tests.integration.test_warmpool import pool_obj, template_obj
from tests.polling import eventually, stays

from .faultkit import (
    audit_creates,
    grant_cluster_admin,
    kubeconfig_via,
    metric_sum,
    proxy,
    restart_apiserver,
    scrape,
    unanswered_creates,
    wait_pods_served,
)


@pytest.fixture(autouse=True)
async def claim_history(
    private_cluster: DevCluster, witness: Path, pns: str, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of each test, checked against the claim rules at its end
    (tests/integration/invariants.py), watched through the witness kube-apiserver (the faults
    restart the other one)."""
    async with checked_history(private_cluster, request.node.nodeid, kubeconfig=witness) as history:
        yield history


@contextlib.contextmanager
def apiserver_with(
    cluster: DevCluster, *, etcd_servers: str | None = None, extra: Sequence[str] = ()
) -> Iterator[None]:
    """kube-apiserver restarted with other flags for the body, then restarted as it was, and
    pods served again before the next test starts."""
    restart_apiserver(cluster, etcd_servers=etcd_servers, extra=extra)
    try:
        yield
    finally:
        restart_apiserver(cluster)
        wait_pods_served(cluster)


async def _sandbox_count(client: Client, ns: str) -> int:
    listed = await eventually(
        lambda: client.list(SANDBOXES, ns),
        accept=lambda _: True,  # any answer, no sandbox too
        within=300,  # as long as the test may run
        what="a list of the sandboxes",
        ignoring=Exception,  # the apiserver may be restarting under the test's own client
    )
    return len(listed.items)


async def _bound(client: Client, ns: str) -> int:
    claims = (await client.list(SANDBOX_CLAIMS, ns)).items
    return sum(1 for c in claims if ((c.get("status") or {}).get("sandbox") or {}).get("name"))


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
@pytest.mark.smoke  # make test runs it too: the fault suite's machinery, once
async def test_apiserver_restart_mid_fill(
    private_cluster: DevCluster, pclient: Client, wclient: Client, pns: str, tmp_path: Path
) -> None:
    """In make test too (``smoke``). About 25 s: a private control plane (~8 s to start), a pool
    of 40 filling; kube-apiserver is SIGKILLed once 10 sandboxes exist and restarted after 1 s."""
    log = tmp_path / "controller.log"
    with controller_process(private_cluster, log) as proc:
        async with SandboxHistory(wclient, pns) as history:
            t0 = time.monotonic()
            await _setup_pool(pclient, pns, 40)
            await eventually(
                lambda: _at_least(pclient, pns, 10),
                within=30,
                what="10 sandboxes before the restart",
                interval=0.02,
            )
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
    lost = unanswered_creates(log, pns)
    print(f"sandbox creates in the audit log by status: {audit}; {lost} lost their answer")
    # Both counts are lower bounds (the informer may miss what lived between two lists, the
    # audit log a create in flight at the kill). A create whose answer the kill lost may be
    # repeated under a new name once its same-name retries (a few seconds, 731e632) are spent,
    # which a long restart can do; nothing else may exceed the 40.
    assert history.extra(0, 40) <= lost, f"{history.extra(0, 40)} sandboxes created beyond 40"
    assert audit.get(201, 0) <= 40 + lost, audit


async def _at_least(client: Client, ns: str, n: int) -> bool:
    return await _sandbox_count(client, ns) >= n


async def test_apiserver_restart_mid_claim_burst(
    private_cluster: DevCluster, pclient: Client, wclient: Client, pns: str, tmp_path: Path
) -> None:
    """About 25 s: 50 claims on a ready pool of 20; kube-apiserver is SIGKILLed once 10 are
    bound and restarted after 1 s."""
    log = tmp_path / "controller.log"
    with controller_process(private_cluster, log) as proc:
        await _setup_pool(pclient, pns, 20)
        await check_converged(pclient, pns, pools={"pool": 20})
        async with SandboxHistory(wclient, pns) as history:
            t0 = time.monotonic()
            names = await _claims(pclient, pns, 50)
            bound = await eventually(
                lambda: _bound_at_least(pclient, pns, 10),
                within=30,
                what="10 claims bound",
                interval=0.02,
            )
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
    lost = unanswered_creates(log, pns)
    print(f"sandbox creates in the audit log by status: {audit}; {lost} lost their answer")
    # as above: only a create whose answer the kill lost may be repeated
    assert history.extra(50, 20) <= lost, f"{history.extra(50, 20)} sandboxes beyond need"
    assert audit.get(201, 0) <= 50 + 20 + lost, audit


async def _bound_at_least(client: Client, ns: str, n: int) -> int:
    bound = await _bound(client, ns)
    return bound if bound >= n else 0


# ------------------------------------------------------------------------------------ 410
async def test_watches_expire_by_etcd_compaction_and_the_relist_converges(
    private_cluster: DevCluster, pclient: Client, wclient: Client, pns: str, tmp_path: Path
) -> None:
    """About 40 s (two apiserver restarts: with and then without the watch cache). The
    controller reaches kube-apiserver through a loopback proxy; with the watch cache off, watches
    are served by etcd, so compacting etcd while the proxy refuses connections makes every
    re-watch from the controller's last resourceVersion fail with 410 Gone. Meanwhile 15 claims
    arrive, the pool grows from 10 to 15 and two members are deleted; after the relist all of it
    is served."""
    gone = "agentsandbox_runtime_informer_watch_ends_total"
    mport = free_port()
    with (
        apiserver_with(private_cluster, extra=("--watch-cache=false",)),
        proxy(f"127.0.0.1:{private_cluster.ports['kube-apiserver']}", tmp_path) as px,
        controller_process(
            private_cluster,
            tmp_path / "controller.log",
            mport,
            kubeconfig=kubeconfig_via(private_cluster, px.url_https, tmp_path),
        ) as proc,
    ):
        await _setup_pool(pclient, pns, 10)
        await check_converged(pclient, pns, pools={"pool": 10})
        async with SandboxHistory(wclient, pns) as history:
            before = metric_sum(scrape(mport), gone, reason="gone")
            px.pause()
            names = await _claims(pclient, pns, 15)
            await pclient.patch(SANDBOX_WARM_POOLS, "pool", {"spec": {"replicas": 15}}, pns)
            members = sorted(
                s["metadata"]["name"] for s in (await pclient.list(SANDBOXES, pns)).items
            )
            for name in members[:2]:
                await pclient.delete(SANDBOXES, name, pns)
            compacted = compact_etcd(private_cluster)
            await stays(  # cut off a while longer
                lambda: proc.poll() is None, for_=1.0, what="the controller running"
            )
            px.resume()
            t0 = time.monotonic()
            served = await check_converged(
                pclient, pns, pools={"pool": 15}, claims=names, history=history
            )
            took = time.monotonic() - t0
            after = metric_sum(scrape(mport), gone, reason="gone")
        assert proc.poll() is None, "the controller exited"
    print(
        f"\netcd compacted at {compacted}; controller watches ended 410: {after - before:.0f}; "
        f"converged {took:.1f}s after the proxy resumed; {history.created} sandboxes seen"
    )
    assert after > before, "no watch of the controller ended with 410 Gone"
    assert len(served) == 15
    # 10 members, 2 deleted by the test, 15 claims, pool at 15 at the end
    assert history.extra(15, 15 + 2) == 0, f"{history.extra(15, 17)} sandboxes beyond need"


# ------------------------------------------------------------------------------------ network
async def test_connection_resets_and_latency_between_controller_and_apiserver(
    private_cluster: DevCluster, pclient: Client, wclient: Client, pns: str, tmp_path: Path
) -> None:
    """About 40 s: every byte between the controller and kube-apiserver is delayed 50-150 ms and
    every connection is reset every 2 s, while a pool of 20 fills and 40 claims arrive."""
    mport = free_port()
    with (
        proxy(
            f"127.0.0.1:{private_cluster.ports['kube-apiserver']}",
            tmp_path,
            delay_ms="50-150",
            reset_every=2.0,
        ) as px,
        controller_process(
            private_cluster,
            tmp_path / "controller.log",
            mport,
            kubeconfig=kubeconfig_via(private_cluster, px.url_https, tmp_path),
        ) as proc,
    ):
        async with SandboxHistory(wclient, pns) as history:
            t0 = time.monotonic()
            await _setup_pool(pclient, pns, 20)
            await check_converged(pclient, pns, pools={"pool": 20})
            filled = time.monotonic() - t0
            names = await _claims(pclient, pns, 40)
            served = await check_converged(
                pclient, pns, pools={"pool": 20}, claims=names, history=history, within=90
            )
            took = time.monotonic() - t0
        errors = metric_sum(scrape(mport), "agentsandbox_runtime_informer_watch_ends_total")
        assert proc.poll() is None, "the controller exited"
    counters = px.counters()
    audit = audit_creates(private_cluster, pns)
    unanswered = unanswered_creates(tmp_path / "controller.log", pns)
    print(
        f"\nproxy {counters}; controller watch ends {errors:.0f}; pool filled in {filled:.1f}s, "
        f"40 claims served {took - filled:.1f}s later; sandbox creates by status {audit}, "
        f"{unanswered} lost their answer; {history.extra(40, 20)} beyond need"
    )
    assert counters["resets"] >= 5, "the proxy did not reset connections"
    assert len(served) == 40
    # A create whose answer a reset lost may be repeated under another name (and the extra
    # trimmed) once its same-name retries are spent. Nothing else may create more than needed.
    assert history.extra(40, 20) <= unanswered, f"{history.extra(40, 20)} beyond need"
    assert audit.get(201, 0) <= 40 + 20 + unanswered, audit


async def test_a_pool_create_whose_answer_is_lost_is_not_repeated(
    private_cluster: DevCluster, pclient: Client, wclient: Client, pns: str, tmp_path: Path
) -> None:
    """About 30 s: a pool of 150 fills through a proxy that, once 10 more sandboxes exist, lets
    every request through but loses every answer for one second, then cuts every connection and
    refuses new ones for 5 s (up to 4 rounds; it stops once a sandbox beyond 150 was created).
    The creates in flight were done, but while connections are refused the controller's cache
    cannot learn it (and its informers' reconnect backoff has grown by then, while a create's
    connect retries start again at once); the pool must not decide to create them again."""
    log = tmp_path / "controller.log"
    replicas, rounds = 150, 0
    with (
        proxy(
            f"127.0.0.1:{private_cluster.ports['kube-apiserver']}", tmp_path, refuse_after_loss=5.0
        ) as px,
        controller_process(
            private_cluster, log, kubeconfig=kubeconfig_via(private_cluster, px.url_https, tmp_path)
        ),
    ):
        async with SandboxHistory(wclient, pns) as history:
            await _setup_pool(pclient, pns, replicas)
            while rounds < 4 and history.created <= replicas:
                n = await _sandbox_count(pclient, pns)
                if n >= replicas - 12:
                    break
                await eventually(
                    lambda n=n: _at_least(pclient, pns, n + 10),
                    within=30,
                    what=f"{n + 10} sandboxes",
                    interval=0.02,
                )
                px.lose_answers()
                rounds += 1
                await stays(  # the round: answers lost for 1 s, then connections refused for 5 s
                    lambda: history.created <= replicas,
                    for_=6.0,
                    what="no sandbox beyond the pool's replicas",
                )
                await history.caught_up()
            await check_converged(pclient, pns, pools={"pool": replicas}, history=history)
    lost = unanswered_creates(log, pns)
    audit = audit_creates(private_cluster, pns)
    print(
        f"\n{rounds} rounds of lost answers; {lost} creates lost their answer; creates by "
        f"status {audit}; {history.extra(0, replicas)} beyond {replicas}"
    )
    assert lost > 0, "no create was in flight when the answers were lost"
    assert history.extra(0, replicas) == 0, f"{history.extra(0, replicas)} created beyond need"
    assert audit.get(201, 0) == replicas, audit


# ------------------------------------------------------------------------------------ 429
FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1"


async def test_priority_and_fairness_throttling_429_is_retried_and_nothing_is_lost(
    private_cluster: DevCluster, pclient: Client, wclient: Client, pns: str, tmp_path: Path
) -> None:
    """10-90 s depending on the machine's load, plus two apiserver restarts (with a small total
    concurrency, so that the controller's own priority level gets one seat, and back). The
    controller runs as a user of its own
    (cluster-admin, not system:masters, so not exempt); a FlowSchema sends all its requests to a
    PriorityLevelConfiguration with one seat and one queue of 4: whatever is beyond one request
    running and 4 waiting is answered 429. A pool of 10 fills and 20 claims are served anyway."""
    user = f"faults-controller-{uuid.uuid4().hex[:6]}"
    grant_cluster_admin(private_cluster, user)
    level = f"faults-tiny-{user}"
    private_cluster.api(
        "POST",
        f"{FLOWCONTROL}/prioritylevelconfigurations",
        {
            "metadata": {"name": level},
            "spec": {
                "type": "Limited",
                "limited": {
                    "nominalConcurrencyShares": 1,
                    "lendablePercent": 0,
                    "borrowingLimitPercent": 0,
                    "limitResponse": {
                        "type": "Queue",
                        "queuing": {"queues": 1, "handSize": 1, "queueLengthLimit": 4},
                    },
                },
            },
        },
    )
    private_cluster.api(
        "POST",
        f"{FLOWCONTROL}/flowschemas",
        {
            "metadata": {"name": level},
            "spec": {
                "matchingPrecedence": 100,
                "priorityLevelConfiguration": {"name": level},
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [{"kind": "User", "user": {"name": user}}],
                        "resourceRules": [
                            {
                                "verbs": ["*"],
                                "apiGroups": ["*"],
                                "resources": ["*"],
                                "namespaces": ["*"],
                                "clusterScope": True,
                            }
                        ],
                        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                    }
                ],
            },
        },
    )
    mport = free_port()
    try:
        with (
            apiserver_with(
                private_cluster,
                # 60 seats in all, shared by shares: 1 share of ~250 is 1 seat
                extra=("--max-requests-inflight=40", "--max-mutating-requests-inflight=20"),
            ),
            controller_process(
                private_cluster,
                tmp_path / "controller.log",
                mport,
                kubeconfig=kubeconfig_via(
                    private_cluster, private_cluster.server, tmp_path, user=user
                ),
            ) as proc,
        ):
            async with SandboxHistory(wclient, pns) as history:
                t0 = time.monotonic()
                await _setup_pool(pclient, pns, 10)
                names = await _claims(pclient, pns, 20)
                served = await check_converged(
                    pclient, pns, pools={"pool": 10}, claims=names, history=history, within=180
                )
                took = time.monotonic() - t0
            text = scrape(mport)
            assert proc.poll() is None, "the controller exited"
    finally:
        private_cluster.api("DELETE", f"{FLOWCONTROL}/flowschemas/{level}")
        private_cluster.api("DELETE", f"{FLOWCONTROL}/prioritylevelconfigurations/{level}")
    throttled = metric_sum(text, "rest_client_requests_total", code="429")
    answered = metric_sum(text, "rest_client_requests_total") - throttled
    by = {
        line.split("{", 1)[1].split("}", 1)[0]: line.rsplit(" ", 1)[1]
        for line in text.splitlines()
        if line.startswith("rest_client_requests_total{")
    }
    print(f"\nrequests by code and method: {by}")
    print(
        f"\n429s {throttled:.0f}, other answers {answered:.0f}; pool of 10 and 20 claims "
        f"served in {took:.1f}s"
    )
    assert throttled > 0, "the controller was never throttled"
    assert len(served) == 20
    assert history.extra(20, 10) == 0, f"{history.extra(20, 10)} sandboxes beyond need"


# ------------------------------------------------------------------------------------ slow etcd
async def test_slow_etcd_no_duplicate_creates_and_convergence(
    private_cluster: DevCluster, pclient: Client, wclient: Client, pns: str, tmp_path: Path
) -> None:
    """About 60 s: kube-apiserver restarted to reach etcd through a loopback proxy that delays
    every byte 50-200 ms each way; a pool of 20 fills and 30 claims are served, with no sandbox
    created twice."""
    etcd = f"127.0.0.1:{private_cluster.ports['etcd']}"
    with (
        proxy(etcd, tmp_path, delay_ms="50-200") as px,
        apiserver_with(private_cluster, etcd_servers=px.url_http),
        controller_process(private_cluster, tmp_path / "controller.log") as proc,
    ):
        async with SandboxHistory(wclient, pns) as history:
            t0 = time.monotonic()
            await _setup_pool(pclient, pns, 20)
            await check_converged(pclient, pns, pools={"pool": 20}, within=120)
            filled = time.monotonic() - t0
            names = await _claims(pclient, pns, 30)
            served = await check_converged(
                pclient, pns, pools={"pool": 20}, claims=names, history=history, within=120
            )
            took = time.monotonic() - t0
        assert proc.poll() is None, "the controller exited"
    audit = audit_creates(private_cluster, pns)
    print(
        f"\nslow etcd: pool of 20 in {filled:.1f}s, 30 claims served {took - filled:.1f}s later;"
        f" sandbox creates by status {audit}"
    )
    assert px.counters()["bytes"] > 0, "the apiserver did not talk to etcd through the proxy"
    assert len(served) == 30
    assert history.extra(30, 20) == 0, f"{history.extra(30, 20)} sandboxes beyond need"
    assert audit.get(201, 0) <= 30 + 20, audit
