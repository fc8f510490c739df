"""The claim controller's watches as ``setup`` wires them: which events re-queue which claims.

The controller is built by the real :func:`~agentsandbox.controllers.claim.controller.setup`
over fake informers (a host standing in for the manager), so the predicates and mappings checked
here are the ones the process runs with.
"""

from __future__ import annotations

import copy
from typing import Any

from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.controllers.claim.controller import setup
from agentsandbox.controllers.claim.handlers import ClaimWatches
from agentsandbox.kube.controller import Controller
from agentsandbox.kube.reconcile import Request
from agentsandbox.kube.resources import Resource
from tests.unit.controllers.claim.test_controller import (
    NS,
    TWO_HOURS_AGO,
    Harness,
    claim_v1alpha1,
    claim_v1beta1,
    pool,
    pool_sandbox,
    template,
)
from tests.unit.fakes import FakeApi, FakeInformer, FakeRecorder
from tests.unit.kube.controller_helpers import waiting


class Host:
    """Stands in for the manager: one fake informer per resource, a fake API and recorder."""

    def __init__(self) -> None:
        self.client = FakeApi()
        self.informers: dict[Resource, FakeInformer] = {}
        self.added: list[Controller] = []

    def get_informer(self, resource: Resource, *_: Any, **__: Any) -> FakeInformer:
        return self.informers.setdefault(resource, FakeInformer())

    def add(self, runnable: Controller) -> None:
        self.added.append(runnable)

    def event_recorder(self, _name: str) -> FakeRecorder:
        return FakeRecorder()


def wired() -> tuple[Host, Controller]:
    """The claim controller from ``setup``, its handlers attached, its queue empty."""
    host = Host()
    controller = setup(host)  # type: ignore[arg-type]
    controller._started = True
    for watch in controller._watches:
        controller._attach(watch)
    return host, controller


def _put(host: Host, resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
    stored = copy.deepcopy(obj)
    meta = stored["metadata"]
    meta.setdefault("namespace", NS)
    meta.setdefault("uid", f"uid-{resource.plural}-{meta['name']}")
    meta.setdefault("generation", 1)
    meta["resourceVersion"] = str(int(meta.get("resourceVersion", "0")) + 1)
    host.informers[resource].put(stored)
    return stored


def expired_unbound_claim(name: str) -> dict[str, Any]:
    """A Retain claim whose expiry has been written and whose sandbox is gone."""
    c = claim_v1beta1(name, lifecycle={"shutdownTime": TWO_HOURS_AGO, "shutdownPolicy": "Retain"})
    c["status"] = {
        "sandbox": {"name": ""},
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "ClaimExpired",
                "message": "Claim expired. Sandbox cleanup initiated.",
                "lastTransitionTime": "2027-01-15T06:00:01Z",
            }
        ],
    }
    return c


# ------------------------------------------------------------------------------------ pools
def test_a_pool_status_only_update_enqueues_no_claim() -> None:
    """claim review #5: a pool's status writes (every adoption, every refill step) must not
    re-queue the claims naming it; a spec change (new generation) still does."""
    host, controller = wired()
    _put(host, SANDBOX_CLAIMS, claim_v1beta1("waiting"))
    p = _put(host, SANDBOX_WARM_POOLS, pool())
    waiting(controller)
    status_write = copy.deepcopy(p)
    status_write["status"] = {"replicas": 2, "readyReplicas": 1}
    status_write = _put(host, SANDBOX_WARM_POOLS, status_write)
    assert waiting(controller) == set(), "a pool status write re-queued its claims"
    spec_change = copy.deepcopy(status_write)
    spec_change["spec"]["replicas"] = 5
    spec_change["metadata"]["generation"] = 2
    _put(host, SANDBOX_WARM_POOLS, spec_change)
    assert waiting(controller) == {Request(NS, "waiting")}


