"""Condition helpers with ``meta.SetStatusCondition`` semantics (docs/design/architecture.md,
"Conditions")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from agentsandbox.api import conditions as c

T0 = datetime(2026, 5, 21, 10, 0, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)


def ready(
    status: str, reason: str = "DependenciesReady", message: str = "m", gen: int = 1
) -> dict[str, Any]:
    return c.make_condition(c.CONDITION_READY, status, reason, message, gen)


def test_new_condition_is_appended_with_now_as_transition_time() -> None:
    out, changed = c.set_status_condition([], ready(c.TRUE), T0)
    assert changed
    assert out == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "DependenciesReady",
            "message": "m",
            "observedGeneration": 1,
            "lastTransitionTime": "2026-05-21T10:00:00Z",
        }
    ]


def test_new_condition_keeps_a_given_transition_time() -> None:
    new = {**ready(c.TRUE), "lastTransitionTime": "2020-01-01T00:00:00Z"}
    out, _ = c.set_status_condition(None, new, T0)
    assert out[0]["lastTransitionTime"] == "2020-01-01T00:00:00Z"


def test_transition_time_is_kept_when_status_does_not_change() -> None:
    first, _ = c.set_status_condition([], ready(c.FALSE, "DependenciesNotReady", "a"), T0)
    out, changed = c.set_status_condition(first, ready(c.FALSE, "ReconcilerError", "b", 2), T1)
    assert changed
    assert out[0]["lastTransitionTime"] == "2026-05-21T10:00:00Z"
    assert (out[0]["reason"], out[0]["message"], out[0]["observedGeneration"]) == (
        "ReconcilerError",
        "b",
        2,
    )


def test_transition_time_moves_when_status_changes() -> None:
    first, _ = c.set_status_condition([], ready(c.FALSE), T0)
    out, changed = c.set_status_condition(first, ready(c.TRUE), T1)
    assert changed
    assert out[0]["status"] == "True"
    assert out[0]["lastTransitionTime"] == "2026-05-21T10:05:00Z"


def test_status_change_uses_a_given_transition_time() -> None:
    first, _ = c.set_status_condition([], ready(c.FALSE), T0)
    new = {**ready(c.TRUE), "lastTransitionTime": "2026-05-21T10:01:00Z"}
    out, _ = c.set_status_condition(first, new, T1)
    assert out[0]["lastTransitionTime"] == "2026-05-21T10:01:00Z"


def test_identical_condition_is_no_change() -> None:
    first, _ = c.set_status_condition([], ready(c.TRUE), T0)
    out, changed = c.set_status_condition(first, ready(c.TRUE), T1)
    assert not changed
    assert out == first


def test_input_is_not_mutated_and_order_is_kept() -> None:
    fin = c.make_condition(c.CONDITION_FINISHED, c.TRUE, c.REASON_POD_SUCCEEDED, "x")
    first, _ = c.set_status_condition([], ready(c.FALSE), T0)
    both, _ = c.set_status_condition(first, fin, T0)
    snapshot = [dict(x) for x in both]
    out, _ = c.set_status_condition(both, ready(c.TRUE), T1)
    assert both == snapshot
    assert [x["type"] for x in out] == ["Ready", "Finished"]


def test_remove_status_condition() -> None:
    first, _ = c.set_status_condition([], ready(c.TRUE), T0)
    out, removed = c.remove_status_condition(first, "Ready")
    assert removed and out == []
    out, removed = c.remove_status_condition(first, "Finished")
    assert not removed and out == first


def test_find_and_is_true() -> None:
    conds, _ = c.set_status_condition([], ready(c.TRUE), T0)
    found = c.find_condition(conds, "Ready")
    assert found is not None and found["status"] == "True"
    assert c.find_condition(conds, "Suspended") is None
    assert c.is_condition_true(conds, "Ready")
    assert not c.is_condition_true(conds, "Finished")
    assert not c.is_condition_true(None, "Ready")


def test_is_sandbox_ready() -> None:
    conds, _ = c.set_status_condition([], ready(c.TRUE), T0)
    assert c.is_sandbox_ready({"status": {"conditions": conds}})
    not_ready, _ = c.set_status_condition([], ready(c.FALSE), T0)
    assert not c.is_sandbox_ready({"status": {"conditions": not_ready}})
    assert not c.is_sandbox_ready({})


def test_make_condition_without_generation() -> None:
    assert "observedGeneration" not in c.make_condition("Ready", "True", "R", "m")


def test_sandbox_reasons_and_messages_are_exact() -> None:
    assert c.REASON_SANDBOX_SUSPENDED == "SandboxSuspended"
    assert c.REASON_POD_TERMINATED == "PodTerminated"
    assert c.REASON_SANDBOX_EXPIRED == "SandboxExpired"
    assert c.MESSAGE_SANDBOX_EXPIRED == "Sandbox has expired"
    assert c.MESSAGE_POD_TERMINATED == "Pod has been terminated. Sandbox is suspended"
    # the Suspended and PodScheduled conditions of upstream v1.0.1 (its e2e tests compare them)
    assert (c.CONDITION_SUSPENDED, c.CONDITION_POD_SCHEDULED) == ("Suspended", "PodScheduled")
    assert (c.REASON_NOT_SUSPENDED, c.MESSAGE_NOT_SUSPENDED) == (
        "NotSuspended",
        "Sandbox is not suspended",
    )
    assert (c.REASON_POD_TERMINATING, c.MESSAGE_POD_TERMINATING) == (
        "PodTerminating",
        "Pod is terminating. Sandbox is suspending",
    )
    assert (c.REASON_POD_NOT_OWNED, c.MESSAGE_POD_NOT_OWNED) == (
        "PodNotOwned",
        "Refused to delete pod because it is not owned by this sandbox",
    )
    assert (c.REASON_POD_STATE_UNKNOWN, c.MESSAGE_POD_STATE_UNKNOWN) == (
        "PodStateUnknown",
        "Pod state is unknown. Sandbox suspension cannot be confirmed",
    )
    assert (c.REASON_POD_SCHEDULED, c.REASON_POD_SCHEDULING_UNKNOWN) == (
        "PodScheduled",
        "PodSchedulingUnknown",
    )
    assert c.MESSAGE_POD_SCHEDULING_UNKNOWN == (
        "Pod state is unknown. Pod scheduling cannot be determined"
    )
    assert c.MESSAGE_POD_SCHEDULING_NOT_REPORTED == (
        "Pod has not reported a PodScheduled condition yet"
    )
    # upstream's deprecated Suspended=False reason is no longer written
    assert not hasattr(c, "REASON_POD_NOT_TERMINATED")
    assert c.REASON_CLAIM_EXPIRED == "ClaimExpired"
