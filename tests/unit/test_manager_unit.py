"""Manager pieces without a cluster: bind addresses, and shutdown with and without draining."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from agentsandbox.kube.client import Client
from agentsandbox.kube.controller import Controller, Request, Result
from agentsandbox.kube.manager import Manager, parse_bind_address


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", None),
        ("", None),
        (":8080", ("0.0.0.0", 8080)),
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
    mgr = Manager(cast(Client, None), graceful_shutdown_timeout=30)
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
    await asyncio.sleep(0.05)
    assert not task.done()
    reconciler.release.set()
    await asyncio.wait_for(task, 5)
    assert reconciler.outcome == "finished"


async def test_a_second_stop_does_not_wait_for_reconciles() -> None:
    reconciler = Blocking()
    mgr = manager_with(reconciler, "unit-force")
    task = asyncio.create_task(mgr.run(handle_signals=False))
    await asyncio.wait_for(reconciler.started.wait(), 5)
    mgr.stop()
    await asyncio.sleep(0.05)
    mgr.stop()
    await asyncio.wait_for(task, 5)
    assert reconciler.outcome == "cancelled"
