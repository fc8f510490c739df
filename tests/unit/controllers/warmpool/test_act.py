"""The SandboxWarmPool reconciler's I/O half (observe -> act -> status), through fakes.

A small fake client records every write in order (verb, name, preconditions) and fails the calls
a test scripts; fake informers hold the caches and deliver events to the reconciler's handlers.
These tests pin what each write sends, in which order, and what each outcome (success,
NotFound, 409, connection error, cancellation) leaves behind: expectations, status, events,
requeues (the rules of docs/design/warmpool.md, "Acting, in order" and the sections it names).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import logging
import re
from collections.abc import Callable
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.defaults import apply_sandbox_secure_defaults
from agentsandbox.api.hashing import name_hash, pod_template_hash
from agentsandbox.api.kinds import SANDBOX, SANDBOX_WARM_POOL
from agentsandbox.api.resources import SANDBOX_TEMPLATES, SANDBOX_WARM_POOLS, SANDBOXES
from agentsandbox.controllers.common.errors import ReconcileErrors
from agentsandbox.controllers.warmpool import act as wa
from agentsandbox.controllers.warmpool import controller as wp
from agentsandbox.controllers.warmpool.act import PoolWriter
from agentsandbox.controllers.warmpool.controller import WarmPoolReconciler
from agentsandbox.controllers.warmpool.plan import (
    EVENT_NOT_PROGRESSING,
    EVENT_PROGRESSING,
    REASON_CREATE_FAILED,
    Settings,
)
from agentsandbox.kube import metrics as kube_metrics
from agentsandbox.kube.errors import (
    AlreadyExists,
    ApiConnectionError,
    Conflict,
    Forbidden,
    InternalError,
    KubeError,
    NotFound,
)
from agentsandbox.kube.expectations import Expectations
from agentsandbox.kube.reconcile import Request, Result
from agentsandbox.kube.resources import Resource
from tests.unit.fakes import FakeInformer, FakeRecorder

NS = "default"
NOW = 1_800_000_000.0
_n = itertools.count()


def iso(ts: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------------------------ fakes
Failure = BaseException | Callable[[], BaseException | None] | None


class FakeClient:
    """Records writes; ``fail[(verb, name)]`` (or ``fail[verb]``) scripts an error per call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.fail: dict[Any, list[Failure]] = {}
        self.created: list[dict[str, Any]] = []
        self.hook: Callable[[str, str], Any] | None = None

    def _failure(self, verb: str, name: str) -> BaseException | None:
        for key in ((verb, name), verb):
            queue = self.fail.get(key)
            if queue:
                item = queue.pop(0)
                return item() if callable(item) and not isinstance(item, BaseException) else item
        return None

    async def _call(self, verb: str, name: str, detail: dict[str, Any]) -> None:
        self.calls.append((verb, name, detail))
        if self.hook is not None:
            await self.hook(verb, name)
        err = self._failure(verb, name)
        if err is not None:
            raise err

    async def create(
        self, resource: Resource, obj: dict[str, Any], namespace: str | None = None, **_: Any
    ) -> dict[str, Any]:
        await self._call(
            "create",
            obj["metadata"].get("generateName", ""),
            {
                "name": obj["metadata"].get("name"),
                "annotations": obj["metadata"].get("annotations"),
            },
        )
        new = copy.deepcopy(obj)
        n = next(_n)
        prefix = new["metadata"].pop("generateName", "")
        new["metadata"]["name"] = new["metadata"].get("name") or f"{prefix}{n}"
        new["metadata"]["uid"] = f"created-{n}"
        new["metadata"]["resourceVersion"] = "1"
        new["metadata"]["creationTimestamp"] = iso(NOW)
        self.created.append(new)
        return new

    async def update(
        self, resource: Resource, obj: dict[str, Any], namespace: str | None = None, **_: Any
    ) -> dict[str, Any]:
        meta = obj["metadata"]
        await self._call(
            "update",
            meta["name"],
            {"resourceVersion": meta.get("resourceVersion"), "owners": meta["ownerReferences"]},
        )
        return dict(obj)

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation_policy: str | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        await self._call("delete", name, {"uid": uid, "resourceVersion": resource_version})
        return {}

    async def patch(
        self, resource: Resource, name: str, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        await self._call("patch", name, body)
        return dict(body)

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Any:
        await self._call("get", name, {})
        for obj in self.created:
            if obj["metadata"]["name"] == name:
                return obj
        raise NotFound(404, "NotFound", f'sandboxes "{name}" not found')

    async def apply(self, resource: Resource, obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
        await self._call("apply", obj["metadata"]["name"], {"status": obj["status"], **kw})
        return dict(obj)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


# ------------------------------------------------------------------------------------ objects
def template(image: str = "img") -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_WARM_POOL.api_version,
        "kind": "SandboxTemplate",
        "metadata": {"name": "tpl", "namespace": NS, "uid": "tpl-uid"},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": image}]}}},
    }


def pool(replicas: int = 2, uid: str = "pool-uid", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_WARM_POOL.api_version,
        "kind": "SandboxWarmPool",
        "metadata": {"name": "pool", "namespace": NS, "uid": uid, "generation": 1},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": "tpl"}, **spec},
    }


def owner_ref(p: dict[str, Any], controller: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_WARM_POOL.api_version,
        "kind": "SandboxWarmPool",
        "name": p["metadata"]["name"],
        "uid": p["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def sandbox(
    p: dict[str, Any],
    t: dict[str, Any],
    *,
    owned: bool = True,
    ready: bool = True,
    age: float = 60.0,
    image: str | None = None,
) -> dict[str, Any]:
    n = next(_n)
    spec = copy.deepcopy(t["spec"]["podTemplate"]["spec"])
    if image is not None:
        spec["containers"][0]["image"] = image
    labels = {
        keys.LABEL_WARM_POOL_SANDBOX: name_hash(p["metadata"]["name"]),
        keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash(t["metadata"]["name"]),
        keys.LABEL_SANDBOX_POD_TEMPLATE_HASH: pod_template_hash(t["spec"]["podTemplate"]),
    }
    sb: dict[str, Any] = {
        "apiVersion": SANDBOX.api_version,
        "kind": "Sandbox",
        "metadata": {
            "name": f"sb-{n}",
            "namespace": NS,
            "uid": f"sb-uid-{n}",
            "resourceVersion": f"{100 + n}",
            "labels": labels,
            "creationTimestamp": iso(NOW - age),
        },
        "spec": {"replicas": 1, "podTemplate": {"spec": apply_sandbox_secure_defaults(t, spec)}},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "DependenciesReady" if ready else "DependenciesNotReady",
                    "lastTransitionTime": iso(NOW),
                }
            ]
        },
    }
    if owned:
        sb["metadata"]["ownerReferences"] = [owner_ref(p)]
    return sb


