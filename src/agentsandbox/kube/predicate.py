"""Event predicates: filters that drop watch events before they are mapped to requests."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .labels import LabelSelector
from .store import KubeObject

__all__ = [
    "AnnotationChangedPredicate",
    "GenerationChangedPredicate",
    "LabelChangedPredicate",
    "LabelSelectorPredicate",
    "Predicate",
    "PredicateFuncs",
    "ResourceVersionChangedPredicate",
    "all_of",
    "any_of",
    "negate",
    "new_predicate",
]


class Predicate(Protocol):
    """Filters events before they are mapped to requests; False drops the event."""

    def create(self, obj: KubeObject) -> bool: ...

    def update(self, old: KubeObject, new: KubeObject) -> bool: ...

    def delete(self, obj: KubeObject) -> bool: ...


@dataclass(frozen=True, slots=True)
class PredicateFuncs:
    """A predicate from optional functions; a missing one lets every event of its kind pass."""

    on_create: Callable[[KubeObject], bool] | None = None
    on_update: Callable[[KubeObject, KubeObject], bool] | None = None
    on_delete: Callable[[KubeObject], bool] | None = None

    def create(self, obj: KubeObject) -> bool:
        return self.on_create is None or self.on_create(obj)

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        return self.on_update is None or self.on_update(old, new)

    def delete(self, obj: KubeObject) -> bool:
        return self.on_delete is None or self.on_delete(obj)


def new_predicate(accept: Callable[[KubeObject], bool]) -> PredicateFuncs:
    """A predicate applying ``accept`` to the object (the *new* object on updates)."""
    return PredicateFuncs(accept, lambda _old, new: accept(new), accept)


def _meta(obj: KubeObject) -> dict[str, Any]:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return meta


def _generation_changed(old: KubeObject, new: KubeObject) -> bool:
    return _meta(old).get("generation") != _meta(new).get("generation")


def _resource_version_changed(old: KubeObject, new: KubeObject) -> bool:
    return _meta(old).get("resourceVersion") != _meta(new).get("resourceVersion")


def _labels_changed(old: KubeObject, new: KubeObject) -> bool:
    return (_meta(old).get("labels") or {}) != (_meta(new).get("labels") or {})


def _annotations_changed(old: KubeObject, new: KubeObject) -> bool:
    return (_meta(old).get("annotations") or {}) != (_meta(new).get("annotations") or {})


class GenerationChangedPredicate(PredicateFuncs):
    """Passes updates only when ``metadata.generation`` changed (a spec change), skipping
    status and metadata-only writes. Creates and deletes pass."""

    def __init__(self) -> None:
        super().__init__(on_update=_generation_changed)


class ResourceVersionChangedPredicate(PredicateFuncs):
    """Passes updates only when the resourceVersion changed (drops resync re-deliveries)."""

    def __init__(self) -> None:
        super().__init__(on_update=_resource_version_changed)


class LabelChangedPredicate(PredicateFuncs):
    """Passes updates only when the labels changed."""

    def __init__(self) -> None:
        super().__init__(on_update=_labels_changed)


class AnnotationChangedPredicate(PredicateFuncs):
    """Passes updates only when the annotations changed."""

    def __init__(self) -> None:
        super().__init__(on_update=_annotations_changed)


class LabelSelectorPredicate:
    """Passes events whose object (the new one on updates) matches ``selector``.

    ``selector`` is a string (``app=web``), a ``metav1.LabelSelector`` dict, or a
    :class:`LabelSelector`.
    """

    def __init__(self, selector: str | Mapping[str, Any] | LabelSelector) -> None:
        if isinstance(selector, LabelSelector):
            self.selector = selector
        elif isinstance(selector, str):
            self.selector = LabelSelector.parse(selector)
        else:
            self.selector = LabelSelector.from_dict(selector)

    def create(self, obj: KubeObject) -> bool:
        return self.selector.matches_object(obj)

    def update(self, old: KubeObject, new: KubeObject) -> bool:
        return self.selector.matches_object(new)

    def delete(self, obj: KubeObject) -> bool:
        return self.selector.matches_object(obj)


def all_of(*predicates: Predicate) -> PredicateFuncs:
    """Passes when every predicate passes."""
    return PredicateFuncs(
        lambda o: all(p.create(o) for p in predicates),
        lambda old, new: all(p.update(old, new) for p in predicates),
        lambda o: all(p.delete(o) for p in predicates),
    )


def any_of(*predicates: Predicate) -> PredicateFuncs:
    """Passes when at least one predicate passes."""
    return PredicateFuncs(
        lambda o: any(p.create(o) for p in predicates),
        lambda old, new: any(p.update(old, new) for p in predicates),
        lambda o: any(p.delete(o) for p in predicates),
    )


def negate(predicate: Predicate) -> PredicateFuncs:
    return PredicateFuncs(
        lambda o: not predicate.create(o),
        lambda old, new: not predicate.update(old, new),
        lambda o: not predicate.delete(o),
    )
