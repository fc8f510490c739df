"""The SandboxWarmPoolAutoscaler's act step and its other-writer rule, with a small fake client:
what it writes (only /scale and its own status), with which precondition, and what a 409 or
another writer does."""

from __future__ import annotations

import collections
import copy
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from agentsandbox.api.resources import SANDBOX_WARM_POOL_AUTOSCALERS, SANDBOX_WARM_POOLS
from agentsandbox.controllers.autoscaler.act import (
    CONFLICT,
    SCALED,
    Scale,
    ScaleWriter,
    TargetError,
)
from agentsandbox.controllers.autoscaler.controller import AutoscalerReconciler
from agentsandbox.controllers.autoscaler.rules import (
    REASON_CONFLICTING_WRITER,
    Ownership,
    arbitrate,
)
from agentsandbox.controllers.autoscaler.settings import Settings
from agentsandbox.controllers.autoscaler.source import Windows, claim_keys
from agentsandbox.kube.client import PatchType
from agentsandbox.kube.errors import Conflict, Invalid, NotFound
from agentsandbox.kube.reconcile import Request
from agentsandbox.kube.resources import Resource
from tests.unit.fakes import FakeInformer, json_patch

NS = "ns"
POOL_API = "extensions.agents.x-k8s.io/v1beta1"


class FakeScaleApi:
    """A pool with a /scale subresource and an autoscaler with a status; resourceVersions and
    preconditions as the API server keeps them. Every call is recorded."""

    def __init__(self, replicas: int = 2) -> None:
        self._rv = itertools.count(10)
        self.pool: dict[str, Any] = {"spec": {"replicas": replicas}, "rv": str(next(self._rv))}
        self.autoscaler: dict[str, Any] | None = None
        self.calls: list[tuple[str, str, Any]] = []  # (verb, path-ish, body)
        self.conflict_next_scale = False
        self.discovery: dict[str, Any] = {}
        # run just before a /scale write is applied: another write landing in between
        self.before_scale_write: Callable[[], None] | None = None

    def bump(self) -> None:
        self.pool["rv"] = str(next(self._rv))

    def scale_doc(self, namespace: str | None = None) -> dict[str, Any]:
        """The pool's /scale as the API server serves it (autoscaling/v1 Scale: ``replicas`` is
        omitted when 0)."""
        replicas = self.pool["spec"]["replicas"]
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                "name": "pool",
                "namespace": namespace,
                "resourceVersion": self.pool["rv"],
            },
            "spec": {"replicas": replicas} if replicas else {},
        }

    async def get(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        subresource: Any = None,
    ) -> dict[str, Any]:
        self.calls.append(("get", f"{resource.plural}/{name}/{subresource}", None))
        if resource.plural != "sandboxwarmpools" or name != "pool":
            raise NotFound(404, "NotFound", "not found")
        return self.scale_doc(namespace)

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        subresource: Any = None,
        field_manager: Any = None,
        patch_type: Any = None,
    ) -> dict[str, Any]:
        self.calls.append(
            ("patch", f"{resource.plural}/{name}/{subresource}", copy.deepcopy(patch))
        )
        if subresource == "scale" and self.before_scale_write is not None:
            self.before_scale_write()
        if subresource == "scale" and self.conflict_next_scale:
            self.conflict_next_scale = False
            self.bump()
            raise Conflict(409, "Conflict", "the object has been modified")
        if isinstance(patch, list):  # a JSON patch (of /scale): applied to the Scale as stored
            assert subresource == "scale" and patch_type == PatchType.JSON
            scaled = json_patch(self.scale_doc(namespace), patch)
            self.pool["spec"]["replicas"] = int(scaled["spec"].get("replicas") or 0)
            self.bump()
            return self.scale_doc(namespace)
        want = (patch.get("metadata") or {}).get("resourceVersion")
        if subresource == "scale":
            if want is not None and want != self.pool["rv"]:
                raise Conflict(409, "Conflict", "the object has been modified")
            self.pool["spec"]["replicas"] = patch["spec"]["replicas"]
            self.bump()
            return {"metadata": {"resourceVersion": self.pool["rv"]}}
        assert subresource == "status" and resource == SANDBOX_WARM_POOL_AUTOSCALERS
        assert self.autoscaler is not None
        meta = self.autoscaler["metadata"]
        if want is not None and want != meta["resourceVersion"]:
            raise Conflict(409, "Conflict", "the object has been modified")
        self.autoscaler["status"] = {**(self.autoscaler.get("status") or {}), **patch["status"]}
        meta["resourceVersion"] = str(next(self._rv))
        return copy.deepcopy(self.autoscaler)

    async def raw(self, method: str, path: str) -> Any:
        self.calls.append(("raw", path, None))
        if path not in self.discovery:
            raise NotFound(404, "NotFound", "not found")
        return self.discovery[path]

    def writes(self) -> list[tuple[str, str, Any]]:
        return [c for c in self.calls if c[0] == "patch"]


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, _obj: Any, type_: str, reason: str, note: str = "", **_: Any) -> bool:
        self.events.append((type_, reason, note))
        return True


