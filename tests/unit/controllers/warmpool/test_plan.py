"""The SandboxWarmPool decision function, scenario by scenario (docs/design/warmpool.md, "Tests":
upstream 35b9757f's ``sandboxwarmpool_controller_test.go`` plus one test per deliberate change).

Each test builds a snapshot the way the reconciler would observe it and checks the plan. Where
an upstream test runs two reconcile passes, ``converge`` applies each plan to an in-memory set of
sandboxes (creates get names, deletes vanish, adoptions set the owner) and plans again.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.defaults import apply_sandbox_secure_defaults
from agentsandbox.api.hashing import name_hash, pod_template_hash, sandbox_blueprint_hash
from agentsandbox.api.kinds import SANDBOX, SANDBOX_WARM_POOL
from agentsandbox.controllers.claim.claimed_sandbox import adoption_patch, cold_sandbox
from agentsandbox.controllers.warmpool.blueprint import (
    build_blueprint,
    is_sandbox_stale,
    pod_specs_match,
)
from agentsandbox.controllers.warmpool.plan import (
    EVENT_NOT_PROGRESSING,
    EVENT_PROGRESSING,
    HELD_BACK_RECHECK,
    POD_CACHE_WAIT,
    REASON_BLOCKED,
    REASON_READY,
    REASON_TEMPLATE_ERROR,
    REASON_TEMPLATE_NOT_FOUND,
    Plan,
    Settings,
    Snapshot,
    not_progressing_reason,
    plan,
    transition_event,
)

NOW = 1_800_000_000.0
NS = "default"
_names = itertools.count()


def iso(ts: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def template(name: str = "test-template", image: str = "test-image", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_WARM_POOL.api_version,
        "kind": "SandboxTemplate",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": {
            "podTemplate": {
                "spec": {"containers": [{"name": "test-container", "image": image}]},
                **spec.pop("pod_meta", {}),
            },
            **spec,
        },
    }


def pool(
    replicas: int = 3,
    tpl: str = "test-template",
    strategy: str | None = None,
    name: str = "test-pool",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": replicas, "sandboxTemplateRef": {"name": tpl}}
    if strategy is not None:
        spec["updateStrategy"] = {"type": strategy}
    return {
        "apiVersion": SANDBOX_WARM_POOL.api_version,
        "kind": "SandboxWarmPool",
        "metadata": {"name": name, "namespace": NS, "uid": "pool-uid", "generation": 1},
        "spec": spec,
    }


def owner(p: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_WARM_POOL.api_version,
        "kind": "SandboxWarmPool",
        "name": p["metadata"]["name"],
        "uid": p["metadata"]["uid"],
        "controller": True,
    }


def sandbox(
    p: dict[str, Any],
    t: dict[str, Any],
    *,
    owned: bool = False,
    foreign: bool = False,
    ready: bool | None = True,
    age: float = 60.0,
    image: str | None = None,
    hash_label: str | None = None,
    old_controller: bool = False,
) -> dict[str, Any]:
    """A pool sandbox like upstream's createPoolSandbox helper (an orphan unless owned).

    It carries both hash labels, unless ``old_controller``: then only the deprecated
    pod-template hash, like a sandbox made before upstream #1102."""
    spec = copy.deepcopy(t["spec"]["podTemplate"]["spec"])
    if image is not None:
        spec["containers"][0]["image"] = image
    spec = apply_sandbox_secure_defaults(t, spec)
    labels = {
        keys.LABEL_WARM_POOL_SANDBOX: name_hash(p["metadata"]["name"]),
        keys.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash(t["metadata"]["name"]),
        keys.LABEL_SANDBOX_POD_TEMPLATE_HASH: hash_label
        or pod_template_hash(t["spec"]["podTemplate"]),
    }
    if not old_controller:
        labels[keys.LABEL_SANDBOX_TEMPLATE_HASH] = sandbox_blueprint_hash(t["spec"])
    n = next(_names)
    sb: dict[str, Any] = {
        "apiVersion": SANDBOX.api_version,
        "kind": "Sandbox",
        "metadata": {
            "name": f"sb-{n}",
            "namespace": NS,
            "uid": f"sb-uid-{n}",
            "labels": labels,
            "creationTimestamp": iso(NOW - age),
        },
        "spec": {"replicas": 1, "podTemplate": {"spec": spec, "metadata": {"labels": labels}}},
        "status": {},
    }
    for extra in ("volumeClaimTemplates", "service"):
        if t["spec"].get(extra) is not None:
            sb["spec"][extra] = copy.deepcopy(t["spec"][extra])
    if owned:
        sb["metadata"]["ownerReferences"] = [owner(p)]
    if foreign:
        sb["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "rs",
                "uid": "rs-uid",
                "controller": True,
            }
        ]
    if ready is not None:
        sb["status"]["conditions"] = [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": "DependenciesReady" if ready else "DependenciesNotReady",
            }
        ]
    return sb


def snap(
    p: dict[str, Any], sbs: list[dict[str, Any]], t: dict[str, Any] | None, **kw: Any
) -> Snapshot:
    return Snapshot(
        pool=p,
        sandboxes=sbs,
        template=t,
        template_error=None if t is not None else "NotFound",
        now=NOW,
        **kw,
    )


