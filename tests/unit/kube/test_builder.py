"""The controller builder without a cluster: wiring for_/owns/watches and global predicates."""

from __future__ import annotations

from typing import Any

import pytest

from agentsandbox.kube.builder import ControllerBuilder
from agentsandbox.kube.controller import Controller
from agentsandbox.kube.predicate import GenerationChangedPredicate, LabelSelectorPredicate
from agentsandbox.kube.reconcile import Request
from agentsandbox.kube.resources import CONFIGMAPS, PODS, Resource
from tests.unit.kube.controller_helpers import WIDGETS, MemorySource, noop, obj, ref, waiting


class Host:
    """Hands out in-memory sources per resource and collects controllers."""

    def __init__(self) -> None:
        self.sources: dict[tuple[Resource, str | None, str | None], MemorySource] = {}
        self.added: list[Controller] = []

    def get_informer(
        self,
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Any:
        return self.sources.setdefault((resource, namespace, label_selector), MemorySource())

    def add(self, runnable: Controller) -> None:
        self.added.append(runnable)


async def test_builder_wires_for_owns_and_watches() -> None:
    host = Host()

    def by_label(o: dict[str, Any]) -> list[Request]:
        target = (o["metadata"].get("labels") or {}).get("widget")
        return [Request(o["metadata"]["namespace"], target)] if target else []

    controller = (
        ControllerBuilder(host)
        .for_(WIDGETS, predicates=[GenerationChangedPredicate()])
        .owns(CONFIGMAPS)
        .watches(PODS, by_label, label_selector="app=x")
        .workers(3)
        .complete(noop)
    )
    assert host.added == [controller]
    assert controller.name == "widget" and controller.workers == 3
    controller._started = True
    for watch in controller._watches:
        controller._attach(watch)
    widgets = host.sources[(WIDGETS, None, None)]
    widgets.update(obj("w", generation=1), obj("w", generation=1, rv="2"))  # filtered
    host.sources[(CONFIGMAPS, None, None)].add(obj("cm", owners=[ref("w1")]))
    host.sources[(PODS, None, "app=x")].add(obj("p", labels={"widget": "w2"}))
    assert waiting(controller) == {Request("ns", "w1"), Request("ns", "w2")}


def test_builder_needs_a_for_resource() -> None:
    with pytest.raises(ValueError):
        ControllerBuilder(Host()).owns(CONFIGMAPS).complete(noop)


def test_with_predicates_filter_every_source() -> None:
    host = Host()
    controller = (
        ControllerBuilder(host)
        .named("only-p1")
        .for_(WIDGETS)
        .owns(CONFIGMAPS)
        .with_predicates(LabelSelectorPredicate("pool=p1"))
        .build(noop)
    )
    assert host.added == []
    controller._started = True
    for watch in controller._watches:
        controller._attach(watch)
    host.sources[(WIDGETS, None, None)].add(obj("w", labels={"pool": "p2"}))
    host.sources[(CONFIGMAPS, None, None)].add(obj("c", labels={"pool": "p1"}, owners=[ref("o")]))
    assert waiting(controller) == {Request("ns", "o")}
