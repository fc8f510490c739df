"""Security review #3: losing the Lease during a graceful shutdown stops every write at once, a
shutdown drains only the reconciles in flight (not the queued backlog), and the shutdown budget
(drain + a renewal in flight + the release + the event flush) fits the pod's grace period in
both the kustomize manifests and the chart.

A fake elector (the manager's callbacks, no API server) and a controller whose reconciles block
until released; nothing is timed: the drain timeout outlasts every wait here."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from agentsandbox.kube.client import Client
from agentsandbox.kube.controller import Controller
from agentsandbox.kube.events import EventBroadcaster
from agentsandbox.kube.manager import LeaderElectionLost, Manager
from agentsandbox.kube.reconcile import Request, Result
from tests.polling import eventually, stays

ROOT = Path(__file__).resolve().parents[3]


class Slow:
    """Every reconcile blocks until ``release`` is set (or it is cancelled)."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.cancelled = 0
        self.release = asyncio.Event()

    async def reconcile(self, request: Request) -> Result:
        self.started.append(request.name)
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return Result()


class FakeElector:
    """Leads as soon as started; ``lose()`` is a failed renewal (the Lease is someone else's)."""

    def __init__(self, mgr: Manager) -> None:
        self.mgr = mgr
        self.lost = False
        self.stopped = False

    def start(self) -> None:
        asyncio.get_running_loop().call_soon(self.mgr._on_started_leading)

    def lose(self) -> None:
        self.lost = True
        self.mgr._on_stopped_leading()

    async def stop(self) -> None:
        self.stopped = True


def _leading_manager(reconciler: Slow, keys: int) -> tuple[Manager, FakeElector]:
    mgr = Manager(cast(Client, None), graceful_shutdown_timeout=3600)
    elector = FakeElector(mgr)
    mgr._elector = cast(Any, elector)
    controller = Controller("unit-lease-lost", reconciler, workers=1)
    for i in range(keys):
        controller.enqueue(Request("ns", f"k{i:03d}"))
    mgr.add(controller)
    return mgr, elector


async def test_a_lease_lost_mid_drain_cancels_the_drain_and_starts_no_reconcile() -> None:
    """Security review #3: 100 queued keys, one reconcile in flight, stop(); the Lease is lost
    mid-drain: the reconcile in flight is cancelled and nothing else starts."""
    reconciler = Slow()
    mgr, elector = _leading_manager(reconciler, 100)
    task = asyncio.create_task(mgr.run(handle_signals=False))
    await eventually(lambda: reconciler.started, within=5, what="the first reconcile")
    mgr.stop()
    await stays(lambda: not task.done(), for_=0.05, what="the drain waiting")
    elector.lose()
    with pytest.raises(LeaderElectionLost):
        await asyncio.wait_for(task, 5)  # only stops a hung test; the drain would take 3600 s
    assert reconciler.cancelled == 1
    assert reconciler.started == ["k000"], "no reconcile started after the lease was lost"


async def test_a_shutdown_drains_the_reconciles_in_flight_not_the_backlog() -> None:
    """Security review #3: the queued keys are dropped at shutdown; the one in flight finishes."""
    reconciler = Slow()
    mgr, _ = _leading_manager(reconciler, 100)
    task = asyncio.create_task(mgr.run(handle_signals=False))
    await eventually(lambda: reconciler.started, within=5, what="the first reconcile")
    mgr.stop()
    await stays(lambda: not task.done(), for_=0.05, what="the drain waiting")
    reconciler.release.set()
    await asyncio.wait_for(task, 5)
    assert reconciler.cancelled == 0
    assert reconciler.started == ["k000"], "the backlog is not worked off during a shutdown"


def _default(fn: Any, name: str) -> float:
    return float(inspect.signature(fn).parameters[name].default)


@pytest.mark.parametrize(
    ("path", "find"),
    [
        (
            "deploy/controller.yaml",
            lambda docs: next(d for d in docs if d and d.get("kind") == "Deployment")["spec"][
                "template"
            ]["spec"]["terminationGracePeriodSeconds"],
        ),
        (
            "deploy/helm/agent-sandbox/values.yaml",
            lambda docs: docs[0]["terminationGracePeriodSeconds"],
        ),
    ],
)
def test_the_shutdown_budget_fits_the_grace_period(path: str, find: Any) -> None:
    """Security review #3: drain + a renewal in flight + the release + the event flush + 5 s
    (process exit, informers, servers) <= terminationGracePeriodSeconds, so SIGKILL never lands
    before the Lease is released."""
    init = Manager.__init__
    budget = (
        _default(init, "graceful_shutdown_timeout")
        + _default(init, "renew_deadline")  # a renewal in flight when stop() is called
        + _default(init, "retry_period")  # the release is bounded by one retry period
        + _default(EventBroadcaster.stop, "flush_timeout")
        + 5.0
    )
    grace = find(list(yaml.safe_load_all((ROOT / path).read_text())))
    assert grace >= budget, f"{path}: grace {grace}s < shutdown budget {budget}s"
