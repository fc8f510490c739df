"""The SandboxClaim controller: lookup, adoption, queue and status (docs/design/claim.md), through
an in-memory API that enforces resourceVersion and UID preconditions like the real one.

The scenarios are upstream 35b9757f's ``sandboxclaim_controller_test.go``; where a later upstream
change or one of ours changes a scenario the docstring says so (docs/design/claim.md, "Differences
from upstream 35b9757f, at a glance", keeps the table): Ready candidates preferred, orphans never
adoptable, cache-lag adoption finished in the same pass, forwarded Ready carries the claim's
generation, env forces a cold start.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.defaults import apply_sandbox_secure_defaults
from agentsandbox.api.hashing import name_hash, pod_template_hash
from agentsandbox.api.kinds import SANDBOX, SANDBOX_CLAIM, SANDBOX_TEMPLATE, SANDBOX_WARM_POOL
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.controllers.claim.act import ClaimProvider
from agentsandbox.controllers.claim.controller import (
    MISSING_RECHECK,
    ClaimReconciler,
    RetryLater,
)
from agentsandbox.controllers.claim.handlers import ClaimWatches
from agentsandbox.controllers.claim.warm_index import WarmQueue
from agentsandbox.kube.reconcile import Request, Result
from tests.unit.fakes import FakeApi, FakeInformer, FakeRecorder

NS = "default"
_n = itertools.count()


# ------------------------------------------------------------------------------------ objects
def template(name: str = "tpl", image: str = "img", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_TEMPLATE.api_version,
        "kind": "SandboxTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "podTemplate": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "main", "image": image}]},
            },
            **spec,
        },
    }


def pool(name: str = "pool", tpl: str = "tpl", ns: str = NS, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_WARM_POOL.api_version,
        "kind": "SandboxWarmPool",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": 2, "sandboxTemplateRef": {"name": tpl}, **spec},
    }


def pool_sandbox(
    p: dict[str, Any],
    t: dict[str, Any],
    *,
    ready: bool = True,
    owner: str = "pool",
    image: str | None = None,
) -> dict[str, Any]:
    """A sandbox as a warm pool makes it (owner: "pool", "orphan" or "replicaset")."""
    n = next(_n)
    ptpl = copy.deepcopy(t["spec"]["podTemplate"])
    if image is not None:
        ptpl["spec"]["containers"][0]["image"] = image
    labels = {
        keys.LABEL_WARM_POOL_SANDBOX: name_hash(p["metadata"]["name"]),
        keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash(t["metadata"]["name"]),
        keys.LABEL_SANDBOX_POD_TEMPLATE_HASH: pod_template_hash(t["spec"]["podTemplate"]),
    }
    meta: dict[str, Any] = {
        "name": f"{p['metadata']['name']}-{n:05d}",
        "namespace": p["metadata"]["namespace"],
        "labels": dict(labels),
        "annotations": {keys.ANNOTATION_SANDBOX_TEMPLATE_REF: t["metadata"]["name"]},
        "creationTimestamp": f"2026-01-01T00:{n // 60 % 60:02d}:{n % 60:02d}Z",
    }
    if owner == "pool":
        meta["ownerReferences"] = [
            {
                "apiVersion": SANDBOX_WARM_POOL.api_version,
                "kind": "SandboxWarmPool",
                "name": p["metadata"]["name"],
                "uid": p["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    elif owner == "replicaset":
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "rs",
                "uid": "rs-uid",
                "controller": True,
            }
        ]
    return {
        "apiVersion": SANDBOX.api_version,
        "kind": "Sandbox",
        "metadata": meta,
        "spec": {
            "replicas": 1,
            "podTemplate": {
                "metadata": {
                    "labels": {**(ptpl.get("metadata") or {}).get("labels", {}), **labels}
                },
                "spec": apply_sandbox_secure_defaults(t, ptpl["spec"]),
            },
        },
        "status": {
            "podIPs": [f"10.0.0.{n % 250}"],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "DependenciesReady" if ready else "DependenciesNotReady",
                    "message": "Pod is Ready" if ready else "Pod is not Ready",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "observedGeneration": 1,
                }
            ],
        },
    }


def claim_v1beta1(name: str = "claim", pool_name: str = "pool", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_CLAIM.api_version,
        "kind": "SandboxClaim",
        "metadata": {"name": name, "namespace": NS, "generation": 3},
        "spec": {"warmPoolRef": {"name": pool_name}, **spec},
    }


def claim_v1alpha1(
    name: str = "claim", tpl: str = "tpl", warmpool: str | None = None, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"sandboxTemplateRef": {"name": tpl}, **spec}
    if warmpool is not None:
        body["warmpool"] = warmpool
    return {
        "apiVersion": f"{SANDBOX_CLAIM.group}/v1alpha1",
        "kind": "SandboxClaim",
        "metadata": {"name": name, "namespace": NS, "generation": 1, "annotations": {}},
        "spec": body,
    }


# ------------------------------------------------------------------------------------ harness
PLURALS = {
    "networkpolicies": "policies",
    SANDBOX_CLAIMS.plural: "claims",
    SANDBOXES.plural: "sandboxes",
    SANDBOX_WARM_POOLS.plural: "pools",
    SANDBOX_TEMPLATES.plural: "templates",
}


class Harness:
    """A reconciler over fake informers and a fake API; ``sync`` plays the watches."""

    def __init__(self, api: FakeApi | None = None) -> None:
        self.api = api or FakeApi()
        self.claims, self.sandboxes = FakeInformer(), FakeInformer()
        self.pools, self.templates = FakeInformer(), FakeInformer()
        self.recorder = FakeRecorder()
        self.policies = FakeInformer()
        watches = ClaimWatches(
            self.claims,  # type: ignore[arg-type]
            self.sandboxes,  # type: ignore[arg-type]
            self.pools,  # type: ignore[arg-type]
            self.templates,  # type: ignore[arg-type]
        )
        self.r = ClaimReconciler(
            self.api,  # type: ignore[arg-type]
            self.claims,  # type: ignore[arg-type]
            self.sandboxes,  # type: ignore[arg-type]
            watches,
            clock=lambda: 1_800_000_000.0,
            networkpolicies=self.policies,  # type: ignore[arg-type]
            writer=ClaimProvider(
                self.api,  # type: ignore[arg-type]
                self.sandboxes,  # type: ignore[arg-type]
                self.pools,  # type: ignore[arg-type]
                self.templates,  # type: ignore[arg-type]
                watches,
                self.recorder,  # type: ignore[arg-type]
            ),
        )

    def informer(self, plural: str) -> FakeInformer:
        informer: FakeInformer = getattr(self, PLURALS[plural])
        return informer

    def add(self, plural: str, obj: dict[str, Any], cache: bool = True) -> dict[str, Any]:
        stored = self.api.seed(plural, obj)
        if cache:
            self.informer(plural).put(stored)
        return stored

    def sync(self, *plurals: str) -> None:
        """The caches catch up with the API (watch events for every change)."""
        for plural in plurals or tuple(PLURALS):
            informer = self.informer(plural)
            live = {
                (o["metadata"]["namespace"], o["metadata"]["name"]): o for o in self.api.all(plural)
            }
            for cached in informer.list():
                if (cached["metadata"]["namespace"], cached["metadata"]["name"]) not in live:
                    informer.remove(cached)
            for obj in live.values():
                cached = informer.get(obj["metadata"]["name"], obj["metadata"]["namespace"])
                if (
                    cached is None
                    or cached["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]
                ):
                    informer.put(obj)

    async def reconcile(self, name: str = "claim") -> Result | None:
        return await self.r.reconcile(Request(NS, name))

    def claim(self, name: str = "claim") -> dict[str, Any]:
        got = self.api.stored(SANDBOX_CLAIMS.plural, NS, name)
        assert got is not None
        return got

    def sandbox(self, name: str) -> dict[str, Any]:
        got = self.api.stored(SANDBOXES.plural, NS, name)
        assert got is not None
        return got

    def owned_by(self, claim: dict[str, Any]) -> list[dict[str, Any]]:
        uid = claim["metadata"]["uid"]
        return [
            sb
            for sb in self.api.all(SANDBOXES.plural)
            if any(
                r.get("uid") == uid and r.get("controller")
                for r in sb["metadata"].get("ownerReferences", [])
            )
        ]

    def ready(self, name: str = "claim") -> dict[str, Any]:
        conds = (self.claim(name).get("status") or {}).get("conditions") or []
        return next(c for c in conds if c["type"] == "Ready")


def setup_pool(
    h: Harness, *, members: int = 2, ready: bool = True, name: str = "pool", tpl: str = "tpl"
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    t = h.api.stored(SANDBOX_TEMPLATES.plural, NS, tpl) or h.add(
        SANDBOX_TEMPLATES.plural, template(tpl)
    )
    p = h.add(SANDBOX_WARM_POOLS.plural, pool(name, tpl))
    sbs = [h.add(SANDBOXES.plural, pool_sandbox(p, t, ready=ready)) for _ in range(members)]
    return t, p, sbs


# ------------------------------------------------------------------------------------ warm path
async def test_warm_claim_chooses_then_adopts_a_pool_sandbox_then_writes_its_status() -> None:
    """With --disable-claim-observability-annotations: one write each, in this order: the
    claim's choice (the annotation), the sandbox's adoption, the claim's status; then the
    first-Ready guard annotations."""
    h = Harness()
    h.r.observability_annotations = False
    _, _, sbs = setup_pool(h)
    c = h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    h.api.calls.clear()
    assert await h.reconcile() is None
    name = h.claim()["status"]["sandbox"]["name"]
    original = next(s for s in sbs if s["metadata"]["name"] == name)
    assert h.api.writes() == [
        ("patch", "sandboxclaims", "claim"),
        ("patch", "sandboxes", name),
        ("patch-status", "sandboxclaims", "claim"),
        ("patch", "sandboxclaims", "claim"),
    ]
    assert h.claim()["metadata"]["annotations"]["agents.x-k8s.io/sandbox-name"] == name
    sb = h.sandbox(name)
    meta = sb["metadata"]
    assert meta["ownerReferences"] == [
        {
            "apiVersion": SANDBOX_CLAIM.api_version,
            "kind": "SandboxClaim",
            "name": "claim",
            "uid": c["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert keys.LABEL_WARM_POOL_SANDBOX not in meta["labels"]
    assert keys.LABEL_SANDBOX_POD_TEMPLATE_HASH not in meta["labels"]
    assert meta["labels"][keys.LABEL_CLAIM_UID] == c["metadata"]["uid"]
    assert meta["labels"][keys.LABEL_LAUNCH_TYPE] == "warm"
    assert meta["labels"][keys.LABEL_SANDBOX_TEMPLATE_REF_HASH] == name_hash("tpl")
    assert meta["annotations"][keys.ANNOTATION_POD_NAME] == meta["name"]
    assert meta["annotations"][keys.ANNOTATION_SANDBOX_TEMPLATE_REF] == "tpl", "kept"
    pod_labels = sb["spec"]["podTemplate"]["metadata"]["labels"]
    assert pod_labels == {
        "app": "agent",
        keys.LABEL_CLAIM_UID: c["metadata"]["uid"],
        keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("tpl"),
    }
    assert sb["spec"]["podTemplate"]["spec"] == original["spec"]["podTemplate"]["spec"]
    status = h.claim()["status"]
    assert status["sandbox"] == {"name": meta["name"], "podIPs": original["status"]["podIPs"]}
    ready = h.ready()
    assert (ready["status"], ready["reason"], ready["observedGeneration"]) == (
        "True",
        "DependenciesReady",
        3,
    ), "the forwarded Ready carries the claim's generation (upstream #1317)"
    assert h.recorder.events == [
        ("Normal", "SandboxAdopted", f'Adopted warm pool Sandbox "{meta["name"]}"', "Adoption")
    ]


async def test_adoption_carries_the_vetted_resource_version_a_lost_race_takes_the_next() -> None:
    """Upstream 35b9757f: the first Sandbox patch returns Conflict ⇒ the second candidate is
    adopted. Here
    the Conflict is the apiserver enforcing our resourceVersion precondition."""
    h = Harness()
    _, _, sbs = setup_pool(h)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    touched: list[str] = []

    def another_claim_takes_it(verb: str, plural: str, name: str) -> None:
        if (verb, plural) == ("patch", "sandboxes") and not touched:
            touched.append(name)
            stored = h.api.objects[(plural, NS, name)]
            stored["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": SANDBOX_CLAIM.api_version,
                    "kind": "SandboxClaim",
                    "name": "other",
                    "uid": "other-uid",
                    "controller": True,
                }
            ]
            stored["metadata"]["resourceVersion"] = "999"  # changed since our cache saw it

    h.api.before = another_claim_takes_it
    await h.reconcile()
    (first,) = touched
    other = next(s["metadata"]["name"] for s in sbs if s["metadata"]["name"] != first)
    assert h.claim()["status"]["sandbox"]["name"] == other
    assert keys.LABEL_CLAIM_UID not in h.sandbox(first)["metadata"]["labels"]


async def test_races_lost_to_other_claims_do_not_count_towards_the_cold_fallback() -> None:
    """Two processes racing (leader election off): our cache is late and the first six
    candidates were already taken by other claims. Each lost race is not a failure, so the
    claim still adopts the seventh pool sandbox instead of going cold after five (found by the
    two-process integration test: a claim went cold while a pool sandbox stayed free)."""
    h = Harness()
    _, _, sbs = setup_pool(h, members=7)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    lost: list[str] = []

    def others_take_them(verb: str, plural: str, name: str) -> None:
        if verb == "patch" and plural == "sandboxes" and len(lost) < 6 and name not in lost:
            lost.append(name)
            stored = h.api.objects[(plural, NS, name)]
            stored["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": SANDBOX_CLAIM.api_version,
                    "kind": "SandboxClaim",
                    "name": f"other-{len(lost)}",
                    "uid": f"other-uid-{len(lost)}",
                    "controller": True,
                }
            ]
            stored["metadata"]["resourceVersion"] = "999"

    h.api.before = others_take_them
    await h.reconcile()
    assert len(lost) == 6
    (free,) = {s["metadata"]["name"] for s in sbs} - set(lost)
    assert h.claim()["status"]["sandbox"]["name"] == free
    assert not [c for c in h.api.calls if c[0] == "create" and c[1] == "sandboxes"]


async def test_a_conflict_from_a_mere_status_change_retries_the_same_sandbox() -> None:
    """The Sandbox controller wrote the candidate's status since our cache saw it: it is still a
    free pool sandbox, so it is adopted at its current version (not lost for every claim)."""
    h = Harness()
    setup_pool(h, members=1)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    touched: list[str] = []

    def status_moves(verb: str, plural: str, name: str) -> None:
        if verb == "patch" and plural == "sandboxes" and not touched:
            touched.append(name)
            h.api.objects[(plural, NS, name)]["metadata"]["resourceVersion"] = "999"

    h.api.before = status_moves
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == touched[0]
    assert [c for c in h.api.calls if c[0] == "patch" and c[1] == "sandboxes"] == [
        ("patch", "sandboxes", touched[0])
    ] * 2


async def test_a_lost_adoption_race_against_our_own_other_process_keeps_that_adoption() -> None:
    """Leader election off: another process adopted the same sandbox for the same claim. The
    409 is recognised (the sandbox is already this claim's), no second sandbox is taken."""
    h = Harness()
    setup_pool(h, members=2)
    c = h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    won: list[str] = []

    def other_process_adopts_it_first(verb: str, plural: str, name: str) -> None:
        if verb == "patch" and plural == "sandboxes" and not won:
            won.append(name)
            stored = h.api.objects[(plural, NS, name)]
            stored["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": SANDBOX_CLAIM.api_version,
                    "kind": "SandboxClaim",
                    "name": "claim",
                    "uid": c["metadata"]["uid"],
                    "controller": True,
                }
            ]
            stored["metadata"]["resourceVersion"] = "999"

    h.api.before = other_process_adopts_it_first
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == won[0]
    assert len(h.owned_by(h.claim())) == 1


