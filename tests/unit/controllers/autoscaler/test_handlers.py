"""The autoscaler's event side without a cluster: the indexes, which claim and sandbox events
feed which window, and which autoscalers each event re-queues (fake informers, an injected
clock)."""

from __future__ import annotations

import copy
from typing import Any

from agentsandbox.api.timefmt import parse_rfc3339
from agentsandbox.controllers.autoscaler.handlers import (
    AutoscalerWatches,
    pool_template_index,
    target_index,
)
from agentsandbox.controllers.autoscaler.source import Windows
from agentsandbox.kube.reconcile import Request
from tests.unit.fakes import FakeInformer

NS = "ns"
POOL_API = "extensions.agents.x-k8s.io/v1beta1"
CREATED = "2027-01-15T08:00:00Z"
T0 = parse_rfc3339(CREATED).timestamp()


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def autoscaler(name: str, pool: str, api_version: str = POOL_API) -> dict[str, Any]:
    return {
        "metadata": {"namespace": NS, "name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": api_version, "kind": "SandboxWarmPool", "name": pool}
        },
    }


def pool(name: str, template: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": NS, "name": name},
        "spec": {"sandboxTemplateRef": {"name": template}},
    }


def claim(uid: str, created: str | None = CREATED, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": NS, "name": uid, "uid": uid}
    if created is not None:
        meta["creationTimestamp"] = created
    return {"metadata": meta, "spec": spec}


def pool_sandbox(
    uid: str,
    pool_name: str = "p",
    *,
    ready_at: str | None = None,
    created: str = CREATED,
    owner_api: str = POOL_API,
    owner_kind: str = "SandboxWarmPool",
) -> dict[str, Any]:
    sb: dict[str, Any] = {
        "metadata": {
            "namespace": NS,
            "name": uid,
            "uid": uid,
            "creationTimestamp": created,
            "ownerReferences": [
                {
                    "apiVersion": owner_api,
                    "kind": owner_kind,
                    "name": pool_name,
                    "uid": "pool-uid",
                    "controller": True,
                }
            ],
        },
        "status": {},
    }
    if ready_at is not None:
        sb["status"] = {
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ready_at}]
        }
    return sb


class Rig:
    def __init__(self) -> None:
        self.clock = Clock()
        self.windows = Windows(60.0, self.clock)
        self.autoscalers, self.claims = FakeInformer(), FakeInformer()
        self.sandboxes, self.pools = FakeInformer(), FakeInformer()
        self.watches = AutoscalerWatches(
            self.windows,
            self.autoscalers,  # type: ignore[arg-type]
            self.claims,  # type: ignore[arg-type]
            self.sandboxes,  # type: ignore[arg-type]
            self.pools,  # type: ignore[arg-type]
        )
        self.queued: list[Request] = []
        self.watches.enqueue = self.queued.append


# ------------------------------------------------------------------------------ indexes
def test_autoscalers_are_indexed_by_their_sandbox_warm_pool_target_only() -> None:
    assert target_index(autoscaler("a", "p")) == [f"{NS}/p"]
    assert target_index(autoscaler("a", "p", api_version="apps/v1")) == []
    assert target_index(autoscaler("a", "p", api_version="extensions.agents.x-k8s.io/v9")) == []
    assert target_index(autoscaler("a", "")) == []
    assert target_index({}) == []


def test_pools_are_indexed_by_their_template() -> None:
    assert pool_template_index(pool("p", "t")) == [f"{NS}/t"]
    assert pool_template_index({"metadata": {"name": "p"}, "spec": {}}) == []


# ------------------------------------------------------------------------------ mapping
def test_a_claim_on_a_pool_requeues_that_pools_autoscalers() -> None:
    r = Rig()
    r.autoscalers.put(autoscaler("a1", "p"))
    r.autoscalers.put(autoscaler("a2", "other"))
    r.claims.put(claim("c1", warmPoolRef={"name": "p"}))
    assert r.queued == [Request(NS, "a1")]
    assert r.windows.arrivals_for([f"{NS}/pool/p"]) == [T0]


def test_a_claim_on_a_template_requeues_the_autoscalers_of_every_pool_of_it() -> None:
    r = Rig()
    r.pools.put(pool("p1", "t"))
    r.pools.put(pool("p2", "t"))
    r.pools.put(pool("p3", "other"))
    for name, target in (("a1", "p1"), ("a2", "p2"), ("a3", "p3")):
        r.autoscalers.put(autoscaler(name, target))
    r.claims.put(claim("c1", sandboxTemplateRef={"name": "t"}))
    assert sorted(r.queued, key=str) == [Request(NS, "a1"), Request(NS, "a2")]