class Harness:
    def __init__(
        self,
        p: dict[str, Any],
        t: dict[str, Any] | None,
        *sbs: dict[str, Any],
        settings: Settings | None = None,
    ) -> None:
        self.pools, self.sandboxes = FakeInformer(), FakeInformer()
        self.templates, self.pods = FakeInformer(), FakeInformer()
        self.client, self.recorder, self.clock = FakeClient(), FakeRecorder(), Clock()
        self.reconciler = WarmPoolReconciler(
            self.pools,  # type: ignore[arg-type]
            self.sandboxes,  # type: ignore[arg-type]
            self.templates,  # type: ignore[arg-type]
            self.pods,  # type: ignore[arg-type]
            settings or Settings(),
            clock=self.clock,
            writer=PoolWriter(
                self.client,  # type: ignore[arg-type]
                self.recorder,  # type: ignore[arg-type]
                Expectations(),
                self.sandboxes,  # type: ignore[arg-type]
            ),
        )
        self.pools.put(p)
        if t is not None:
            self.templates.put(t)
        for sb in sbs:
            self.sandboxes.put(sb)

    @property
    def pool(self) -> dict[str, Any]:
        got = self.pools.get("pool", NS)
        assert got is not None
        return got

    async def reconcile(self) -> Result | None:
        return await self.reconciler.reconcile(Request(NS, "pool"))

    def verbs(self) -> list[tuple[str, str]]:
        return [(verb, name) for verb, name, _ in self.client.calls]

    def applied_status(self) -> dict[str, Any]:
        applies = [d for verb, _, d in self.client.calls if verb == "apply"]
        assert applies, "no status write"
        status: dict[str, Any] = applies[-1]["status"]
        return status

    def ready_condition(self) -> dict[str, Any]:
        return next(c for c in self.applied_status()["conditions"] if c["type"] == "Ready")

    def pending(self) -> Any:
        return self.reconciler.expectations.pending(self.pool["metadata"]["uid"])

    def observe_created(self) -> None:
        """Deliver the ADDED events of everything the client created."""
        for sb in self.client.created:
            self.sandboxes.put(sb)
        self.client.created.clear()


def conflict() -> Conflict:
    return Conflict(409, "Conflict", "the object has been modified")


# ------------------------------------------------------------------------------------ deletes
async def test_every_pool_delete_carries_uid_and_resource_version_preconditions() -> None:
    """Stale, stuck and excess deletes never remove an object another writer (a claim adopting
    it) changed since we looked (docs/design/warmpool.md, "Replenishing the pool")."""
    t = template("v2")
    stale_pool = pool(1, updateStrategy={"type": "Recreate"})
    stale = sandbox(stale_pool, template("v1"))
    h = Harness(stale_pool, t, stale)
    await h.reconcile()
    stuck_pool = pool(1)
    stuck = sandbox(stuck_pool, t, ready=False, age=600)
    h2 = Harness(stuck_pool, t, stuck)
    await h2.reconcile()
    excess_pool = pool(0)
    extra = sandbox(excess_pool, t)
    h3 = Harness(excess_pool, t, extra)
    await h3.reconcile()
    for harness, sb in ((h, stale), (h2, stuck), (h3, extra)):
        deletes = [d for verb, _, d in harness.client.calls if verb == "delete"]
        assert deletes == [
            {"uid": sb["metadata"]["uid"], "resourceVersion": sb["metadata"]["resourceVersion"]}
        ]


