"""The warm pool's act steps on the failures tests/unit/controllers/warmpool/test_act.py does not
script: a release refused for another reason than a conflict, a delete cancelled while in
flight, and a create in doubt whose look-up fails again (through that module's fake client)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentsandbox.controllers.common.errors import ReconcileErrors
from agentsandbox.controllers.warmpool import act as wa
from agentsandbox.kube.errors import ApiConnectionError, Forbidden, NotFound, ServiceUnavailable
from agentsandbox.kube.reconcile import is_terminal
from agentsandbox.kube.resources import Resource
from tests.unit.controllers.warmpool.test_act import (
    Harness,
    LostAnswerClient,
    _strip_pool_label,
    pool,
    sandbox,
    template,
)


async def test_a_release_refused_is_reported_and_nothing_is_said_released() -> None:
    t = template()
    p = pool(1)
    stripped = _strip_pool_label(sandbox(p, t))
    h = Harness(p, t, stripped)
    h.client.fail["patch"] = [Forbidden(403, "Forbidden", "patch sandboxes is forbidden")]
    with pytest.raises(ReconcileErrors) as info:
        await h.reconcile()
    assert "patch sandboxes is forbidden" in str(info.value)
    assert [v for v, _ in h.verbs()].count("patch") == 1
    assert wa.EVENT_RELEASED not in [e[1] for e in h.recorder.events]


async def test_a_delete_cancelled_in_flight_lowers_its_expectation() -> None:
    """The pass is cancelled (shutdown) while a delete is waiting for its answer: the deletion
    may never be observed, so it is no longer expected; the cancellation propagates."""
    t = template()
    p = pool(1)
    stuck = sandbox(p, t, ready=False, age=600)
    h = Harness(p, t, stuck)
    sent, never = asyncio.Event(), asyncio.Event()

    async def hang_deletes(verb: str, name: str) -> None:
        if verb == "delete":
            sent.set()
            await never.wait()

    h.client.hook = hang_deletes
    task = asyncio.create_task(h.reconcile())
    await sent.wait()
    assert h.pending().deletes == frozenset({stuck["metadata"]["uid"]})
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert h.pending().deletes == frozenset()


async def test_a_create_in_doubt_stays_in_doubt_while_its_look_up_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every same-name retry of a create went unanswered; the next pass's GET fails too (the
    apiserver still away): the create stays expected and nothing new is sent. A later pass
    whose GET says NotFound lowers the expectation: the create was never done."""
    monkeypatch.setattr(wa, "LOST_ANSWER_BACKOFF", 0.0)  # the same-name retries, at once
    t = template()
    h = Harness(pool(1), t)
    client = LostAnswerClient()
    h.client = h.reconciler.writer.client = client  # type: ignore[assignment]

    async def never_answered(resource: Resource, obj: dict[str, Any], *a: Any) -> Any:
        client.calls.append(("create", "", {"name": obj["metadata"]["name"]}))
        raise ApiConnectionError("connection refused")  # not done, but we cannot know

    client.create = never_answered  # type: ignore[method-assign]
    with pytest.raises(ReconcileErrors):
        await h.reconcile()
    (name,) = {d["name"] for v, _, d in client.calls if v == "create"}
    assert h.pending().creates == 1

    async def unavailable(resource: Resource, name: str, namespace: str | None = None) -> Any:
        client.calls.append(("get", name, {}))
        raise ServiceUnavailable(503, "ServiceUnavailable", "still away")

    client.get = unavailable  # type: ignore[method-assign]
    client.calls.clear()
    await h.reconcile()
    assert client.calls[0] == ("get", name, {})
    assert [v for v, _, _ in client.calls].count("create") == 0  # still expected: no new one
    assert h.pending().creates == 1

    async def not_found(resource: Resource, name: str, namespace: str | None = None) -> Any:
        client.calls.append(("get", name, {}))
        raise NotFound(404, "NotFound", "not found")

    client.get = not_found  # type: ignore[method-assign]
    client.create = LostAnswerClient.create.__get__(client)  # type: ignore[method-assign]
    client.lose = 0
    client.calls.clear()
    await h.reconcile()
    assert client.calls[0] == ("get", name, {})
    assert [v for v, _, _ in client.calls].count("create") == 1  # the lost one is replaced


async def test_creates_refused_by_a_terminating_namespace_make_a_terminal_error() -> None:
    """Every create of the pass was refused because the namespace is being deleted: the pool
    still reports it, but the runtime does not retry the pass (the pool's deletion is next)."""
    t = template()
    p = pool(2)
    h = Harness(p, t)
    refused = Forbidden(
        403,
        "Forbidden",
        "unable to create new content in namespace ns because it is being terminated",
        {"causes": [{"reason": "NamespaceTerminating"}]},
    )
    h.client.fail["create"] = [refused, refused]
    with pytest.raises(ReconcileErrors) as info:
        await h.reconcile()
    assert info.value.terminal is True and is_terminal(info.value)


def test_an_aggregate_is_terminal_only_when_every_error_is() -> None:
    refused = Forbidden(403, "Forbidden", "namespace x because it is being terminated")
    quota = Forbidden(403, "Forbidden", "exceeded quota")
    assert ReconcileErrors([refused]).terminal
    assert not ReconcileErrors([refused, quota]).terminal
    assert not ReconcileErrors([]).terminal
