"""Two controller replicas with leader election on one Lease: exactly one acts; the leader is
SIGKILLed mid-burst and the standby takes over within the bound the lease timings give (below)
and finishes.

Both replicas are the real command line (tests/faults/short_lease_controller.py) with the lease
timings cut from controller-runtime's 15/10/2 s to 4/3/0.5 s: upstream has no flags for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentsandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS
from agentsandbox.cli.options import LEADER_ELECTION_ID
from agentsandbox.devcluster.cluster import DevCluster, free_port
from agentsandbox.kube.client import Client
from agentsandbox.kube.leaderelection import JITTER_FACTOR
from agentsandbox.kube.resources import LEASES
from agentsandbox.kube.timefmt import parse_micro_time
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
from tests.polling import eventually

from .faultkit import SHORT_LEASE, metric_sum, scrape

LEASE, RENEW, RETRY = 4.0, 3.0, 0.5
DURATION = math.ceil(LEASE)  # the Lease says whole seconds
POLL = RETRY * JITTER_FACTOR  # the standby's longest wait between two looks at the Lease
# What the timings do not count: three API requests (the leader's write of its last renewal, the
# standby's get that sees it, the standby's get before it takes over), up to ~300 ms each on a
# shared, busy 2-core machine.
MARGIN = 1.0
KILL_AT_BOUND = 10


@pytest.fixture(autouse=True)
async def claim_history(
    cluster: DevCluster, namespace: str, request: pytest.FixtureRequest
) -> AsyncIterator[SandboxHistory]:
    """Every claim and sandbox of each test, checked against the claim rules at its end
    (tests/integration/invariants.py)."""
    async with checked_history(cluster, request.node.nodeid) as history:
        yield history


def _leading(port: int) -> bool:
    try:
        text = scrape(port)
    except OSError:
        return False
    return metric_sum(text, "leader_election_master_status", name=LEADER_ELECTION_ID) == 1


def _reconciles(port: int) -> float:
    return metric_sum(scrape(port), "controller_runtime_reconcile_total")


def _between(earlier: str, later: str) -> float:
    """Seconds between two of a Lease's MicroTimes (stamped by this machine's clock)."""
    start, end = parse_micro_time(earlier), parse_micro_time(later)
    assert start is not None and end is not None, (earlier, later)
    return (end - start).total_seconds()


@dataclass
class Takeover:
    bound: int  # claims bound when the leader was dead
    after_kill: float  # the standby led this long after the kill
    after_renewal: float  # the standby's acquireTime - the dead leader's last renewTime
    finished: float  # all claims served this long after the kill
    served: int
    extra: int
    holder: dict[str, Any]  # the Lease before and after
    after: dict[str, Any]


async def test_two_replicas_one_acts_and_the_standby_finishes_after_a_kill_9(
    client: Client, cluster: DevCluster, namespace: str, tmp_path: Path
) -> None:
    """About 35 s (up to three times if the kill misses): a pool of 20 filled by the leader
    while the standby waits, then 50 claims; the leader is SIGKILLed once 10 are bound. The kill
    must land mid-burst (``10 <= bound < 50`` once the leader is dead), or the scenario runs
    again in a fresh namespace (three tries, then the test fails)."""

    async def attempt(ns: str) -> Takeover:
        env = {"AGENTSANDBOX_LEASE": f"{LEASE},{RENEW},{RETRY}"}
        flags = ("--leader-elect=true", f"--leader-election-namespace={ns}")
        ports = {"a": free_port(), "b": free_port()}
        names = {f"c-{i:02d}" for i in range(50)}
        logs = {k: tmp_path / f"{k}-{ns}.log" for k in ports}
        with contextlib.ExitStack() as stack:
            a = stack.enter_context(
                controller_process(
                    cluster, logs["a"], ports["a"], argv0=SHORT_LEASE, flags=flags, env=env
                )
            )
            deadline = time.monotonic() + 30

            def a_leads() -> bool:
                assert a.poll() is None, logs["a"].read_text()[-2000:]
                return _leading(ports["a"])

            await eventually(a_leads, within=30, what="a leading")
            b = stack.enter_context(
                controller_process(
                    cluster, logs["b"], ports["b"], argv0=SHORT_LEASE, flags=flags, env=env
                )
            )

            def b_answers() -> bool:
                assert b.poll() is None, logs["b"].read_text()[-2000:]
                scrape(ports["b"])
                return True

            await eventually(  # b is up and standing by: its metrics answer
                b_answers,
                within=deadline + 30 - time.monotonic(),
                what="b's metrics answering",
                ignoring=OSError,
            )
            await client.create(SANDBOX_TEMPLATES, template_obj("tpl"), ns)
            await client.create(SANDBOX_WARM_POOLS, pool_obj("pool", "tpl", 20), ns)
            await check_converged(client, ns, pools={"pool": 20})
            # exactly one acts: the standby is up (its metrics answer) and has reconciled nothing
            assert _reconciles(ports["a"]) > 0
            assert _reconciles(ports["b"]) == 0 and not _leading(ports["b"])
            holder = (await client.get(LEASES, LEADER_ELECTION_ID, ns))["spec"]
            async with SandboxHistory(client, ns) as history:
                killer = asyncio.create_task(
                    kill_when(
                        client,
                        SANDBOX_CLAIMS,
                        ns,
                        a,
                        lambda claims: bound_claims(claims) >= KILL_AT_BOUND,
                        what=f"{KILL_AT_BOUND} claims bound",
                    )
                )
                try:
                    await asyncio.gather(
                        *(
                            client.create(SANDBOX_CLAIMS, claim_obj(n, pool="pool"), ns)
                            for n in names
                        )
                    )
                    await killer
                finally:
                    killer.cancel()  # a no-op once it is done
                killed = time.monotonic()
                # b cannot lead yet (not before DURATION after a's last renewal) and never acted
                assert _reconciles(ports["b"]) == 0, "the standby acted while a led"
                bound, _ = await claim_progress(client, ns)  # what the dead leader left
                last = (await client.get(LEASES, LEADER_ELECTION_ID, ns))["spec"]
                if not KILL_AT_BOUND <= bound < 50:
                    raise KillMissed(f"{bound} of 50 claims bound at the kill")
                await eventually(
                    lambda: _leading(ports["b"]),
                    within=3 * LEASE - (time.monotonic() - killed),
                    what="b taking over",
                    interval=0.05,
                )
                after_kill = time.monotonic() - killed
                served = await check_converged(
                    client, ns, pools={"pool": 20}, claims=names, history=history
                )
                finished = time.monotonic() - killed
            after = (await client.get(LEASES, LEADER_ELECTION_ID, ns))["spec"]
        return Takeover(
            bound,
            after_kill,
            _between(last["renewTime"], after["acquireTime"]),
            finished,
            len(served),
            history.extra(50, 20),
            holder,
            after,
        )

    got = await kill_in_flight(cluster, namespace, attempt)
    # b takes over once the record it last saw change (a's last renewal, which b saw at most one
    # look after a wrote it, and never before) is DURATION old on b's clock, at its first look
    # after that: b's acquireTime is between DURATION and DURATION + 2 looks after a's last
    # renewTime. The "lease + retry" (4.5 s) counts one look only.
    low, high = DURATION - 0.01, DURATION + 2 * POLL + MARGIN  # 0.01 s: the clocks' rounding
    derivation = (
        f"[duration {DURATION} - 0.01, duration + 2 x retry {RETRY} x jitter {JITTER_FACTOR} + "
        f"margin {MARGIN}] s after a's last renewal"
    )
    print(
        f"\nleader killed with {got.bound}/50 bound; standby leads {got.after_kill:.2f}s after "
        f"the kill, acquired {got.after_renewal:.2f}s after the dead leader's last renewal (bounds "
        f"{low:.2f}-{high:.2f}s); all 50 served {got.finished:.1f}s after the kill"
    )
    assert low <= got.after_renewal <= high, f"took {got.after_renewal:.3f}s; {derivation}"
    assert got.after["holderIdentity"] != got.holder["holderIdentity"]
    assert got.after["leaseTransitions"] == got.holder.get("leaseTransitions", 0) + 1
    assert got.served == 50
    assert got.extra == 0, f"{got.extra} sandboxes beyond need"