def autoscaler_obj(generation: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling.agentsandbox.dev/v1alpha1",
        "kind": "SandboxWarmPoolAutoscaler",
        "metadata": {
            "name": "auto",
            "namespace": NS,
            "uid": "a-uid",
            "generation": generation,
            "resourceVersion": "1",
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": POOL_API, "kind": "SandboxWarmPool", "name": "pool"},
            "minReplicas": 3,
            "maxReplicas": 10,
            "targetWarmShare": 0.99,
            "scaleDownStabilizationSeconds": 5,
            **spec,
        },
    }


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def setup_reconciler(
    api: FakeScaleApi, autoscaler: dict[str, Any]
) -> tuple[AutoscalerReconciler, FakeInformer, Recorder, Clock]:
    autoscalers, claims, sandboxes, pools = (FakeInformer() for _ in range(4))
    api.autoscaler = autoscaler
    autoscalers.put(copy.deepcopy(autoscaler))
    recorder, clock = Recorder(), Clock()
    rec = AutoscalerReconciler(
        ScaleWriter(api),
        autoscalers,  # type: ignore[arg-type]
        claims,  # type: ignore[arg-type]
        sandboxes,  # type: ignore[arg-type]
        pools,  # type: ignore[arg-type]
        recorder,  # type: ignore[arg-type]
        Settings(sync_period=2.0),
        clock=clock,
    )
    rec.windows.refills[f"{NS}/pool"] = collections.deque([(clock.now, 0.5)])
    return rec, autoscalers, recorder, clock


def test_the_sizing_reads_each_refill_sample_lengthened_by_the_slot_extra() -> None:
    """Autoscaler review #15: with a 5 s replenish delay and 0.3 s refills the load a slot
    carries is about 17 times the samples'. The observation the plan sizes on adds the
    settings' ``slot_extra`` to every sample; without it the samples are read as they are."""
    api = FakeScaleApi(replicas=3)
    rec, _, _, clock = setup_reconciler(api, autoscaler_obj())
    rec.windows.refills[f"{NS}/pool"] = collections.deque([(clock.now, 0.3), (clock.now, 0.5)])
    assert rec.observe(NS, "pool", 3).refill_seconds == [0.3, 0.5]
    rec.settings = Settings(sync_period=2.0, slot_extra=5.0)
    assert rec.observe(NS, "pool", 3).refill_seconds == pytest.approx([5.3, 5.5])


def refresh(informer: FakeInformer, api: FakeScaleApi) -> None:
    """The cache catches up with the API (our status writes)."""
    assert api.autoscaler is not None
    informer.put(copy.deepcopy(api.autoscaler))