@pytest.mark.parametrize("kind", ["stale", "stuck", "excess"])
async def test_conflict_on_a_delete_is_no_error_lowers_the_expectation_and_requeues_fast(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A 409 means the sandbox changed (or is another object now): look again within a second;
    no error, no error log, no Warning event (docs/design/warmpool.md, "Replenishing the pool")."""
    t = template("v2")
    if kind == "stale":
        p = pool(1, updateStrategy={"type": "Recreate"})
        sb = sandbox(p, template("v1"))
    elif kind == "stuck":
        p = pool(1)
        sb = sandbox(p, t, ready=False, age=600)
    else:
        p = pool(0)
        sb = sandbox(p, t)
    h = Harness(p, t, sb)
    h.client.fail[("delete", sb["metadata"]["name"])] = [conflict()]
    with caplog.at_level(logging.INFO, logger="agentsandbox"):
        result = await h.reconcile()
    assert result is not None and result.requeue_after is not None
    assert result.requeue_after <= 1.0
    assert h.pending().deletes == frozenset()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [e for e in h.recorder.events if e[0] == "Warning"]


async def test_conflict_on_an_excess_delete_does_not_stop_the_batch() -> None:
    t = template()
    p = pool(0)
    sbs = [sandbox(p, t) for _ in range(3)]
    h = Harness(p, t, *sbs)
    # not-Ready first, then newest first: all Ready here, so the youngest goes first
    h.client.fail["delete"] = [conflict()]
    result = await h.reconcile()
    assert [v for v, _ in h.verbs()].count("delete") == 3
    assert result is not None and result.requeue_after == 1.0


async def test_not_found_on_a_delete_counts_as_observed() -> None:
    t = template()
    p = pool(1)
    stuck = sandbox(p, t, ready=False, age=600)
    h = Harness(p, t, stuck)
    h.client.fail["delete"] = [NotFound(404, "NotFound", "gone")]
    await h.reconcile()
    assert h.pending().deletes == frozenset()


async def test_connection_error_on_a_delete_lowers_the_expectation_and_is_reported() -> None:
    t = template()
    p = pool(1)
    stuck = sandbox(p, t, ready=False, age=600)
    h = Harness(p, t, stuck)
    h.client.fail["delete"] = [ApiConnectionError("reset by peer")]
    with pytest.raises(ReconcileErrors) as info:
        await h.reconcile()
    assert "reset by peer" in str(info.value)
    assert h.pending().deletes == frozenset()


async def test_failed_delete_is_not_reported_as_a_create_failure() -> None:
    """A failed stale delete with successful creates is an error of the pass, but
    the pool's condition is not SandboxCreateFailed and no create-failure Warning goes out."""
    t = template("v2")
    p = pool(2, updateStrategy={"type": "Recreate"})
    stale = sandbox(p, template("v1"))
    h = Harness(p, t, stale)
    h.client.fail["delete"] = [Forbidden(403, "Forbidden", "no delete for you")]
    with pytest.raises(ReconcileErrors, match="no delete for you"):
        await h.reconcile()
    # the stale one still counts as on its way out, so one create now (never over spec)
    assert h.verbs() == [
        ("delete", stale["metadata"]["name"]),
        ("create", "pool-"),
        ("apply", "pool"),
    ]
    assert h.ready_condition()["reason"] != REASON_CREATE_FAILED
    assert not [e for e in h.recorder.events if e[0] == "Warning"]


async def test_stuck_orphan_is_deleted_and_never_put() -> None:
    """DELETE then PUT of the same orphan used to fail with 404 every pass
    (docs/design/warmpool.md, "Sorting the members")."""
    t = template()
    p = pool(1)
    orphan = sandbox(p, t, owned=False, ready=False, age=600)
    h = Harness(p, t, orphan)
    result = await h.reconcile()
    assert ("update", orphan["metadata"]["name"]) not in h.verbs()
    assert ("delete", orphan["metadata"]["name"]) in h.verbs()
    assert [v for v, _ in h.verbs()].count("create") == 1
    assert h.pending().deletes == frozenset(), "an orphan's deletion is not waited for"
    assert result is not None and result.requeue_after == 30.0  # the create is unobserved


# ------------------------------------------------------------------------------------ order
async def test_write_order_is_adopt_then_stale_then_stuck_then_create_then_status() -> None:
    t = template("v2")
    p = pool(4, updateStrategy={"type": "Recreate"})
    orphan = sandbox(p, t, owned=False)
    stale = sandbox(p, template("v1"))
    stuck = sandbox(p, t, ready=False, age=600)
    h = Harness(p, t, orphan, stale, stuck)
    await h.reconcile()
    assert h.verbs() == [
        ("update", orphan["metadata"]["name"]),
        ("delete", stale["metadata"]["name"]),
        ("delete", stuck["metadata"]["name"]),
        ("create", "pool-"),
        ("apply", "pool"),
    ]
    # 4 wanted, the adopted orphan counts, 2 of our own are on their way out: 1 create now
    assert h.pending().creates == 1
    assert h.pending().deletes == {stale["metadata"]["uid"], stuck["metadata"]["uid"]}


async def test_adoption_sets_the_pool_as_controller_without_duplicating_its_reference() -> None:
    """An orphan already carrying a non-controller reference to the pool ends up
    with exactly one reference to it, marked controller, sent with its resourceVersion."""
    t = template()
    p = pool(1)
    orphan = sandbox(p, t, owned=False)
    orphan["metadata"]["ownerReferences"] = [owner_ref(p, controller=False)]
    h = Harness(p, t, orphan)
    await h.reconcile()
    (detail,) = [d for verb, _, d in h.client.calls if verb == "update"]
    assert detail["resourceVersion"] == orphan["metadata"]["resourceVersion"]
    assert detail["owners"] == [owner_ref(p)]


@pytest.mark.parametrize(
    ("error", "raises"),
    [(InternalError(500, "InternalError", "etcd"), True), (conflict(), False)],
)
async def test_failed_adoption_is_not_counted_and_is_replaced(
    error: KubeError, raises: bool
) -> None:
    """An orphan whose adoption failed is not a member this pass (upstream's rule;
    docs/design/warmpool.md, "Sorting the members")."""
    t = template()
    p = pool(1)
    orphan = sandbox(p, t, owned=False)
    h = Harness(p, t, orphan)
    h.client.fail["update"] = [error]
    if raises:
        with pytest.raises(ReconcileErrors):
            await h.reconcile()
    else:
        result = await h.reconcile()
        assert result is not None and result.requeue_after == 1.0
    assert [v for v, _ in h.verbs()].count("create") == 1
    assert h.applied_status()["replicas"] == 0


# ------------------------------------------------------------------------------------ creates
async def test_create_expectations_are_raised_before_and_lowered_by_events() -> None:
    t = template()
    p = pool(3)
    h = Harness(p, t)
    seen: list[int] = []

    async def hook(verb: str, name: str) -> None:
        if verb == "create":
            seen.append(h.pending().creates)

    h.client.hook = hook
    result = await h.reconcile()
    assert seen == [3, 3, 3], "expectations are raised before the first POST"
    assert h.pending().creates == 3
    assert result is not None and result.requeue_after == 30.0
    h.observe_created()
    assert h.pending().creates == 0


async def test_pool_sandboxes_are_named_here_with_their_pod_name_annotation() -> None:
    """Deviation (one write less per pool sandbox; docs/design/warmpool.md, "The blueprint"):
    the pool picks each sandbox's name in generateName's format, so the pod-name annotation is
    part of the create and the Sandbox controller never patches it in."""
    t = template()
    p = pool(3)
    h = Harness(p, t)
    await h.reconcile()
    creates = [d for v, _, d in h.client.calls if v == "create"]
    names = [d["name"] for d in creates]
    assert len(set(names)) == 3
    for d in creates:
        assert re.fullmatch(r"pool-[bcdfghjklmnpqrstvwxz2456789]{5}", d["name"]), d["name"]
        assert d["annotations"][keys.ANNOTATION_POD_NAME] == d["name"]
    long = wa.named({"metadata": {"generateName": "p" * 70 + "-"}})
    assert len(long["metadata"]["name"]) == 63 and long["metadata"]["name"].startswith("p" * 58)
    assert long["metadata"]["generateName"] == "p" * 70 + "-"  # kept, as the apiserver keeps it


async def test_a_taken_generated_name_is_retried_with_another_and_counted_once() -> None:
    t = template()
    p = pool(1)
    h = Harness(p, t)
    h.client.fail[("create", "pool-")] = [AlreadyExists(message="taken")]
    result = await h.reconcile()
    creates = [d["name"] for v, _, d in h.client.calls if v == "create"]
    assert len(creates) == 2 and creates[0] != creates[1]
    assert len(h.client.created) == 1 and h.pending().creates == 1
    assert result is not None and result.requeue_after == 30.0  # no error: one create in flight
    h.observe_created()
    assert h.pending().creates == 0


async def test_a_failing_create_batch_lowers_the_expectations_it_will_never_see() -> None:
    t = template()
    p = pool(7)
    h = Harness(p, t)
    # batches 1, 2, 4: the second call of the second batch fails, so batch 4 never runs
    h.client.fail["create"] = [None, None, Forbidden(403, "Forbidden", "exceeded quota")]
    with pytest.raises(ReconcileErrors, match="exceeded quota"):
        await h.reconcile()
    assert [v for v, _ in h.verbs()].count("create") == 3
    assert h.pending().creates == 2
    cond = h.ready_condition()
    assert (cond["status"], cond["reason"]) == ("False", REASON_CREATE_FAILED)
    assert "exceeded quota" in cond["message"]
    assert kube_metrics.REGISTRY.get_sample_value(
        "agent_sandbox_warmpool_sandbox_creates_total",
        {"namespace": NS, "pool": "pool", "result": "error"},
    ) == pytest.approx(1.0), "failed creates are counted one by one"


async def test_connection_error_on_create_is_reported_in_the_condition() -> None:
    """A create that never got an answer is a create failure too (docs/design/warmpool.md,
    "Acting, in order")."""
    t = template()
    h = Harness(pool(1), t)
    wp_backoff, wa.LOST_ANSWER_BACKOFF = wa.LOST_ANSWER_BACKOFF, 0.0
    try:
        h.client.fail["create"] = [ApiConnectionError("connection refused")] * 4
        with pytest.raises(ReconcileErrors):
            await h.reconcile()
    finally:
        wa.LOST_ANSWER_BACKOFF = wp_backoff
    assert [v for v, _ in h.verbs()].count("create") == 4  # the first try and 3 more
    cond = h.ready_condition()
    assert cond["reason"] == REASON_CREATE_FAILED and "connection refused" in cond["message"]
    # done or not? still expected, until the next pass asks the apiserver
    assert h.pending().creates == 1
    [name] = {d["name"] for v, _, d in h.client.calls if v == "create"}
    await h.reconcile()
    assert ("get", name, {}) in h.client.calls  # not there: the expectation is lowered ...
    assert [v for v, _ in h.verbs()].count("create") == 5  # ... and the pool creates again
    assert [e[:2] for e in h.recorder.events] == [
        ("Warning", EVENT_NOT_PROGRESSING),
        ("Normal", EVENT_PROGRESSING),
    ]


class LostAnswerClient(FakeClient):
    """The first create is done but its answer is lost (a connection error after the request
    was sent); GET answers from what was created."""

    def __init__(self) -> None:
        super().__init__()
        self.lose = 1
        self.stored: dict[str, dict[str, Any]] = {}

    async def create(
        self, resource: Resource, obj: dict[str, Any], namespace: str | None = None, **kw: Any
    ) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        if name in self.stored:
            self.calls.append(("create", obj["metadata"].get("generateName", ""), {"name": name}))
            raise AlreadyExists(409, "AlreadyExists", f'sandboxes "{name}" already exists')
        new = await super().create(resource, obj, namespace, **kw)
        self.stored[name] = new
        if self.lose:
            self.lose -= 1
            raise ApiConnectionError("connection reset by peer")
        return new

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> Any:
        self.calls.append(("get", name, {}))
        if name not in self.stored:
            raise NotFound(404, "NotFound", "not found")
        return self.stored[name]


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wa, "LOST_ANSWER_BACKOFF", 0.0)


