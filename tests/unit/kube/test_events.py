"""Event recorder pieces without a cluster: references, validation, never blocking, and the
writer (create of a new Event, merge patch of a series, and what each failed write leaves)
through a fake Events API on injected clocks."""

from __future__ import annotations

import copy
import datetime
import logging
import re
from typing import Any, cast

import pytest

from agentsandbox.kube import metrics
from agentsandbox.kube.client import Client, PatchType
from agentsandbox.kube.errors import (
    AlreadyExists,
    Forbidden,
    InternalError,
    KubeError,
    NotFound,
    ServiceUnavailable,
)
from agentsandbox.kube.events import EventBroadcaster, object_reference
from agentsandbox.kube.resources import EVENTS, Resource
from tests.unit.fakes import merge_patch


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
    results = [recorder.normal(obj, "Synced", f"note {i}") for i in range(10)]
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


# --- the write path: what is sent, and what each failure leaves behind

EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p1", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
}
POD_REF = {
    "apiVersion": "v1",
    "kind": "Pod",
    "name": "p1",
    "namespace": "ns",
    "uid": "u1",
    "resourceVersion": "7",
}


class EventsServer:
    """Events as the API server keeps them: create refuses a taken name; a merge patch of a
    missing Event is NotFound. Every request is recorded with what it carried; ``fail[verb]``
    scripts errors for the next requests of that verb."""

    def __init__(self) -> None:
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[tuple[str, Any]] = []
        self.fail: dict[str, list[KubeError]] = {}

    def _serve(self, verb: str, resource: Resource, sent: Any) -> None:
        assert resource is EVENTS
        self.requests.append((verb, copy.deepcopy(sent)))
        queue = self.fail.get(verb)
        if queue:
            raise queue.pop(0)

    async def create(
        self, resource: Resource, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        self._serve("create", resource, body)
        assert namespace == body["metadata"]["namespace"]
        key = (namespace, body["metadata"]["name"])
        if key in self.events:
            raise AlreadyExists(409, "AlreadyExists", "taken")
        self.events[key] = copy.deepcopy(body)
        return copy.deepcopy(body)

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: dict[str, Any],
        namespace: str | None = None,
        *,
        patch_type: PatchType = PatchType.MERGE,
    ) -> dict[str, Any]:
        self._serve("patch", resource, (namespace, name, patch, patch_type))
        key = (namespace or "", name)
        if key not in self.events:
            raise NotFound(404, "NotFound", f'events "{name}" not found')
        self.events[key] = merge_patch(self.events[key], patch)
        return copy.deepcopy(self.events[key])

    def verbs(self) -> list[str]:
        return [verb for verb, _ in self.requests]


class Clocks:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> datetime.datetime:
        return EPOCH + datetime.timedelta(seconds=self.now)


def broadcaster_for(server: EventsServer, clocks: Clocks, **options: Any) -> EventBroadcaster:
    return EventBroadcaster(
        cast(Client, server),
        reporting_instance="replica-1",
        clock=clocks.monotonic,
        now=clocks.wall,
        **options,
    )


def counted(name: str, label: str, value: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, {label: value}) or 0.0


async def test_a_new_event_is_created_with_every_field() -> None:
    server, clocks = EventsServer(), Clocks()
    broadcaster = broadcaster_for(server, clocks)
    recorder = broadcaster.new_recorder("sandbox-controller")
    created_before = counted("agentsandbox_runtime_events_written_total", "verb", "create")
    clocks.now = 1.5
    related = {"kind": "Node", "name": "n1"}
    recorder.warning(POD, "Evicted", "out of memory", action="Evict", related=related)
    broadcaster.start()
    await broadcaster.flush()
    await broadcaster.stop()
    ((verb, body),) = server.requests
    assert verb == "create"
    name = body["metadata"].pop("name")
    assert re.fullmatch(r"p1\.[0-9a-f]+", name)
    assert body == {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"namespace": "ns"},
        "eventTime": "2026-01-01T00:00:01.500000Z",
        "reportingController": "sandbox-controller",
        "reportingInstance": "replica-1",
        "action": "Evict",
        "reason": "Evicted",
        "type": "Warning",
        "regarding": POD_REF,
        "note": "out of memory",
        "related": related,
    }
    assert counted("agentsandbox_runtime_events_written_total", "verb", "create") == (
        created_before + 1
    )