# ------------------------------------------------------------------------------ the writes
async def test_a_scale_write_tests_the_replicas_read_not_the_resource_version() -> None:
    """Autoscaler review #12: the precondition is field-level, a JSON patch of /scale that
    tests spec.replicas against the value read, then replaces it."""
    api = FakeScaleApi(replicas=2)
    writer = ScaleWriter(api)
    read = await writer.read_scale(SANDBOX_WARM_POOLS, NS, "pool")
    assert read == Scale(2, api.pool["rv"])
    assert await writer.write_scale(SANDBOX_WARM_POOLS, NS, "pool", 5, read) == SCALED
    ((verb, path, body),) = api.writes()
    assert (verb, path) == ("patch", "sandboxwarmpools/pool/scale")
    assert body == [
        {"op": "test", "path": "/spec/replicas", "value": 2},
        {"op": "replace", "path": "/spec/replicas", "value": 5},
    ]
    assert api.pool["spec"]["replicas"] == 5


async def test_a_pool_status_write_between_the_read_and_the_scale_write_does_not_fail_it() -> None:
    """Autoscaler review #12: the pool controller writes the pool's status on every adoption
    (a new resourceVersion, the same spec.replicas); a scale write racing it goes through."""
    api = FakeScaleApi(replicas=2)
    writer = ScaleWriter(api)
    read = await writer.read_scale(SANDBOX_WARM_POOLS, NS, "pool")
    api.bump()  # the pool's status write
    assert await writer.write_scale(SANDBOX_WARM_POOLS, NS, "pool", 5, read) == SCALED
    assert api.pool["spec"]["replicas"] == 5


@pytest.mark.parametrize(("before", "other"), [(2, 8), (0, 2), (2, 0)])
async def test_another_writers_replicas_between_the_read_and_the_write_stop_it(
    before: int, other: int
) -> None:
    """Autoscaler review #12: another writer's spec.replicas (an HPA, kubectl scale) landing
    between the read and the write is a conflict (look again), never overwritten — also from
    or to 0, which a Scale leaves out of its JSON."""
    api = FakeScaleApi(replicas=before)
    writer = ScaleWriter(api)
    read = await writer.read_scale(SANDBOX_WARM_POOLS, NS, "pool")
    api.pool["spec"]["replicas"] = other
    api.bump()
    assert await writer.write_scale(SANDBOX_WARM_POOLS, NS, "pool", 5, read) == CONFLICT
    assert api.pool["spec"]["replicas"] == other


async def test_a_pool_at_0_is_scaled_up_and_down_to_0() -> None:
    api = FakeScaleApi(replicas=0)
    writer = ScaleWriter(api)
    read = await writer.read_scale(SANDBOX_WARM_POOLS, NS, "pool")
    assert read.replicas == 0
    api.bump()
    assert await writer.write_scale(SANDBOX_WARM_POOLS, NS, "pool", 3, read) == SCALED
    assert api.pool["spec"]["replicas"] == 3
    read = await writer.read_scale(SANDBOX_WARM_POOLS, NS, "pool")
    assert await writer.write_scale(SANDBOX_WARM_POOLS, NS, "pool", 0, read) == SCALED
    assert api.pool["spec"]["replicas"] == 0


async def test_a_409_on_the_scale_write_is_a_conflict_not_an_error_and_nothing_changes() -> None:
    api = FakeScaleApi(replicas=2)
    writer = ScaleWriter(api)
    read = await writer.read_scale(SANDBOX_WARM_POOLS, NS, "pool")
    api.conflict_next_scale = True
    assert await writer.write_scale(SANDBOX_WARM_POOLS, NS, "pool", 5, read) == CONFLICT
    assert api.pool["spec"]["replicas"] == 2


async def test_a_422_other_than_a_failed_test_is_raised_not_taken_for_a_conflict() -> None:
    """A scale the API refuses on validation is an error to report, not a race to retry."""
    api = FakeScaleApi(replicas=2)
    writer = ScaleWriter(api)
    read = await writer.read_scale(SANDBOX_WARM_POOLS, NS, "pool")

    async def refuse(*_: Any, **__: Any) -> Any:
        raise Invalid(
            422, "Invalid", 'SandboxWarmPool.extensions.agents.x-k8s.io "pool" is invalid'
        )

    api.patch = refuse  # type: ignore[method-assign]
    with pytest.raises(Invalid):
        await writer.write_scale(SANDBOX_WARM_POOLS, NS, "pool", 5, read)


