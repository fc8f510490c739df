"""The SandboxWarmPool decision function, scenario by scenario (spec extensions §8.1, §4, §9).

Each test builds a snapshot the way the reconciler would observe it and checks the plan. Where
an upstream test runs two reconcile passes, ``converge`` applies each plan to an in-memory set of
sandboxes (creates get names, deletes vanish, adoptions set the owner) and plans again.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.defaults import apply_sandbox_secure_defaults
from agentsandbox.api.hashing import name_hash, pod_template_hash
from agentsandbox.api.kinds import SANDBOX, SANDBOX_WARM_POOL
from agentsandbox.controllers.warmpool_plan import (
    EVENT_NOT_PROGRESSING,
    EVENT_PROGRESSING,
    REASON_BLOCKED,
    REASON_READY,
    REASON_TEMPLATE_NOT_FOUND,
    Plan,
    Settings,
    Snapshot,
    build_blueprint,
    is_sandbox_stale,
    plan,
    pod_specs_match,
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
) -> dict[str, Any]:
    """A pool sandbox like upstream's createPoolSandbox helper (an orphan unless owned)."""
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
    assert pod_specs_match(
        t, {**apply_sandbox_secure_defaults(t, base), "automountServiceAccountToken": False}
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
    h = a["metadata"]["labels"][keys.LABEL_SANDBOX_POD_TEMPLATE_HASH]
    assert vetted == {h: True}
    vetted[h] = False  # a memoised verdict is reused, not recomputed
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


# ------------------------------------------------------------------ expectations (upstream §9)
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
    assert transition_event({}, stuck) == (
        "Warning",
        EVENT_NOT_PROGRESSING,
        'SandboxTemplate "test-template" not found',
    )
    assert transition_event(stuck, stuck) is None
    fine = plan(snap({**p, "status": stuck}, [], t)).status
    ev = transition_event(stuck, fine)
    assert ev is not None and ev[:2] == ("Normal", EVENT_PROGRESSING)


def test_grace_period_restarts_when_a_held_sandbox_finally_gets_its_pod() -> None:
    """A sandbox blocked for 10 minutes whose pod was just created is not 'stuck' (yet)."""
    t, p = template(), pool(1)
    sb = sandbox(p, t, owned=True, ready=False, age=600)
    sb["status"]["replicas"] = 1
    pod = {
        "metadata": {"name": sb["metadata"]["name"], "creationTimestamp": iso(NOW - 30)},
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": iso(NOW - 20)}
            ],
        },
    }
    pl = plan(snap(p, [sb], t, pods={sb["metadata"]["name"]: pod}))
    assert pl.delete_stuck == [] and pl.held == []
    assert pl.requeue_after == pytest.approx(300 - 20 + 1)
    # ... and it is replaced once that fresh grace period has passed too
    pod["status"]["conditions"][0]["lastTransitionTime"] = iso(NOW - 400)
    pod["metadata"]["creationTimestamp"] = iso(NOW - 400)
    assert len(plan(snap(p, [sb], t, pods={sb["metadata"]["name"]: pod})).delete_stuck) == 1


def test_sandbox_reporting_a_pod_the_cache_has_not_seen_is_kept_and_rechecked() -> None:
    t, p = template(), pool(1)
    sb = sandbox(p, t, owned=True, ready=False, age=600)
    sb["status"]["replicas"] = 1
    pl = plan(snap(p, [sb], t))
    assert pl.delete_stuck == [] and pl.requeue_after == pytest.approx(1.0)