def test_claims_for_pool_leaves_out_an_expired_claim() -> None:
    """claim review #5: an expired claim waits for nothing from its pool; only live claims
    without a sandbox are re-queued by pool events."""
    host, controller = wired()
    _put(host, SANDBOX_CLAIMS, claim_v1beta1("waiting"))
    _put(host, SANDBOX_CLAIMS, expired_unbound_claim("expired"))
    p = _put(host, SANDBOX_WARM_POOLS, pool())
    mapped = {str(r) for r in controller_mapping(controller, p)}
    assert mapped == {f"{NS}/waiting"}


def controller_mapping(controller: Controller, p: dict[str, Any]) -> list[Request]:
    """What the pool watch's mapping returns for ``p``."""
    for watch in controller._watches:
        if getattr(watch.mapper, "__name__", "") == "claims_for_pool":
            return list(watch.mapper(p))
    raise AssertionError("no pool watch")


async def test_an_idle_pass_of_an_expired_retain_claim_makes_no_api_call() -> None:
    """claim review #5: once an expired Retain claim's sandbox is gone from the cache, a pass
    (e.g. woken by an unrelated event) reads nothing from the API: a sandbox that appears later
    re-queues the claim through the sandbox watch."""
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template())
    c = claim_v1alpha1(
        warmpool="none", lifecycle={"shutdownTime": TWO_HOURS_AGO, "shutdownPolicy": "Retain"}
    )
    h.add(SANDBOX_CLAIMS.plural, c)
    for _ in range(3):  # expiry written, then the (absent) sandbox retired
        await h.reconcile()
        h.sync()
    assert h.ready()["reason"] == "ClaimExpired"
    h.api.calls.clear()
    assert await h.reconcile() is None
    assert h.api.calls == [], "an idle expired claim still reads from the API"