async def test_a_missing_target_is_failed_get_scale() -> None:
    writer = ScaleWriter(FakeScaleApi())
    with pytest.raises(TargetError) as err:
        await writer.read_scale(SANDBOX_WARM_POOLS, NS, "nope")
    assert err.value.reason == "FailedGetScale"


async def test_resolve_finds_other_kinds_by_discovery_and_requires_scale() -> None:
    api = FakeScaleApi()
    api.discovery["/apis/example.com/v1"] = {
        "resources": [
            {"name": "widgets", "kind": "Widget", "namespaced": True},
            {"name": "widgets/scale", "kind": "Scale"},
            {"name": "gadgets", "kind": "Gadget", "namespaced": True},
        ]
    }
    writer = ScaleWriter(api)
    pool = await writer.resolve(POOL_API, "SandboxWarmPool")
    assert pool.plural == "sandboxwarmpools" and not api.calls  # ours: no discovery
    widget = await writer.resolve("example.com/v1", "Widget")
    assert (widget.group, widget.version, widget.plural) == ("example.com", "v1", "widgets")
    with pytest.raises(TargetError, match="no /scale"):
        await writer.resolve("example.com/v1", "Gadget")
    with pytest.raises(TargetError, match="not served"):
        await writer.resolve("nothing.example.com/v1", "Widget")


# ------------------------------------------------------------------------------ the rule
def test_a_new_autoscaler_takes_the_target_over() -> None:
    v = arbitrate(1, Ownership(), "SandboxWarmPool/pool", current=2, desired=5)
    assert v.write == 5 and v.ownership.ours == {2, 5} and v.able[0] == "True"


def test_ours_is_written_and_the_other_writers_value_is_not_fought() -> None:
    own = Ownership(1, frozenset({5}))
    assert arbitrate(1, own, "p", current=5, desired=7).write == 7
    other = arbitrate(1, own, "p", current=9, desired=7)  # someone set 9
    assert other.write is None and other.ownership.conflict == 9
    assert other.able[:2] == ("False", REASON_CONFLICTING_WRITER)
    assert [e[:2] for e in other.events] == [("Warning", "ConflictingWriter")]
    # it stays back, without repeating the Warning, while the other value stands
    again = arbitrate(1, other.ownership, "p", current=9, desired=4)
    assert again.write is None and again.events == ()
    # the other writer moves again: one more Warning
    moved = arbitrate(1, again.ownership, "p", current=8, desired=4)
    assert moved.write is None and [e[1] for e in moved.events] == ["ConflictingWriter"]
    # the target is ours again: resumed, and the recommendation is written
    back = arbitrate(1, moved.ownership, "p", current=5, desired=4)
    assert back.write == 4 and [e[1] for e in back.events] == ["ScalingResumed"]
    # or the spec changed: taken over at once
    edited = arbitrate(2, moved.ownership, "p", current=8, desired=4)
    assert edited.write == 4 and edited.ownership.conflict is None


def test_a_value_equal_to_the_recommendation_is_no_conflict() -> None:
    v = arbitrate(1, Ownership(1, frozenset({5})), "p", current=6, desired=6)
    assert v.write is None and v.ownership.conflict is None and v.ownership.ours == {6}


def test_ownership_survives_a_restart_through_the_status() -> None:
    status = {
        "observedGeneration": 3,
        "lastScaledReplicas": 4,
        "desiredReplicas": 6,
        "currentReplicas": 9,
        "conditions": [{"type": "AbleToScale", "status": "False", "reason": "ConflictingWriter"}],
    }
    own = Ownership.from_status(3, status)
    assert own == Ownership(3, frozenset({4, 6}), 9)
    assert arbitrate(3, own, "p", current=9, desired=6).write is None