async def test_ready_candidates_are_preferred_over_older_not_ready_ones() -> None:
    """Changed by upstream #878: upstream 35b9757f adopted in queue order regardless of
    readiness (docs/design/claim.md, "Candidates and the warm queue")."""
    h = Harness()
    t, p, not_ready = setup_pool(h, members=1, ready=False)
    ready = h.add(SANDBOXES.plural, pool_sandbox(p, t, ready=True))
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == ready["metadata"]["name"]
    assert (
        h.sandbox(not_ready[0]["metadata"]["name"])["metadata"]["ownerReferences"][0]["kind"]
        == "SandboxWarmPool"
    )


async def test_not_ready_candidate_with_pod_ips_is_adopted_when_no_ready_one_exists() -> None:
    """Without a Ready candidate the oldest not-Ready one is taken, if its pod has an IP (as
    upstream v1.0.1); one without never is (tests/unit/controllers/claim/test_candidates.py)."""
    h = Harness()
    _, _, sbs = setup_pool(h, members=2, ready=False)
    assert all(sb["status"]["podIPs"] for sb in sbs)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == sbs[0]["metadata"]["name"]
    assert h.ready()["reason"] == "DependenciesNotReady"


@pytest.mark.parametrize("kind", ["orphan", "replicaset", "deleting"])
async def test_ineligible_sandboxes_with_pool_labels_are_never_adopted(kind: str) -> None:
    """Orphans are never adoptable (upstream #875: upstream 35b9757f adopted them); another
    controller's or a terminating sandbox neither. The claim goes cold (docs/design/claim.md,
    "Candidates and the warm queue")."""
    h = Harness()
    t = h.add(SANDBOX_TEMPLATES.plural, template())
    p = h.add(SANDBOX_WARM_POOLS.plural, pool())
    sb = pool_sandbox(p, t, owner="pool" if kind == "deleting" else kind)
    if kind == "deleting":
        sb["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    sb = h.add(SANDBOXES.plural, sb)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == "claim"
    assert keys.LABEL_CLAIM_UID not in h.sandbox(sb["metadata"]["name"])["metadata"]["labels"]


async def test_a_sandbox_whose_owner_reference_names_the_pool_with_another_uid_is_not_adopted() -> (
    None
):
    """Never adopt because labels (or a hand-written owner reference) say so: the controller
    reference must carry the pool's UID."""
    h = Harness()
    t = h.add(SANDBOX_TEMPLATES.plural, template())
    p = h.add(SANDBOX_WARM_POOLS.plural, pool())
    forged = pool_sandbox({**p, "metadata": {**p["metadata"], "uid": "forged"}}, t)
    forged = h.add(SANDBOXES.plural, forged)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == "claim"
    assert keys.LABEL_CLAIM_UID not in h.sandbox(forged["metadata"]["name"])["metadata"]["labels"]


async def test_stale_sandbox_of_a_recreate_pool_is_not_handed_out() -> None:
    """Upstream #1078: under Recreate a stale sandbox is about to be replaced
    (docs/design/claim.md, "Candidates and the warm queue")."""
    h = Harness()
    t = h.add(SANDBOX_TEMPLATES.plural, template(image="v2"))
    p = h.add(SANDBOX_WARM_POOLS.plural, pool(updateStrategy={"type": "Recreate"}))
    old = h.add(SANDBOXES.plural, pool_sandbox(p, template(image="v1")))
    fresh = h.add(SANDBOXES.plural, pool_sandbox(p, t))
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == fresh["metadata"]["name"]
    assert (NS, old["metadata"]["name"]) not in h.r.queue


async def test_queues_are_per_namespace_so_no_cross_namespace_candidate_is_seen() -> None:
    h = Harness()
    t = h.add(SANDBOX_TEMPLATES.plural, template())
    other = h.add(SANDBOX_WARM_POOLS.plural, pool(ns="elsewhere"))
    foreign = pool_sandbox(other, {**t, "metadata": {**t["metadata"], "namespace": "elsewhere"}})
    h.add(SANDBOXES.plural, foreign)
    h.add(SANDBOX_WARM_POOLS.plural, pool())
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == "claim"  # cold: nothing in this namespace


async def test_three_claims_two_pool_sandboxes_one_sandbox_each_one_claim_each() -> None:
    """Upstream TestWarmPoolPodExclusivity."""
    h = Harness()
    setup_pool(h, members=2)
    for name in ("a", "b", "c"):
        h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(name))
    for name in ("a", "b", "c"):
        await h.reconcile(name)
    owners: dict[str, list[str]] = {}
    for sb in h.api.all(SANDBOXES.plural):
        claims = [
            r["name"]
            for r in sb["metadata"].get("ownerReferences", [])
            if r["kind"] == "SandboxClaim"
        ]
        assert len(claims) <= 1
        for c in claims:
            owners.setdefault(c, []).append(sb["metadata"]["name"])
    assert sorted(owners) == ["a", "b", "c"] and all(len(v) == 1 for v in owners.values())
    assert owners["c"] == ["c"], "the third claim went cold"


