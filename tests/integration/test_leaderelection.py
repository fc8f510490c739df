"""Leader election on a real Lease: one leader, fast hand-over, and work stops when it is lost.

Timings are scaled down from controller-runtime's 15/10/2 s to keep the suite fast; the rules
are the same. Every timing bound is derived from them (``LEASE``, ``JITTER_FACTOR``) plus a
stated ``MARGIN``, written beside the bound and printed when it fails.
"""

from __future__ import annotations

import asyncio
import datetime
import math
import time
from typing import Any

import pytest

from agentsandbox.kube.builder import ControllerBuilder
from agentsandbox.kube.client import Client
from agentsandbox.kube.leaderelection import JITTER_FACTOR, LeaderElector
from agentsandbox.kube.manager import LeaderElectionLost, Manager
from agentsandbox.kube.reconcile import Request, Result
from agentsandbox.kube.resources import CONFIGMAPS, LEASES
from agentsandbox.kube.timefmt import format_micro_time, parse_micro_time
from tests.polling import eventually, stays

from .runtime_helpers import sample

LEASE = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.25}
DURATION = math.ceil(LEASE["lease_duration"])  # the Lease says whole seconds (3)
RETRY = LEASE["retry_period"]
POLL = RETRY * JITTER_FACTOR  # a candidate's longest wait between two looks at the Lease
# What the timings do not count: at most three API round trips (the gets and updates of the
# Lease that the rule leaves out, a get by the test) and the test's 20 ms poll, on a shared,
# busy 2-core machine (up to ~250 ms each).
MARGIN = 0.75


def within_bounds(took: float, low: float, high: float, derivation: str) -> str | None:
    """None if ``low <= took <= high``; else what failed, with how the bounds were derived."""
    if low <= took <= high:
        return None
    return f"took {took:.3f}s, outside [{low:.3f}, {high:.3f}]s = {derivation}"


def between(earlier: str, later: str) -> float:
    """Seconds between two of a Lease's MicroTimes (stamped by this machine's clock)."""
    start, end = parse_micro_time(earlier), parse_micro_time(later)
    assert start is not None and end is not None, (earlier, later)
    return (end - start).total_seconds()


class Replica:
    """One manager with one controller that records what it reconciled."""

    def __init__(self, client: Client, namespace: str, name: str, **options: Any) -> None:
        self.seen: list[Request] = []
        self.cancelled = 0
        self.block = False
        self.manager = Manager(
            client,
            leader_election=True,
            leader_election_id="runtime-test",
            leader_election_namespace=namespace,
            leader_election_identity=name,
            **{**LEASE, **options},
        )
        ControllerBuilder(self.manager).named(f"le-{name}").for_(
            CONFIGMAPS, namespace=namespace
        ).complete(self.reconcile)
        self.task: asyncio.Task[None] | None = None

    async def reconcile(self, request: Request) -> Result:
        self.seen.append(request)
        if self.block:
            try:  # a reconcile that hangs (60 s at most)
                await asyncio.wait_for(asyncio.Event().wait(), 60)
            except TimeoutError:
                pass
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return Result()

    def start(self) -> None:
        self.task = asyncio.create_task(self.manager.run(handle_signals=False))

    async def stop(self) -> None:
        self.manager.stop()
        assert self.task is not None
        await asyncio.wait_for(self.task, 30)


async def holder(client: Client, namespace: str) -> str:
    lease = await client.get(LEASES, "runtime-test", namespace)
    return str(lease["spec"].get("holderIdentity") or "")


async def test_exactly_one_replica_reconciles_and_the_other_takes_over_on_shutdown(
    client: Client, namespace: str
) -> None:
    await client.create(CONFIGMAPS, {"metadata": {"name": "work"}}, namespace)
    a, b = Replica(client, namespace, "a"), Replica(client, namespace, "b")
    a.start()
    await eventually(lambda: a.manager.is_leader, within=20.0, what="a leads")
    b.start()
    try:
        await eventually(lambda: a.seen, within=20.0, what="a reconciles")
        await stays(  # several of b's retry periods
            lambda: not b.manager.is_leader and b.seen == [],
            for_=1.0,
            what="b standing by",
        )
        assert await holder(client, namespace) == "a"

        await a.stop()  # releases the Lease
        stopped = time.monotonic()
        await eventually(lambda: b.manager.is_leader, within=10, what="b takes over", interval=0.02)
        took = time.monotonic() - stopped
        # The release empties the holder: b takes the Lease at its next look, without waiting
        # out the lease duration.
        high = POLL + MARGIN
        assert high < DURATION  # else the bound could not tell a release from an expiry
        failed = within_bounds(
            took, 0.0, high, f"[0, retry {RETRY} x jitter {JITTER_FACTOR} + margin {MARGIN}]"
        )
        print(f"\nb leads {took:.3f}s after a released the Lease (bound {high:.3f}s)")
        assert failed is None, failed
        await eventually(lambda: b.seen, within=10, what="b reconciles", interval=0.05)
        assert await holder(client, namespace) == "b"
        assert sample("leader_election_master_status", {"name": "runtime-test"}) == 1
        lease = await client.get(LEASES, "runtime-test", namespace)
        assert lease["spec"]["leaseTransitions"] >= 1
        assert lease["spec"]["leaseDurationSeconds"] == 3
    finally:
        await b.stop()
    released = await client.get(LEASES, "runtime-test", namespace)
    assert released["spec"].get("holderIdentity", "") == ""
    assert released["spec"]["leaseDurationSeconds"] == 1
    assert sample("leader_election_master_status", {"name": "runtime-test"}) == 0


