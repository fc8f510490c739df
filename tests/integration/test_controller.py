"""Controllers wired by the builder, against the real API server."""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

import pytest

from agentsandbox.kube.builder import ControllerBuilder
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import NotFound
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.predicate import GenerationChangedPredicate
from agentsandbox.kube.reconcile import Request, Result
from agentsandbox.kube.resources import CONFIGMAPS
from agentsandbox.kube.workqueue import ItemExponentialFailureRateLimiter
from tests.polling import eventually, settles, stays

from .runtime_helpers import WIDGETS, running, sample


def widget(name: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": WIDGETS.api_version,
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "color": "red"},
    }


def owned_configmap(name: str, owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "ownerReferences": [controller_ref(owner)]},
    }


def controller_ref(owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


class Recording:
    """A reconciler that remembers which requests it saw."""

    def __init__(self) -> None:
        self.seen: list[Request] = []

    async def reconcile(self, request: Request) -> Result:
        self.seen.append(request)
        return Result()

    def names(self) -> set[str]:
        return {r.name for r in self.seen}


async def test_owns_requeues_the_old_and_the_new_owner_on_adoption(
    client: Client, kubeconfig: str, namespace: str
) -> None:
    first = await client.create(WIDGETS, widget("first"), namespace)
    second = await client.create(WIDGETS, widget("second"), namespace)
    await client.create(CONFIGMAPS, owned_configmap("child", first), namespace)
    mgr = Manager(client)
    rec = Recording()
    (
        ControllerBuilder(mgr)
        .named("owns-test")
        .for_(WIDGETS, namespace=namespace)
        .owns(CONFIGMAPS, namespace=namespace)
        .complete(rec)
    )
    async with running(mgr):
        await eventually(
            lambda: rec.names() == {"first", "second"}, within=20.0, what="initial reconciles"
        )
        await settles(lambda: len(rec.seen), for_=0.2, within=20.0, what="the reconciles done")
        rec.seen.clear()
        # The child moves from "first" to "second": both owners must look again.
        patch = {"metadata": {"ownerReferences": [controller_ref(second)]}}
        await client.patch(CONFIGMAPS, "child", patch, namespace)
        await eventually(
            lambda: rec.names() == {"first", "second"}, within=20.0, what="both owners"
        )
        assert all(r.namespace == namespace for r in rec.seen)
        # Deleting the child requeues its (new) owner only.
        await settles(lambda: len(rec.seen), for_=0.2, within=20.0, what="the reconciles done")
        rec.seen.clear()
        await client.delete(CONFIGMAPS, "child", namespace)
        await eventually(
            lambda: rec.names() == {"second"}, within=20.0, what="owner of the deleted child"
        )


async def test_generation_predicate_ignores_status_writes(client: Client, namespace: str) -> None:
    await client.create(WIDGETS, widget("w"), namespace)
    mgr = Manager(client)
    rec = Recording()
    (
        ControllerBuilder(mgr)
        .named("generation-test")
        .for_(WIDGETS, namespace=namespace, predicates=[GenerationChangedPredicate()])
        .complete(rec)
    )
    async with running(mgr):
        await eventually(lambda: len(rec.seen) == 1, within=20.0, what="initial reconcile")
        await client.patch(
            WIDGETS, "w", {"status": {"replicas": 1}}, namespace, subresource="status"
        )
        await client.patch(WIDGETS, "w", {"metadata": {"labels": {"x": "y"}}}, namespace)
        await stays(
            lambda: len(rec.seen) == 1,
            for_=0.5,
            what="status and metadata writes do not change the generation",
        )
        await client.patch(WIDGETS, "w", {"spec": {"replicas": 2}}, namespace)
        await eventually(
            lambda: len(rec.seen) == 2, within=20.0, what="reconcile after a spec change"
        )


async def test_an_unexpected_exception_is_retried_with_backoff_and_logged_once(
    client: Client, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    attempts: list[float] = []
    loop = asyncio.get_running_loop()

    async def reconcile(request: Request) -> Result:
        if request.name == "flaky":
            attempts.append(loop.time())
            if len(attempts) <= 3:
                raise RuntimeError("transient bug")
        return Result()

    await client.create(CONFIGMAPS, {"metadata": {"name": "flaky"}}, namespace)
    mgr = Manager(client)
    (
        ControllerBuilder(mgr)
        .named("flaky-test")
        .for_(CONFIGMAPS, namespace=namespace)
        .with_rate_limiter(ItemExponentialFailureRateLimiter(0.05, 10.0))
        .complete(reconcile)
    )
    labels = {"controller": "flaky-test"}
    with caplog.at_level(logging.INFO, logger="agentsandbox.kube.controller"):
        async with running(mgr):
            await eventually(lambda: len(attempts) == 4, within=20.0, what="four attempts")
            await eventually(
                lambda: (
                    sample("controller_runtime_reconcile_total", {**labels, "result": "success"})
                    >= 1
                ),
                within=20.0,
                what="the success",
            )
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert gaps[0] >= 0.04 and gaps[1] >= 0.09 and gaps[2] >= 0.19  # 50, 100, 200 ms
    tracebacks = [r for r in caplog.records if r.exc_info and "flaky" in r.getMessage()]
    assert len(tracebacks) == 1
    assert sample("controller_runtime_reconcile_panics_total", labels) == 3
    assert sample("controller_runtime_reconcile_errors_total", labels) == 3


async def test_an_expected_api_error_is_one_log_line(
    client: Client, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    calls = 0

    async def reconcile(request: Request) -> Result:
        nonlocal calls
        calls += 1
        if calls == 1:
            await client.get(CONFIGMAPS, "does-not-exist", namespace)
        return Result()

    await client.create(CONFIGMAPS, {"metadata": {"name": "cm"}}, namespace)
    mgr = Manager(client)
    ControllerBuilder(mgr).named("notfound-test").for_(CONFIGMAPS, namespace=namespace).complete(
        reconcile
    )
    with caplog.at_level(logging.INFO, logger="agentsandbox.kube.controller"):
        async with running(mgr):
            await eventually(lambda: calls >= 2, within=20.0, what="the retry")
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 1
    assert failures[0].exc_info is None
    assert "NotFound" in failures[0].getMessage() and "does-not-exist" in failures[0].getMessage()
    assert sample("controller_runtime_reconcile_panics_total", {"controller": "notfound-test"}) == 0
    assert NotFound.__name__ in failures[0].getMessage()


async def test_requeue_after_reconciles_again_without_an_event(
    client: Client, namespace: str
) -> None:
    loop = asyncio.get_running_loop()
    times: list[float] = []

    async def reconcile(request: Request) -> Result:
        times.append(loop.time())
        return Result(requeue_after=0.3) if len(times) < 3 else Result()

    await client.create(CONFIGMAPS, {"metadata": {"name": "timer"}}, namespace)
    mgr = Manager(client)
    ControllerBuilder(mgr).named("timer-test").for_(CONFIGMAPS, namespace=namespace).complete(
        reconcile
    )
    async with running(mgr):
        await eventually(lambda: len(times) == 3, within=20.0, what="two requeues")
    assert times[1] - times[0] >= 0.28 and times[2] - times[1] >= 0.28


async def test_watches_maps_events_of_another_kind(client: Client, namespace: str) -> None:
    rec = Recording()

    def by_annotation(obj: dict[str, Any]) -> list[Request]:
        target = (obj["metadata"].get("annotations") or {}).get("widget")
        return [Request(obj["metadata"]["namespace"], target)] if target else []

    mgr = Manager(client)
    (
        ControllerBuilder(mgr)
        .named("watches-test")
        .for_(WIDGETS, namespace=namespace)
        .watches(CONFIGMAPS, by_annotation, namespace=namespace)
        .complete(rec)
    )
    async with running(mgr):
        await asyncio.wait_for(mgr.wait_started(), 10)
        await asyncio.wait_for(mgr.informers.wait_synced(), 10)
        cm = {"metadata": {"name": "pointer", "annotations": {"widget": "target"}}}
        await client.create(CONFIGMAPS, cm, namespace)
        await eventually(lambda: rec.names() == {"target"}, within=20.0, what="mapped request")