@pytest.mark.usefixtures("no_backoff")
async def test_a_create_still_unanswered_after_the_retries_is_found_by_the_next_pass() -> None:
    """Proposed by the fault suite: when every same-name retry failed too (the apiserver away
    for longer), the create stays expected; the next pass finds it with a GET (the cache has
    not caught up) and creates nothing more."""
    t = template()
    h = Harness(pool(1), t)
    client = LostAnswerClient()
    client.lose = 0
    h.client = h.reconciler.writer.client = client  # type: ignore[assignment]
    original = client.create

    async def done_then_unreachable(resource: Resource, obj: dict[str, Any], *a: Any) -> Any:
        name = obj["metadata"]["name"]
        if name not in client.stored:
            await original(resource, obj, *a)  # done ...
        client.calls.append(("create", "", {"name": name}))
        raise ApiConnectionError("connection refused")  # ... but no answer, ever

    client.create = done_then_unreachable  # type: ignore[method-assign,assignment]
    with pytest.raises(ReconcileErrors):
        await h.reconcile()
    assert h.pending().creates == 1
    client.create = original  # type: ignore[method-assign]
    await h.reconcile()
    [name] = client.stored
    assert ("get", name, {}) in client.calls
    assert h.pending().creates == 1  # found: its ADDED event is what satisfies it
    assert len(client.stored) == 1  # nothing created beyond it


