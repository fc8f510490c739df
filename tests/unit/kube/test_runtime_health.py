"""Security review #7: leader election has its own HTTP connection pool and is not rate-limited
with the controllers; an event-loop lag metric and a ``/healthz`` check that fails when the loop
stalls past the renew deadline; a ``/healthz`` check for the elector (a leader that stopped
renewing, or an election loop that died). Injected clocks and sleeps: nothing waits on real time.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from kubernetes_asyncio.client import Configuration

from agentsandbox.kube import metrics
from agentsandbox.kube.client import Client
from agentsandbox.kube.config import AuthProvider, ClusterConfig
from agentsandbox.kube.manager import Manager
from tests.polling import yield_to_loop
from tests.unit.kube.test_leaderelection import Clock, LeaseApi, make_elector


def _client(**options: Any) -> Client:
    config = ClusterConfig("http://127.0.0.1:9", None, AuthProvider(Configuration()))
    return Client(config, **options)


def _leader_manager(client: Client, **options: Any) -> Manager:
    return Manager(
        client,
        leader_election=True,
        leader_election_id="unit-lease",
        leader_election_namespace="ns",
        **options,
    )


async def test_the_elector_has_its_own_pool_and_skips_the_controllers_rate_limit() -> None:
    """Security review #7: with the controllers' bucket drained (qps 5, burst 5, 128 requests
    reserved), the elector's next request still takes no wait, and it never shares the
    controllers' connection pool."""
    client = _client(qps=5, burst=5)
    mgr = _leader_manager(client)
    try:
        assert mgr.elector is not None
        own = cast(Client, mgr.elector._client)
        assert own is not client, "the elector must not share the controllers' client"
        for _ in range(128):
            client.rate_limiter.reserve()  # a 128-wide create batch queued on the controllers
        assert client.rate_limiter.reserve() > 20  # a controller request would wait ~26 s
        assert await own.rate_limiter.acquire() == 0.0
        assert own._requests_session() is not client._requests_session()
    finally:
        await mgr.close_clients()
        await client.close()


class Ticks:
    """The monitor's pause, one per :meth:`tick`: moves the clock by the pause plus ``stall``
    (how long the loop was blocked meanwhile)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.steps: asyncio.Queue[float] = asyncio.Queue()

    async def sleep(self, seconds: float) -> None:
        stall = await self.steps.get()
        self.clock.now += seconds + stall

    async def tick(self, stall: float = 0.0) -> None:
        self.steps.put_nowait(stall)
        await yield_to_loop(3)  # the monitor measures the pause and waits for the next step


def _lag() -> float:
    return metrics.REGISTRY.get_sample_value("agentsandbox_runtime_event_loop_lag_seconds") or 0


async def test_a_loop_stalled_past_the_renew_deadline_fails_the_health_check() -> None:
    """Security review #7: the lag is measured and exported; a stall longer than the renew
    deadline fails the check while it lasts and for the renew deadline after it."""
    from agentsandbox.kube.looplag import LoopMonitor  # new with the fix: fail here, not at import

    clock = Clock()
    monitor = LoopMonitor(stall_after=10.0, interval=0.5, clock=clock.monotonic)
    ticks = Ticks(clock)
    monitor._sleep = ticks.sleep  # type: ignore[method-assign]
    stalls_before = (
        metrics.REGISTRY.get_sample_value("agentsandbox_runtime_event_loop_stalls_total") or 0
    )
    task = asyncio.create_task(monitor.run())
    try:
        await ticks.tick()
        await ticks.tick()
        assert monitor.healthy() and _lag() == pytest.approx(0.0)
        clock.now += 11.0  # the loop is blocked right now: no tick for 11 s
        assert not monitor.healthy()
        clock.now -= 11.0
        await ticks.tick(stall=12.0)  # this pause lasts 12.5 s instead of 0.5 s
        assert _lag() == pytest.approx(12.0)
        assert not monitor.healthy(), "the tick that measured the stall reports it"
        assert (
            metrics.REGISTRY.get_sample_value("agentsandbox_runtime_event_loop_stalls_total")
            == stalls_before + 1
        )
        await ticks.tick()
        assert _lag() == pytest.approx(0.0)
        assert not monitor.healthy(), "held for the renew deadline, for a probe to see it"
        for _ in range(20):  # 10 s of normal ticks after the stall
            await ticks.tick()
        assert monitor.healthy()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_the_manager_serves_the_loop_and_elector_checks_on_healthz() -> None:
    """Security review #7: /healthz names both checks (stall after the renew deadline)."""
    client = _client(qps=0)
    mgr = _leader_manager(client, renew_deadline=7.0, lease_duration=9.0)
    try:
        assert mgr._healthz["event-loop"] == mgr.loop_monitor.healthy
        assert mgr.loop_monitor.stall_after == 7.0
        assert "leader-election" in mgr._healthz
    finally:
        await mgr.close_clients()
        await client.close()


async def test_the_elector_check_fails_for_a_stuck_leader_or_a_dead_election_loop() -> None:
    """Security review #7: as kube-controller-manager's leader healthz adaptor (lease duration
    + 20 s without a renewal while leading), and the election task supervised."""
    api, clock = LeaseApi(), Clock()
    elector = make_elector(api, clock)
    assert elector.healthy(), "not started yet"
    elector._leading = True
    elector._last_renew = clock.now
    clock.now += 15.0 + 20.0
    assert elector.healthy()
    clock.now += 0.1
    assert not elector.healthy(), "leading without a renewal for lease duration + 20 s"
    elector._leading = False

    async def crash() -> None:
        raise RuntimeError("election bug")

    elector._task = asyncio.create_task(crash())
    with pytest.raises(RuntimeError):
        await elector._task
    assert not elector.healthy(), "an election loop that died while nobody stopped it"
