"""Event mappers without a cluster: owner mapping, and both owners reconciled when a child
moves."""

from __future__ import annotations

from agentsandbox.kube.controller import Controller
from agentsandbox.kube.handler import (
    api_group,
    enqueue_for_owner,
    owner_requests,
)
from agentsandbox.kube.reconcile import Request
from agentsandbox.kube.resources import CONFIGMAPS, NAMESPACES, PODS
from tests.unit.kube.controller_helpers import WIDGETS, MemorySource, noop, obj, ref, waiting


def test_api_group_of_core_and_named_groups() -> None:
    assert api_group("v1") == ""
    assert api_group("apps/v1") == "apps"


def test_owner_mapping_takes_the_controller_reference_of_the_for_kind() -> None:
    child = obj(
        "c",
        owners=[
            ref("not-controller", controller=False),
            ref("other-kind", kind="Gadget"),
            ref("other-group", api_version="other.dev/v1"),
            ref("boss"),
        ],
    )
    assert owner_requests(child, "test.agentsandbox.dev", "Widget") == [Request("ns", "boss")]


def test_owner_mapping_ignores_the_owner_version() -> None:
    child = obj("c", owners=[ref("boss", api_version="test.agentsandbox.dev/v1alpha1")])
    assert enqueue_for_owner(WIDGETS)(child) == [Request("ns", "boss")]


def test_owner_mapping_without_controller_only_takes_every_matching_owner() -> None:
    child = obj("c", owners=[ref("a", controller=False), ref("b", controller=None), ref("c")])
    got = owner_requests(child, "test.agentsandbox.dev", "Widget", controller_only=False)
    assert got == [Request("ns", "a"), Request("ns", "b"), Request("ns", "c")]


def test_a_cluster_scoped_owner_gets_no_namespace() -> None:
    child = obj("c", owners=[ref("ns1", kind="Namespace", api_version="v1")])
    assert enqueue_for_owner(NAMESPACES)(child) == [Request("", "ns1")]


def test_core_group_owner_matches_core_api_version() -> None:
    child = obj("p", owners=[ref("cm", kind="ConfigMap", api_version="v1")])
    assert enqueue_for_owner(CONFIGMAPS)(child) == [Request("ns", "cm")]
    assert enqueue_for_owner(PODS)(child) == []


def test_owns_enqueues_old_and_new_owner_when_ownership_moves() -> None:
    controller = Controller("moves", noop)
    source = MemorySource()
    controller.watch(source, enqueue_for_owner(WIDGETS))
    controller._started = True  # attach without workers
    controller._attach(controller._watches[0])
    old = obj("child", owners=[ref("first")], rv="1")
    new = obj("child", owners=[ref("second")], rv="2")
    source.update(old, new)
    assert waiting(controller) == {Request("ns", "first"), Request("ns", "second")}


def test_an_orphaned_child_still_requeues_its_former_owner() -> None:
    controller = Controller("orphan", noop)
    source = MemorySource()
    controller.watch(source, enqueue_for_owner(WIDGETS))
    controller._started = True
    controller._attach(controller._watches[0])
    source.update(obj("child", owners=[ref("first")]), obj("child", owners=[], rv="2"))
    assert waiting(controller) == {Request("ns", "first")}