def apply(p: dict[str, Any], sbs: list[dict[str, Any]], pl: Plan) -> list[dict[str, Any]]:
    """What the API would hold after acting on a plan (deletes instant, creates Ready)."""
    gone = {sb["metadata"]["uid"] for sb in pl.delete_stale + pl.delete_stuck + pl.delete_excess}
    adopted = {sb["metadata"]["uid"] for sb in pl.adopt}
    out = []
    for sb in sbs:
        if sb["metadata"]["uid"] in gone:
            continue
        if sb["metadata"]["uid"] in adopted:
            sb = copy.deepcopy(sb)
            sb["metadata"]["ownerReferences"] = [owner(p)]
        out.append(sb)
    for _ in range(pl.create):
        assert pl.blueprint is not None
        new = copy.deepcopy(pl.blueprint)
        n = next(_names)
        new["metadata"]["name"] = f"{new['metadata'].pop('generateName')}{n}"
        new["metadata"]["uid"] = f"new-uid-{n}"
        new["metadata"]["creationTimestamp"] = iso(NOW)
        new["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
        out.append(new)
    return out


def converge(
    p: dict[str, Any], sbs: list[dict[str, Any]], t: dict[str, Any] | None, passes: int = 2
) -> tuple[list[dict[str, Any]], Plan]:
    pl = Plan()
    for _ in range(passes):
        pl = plan(snap(p, sbs, t))
        sbs = apply(p, sbs, pl)
    return sbs, pl


def pool_members(p: dict[str, Any], sbs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    uid = p["metadata"]["uid"]
    return [
        sb
        for sb in sbs
        if any(
            r.get("uid") == uid and r.get("controller")
            for r in sb["metadata"].get("ownerReferences", [])
        )
    ]


# ------------------------------------------------------------------ TestReconcilePool
@pytest.mark.parametrize("existing", [0, 1, 4, 3])
def test_reconcile_pool_converges_to_spec_replicas(existing: int) -> None:
    t, p = template(), pool(3)
    sbs = [sandbox(p, t, owned=True) for _ in range(existing)]
    sbs, last = converge(p, sbs, t)
    assert len(sbs) == 3
    assert last.status["replicas"] == 3
    assert last.status["selector"] == f"agents.x-k8s.io/warm-pool-sandbox={name_hash('test-pool')}"


def test_reconcile_pool_without_replicas_keeps_one_as_the_crd_default() -> None:
    t, p = template(), pool(3)
    del p["spec"]["replicas"]  # optional, default 1 (upstream #975)
    sbs, last = converge(p, [], t)
    assert len(sbs) == 1 and last.status["replicas"] == 1


def test_reconcile_pool_over_provisioned_deletes_one() -> None:
    t, p = template(), pool(3)
    sbs = [sandbox(p, t, owned=True) for _ in range(4)]
    pl = plan(snap(p, sbs, t))
    assert len(pl.delete_excess) == 1 and pl.create == 0
    assert pl.status["replicas"] == 4  # status reflects the population before this pass's writes


# ------------------------------------------------------------------ TestReconcilePoolControllerRef
def test_controller_ref_orphans_are_adopted() -> None:
    t, p = template(), pool(2)
    sbs = [sandbox(p, t), sandbox(p, t)]
    pl = plan(snap(p, sbs, t))
    assert [s["metadata"]["uid"] for s in pl.adopt] == [s["metadata"]["uid"] for s in sbs]
    assert pl.create == 0 and pl.status["replicas"] == 2


def test_controller_ref_already_owned_are_kept() -> None:
    t, p = template(), pool(2)
    pl = plan(snap(p, [sandbox(p, t, owned=True), sandbox(p, t, owned=True)], t))
    assert (pl.adopt, pl.create, pl.delete_excess, pl.status["replicas"]) == ([], 0, [], 2)


def test_controller_ref_foreign_sandboxes_are_ignored_and_replaced() -> None:
    t, p = template(), pool(2)
    sbs = [sandbox(p, t, foreign=True), sandbox(p, t, foreign=True)]
    sbs, last = converge(p, sbs, t)
    assert len(pool_members(p, sbs)) == 2
    assert len(sbs) == 4  # the foreign ones are untouched
    assert last.status["replicas"] == 2


def test_controller_ref_mix_of_owned_orphan_and_foreign() -> None:
    t, p = template(), pool(2)
    sbs = [sandbox(p, t, owned=True), sandbox(p, t), sandbox(p, t, foreign=True)]
    pl = plan(snap(p, sbs, t))
    assert len(pl.adopt) == 1 and pl.create == 0
    assert pl.status["replicas"] == 2


# ------------------------------------------------------------------ blueprint
def test_pool_label_values_and_template_pod_metadata_are_propagated() -> None:
    t = template(
        pod_meta={
            "metadata": {
                "labels": {"pod-label": "v", "version": "1"},
                "annotations": {"pod-annotation": "a"},
            }
        }
    )
    p = pool(1)
    bp = build_blueprint(p, t, pod_template_hash(t["spec"]["podTemplate"]))
    labels = bp["spec"]["podTemplate"]["metadata"]["labels"]
    assert labels["pod-label"] == "v" and labels["version"] == "1"
    assert bp["spec"]["podTemplate"]["metadata"]["annotations"] == {"pod-annotation": "a"}
    assert bp["metadata"]["labels"][keys.LABEL_WARM_POOL_SANDBOX] == name_hash("test-pool")
    assert bp["metadata"]["labels"][keys.LABEL_SANDBOX_TEMPLATE_REF_HASH] == name_hash(
        "test-template"
    )
    for k in (
        keys.LABEL_WARM_POOL_SANDBOX,
        keys.LABEL_SANDBOX_TEMPLATE_REF_HASH,
        keys.LABEL_SANDBOX_POD_TEMPLATE_HASH,
    ):
        assert labels[k] == bp["metadata"]["labels"][k]
    assert bp["metadata"]["generateName"] == "test-pool-"
    assert bp["metadata"]["ownerReferences"][0]["controller"] is True


def test_create_pool_sandbox_propagates_volume_claim_templates() -> None:
    vcts = [
        {"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}},
        {"metadata": {"name": "cache"}, "spec": {"resources": {"requests": {"storage": "500Mi"}}}},
    ]
    t = template(volumeClaimTemplates=vcts)
    bp = build_blueprint(pool(1), t, "h")
    assert bp["spec"]["volumeClaimTemplates"] == vcts
    assert bp["metadata"]["annotations"] == {keys.ANNOTATION_SANDBOX_TEMPLATE_REF: "test-template"}


def test_create_pool_sandbox_applies_secure_defaults_managed() -> None:
    spec = build_blueprint(pool(1), template(), "h")["spec"]["podTemplate"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["dnsPolicy"] == "None"
    assert spec["dnsConfig"] == {"nameservers": ["8.8.8.8", "1.1.1.1"]}


def test_create_pool_sandbox_keeps_explicit_automount_true() -> None:
    t = template()
    t["spec"]["podTemplate"]["spec"]["automountServiceAccountToken"] = True
    spec = build_blueprint(pool(1), t, "h")["spec"]["podTemplate"]["spec"]
    assert spec["automountServiceAccountToken"] is True and spec["dnsPolicy"] == "None"


def test_create_pool_sandbox_unmanaged_network_policy_leaves_dns_alone() -> None:
    t = template(networkPolicyManagement="Unmanaged")
    spec = build_blueprint(pool(1), t, "h")["spec"]["podTemplate"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert "dnsPolicy" not in spec and "dnsConfig" not in spec


# ------------------------------------------------------------------ ready replicas
def test_ready_replicas_counts_ready_condition_true_only() -> None:
    t, p = template(), pool(3)
    sbs = [
        sandbox(p, t, owned=True, ready=False),
        sandbox(p, t, owned=True, ready=True),
        sandbox(p, t, owned=True, ready=None),
    ]
    assert plan(snap(p, sbs, t)).status["readyReplicas"] == 1
    sbs = [sandbox(p, t, owned=True) for _ in range(3)]
    assert plan(snap(p, sbs, t)).status["readyReplicas"] == 3


# ------------------------------------------------------------------ stuck GC
def test_gc_stuck_sandbox_older_than_grace_period_is_replaced() -> None:
    t, p = template(), pool(2)
    stuck = sandbox(p, t, owned=True, ready=False, age=600)
    sbs = [stuck, sandbox(p, t, owned=True)]
    pl = plan(snap(p, sbs, t))
    assert [s["metadata"]["uid"] for s in pl.delete_stuck] == [stuck["metadata"]["uid"]]
    sbs, _ = converge(p, sbs, t)
    assert len(sbs) == 2 and stuck["metadata"]["uid"] not in {s["metadata"]["uid"] for s in sbs}


def test_gc_keeps_unready_sandbox_within_grace_period_and_requeues_at_its_deadline() -> None:
    t, p = template(), pool(2)
    sbs = [sandbox(p, t, owned=True, ready=False, age=120), sandbox(p, t, owned=True)]
    pl = plan(snap(p, sbs, t))
    assert pl.delete_stuck == [] and pl.status["replicas"] == 2
    assert pl.requeue_after == pytest.approx(300 - 120 + 1)


def test_grace_period_comes_from_settings() -> None:
    t, p = template(), pool(1)
    sbs = [sandbox(p, t, owned=True, ready=False, age=20)]
    pl = plan(snap(p, sbs, t, settings=Settings(readiness_grace_period=10)))
    assert len(pl.delete_stuck) == 1


def test_unschedulable_sandbox_is_held_and_reported_not_churned() -> None:
    t, p = template(), pool(1)
    sb = sandbox(p, t, owned=True, ready=False, age=600)
    pod = {
        "metadata": {"name": sb["metadata"]["name"]},
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/10 nodes are available",
                }
            ]
        },
    }
    pl = plan(snap(p, [sb], t, pods={sb["metadata"]["name"]: pod}))
    assert pl.delete_stuck == [] and len(pl.held) == 1
    ready = pl.status["conditions"][0]
    assert ready["status"] == "False" and ready["reason"] == REASON_BLOCKED
    assert "0/10 nodes are available" in ready["message"]
    assert pl.requeue_after == 60.0


def test_sandbox_whose_pod_is_rejected_is_held() -> None:
    t, p = template(), pool(1)
    sb = sandbox(p, t, owned=True, ready=None, age=600)
    sb["status"]["conditions"] = [
        {
            "type": "Ready",
            "status": "False",
            "reason": "ReconcilerError",
            "message": 'Error seen: pods "x" is forbidden: exceeded quota',
        }
    ]
    pl = plan(snap(p, [sb], t))
    assert pl.delete_stuck == [] and "exceeded quota" in pl.held[0][1]


# ------------------------------------------------------------------ rollout
@pytest.mark.parametrize("strategy", ["Recreate"])
def test_template_update_rollout_recreate_replaces_every_sandbox(strategy: str) -> None:
    v1, p = template(image="image-v1"), pool(2, strategy=strategy)
    sbs = [sandbox(p, v1, owned=True) for _ in range(2)]
    v2 = template(image="image-v2")
    assert pod_template_hash(v1["spec"]["podTemplate"]) != pod_template_hash(
        v2["spec"]["podTemplate"]
    )
    sbs, _ = converge(p, sbs, v2, passes=3)
    assert len(sbs) == 2
    assert {s["spec"]["podTemplate"]["spec"]["containers"][0]["image"] for s in sbs} == {"image-v2"}
    assert {s["metadata"]["labels"][keys.LABEL_SANDBOX_POD_TEMPLATE_HASH] for s in sbs} == {
        pod_template_hash(v2["spec"]["podTemplate"])
    }


@pytest.mark.parametrize("strategy", ["OnReplenish", "", None, "Bogus"])
def test_template_update_rollout_on_replenish_keeps_old_until_replaced(
    strategy: str | None,
) -> None:
    v1, p = template(image="image-v1"), pool(2, strategy=strategy)
    sbs = [sandbox(p, v1, owned=True) for _ in range(2)]
    v2 = template(image="image-v2")
    sbs, _ = converge(p, sbs, v2)
    assert {s["spec"]["podTemplate"]["spec"]["containers"][0]["image"] for s in sbs} == {"image-v1"}
    sbs = sbs[1:]  # one is deleted (e.g. adopted by a claim)
    sbs, _ = converge(p, sbs, v2)
    images = sorted(s["spec"]["podTemplate"]["spec"]["containers"][0]["image"] for s in sbs)
    assert images == ["image-v1", "image-v2"]


def test_template_ref_update_same_spec_replaces_every_sandbox() -> None:
    old, p = template(name="old-template"), pool(2, tpl="new-template", strategy="Recreate")
    sbs = [sandbox(p, old, owned=True) for _ in range(2)]
    new = template(name="new-template")
    after, _ = converge(p, sbs, new, passes=3)
    assert len(after) == 2
    assert not {s["metadata"]["uid"] for s in sbs} & {s["metadata"]["uid"] for s in after}
    assert {s["metadata"]["labels"][keys.LABEL_SANDBOX_TEMPLATE_REF_HASH] for s in after} == {
        name_hash("new-template")
    }
    assert {s["spec"]["podTemplate"]["spec"]["containers"][0]["image"] for s in after} == {
        "test-image"
    }, "same spec: the image is unchanged, only the template reference moved"


def test_template_update_dns_policy_rolls_under_recreate() -> None:
    t1 = template(networkPolicyManagement="Unmanaged")
    t1["spec"]["podTemplate"]["spec"]["dnsPolicy"] = "Default"
    p = pool(2, strategy="Recreate")
    sbs = [sandbox(p, t1, owned=True) for _ in range(2)]
    t2 = copy.deepcopy(t1)
    t2["spec"]["podTemplate"]["spec"]["dnsPolicy"] = "ClusterFirst"
    sbs, _ = converge(p, sbs, t2, passes=3)
    assert {s["spec"]["podTemplate"]["spec"]["dnsPolicy"] for s in sbs} == {"ClusterFirst"}


# ------------------------------------------------------------------ comparePodSpecs
def test_compare_pod_specs_normalization() -> None:
    t = template()
    base = copy.deepcopy(t["spec"]["podTemplate"]["spec"])
    assert pod_specs_match(t, apply_sandbox_secure_defaults(t, base))
    # nil and empty lists/maps are semantically equal (the apiserver may drop or keep them)
    assert pod_specs_match(
        t,
        {
            **apply_sandbox_secure_defaults(t, copy.deepcopy(base)),
            "volumes": [],
            "nodeSelector": {},
        },
    )
    assert not pod_specs_match(
        t, {**apply_sandbox_secure_defaults(t, base), "automountServiceAccountToken": True}
    )
    un = template(networkPolicyManagement="Unmanaged")
    un["spec"]["podTemplate"]["spec"]["dnsPolicy"] = "ClusterFirst"
    actual = apply_sandbox_secure_defaults(un, copy.deepcopy(un["spec"]["podTemplate"]["spec"]))
    assert pod_specs_match(un, actual)
    assert not pod_specs_match(un, {**actual, "dnsPolicy": "Default"})


def test_is_sandbox_stale_orphan_with_spoofed_hash_but_different_image() -> None:
    t, p = template(), pool(1)
    spoofed = sandbox(p, t, image="evil-image")  # labels claim the current hash
    assert is_sandbox_stale(
        spoofed, t, pod_template_hash(t["spec"]["podTemplate"]), {}, orphan=True
    )
    pl = plan(snap(p, [spoofed], t))
    assert pl.delete_stale == [spoofed] and pl.adopt == []


def test_is_sandbox_stale_genuine_orphan_is_fresh_and_adopted() -> None:
    t, p = template(), pool(1)
    genuine = sandbox(p, t)
    assert not is_sandbox_stale(
        genuine, t, pod_template_hash(t["spec"]["podTemplate"]), {}, orphan=True
    )
    assert plan(snap(p, [genuine], t)).adopt == [genuine]


def test_is_sandbox_stale_memoises_verdict_per_drift_hash() -> None:
    t, p = template(), pool(2, strategy="Recreate")
    old = template(image="old")
    a = sandbox(p, old, owned=True)
    vetted: dict[str, bool] = {}
    assert is_sandbox_stale(a, t, "current", vetted, orphan=False)
    h = a["metadata"]["labels"][keys.LABEL_SANDBOX_TEMPLATE_HASH]
    key = f"{keys.LABEL_SANDBOX_TEMPLATE_HASH}={h}"
    assert vetted == {key: True}
    vetted[key] = False  # a memoised verdict is reused, not recomputed
    assert not is_sandbox_stale(a, t, "current", vetted, orphan=False)


def test_hashing_failure_never_marks_owned_sandboxes_stale() -> None:
    t, p = template(), pool(1, strategy="Recreate")
    sb = sandbox(p, template(image="other"), owned=True)
    assert not is_sandbox_stale(sb, t, "", {}, orphan=False)


# ------------------------------------------------------------------ missing template
def test_missing_template_creates_nothing_but_writes_status_and_reports_it() -> None:
    p = pool(3)
    pl = plan(snap(p, [], None))
    assert pl.create == 0 and pl.blueprint is None
    cond = pl.status["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", REASON_TEMPLATE_NOT_FOUND)
    assert pl.status["replicas"] == 0 and pl.status["readyReplicas"] == 0


def test_missing_template_still_deletes_excess() -> None:
    t, p = template(), pool(1)
    sbs = [sandbox(p, t, owned=True) for _ in range(3)]
    pl = plan(snap(p, sbs, None))
    assert len(pl.delete_excess) == 2


def test_missing_template_orphans_are_neither_adopted_nor_counted() -> None:
    t, p = template(), pool(2)
    pl = plan(snap(p, [sandbox(p, t), sandbox(p, t)], None))
    assert pl.adopt == [] and pl.status["replicas"] == 0


# ------------------------------------------------------------------ deletion order / batch cap
def test_delete_unready_first_then_newest_first() -> None:
    t, p = template(), pool(1)
    old_ready = sandbox(p, t, owned=True, age=500)
    new_ready = sandbox(p, t, owned=True, age=10)
    unready = sandbox(p, t, owned=True, ready=False, age=100)
    pl = plan(snap(p, [old_ready, new_ready, unready], t))
    assert [s["metadata"]["uid"] for s in pl.delete_excess] == [
        unready["metadata"]["uid"],
        new_ready["metadata"]["uid"],
    ]


def test_creates_and_deletes_are_capped_by_max_batch_size() -> None:
    t = template()
    pl = plan(snap(pool(1000), [], t, settings=Settings(max_batch_size=300)))
    assert pl.create == 300
    p = pool(0)
    sbs = [sandbox(p, t, owned=True) for _ in range(10)]
    assert len(plan(snap(p, sbs, t, settings=Settings(max_batch_size=4))).delete_excess) == 4


# ------------------------------------------------------------------ expectations
def test_unsatisfied_expectations_block_creates_and_deletes() -> None:
    t = template()
    pl = plan(snap(pool(5), [], t, expectations_satisfied=False))
    assert pl.create == 0
    p = pool(0)
    pl = plan(snap(p, [sandbox(p, t, owned=True)], t, expectations_satisfied=False))
    assert pl.delete_excess == []


def test_terminating_sandboxes_count_against_creates() -> None:
    t, p = template(), pool(2)
    leaving = sandbox(p, t, owned=True)
    leaving["metadata"]["deletionTimestamp"] = iso(NOW)
    pl = plan(snap(p, [leaving, sandbox(p, t, owned=True)], t))
    assert pl.status["replicas"] == 1
    assert pl.create == 0  # 1 active + 1 terminating: creating now could exceed 2


# ------------------------------------------------------------------ status and events
def test_status_goes_back_to_zero_counts() -> None:
    t, p = template(), pool(0)
    p["status"] = {"replicas": 2, "readyReplicas": 2}
    pl = plan(snap(p, [], t))
    assert pl.status["replicas"] == 0 and pl.status["readyReplicas"] == 0
    assert pl.status["observedGeneration"] == 1


def test_full_pool_is_ready() -> None:
    t, p = template(), pool(2)
    pl = plan(snap(p, [sandbox(p, t, owned=True) for _ in range(2)], t))
    cond = pl.status["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"]) == ("Ready", "True", REASON_READY)


def test_events_fire_on_entering_and_leaving_a_stuck_state() -> None:
    t, p = template(), pool(1)
    stuck = plan(snap(p, [], None)).status
    assert transition_event(None, stuck) == (
        "Warning",
        EVENT_NOT_PROGRESSING,
        'SandboxTemplate "test-template" not found',
    )
    assert not_progressing_reason(stuck) == REASON_TEMPLATE_NOT_FOUND
    assert transition_event(REASON_TEMPLATE_NOT_FOUND, stuck) is None
    fine = plan(snap({**p, "status": stuck}, [], t)).status
    ev = transition_event(REASON_TEMPLATE_NOT_FOUND, fine)
    assert ev is not None and ev[:2] == ("Normal", EVENT_PROGRESSING)
    assert transition_event(None, fine) is None


def test_events_fire_again_when_the_not_progressing_reason_changes() -> None:
    t, p = template(), pool(1)
    sb = sandbox(p, t, owned=True, ready=None, age=600)
    sb["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "reason": "ReconcilerError", "message": "quota"}
    ]
    blocked = plan(snap(p, [sb], t)).status
    ev = transition_event(REASON_TEMPLATE_NOT_FOUND, blocked)
    assert ev is not None and ev[:2] == ("Warning", EVENT_NOT_PROGRESSING)


def _pod(sb: dict[str, Any], created_ago: float, scheduled_ago: float) -> dict[str, Any]:
    return {
        "metadata": {"name": sb["metadata"]["name"], "creationTimestamp": iso(NOW - created_ago)},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": iso(NOW - scheduled_ago),
                }
            ],
        },
    }


