"""Manager pieces without a cluster: bind addresses, probes, and shutdown with and without
draining."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import cast

import aiohttp
import pytest

from agentsandbox.kube.client import Client
from agentsandbox.kube.controller import Controller
from agentsandbox.kube.manager import Manager, parse_bind_address
from agentsandbox.kube.reconcile import Request, Result
from tests.polling import stays


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", None),
        ("", None),
        (":8080", (None, 8080)),
        ("0.0.0.0:8080", ("0.0.0.0", 8080)),
        ("127.0.0.1:8081", ("127.0.0.1", 8081)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::1]:9000", ("::1", 9000)),
    ],
)
def test_bind_addresses(text: str, expected: tuple[str, int] | None) -> None:
    assert parse_bind_address(text) == expected


@pytest.mark.parametrize("text", ["8080", "host:port", ":70000"])
def test_bad_bind_addresses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_bind_address(text)


class Blocking:
    """A reconciler that blocks until cancelled or released."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.outcome = ""

    async def reconcile(self, request: Request) -> Result:
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.outcome = "cancelled"
            raise
        self.outcome = "finished"
        return Result()


def manager_with(reconciler: Blocking, name: str) -> Manager:
    # No informers, no leader election, no servers: the manager never calls the API server.
    # The drain outlasts every wait_for below (those only stop a hung test): a stop that waits
    # for the reconcile hangs the test, one that cancels it ends at once; nothing is timed.
    mgr = Manager(cast(Client, None), graceful_shutdown_timeout=3600)
    controller = Controller(name, reconciler)
    controller.enqueue(Request("ns", "a"))
    mgr.add(controller)
    return mgr


async def test_stop_waits_for_the_reconcile_in_flight() -> None:
    reconciler = Blocking()
    mgr = manager_with(reconciler, "unit-drain")
    task = asyncio.create_task(mgr.run(handle_signals=False))
    await asyncio.wait_for(reconciler.started.wait(), 5)
    mgr.stop()
    await stays(lambda: not task.done(), for_=0.05, what="the manager waiting for the reconcile")
    reconciler.release.set()
    await asyncio.wait_for(task, 5)
    assert reconciler.outcome == "finished"


async def test_a_second_stop_does_not_wait_for_reconciles() -> None:
    reconciler = Blocking()
    mgr = manager_with(reconciler, "unit-force")
    task = asyncio.create_task(mgr.run(handle_signals=False))
    await asyncio.wait_for(reconciler.started.wait(), 5)
    mgr.stop()
    await stays(lambda: not task.done(), for_=0.05, what="the manager waiting for the reconcile")
    mgr.stop()
    await asyncio.wait_for(task, 5)
    assert reconciler.outcome == "cancelled"


def ipv6_loopback() -> bool:
    """True if this machine can use ``::1`` (IPv6 compiled in and a loopback address bound)."""
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.fixture
async def wildcard_manager() -> AsyncIterator[Manager]:
    """A manager serving metrics and probes on ``":0"`` (no host), stopped afterwards."""
    mgr = Manager(cast(Client, None), metrics_bind_address=":0", health_probe_bind_address=":0")
    task = asyncio.create_task(mgr.run(handle_signals=False))
    try:
        await asyncio.wait_for(mgr.wait_started(), 5)
        yield mgr
    finally:
        mgr.stop()
        await asyncio.wait_for(task, 5)


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        pytest.param(
            "::1",
            marks=pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback (::1) here"),
        ),
    ],
)
async def test_an_empty_host_listens_on_ipv4_and_ipv6_like_go(
    wildcard_manager: Manager, host: str
) -> None:
    """``":port"`` must reach the process over IPv4 and IPv6 (Go's ``net.Listen`` is dual-stack),
    or probes fail on IPv6-only clusters.

    The servers bind the wildcard address, because that is what is tested; the test connects
    only to loopback: ``127.0.0.1``, and ``::1`` unless the machine has no IPv6 loopback
    (``socket.has_ipv6`` false or ``::1`` not bindable), in which case that case is skipped.
    """
    assert wildcard_manager.metrics_address is not None
    assert wildcard_manager.health_probe_address is not None
    metrics_port = wildcard_manager.metrics_address[1]
    probe_port = wildcard_manager.health_probe_address[1]
    url_host = f"[{host}]" if ":" in host else host
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        async with http.get(f"http://{url_host}:{metrics_port}/metrics") as resp:
            assert resp.status == 200
            assert "controller_runtime_reconcile_total" in await resp.text()
        async with http.get(f"http://{url_host}:{probe_port}/healthz") as resp:
            assert (resp.status, await resp.text()) == (200, "ok")


async def test_probe_checks_are_named_healthz_and_readyz_as_upstream(
    wildcard_manager: Manager,
) -> None:
    """Upstream registers ``healthz``/``readyz`` ping checks; ``/readyz`` also waits for caches."""
    assert wildcard_manager.health_probe_address is not None
    base = f"http://127.0.0.1:{wildcard_manager.health_probe_address[1]}"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        async with http.get(f"{base}/healthz?verbose") as resp:
            assert resp.status == 200
            assert (await resp.text()).splitlines()[0] == "[+]healthz ok"
        async with http.get(f"{base}/readyz?verbose") as resp:
            assert resp.status == 200
            lines = (await resp.text()).splitlines()
            assert lines[:2] == ["[+]readyz ok", "[+]informers-synced ok"]
        for path in ("/healthz/healthz", "/readyz/readyz", "/readyz/informers-synced"):
            async with http.get(base + path) as resp:
                assert (resp.status, await resp.text()) == (200, "ok"), path
