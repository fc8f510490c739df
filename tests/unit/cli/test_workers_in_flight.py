"""``--sandbox-concurrent-workers`` and ``--sandbox-claim-concurrent-workers`` are how many
reconciles of each controller are in flight at once: exactly N, never more, for N = the flag.

The controllers are registered from the parsed flags as the binary registers them
(``register_controllers``), with each reconciler's ``reconcile`` replaced by a blocking fake
that counts the calls in flight and returns only when the test releases it. No timing: the
test counts what is running. (Upstream's parallelism e2e tests change the worker flags by
editing the controller's Deployment, which a controller run outside the cluster never reads.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from agentsandbox.cli.controller import register_controllers
from agentsandbox.cli.options import Options, build_flagset, given_flags
from agentsandbox.controllers.claim.controller import CONTROLLER_NAME as CLAIM
from agentsandbox.controllers.claim.controller import ClaimReconciler
from agentsandbox.controllers.sandbox.controller import CONTROLLER_NAME as SANDBOX
from agentsandbox.controllers.sandbox.controller import SandboxReconciler
from agentsandbox.kube.controller import Controller
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.reconcile import Request, Result
from tests.polling import eventually, yield_to_loop


class Gate:
    """A reconcile that blocks until released: counts the calls running and the most at once."""

    def __init__(self) -> None:
        self.running: dict[Request, asyncio.Future[None]] = {}
        self.started: list[Request] = []
        self.most = 0

    async def reconcile(self, request: Request) -> Result | None:
        assert request not in self.running, "one key is never reconciled twice at once"
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.running[request] = done
        self.started.append(request)
        self.most = max(self.most, len(self.running))
        try:
            await done
        finally:
            del self.running[request]
        return None

    def release(self, count: int | None = None) -> None:
        for done in list(self.running.values())[:count]:
            if not done.done():
                done.set_result(None)


class Host(Manager):
    """A manager that is never run: it only keeps the controllers the flags register."""

    def __init__(self) -> None:
        super().__init__(object())  # type: ignore[arg-type]
        self.controllers: dict[str, Controller] = {}

    def add(self, runnable: Any) -> None:
        if isinstance(runnable, Controller):
            self.controllers[runnable.name] = runnable
        super().add(runnable)


def running_is(gate: Gate, count: int) -> Callable[[], bool]:
    return lambda: len(gate.running) == count


def started_is(gate: Gate, count: int) -> Callable[[], bool]:
    return lambda: len(gate.started) == count


def options(*argv: str) -> Options:
    values, _ = build_flagset().parse(list(argv))
    return Options.from_values(values, given_flags(list(argv)))


async def synced(self: Informer) -> None:
    """No API server here: the watched caches count as synced (they stay empty)."""


@pytest.mark.parametrize(
    ("argv", "sandbox_workers", "claim_workers"),
    [
        ((), 100, 50),  # v1.0.1's defaults
        (("--sandbox-concurrent-workers=3", "--sandbox-claim-concurrent-workers=5"), 3, 5),
        (("--sandbox-concurrent-workers=1", "--sandbox-claim-concurrent-workers=1"), 1, 1),
    ],
)
async def test_exactly_n_reconciles_are_in_flight_for_n_workers(
    monkeypatch: pytest.MonkeyPatch,
    argv: tuple[str, ...],
    sandbox_workers: int,
    claim_workers: int,
) -> None:
    gates = {SANDBOX: Gate(), CLAIM: Gate()}
    monkeypatch.setattr(SandboxReconciler, "reconcile", lambda _, r: gates[SANDBOX].reconcile(r))
    monkeypatch.setattr(ClaimReconciler, "reconcile", lambda _, r: gates[CLAIM].reconcile(r))
    monkeypatch.setattr(Informer, "wait_synced", synced)
    host = Host()
    register_controllers(host, options("--extensions", *argv))
    for name, workers in ((SANDBOX, sandbox_workers), (CLAIM, claim_workers)):
        controller, gate = host.controllers[name], gates[name]
        assert controller.workers == workers
        await controller.start()
        try:
            keys = [Request("ns", f"{name}-{i}") for i in range(2 * workers + 1)]
            for key in keys:
                controller.enqueue(key)
            await eventually(
                running_is(gate, workers),
                within=10.0,  # only stops a hung test
                interval=0.01,
                what=f"{name}: N reconciles running",
            )
            await yield_to_loop(10)  # every worker had its chance to take another key
            assert len(gate.running) == workers and gate.most == workers, name
            assert len(controller.queue) == len(keys) - workers
            # one finishes: exactly one more starts
            gate.release(1)
            await eventually(
                started_is(gate, workers + 1),
                within=10.0,
                interval=0.01,
                what=f"{name}: one more started",
            )
            await yield_to_loop(10)
            assert len(gate.running) == workers and len(gate.started) == workers + 1, name
            # the rest run N at a time, never more
            while len(gate.started) < len(keys) or gate.running:
                gate.release()
                await yield_to_loop()
            assert sorted(gate.started) == sorted(keys) and gate.most == workers, name
        finally:
            gate.release()
            await controller.stop(drain_timeout=0)