def test_grace_period_restarts_when_a_held_sandbox_finally_gets_its_pod() -> None:
    """A sandbox held as blocked for 10 minutes whose pod was just created is not 'stuck' yet."""
    t, p = template(), pool(1)
    sb = sandbox(p, t, owned=True, ready=False, age=600)
    pods = {sb["metadata"]["name"]: _pod(sb, 30, 20)}
    held = frozenset({sb["metadata"]["uid"]})
    pl = plan(snap(p, [sb], t, pods=pods, held_before=held))
    assert pl.delete_stuck == [] and pl.held == []
    assert pl.requeue_after == pytest.approx(300 - 20 + 1)
    assert pl.held_uids == held, "its fresh grace period must last until it is Ready"
    # ... and it is replaced once that fresh grace period has passed too
    pods = {sb["metadata"]["name"]: _pod(sb, 400, 400)}
    assert len(plan(snap(p, [sb], t, pods=pods, held_before=held)).delete_stuck) == 1


def test_grace_period_does_not_restart_for_a_recreated_pod_of_a_sandbox_never_held() -> None:
    """A pod recreated (eviction, drain) or rescheduled does not reset the clock of a sandbox
    that was never held as blocked; upstream's rule times it from the sandbox's creation
    (docs/design/warmpool.md, "Stuck sandboxes")."""
    t, p = template(), pool(1)
    sb = sandbox(p, t, owned=True, ready=False, age=3600)
    pods = {sb["metadata"]["name"]: _pod(sb, 60, 50)}
    pl = plan(snap(p, [sb], t, pods=pods))
    assert [s["metadata"]["uid"] for s in pl.delete_stuck] == [sb["metadata"]["uid"]]
    assert pl.held_uids == frozenset()