# ------------------------------------------------------------------------------------ policies
async def test_v1alpha1_default_policy_adopts_from_any_pool_of_the_template() -> None:
    h = Harness()
    _, _, sbs = setup_pool(h, name="some-pool")
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1())
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] in {s["metadata"]["name"] for s in sbs}


async def test_v1alpha1_policy_none_goes_cold_and_leaves_the_pool_alone() -> None:
    h = Harness()
    _, _, sbs = setup_pool(h)
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == "claim"
    assert all(
        h.sandbox(s["metadata"]["name"])["metadata"]["ownerReferences"][0]["kind"]
        == "SandboxWarmPool"
        for s in sbs
    )


async def test_v1alpha1_named_pool_adopts_from_that_pool_only() -> None:
    h = Harness()
    _, _, other = setup_pool(h, name="other-pool")
    _, _, mine = setup_pool(h, name="test-pool")
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="test-pool"))
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == mine[0]["metadata"]["name"]
    assert (
        h.sandbox(other[0]["metadata"]["name"])["metadata"]["ownerReferences"][0]["kind"]
        == "SandboxWarmPool"
    )


async def test_v1alpha1_named_pool_that_does_not_exist_goes_cold() -> None:
    h = Harness()
    setup_pool(h)
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="no-such-pool"))
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == "claim"
    assert h.ready()["reason"] == "SandboxNotReady"


async def test_env_forces_a_cold_start_with_the_variables_injected() -> None:
    """Changed by upstream #899: upstream 35b9757f refused env with a warm pool forever
    (docs/design/claim.md, "Warm or cold")."""
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template(envVarsInjectionPolicy="Allowed"))
    p = h.add(SANDBOX_WARM_POOLS.plural, pool())
    t = h.api.stored(SANDBOX_TEMPLATES.plural, NS, "tpl")
    assert t is not None
    h.add(SANDBOXES.plural, pool_sandbox(p, t))
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(env=[{"name": "MODE", "value": "x"}]))
    await h.reconcile()
    sb = h.sandbox("claim")
    assert sb["spec"]["podTemplate"]["spec"]["containers"][0]["env"] == [
        {"name": "MODE", "value": "x"}
    ]


async def test_env_refused_by_the_template_policy_is_a_terminal_reason_and_no_sandbox() -> None:
    h = Harness()
    setup_pool(h)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(env=[{"name": "MODE", "value": "x"}]))
    assert await h.reconcile() is None
    assert h.ready()["reason"] == "EnvVarsInjectionRejected"
    assert h.owned_by(h.claim()) == []