@pytest.mark.usefixtures("no_backoff")
async def test_a_create_whose_answer_was_lost_is_sent_again_under_the_same_name() -> None:
    """Bug found by the fault suite (a proxy losing answers): the next pass created another
    sandbox under a new name. The same named body is sent again; AlreadyExists for a sandbox
    this pool controls means the lost create was done: one sandbox, counted, no error."""
    t = template()
    h = Harness(pool(1), t)
    h.client = h.reconciler.writer.client = LostAnswerClient()  # type: ignore[assignment]
    await h.reconcile()
    creates = [d["name"] for v, _, d in h.client.calls if v == "create"]
    assert len(creates) == 2 and creates[0] == creates[1]
    assert ("get", creates[0], {}) in h.client.calls
    assert len(h.client.stored) == 1
    assert h.pending().creates == 1  # done: its ADDED event is still expected
    assert h.ready_condition()["reason"] != REASON_CREATE_FAILED


@pytest.mark.usefixtures("no_backoff")
async def test_already_exists_on_a_retry_for_someone_elses_sandbox_picks_another_name() -> None:
    t = template()
    h = Harness(pool(1), t)
    client = LostAnswerClient()
    h.client = h.reconciler.writer.client = client  # type: ignore[assignment]
    original = client.create

    async def create(resource: Resource, obj: dict[str, Any], *a: Any, **kw: Any) -> Any:
        answer = await original(resource, obj, *a, **kw)
        return answer

    async def lost_then_taken(resource: Resource, obj: dict[str, Any], *a: Any, **kw: Any) -> Any:
        name = obj["metadata"]["name"]
        if name not in client.stored and client.lose:
            client.lose -= 1
            client.calls.append(("create", "", {"name": name}))
            # the lost try never happened; meanwhile someone else took the name
            client.stored[name] = {"metadata": {"name": name, "ownerReferences": []}}
            raise ApiConnectionError("connection refused")
        return await create(resource, obj, *a, **kw)

    client.create = lost_then_taken  # type: ignore[method-assign]
    await h.reconcile()
    names = [d["name"] for v, _, d in client.calls if v == "create"]
    assert names[0] == names[1] and names[2] != names[0]  # retried, refused, another name
    assert h.ready_condition()["reason"] != REASON_CREATE_FAILED


async def test_cancellation_mid_create_lowers_the_unsent_and_unanswered_creates() -> None:
    t = template()
    h = Harness(pool(3), t)
    gate, second_batch_sent = asyncio.Event(), asyncio.Event()

    async def hook(verb: str, name: str) -> None:
        if verb == "create" and len(h.client.calls) > 1:
            if len(h.client.calls) == 3:
                second_batch_sent.set()
            await gate.wait()  # the second batch hangs

    h.client.hook = hook
    task = asyncio.create_task(h.reconcile())
    await second_batch_sent.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert h.pending().creates == 1, "only the answered create is still expected"


async def test_shutdown_stops_creates_between_batches_without_an_error() -> None:
    """The batch's stop event is the controller's, set when it stops (docs/design/warmpool.md,
    "Slow-start batches")."""
    t = template()
    h = Harness(pool(7), t)
    stopping = asyncio.Event()
    h.reconciler.stopping = stopping

    async def hook(verb: str, name: str) -> None:
        if verb == "create":
            stopping.set()

    h.client.hook = hook
    await h.reconcile()
    assert [v for v, _ in h.verbs()].count("create") == 1
    assert h.pending().creates == 1
    assert h.ready_condition()["reason"] != REASON_CREATE_FAILED


@pytest.mark.parametrize("how", ["deleted", "deletionTimestamp"])
async def test_deleting_the_pool_cancels_its_create_batch_at_once(how: str) -> None:
    """Bug found by the bad-input suite (10^6 replicas): a batch whose creates wait in the
    client's rate limiter ran to its end after the pool was deleted. Now the pool's delete
    (or its deletionTimestamp) cancels the batch: nothing more is sent, no error is reported,
    and the creates that were never answered are no longer expected."""
    t = template()
    h = Harness(pool(7), t)
    gate, third = asyncio.Event(), asyncio.Event()

    async def hook(verb: str, name: str) -> None:
        if verb == "create" and len(h.client.calls) >= 2:
            if len(h.client.calls) == 3:
                third.set()
            await gate.wait()  # the second batch (2 creates) hangs, as in a rate limiter

    h.client.hook = hook
    task = asyncio.create_task(h.reconcile())
    await third.wait()
    uid = h.pool["metadata"]["uid"]
    if how == "deleted":
        h.pools.remove(h.pool)
    else:
        h.pools.put({**h.pool, "metadata": {**h.pool["metadata"], "deletionTimestamp": iso(NOW)}})
    # no error: the pool is gone (without the cancel the batch waits on the gate for ever: the
    # timeout only stops a hung test)
    await asyncio.wait_for(task, 10.0)
    assert [v for v, _ in h.verbs()].count("create") == 3  # batches of 1, then 2: no third
    assert h.reconciler.expectations.pending(uid).creates == 1  # only the answered one
    gate.set()


async def test_a_delete_signal_without_a_running_batch_leaves_nothing_behind() -> None:
    h = Harness(pool(3), template())
    h.reconciler.writer.pool_gone(
        h.pool["metadata"]["uid"]
    )  # no batch was running: nothing to stop
    await h.reconcile()
    assert [v for v, _ in h.verbs()].count("create") == 3  # a live pool is not held back


def _strip_pool_label(sb: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(sb)
    del out["metadata"]["labels"][keys.LABEL_WARM_POOL_SANDBOX]
    out["metadata"]["resourceVersion"] = "42"
    return out


async def test_a_member_stripped_of_the_pool_label_is_released_with_a_precondition() -> None:
    """Bug found by the other-writers suite: a member whose pool label another writer removed
    stayed controlled by the pool, uncounted, never deleted: leaked. It is now released (its
    owner references without the pool's, resourceVersion precondition) and replaced."""
    t = template()
    p = pool(2)
    foreign = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "cm"}
    member = sandbox(p, t)
    member["metadata"]["ownerReferences"].append(foreign)
    stripped = _strip_pool_label(member)
    h = Harness(p, t, sandbox(p, t), stripped)
    await h.reconcile()
    patches = [(n, d) for v, n, d in h.client.calls if v == "patch"]
    assert patches == [
        (
            stripped["metadata"]["name"],
            {"metadata": {"resourceVersion": "42", "ownerReferences": [foreign]}},
        )
    ]
    assert [v for v, _ in h.verbs()].index("patch") < [v for v, _ in h.verbs()].index("create")
    assert [v for v, _ in h.verbs()].count("create") == 1  # replaced, not counted
    assert ("Normal", wa.EVENT_RELEASED) in [e[:2] for e in h.recorder.events]


