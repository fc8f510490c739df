"""Helpers shared by the controller-runtime unit tests: object builders, an in-memory event
source (objects are plain dicts, as the informer delivers them) and a fake clock that moves
only when a test moves it."""

from __future__ import annotations

from typing import Any

from agentsandbox.kube.controller import Controller
from agentsandbox.kube.reconcile import Request, Result
from agentsandbox.kube.resources import Resource
from agentsandbox.kube.workqueue import WorkQueue

WIDGETS = Resource("test.agentsandbox.dev", "v1", "widgets", "Widget")


def obj(
    name: str,
    namespace: str = "ns",
    *,
    owners: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    generation: int | None = None,
    rv: str = "1",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": rv}
    if owners is not None:
        meta["ownerReferences"] = owners
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    if generation is not None:
        meta["generation"] = generation
    return {"metadata": meta}


def ref(
    name: str,
    *,
    kind: str = "Widget",
    api_version: str = "test.agentsandbox.dev/v1",
    controller: bool | None = True,
) -> dict[str, Any]:
    r: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "name": name, "uid": f"u-{name}"}
    if controller is not None:
        r["controller"] = controller
    return r


class MemorySource:
    """An in-memory event source with the informer's handler contract."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = {o["metadata"]["name"]: o for o in objects}
        self.handlers: list[tuple[Any, Any, Any]] = []

    def add_handler(self, on_add: Any = None, on_update: Any = None, on_delete: Any = None) -> Any:
        registration = (on_add, on_update, on_delete)
        self.handlers.append(registration)
        if on_add is not None:
            for o in self.objects.values():
                on_add(o)
        return registration

    def remove_handler(self, registration: Any) -> None:
        self.handlers.remove(registration)

    async def wait_synced(self) -> None:
        return None

    def add(self, o: dict[str, Any]) -> None:
        self.objects[o["metadata"]["name"]] = o
        for on_add, _, _ in self.handlers:
            on_add(o)

    def update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.objects[new["metadata"]["name"]] = new
        for _, on_update, _ in self.handlers:
            on_update(old, new)

    def delete(self, o: dict[str, Any]) -> None:
        self.objects.pop(o["metadata"]["name"], None)
        for _, _, on_delete in self.handlers:
            on_delete(o)


def waiting(controller: Controller) -> set[Request]:
    queue = controller.queue
    found: set[Request] = set()
    while len(queue):
        key = queue.get_nowait()
        found.add(key)
        queue.done(key)
    return found


async def noop(request: Request) -> Result:
    return Result()


class FakeClock:
    """A monotonic clock (seconds) for ``Controller(clock=...)``: it moves only by ``advance``."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


#: How far ``advance_until_released`` moves a fake clock at a time: about a millisecond, a power
#: of two so that the clock adds it up exactly.
STEP = 2.0**-10


def advance_until_released(
    clock: FakeClock, queue: WorkQueue[Request], *, step: float = STEP, limit: float = 2.0
) -> float | None:
    """Move ``clock`` on by ``step`` at a time, releasing the keys ``queue`` holds back whose
    delay is over (``flush_due``), until one is released; return how far the clock moved then,
    or None when nothing was released within ``limit`` seconds of fake time."""
    moved = 0.0
    while moved < limit:
        clock.advance(step)
        moved += step
        if queue.flush_due():
            return moved
    return None


def idle(controller: Controller) -> bool:
    """No key waiting to be handed out and none being reconciled (delayed keys aside)."""
    return not len(controller.queue) and not controller.queue.processing_count