# ------------------------------------------------------------------------------------ sandboxes
def _owned_sandbox(claim: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {
            "name": "sb",
            "namespace": NS,
            "labels": {"team": "a"},
            "ownerReferences": [
                {
                    "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                    "kind": "SandboxClaim",
                    "name": claim["metadata"]["name"],
                    "uid": claim["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {"replicas": 1},
        "status": {
            "podIPs": ["10.0.0.1"],
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "DependenciesNotReady"},
                {"type": "Suspended", "status": "False", "reason": "Running"},
            ],
        },
    }


def _changed(sb: dict[str, Any], change: Any) -> dict[str, Any]:
    new = copy.deepcopy(sb)
    change(new)
    return new


def _condition(sb: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in sb["status"]["conditions"] if c["type"] == kind)


def test_only_sandbox_changes_a_claim_reads_re_queue_its_claim() -> None:
    """claim review note 15: the claim reads an owned Sandbox's Ready and Finished conditions,
    pod IPs, deletion and owner; a write that changes none of them (labels, annotations,
    spec, another condition) re-queues nothing. Creates and deletes always do."""
    host, controller = wired()
    c = _put(host, SANDBOX_CLAIMS, claim_v1beta1("mine"))
    sb = _put(host, SANDBOXES, _owned_sandbox(c))
    assert waiting(controller) == {Request(NS, "mine")}, "a create re-queues the claim"
    quiet = {
        "labels": lambda s: s["metadata"]["labels"].update(team="b"),
        "annotations": lambda s: s["metadata"].setdefault("annotations", {}).update(a="1"),
        "spec": lambda s: s["spec"].update(replicas=0),
        "generation": lambda s: s["metadata"].update(generation=7),
        "another condition": lambda s: _condition(s, "Suspended").update(status="True"),
    }
    for what, change in quiet.items():
        sb = _put(host, SANDBOXES, _changed(sb, change))
        assert waiting(controller) == set(), f"a {what} change re-queued the claim"
    loud = {
        "Ready": lambda s: _condition(s, "Ready").update(status="True", reason="Ready"),
        "Ready message": lambda s: _condition(s, "Ready").update(message="expired"),
        "Finished": lambda s: s["status"]["conditions"].append(
            {"type": "Finished", "status": "True", "reason": "PodSucceeded"}
        ),
        "podIPs": lambda s: s["status"].update(podIPs=["10.0.0.2"]),
        "deletion": lambda s: s["metadata"].update(deletionTimestamp="2027-01-01T00:00:00Z"),
        "owner": lambda s: s["metadata"].update(ownerReferences=[]),
    }
    for what, change in loud.items():
        sb = _put(host, SANDBOXES, _changed(sb, change))
        assert waiting(controller) == {Request(NS, "mine")}, f"a {what} change was dropped"
        if what == "owner":  # released: the claim lost it; give it back for the delete below
            sb = _put(host, SANDBOXES, _owned_sandbox(c) | {"status": sb["status"]})
            waiting(controller)
    host.informers[SANDBOXES].remove(sb)
    assert waiting(controller) == {Request(NS, "mine")}, "a delete re-queues the claim"


# ------------------------------------------------------------------------------------ templates
class ListCountingInformer(FakeInformer):
    """A fake informer that counts full scans of its cache."""

    def __init__(self) -> None:
        super().__init__()
        self.scans = 0

    def list(self) -> list[dict[str, Any]]:
        self.scans += 1
        return super().list()


def test_a_template_coming_back_requeues_its_pools_members_without_scanning_every_sandbox() -> None:
    """claim review note 15: when a template (re)appears, its pools' adoptable sandboxes go back
    on the warm queue, found through the pools' owner index, not a scan of every sandbox."""
    api = FakeApi()
    scanning, pools, templates = ListCountingInformer(), FakeInformer(), FakeInformer()
    watches = ClaimWatches(FakeInformer(), scanning, pools, templates)  # type: ignore[arg-type]

    def seeded(informer: FakeInformer, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        stored = api.seed(plural, obj)
        informer.put(stored)
        return stored

    t = seeded(templates, SANDBOX_TEMPLATES.plural, template())
    other_tpl = seeded(templates, SANDBOX_TEMPLATES.plural, template("other-tpl"))
    p = seeded(pools, SANDBOX_WARM_POOLS.plural, pool())
    other = seeded(pools, SANDBOX_WARM_POOLS.plural, pool("other", tpl="other-tpl"))
    members = [seeded(scanning, SANDBOXES.plural, pool_sandbox(p, t)) for _ in range(2)]
    for _ in range(50):
        seeded(scanning, SANDBOXES.plural, pool_sandbox(other, other_tpl))
    key = (NS, "pool")
    assert watches.queue.size(key) == 2
    templates.remove(t)
    assert watches.queue.size(key) == 0
    scanning.scans = 0
    templates.put(t)
    assert sorted(watches.queue.names(key)) == sorted(m["metadata"]["name"] for m in members)
    assert scanning.scans == 0, "a template add scanned every sandbox"


# ------------------------------------------------------------------------------------ freed names
def test_a_foreign_same_name_sandbox_deleted_re_queues_the_claim_waiting_for_its_name() -> None:
    """security review #9, the other half: a claim whose cold sandbox's name is held by
    someone else's Sandbox (being deleted) is retried with backoff; once that Sandbox is gone,
    its deletion re-queues the claim of that name at once, whatever the backoff has grown to.
    A foreign sandbox of another name, or one whose claim is already served, re-queues
    nothing."""
    host, controller = wired()
    _put(host, SANDBOX_CLAIMS, claim_v1beta1("x"))
    served = claim_v1beta1("served")
    served["status"] = {"sandbox": {"name": "served"}}
    _put(host, SANDBOX_CLAIMS, served)
    waiting(controller)
    foreign = {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": "x", "deletionTimestamp": "2027-01-01T00:00:00Z"},
        "spec": {},
    }
    held = _put(host, SANDBOXES, foreign)
    other = _put(host, SANDBOXES, {**foreign, "metadata": {"name": "y"}})
    old = _put(host, SANDBOXES, {**foreign, "metadata": {"name": "served"}})
    waiting(controller)
    host.informers[SANDBOXES].remove(other)
    host.informers[SANDBOXES].remove(old)
    assert waiting(controller) == set(), "a deletion re-queued a claim not waiting for it"
    host.informers[SANDBOXES].remove(held)
    assert waiting(controller) == {Request(NS, "x")}, "the freed name re-queued no claim"