async def test_a_conflict_on_a_release_is_no_error_and_looks_again() -> None:
    t = template()
    p = pool(1)
    stripped = _strip_pool_label(sandbox(p, t))
    h = Harness(p, t, stripped)
    h.client.fail["patch"] = [conflict()]
    result = await h.reconcile()
    assert result is not None and result.requeue_after is not None
    assert result.requeue_after <= wa.CONFLICT_RECHECK
    assert wa.EVENT_RELEASED not in [e[1] for e in h.recorder.events]


async def test_a_terminating_or_foreign_sandbox_is_never_released() -> None:
    t = template()
    p = pool(1)
    going = _strip_pool_label(sandbox(p, t))
    going["metadata"]["deletionTimestamp"] = iso(NOW)
    other = _strip_pool_label(sandbox(pool(1, uid="other-pool"), t))
    h = Harness(p, t, going, other)
    await h.reconcile()
    assert [v for v, _ in h.verbs()].count("patch") == 0


async def test_setup_wires_the_controllers_stop_event_into_the_reconciler() -> None:
    host = FakeManager()
    controller = wp.setup(host, Settings())  # type: ignore[arg-type]
    reconciler = host.reconciler()
    assert reconciler.stopping is controller.stopping
    await controller.start()
    assert not controller.stopping.is_set()
    await controller.stop()
    assert controller.stopping.is_set()


# ------------------------------------------------------------------------------------ status
async def test_failed_status_write_does_not_hide_the_passes_other_errors() -> None:
    """A failed status write is reported beside the pass's other errors, not instead of them
    (docs/design/warmpool.md, "Acting, in order")."""
    t = template()
    p = pool(1)
    stuck = sandbox(p, t, ready=False, age=600)
    h = Harness(p, t, stuck)
    h.client.fail["delete"] = [Forbidden(403, "Forbidden", "no delete")]
    h.client.fail["apply"] = [InternalError(500, "InternalError", "status down")]
    with pytest.raises(ReconcileErrors) as info:
        await h.reconcile()
    text = str(info.value)
    assert "no delete" in text and "status down" in text


async def test_status_write_is_skipped_when_unchanged() -> None:
    t = template()
    p = pool(1)
    h = Harness(p, t, sandbox(p, t))
    await h.reconcile()
    written = h.applied_status()
    h.pools.put({**h.pool, "status": written})
    h.client.calls.clear()
    assert await h.reconcile() is None
    assert h.verbs() == []


async def test_status_write_carries_explicit_zero_counts_and_the_field_manager() -> None:
    t = template()
    p = pool(0)
    p["status"] = {"replicas": 2, "readyReplicas": 2}
    h = Harness(p, t)
    await h.reconcile()
    (detail,) = [d for verb, _, d in h.client.calls if verb == "apply"]
    assert detail["status"]["replicas"] == 0 and detail["status"]["readyReplicas"] == 0
    assert detail["field_manager"] == "warmpool-controller" and detail["force"] is True
    assert detail["subresource"] == "status"


# ------------------------------------------------------------------------------------ events
async def test_not_progressing_warning_once_per_transition_and_only_after_the_write() -> None:
    """The Warning is not repeated while the cache still shows the old status, is not sent when
    the status write fails, and the action is "Reconciling" (docs/design/warmpool.md, "Status and
    the Ready condition")."""
    h = Harness(pool(1), None)
    h.client.fail["apply"] = [InternalError(500, "InternalError", "down")]
    with pytest.raises(ReconcileErrors):
        await h.reconcile()
    assert h.recorder.events == []
    await h.reconcile()
    await h.reconcile()  # the pool in the cache still has no status
    assert h.recorder.events == [
        ("Warning", EVENT_NOT_PROGRESSING, 'SandboxTemplate "tpl" not found', "Reconciling")
    ]
    h.templates.put(template())
    await h.reconcile()
    assert h.recorder.events[-1][:2] == ("Normal", EVENT_PROGRESSING)
    assert len(h.recorder.events) == 2


async def test_a_restarted_reconciler_does_not_repeat_the_warning_the_status_shows() -> None:
    h = Harness(pool(1), None)
    await h.reconcile()
    status = h.applied_status()
    again = Harness({**pool(1), "status": status}, None)
    await again.reconcile()
    assert again.recorder.events == []


# ------------------------------------------------------------------------------------ requeues
async def test_lost_event_fallback_is_not_shadowed_by_a_long_plan_requeue() -> None:
    """A young not-Ready sandbox asks for ~290 s; pending creates need 30 s
    (docs/design/warmpool.md, "Stuck sandboxes", "Expectations")."""
    t = template()
    p = pool(2)
    h = Harness(p, t, sandbox(p, t, ready=False, age=10))
    result = await h.reconcile()
    assert h.pending().creates == 1
    assert result is not None and result.requeue_after == 30.0
    h.observe_created()
    result = await h.reconcile()
    assert result is not None and result.requeue_after == pytest.approx(300 - 10 + 1)


async def test_creates_held_back_by_own_terminating_sandboxes_requeue() -> None:
    """Nothing else may re-queue the pool when what held creates back goes away
    (docs/design/warmpool.md, "Replenishing the pool")."""
    t = template()
    p = pool(2)
    leaving = sandbox(p, t)
    leaving["metadata"]["deletionTimestamp"] = iso(NOW)
    h = Harness(p, t, leaving, sandbox(p, t))
    result = await h.reconcile()
    assert [v for v, _ in h.verbs()].count("create") == 0
    assert result is not None and result.requeue_after == 5.0