async def test_an_event_about_a_cluster_scoped_object_lands_in_default_without_a_note() -> None:
    server, clocks = EventsServer(), Clocks()
    broadcaster = broadcaster_for(server, clocks)
    long_name = "n" * 253
    broadcaster.new_recorder("c").normal({"kind": "Node", "name": long_name}, "Ready")
    broadcaster.start()
    await broadcaster.flush()
    await broadcaster.stop()
    ((_, body),) = server.requests
    assert body["metadata"]["namespace"] == "default"
    assert len(body["metadata"]["name"]) <= 253 and body["metadata"]["name"].startswith("nnn")
    assert "note" not in body and "related" not in body and "series" not in body


async def test_a_queued_burst_is_one_create_carrying_its_series() -> None:
    server, clocks = EventsServer(), Clocks()
    broadcaster = broadcaster_for(server, clocks)
    recorder = broadcaster.new_recorder("c")
    for _ in range(3):
        recorder.normal(POD, "Pulled", "image present")
    broadcaster.start()  # the three are already queued: merged before anything is sent
    await broadcaster.flush()
    await broadcaster.stop()
    ((verb, body),) = server.requests
    assert verb == "create"
    assert body["series"] == {"count": 3, "lastObservedTime": "2026-01-01T00:00:00.000000Z"}


async def test_a_repeat_within_the_window_patches_the_series_of_the_created_event() -> None:
    server, clocks = EventsServer(), Clocks()
    broadcaster = broadcaster_for(server, clocks, series_window=60.0)
    recorder = broadcaster.new_recorder("c")
    broadcaster.start()
    recorder.normal(POD, "Pulled", "image present")
    await broadcaster.flush()
    created = server.requests[0][1]["metadata"]["name"]
    patched_before = counted("agentsandbox_runtime_events_written_total", "verb", "patch")
    for seconds in (30.0, 89.0):  # each within 60 s of the one before
        clocks.now = seconds
        recorder.normal(POD, "Pulled", "image present")
        await broadcaster.flush()
    await broadcaster.stop()
    assert server.verbs() == ["create", "patch", "patch"]
    assert [sent for _, sent in server.requests[1:]] == [
        (
            "ns",
            created,
            {"series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:30.000000Z"}},
            PatchType.MERGE,
        ),
        (
            "ns",
            created,
            {"series": {"count": 3, "lastObservedTime": "2026-01-01T00:01:29.000000Z"}},
            PatchType.MERGE,
        ),
    ]
    assert server.events[("ns", created)]["series"]["count"] == 3
    assert counted("agentsandbox_runtime_events_written_total", "verb", "patch") == (
        patched_before + 2
    )


async def test_a_repeat_after_the_window_starts_a_new_event() -> None:
    server, clocks = EventsServer(), Clocks()
    broadcaster = broadcaster_for(server, clocks, series_window=60.0)
    recorder = broadcaster.new_recorder("c")
    broadcaster.start()
    recorder.normal(POD, "Pulled", "x")
    await broadcaster.flush()
    clocks.now = 60.5
    recorder.normal(POD, "Pulled", "x")
    await broadcaster.flush()
    await broadcaster.stop()
    assert server.verbs() == ["create", "create"]
    assert "series" not in server.requests[1][1]


async def test_a_series_whose_event_is_gone_starts_a_new_event_and_follows_it() -> None:
    """The Event expired (its TTL) or someone deleted it: the patch is NotFound; the repeat is
    not lost but written as a new Event, which starts a new series (as client-go does), and
    later repeats patch that one."""
    server, clocks = EventsServer(), Clocks()
    broadcaster = broadcaster_for(server, clocks)
    recorder = broadcaster.new_recorder("c")
    broadcaster.start()
    recorder.normal(POD, "Pulled", "x")
    await broadcaster.flush()
    server.events.clear()
    clocks.now = 10.0
    recorder.normal(POD, "Pulled", "x")
    await broadcaster.flush()
    assert server.verbs() == ["create", "patch", "create"]
    second = server.requests[2][1]
    assert "series" not in second
    clocks.now = 20.0
    recorder.normal(POD, "Pulled", "x")
    await broadcaster.flush()
    await broadcaster.stop()
    assert server.requests[3][1][1] == second["metadata"]["name"]
    assert server.requests[3][1][2]["series"]["count"] == 2
    assert broadcaster.dropped == 0


