"""The controller builder: ``for_``/``owns``/``watches`` wire a :class:`Controller` to shared
informers, as controller-runtime's builder does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, Self

from .controller import Controller
from .handler import Mapper, enqueue_for_object, enqueue_for_owner
from .informer import Informer, InformerFactory
from .predicate import Predicate
from .reconcile import ReconcileFunc, Reconciler
from .resources import Resource
from .workqueue import RateLimiter

__all__ = ["ControllerBuilder", "ControllerHost"]


class ControllerHost(Protocol):
    """What the builder needs from a manager: shared informers and a place to run controllers."""

    def get_informer(
        self,
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Informer: ...

    def add(self, runnable: Controller) -> None: ...


@dataclass(slots=True)
class _SourceSpec:
    resource: Resource
    mapper: Mapper | None  # None: decided at build time (owner of the For type)
    predicates: tuple[Predicate, ...]
    namespace: str | None
    label_selector: str | None
    field_selector: str | None


@dataclass(slots=True)
class _BuilderState:
    name: str | None = None
    for_: _SourceSpec | None = None
    sources: list[_SourceSpec] = field(default_factory=list)
    global_predicates: list[Predicate] = field(default_factory=list)
    workers: int = 1
    rate_limiter: RateLimiter | None = None
    min_interval: float = 0.0


class ControllerBuilder:
    """controller-runtime's builder::

        ControllerBuilder(mgr).for_(WIDGETS).owns(CONFIGMAPS).workers(4).complete(reconciler)

    ``for_`` enqueues the object itself; ``owns`` the controlling owner of the ``for_`` kind;
    ``watches`` whatever its map function returns. ``with_predicates`` filters every source.
    The name defaults to the lower-cased kind of the ``for_`` resource.
    ``host`` is a :class:`~agentsandbox.kube.manager.Manager` (or anything with
    ``get_informer`` and ``add``); an :class:`InformerFactory` works for informers only via
    :meth:`build`.
    """

    def __init__(self, host: ControllerHost | InformerFactory) -> None:
        self._host = host
        self._state = _BuilderState()

    def named(self, name: str) -> Self:
        self._state.name = name
        return self

    def for_(
        self,
        resource: Resource,
        *,
        predicates: Sequence[Predicate] = (),
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Self:
        if self._state.for_ is not None:
            raise ValueError("for_ can be called only once")
        self._state.for_ = _SourceSpec(
            resource,
            enqueue_for_object,
            tuple(predicates),
            namespace,
            label_selector,
            field_selector,
        )
        return self

    def owns(
        self,
        resource: Resource,
        *,
        predicates: Sequence[Predicate] = (),
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Self:
        self._state.sources.append(
            _SourceSpec(
                resource, None, tuple(predicates), namespace, label_selector, field_selector
            )
        )
        return self

    def watches(
        self,
        resource: Resource,
        map_fn: Mapper,
        *,
        predicates: Sequence[Predicate] = (),
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Self:
        self._state.sources.append(
            _SourceSpec(
                resource, map_fn, tuple(predicates), namespace, label_selector, field_selector
            )
        )
        return self

    def with_predicates(self, *predicates: Predicate) -> Self:
        self._state.global_predicates.extend(predicates)
        return self

    def workers(self, count: int) -> Self:
        self._state.workers = count
        return self

    def with_min_interval(self, seconds: float) -> Self:
        """Coalesce the events of one request that arrive within ``seconds`` of its last pass's
        start into one later pass (see :class:`Controller`)."""
        self._state.min_interval = seconds
        return self

    def with_rate_limiter(self, rate_limiter: RateLimiter) -> Self:
        self._state.rate_limiter = rate_limiter
        return self

    def build(self, reconciler: Reconciler | ReconcileFunc) -> Controller:
        """Make the controller and wire its watches, without registering it anywhere."""
        state = self._state
        if state.for_ is None:
            raise ValueError("a controller needs for_(resource)")
        owner = state.for_.resource
        controller = Controller(
            state.name or owner.kind.lower(),
            reconciler,
            workers=state.workers,
            rate_limiter=state.rate_limiter,
            min_interval=state.min_interval,
        )
        for spec in (state.for_, *state.sources):
            informer = self._host.get_informer(
                spec.resource, spec.namespace, spec.label_selector, spec.field_selector
            )
            mapper = spec.mapper if spec.mapper is not None else enqueue_for_owner(owner)
            controller.watch(informer, mapper, *state.global_predicates, *spec.predicates)
        return controller

    def complete(self, reconciler: Reconciler | ReconcileFunc) -> Controller:
        """Build the controller and add it to the manager, which starts it."""
        controller = self.build(reconciler)
        if isinstance(self._host, InformerFactory):
            raise TypeError("complete() needs a manager; use build() with an InformerFactory")
        self._host.add(controller)
        return controller