def test_a_cold_claim_or_one_before_setup_requeues_nothing() -> None:
    r = Rig()
    r.autoscalers.put(autoscaler("a1", "p"))
    r.claims.put(claim("c1", warmPoolRef={"name": "p"}, env=[{"name": "A", "value": "1"}]))
    assert r.queued == [] and r.windows.arrivals == {}
    r.watches.enqueue = None  # before setup() wires the queue: recorded, nothing queued
    r.claims.put(claim("c2", warmPoolRef={"name": "p"}))
    assert r.queued == [] and r.windows.arrivals_for([f"{NS}/pool/p"]) == [T0]


def test_a_pool_sandbox_becoming_ready_requeues_its_pools_autoscalers() -> None:
    r = Rig()
    r.autoscalers.put(autoscaler("a1", "p"))
    sb = pool_sandbox("s1")
    r.sandboxes.put(sb)  # not Ready yet: first sight, nothing to sample
    assert r.queued == []
    r.clock.now += 1.5
    r.sandboxes.put(pool_sandbox("s1", ready_at=CREATED))
    assert r.queued == [Request(NS, "a1")]
    assert r.windows.refills_for(f"{NS}/p") == [1.5]  # measured live on our clock
    r.sandboxes.put(pool_sandbox("s1", ready_at=CREATED))  # Ready to Ready: not a new sample
    assert r.queued == [Request(NS, "a1")]


def test_a_sandbox_of_no_pool_is_not_sampled() -> None:
    r = Rig()
    for sb in (
        pool_sandbox("s1", owner_kind="ReplicaSet", ready_at=CREATED),
        pool_sandbox("s2", owner_api="example.com/v1", ready_at=CREATED),
        {"metadata": {"namespace": NS, "name": "s3", "uid": "s3"}},
    ):
        r.sandboxes.put(sb)
        not_ready = copy.deepcopy(sb)
        not_ready["status"] = {}
        assert r.windows.sandbox_updated(not_ready, sb) is None
    assert r.windows.refills == {} and r.queued == []


# ------------------------------------------------------------------------------ windows
def test_a_sandbox_seen_ready_at_once_gives_no_sample() -> None:
    """A relist (or a restart) sees it Ready already: this process did not see it created, and
    its Ready condition's lastTransitionTime (the sandbox controller's clock) and its
    creationTimestamp (the API server's) are not on one clock: no sample."""
    r = Rig()
    r.clock.now = T0 + 30
    r.windows.sandbox_added(pool_sandbox("s1", ready_at="2027-01-15T08:00:04Z"))
    assert r.windows.refills_for(f"{NS}/p") == []


def test_a_sample_out_of_the_window_is_dropped_and_timestamps_do_not_matter() -> None:
    r = Rig()
    r.sandboxes.put(pool_sandbox("s1", created="not a time"))  # seen live: our clock counts
    r.clock.now += 2.0
    r.sandboxes.put(pool_sandbox("s1", created="not a time", ready_at="2027-01-15T07:59:00Z"))
    assert r.windows.refills_for(f"{NS}/p") == [2.0]
    r.clock.now += 60.5  # the window is 60 s
    assert r.windows.refills_for(f"{NS}/p") == []


def test_a_deleted_sandbox_is_forgotten_and_a_first_sight_by_a_list_is_not_live() -> None:
    r = Rig()
    r.clock.now = T0 + 10  # first seen by a list 10 s after its creation (we were down)
    r.sandboxes.listing = True
    r.sandboxes.put(pool_sandbox("s1"))
    r.sandboxes.listing = False
    r.clock.now = T0 + 12
    r.sandboxes.put(pool_sandbox("s1", ready_at="2027-01-15T08:00:11Z"))
    assert r.windows.refills_for(f"{NS}/p") == []  # not measured: its creation was not seen
    r.sandboxes.remove(pool_sandbox("s1"))
    assert "s1" not in r.windows._sampled and "s1" not in r.windows._first_seen


def test_claims_older_than_the_window_are_not_arrivals() -> None:
    """A claim shown by a (re)list is timed by its creationTimestamp: older than the window,
    it is no arrival. One seen by the watch, or with no usable timestamp, is timed now."""
    r = Rig()
    r.clock.now = T0 + 120
    assert r.windows.claim_added(claim("c1", warmPoolRef={"name": "p"}), listed=True) == []
    r.windows.claim_added(claim("c2", created=None, warmPoolRef={"name": "p"}))
    r.windows.claim_added(claim("c3", created="garbage", warmPoolRef={"name": "p"}))
    assert r.windows.arrivals_for([f"{NS}/pool/p", f"{NS}/pool/none"]) == [T0 + 120] * 2