async def test_a_failed_create_drops_the_event_and_a_repeat_creates_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, clocks = EventsServer(), Clocks()
    broadcaster = broadcaster_for(server, clocks)
    recorder = broadcaster.new_recorder("c")
    dropped_before = counted("agentsandbox_runtime_events_dropped_total", "reason", "write_failed")
    server.fail["create"] = [Forbidden(403, "Forbidden", "events is forbidden")]
    broadcaster.start()
    with caplog.at_level(logging.WARNING, logger="agentsandbox.kube.events"):
        recorder.warning(POD, "Failed", "x")
        await broadcaster.flush()
    assert server.events == {} and broadcaster.dropped == 1
    assert "could not write event Warning Failed for Pod/p1" in caplog.text
    assert counted("agentsandbox_runtime_events_dropped_total", "reason", "write_failed") == (
        dropped_before + 1
    )
    recorder.warning(POD, "Failed", "x")  # no series was remembered: a fresh create
    await broadcaster.flush()
    await broadcaster.stop()
    assert server.verbs() == ["create", "create"] and len(server.events) == 1


async def test_a_failed_series_patch_drops_the_repeat_but_keeps_the_series() -> None:
    """The count is of occurrences: a repeat whose patch failed still counts in the next one."""
    server, clocks = EventsServer(), Clocks()
    broadcaster = broadcaster_for(server, clocks)
    recorder = broadcaster.new_recorder("c")
    broadcaster.start()
    recorder.normal(POD, "Pulled", "x")
    await broadcaster.flush()
    server.fail["patch"] = [ServiceUnavailable(503, "ServiceUnavailable", "busy")]
    clocks.now = 1.0
    recorder.normal(POD, "Pulled", "x")
    await broadcaster.flush()
    assert broadcaster.dropped == 1
    (event,) = server.events.values()
    assert "series" not in event
    clocks.now = 2.0
    recorder.normal(POD, "Pulled", "x")
    await broadcaster.flush()
    await broadcaster.stop()
    assert server.verbs() == ["create", "patch", "patch"]
    assert server.requests[2][1][2]["series"]["count"] == 3
    (event,) = server.events.values()
    assert event["series"]["count"] == 3


async def test_a_write_failure_does_not_stop_the_writer() -> None:
    """Writing goes on after a failed write: the broadcaster task is still there and writes."""
    server, clocks = EventsServer(), Clocks()
    broadcaster = broadcaster_for(server, clocks)
    recorder = broadcaster.new_recorder("c")
    server.fail["create"] = [InternalError(500, "InternalError", "boom")]
    recorder.normal(POD, "A", "x")
    recorder.normal(POD, "B", "x")
    broadcaster.start()
    await broadcaster.flush()
    await broadcaster.stop()
    assert server.verbs() == ["create", "create"]
    assert [e["reason"] for e in server.events.values()] == ["B"]


async def test_the_series_cache_keeps_at_most_cache_size_series() -> None:
    server, clocks = EventsServer(), Clocks()
    broadcaster = broadcaster_for(server, clocks, cache_size=2)
    recorder = broadcaster.new_recorder("c")
    broadcaster.start()
    for reason in ("A", "B", "C"):
        recorder.normal(POD, reason, "x")
        await broadcaster.flush()
    recorder.normal(POD, "A", "x")  # the least recently seen series was dropped: a new Event
    recorder.normal(POD, "C", "x")  # still cached: a patch
    await broadcaster.flush()
    await broadcaster.stop()
    assert server.verbs() == ["create"] * 4 + ["patch"]
    assert len(broadcaster._cache) == 2


async def test_stop_without_start_and_without_flushing() -> None:
    server, clocks = EventsServer(), Clocks()
    broadcaster = broadcaster_for(server, clocks)
    await broadcaster.stop()  # never started: nothing to do
    broadcaster.new_recorder("c").normal(POD, "A", "x")
    broadcaster.start()
    await broadcaster.stop(flush_timeout=0)  # stops without waiting for the queue
    assert broadcaster.queued + len(server.requests) == 1