async def test_pod_cache_wait_is_bounded_to_ten_seconds_across_passes() -> None:
    """A sandbox reporting a pod the cache lacks is kept at most 10 s; at 11 s upstream's stuck
    rule applies to it (docs/design/warmpool.md, "Stuck sandboxes")."""
    t = template()
    p = pool(1)
    sb = sandbox(p, t, ready=False, age=600)
    sb["status"]["replicas"] = 1
    h = Harness(p, t, sb)
    result = await h.reconcile()
    assert result is not None and result.requeue_after == 11.0
    assert "delete" not in [v for v, _ in h.verbs()]
    h.clock.now += 11
    await h.reconcile()
    assert ("delete", sb["metadata"]["name"]) in h.verbs()


async def test_held_sandbox_gets_a_fresh_grace_period_once_unblocked_across_passes() -> None:
    t = template()
    p = pool(1)
    sb = sandbox(p, t, ready=False, age=600)
    sb["status"]["conditions"][0].update(reason="ReconcilerError", message="exceeded quota")
    h = Harness(p, t, sb)
    await h.reconcile()
    assert "delete" not in [v for v, _ in h.verbs()]
    unblocked = copy.deepcopy(sb)
    unblocked["status"]["conditions"][0].update(reason="DependenciesNotReady", message="")
    unblocked["status"]["replicas"] = 1
    h.sandboxes.put(unblocked)
    h.pods.put(
        {
            "metadata": {
                "name": sb["metadata"]["name"],
                "namespace": NS,
                "creationTimestamp": iso(NOW),
            },
            "status": {"phase": "Pending"},
        }
    )
    h.clock.now += 5
    await h.reconcile()
    assert "delete" not in [v for v, _ in h.verbs()], "its pod only just started"


# ------------------------------------------------------------------------------------ mapping
def test_pools_for_template_maps_only_pools_of_that_template_in_its_namespace() -> None:
    """Upstream TestFindWarmPoolsForTemplate."""
    h = Harness(pool(1), template())
    for name, ns, tpl in (
        ("a", NS, "tpl"),
        ("b", NS, "tpl"),
        ("c", NS, "other"),
        ("d", "elsewhere", "tpl"),
    ):
        h.pools.put(
            {
                "metadata": {"name": name, "namespace": ns, "uid": name},
                "spec": {"replicas": 1, "sandboxTemplateRef": {"name": tpl}},
            }
        )
    got = h.reconciler.pools_for_template(template())
    assert sorted(got, key=str) == [Request(NS, "a"), Request(NS, "b"), Request(NS, "pool")]
    assert h.reconciler.pools_for_template({"metadata": {"name": "none", "namespace": NS}}) == []


class FakeManager:
    """What ``setup`` needs of a manager: informers, a client, a recorder, a place to add."""

    def __init__(self) -> None:
        self.client = FakeClient()
        self.informers: dict[Resource, FakeInformer] = {}
        self.added: list[Any] = []

    def get_informer(self, resource: Resource, *_: Any, **__: Any) -> FakeInformer:
        return self.informers.setdefault(resource, FakeInformer())

    def event_recorder(self, name: str) -> FakeRecorder:
        return FakeRecorder()

    def add(self, runnable: Any) -> None:
        self.added.append(runnable)

    def reconciler(self) -> WarmPoolReconciler:
        controller = self.added[0]
        target = controller._reconcile.__self__
        assert isinstance(target, WarmPoolReconciler)
        return target


async def test_sandbox_adopted_by_a_claim_requeues_its_pool_and_is_replaced_exactly_once() -> None:
    """What a claim adoption does: pool labels stripped, another controller. The Owns watch
    re-queues the old owner; the next pass creates exactly one replacement."""
    mgr = FakeManager()
    controller = wp.setup(mgr, Settings())  # type: ignore[arg-type]
    reconciler = mgr.reconciler()
    t, p = template(), pool(2)
    members = [sandbox(p, t), sandbox(p, t)]
    mgr.informers[SANDBOX_TEMPLATES].put(t)
    mgr.informers[SANDBOX_WARM_POOLS].put({**p, "status": {}})
    for sb in members:
        mgr.informers[SANDBOXES].put(sb)
    await controller.start()
    try:
        while len(controller.queue):  # drain the start-up adds
            req = controller.queue.get_nowait()
            controller.queue.done(req)
        adopted = copy.deepcopy(members[0])
        adopted["metadata"]["labels"] = {}
        adopted["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                "kind": "SandboxClaim",
                "name": "claim",
                "uid": "claim-uid",
                "controller": True,
            }
        ]
        mgr.informers[SANDBOXES].put(adopted)
        assert controller.queue.get_nowait() == Request(NS, "pool")
        await reconciler.reconcile(Request(NS, "pool"))
        assert [v for v, _, _ in mgr.client.calls].count("create") == 1
        assert [v for v, _, _ in mgr.client.calls if v == "delete"] == []
    finally:
        await controller.stop(drain_timeout=0)


# ------------------------------------------------------------------------------------ hygiene
async def test_deleting_a_pool_drops_its_metric_series_and_memory() -> None:
    """A deleted pool leaves no metric series, expectations or memory behind
    (docs/design/warmpool.md, "One pass")."""
    t = template()
    p = pool(1)
    h = Harness(p, t)
    await h.reconcile()
    labels = {"namespace": NS, "pool": "pool", "result": "success"}
    assert kube_metrics.REGISTRY.get_sample_value(
        "agent_sandbox_warmpool_sandbox_creates_total", labels
    )
    h.pools.remove(h.pool)
    assert await h.reconcile() is None
    for name, extra in (
        ("agent_sandbox_warmpool_sandbox_creates_total", {"result": "success"}),
        ("agent_sandbox_warmpool_replicas", {}),
        ("agent_sandbox_warmpool_desired_replicas", {}),
    ):
        got = kube_metrics.REGISTRY.get_sample_value(
            name, {"namespace": NS, "pool": "pool", **extra}
        )
        assert got is None, name
    assert "pool-uid" not in h.reconciler.expectations
    assert h.reconciler._memory == {}