# ------------------------------------------------------------------------------ a whole pass
async def test_a_pass_writes_scale_then_status_with_preconditions() -> None:
    api = FakeScaleApi(replicas=1)
    rec, informer, recorder, _ = setup_reconciler(api, autoscaler_obj())
    result = await rec.reconcile(Request(NS, "auto"))
    assert result is not None and result.requeue_after == 2.0
    paths = [(verb, path) for verb, path, _ in api.writes()]
    # the recommendation (the minimum, 3: no claims) is announced, written, then recorded
    assert paths == [
        ("patch", "sandboxwarmpoolautoscalers/auto/status"),
        ("patch", "sandboxwarmpools/pool/scale"),
        ("patch", "sandboxwarmpoolautoscalers/auto/status"),
    ]
    first, scale, second = (body for _, _, body in api.writes())
    assert first["metadata"] == {"resourceVersion": "1"}
    assert first["status"]["desiredReplicas"] == 3
    assert scale == [
        {"op": "test", "path": "/spec/replicas", "value": 1},
        {"op": "replace", "path": "/spec/replicas", "value": 3},
    ]
    # the second status write is conditioned on the answer to the first (the cache lags)
    assert second["metadata"]["resourceVersion"] != "1"
    status = api.autoscaler["status"]  # type: ignore[index]
    assert status["lastScaledReplicas"] == 3 and status["currentReplicas"] == 3
    assert status["lastScale"]["fromReplicas"] == 1 and status["lastScale"]["toReplicas"] == 3
    assert status["lastScale"]["reason"] and status["lastScale"]["message"]
    assert api.pool["spec"]["replicas"] == 3
    assert [e[1] for e in recorder.events] == ["SuccessfulRescale"]
    # the next pass reports the new state (AtMinimum, ReadyForNewScale); then nothing changes,
    # and nothing is written
    for _ in range(2):
        refresh(informer, api)
        before = len(api.writes())
        await rec.reconcile(Request(NS, "auto"))
    assert len(api.writes()) == before


async def test_a_409_on_scale_looks_again_within_a_second_and_records_no_scale() -> None:
    api = FakeScaleApi(replicas=1)
    rec, informer, recorder, _ = setup_reconciler(api, autoscaler_obj())
    api.conflict_next_scale = True
    result = await rec.reconcile(Request(NS, "auto"))
    assert result is not None and result.requeue_after == 1.0
    assert api.pool["spec"]["replicas"] == 1
    assert "lastScaledReplicas" not in (api.autoscaler or {}).get("status", {})
    assert recorder.events == []
    refresh(informer, api)
    await rec.reconcile(Request(NS, "auto"))  # the next pass: the write goes through
    assert api.pool["spec"]["replicas"] == 3


async def test_a_pool_status_write_during_a_pass_does_not_cost_the_scale_write() -> None:
    """Autoscaler review #12: during a burst the pool controller writes the pool's status on
    every adoption; one landing between the pass's read and its scale write no longer turns
    the write into a conflict and a 1 s requeue."""
    api = FakeScaleApi(replicas=1)
    rec, _, recorder, _ = setup_reconciler(api, autoscaler_obj())
    api.before_scale_write = api.bump  # the pool's status write
    result = await rec.reconcile(Request(NS, "auto"))
    assert api.pool["spec"]["replicas"] == 3
    assert result is not None and result.requeue_after == 2.0
    assert [e[1] for e in recorder.events] == ["SuccessfulRescale"]


async def test_another_writer_during_a_pass_stops_the_write_and_is_reported_next() -> None:
    """Autoscaler review #12: another writer's replicas landing between the pass's read and its
    scale write are not overwritten; the pass looks again within a second and reports it."""
    api = FakeScaleApi(replicas=1)
    rec, informer, recorder, clock = setup_reconciler(api, autoscaler_obj())

    def other_writer() -> None:
        api.before_scale_write = None
        api.pool["spec"]["replicas"] = 8
        api.bump()

    api.before_scale_write = other_writer
    result = await rec.reconcile(Request(NS, "auto"))
    assert result is not None and result.requeue_after == 1.0
    assert api.pool["spec"]["replicas"] == 8 and recorder.events == []
    refresh(informer, api)
    clock.now += 1
    await rec.reconcile(Request(NS, "auto"))
    assert api.pool["spec"]["replicas"] == 8
    assert [e[:2] for e in recorder.events] == [("Warning", "ConflictingWriter")]