# ------------------------------------------------------------------------------------ cold path
async def test_cold_sandbox_is_named_after_the_claim_secure_and_owned_by_it() -> None:
    """Upstream TestSandboxClaimReconcile "basic claim" and TestSandboxProvisionEvent."""
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template(service=True))
    c = h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    await h.reconcile()
    sb = h.sandbox("claim")
    spec = sb["spec"]["podTemplate"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["dnsPolicy"] == "None" and spec["dnsConfig"]["nameservers"][0] == "8.8.8.8"
    assert sb["spec"]["service"] is True
    assert sb["metadata"]["ownerReferences"][0]["uid"] == c["metadata"]["uid"]
    assert sb["metadata"]["labels"] == {
        keys.LABEL_CLAIM_UID: c["metadata"]["uid"],
        keys.LABEL_LAUNCH_TYPE: "cold",
    }
    assert sb["spec"]["podTemplate"]["metadata"]["labels"][
        keys.LABEL_SANDBOX_TEMPLATE_REF_HASH
    ] == name_hash("tpl")
    ready = h.ready()
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "SandboxNotReady",
        "Sandbox is not ready",
    )
    assert h.recorder.events[-1][:3] == ("Normal", "SandboxProvisioned", 'Created Sandbox "claim"')


async def test_same_name_sandbox_of_someone_else_is_a_reconciler_error() -> None:
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template())
    h.add(SANDBOXES.plural, {"metadata": {"name": "claim", "namespace": NS}, "spec": {}})
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    with pytest.raises(RetryLater):
        await h.reconcile()
    ready = h.ready()
    assert ready["reason"] == "ReconcilerError"
    assert ready["message"] == (
        'Error seen: sandbox "claim" is not controlled by claim "claim". Please use a different '
        "claim name or delete the sandbox manually"
    )


# ------------------------------------------------------------------------------------ not found
async def test_missing_pool_is_warm_pool_not_found_only_after_an_uncached_get() -> None:
    h = Harness()
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(pool_name="nope"))
    result = await h.reconcile()
    assert ("get", "sandboxwarmpools", "nope") in h.api.calls
    assert result == Result(requeue_after=MISSING_RECHECK)
    ready = h.ready()
    assert (ready["reason"], ready["message"]) == (
        "WarmPoolNotFound",
        'SandboxWarmPool "nope" not found',
    )
    conds = h.claim()["status"]["conditions"]
    assert [c["type"] for c in conds if "WarmPoolNotFound" in str(c)] == ["Ready"]


async def test_a_terminal_reason_is_also_a_warning_event_once_per_transition() -> None:
    """Bug found by the bad-input suite: TemplateNotFound, WarmPoolNotFound, InvalidMetadata...
    were reported in the Ready condition only. Now also a Warning Event with the same reason and
    message, once when the reason is first written (the 30 s re-checks do not repeat it)."""
    h = Harness()
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(pool_name="nope"))
    await h.reconcile()
    assert [e[:3] for e in h.recorder.events] == [
        ("Warning", "WarmPoolNotFound", 'SandboxWarmPool "nope" not found')
    ]
    h.sync(SANDBOX_CLAIMS.plural)
    await h.reconcile()
    assert len(h.recorder.events) == 1
    h2 = Harness()  # --disable-claim-events silences it like every claim Event
    h2.r.writer.events = False
    h2.add(SANDBOX_CLAIMS.plural, claim_v1beta1(pool_name="nope"))
    await h2.reconcile()
    assert h2.recorder.events == []


async def test_pool_and_template_missing_from_the_cache_but_in_the_api_are_used() -> None:
    """A burst (template, pool, claim with no waits): the cache has not seen them yet, the API
    has; no terminal reason may be written."""
    h = Harness()
    t = h.add(SANDBOX_TEMPLATES.plural, template(), cache=False)
    h.add(SANDBOX_WARM_POOLS.plural, pool(), cache=False)
    assert t
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    await h.reconcile()
    assert h.ready()["reason"] == "SandboxNotReady"
    assert h.claim()["status"]["sandbox"]["name"] == "claim"


async def test_missing_template_is_template_not_found_and_recovers_once_created() -> None:
    """Upstream TestSandboxClaimRecoveryWhenTemplateCreated."""
    h = Harness()
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(tpl="test-template", warmpool="none"))
    assert await h.reconcile() == Result(requeue_after=MISSING_RECHECK)
    ready = h.ready()
    assert (ready["reason"], ready["message"]) == (
        "TemplateNotFound",
        'SandboxTemplate "test-template" not found',
    )
    h.add(SANDBOX_TEMPLATES.plural, template("test-template"))
    h.sync(SANDBOX_CLAIMS.plural)
    assert [r.name for r in h.r.claims_for_template(template("test-template"))] == ["claim"]
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == "claim"


async def test_a_bound_claim_never_gets_template_not_found() -> None:
    h = Harness()
    setup_pool(h)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    await h.reconcile()
    del h.api.objects[(SANDBOX_TEMPLATES.plural, NS, "tpl")]
    del h.api.objects[(SANDBOX_WARM_POOLS.plural, NS, "pool")]
    h.sync()
    await h.reconcile()
    assert h.ready()["status"] == "True"


# ------------------------------------------------------------------------------------ crash / lag
async def test_fresh_reconciler_after_a_crash_between_the_two_writes_does_not_adopt_again() -> None:
    """The pass died after the sandbox write, before the claim status write. A new process
    (empty queue, no memory, caches listed afresh) finds the sandbox by its controller UID."""
    h = Harness()
    _, _, sbs = setup_pool(h)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    h.api.fail[("patch-status", "sandboxclaims")] = [RuntimeError("process killed")]
    with pytest.raises(RuntimeError):
        await h.reconcile()
    (adopted,) = [s["metadata"]["name"] for s in h.owned_by(h.claim())]
    assert adopted in {s["metadata"]["name"] for s in sbs}
    fresh = Harness(h.api)
    fresh.r.observability_annotations = False
    fresh.sync()
    fresh.api.calls.clear()
    await fresh.reconcile()
    assert fresh.api.writes() == [
        ("patch-status", "sandboxclaims", "claim"),
        ("patch", "sandboxclaims", "claim"),  # the first-Ready guard annotations
    ]
    assert fresh.claim()["status"]["sandbox"]["name"] == adopted
    assert len(fresh.owned_by(fresh.claim())) == 1


async def test_cache_lag_after_our_own_adoption_never_leads_to_a_second_one() -> None:
    """Changed by upstream #1118: upstream 35b9757f re-patched and failed the pass; here the
    adoption is finished in the same pass, and the next pass (caches still stale) asks the API
    (docs/design/claim.md, "Finding the claim's sandbox")."""
    h = Harness()
    setup_pool(h, members=3)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    await h.reconcile()
    for _ in range(2):  # no sync: the sandbox and claim caches still show the old objects
        await h.reconcile()
    assert len(h.owned_by(h.claim())) == 1
    assert sum(1 for v, p, _ in h.api.writes() if (v, p) == ("patch", "sandboxes")) == 1


async def test_a_lost_status_write_is_retried_without_adopting_again() -> None:
    h = Harness()
    setup_pool(h)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())

    def user_edit(verb: str, plural: str, name: str) -> None:
        if (verb, plural) == ("patch-status", SANDBOX_CLAIMS.plural) and h.api.before:
            h.api.before = None
            stored = h.api.objects[(plural, NS, name)]
            stored["metadata"]["resourceVersion"] = "changed-by-a-user"  # e.g. a label edit

    h.api.before = user_edit
    result = await h.reconcile()
    assert result is not None and result.requeue_after is not None and result.requeue_after < 1
    h.sync()
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"]
    assert sum(1 for v, p, _ in h.api.writes() if (v, p) == ("patch", "sandboxes")) == 1


async def test_a_claim_controlling_two_sandboxes_keeps_the_one_its_status_names() -> None:
    """Only possible with two un-elected controllers: the extra one is deleted (UID
    precondition), the one the claim's status names is kept."""
    h = Harness()
    _, _, sbs = setup_pool(h, members=3)
    c = h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    await h.reconcile()
    kept = h.claim()["status"]["sandbox"]["name"]
    other = next(s for s in sbs if s["metadata"]["name"] != kept)
    stored = h.api.objects[(SANDBOXES.plural, NS, other["metadata"]["name"])]
    stored["metadata"]["ownerReferences"] = [
        {**h.sandbox(kept)["metadata"]["ownerReferences"][0], "uid": c["metadata"]["uid"]}
    ]
    stored["metadata"]["resourceVersion"] = "5000"
    h.sync()
    await h.reconcile()
    assert [s["metadata"]["name"] for s in h.owned_by(h.claim())] == [kept]
    assert ("delete", "sandboxes", other["metadata"]["name"]) in h.api.calls


