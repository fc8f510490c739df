"""The runtime under pressure, on a private control plane (audit log on): the Lease stolen while
a SIGTERMed leader drains, an event loop blocked past the renew deadline, and renewals while the
controllers' client-side rate limiter is saturated.

Each controller runs as a user of its own (cluster-admin, not system:masters), so the audit log
tells its writes from the test's, and API priority and fairness applies to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import signal
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from agentsandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS, SANDBOXES
from agentsandbox.cli.options import LEADER_ELECTION_ID
from agentsandbox.devcluster.cluster import DevCluster, free_port
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import Conflict
from agentsandbox.kube.resources import LEASES
from agentsandbox.kube.timefmt import format_micro_time
from tests.integration.invariants import check_converged, controller_process
from tests.integration.test_warmpool import pool_obj, template_obj
from tests.polling import eventually, stays

from .faultkit import SHORT_LEASE, grant_cluster_admin, kubeconfig_via, metric_sum, scrape

LEASE, RENEW, RETRY = 4.0, 3.0, 0.5  # tests/faults/short_lease_controller.py's timings
STALL = 5.0  # seconds the stalled controller's loop is blocked: more than RENEW


def _own_user(cluster: DevCluster, tmp_path: Path) -> tuple[str, Path]:
    user = f"faults-runtime-{uuid.uuid4().hex[:6]}"
    grant_cluster_admin(cluster, user)
    return user, kubeconfig_via(cluster, cluster.server, tmp_path, user=user)


def _writes_by(cluster: DevCluster, user: str) -> list[tuple[datetime.datetime, str, str]]:
    """(received, verb, resource) of every write by ``user`` in the audit log."""
    out = []
    with (cluster.logs / "audit.log").open("rb") as f:
        for line in f:
            with contextlib.suppress(ValueError):
                ev = json.loads(line)
                if ev.get("stage") != "ResponseComplete":
                    continue
                if (ev.get("user") or {}).get("username") != user:
                    continue
                received = datetime.datetime.fromisoformat(ev["requestReceivedTimestamp"])
                ref = ev.get("objectRef") or {}
                out.append((received, ev.get("verb", ""), ref.get("resource", "")))
    return out


def _get(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


# ---------------------------------------------------------------------- lease lost mid-drain
async def test_a_lease_lost_mid_drain_stops_every_write(
    private_cluster: DevCluster, pclient: Client, pns: str, tmp_path: Path
) -> None:
    """About 30 s. A leader (lease/renew/retry 4/3/0.5 s) fills a pool of 100 at
    --kube-api-qps=2, so a reconcile pass is in flight most of the time; it gets SIGTERM, and
    once the drain has written something the test takes the Lease (a CAS write naming an
    intruder for 60 s). The leader sees it at its next renewal: it cancels its drain, flushes no
    event, does not release the intruder's Lease and exits 1; the audit log shows no write of its
    user received later than the steal + the renew deadline."""
    user, kubeconfig = _own_user(private_cluster, tmp_path)
    await pclient.create(SANDBOX_TEMPLATES, template_obj("tpl"), pns)
    log = tmp_path / "leader.log"
    flags = (
        "--leader-elect=true",
        f"--leader-election-namespace={pns}",
        "--kube-api-qps=2",
        "--kube-api-burst=2",
    )
    env = {"AGENTSANDBOX_LEASE": f"{LEASE},{RENEW},{RETRY}"}
    with controller_process(
        private_cluster,
        log,
        free_port(),
        kubeconfig=kubeconfig,
        argv0=SHORT_LEASE,
        flags=flags,
        env=env,
    ) as proc:
        await pclient.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 100), pns)

        async def filling() -> bool:
            assert proc.poll() is None, log.read_text()[-2000:]
            return len(await pclient.list(SANDBOXES, pns)) >= 8

        await eventually(filling, within=90, what="8 sandboxes of the pool of 100")
        term = datetime.datetime.now(datetime.UTC)
        proc.send_signal(signal.SIGTERM)

        def drain_wrote() -> bool:  # a write of a reconcile, not a Lease renewal
            writes = _writes_by(private_cluster, user)
            return any(at > term and what != "leases" for at, _, what in writes)

        await eventually(drain_wrote, within=10, what="a write of the drain after SIGTERM")
        assert proc.poll() is None, "the drain ended before the Lease could be taken"
        for _ in range(50):  # the leader renews every 0.5 s: retry a CAS that lost to it
            lease = await pclient.get(LEASES, LEADER_ELECTION_ID, pns)
            now = format_micro_time(datetime.datetime.now(datetime.UTC))
            lease["spec"].update(
                holderIdentity="intruder",
                leaseDurationSeconds=60,
                acquireTime=now,
                renewTime=now,
            )
            stolen = datetime.datetime.now(datetime.UTC)
            try:
                await pclient.update(LEASES, lease, pns)
            except Conflict:
                continue
            break
        else:
            pytest.fail("could not take the Lease in 50 tries")
        await eventually(
            lambda: proc.poll() is not None, within=RENEW + 5, what="the leader exiting"
        )
        code = proc.returncode
    late = [
        w
        for w in _writes_by(private_cluster, user)
        if w[0] > stolen + datetime.timedelta(seconds=RENEW)
    ]
    drained = [
        w for w in _writes_by(private_cluster, user) if term < w[0] <= stolen and w[2] != "leases"
    ]
    holder = (await pclient.get(LEASES, LEADER_ELECTION_ID, pns))["spec"]["holderIdentity"]
    print(f"\n{len(drained)} writes of the drain before the steal; {len(late)} after steal + renew")
    assert drained, "no write during the drain: the test proved nothing"
    assert not late, f"writes after the Lease was lost: {late[:5]}"
    assert code == 1, log.read_text()[-2000:]
    assert holder == "intruder", "the old leader released a Lease that was not its own"


# ---------------------------------------------------------------------- a stalled event loop
async def test_a_stalled_event_loop_fails_healthz_and_recovers(
    private_cluster: DevCluster, pclient: Client, pns: str, tmp_path: Path
) -> None:
    """About 20 s. The controller (renew deadline 3 s) blocks its event loop for 5 s on SIGUSR1
    (tests/faults/short_lease_controller.py). /healthz/event-loop fails after the stall, the stall
    is counted and the check passes again 3 s later; the controller still fills a pool."""
    port = free_port()
    log = tmp_path / "stalled.log"
    env = {"AGENTSANDBOX_LEASE": f"{LEASE},{RENEW},{RETRY}", "AGENTSANDBOX_STALL": str(STALL)}
    with controller_process(
        private_cluster,
        log,
        port,
        argv0=SHORT_LEASE,
        flags=(f"--health-probe-bind-address=127.0.0.1:{port}",),  # probes beside /metrics
        env=env,
    ) as proc:

        def healthy() -> bool:
            assert proc.poll() is None, log.read_text()[-2000:]
            return _get(port, "/healthz") == 200

        await eventually(healthy, within=30, what="/healthz ok", ignoring=OSError)
        proc.send_signal(signal.SIGUSR1)
        await eventually(
            lambda: _get(port, "/healthz/event-loop") == 500,
            within=STALL + RENEW,
            what="/healthz/event-loop failing after the stall",
            ignoring=OSError,
        )
        text = scrape(port)
        assert metric_sum(text, "agentsandbox_runtime_event_loop_stalls_total") >= 1
        assert _get(port, "/healthz") == 500
        await eventually(healthy, within=RENEW + 5, what="/healthz ok again")
        await stays(healthy, for_=1.0, what="/healthz staying ok")
        await pclient.create(SANDBOX_TEMPLATES, template_obj("tpl"), pns)
        await pclient.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 3), pns)
        await check_converged(pclient, pns, pools={"pool": 3})
        assert proc.poll() is None


# ---------------------------------------------------------------------- renewal starvation
async def test_renewals_do_not_wait_behind_the_controllers_rate_limit(
    private_cluster: DevCluster, pclient: Client, pns: str, tmp_path: Path
) -> None:
    """About 40 s. A leader (lease/renew/retry 4/3/0.5 s) fills a pool of 30 at
    --kube-api-qps=3 --kube-api-burst=3: a batch of 16 creates reserves more than 5 s of the
    controllers' rate limiter, longer than the renew deadline. The Lease requests have a client
    of their own, so the leader keeps the Lease through the fill: it never exits,
    ``leader_election_master_status`` stays 1 and ``leaseTransitions`` does not move."""
    port = free_port()
    log = tmp_path / "starved.log"
    flags = (
        "--leader-elect=true",
        f"--leader-election-namespace={pns}",
        "--kube-api-qps=3",
        "--kube-api-burst=3",
    )
    env = {"AGENTSANDBOX_LEASE": f"{LEASE},{RENEW},{RETRY}"}
    with controller_process(
        private_cluster, log, port, argv0=SHORT_LEASE, flags=flags, env=env
    ) as proc:

        def leading() -> bool:
            assert proc.poll() is None, log.read_text()[-2000:]
            text = scrape(port)
            return metric_sum(text, "leader_election_master_status", name=LEADER_ELECTION_ID) == 1

        await eventually(leading, within=30, what="leading", ignoring=OSError)
        before = (await pclient.get(LEASES, LEADER_ELECTION_ID, pns))["spec"]
        await pclient.create(SANDBOX_TEMPLATES, template_obj("tpl"), pns)
        await pclient.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 30), pns)
        converged = asyncio.ensure_future(
            check_converged(pclient, pns, pools={"pool": 30}, within=180)
        )
        try:
            while not converged.done():
                await stays(leading, for_=0.5, what="the leader keeping the Lease", interval=0.1)
            await converged
        finally:
            converged.cancel()
        after = (await pclient.get(LEASES, LEADER_ELECTION_ID, pns))["spec"]
        assert proc.poll() is None
        text = scrape(port)
    waits = metric_sum(text, "rest_client_rate_limiter_duration_seconds_count")
    short = metric_sum(text, "rest_client_rate_limiter_duration_seconds_bucket", le="2.56")
    print(f"\n{waits - short:.0f} of {waits:.0f} controller requests waited > 2.56 s for a token")
    assert waits > short, "no request waited long on the rate limiter: the test proved nothing"
    assert after["holderIdentity"] == before["holderIdentity"]
    assert after.get("leaseTransitions", 0) == before.get("leaseTransitions", 0)