async def test_a_pool_recreated_under_the_same_name_does_not_inherit_expectations() -> None:
    """Expectations are keyed by the pool's UID (docs/design/warmpool.md, "Expectations")."""
    t = template()
    h = Harness(pool(2), t)
    await h.reconcile()
    assert h.pending().creates == 2  # their events never come: the pool is deleted
    h.pools.put(pool(2, uid="pool-uid-2"))
    h.client.calls.clear()
    await h.reconcile()
    assert [v for v, _ in h.verbs()].count("create") == 2


async def test_time_to_ready_is_observed_for_the_first_ready_only() -> None:
    t = template()
    p = pool(1)
    sb = sandbox(p, t, ready=False)
    h = Harness(p, t, sb)
    labels = {"namespace": NS, "pool": "pool"}

    def count() -> float:
        return (
            kube_metrics.REGISTRY.get_sample_value(
                "agent_sandbox_warmpool_sandbox_time_to_ready_seconds_count", labels
            )
            or 0.0
        )

    before = count()
    for ready in (True, False, True):
        flipped = copy.deepcopy(sb)
        flipped["status"]["conditions"][0]["status"] = "True" if ready else "False"
        h.sandboxes.put(flipped)
    assert count() - before == 1.0


async def test_unknown_update_strategy_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    """As upstream, an unknown strategy is treated as OnReplenish; it is logged once
    (docs/design/warmpool.md, "Sorting the members")."""
    t = template()
    h = Harness(pool(0, updateStrategy={"type": "Bogus"}), t)
    with caplog.at_level(logging.WARNING, logger="agentsandbox.warmpool"):
        await h.reconcile()
        await h.reconcile()
    assert [r.getMessage() for r in caplog.records].count(
        "unknown update strategy, defaulting to OnReplenish"
    ) == 1


async def test_pod_lookup_follows_the_pod_name_annotation_and_ignores_terminating_pods() -> None:
    """The pod looked at is the one the pod-name annotation names; a terminating pod is not
    looked at."""
    t = template()
    p = pool(1)
    sb = sandbox(p, t, ready=False)
    sb["metadata"]["annotations"] = {keys.ANNOTATION_POD_NAME: "adopted-pod"}
    h = Harness(p, t, sb)
    h.pods.put({"metadata": {"name": "adopted-pod", "namespace": NS}})
    h.pods.put({"metadata": {"name": sb["metadata"]["name"], "namespace": NS}})
    snap = h.reconciler.observe(h.pool)
    assert snap.pods[sb["metadata"]["name"]]["metadata"]["name"] == "adopted-pod"
    h.pods.put(
        {"metadata": {"name": "adopted-pod", "namespace": NS, "deletionTimestamp": iso(NOW)}}
    )
    assert h.reconciler.observe(h.pool).pods == {}


# ------------------------------------------------ replenish delay, refill rate, eviction
def adopted_by_claim(sb: dict[str, Any]) -> dict[str, Any]:
    """What a claim's adoption leaves in the cache: pool labels gone, the claim as controller."""
    out = copy.deepcopy(sb)
    out["metadata"]["labels"] = {keys.LABEL_CLAIM_UID: "claim-uid"}
    out["metadata"]["ownerReferences"] = [
        {
            "apiVersion": SANDBOX_WARM_POOL.api_version,
            "kind": "SandboxClaim",
            "name": "claim",
            "uid": "claim-uid",
            "controller": True,
        }
    ]
    return out


def creates(h: Harness) -> int:
    return [verb for verb, _, _ in h.client.calls].count("create")


async def test_replenish_delay_is_counted_from_the_first_missing_pass_and_re_armed() -> None:
    t, p = template(), pool(3)
    members = [sandbox(p, t) for _ in range(3)]
    h = Harness(p, t, *members, settings=Settings(replenish_delay=5.0))
    assert await h.reconcile() is None and creates(h) == 0
    h.sandboxes.put(adopted_by_claim(members[0]))
    h.clock.now += 1.0
    assert await h.reconcile() == Result(requeue_after=5.0)
    h.clock.now += 3.0
    h.sandboxes.put(adopted_by_claim(members[1]))  # another one leaves: the hold starts again
    assert await h.reconcile() == Result(requeue_after=5.0)
    h.clock.now += 4.0  # 8 s after the first departure, 4 s after the second
    result = await h.reconcile()
    assert creates(h) == 0 and result is not None and result.requeue_after == 1.0
    h.clock.now += 1.0
    await h.reconcile()
    assert creates(h) == 2


async def test_replenish_delay_does_not_hold_the_initial_fill() -> None:
    h = Harness(pool(3), template(), settings=Settings(replenish_delay=60.0))
    await h.reconcile()
    assert creates(h) == 3


async def test_refill_rate_caps_creates_per_pool_per_second_with_the_injected_clock() -> None:
    t = template()
    h = Harness(pool(10), t, settings=Settings(max_refill_rate=2.0))
    other = pool(10, uid="other-uid")
    other["metadata"]["name"] = "other"
    h.pools.put(other)
    result = await h.reconcile()  # the bucket starts full: capacity max(1, 2) = 2
    assert creates(h) == 2 and result == Result(requeue_after=0.5)
    await h.reconciler.reconcile(Request(NS, "other"))  # another pool has its own bucket
    assert creates(h) == 4
    h.observe_created()
    h.clock.now += 0.5  # one token
    await h.reconcile()
    assert creates(h) == 5
    h.observe_created()
    h.clock.now += 10.0  # never more than the capacity, however long the pool waited
    await h.reconcile()
    assert creates(h) == 7


async def test_created_pool_sandboxes_carry_the_eviction_annotation() -> None:
    h = Harness(pool(1), template())
    await h.reconcile()
    pod_meta = h.client.created[0]["spec"]["podTemplate"]["metadata"]
    assert pod_meta["annotations"] == {keys.ANNOTATION_SAFE_TO_EVICT: "true"}
    off = Harness(pool(1), template(), settings=Settings(warm_pool_eviction=False))
    await off.reconcile()
    assert "annotations" not in off.client.created[0]["spec"]["podTemplate"]["metadata"]
