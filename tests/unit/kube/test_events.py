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


class _EventsApi:
    """create/patch of Events, answering with a name."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def create(self, resource: object, body: dict, namespace: str) -> dict:  # type: ignore[type-arg]
        self.calls.append("create")
        return {"metadata": {"name": f"e{len(self.calls)}", "namespace": namespace}}

    async def patch(self, *args: object, **kwargs: object) -> dict:  # type: ignore[type-arg]
        self.calls.append("patch")
        return {}


async def test_series_past_their_window_leave_the_cache() -> None:
    """Soak finding: the series cache held every Event's key until 4096 of them (RSS grew
    ~2 MB per 10 minutes at 2 claims/s). A series is dropped once it is past the 6-minute
    window (a repeat after that starts a new Event anyway, as client-go's finishSeries)."""
    now = [0.0]
    api = _EventsApi()
    broadcaster = EventBroadcaster(cast(Client, api), series_window=360.0, clock=lambda: now[0])
    recorder = broadcaster.new_recorder("c")
    broadcaster.start()
    for i in range(5):
        obj = {"kind": "ConfigMap", "metadata": {"name": f"c{i}", "namespace": "n"}}
        recorder.normal(obj, "Synced", "x")
        await broadcaster.flush()
        now[0] += 100.0
    # the last one was written at t=400: the one of t=0 (400 s old) is gone, the rest stay
    assert len(broadcaster._cache) == 4
    again = {"kind": "ConfigMap", "metadata": {"name": "c4", "namespace": "n"}}
    recorder.normal(again, "Synced", "x")  # within its window: a series patch
    await broadcaster.flush()
    assert api.calls == ["create"] * 5 + ["patch"]
    await broadcaster.stop()