# ------------------------------------------------------------------------------------ metadata
@pytest.mark.parametrize(
    "extra",
    [
        {"labels": {"sandbox.users.io/team": "x" * 64}},
        {"labels": {"sandbox.users.io/team": "invalid@value"}},
        {"labels": {"kubernetes.io/restricted": "x"}},
        {"annotations": {"agents.x-k8s.io/anything": "x"}},
    ],
)
async def test_invalid_additional_pod_metadata_is_invalid_metadata_and_no_sandbox(
    extra: dict[str, Any],
) -> None:
    h = Harness()
    setup_pool(h)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(additionalPodMetadata=extra))
    assert await h.reconcile() is None
    assert h.ready()["reason"] == "InvalidMetadata"
    assert h.owned_by(h.claim()) == []


async def test_additional_pod_metadata_forces_a_cold_start_and_reaches_the_pod_template() -> None:
    """Claims issue 2: the metadata must be on the pod when it starts (Downward API), so a warm
    pod cannot serve; a ColdStartForced event names the field."""
    h = Harness()
    setup_pool(h)
    extra = {"labels": {"sandbox.users.io/team": "a"}, "annotations": {"note": "b"}}
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(additionalPodMetadata=extra))
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == "claim"
    meta = h.sandbox("claim")["spec"]["podTemplate"]["metadata"]
    assert meta["labels"]["sandbox.users.io/team"] == "a" and meta["annotations"] == {"note": "b"}
    forced = [e for e in h.recorder.events if e[1] == "ColdStartForced"]
    assert len(forced) == 1 and "spec.additionalPodMetadata" in forced[0][2]
    assert h.ready()["reason"] == "SandboxNotReady", "never a terminal reason"


async def test_additional_label_conflicting_with_the_template_is_invalid_metadata() -> None:
    h = Harness()
    t = template()
    t["spec"]["podTemplate"]["metadata"]["labels"]["sandbox.users.io/app"] = "agent"
    h.add(SANDBOX_TEMPLATES.plural, t)
    setup_pool(h)
    extra = {"labels": {"sandbox.users.io/app": "other"}}
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(additionalPodMetadata=extra))
    await h.reconcile()
    ready = h.ready()
    assert ready["reason"] == "InvalidMetadata"
    assert 'metadata override conflict: label "sandbox.users.io/app"' in ready["message"]


# ------------------------------------------------------------------------------------ queue
def test_warm_queue_is_fifo_deduplicated_and_removes_from_the_middle() -> None:
    q = WarmQueue()
    for name in ("a", "b", "c", "b"):
        q.add((NS, "p"), name)
    assert list(q.names((NS, "p"))) == ["a", "b", "c"]
    q.remove(NS, "b")
    assert list(q.names((NS, "p"))) == ["a", "c"]
    assert q.take((NS, "p"), "a") and not q.take((NS, "p"), "a")
    q.add((NS, "other"), "c")  # a sandbox is in one queue only
    assert list(q.names((NS, "p"))) == [] and list(q.names((NS, "other"))) == ["c"]
    q.drop_queue((NS, "other"))
    assert len(q) == 0 and q.size((NS, "other")) == 0


async def test_queue_follows_sandbox_pool_and_template_events() -> None:
    h = Harness()
    t, p, sbs = setup_pool(h, members=2)
    first, second = (s["metadata"]["name"] for s in sbs)
    assert list(h.r.queue.names((NS, "pool"))) == [first, second]
    h.sandboxes.remove(sbs[0])  # ghost keys go with their sandbox
    assert list(h.r.queue.names((NS, "pool"))) == [second]
    h.templates.remove(t)  # the template's pools' queues are purged ...
    assert h.r.queue.size((NS, "pool")) == 0
    h.templates.put(t)  # ... and rebuilt from the cache when it comes back
    assert list(h.r.queue.names((NS, "pool"))) == [second]
    h.pools.remove(p)
    assert h.r.queue.size((NS, "pool")) == 0


async def test_a_sandbox_that_stops_being_adoptable_leaves_the_queue() -> None:
    h = Harness()
    _, _, sbs = setup_pool(h, members=1)
    gone = copy.deepcopy(sbs[0])
    gone["metadata"]["ownerReferences"][0]["uid"] = "someone"
    gone["metadata"]["ownerReferences"][0]["kind"] = "SandboxClaim"
    h.sandboxes.put(gone)
    assert len(h.r.queue) == 0


def test_template_and_pool_map_to_their_unbound_claims_only() -> None:
    """Upstream TestMapTemplateToClaims, plus pools (claims through warmPoolRef)."""
    h = Harness()
    h.claims.put({**claim_v1alpha1("a"), "metadata": {"name": "a", "namespace": NS, "uid": "a"}})
    h.claims.put({**claim_v1beta1("b"), "metadata": {"name": "b", "namespace": NS, "uid": "b"}})
    bound = claim_v1alpha1("c")
    bound["metadata"]["uid"] = "c"
    bound["status"] = {"sandbox": {"name": "x"}}
    h.claims.put(bound)
    h.claims.put(
        {**claim_v1alpha1("d", tpl="other"), "metadata": {"name": "d", "namespace": NS, "uid": "d"}}
    )
    h.pools.put({**pool(), "metadata": {"name": "pool", "namespace": NS, "uid": "p"}})
    assert sorted(r.name for r in h.r.claims_for_template(template())) == ["a", "b"]
    assert [r.name for r in h.r.claims_for_pool(pool())] == ["b"]


async def test_a_deleted_claim_is_forgotten() -> None:
    h = Harness()
    setup_pool(h)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    await h.reconcile()
    assert h.r._bound
    h.claims.remove(h.claim())
    assert await h.reconcile() is None
    assert h.r._bound == {}


# ----------------------------------------- the rest of upstream's sandboxclaim_controller_test.go
async def test_template_with_automount_true_keeps_it_on_the_cold_sandbox() -> None:
    h = Harness()
    t = template()
    t["spec"]["podTemplate"]["spec"]["automountServiceAccountToken"] = True
    h.add(SANDBOX_TEMPLATES.plural, t)
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    await h.reconcile()
    assert h.sandbox("claim")["spec"]["podTemplate"]["spec"]["automountServiceAccountToken"] is True


async def test_template_with_its_own_network_policy_leaves_dns_alone() -> None:
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template(networkPolicy={"ingress": []}))
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    await h.reconcile()
    spec = h.sandbox("claim")["spec"]["podTemplate"]["spec"]
    assert "dnsPolicy" not in spec and "dnsConfig" not in spec


async def test_same_name_sandbox_controlled_by_the_claim_is_used_without_error() -> None:
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template())
    c = h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    sb = pool_sandbox(pool(), template(), owner="orphan", ready=False)
    sb["metadata"]["name"] = "claim"
    sb["metadata"]["ownerReferences"] = [
        {
            "apiVersion": SANDBOX_CLAIM.api_version,
            "kind": "SandboxClaim",
            "name": "claim",
            "uid": c["metadata"]["uid"],
            "controller": True,
        }
    ]
    h.add(SANDBOXES.plural, sb)
    h.api.calls.clear()
    assert await h.reconcile() is None
    assert [w[:2] for w in h.api.writes()] == [
        ("patch", "sandboxclaims"),  # the first-observed annotation
        ("patch-status", "sandboxclaims"),
    ]
    assert h.ready()["reason"] == "DependenciesNotReady"


