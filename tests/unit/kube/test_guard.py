"""The rate-limited log of hostile objects: once per key and period, a bounded set of keys."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from agentsandbox.kube.guard import ObjectGuard, RateLimitedLog


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_once_per_key_and_period(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    limited = RateLimitedLog(logging.getLogger("t"), period=60.0, clock=clock)
    with caplog.at_level(logging.WARNING):
        assert limited.warning("a", "first %s", "a")
        assert not limited.warning("a", "again %s", "a")
        assert limited.warning("b", "first %s", "b")
        clock.now = 59.9
        assert not limited.warning("a", "again %s", "a")
        clock.now = 60.0
        assert limited.warning("a", "later %s", "a")
    assert [r.getMessage() for r in caplog.records] == ["first a", "first b", "later a"]


def test_the_keys_kept_are_bounded() -> None:
    limited = RateLimitedLog(logging.getLogger("t"), period=60.0, clock=Clock(), max_keys=2)
    for key in ("a", "b", "c"):
        assert limited.warning(key, "x")
    assert len(limited._last) == 2
    assert limited.warning("a", "x")  # forgotten first: logged again


def test_the_guard_reports_a_failure_as_false_or_none() -> None:
    guard = ObjectGuard("owner", lambda obj: obj["metadata"]["name"], logging.getLogger("t"))

    def boom(obj: dict[str, Any]) -> dict[str, Any]:
        raise RecursionError("deep")

    obj: dict[str, Any] = {"metadata": {"name": "x"}}
    assert guard.apply("transform", boom, obj) is None
    assert guard.call("handler", boom, obj) is False
    assert guard.call("handler", lambda o: None, obj) is True
    assert guard.apply("transform", lambda o: o, obj) is obj
    assert guard.key({}) is None
