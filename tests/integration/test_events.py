"""The event recorder writing real events.k8s.io/v1 Events, and aggregating repeats."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentsandbox.kube.client import Client
from agentsandbox.kube.events import EventBroadcaster
from agentsandbox.kube.resources import CONFIGMAPS, EVENTS

from .runtime_helpers import sample


@pytest.fixture
async def broadcaster(client: Client) -> AsyncIterator[EventBroadcaster]:
    b = EventBroadcaster(client, reporting_instance="pytest-1")
    b.start()
    yield b
    await b.stop()


async def events_about(client: Client, namespace: str, name: str) -> list[dict[str, Any]]:
    listed = await client.list(EVENTS, namespace, field_selector=f"regarding.name={name}")
    return listed.items


async def test_an_event_is_written_about_its_object(
    client: Client, broadcaster: EventBroadcaster, namespace: str
) -> None:
    cm = await client.create(CONFIGMAPS, {"metadata": {"name": "subject"}}, namespace)
    recorder = broadcaster.new_recorder("runtime-test-controller")
    assert recorder.normal(cm, "Synced", "subject is in sync", action="Sync")
    await asyncio.wait_for(broadcaster.flush(), 10)
    [event] = await events_about(client, namespace, "subject")
    assert event["regarding"]["uid"] == cm["metadata"]["uid"]
    assert event["regarding"]["kind"] == "ConfigMap"
    assert event["regarding"]["namespace"] == namespace
    assert (event["type"], event["reason"], event["action"]) == ("Normal", "Synced", "Sync")
    assert event["note"] == "subject is in sync"
    assert event["reportingController"] == "runtime-test-controller"
    assert event["reportingInstance"] == "pytest-1"
    assert event["eventTime"].endswith("Z")
    assert "series" not in event


async def test_repeats_are_aggregated_into_a_series(
    client: Client, broadcaster: EventBroadcaster, namespace: str
) -> None:
    cm = await client.create(CONFIGMAPS, {"metadata": {"name": "noisy"}}, namespace)
    recorder = broadcaster.new_recorder("runtime-test-controller")
    patches = sample("agentsandbox_runtime_events_written_total", {"verb": "patch"})
    recorder.warning(cm, "BackOff", "still failing")
    await asyncio.wait_for(broadcaster.flush(), 10)
    for _ in range(2):
        recorder.warning(cm, "BackOff", "still failing")
        await asyncio.wait_for(broadcaster.flush(), 10)
    [event] = await events_about(client, namespace, "noisy")
    assert event["series"]["count"] == 3
    assert event["series"]["lastObservedTime"] >= event["eventTime"]
    assert sample("agentsandbox_runtime_events_written_total", {"verb": "patch"}) == patches + 2

    # A burst of repeats still queued is merged into one write.
    for _ in range(5):
        recorder.warning(cm, "BackOff", "still failing")
    await asyncio.wait_for(broadcaster.flush(), 10)
    [event] = await events_about(client, namespace, "noisy")
    assert event["series"]["count"] == 8
    assert sample("agentsandbox_runtime_events_written_total", {"verb": "patch"}) == patches + 3

    # A different note is a different event.
    recorder.warning(cm, "BackOff", "failing differently")
    await asyncio.wait_for(broadcaster.flush(), 10)
    assert len(await events_about(client, namespace, "noisy")) == 2


async def test_a_failed_write_is_dropped_and_counted(
    client: Client, broadcaster: EventBroadcaster
) -> None:
    before = sample("agentsandbox_runtime_events_dropped_total", {"reason": "write_failed"})
    recorder = broadcaster.new_recorder("runtime-test-controller")
    ghost = {"kind": "ConfigMap", "name": "x", "namespace": "no-such-namespace-xyz"}
    recorder.normal(ghost, "Synced")
    await asyncio.wait_for(broadcaster.flush(), 10)
    assert sample("agentsandbox_runtime_events_dropped_total", {"reason": "write_failed"}) == (
        before + 1
    )


async def test_a_namespace_that_is_gone_is_asked_once_then_its_events_are_dropped(
    client: Client, broadcaster: EventBroadcaster, namespace: str
) -> None:
    """The real API server's refusal names the namespace; the events about it that follow are
    dropped without a request, and events elsewhere are still written."""
    closed = sample("agentsandbox_runtime_events_dropped_total", {"reason": "namespace_closed"})
    recorder = broadcaster.new_recorder("runtime-test-controller")
    ghost = "no-such-namespace-abc"
    recorder.warning({"kind": "Pod", "name": "p0", "namespace": ghost}, "Failed", "x")
    await asyncio.wait_for(broadcaster.flush(), 10)
    assert broadcaster.closed_namespaces == [ghost]
    for i in range(1, 20):
        recorder.warning({"kind": "Pod", "name": f"p{i}", "namespace": ghost}, "Failed", "x")
    cm = await client.create(CONFIGMAPS, {"metadata": {"name": "alive"}}, namespace)
    recorder.normal(cm, "Synced")
    await asyncio.wait_for(broadcaster.flush(), 10)
    assert sample("agentsandbox_runtime_events_dropped_total", {"reason": "namespace_closed"}) == (
        closed + 19
    )
    assert len(await events_about(client, namespace, "alive")) == 1
