"""controllers/sandbox/memory.py: the status-write memory and the first-status hold."""

from __future__ import annotations

from typing import Any

from agentsandbox.controllers.sandbox.memory import FirstStatusHold, StatusMemory


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def sb(rv: str, uid: str = "u1", status: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "metadata": {"namespace": "ns", "name": "a", "uid": uid, "resourceVersion": rv}
    }
    if status is not None:
        out["status"] = status
    return out


READY = {"conditions": [{"type": "Ready", "status": "True", "reason": "DependenciesReady"}]}
PENDING = {"conditions": [{"type": "Ready", "status": "False", "reason": "DependenciesNotReady"}]}


def test_the_written_status_stands_in_until_the_cache_shows_that_version() -> None:
    memory = StatusMemory(clock=Clock())
    memory.remember(sb("5"), sb("6", status=READY))
    assert memory.apply(sb("5"))["status"] == READY  # the cache lags
    assert memory.apply(sb("5"))["metadata"]["resourceVersion"] == "5"  # only the status
    memory.seen(sb("6", status=READY))
    assert len(memory) == 0
    assert "status" not in memory.apply(sb("5"))


def test_the_memory_is_dropped_for_another_object_a_delete_or_after_its_ttl() -> None:
    clock = Clock()
    memory = StatusMemory(ttl=30, clock=clock)
    memory.remember(sb("5"), sb("6", status=READY))
    assert "status" not in memory.apply(sb("9", uid="u2"))  # recreated under the same name
    memory.remember(sb("5"), sb("6", status=READY))
    memory.seen_delete(sb("5"))
    assert len(memory) == 0
    memory.remember(sb("5"), sb("6", status=READY))
    clock.now += 31
    assert "status" not in memory.apply(sb("5"))
    assert len(memory) == 0


def test_an_answer_for_another_uid_or_without_a_version_is_not_remembered() -> None:
    memory = StatusMemory(clock=Clock())
    memory.remember(sb("5"), sb("6", uid="other", status=READY))
    memory.remember(sb("5"), {"metadata": {"uid": "u1"}, "status": READY})
    assert len(memory) == 0


def test_the_first_pending_status_is_held_for_the_grace_only() -> None:
    clock = Clock()
    hold = FirstStatusHold(grace=1.0, clock=clock)
    assert hold.left(sb("1"), PENDING) is None  # no pod created by us
    hold.pod_created("ns", "a")
    assert hold.left(sb("1"), PENDING) == 1.0
    assert hold.left(sb("1"), READY) is None  # Ready: write now (and the hold is over)
    assert hold.left(sb("1"), PENDING) is None
    hold.pod_created("ns", "a")
    clock.now += 1.5
    assert hold.left(sb("1"), PENDING) is None  # the grace is over


def test_a_sandbox_that_reported_before_is_not_held() -> None:
    hold = FirstStatusHold(grace=1.0, clock=Clock())
    hold.pod_created("ns", "a")
    assert hold.left(sb("1", status=READY), PENDING) is None


def test_a_grace_of_zero_holds_nothing() -> None:
    hold = FirstStatusHold(grace=0.0, clock=Clock())
    hold.pod_created("ns", "a")
    assert hold.left(sb("1"), PENDING) is None