async def test_another_writer_is_reported_and_not_fought() -> None:
    api = FakeScaleApi(replicas=3)
    rec, informer, recorder, clock = setup_reconciler(api, autoscaler_obj())
    await rec.reconcile(Request(NS, "auto"))  # 3 is already the recommendation: no write
    assert not [c for c in api.writes() if c[1].endswith("/scale")]
    refresh(informer, api)
    api.pool["spec"]["replicas"] = 8  # an HPA, GitOps, kubectl scale
    api.bump()
    clock.now += 10
    await rec.reconcile(Request(NS, "auto"))
    assert api.pool["spec"]["replicas"] == 8
    assert not [c for c in api.writes() if c[1].endswith("/scale")]
    status = api.autoscaler["status"]  # type: ignore[index]
    able = next(c for c in status["conditions"] if c["type"] == "AbleToScale")
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (able["status"], able["reason"]) == ("False", "ConflictingWriter")
    assert (ready["status"], ready["reason"]) == ("False", "ConflictingWriter")
    assert "8" in able["message"] and "3" in able["message"]
    assert [e[:2] for e in recorder.events] == [("Warning", "ConflictingWriter")]
    # later passes stay back, quietly
    refresh(informer, api)
    clock.now += 10
    await rec.reconcile(Request(NS, "auto"))
    assert api.pool["spec"]["replicas"] == 8 and len(recorder.events) == 1
    # a spec change takes the target over again
    edited = copy.deepcopy(api.autoscaler)
    assert edited is not None
    edited["metadata"]["generation"] = 2
    edited["spec"]["maxReplicas"] = 9
    api.autoscaler = edited
    informer.put(copy.deepcopy(edited))
    clock.now += 10
    await rec.reconcile(Request(NS, "auto"))
    assert api.pool["spec"]["replicas"] == 3
    assert [e[1] for e in recorder.events] == ["ConflictingWriter", "SuccessfulRescale"]


async def test_two_autoscalers_of_one_pool_both_stand_back_until_one_is_left() -> None:
    """As an HPA with an ambiguous selector: neither writes /scale while two target the pool;
    each reports AmbiguousTarget (one Warning Event, not one per pass); deleting the other lets
    the last one scale again on its next pass."""
    api = FakeScaleApi(replicas=1)
    rec, informer, recorder, clock = setup_reconciler(api, autoscaler_obj())
    rival = autoscaler_obj()
    rival["metadata"].update(name="rival", uid="r-uid")
    informer.put(rival)
    for _ in range(2):
        await rec.reconcile(Request(NS, "auto"))
        refresh(informer, api)
        clock.now += 5
    assert api.pool["spec"]["replicas"] == 1
    assert not [c for c in api.writes() if c[1].endswith("/scale")]
    status = api.autoscaler["status"]  # type: ignore[index]
    for type_ in ("Ready", "AbleToScale", "ScalingActive"):
        cond = next(c for c in status["conditions"] if c["type"] == type_)
        assert (cond["status"], cond["reason"]) == ("False", "AmbiguousTarget"), cond
    assert "auto, rival" in cond["message"]
    assert [e[:2] for e in recorder.events] == [("Warning", "AmbiguousTarget")]
    # a rival being deleted no longer counts; gone, the last one scales
    rival["metadata"]["deletionTimestamp"] = "2027-01-01T00:00:00Z"
    informer.put(rival)
    await rec.reconcile(Request(NS, "auto"))
    assert api.pool["spec"]["replicas"] == 3
    assert [e[1] for e in recorder.events] == ["AmbiguousTarget", "SuccessfulRescale"]


async def test_a_deleted_autoscaler_writes_nothing() -> None:
    api = FakeScaleApi(replicas=2)
    rec, informer, _, _ = setup_reconciler(api, autoscaler_obj())
    informer.remove(copy.deepcopy(api.autoscaler))  # type: ignore[arg-type]
    assert await rec.reconcile(Request(NS, "auto")) is None
    assert api.calls == []