async def test_controlled_ready_sandbox_is_forwarded_even_without_its_template() -> None:
    """Upstream: "controlled Ready sandbox but template missing ⇒ Ready True, podIPs mirrored"."""
    h = Harness()
    c = h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1())
    sb = pool_sandbox(pool(), template(), owner="orphan")
    sb["metadata"]["ownerReferences"] = [
        {
            "apiVersion": SANDBOX_CLAIM.api_version,
            "kind": "SandboxClaim",
            "name": "claim",
            "uid": c["metadata"]["uid"],
            "controller": True,
        }
    ]
    sb["status"]["podIPs"] = ["10.244.0.6"]
    sb = h.add(SANDBOXES.plural, sb)
    await h.reconcile()
    status = h.claim()["status"]
    assert status["sandbox"] == {"name": sb["metadata"]["name"], "podIPs": ["10.244.0.6"]}
    assert (h.ready()["status"], h.ready()["reason"]) == ("True", "DependenciesReady")


async def test_claim_whose_status_names_an_owned_sandbox_does_not_adopt_another() -> None:
    """Upstream TestSandboxClaimNoReAdoption."""
    h = Harness()
    setup_pool(h, members=3)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    await h.reconcile()
    h.sync()
    h.api.calls.clear()
    await h.reconcile()
    assert h.api.writes() == []
    assert h.r.queue.size((NS, "pool")) == 2


@pytest.mark.parametrize("path", ["cold", "warm"])
async def test_trace_context_of_the_claim_is_copied_to_its_sandbox(path: str) -> None:
    h = Harness()
    setup_pool(h)
    body = claim_v1beta1() if path == "warm" else claim_v1alpha1(warmpool="none")
    body["metadata"]["annotations"] = {keys.ANNOTATION_TRACE_CONTEXT: '{"traceparent":"00-a-b-01"}'}
    h.add(SANDBOX_CLAIMS.plural, body)
    await h.reconcile()
    sb = h.sandbox(h.claim()["status"]["sandbox"]["name"])
    assert (
        sb["metadata"]["annotations"][keys.ANNOTATION_TRACE_CONTEXT]
        == '{"traceparent":"00-a-b-01"}'
    )


