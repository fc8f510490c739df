"""Event recorder pieces without a cluster: references, validation, never blocking."""

from __future__ import annotations

import time
from typing import cast

import pytest

from agentsandbox.kube.client import Client
from agentsandbox.kube.events import EventBroadcaster, object_reference


def test_object_reference_from_an_object() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u1",
            "resourceVersion": "9",
            "labels": {"a": "b"},
        },
        "spec": {},
    }
    assert object_reference(pod) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "p",
        "namespace": "ns",
        "uid": "u1",
        "resourceVersion": "9",
    }
    assert object_reference({"kind": "Node", "name": "n1"}) == {"kind": "Node", "name": "n1"}
    with pytest.raises(ValueError):
        object_reference({"metadata": {"name": "no-kind"}})


async def test_recording_never_blocks_and_drops_when_the_queue_is_full() -> None:
    broadcaster = EventBroadcaster(cast(Client, None), queue_size=3)  # never started
    recorder = broadcaster.new_recorder("test-controller")
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}}
    began = time.perf_counter()
    results = [recorder.normal(obj, "Synced", f"note {i}") for i in range(10)]
    assert time.perf_counter() - began < 0.05
    assert results == [True] * 3 + [False] * 7
    assert broadcaster.dropped == 7 and broadcaster.queued == 3


def test_events_are_validated_where_they_are_recorded() -> None:
    recorder = EventBroadcaster(cast(Client, None)).new_recorder("c")
    obj = {"kind": "ConfigMap", "name": "c"}
    with pytest.raises(ValueError):
        recorder.event(obj, "Error", "Reason")
    with pytest.raises(ValueError):
        recorder.event(obj, "Normal", "")
    assert recorder.warning(obj, "R", "x" * 5000)
    pending = recorder._broadcaster._queue.get_nowait()
    assert len(pending.note.encode()) == 1024 and pending.action == "R"