# ------------------------------------------------------------------------------ observe
def test_which_claims_count_for_which_pool() -> None:
    def claim(**spec: Any) -> dict[str, Any]:
        return {"metadata": {"namespace": NS, "name": "c", "uid": "u"}, "spec": spec}

    assert claim_keys(claim(warmPoolRef={"name": "p"})) == [f"{NS}/pool/p"]
    assert claim_keys(claim(sandboxTemplateRef={"name": "t"})) == [f"{NS}/template/t"]
    assert claim_keys(claim(sandboxTemplateRef={"name": "t"}, warmpool="default")) == [
        f"{NS}/template/t"
    ]
    assert claim_keys(claim(sandboxTemplateRef={"name": "t"}, warmpool="p")) == [f"{NS}/pool/p"]
    assert claim_keys(claim(sandboxTemplateRef={"name": "t"}, warmpool="none")) == []
    env = [{"name": "A", "value": "1"}]
    assert claim_keys(claim(warmPoolRef={"name": "p"}, env=env)) == []  # always cold


def test_windows_time_arrivals_and_refills_and_forget_old_ones() -> None:
    clock = Clock()
    w = Windows(60.0, clock)
    created = "2027-01-15T08:00:00Z"
    from agentsandbox.api.timefmt import parse_rfc3339

    clock.now = parse_rfc3339(created).timestamp() + 0.4  # seen live: our own clock counts
    c = {
        "metadata": {"namespace": NS, "name": "c", "uid": "u1", "creationTimestamp": created},
        "spec": {"warmPoolRef": {"name": "p"}},
    }
    assert w.claim_added(c) == [f"{NS}/pool/p"]
    assert w.claim_added(c) == [f"{NS}/pool/p"]  # a relist: counted once
    assert w.arrivals_for([f"{NS}/pool/p"]) == [clock.now]
    owner = {
        "apiVersion": POOL_API,
        "kind": "SandboxWarmPool",
        "name": "p",
        "uid": "p",
        "controller": True,
    }
    sb = {
        "metadata": {
            "namespace": NS,
            "name": "s",
            "uid": "s1",
            "creationTimestamp": created,
            "ownerReferences": [owner],
        },
        "status": {},
    }
    w.sandbox_added(sb)
    clock.now += 0.7
    ready = copy.deepcopy(sb)
    ready["status"] = {
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": created}]
    }
    assert w.sandbox_updated(sb, ready) == f"{NS}/p"
    assert w.refills_for(f"{NS}/p") == [pytest.approx(0.7)]
    clock.now += 61
    assert w.arrivals_for([f"{NS}/pool/p"]) == [] and w.refills_for(f"{NS}/p") == []


def test_arrivals_stay_bounded_for_pools_no_autoscaler_reads() -> None:
    clock = Clock()
    w = Windows(10.0, clock)
    for i in range(100):
        clock.now += 1.0
        w.claim_added(
            {
                "metadata": {"namespace": NS, "name": f"c{i}", "uid": f"u{i}"},
                "spec": {"warmPoolRef": {"name": "p"}},
            }
        )
    assert 10 <= len(w.arrivals[f"{NS}/pool/p"]) <= 11


async def test_a_409_on_the_status_write_looks_again_within_a_second() -> None:
    api = FakeScaleApi(replicas=3)  # already the recommendation: only the status is written
    rec, _, _, _ = setup_reconciler(api, autoscaler_obj())
    assert api.autoscaler is not None
    api.autoscaler["metadata"]["resourceVersion"] = "99"  # changed since the cache saw it
    result = await rec.reconcile(Request(NS, "auto"))
    assert result is not None and result.requeue_after == 1.0
    assert [c[1] for c in api.writes()] == ["sandboxwarmpoolautoscalers/auto/status"]
    assert "status" not in api.autoscaler


async def test_an_autoscaler_being_deleted_writes_nothing() -> None:
    """An autoscaler with a deletionTimestamp (a finalizer of someone else's holds it) is left
    alone: no read of its target, no scale or status write."""
    api = FakeScaleApi(replicas=2)
    being_deleted = autoscaler_obj()
    being_deleted["metadata"]["deletionTimestamp"] = "2027-01-01T00:00:00Z"
    rec, _, recorder, _ = setup_reconciler(api, being_deleted)
    assert await rec.reconcile(Request(NS, "auto")) is None
    assert api.calls == [] and recorder.events == []