async def test_cold_sandbox_propagates_the_templates_volume_claim_templates() -> None:
    """Upstream TestCreateSandboxPropagatesVolumeClaimTemplates."""
    h = Harness()
    vct = {"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}}
    h.add(SANDBOX_TEMPLATES.plural, template(volumeClaimTemplates=[vct]))
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    await h.reconcile()
    assert h.sandbox("claim")["spec"]["volumeClaimTemplates"] == [vct]


@pytest.mark.parametrize(
    ("existing", "expected"),
    [
        ({keys.ANNOTATION_POD_NAME: "stale-pod-name"}, None),
        ({"keep-me": "yes"}, {"keep-me": "yes"}),
    ],
)
async def test_adoption_corrects_the_pod_name_annotation_and_keeps_other_annotations(
    existing: dict[str, str], expected: dict[str, str] | None
) -> None:
    h = Harness()
    t = h.add(SANDBOX_TEMPLATES.plural, template())
    p = h.add(SANDBOX_WARM_POOLS.plural, pool())
    sb = pool_sandbox(p, t)
    sb["metadata"]["annotations"].update(existing)
    sb = h.add(SANDBOXES.plural, sb)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    await h.reconcile()
    annotations = h.sandbox(sb["metadata"]["name"])["metadata"]["annotations"]
    assert annotations[keys.ANNOTATION_POD_NAME] == sb["metadata"]["name"]
    for key, value in (expected or {}).items():
        assert annotations[key] == value


def test_verify_candidate_namespace_isolation() -> None:
    """Upstream TestVerifySandboxCandidate_NamespaceIsolation."""
    from agentsandbox.controllers.claim.plan import candidate_problem

    t = {**template(), "metadata": {"name": "tpl", "namespace": NS}}
    p = {**pool(), "metadata": {"name": "pool", "namespace": NS, "uid": "pool-uid"}}
    sb = pool_sandbox(p, t)
    assert candidate_problem(sb, NS, t, p, "") is None
    problem = candidate_problem(sb, "other", t, p, "")
    assert problem is not None and problem.startswith("cross-namespace adoption forbidden")


@pytest.mark.parametrize(
    ("policy", "template_env", "claim_env", "result"),
    [
        (
            "Overrides",
            [("EXISTING_VAR", "template-value")],
            [("NEW_VAR", "claim-value")],
            [("EXISTING_VAR", "template-value"), ("NEW_VAR", "claim-value")],
        ),
        ("Allowed", [], [("NEW_VAR", "claim-value")], [("NEW_VAR", "claim-value")]),
        ("Allowed", [("EXISTING_VAR", "t")], [("EXISTING_VAR", "c")], "override is not allowed"),
        ("", [("EXISTING_VAR", "t")], [("EXISTING_VAR", "c")], "injection is not allowed"),
        ("", [], [("NEW_VAR", "c")], "injection is not allowed"),
        (
            "Overrides",
            [("EXISTING_VAR", "t")],
            [("EXISTING_VAR", "claim-override-value")],
            [("EXISTING_VAR", "claim-override-value")],
        ),
    ],
)
def test_env_injection_follows_the_template_policy(
    policy: str, template_env: list[tuple[str, str]], claim_env: list[tuple[str, str]], result: Any
) -> None:
    """Upstream's env table (docs/design/claim.md, "Pod metadata and env")."""
    from agentsandbox.controllers.claim.claimed_sandbox import inject_env
    from agentsandbox.controllers.claim.plan import ClaimFailure

    spec = {
        "containers": [{"name": "app", "env": [{"name": n, "value": v} for n, v in template_env]}]
    }
    env = [{"name": n, "value": v} for n, v in claim_env]
    if isinstance(result, str):
        with pytest.raises(ClaimFailure, match=result) as info:
            inject_env(spec, env, policy)
        assert info.value.reason == "EnvVarsInjectionRejected"
    else:
        inject_env(spec, env, policy)
        assert [(e["name"], e["value"]) for e in spec["containers"][0]["env"]] == result


def test_env_targeted_at_a_container_goes_there_only_and_init_containers_are_reachable() -> None:
    from agentsandbox.controllers.claim.claimed_sandbox import inject_env
    from agentsandbox.controllers.claim.plan import ClaimFailure

    spec: dict[str, Any] = {
        "initContainers": [{"name": "setup"}],
        "containers": [{"name": "app-container"}, {"name": "sidecar"}],
    }
    inject_env(
        spec,
        [
            {"name": "A", "value": "1", "containerName": "app-container"},
            {"name": "B", "value": "2", "containerName": "setup"},
        ],
        "Allowed",
    )
    assert spec["containers"][0]["env"] == [{"name": "A", "value": "1"}]
    assert "env" not in spec["containers"][1]
    assert spec["initContainers"][0]["env"] == [{"name": "B", "value": "2"}]
    with pytest.raises(
        ClaimFailure,
        match='target container "missing" not found in template for environment variable "X"',
    ):
        inject_env(spec, [{"name": "X", "value": "1", "containerName": "missing"}], "Allowed")


# ------------------------------------------------------------------------------------ lifecycle
NOW_ISO = "2027-01-15T08:00:00Z"  # the harness clock: 1_800_000_000 s
TWO_HOURS_AGO = "2027-01-15T06:00:00Z"


def bound_claim(
    h: Harness,
    *,
    lifecycle: dict[str, Any],
    finished_ago: float | None = None,
    sandbox_finished: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A claim bound to a Ready cold sandbox it controls (as after an earlier pass)."""
    h.add(SANDBOX_TEMPLATES.plural, template())
    body = claim_v1alpha1(warmpool="none", lifecycle=lifecycle)
    c = h.add(SANDBOX_CLAIMS.plural, body)
    sb = pool_sandbox(pool(), template(), owner="orphan")
    sb["metadata"]["name"] = "claim"
    sb["metadata"]["ownerReferences"] = [
        {
            "apiVersion": SANDBOX_CLAIM.api_version,
            "kind": "SandboxClaim",
            "name": "claim",
            "uid": c["metadata"]["uid"],
            "controller": True,
        }
    ]
    if sandbox_finished:
        sb["status"]["conditions"].append(
            {
                "type": "Finished",
                "status": "True",
                "reason": "PodSucceeded",
                "message": "Pod completed successfully",
                "lastTransitionTime": "2027-01-15T07:59:30Z",
            }
        )
    h.add(SANDBOXES.plural, sb)
    if finished_ago is not None:
        stored = h.api.objects[(SANDBOX_CLAIMS.plural, NS, "claim")]
        import datetime as dt

        ltt = dt.datetime.fromtimestamp(1_800_000_000 - finished_ago, dt.UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
        stored["status"] = {
            "sandbox": {"name": "claim"},
            "conditions": [
                {
                    "type": "Finished",
                    "status": "True",
                    "reason": "PodSucceeded",
                    "message": "done",
                    "lastTransitionTime": ltt,
                }
            ],
        }
        stored["metadata"]["resourceVersion"] = "7000"
        h.sync(SANDBOX_CLAIMS.plural)
    return h.claim(), h.sandbox("claim")


async def _two_passes(h: Harness) -> list[Result | None]:
    results = []
    for _ in range(2):
        results.append(await h.reconcile())
        h.sync()
    return results


@pytest.mark.parametrize("named_in_status", [False, True])
async def test_cleanup_policy_retain_keeps_the_claim_and_deletes_its_sandbox(
    named_in_status: bool,
) -> None:
    """Upstream TestSandboxClaimCleanupPolicy, Retain (shutdownTime 2 h ago, two passes)."""
    h = Harness()
    bound_claim(h, lifecycle={"shutdownTime": TWO_HOURS_AGO, "shutdownPolicy": "Retain"})
    if named_in_status:
        await h.reconcile()  # a live pass first writes status.sandbox.name... (already expired)
        h.sync()
    await _two_passes(h)
    assert h.api.stored(SANDBOX_CLAIMS.plural, NS, "claim") is not None
    assert h.api.stored(SANDBOXES.plural, NS, "claim") is None
    ready = h.ready()
    assert (ready["reason"], ready["message"]) == (
        "ClaimExpired",
        "Claim expired. Sandbox cleanup initiated.",
    )
    assert ("Normal", "ClaimExpired", "Claim expired", "Claim Expired") in h.recorder.events


async def test_cleanup_policy_retain_never_deletes_a_sandbox_of_another_claim() -> None:
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template())
    c = claim_v1alpha1(
        warmpool="none", lifecycle={"shutdownTime": TWO_HOURS_AGO, "shutdownPolicy": "Retain"}
    )
    c["status"] = {"sandbox": {"name": "theirs"}}
    h.add(SANDBOX_CLAIMS.plural, c)
    theirs = pool_sandbox(pool(), template(), owner="orphan")
    theirs["metadata"]["name"] = "theirs"
    theirs["metadata"]["ownerReferences"] = [
        {
            "apiVersion": SANDBOX_CLAIM.api_version,
            "kind": "SandboxClaim",
            "name": "other",
            "uid": "other-uid",
            "controller": True,
        }
    ]
    h.add(SANDBOXES.plural, theirs)
    await _two_passes(h)
    assert h.api.stored(SANDBOXES.plural, NS, "theirs") is not None
    status = h.claim()["status"]
    assert status["sandbox"].get("name", "") == "" and not status["sandbox"].get("podIPs")
    ready = h.ready()
    assert ready["reason"] == "ClaimExpired"
    assert ready["message"] == (
        'Claim expired. sandbox not owned by this claim: sandbox "theirs" is not owned by claim '
        '"claim"; deletion skipped.'
    )


@pytest.mark.parametrize(
    ("policy", "propagation"), [("Delete", None), ("DeleteForeground", "Foreground")]
)
async def test_cleanup_policy_delete_removes_the_claim_itself(
    policy: str, propagation: str | None
) -> None:
    """Upstream: Delete / DeleteForeground ⇒ the claim is deleted (its sandbox goes by GC)."""
    h = Harness()
    bound_claim(h, lifecycle={"shutdownTime": TWO_HOURS_AGO, "shutdownPolicy": policy})
    first, second = await _two_passes(h)
    assert first == Result(requeue_after=0.001), "pass 1 only makes the expiry visible"
    assert second is None
    assert h.api.stored(SANDBOX_CLAIMS.plural, NS, "claim") is None
    assert h.api.stored(SANDBOXES.plural, NS, "claim") is not None, "no GC here: the sandbox stays"
    note = f"Deleting Claim (ShutdownPolicy={policy})"
    assert ("Normal", "ClaimExpired", note, "Deleting") in h.recorder.events


async def test_finished_is_mirrored_and_the_ttl_is_scheduled() -> None:
    """Upstream TestSandboxClaimMirrorsFinishedConditionAndSchedulesTTL (TTL 120 s, sandbox
    Finished 30 s ago)."""
    h = Harness()
    bound_claim(h, lifecycle={"ttlSecondsAfterFinished": 120}, sandbox_finished=True)
    sb = h.api.objects[(SANDBOXES.plural, NS, "claim")]
    sb["status"]["conditions"][0].update(status="False", reason="PodSucceeded", message="done")
    sb["metadata"]["resourceVersion"] = "8000"
    h.sync()
    result = await h.reconcile()
    assert result is not None and result.requeue_after == pytest.approx(90.0)
    conds = {c["type"]: c for c in h.claim()["status"]["conditions"]}
    assert conds["Finished"]["reason"] == "PodSucceeded"
    assert list(conds) == ["Finished", "Ready"], "sorted by type"


@pytest.mark.parametrize("policy", ["Retain", "DeleteForeground"])
async def test_ttl_after_finished_expires_the_claim(policy: str) -> None:
    """Upstream TestSandboxClaimTTLAfterFinishedCleanupPolicy (TTL 0, claim already Finished)."""
    h = Harness()
    bound_claim(
        h,
        lifecycle={"ttlSecondsAfterFinished": 0, "shutdownPolicy": policy},
        finished_ago=10,
        sandbox_finished=True,
    )
    first = await h.reconcile()
    h.sync()
    assert first == Result(requeue_after=0.001)
    conds = {c["type"]: c for c in h.claim()["status"]["conditions"]}
    assert conds["Ready"]["reason"] == "ClaimExpired" and "Finished" in conds
    assert h.api.stored(SANDBOXES.plural, NS, "claim") is not None
    assert await h.reconcile() is None
    if policy == "Retain":
        assert {c["type"] for c in h.claim()["status"]["conditions"]} == {"Finished", "Ready"}
        assert h.api.stored(SANDBOXES.plural, NS, "claim") is None
    else:
        assert h.api.stored(SANDBOX_CLAIMS.plural, NS, "claim") is None
        assert h.api.stored(SANDBOXES.plural, NS, "claim") is not None


async def test_ttl_cleanup_requires_the_expired_status_to_be_persisted_first() -> None:
    """Upstream TestSandboxClaimTTLCleanupRequiresPersistedExpiredStatus (Delete, TTL 0,
    Finished only on the sandbox): pass 1 mirrors Finished and sets ClaimExpired, pass 2
    deletes the claim."""
    h = Harness()
    bound_claim(
        h,
        lifecycle={"ttlSecondsAfterFinished": 0, "shutdownPolicy": "Delete"},
        sandbox_finished=True,
    )
    first = await h.reconcile()
    h.sync()
    assert first == Result(requeue_after=0.001)
    conds = {c["type"]: c for c in h.claim()["status"]["conditions"]}
    assert conds["Ready"]["reason"] == "ClaimExpired" and conds["Finished"]["status"] == "True"
    assert h.api.stored(SANDBOXES.plural, NS, "claim") is not None
    assert await h.reconcile() is None
    assert h.api.stored(SANDBOX_CLAIMS.plural, NS, "claim") is None


async def test_an_error_is_retried_no_later_than_the_expiry() -> None:
    """Error backoff never postpones an expiry past its time."""
    from agentsandbox.kube.errors import InternalError

    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template())
    h.add(
        SANDBOX_CLAIMS.plural,
        claim_v1alpha1(warmpool="none", lifecycle={"shutdownTime": "2027-01-15T08:00:42Z"}),
    )
    h.api.fail[("create", "sandboxes")] = [InternalError(500, "InternalError", "etcd busy")]
    with pytest.raises(InternalError) as info:
        await h.reconcile()
    assert getattr(info.value, "retry_within", None) == pytest.approx(42.0)


# ------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize(
    ("policy", "claim_vcts", "outcome"),
    [
        ("Disallowed", ["scratch"], "VolumeClaimTemplatesError"),
        ("Allowed", ["scratch"], ["data", "scratch"]),
        ("Allowed", ["data"], "VolumeClaimTemplatesError"),
        ("Overrides", ["data"], ["data"]),
    ],
)
async def test_claim_volume_claim_templates_follow_the_template_policy(
    policy: str, claim_vcts: list[str], outcome: Any
) -> None:
    """Upstream #960: Disallowed (default) | Allowed (add only) | Overrides; a claim with volume
    claim templates always starts cold."""
    h = Harness()
    vct = {"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}}
    h.add(
        SANDBOX_TEMPLATES.plural,
        template(volumeClaimTemplates=[vct], volumeClaimTemplatesPolicy=policy),
    )
    h.add(SANDBOX_WARM_POOLS.plural, pool())
    mine = [
        {"metadata": {"name": n}, "spec": {"resources": {"requests": {"storage": "2Gi"}}}}
        for n in claim_vcts
    ]
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(volumeClaimTemplates=mine))
    await h.reconcile()
    if isinstance(outcome, str):
        assert h.ready()["reason"] == outcome
        assert h.api.stored(SANDBOXES.plural, NS, "claim") is None
    else:
        got = h.sandbox("claim")["spec"]["volumeClaimTemplates"]
        assert [v["metadata"]["name"] for v in got] == outcome
        if policy == "Overrides":
            assert got[0]["spec"]["resources"]["requests"]["storage"] == "2Gi"


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"labels": {"app": "sandbox-router"}}, "reserved for the sandbox router"),
        ({"labels": {"bad key!": "x"}}, "invalid key"),
        ({"annotations": {"a/b/c": "x"}}, "invalid key"),
        ({"labels": {"Upper.Case/x": "y"}}, "invalid key"),
    ],
)
async def test_additional_metadata_keys_are_validated_and_the_router_label_is_banned(
    extra: dict[str, Any], why: str
) -> None:
    h = Harness()
    setup_pool(h)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(additionalPodMetadata=extra))
    assert await h.reconcile() is None, "no hot loop: a terminal reason, no retry"
    ready = h.ready()
    assert ready["reason"] == "InvalidMetadata" and why in ready["message"]


async def test_a_cold_create_refused_by_a_quota_says_why_and_retries_at_a_fixed_pace() -> None:
    from agentsandbox.kube.errors import Forbidden

    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template())
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    h.api.fail[("create", "sandboxes")] = [
        Forbidden(
            403,
            "Forbidden",
            'sandboxes.agents.x-k8s.io "claim" is forbidden: exceeded quota: q, '
            "requested: count/sandboxes.agents.x-k8s.io=1, used: 2, limited: 2",
        )
    ]
    result = await h.reconcile()
    assert result == Result(requeue_after=10.0)
    ready = h.ready()
    assert ready["reason"] == "QuotaExceeded" and "exceeded quota" in ready["message"]
    assert [e[:2] for e in h.recorder.events] == [("Warning", "QuotaExceeded")]


async def test_env_on_a_warm_pool_claim_starts_cold_with_an_event() -> None:
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template(envVarsInjectionPolicy="Allowed"))
    p = h.add(SANDBOX_WARM_POOLS.plural, pool())
    t = h.api.stored(SANDBOX_TEMPLATES.plural, NS, "tpl")
    assert t is not None
    h.add(SANDBOXES.plural, pool_sandbox(p, t))
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1(env=[{"name": "MODE", "value": "x"}]))
    await h.reconcile()
    forced = [e for e in h.recorder.events if e[1] == "ColdStartForced"]
    assert len(forced) == 1 and "spec.env" in forced[0][2]


async def test_claim_events_can_be_switched_off() -> None:
    h = Harness()
    h.r.writer.events = False
    setup_pool(h)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    await h.reconcile()
    assert h.recorder.events == []


# ------------------------------------------------------------------------------------ metrics
def _sample(name: str, labels: dict[str, str]) -> float:
    from agentsandbox.kube import metrics as kube_metrics

    return kube_metrics.REGISTRY.get_sample_value(name, labels) or 0.0


async def test_first_ready_records_the_latency_once_and_writes_the_guard_annotations_once() -> None:
    """Observability annotations on (upstream's default): two claim metadata writes, the
    first-observed annotation before anything else, then claim-first-ready-at and
    creation-latency-recorded after the status write that turned Ready True; a later pass
    records and writes nothing again."""
    h = Harness()
    setup_pool(h)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    labels = {"launch_type": "warm", "sandbox_template": "tpl"}
    count = "agent_sandbox_claim_controller_startup_latency_ms_count"
    before = _sample(count, labels)
    created = {
        "namespace": NS,
        "sandbox_template": "tpl",
        "launch_type": "warm",
        "warmpool_name": "pool",
        "pod_condition": "ready",
        "created_by": "",  # the claim has no agents.x-k8s.io/created-by label
    }
    created_before = _sample("agent_sandbox_claim_creation_total", created)
    h.api.calls.clear()
    await h.reconcile()
    assert [w[:2] for w in h.api.writes()] == [
        ("patch", "sandboxclaims"),
        ("patch", "sandboxes"),
        ("patch-status", "sandboxclaims"),
        ("patch", "sandboxclaims"),
    ]
    annotations = h.claim()["metadata"]["annotations"]
    for key in (
        keys.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT,
        keys.ANNOTATION_CLAIM_FIRST_READY_AT,
        keys.ANNOTATION_CREATION_LATENCY_RECORDED,
    ):
        assert key in annotations
    assert _sample(count, labels) == before + 1
    assert _sample("agent_sandbox_claim_creation_total", created) == created_before + 1
    h.sync()
    h.api.calls.clear()
    await h.reconcile()
    assert h.api.writes() == []
    assert _sample(count, labels) == before + 1


async def test_cold_claim_counts_a_cold_creation() -> None:
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template())
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    labels = {
        "namespace": NS,
        "sandbox_template": "tpl",
        "launch_type": "cold",
        "warmpool_name": "none",
        "pod_condition": "not_ready",
        "created_by": "",  # the claim has no agents.x-k8s.io/created-by label
    }
    before = _sample("agent_sandbox_claim_creation_total", labels)
    await h.reconcile()
    assert _sample("agent_sandbox_claim_creation_total", labels) == before + 1


# ------------------------------------------------------------------------------------ legacy NP
def legacy_policy(claim: dict[str, Any] | None) -> dict[str, Any]:
    policy: dict[str, Any] = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "claim-network-policy", "namespace": NS},
        "spec": {"podSelector": {}},
    }
    if claim is not None:
        policy["metadata"]["ownerReferences"] = [
            {
                "apiVersion": SANDBOX_CLAIM.api_version,
                "kind": "SandboxClaim",
                "name": "claim",
                "uid": claim["metadata"]["uid"],
                "controller": True,
            }
        ]
    return policy


@pytest.mark.parametrize("with_template", [False, True])
async def test_legacy_network_policy_owned_by_the_claim_is_deleted(with_template: bool) -> None:
    """Upstream: the claim's legacy NP is deleted with or without the template (and a missing
    template is still TemplateNotFound, no error)."""
    h = Harness()
    if with_template:
        h.add(SANDBOX_TEMPLATES.plural, template())
    c = h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    h.add("networkpolicies", legacy_policy(c))
    await h.reconcile()
    assert h.api.stored("networkpolicies", NS, "claim-network-policy") is None
    if with_template:
        assert h.claim()["status"]["sandbox"]["name"] == "claim"
    else:
        assert h.ready()["reason"] == "TemplateNotFound"


async def test_a_network_policy_of_that_name_without_the_claim_as_owner_is_kept() -> None:
    h = Harness()
    h.add(SANDBOX_TEMPLATES.plural, template())
    h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(warmpool="none"))
    h.add("networkpolicies", legacy_policy(None))
    await h.reconcile()
    assert h.api.stored("networkpolicies", NS, "claim-network-policy") is not None
