"""Predicates without a cluster: each one, the combinators, and filtering before mapping."""

from __future__ import annotations

from agentsandbox.kube.controller import Controller
from agentsandbox.kube.handler import (
    enqueue_for_object,
)
from agentsandbox.kube.predicate import (
    AnnotationChangedPredicate,
    GenerationChangedPredicate,
    LabelChangedPredicate,
    LabelSelectorPredicate,
    ResourceVersionChangedPredicate,
    all_of,
    any_of,
    negate,
    new_predicate,
)
from agentsandbox.kube.reconcile import Request
from tests.unit.kube.controller_helpers import MemorySource, noop, obj, waiting


def test_generation_changed_skips_status_only_updates() -> None:
    p = GenerationChangedPredicate()
    assert not p.update(obj("a", generation=1, rv="1"), obj("a", generation=1, rv="2"))
    assert p.update(obj("a", generation=1), obj("a", generation=2))
    assert p.create(obj("a")) and p.delete(obj("a"))


def test_resource_version_changed_skips_resyncs() -> None:
    p = ResourceVersionChangedPredicate()
    same = obj("a", rv="5")
    assert not p.update(same, same)
    assert p.update(same, obj("a", rv="6"))


def test_label_and_annotation_changed() -> None:
    assert LabelChangedPredicate().update(obj("a"), obj("a", labels={"x": "1"}))
    assert not LabelChangedPredicate().update(obj("a", labels={}), obj("a"))
    assert AnnotationChangedPredicate().update(obj("a"), obj("a", annotations={"x": "1"}))


def test_label_selector_predicate_looks_at_the_new_object() -> None:
    p = LabelSelectorPredicate({"matchLabels": {"pool": "p1"}})
    mine, other = obj("a", labels={"pool": "p1"}), obj("a", labels={"pool": "p2"})
    assert p.create(mine) and not p.create(other)
    assert p.update(other, mine) and not p.update(mine, other)
    assert LabelSelectorPredicate("pool=p1").delete(mine)


def test_predicate_combinators() -> None:
    yes = new_predicate(lambda o: True)
    no = new_predicate(lambda o: False)
    a = obj("a")
    assert all_of(yes, yes).create(a) and not all_of(yes, no).create(a)
    assert any_of(no, yes).update(a, a) and not any_of(no, no).delete(a)
    assert negate(no).create(a)


def test_predicates_filter_events_before_mapping() -> None:
    controller = Controller("filtered", noop)
    source = MemorySource()
    controller.watch(source, enqueue_for_object, GenerationChangedPredicate())
    controller._started = True
    controller._attach(controller._watches[0])
    source.update(obj("a", generation=1, rv="1"), obj("a", generation=1, rv="2"))
    assert waiting(controller) == set()
    source.update(obj("a", generation=1, rv="2"), obj("a", generation=2, rv="3"))
    assert waiting(controller) == {Request("ns", "a")}