def test_held_sandbox_is_remembered_and_forgotten_once_ready() -> None:
    t, p = template(), pool(1)
    sb = sandbox(p, t, owned=True, ready=None, age=600)
    sb["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "reason": "ReconcilerError", "message": "quota"}
    ]
    pl = plan(snap(p, [sb], t))
    assert pl.held_uids == frozenset({sb["metadata"]["uid"]})
    ready = copy.deepcopy(sb)
    ready["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    assert plan(snap(p, [ready], t, held_before=pl.held_uids)).held_uids == frozenset()


def test_sandbox_reporting_a_pod_the_cache_has_not_seen_is_kept_at_most_10_seconds() -> None:
    """The 'pod cache lags' exception is bounded; at 11 s upstream's stuck rule applies
    (docs/design/warmpool.md, "Stuck sandboxes")."""
    t, p = template(), pool(1)
    sb = sandbox(p, t, owned=True, ready=False, age=600)
    sb["status"]["replicas"] = 1
    uid = sb["metadata"]["uid"]
    first = plan(snap(p, [sb], t))
    assert first.delete_stuck == [] and first.pod_missing_since == {uid: NOW}
    assert first.requeue_after == pytest.approx(POD_CACHE_WAIT + 1.0), "no 1 Hz polling"
    nine = plan(snap(p, [sb], t, pod_missing_since={uid: NOW - 9}))
    assert nine.delete_stuck == [] and nine.requeue_after == pytest.approx(2.0)
    eleven = plan(snap(p, [sb], t, pod_missing_since={uid: NOW - 11}))
    assert [s["metadata"]["uid"] for s in eleven.delete_stuck] == [uid]


def test_sandbox_reporting_a_missing_pod_within_grace_is_not_deleted_after_the_wait() -> None:
    t, p = template(), pool(1)
    sb = sandbox(p, t, owned=True, ready=False, age=60)
    sb["status"]["replicas"] = 1
    uid = sb["metadata"]["uid"]
    pl = plan(snap(p, [sb], t, pod_missing_since={uid: NOW - 30}))
    assert pl.delete_stuck == [] and pl.requeue_after == pytest.approx(300 - 60 + 1)


# ------------------------------------------------------------------ deliberate changes (plan side)
def test_stuck_orphan_is_deleted_not_adopted_in_the_same_pass() -> None:
    """Never adopt what this pass deletes (it used to DELETE, then PUT -> 404;
    docs/design/warmpool.md, "Sorting the members")."""
    t, p = template(), pool(1)
    orphan = sandbox(p, t, ready=False, age=600)
    pl = plan(snap(p, [orphan], t))
    assert pl.delete_stuck == [orphan] and pl.adopt == []
    assert pl.create == 1, "an orphan's delete does not hold the replacement back"


def test_terminating_sandboxes_of_others_do_not_hold_creates_back() -> None:
    """Only the pool's own terminating sandboxes count as in flight (docs/design/warmpool.md,
    "Replenishing the pool")."""
    t, p = template(), pool(2)
    foreign = sandbox(p, t, foreign=True)
    orphan = sandbox(p, t)
    for sb in (foreign, orphan):
        sb["metadata"]["deletionTimestamp"] = iso(NOW - 1)
    pl = plan(snap(p, [foreign, orphan], t))
    assert pl.create == 2 and pl.held_back == 0 and pl.requeue_after is None


def test_stale_orphan_delete_does_not_hold_creates_back() -> None:
    t, p = template(), pool(1)
    stale_orphan = sandbox(p, template(image="other"))
    pl = plan(snap(p, [stale_orphan], t))
    assert pl.delete_stale == [stale_orphan] and pl.create == 1


def test_own_terminating_sandboxes_hold_creates_back_and_requeue() -> None:
    t, p = template(), pool(2)
    leaving = sandbox(p, t, owned=True)
    leaving["metadata"]["deletionTimestamp"] = iso(NOW - 1)
    pl = plan(snap(p, [leaving, sandbox(p, t, owned=True)], t))
    assert (pl.create, pl.held_back) == (0, 1)
    assert pl.requeue_after == pytest.approx(HELD_BACK_RECHECK)


def test_orphan_whose_adoption_failed_is_not_counted() -> None:
    """A failed adoption is skipped, so a replacement is made (upstream's rule;
    docs/design/warmpool.md, "Sorting the members")."""
    t, p = template(), pool(1)
    orphan = sandbox(p, t)
    first = plan(snap(p, [orphan], t))
    assert first.adopt == [orphan] and first.create == 0
    again = plan(snap(p, [orphan], t, skip=frozenset({orphan["metadata"]["uid"]})))
    assert again.adopt == [] and again.status["replicas"] == 0 and again.create == 1


def test_template_hash_failure_creates_nothing_and_reports_template_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hash error is the template error (docs/design/warmpool.md, "Template errors")."""
    import agentsandbox.controllers.warmpool.plan as wp
    from agentsandbox.api.gojson import GoJSONError

    def broken(_: Any) -> str:
        raise GoJSONError("unsupported value")

    monkeypatch.setattr(wp, "pod_template_hash", broken)
    t, p = template(), pool(3, strategy="Recreate")
    old = sandbox(p, template(image="old"), owned=True)
    pl = plan(snap(p, [old, sandbox(p, t)], t))
    assert pl.create == 0 and pl.blueprint is None
    assert pl.delete_stale == [] and pl.adopt == [], "no staleness checks, no unvetted adoption"
    cond = pl.status["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", REASON_TEMPLATE_ERROR)
    assert "unsupported value" in cond["message"]
    assert pl.status["replicas"] == 1


def test_recreate_rollout_takes_exactly_two_passes_deletes_then_creates() -> None:
    """Documented deviation: upstream 35b9757f deletes and creates in one pass; here creates
    wait until the deletes are gone, so a pool never holds more than spec.replicas
    (docs/design/warmpool.md, "Replenishing the pool")."""
    v1, p = template(image="image-v1"), pool(2, strategy="Recreate")
    sbs = [sandbox(p, v1, owned=True) for _ in range(2)]
    v2 = template(image="image-v2")
    first = plan(snap(p, sbs, v2))
    assert (len(first.delete_stale), first.create) == (2, 0)
    sbs = apply(p, sbs, first)
    second = plan(snap(p, sbs, v2))
    assert (len(second.delete_stale), second.create) == (0, 2)
    sbs = apply(p, sbs, second)
    third = plan(snap(p, sbs, v2))
    assert (third.delete_stale, third.create, third.delete_excess) == ([], 0, [])


def test_stale_orphan_with_wrong_template_ref_hash_is_deleted_under_on_replenish() -> None:
    t, p = template(), pool(1)
    orphan = sandbox(p, t)
    orphan["metadata"]["labels"][keys.LABEL_SANDBOX_TEMPLATE_REF_HASH] = name_hash("elsewhere")
    pl = plan(snap(p, [orphan], t))
    assert pl.delete_stale == [orphan] and pl.adopt == [] and pl.create == 1


@pytest.mark.parametrize(
    ("states", "ready"),
    [
        (["False", "Unknown", "False"], 0),
        (["True", "True", "False"], 2),
        (["True", "True", "True"], 3),
    ],
)
def test_ready_replicas_by_condition_status(states: list[str], ready: int) -> None:
    """Upstream TestReconcilePoolReadyReplicas: only status "True" counts."""
    t, p = template(), pool(3)
    sbs = []
    for state in states:
        sb = sandbox(p, t, owned=True)
        sb["status"]["conditions"][0]["status"] = state
        sbs.append(sb)
    assert plan(snap(p, sbs, t)).status["readyReplicas"] == ready


def test_blueprint_sandbox_is_labelled_created_by_controller_not_its_pod() -> None:
    bp = build_blueprint(pool(1), template(), "h")  # upstream #1039
    assert bp["metadata"]["labels"][keys.LABEL_CREATED_BY] == "controller"
    assert keys.LABEL_CREATED_BY not in bp["spec"]["podTemplate"]["metadata"]["labels"]


def test_blueprint_fields_and_deep_copies() -> None:
    t = template(
        service=True,  # a *bool in the Sandbox API
        volumeClaimTemplates=[{"metadata": {"name": "data"}, "spec": {}}],
    )
    p = pool(1)
    bp = build_blueprint(p, t, "h")
    assert bp["spec"]["replicas"] == 1
    assert bp["spec"]["service"] is True
    assert bp["metadata"]["namespace"] == NS
    ref = bp["metadata"]["ownerReferences"][0]
    assert ref == {
        "apiVersion": SANDBOX_WARM_POOL.api_version,
        "kind": "SandboxWarmPool",
        "name": "test-pool",
        "uid": "pool-uid",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    bp["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] = "changed"
    bp["spec"]["podTemplate"]["spec"]["containers"][0]["image"] = "changed"
    assert t["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    assert t["spec"]["podTemplate"]["spec"]["containers"][0]["image"] == "test-image"


# ------------------------------------------------------- replenish delay, refill rate (#1251)
DELAY = Settings(replenish_delay=10.0)


def uids(sbs: list[dict[str, Any]]) -> frozenset[str]:
    return frozenset(sb["metadata"]["uid"] for sb in sbs)


def next_pass(
    p: dict[str, Any], sbs: list[dict[str, Any]], t: dict[str, Any], prev: Plan, at: float
) -> Plan:
    """A pass at ``NOW + at`` carrying what the reconciler remembers from ``prev``."""
    s = snap(p, sbs, t, settings=DELAY, members_before=prev.members)
    return plan(
        dataclasses.replace(s, now=NOW + at, missing_since=prev.missing_since, owed=prev.owed)
    )


def test_replenish_delay_holds_a_replacement_from_the_first_missing_observation() -> None:
    t, p = template(), pool(3)
    sbs = [sandbox(p, t, owned=True) for _ in range(3)]
    first = plan(snap(p, sbs, t, settings=DELAY))  # a full pool: nothing owed
    assert (first.create, first.owed, first.members) == (0, 0, uids(sbs))
    left = next_pass(p, sbs[1:], t, first, at=2.0)  # a claim adopted sbs[0]
    assert (left.create, left.replenish_held, left.owed) == (0, 1, 1)
    assert left.missing_since == NOW + 2.0 and left.requeue_after == 10.0
    waiting = next_pass(p, sbs[1:], t, left, at=8.0)  # counted from the first observation
    assert (waiting.create, waiting.owed, waiting.missing_since) == (0, 1, NOW + 2.0)
    assert waiting.requeue_after == 4.0
    due = next_pass(p, sbs[1:], t, waiting, at=12.0)
    assert (due.create, due.owed, due.missing_since, due.requeue_after) == (1, 0, None, None)


def test_replenish_hold_re_arms_while_members_keep_leaving() -> None:
    t, p = template(), pool(3)
    sbs = [sandbox(p, t, owned=True) for _ in range(3)]
    first = plan(snap(p, sbs, t, settings=DELAY))
    one = next_pass(p, sbs[1:], t, first, at=0.0)
    two = next_pass(p, sbs[2:], t, one, at=6.0)  # another one leaves: the hold starts again
    assert (two.create, two.owed, two.missing_since, two.requeue_after) == (0, 2, NOW + 6, 10.0)
    still = next_pass(p, sbs[2:], t, two, at=12.0)  # past the first deadline, not the second
    assert (still.create, still.owed) == (0, 2)
    due = next_pass(p, sbs[2:], t, still, at=16.0)
    assert (due.create, due.owed) == (2, 0)


def test_replenish_delay_never_holds_the_initial_fill_or_a_scale_up() -> None:
    t = template()
    fill = plan(snap(pool(3), [], t, settings=DELAY))  # no earlier pass: nothing left the pool
    assert (fill.create, fill.replenish_held, fill.requeue_after) == (3, 0, None)
    p = pool(3)
    sbs = [sandbox(p, t, owned=True) for _ in range(3)]
    first = plan(snap(p, sbs, t, settings=DELAY))
    up = next_pass(pool(5), sbs, t, first, at=1.0)
    assert (up.create, up.owed, up.requeue_after) == (2, 0, None)
    both = next_pass(pool(5), sbs[1:], t, first, at=1.0)  # scale-up while one left
    assert (both.create, both.replenish_held, both.owed) == (2, 1, 1)


def test_replenish_delay_does_not_apply_to_the_pools_own_stuck_replacements() -> None:
    t, p = template(), pool(2)
    good = sandbox(p, t, owned=True)
    stuck = sandbox(p, t, owned=True, ready=False, age=400)
    before = frozenset({good["metadata"]["uid"], stuck["metadata"]["uid"]})
    gc = plan(snap(p, [good, stuck], t, settings=DELAY, members_before=before))
    assert gc.delete_stuck == [stuck] and gc.owed == 0 and gc.members == uids([good])
    after = next_pass(p, [good], t, gc, at=1.0)  # the stuck one is gone
    assert (after.create, after.owed) == (1, 0)


def test_scale_down_forgives_owed_replacements_and_zero_delay_is_off() -> None:
    t, p = template(), pool(3)
    sbs = [sandbox(p, t, owned=True) for _ in range(3)]
    first = plan(snap(p, sbs, t, settings=DELAY))
    left = next_pass(p, sbs[1:], t, first, at=0.0)
    down = next_pass(pool(2), sbs[1:], t, left, at=1.0)
    assert (down.owed, down.missing_since, down.requeue_after) == (0, None, None)
    off = plan(snap(p, sbs[1:], t, members_before=uids(sbs)))  # default: no delay
    assert (off.create, off.owed) == (1, 0)


def test_refill_tokens_cap_creates_and_requeue_when_the_next_token_is_due() -> None:
    t = template()
    rate = Settings(max_refill_rate=2.0)
    capped = plan(snap(pool(5), [], t, settings=rate, refill_tokens=1.5))
    assert (capped.create, capped.rate_held, capped.requeue_after) == (1, 4, 0.25)
    empty = plan(snap(pool(5), [], t, settings=rate, refill_tokens=0.0))
    assert (empty.create, empty.rate_held, empty.blueprint) == (0, 5, None)
    assert empty.requeue_after == 0.5
    plenty = plan(snap(pool(2), [], t, settings=rate, refill_tokens=2.0))
    assert (plenty.create, plenty.rate_held, plenty.requeue_after) == (2, 0, None)


# ------------------------------------------------------------- warm pool eviction (#713)
def pod_annotations(pl: Plan) -> dict[str, str]:
    assert pl.blueprint is not None
    meta = pl.blueprint["spec"]["podTemplate"]["metadata"]
    return dict(meta.get("annotations") or {})


def test_eviction_annotation_is_added_to_the_pool_blueprint() -> None:
    t = template(pod_meta={"metadata": {"annotations": {"a": "b"}}})
    got = pod_annotations(plan(snap(pool(1), [], t)))
    assert got == {"a": "b", keys.ANNOTATION_SAFE_TO_EVICT: "true"}
    off = plan(snap(pool(1), [], t, settings=Settings(warm_pool_eviction=False)))
    assert pod_annotations(off) == {"a": "b"}
    # the annotation is not part of the pod-template hash: flipping the flag is no rollout
    assert (
        plan(snap(pool(1), [], t)).blueprint["metadata"]["labels"]
        == (  # type: ignore[index]
            off.blueprint["metadata"]["labels"]  # type: ignore[index]
        )
    )


@pytest.mark.parametrize("value", ["false", "true"])
def test_eviction_annotation_the_template_sets_is_kept(value: str) -> None:
    t = template(pod_meta={"metadata": {"annotations": {keys.ANNOTATION_SAFE_TO_EVICT: value}}})
    assert pod_annotations(plan(snap(pool(1), [], t))) == {keys.ANNOTATION_SAFE_TO_EVICT: value}


def claimed_sandbox(t: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    p = pool(1)
    created = apply(p, [], plan(snap(p, [], t)))[0]
    created["metadata"]["resourceVersion"] = "7"
    claim = {"metadata": {"name": "c", "namespace": NS, "uid": "claim-uid"}, "spec": {}}
    return created, claim


@pytest.mark.parametrize("with_template", [True, False])
def test_adoption_removes_the_pools_eviction_annotation(with_template: bool) -> None:
    t = template(pod_meta={"metadata": {"annotations": {"a": "b"}}})
    sb, claim = claimed_sandbox(t)
    patch = adoption_patch(sb, claim, t if with_template else None)
    pod_patch = patch["spec"]["podTemplate"]["metadata"]
    assert pod_patch["annotations"] == {keys.ANNOTATION_SAFE_TO_EVICT: None}


def test_created_by_the_pool_until_a_claim_adopts_it() -> None:
    t = template()
    sb, claim = claimed_sandbox(t)
    assert sb["metadata"]["labels"][keys.LABEL_CREATED_BY] == "controller"
    # a claim without the label removes the pool's (upstream's ensureClaimIdentityLabels)
    assert adoption_patch(sb, claim, t)["metadata"]["labels"][keys.LABEL_CREATED_BY] is None
    claim["metadata"]["labels"] = {keys.LABEL_CREATED_BY: "python-client"}  # upstream #1039
    labels = adoption_patch(sb, claim, t)["metadata"]["labels"]
    assert labels[keys.LABEL_CREATED_BY] == "python-client"


def test_a_cold_sandbox_gets_the_claims_created_by_label() -> None:
    t = template()
    _, claim = claimed_sandbox(t)
    assert keys.LABEL_CREATED_BY not in cold_sandbox(claim, t)["metadata"]["labels"]
    claim["metadata"]["labels"] = {keys.LABEL_CREATED_BY: "python-client"}
    labels = cold_sandbox(claim, t)["metadata"]["labels"]
    assert labels[keys.LABEL_CREATED_BY] == "python-client"


def test_adoption_keeps_an_eviction_annotation_the_template_sets() -> None:
    t = template(pod_meta={"metadata": {"annotations": {keys.ANNOTATION_SAFE_TO_EVICT: "true"}}})
    sb, claim = claimed_sandbox(t)
    pod_patch = adoption_patch(sb, claim, t)["spec"]["podTemplate"]["metadata"]
    assert keys.ANNOTATION_SAFE_TO_EVICT not in pod_patch.get("annotations", {})
    # without the template (deleted) nobody can tell who set it: upstream's rule, "true" goes
    pod_patch = adoption_patch(sb, claim, None)["spec"]["podTemplate"]["metadata"]
    assert pod_patch["annotations"] == {keys.ANNOTATION_SAFE_TO_EVICT: None}


# ------------------------------------------------------------------ blueprint hash and staleness
# Upstream c409f9fa (#1102): the pool labels its sandboxes with the blueprint hash
# (agents.x-k8s.io/sandbox-template-hash) and still with the deprecated pod-template hash;
# staleness compares the whole blueprint: pod spec ∧ VCT names + specs index-wise ∧ service.
def _vct(name: str = "data", size: str = "1Gi", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, **meta},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
    }


def test_build_blueprint_writes_both_hash_labels_on_sandbox_and_pod_template() -> None:
    t = template(volumeClaimTemplates=[_vct()], service=True)
    bp = build_blueprint(pool(1), t, pod_template_hash(t["spec"]["podTemplate"]))
    for labels in (bp["metadata"]["labels"], bp["spec"]["podTemplate"]["metadata"]["labels"]):
        assert labels[keys.LABEL_SANDBOX_TEMPLATE_HASH] == sandbox_blueprint_hash(t["spec"])
        assert labels[keys.LABEL_SANDBOX_POD_TEMPLATE_HASH] == pod_template_hash(
            t["spec"]["podTemplate"]
        )
    assert bp["spec"]["volumeClaimTemplates"] == [_vct()] and bp["spec"]["service"] is True
    # the plan passes the hash it computed once per pass
    pl = plan(snap(pool(1), [], t))
    assert pl.blueprint is not None
    assert pl.blueprint["metadata"]["labels"][keys.LABEL_SANDBOX_TEMPLATE_HASH] == (
        sandbox_blueprint_hash(t["spec"])
    )


BASE: dict[str, Any] = {"volumeClaimTemplates": [_vct()], "service": True}
STALENESS_TABLE: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = [
    ("unchanged", BASE, BASE, False),
    ("vct size", BASE, {**BASE, "volumeClaimTemplates": [_vct(size="2Gi")]}, True),
    ("vct name", BASE, {**BASE, "volumeClaimTemplates": [_vct(name="cache")]}, True),
    ("vct added", BASE, {**BASE, "volumeClaimTemplates": [_vct(), _vct("cache")]}, True),
    ("vct removed", BASE, {"service": True}, True),
    ("vct order", {"volumeClaimTemplates": [_vct("a"), _vct("b")]},
     {"volumeClaimTemplates": [_vct("b"), _vct("a")]}, True),
    # PVC metadata other than the name is not compared (upstream): new hash, not stale
    ("vct labels only", BASE, {**BASE, "volumeClaimTemplates": [_vct(labels={"x": "y"})]}, False),
    ("service true->unset", BASE, {"volumeClaimTemplates": [_vct()]}, True),
    ("service true->false", BASE, {**BASE, "service": False}, True),
    ("service unset->false", {}, {"service": False}, True),
    ("pod image", BASE, {**BASE, "image": "other"}, True),
    # pod metadata is not compared either (upstream's comparePodSpecs): new hash, not stale
    ("pod labels only", BASE, {**BASE, "pod_meta": {"metadata": {"labels": {"a": "b"}}}}, False),
]  # fmt: skip


def _tpl(spec: dict[str, Any]) -> dict[str, Any]:
    return template(**copy.deepcopy(spec))


@pytest.mark.parametrize("old_controller", [False, True], ids=["both-labels", "old-label-only"])
@pytest.mark.parametrize(
    ("before", "after", "stale"),
    [row[1:] for row in STALENESS_TABLE],
    ids=[row[0] for row in STALENESS_TABLE],
)
def test_is_sandbox_stale_compares_the_whole_blueprint(
    before: dict[str, Any], after: dict[str, Any], stale: bool, old_controller: bool
) -> None:
    old_t, new_t, p = _tpl(before), _tpl(after), pool(1, strategy="Recreate")
    pod_hash = pod_template_hash(new_t["spec"]["podTemplate"])
    bp_hash = sandbox_blueprint_hash(new_t["spec"])
    owned = sandbox(p, old_t, owned=True, old_controller=old_controller)
    orphan = sandbox(p, old_t, old_controller=old_controller)
    assert is_sandbox_stale(owned, new_t, pod_hash, {}, orphan=False, blueprint_hash=bp_hash) is (
        stale
    )
    assert is_sandbox_stale(orphan, new_t, pod_hash, {}, orphan=True, blueprint_hash=bp_hash) is (
        stale
    )
    # without the hash passed in (the claim path), the same verdict
    assert is_sandbox_stale(owned, new_t, pod_hash, {}, orphan=False) is stale
    # and the plan of a Recreate pool acts on it
    pl = plan(snap(p, [owned], new_t))
    assert pl.delete_stale == ([owned] if stale else [])
    # an OnReplenish pool keeps what it owns
    assert plan(snap(pool(1), [owned], new_t)).delete_stale == []


def test_semantically_equal_blueprint_with_a_different_hash_label_is_not_churned() -> None:
    t, p = template(volumeClaimTemplates=[_vct(size="1Gi")]), pool(2, strategy="Recreate")
    sbs = [sandbox(p, t, owned=True) for _ in range(2)]
    for sb in sbs:  # e.g. written by another serialiser, or an equal quantity spelled otherwise
        sb["metadata"]["labels"][keys.LABEL_SANDBOX_TEMPLATE_HASH] = "0badc0de"
        sb["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] = "1024Mi"
    vetted: dict[str, bool] = {}
    for sb in sbs:
        assert not is_sandbox_stale(
            sb, t, pod_template_hash(t["spec"]["podTemplate"]), vetted, orphan=False
        )
    assert vetted == {f"{keys.LABEL_SANDBOX_TEMPLATE_HASH}=0badc0de": False}  # compared once
    assert plan(snap(p, sbs, t)).delete_stale == []


def test_old_label_only_sandboxes_are_kept_when_nothing_changed() -> None:
    """Sandboxes from a controller before #1102 carry only the pod-template hash: not churned."""
    t, p = template(volumeClaimTemplates=[_vct()], service=True), pool(3, strategy="Recreate")
    sbs = [sandbox(p, t, owned=True, old_controller=True) for _ in range(3)]
    assert all(keys.LABEL_SANDBOX_TEMPLATE_HASH not in sb["metadata"]["labels"] for sb in sbs)
    pl = plan(snap(p, sbs, t))
    assert pl.delete_stale == [] and pl.create == 0 and pl.active == 3


def test_old_label_only_vct_change_rolls_a_recreate_pool() -> None:
    """Same pod template (so the same deprecated label), different VCTs: stale under Recreate."""
    old_t, p = template(volumeClaimTemplates=[_vct()]), pool(2, strategy="Recreate")
    sbs = [sandbox(p, old_t, owned=True, old_controller=True) for _ in range(2)]
    new_t = template(volumeClaimTemplates=[_vct(size="5Gi")])
    assert pod_template_hash(old_t["spec"]["podTemplate"]) == pod_template_hash(
        new_t["spec"]["podTemplate"]
    )
    sbs, _ = converge(p, sbs, new_t, passes=3)
    assert len(sbs) == 2
    for sb in sbs:
        assert sb["spec"]["volumeClaimTemplates"] == [_vct(size="5Gi")]
        assert sb["metadata"]["labels"][keys.LABEL_SANDBOX_TEMPLATE_HASH] == (
            sandbox_blueprint_hash(new_t["spec"])
        )


def test_old_label_memo_covers_the_pod_part_only() -> None:
    """Sandboxes sharing a deprecated pod-template hash may still differ in VCTs: the memo for
    that label holds only the pod comparison; VCTs and service are compared per sandbox."""
    new_t, p = template(image="v2", volumeClaimTemplates=[_vct()]), pool(2, strategy="Recreate")
    a = sandbox(p, template(image="v2", volumeClaimTemplates=[_vct()]), owned=True)
    b = sandbox(p, template(image="v2", volumeClaimTemplates=[_vct(size="9Gi")]), owned=True)
    for sb in (a, b):
        del sb["metadata"]["labels"][keys.LABEL_SANDBOX_TEMPLATE_HASH]
        sb["metadata"]["labels"][keys.LABEL_SANDBOX_POD_TEMPLATE_HASH] = "0ld0ld00"
    vetted: dict[str, bool] = {}
    pod_hash = pod_template_hash(new_t["spec"]["podTemplate"])
    assert not is_sandbox_stale(a, new_t, pod_hash, vetted, orphan=False)
    assert is_sandbox_stale(b, new_t, pod_hash, vetted, orphan=False)
    assert vetted == {f"{keys.LABEL_SANDBOX_POD_TEMPLATE_HASH}=0ld0ld00": False}


def test_sandbox_without_any_hash_label_gets_the_full_comparison() -> None:
    t, p = template(service=True), pool(1, strategy="Recreate")
    sb = sandbox(p, t, owned=True)
    for k in (keys.LABEL_SANDBOX_TEMPLATE_HASH, keys.LABEL_SANDBOX_POD_TEMPLATE_HASH):
        del sb["metadata"]["labels"][k]
    pod_hash = pod_template_hash(t["spec"]["podTemplate"])
    assert not is_sandbox_stale(sb, t, pod_hash, {}, orphan=False)
    sb["spec"]["service"] = False
    assert is_sandbox_stale(sb, t, pod_hash, {}, orphan=False)


def test_unhashable_blueprint_is_a_template_error_and_never_deletes() -> None:
    good = template()
    p = pool(1, strategy="Recreate")
    sb = sandbox(p, template(image="old"), owned=True)
    bad = template(volumeClaimTemplates=[{"spec": {"resources": {"requests": {"storage": "x"}}}}])
    pl = plan(snap(p, [sb], bad))
    assert pl.template_error is not None and "blueprint" in pl.template_error
    assert pl.delete_stale == [] and pl.create == 0
    # and an empty blueprint hash (hashing failed) never marks an owned sandbox stale
    pod_hash = pod_template_hash(good["spec"]["podTemplate"])
    assert not is_sandbox_stale(sb, good, pod_hash, {}, orphan=False, blueprint_hash="")


def test_blueprint_fields_are_all_compared() -> None:
    """Upstream's TestSandboxBlueprintFieldsAreCompared: a SandboxBlueprint field missing from
    the comparison would never be detected as drift. If this fails, extend blueprints_match."""
    from agentsandbox.api.gojson import go_types

    layout = go_types().structs["agentsandbox.SandboxBlueprint"]
    assert [f.name for f in layout] == ["podTemplate", "volumeClaimTemplates", "service"]