async def test_a_crashed_leader_is_replaced_once_its_lease_expires(
    client: Client, namespace: str
) -> None:
    await client.create(CONFIGMAPS, {"metadata": {"name": "work"}}, namespace)
    a = Replica(client, namespace, "a", leader_election_release_on_cancel=False)
    b = Replica(client, namespace, "b")
    a.start()
    await eventually(lambda: a.manager.is_leader, within=20.0, what="a leads")
    b.start()
    try:
        await eventually(lambda: a.seen, within=20.0, what="a reconciles")
        await a.stop()  # no release: looks like a crash to b
        lease = await client.get(LEASES, "runtime-test", namespace)
        assert lease["spec"]["holderIdentity"] == "a"
        await eventually(lambda: b.manager.is_leader, within=10, what="b takes over", interval=0.02)
        after = await client.get(LEASES, "runtime-test", namespace)
        took = between(lease["spec"]["renewTime"], after["spec"]["acquireTime"])
        # b waits until the record it last saw change is the Lease's duration old on its own
        # clock. It saw a's last renewal after a wrote it (so never sooner than DURATION after
        # the renewTime a stamped) and at most one look (POLL) later; it takes over at its first
        # look once DURATION has passed: one more POLL at most.
        low, high = DURATION - 0.01, DURATION + 2 * POLL + MARGIN  # 0.01: the clocks' rounding
        failed = within_bounds(
            took,
            low,
            high,
            f"[duration {DURATION} - 0.01, duration + 2 x retry {RETRY} x jitter "
            f"{JITTER_FACTOR} + margin {MARGIN}] from a's last renewTime to b's acquireTime",
        )
        print(f"\nb acquired {took:.3f}s after a's last renewal (bounds {low:.3f}-{high:.3f}s)")
        assert failed is None, failed
        await eventually(lambda: b.seen, within=10, what="b reconciles", interval=0.05)
    finally:
        await b.stop()


async def test_losing_the_lease_stops_the_work_at_once(client: Client, namespace: str) -> None:
    await client.create(CONFIGMAPS, {"metadata": {"name": "slow"}}, namespace)
    a = Replica(client, namespace, "a")
    a.block = True
    a.start()
    await eventually(lambda: a.seen, within=20.0, what="a reconciles")
    # Someone else takes the Lease behind a's back (e.g. a partitioned leader).
    lease = await client.get(LEASES, "runtime-test", namespace)
    now = format_micro_time(datetime.datetime.now(datetime.UTC))
    lease["spec"].update(holderIdentity="intruder", renewTime=now, leaseDurationSeconds=60)
    await client.update(LEASES, lease, namespace)
    stolen = time.monotonic()
    assert a.task is not None
    with pytest.raises(LeaderElectionLost):
        await asyncio.wait_for(a.task, 10)
    took = time.monotonic() - stolen
    # Seeing another holder with a valid lease ends leadership at the next renewal (a leader
    # renews every retry period, no jitter), without waiting for the renew deadline.
    high = RETRY + MARGIN
    assert high < LEASE["renew_deadline"] - RETRY  # else it could not tell the two apart
    failed = within_bounds(took, 0.0, high, f"[0, retry {RETRY} + margin {MARGIN}]")
    print(f"\na stopped {took:.3f}s after its Lease was taken (bound {high:.3f}s)")
    assert failed is None, failed
    assert a.cancelled == 1, "the running reconcile was cancelled"
    assert await holder(client, namespace) == "intruder"  # a lost lease is not "released"
    assert sample("leader_election_master_status", {"name": "runtime-test"}) == 0


async def test_elector_creates_renews_and_releases_the_lease(
    client: Client, namespace: str
) -> None:
    events: list[str] = []
    elector = LeaderElector(
        client,
        name="runtime-test",
        namespace=namespace,
        identity="solo",
        on_started_leading=lambda: events.append("started"),
        on_stopped_leading=lambda: events.append("stopped"),
        on_new_leader=lambda who: events.append(f"leader={who}"),
        lease_duration=LEASE["lease_duration"],
        renew_deadline=LEASE["renew_deadline"],
        retry_period=LEASE["retry_period"],
    )
    elector.start()
    await asyncio.wait_for(elector.wait_leading(), 5)
    first = (await client.get(LEASES, "runtime-test", namespace))["spec"]
    assert first["holderIdentity"] == "solo" and first["leaseTransitions"] == 0

    async def renewed_lease() -> dict[str, Any] | None:
        spec: dict[str, Any] = (await client.get(LEASES, "runtime-test", namespace))["spec"]
        return spec if spec["renewTime"] > first["renewTime"] else None

    # the holder renews every retry period (no jitter); MARGIN for its round trip and the test's
    t0 = time.monotonic()
    renewed = await eventually(
        renewed_lease,
        within=RETRY + MARGIN,
        what=f"the lease renewed within retry {RETRY} + margin {MARGIN} s",
        interval=0.02,
    )
    print(f"\nrenewed {time.monotonic() - t0:.3f}s after the first look")
    assert renewed["acquireTime"] == first["acquireTime"]
    await elector.stop()
    assert events == ["leader=solo", "started", "stopped"]
    released = (await client.get(LEASES, "runtime-test", namespace))["spec"]
    assert released.get("holderIdentity", "") == "" and released["leaseDurationSeconds"] == 1
