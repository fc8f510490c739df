"""A reconcile error that no retry can mend is terminal: the key is not requeued and the rate
limiters are left alone. A create refused because the namespace is being deleted is one: the
objects of that namespace are deleted next, and each deletion is an event.

The rule exists because of a CI failure: a controller retried ~500 sandboxes of another test's
dying namespace with backoff; every retry took a token from the queue's overall bucket (10/s,
burst 100), which every key shares, so a live namespace's retries after a quota was raised
waited behind them for over a minute."""

from __future__ import annotations

from typing import Any

import pytest

from agentsandbox.kube import metrics
from agentsandbox.kube.controller import Controller
from agentsandbox.kube.errors import (
    ApiError,
    Forbidden,
    api_error_from_status,
    namespace_terminating,
)
from agentsandbox.kube.reconcile import TERMINAL, Request, Result, is_terminal
from agentsandbox.kube.workqueue import default_controller_rate_limiter
from tests.unit.kube.controller_helpers import FakeClock


def refused_by_dying_namespace(namespace: str, name: str) -> ApiError:
    """The 403 kube-apiserver's NamespaceLifecycle admission answers a create with."""
    return api_error_from_status(
        {
            "kind": "Status",
            "status": "Failure",
            "code": 403,
            "reason": "Forbidden",
            "message": f'pods "{name}" is forbidden: unable to create new content in namespace '
            f"{namespace} because it is being terminated",
            "details": {
                "name": name,
                "kind": "pods",
                "causes": [
                    {
                        "reason": "NamespaceTerminating",
                        "message": f"namespace {namespace} is being terminated",
                        "field": "metadata.namespace",
                    }
                ],
            },
        }
    )


def quota_exceeded(name: str) -> ApiError:
    return api_error_from_status(
        {
            "kind": "Status",
            "code": 403,
            "reason": "Forbidden",
            "message": f'pods "{name}" is forbidden: exceeded quota: pods, requested: pods=1, '
            "used: pods=1, limited: pods=1",
            "details": {"name": name, "kind": "pods"},
        }
    )


def terminal_count(controller: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "controller_runtime_terminal_reconcile_errors_total", {"controller": controller}
    )
    assert value is not None
    return value


def test_a_namespace_terminating_refusal_is_recognised_by_its_cause_or_its_text() -> None:
    assert namespace_terminating(refused_by_dying_namespace("gone", "p"))
    text_only = Forbidden(
        403,
        "Forbidden",
        "unable to create new content in namespace x because it is being terminated",
    )
    assert namespace_terminating(text_only)
    assert not namespace_terminating(quota_exceeded("p"))
    assert not namespace_terminating(RuntimeError("because it is being terminated"))


def test_an_error_is_terminal_when_it_says_so_or_its_namespace_is_terminating() -> None:
    assert is_terminal(refused_by_dying_namespace("gone", "p"))
    marked = RuntimeError("bad spec")
    setattr(marked, TERMINAL, True)
    assert is_terminal(marked)
    truthy_but_not_true = RuntimeError("odd")
    setattr(truthy_but_not_true, TERMINAL, "yes")
    assert not is_terminal(truthy_but_not_true)
    assert not is_terminal(quota_exceeded("p"))


def _controller(name: str, errors: dict[Request, Exception]) -> tuple[Controller, FakeClock]:
    clock = FakeClock()

    async def reconcile(request: Request) -> Result:
        raise errors[request]

    controller = Controller(
        name, reconcile, rate_limiter=default_controller_rate_limiter(clock), clock=clock
    )
    return controller, clock


async def test_a_terminal_error_is_not_requeued_and_is_counted() -> None:
    key = Request("dying", "p")
    controller, _ = _controller("terminal-one", {key: refused_by_dying_namespace("dying", "p")})
    before = terminal_count("terminal-one")
    await controller.process(key)
    queue = controller.queue
    assert (len(queue), queue.delayed_count, queue.num_requeues(key)) == (0, 0, 0)
    assert terminal_count("terminal-one") == before + 1


async def test_a_dying_namespace_does_not_delay_another_namespaces_retry() -> None:
    """500 sandboxes of a namespace being deleted fail; then one in a live namespace fails on a
    quota. Its retry comes after the per-key backoff (5 ms), not behind 500 tokens of the
    overall bucket (~40 s at 10/s)."""
    errors: dict[Request, Exception] = {
        Request("dying", f"p{i}"): refused_by_dying_namespace("dying", f"p{i}") for i in range(500)
    }
    live = Request("live", "q")
    errors[live] = quota_exceeded("q")
    controller, clock = _controller("terminal-shared", errors)
    for request in errors:
        if request != live:
            await controller.process(request)
    await controller.process(live)
    queue = controller.queue
    assert queue.num_requeues(live) == 1
    assert queue.delayed_count == 1  # only the live key waits for a retry
    clock.advance(0.01)
    assert queue.flush_due() == 1, "the live key's retry is held behind the dying namespace's"


@pytest.mark.parametrize("error", [quota_exceeded("q"), RuntimeError("boom")])
async def test_other_errors_are_still_retried_with_backoff(error: Any) -> None:
    key = Request("live", "q")
    controller, clock = _controller("terminal-other", {key: error})
    await controller.process(key)
    assert controller.queue.num_requeues(key) == 1
    clock.advance(0.01)
    assert controller.queue.flush_due() == 1
