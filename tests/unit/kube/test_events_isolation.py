"""One tenant's events cannot hold up another's: a namespace that is gone or terminating costs one
refused write, not one per event, and a slow write about one object does not wait the writes
about the others (an integration test once waited 10 s for a pool's Normal event, queued behind
hundreds of doomed writes for the sandboxes of a namespace being deleted)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentsandbox.kube.errors import Forbidden, KubeError, NotFound
from agentsandbox.kube.events import EventBroadcaster
from agentsandbox.kube.resources import Resource
from tests.polling import yield_to_loop
from tests.unit.kube.test_events import Clocks, EventsServer, broadcaster_for, counted


def pod(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"{namespace}/{name}"},
    }


def namespace_gone(namespace: str) -> NotFound:
    return NotFound(
        404,
        "NotFound",
        f'namespaces "{namespace}" not found',
        {"name": namespace, "kind": "namespaces"},
    )


def namespace_terminating(namespace: str) -> Forbidden:
    return Forbidden(
        403,
        "Forbidden",
        f"events.events.k8s.io is forbidden: unable to create new content in namespace "
        f"{namespace} because it is being terminated",
        {
            "name": "x",
            "kind": "events",
            "causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}],
        },
    )


class ClosingServer(EventsServer):
    """Refuses every create into the namespaces in ``closed`` with ``refusal(namespace)``."""

    def __init__(self, closed: set[str], refusal: Any) -> None:
        super().__init__()
        self.closed = closed
        self.refusal = refusal

    async def create(
        self, resource: Resource, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        if namespace in self.closed:
            self.requests.append(("create", body))
            raise self.refusal(namespace)
        return await super().create(resource, body, namespace)


def creates_in(server: EventsServer, namespace: str) -> int:
    return sum(
        1
        for verb, body in server.requests
        if verb == "create" and body["metadata"]["namespace"] == namespace
    )


@pytest.mark.parametrize("refusal", [namespace_gone, namespace_terminating])
async def test_a_refusing_namespace_costs_one_write_for_the_hold_then_is_tried_again(
    refusal: Any,
) -> None:
    server, clocks = ClosingServer({"gone"}, refusal), Clocks()
    broadcaster = broadcaster_for(server, clocks, closed_namespace_hold=30.0)
    recorder = broadcaster.new_recorder("c")
    dropped_before = counted(
        "agentsandbox_runtime_events_dropped_total", "reason", "namespace_closed"
    )
    broadcaster.start()
    recorder.warning(pod("a", "gone"), "Failed", "first")
    await broadcaster.flush()
    assert broadcaster.closed_namespaces == ["gone"]
    for i in range(50):
        recorder.warning(pod(f"s{i}", "gone"), "Failed", f"error {i}")
    recorder.normal(pod("pool", "alive"), "Progressing", "ok")
    await broadcaster.flush()
    assert creates_in(server, "gone") == 1
    assert creates_in(server, "alive") == 1
    assert counted("agentsandbox_runtime_events_dropped_total", "reason", "namespace_closed") == (
        dropped_before + 50
    )
    clocks.now = 30.0  # the hold is over: the namespace is asked again
    recorder.warning(pod("b", "gone"), "Failed", "again")
    await broadcaster.flush()
    await broadcaster.stop()
    assert creates_in(server, "gone") == 2


async def test_a_not_found_about_anything_but_the_namespace_closes_nothing() -> None:
    """A 404 naming another kind (an admission plugin's lookup, say) is one failed write."""

    def other(namespace: str) -> KubeError:
        return NotFound(404, "NotFound", 'secrets "x" not found', {"name": "x", "kind": "secrets"})

    server, clocks = ClosingServer({"ns"}, other), Clocks()
    broadcaster = broadcaster_for(server, clocks)
    recorder = broadcaster.new_recorder("c")
    broadcaster.start()
    recorder.warning(pod("a", "ns"), "Failed", "one")
    await broadcaster.flush()
    recorder.warning(pod("b", "ns"), "Failed", "two")
    await broadcaster.flush()
    await broadcaster.stop()
    assert broadcaster.closed_namespaces == []
    assert creates_in(server, "ns") == 2


class GatedServer(EventsServer):
    """Holds every create about the object named ``held`` until ``gate`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.order: list[str] = []

    async def create(
        self, resource: Resource, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        if body["regarding"]["name"] == "held":
            await self.gate.wait()
        self.order.append(f"{body['regarding']['name']}:{body['reason']}")
        return await super().create(resource, body, namespace)


async def start_with(server: GatedServer, writers: int) -> EventBroadcaster:
    broadcaster = broadcaster_for(server, Clocks(), writers=writers)
    recorder = broadcaster.new_recorder("c")
    recorder.warning(pod("held", "slow"), "First", "x")
    recorder.normal(pod("held", "slow"), "Second", "x")
    recorder.normal(pod("other", "fast"), "Only", "x")
    broadcaster.start()
    return broadcaster


async def test_a_slow_write_about_one_object_does_not_hold_the_others() -> None:
    server = GatedServer()
    broadcaster = await start_with(server, writers=8)
    await yield_to_loop(100)
    assert server.order == ["other:Only"]  # written while "held" still waits
    server.gate.set()
    await broadcaster.flush()
    await broadcaster.stop()
    # the events about one object keep the order they were recorded in
    assert server.order == ["other:Only", "held:First", "held:Second"]


async def test_one_writer_writes_one_object_at_a_time() -> None:
    server = GatedServer()
    broadcaster = await start_with(server, writers=1)
    await yield_to_loop(100)
    assert server.order == []  # the only writer waits on "held"
    server.gate.set()
    await broadcaster.flush()
    await broadcaster.stop()
    assert server.order == ["held:First", "held:Second", "other:Only"]


def test_writers_must_be_at_least_one() -> None:
    with pytest.raises(ValueError):
        broadcaster_for(EventsServer(), Clocks(), writers=0)
