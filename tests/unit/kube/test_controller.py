"""Controller pieces without a cluster: owner mapping, predicates, selectors, result handling.

Events come from an in-memory source (objects are plain dicts, as the informer delivers them).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any

import pytest

from agentsandbox.kube import metrics
from agentsandbox.kube.controller import (
    AnnotationChangedPredicate,
    Controller,
    ControllerBuilder,
    GenerationChangedPredicate,
    LabelChangedPredicate,
    LabelSelector,
    LabelSelectorPredicate,
    Request,
    ResourceVersionChangedPredicate,
    Result,
    all_of,
    any_of,
    api_group,
    enqueue_for_object,
    enqueue_for_owner,
    negate,
    new_predicate,
    owner_requests,
)
from agentsandbox.kube.errors import Conflict, NotFound
from agentsandbox.kube.resources import CONFIGMAPS, NAMESPACES, PODS, Resource
from agentsandbox.kube.workqueue import ItemExponentialFailureRateLimiter

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


def sample(name: str, labels: dict[str, str]) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


async def noop(request: Request) -> Result:
    return Result()


# --- requests and owner mapping -------------------------------------------------------------


def test_request_key_looks_like_client_go() -> None:
    assert str(Request("ns", "a")) == "ns/a"
    assert str(Request("", "node-1")) == "node-1"
    assert Request.from_object(obj("a")) == Request("ns", "a")


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


# --- label selectors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("", {}, True),
        ("app=web", {"app": "web"}, True),
        ("app==web", {"app": "web"}, True),
        ("app=web", {"app": "db"}, False),
        ("app!=web", {}, True),
        ("app!=web", {"app": "web"}, False),
        ("app", {"app": ""}, True),
        ("!app", {"app": "x"}, False),
        ("!app", {}, True),
        ("tier in (a, b),app=web", {"tier": "b", "app": "web"}, True),
        ("tier in (a,b)", {"tier": "c"}, False),
        ("tier notin (a,b)", {}, True),
        ("tier notin (a,b)", {"tier": "a"}, False),
        ("a=1, b=2", {"a": "1", "b": "2"}, True),
        ("a=1,b=2", {"a": "1"}, False),
    ],
)
def test_label_selector_string_form(selector: str, labels: dict[str, str], matches: bool) -> None:
    assert LabelSelector.parse(selector).matches(labels) is matches


def test_label_selector_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        LabelSelector.parse("a=(b")


def test_label_selector_dict_form() -> None:
    selector = LabelSelector.from_dict(
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["fe", "be"]},
                {"key": "legacy", "operator": "DoesNotExist"},
            ],
        }
    )
    assert selector.matches({"app": "web", "tier": "fe"})
    assert not selector.matches({"app": "web", "tier": "fe", "legacy": "1"})
    assert not selector.matches({"app": "web"})
    with pytest.raises(ValueError):
        LabelSelector.from_dict({"matchExpressions": [{"key": "k", "operator": "Gt"}]})


# --- predicates -----------------------------------------------------------------------------


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


# --- result handling ------------------------------------------------------------------------


class Scripted:
    """A reconciler that returns (or raises) what a script says, per call."""

    def __init__(self, *outcomes: Result | BaseException | None) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[Request] = []

    async def reconcile(self, request: Request) -> Result | None:
        self.calls.append(request)
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def counters(name: str) -> Callable[[], dict[str, float]]:
    def read() -> dict[str, float]:
        out = {
            result: sample(
                "controller_runtime_reconcile_total", {"controller": name, "result": result}
            )
            for result in ("success", "error", "requeue", "requeue_after")
        }
        out["errors"] = sample("controller_runtime_reconcile_errors_total", {"controller": name})
        out["panics"] = sample("controller_runtime_reconcile_panics_total", {"controller": name})
        return out

    return read


async def test_success_forgets_the_backoff() -> None:
    controller = Controller("ok", Scripted(RuntimeError("x"), Result()))
    req = Request("ns", "a")
    await controller.process(req)
    assert controller.queue.num_requeues(req) == 1
    await controller.process(req)
    assert controller.queue.num_requeues(req) == 0
    assert counters("ok")()["success"] == 1


async def test_requeue_after_is_a_plain_delay_and_resets_backoff() -> None:
    controller = Controller("later", Scripted(RuntimeError("x"), Result(requeue_after=30)))
    req = Request("ns", "a")
    await controller.process(req)
    await controller.process(req)
    assert controller.queue.num_requeues(req) == 0
    assert controller.queue.delayed_count == 1
    assert counters("later")()["requeue_after"] == 1


async def test_requeue_uses_the_rate_limited_backoff() -> None:
    controller = Controller("again", Scripted(Result(requeue=True)))
    req = Request("ns", "a")
    await controller.process(req)
    assert controller.queue.num_requeues(req) == 1
    assert counters("again")()["requeue"] == 1


async def test_a_plain_function_is_a_reconciler_and_none_means_done() -> None:
    seen: list[Request] = []

    async def reconcile(request: Request) -> None:
        seen.append(request)

    controller = Controller("fn", reconcile)
    await controller.process(Request("ns", "a"))
    assert seen == [Request("ns", "a")]
    assert counters("fn")()["success"] == 1


async def test_expected_api_errors_are_one_line_and_not_panics(
    caplog: pytest.LogCaptureFixture,
) -> None:
    controller = Controller(
        "expected", Scripted(NotFound(message='widgets "a" not found'), Conflict())
    )
    req = Request("ns", "a")
    with caplog.at_level(logging.INFO, logger="agentsandbox.kube.controller"):
        await controller.process(req)
        await controller.process(req)
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 2
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in failures)
    assert "NotFound" in failures[0].getMessage()
    c = counters("expected")()
    assert c["errors"] == 2 and c["panics"] == 0 and c["error"] == 2
    assert controller.queue.num_requeues(req) == 2


async def test_an_unexpected_error_logs_its_traceback_once_per_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    boom = Scripted(ValueError("bug"), ValueError("bug"), ValueError("bug"), Result())
    controller = Controller("buggy", boom)
    req = Request("ns", "a")
    with caplog.at_level(logging.INFO, logger="agentsandbox.kube.controller"):
        for _ in range(4):
            await controller.process(req)
    records = [r for r in caplog.records if r.name == "agentsandbox.kube.controller"]
    with_traceback = [r for r in records if r.exc_info]
    assert len(with_traceback) == 1
    repeats = [r for r in records if "failed again" in r.getMessage()]
    assert len(repeats) == 2 and all(r.exc_info is None for r in repeats)
    assert any("reconciled after errors" in r.getMessage() for r in records)
    c = counters("buggy")()
    assert c["panics"] == 3 and c["errors"] == 3 and c["success"] == 1


async def test_a_different_error_gets_its_own_traceback(caplog: pytest.LogCaptureFixture) -> None:
    controller = Controller("two-bugs", Scripted(ValueError("one"), KeyError("two")))
    with caplog.at_level(logging.ERROR, logger="agentsandbox.kube.controller"):
        await controller.process(Request("ns", "a"))
        await controller.process(Request("ns", "a"))
    assert len([r for r in caplog.records if r.exc_info]) == 2


# --- workers --------------------------------------------------------------------------------


async def test_workers_never_run_one_key_twice_at_once_but_run_keys_in_parallel() -> None:
    running: set[Request] = set()
    overlap: list[Request] = []
    peak = 0
    calls = 0

    async def reconcile(request: Request) -> Result:
        nonlocal peak, calls
        calls += 1
        if request in running:
            overlap.append(request)
        running.add(request)
        peak = max(peak, len(running))
        await asyncio.sleep(0.02)
        running.discard(request)
        return Result()

    controller = Controller("parallel", reconcile, workers=4)
    await controller.start()
    try:
        for _ in range(3):
            for i in range(8):
                controller.enqueue(Request("ns", f"k{i}"))
            await asyncio.sleep(0.005)
        for _ in range(200):
            if not len(controller.queue) and not controller.queue.processing_count:
                break
            await asyncio.sleep(0.01)
    finally:
        await controller.stop()
    assert overlap == []
    assert peak == 4
    assert 8 <= calls <= 24
    assert sample("controller_runtime_max_concurrent_reconciles", {"controller": "parallel"}) == 4
    assert sample("controller_runtime_active_workers", {"controller": "parallel"}) == 0


async def test_a_failing_key_is_retried_with_backoff_without_stopping_the_worker() -> None:
    attempts: list[float] = []
    others: list[Request] = []

    async def reconcile(request: Request) -> Result:
        if request.name == "bad":
            attempts.append(asyncio.get_running_loop().time())
            if len(attempts) < 4:
                raise RuntimeError("not yet")
        else:
            others.append(request)
        return Result()

    limiter = ItemExponentialFailureRateLimiter(0.02, 1.0)
    controller = Controller("retry", reconcile, workers=1, rate_limiter=limiter)
    await controller.start()
    try:
        controller.enqueue(Request("ns", "bad"))
        controller.enqueue(Request("ns", "good"))
        for _ in range(300):
            if len(attempts) >= 4:
                break
            await asyncio.sleep(0.01)
    finally:
        await controller.stop()
    assert len(attempts) == 4
    assert others == [Request("ns", "good")]
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert gaps[0] >= 0.015 and gaps[1] >= 0.035 and gaps[2] >= 0.075  # 20, 40, 80 ms


async def test_stop_lets_running_reconciles_finish() -> None:
    finished: list[str] = []
    started = asyncio.Event()

    async def reconcile(request: Request) -> Result:
        started.set()
        await asyncio.sleep(0.1)
        finished.append(request.name)
        return Result()

    controller = Controller("drain", reconcile)
    await controller.start()
    controller.enqueue(Request("ns", "a"))
    await started.wait()
    await controller.stop(drain_timeout=5)
    assert finished == ["a"]


async def test_stop_without_drain_cancels_running_reconciles() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def reconcile(request: Request) -> Result:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return Result()

    controller = Controller("cancel", reconcile)
    await controller.start()
    controller.enqueue(Request("ns", "a"))
    await started.wait()
    await asyncio.wait_for(controller.stop(drain_timeout=0), 2)
    assert cancelled.is_set()


async def test_a_restarted_controller_gets_every_cached_object_again() -> None:
    seen: list[Request] = []

    async def reconcile(request: Request) -> Result:
        seen.append(request)
        return Result()

    source = MemorySource(obj("a"), obj("b"))
    controller = Controller("restart", reconcile)
    controller.watch(source)
    for _ in range(2):
        await controller.start()
        for _ in range(100):
            if len(seen) % 2 == 0 and seen and not controller.queue.processing_count:
                break
            await asyncio.sleep(0.01)
        await controller.stop()
        assert source.handlers == []
    assert sorted(seen) == [Request("ns", "a")] * 2 + [Request("ns", "b")] * 2


# --- builder --------------------------------------------------------------------------------


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


async def test_min_interval_coalesces_events_after_a_recent_pass_into_one_later_pass() -> None:
    """A request whose last pass started within min_interval is not queued at once: it waits for
    the rest of the interval (one later pass serves every event in between). Another request,
    or the same one once the interval is over, is queued at once."""
    controller = Controller("coalesce", noop, min_interval=0.2)
    a, b = Request("ns", "a"), Request("ns", "b")
    controller.enqueue(a)
    assert len(controller.queue) == 1  # never passed: at once
    got = await controller.queue.get()
    await controller.process(got)
    controller.queue.done(got)
    for _ in range(5):  # a burst of events right after the pass
        controller.enqueue(a)
    controller.enqueue(b)
    assert len(controller.queue) == 1 and controller.queue.delayed_count == 1
    await asyncio.sleep(0.3)
    assert len(controller.queue) == 2  # a is back, once
    assert controller.queue.delayed_count == 0
    for _ in range(2):
        got = await controller.queue.get()
        await controller.process(got)
        controller.queue.done(got)
    assert len(controller.queue) == 0
    await asyncio.sleep(0.25)
    controller.enqueue(a)  # interval over (a's last pass started 0.25 s ago): at once
    assert len(controller.queue) == 1 and controller.queue.delayed_count == 0


def test_min_interval_is_off_by_default_and_never_negative() -> None:
    assert Controller("plain", noop).min_interval == 0
    with pytest.raises(ValueError):
        Controller("bad", noop, min_interval=-1)
