"""Property tests of the pure decide functions over random pool and claim states (issue 13).

The scenario tests (``test_warmpool_plan.py``, ``test_claim.py``) pin chosen states; these draw
thousands of random ones — sandboxes of this pool, of another pool, of a ReplicaSet, of a claim,
orphans (some with forged pool labels and another pod spec), terminating, Ready or not, young or
past the grace period, with or without a template, expectations satisfied or not — and check
what must hold in every one of them:

- the warm pool never plans more than ``spec.replicas``: what it keeps, adopts, creates and is
  still deleting never exceeds the replicas when it creates; a create never exceeds the batch;
- it never deletes or adopts a sandbox another controller owns, nor anything terminating, and
  adopts an orphan only when the orphan is exactly what the template builds;
- a claim never adopts a sandbox that is not controlled by a SandboxWarmPool of its namespace
  (group and kind checked, the pool's UID matching), and the adoption patch makes the claim the
  one controller, conditional on the resourceVersion that was vetted.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from agentsandbox.api import keys
from agentsandbox.api.defaults import apply_sandbox_secure_defaults
from agentsandbox.api.hashing import name_hash, pod_template_hash, sandbox_blueprint_hash
from agentsandbox.api.kinds import SANDBOX, SANDBOX_CLAIM, SANDBOX_TEMPLATE, SANDBOX_WARM_POOL
from agentsandbox.api.owners import controller_of
from agentsandbox.controllers.claim.claimed_sandbox import adoption_patch, cold_sandbox
from agentsandbox.controllers.claim.plan import adoptable, candidate_problem, pick_kept
from agentsandbox.controllers.warmpool.plan import Plan, Settings, Snapshot, plan

NOW = 1_800_000_000.0
NS = "home"
POOL_UID = "pool-uid"
EXT_API = SANDBOX_WARM_POOL.api_version  # extensions.agents.x-k8s.io/v1beta1

# Who controls a generated sandbox.
MINE = "mine"
OTHER_POOL = "other-pool"  # another SandboxWarmPool (another UID)
SAME_NAME_OTHER_UID = "same-name-other-uid"  # names this pool but carries another UID
REPLICASET = "replicaset"
CLAIM = "claim"
WRONG_GROUP_POOL = "wrong-group-pool"  # kind SandboxWarmPool in another API group
ORPHAN = "orphan"
NON_CONTROLLER = "non-controller"  # an owner reference to the pool, controller: false
OWNERS = (
    MINE,
    OTHER_POOL,
    SAME_NAME_OTHER_UID,
    REPLICASET,
    CLAIM,
    WRONG_GROUP_POOL,
    ORPHAN,
    NON_CONTROLLER,
)


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def template(image: str = "app:v1", name: str = "tpl") -> dict[str, Any]:
    return {
        "apiVersion": SANDBOX_TEMPLATE.api_version,
        "kind": "SandboxTemplate",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "main", "image": image}]}}},
    }


def the_pool(replicas: int, strategy: str | None, name: str = "pool") -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": replicas, "sandboxTemplateRef": {"name": "tpl"}}
    if strategy is not None:
        spec["updateStrategy"] = {"type": strategy}
    return {
        "apiVersion": EXT_API,
        "kind": "SandboxWarmPool",
        "metadata": {"name": name, "namespace": NS, "uid": POOL_UID, "generation": 1},
        "spec": spec,
    }


def owner_refs(kind: str) -> list[dict[str, Any]]:
    def ref(api: str, k: str, name: str, uid: str, controller: bool = True) -> dict[str, Any]:
        return {"apiVersion": api, "kind": k, "name": name, "uid": uid, "controller": controller}

    return {
        MINE: [ref(EXT_API, "SandboxWarmPool", "pool", POOL_UID)],
        OTHER_POOL: [ref(EXT_API, "SandboxWarmPool", "other", "other-uid")],
        SAME_NAME_OTHER_UID: [ref(EXT_API, "SandboxWarmPool", "pool", "forged-uid")],
        REPLICASET: [ref("apps/v1", "ReplicaSet", "rs", "rs-uid")],
        CLAIM: [ref(SANDBOX_CLAIM.api_version, "SandboxClaim", "c", "claim-uid")],
        WRONG_GROUP_POOL: [ref("example.com/v1", "SandboxWarmPool", "pool", POOL_UID)],
        ORPHAN: [],
        NON_CONTROLLER: [ref(EXT_API, "SandboxWarmPool", "pool", POOL_UID, controller=False)],
    }[kind]


@st.composite
def sandboxes(
    draw: st.DrawFn, tpl: dict[str, Any], owners: tuple[str, ...] = OWNERS
) -> dict[str, Any]:
    """One sandbox as a cache could show it to the pool or a claim."""
    i = draw(st.integers(0, 10**6))
    kind = draw(st.sampled_from(owners))
    image = draw(st.sampled_from(["app:v1", "app:v2"]))  # v2: another pod spec
    pod_spec = apply_sandbox_secure_defaults(
        tpl, {"containers": [{"name": "main", "image": image}]}
    )
    labels: dict[str, str] = {}
    if draw(st.booleans()) or kind == MINE:
        labels[keys.LABEL_WARM_POOL_SANDBOX] = name_hash("pool")
    ref = draw(st.sampled_from(["tpl", "other-tpl", None]))  # the template hash, another, none
    if ref is not None:
        labels[keys.LABEL_SANDBOX_TEMPLATE_REF_HASH] = name_hash(ref)
    if draw(st.booleans()):  # forged or real hash labels
        labels[keys.LABEL_SANDBOX_POD_TEMPLATE_HASH] = pod_template_hash(tpl["spec"]["podTemplate"])
        labels[keys.LABEL_SANDBOX_TEMPLATE_HASH] = sandbox_blueprint_hash(tpl["spec"])
    meta: dict[str, Any] = {
        "name": f"sb-{i}",
        "namespace": draw(st.sampled_from([NS, "elsewhere"])),
        "uid": f"sb-uid-{i}",
        "resourceVersion": str(draw(st.integers(1, 10**6))),
        "labels": labels,
        "creationTimestamp": iso(NOW - draw(st.sampled_from([1.0, 30.0, 400.0, 4000.0]))),
        "ownerReferences": owner_refs(kind),
    }
    if draw(st.sampled_from([False, False, False, True])):
        meta["deletionTimestamp"] = iso(NOW - 1)
    status: dict[str, Any] = {}
    ready = draw(st.sampled_from(["True", "False", None]))
    if ready is not None:
        status["conditions"] = [
            {"type": "Ready", "status": ready, "reason": "DependenciesReady"}
            if ready == "True"
            else {"type": "Ready", "status": "False", "reason": "DependenciesNotReady"}
        ]
    return {
        "apiVersion": SANDBOX.api_version,
        "kind": "Sandbox",
        "metadata": meta,
        "spec": {"replicas": 1, "podTemplate": {"spec": pod_spec, "metadata": {"labels": labels}}},
        "status": status,
    }


def unique(sbs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: set[str] = set()
    out = []
    for sb in sbs:
        if sb["metadata"]["uid"] not in seen:
            seen.add(sb["metadata"]["uid"])
            out.append(sb)
    return out


def is_mine(sb: Mapping[str, Any]) -> bool:
    ref = controller_of(sb)
    return ref is not None and ref.get("uid") == POOL_UID


TPL = template()


@st.composite
def pool_states(draw: st.DrawFn) -> Snapshot:
    replicas = draw(st.one_of(st.integers(0, 3), st.integers(0, 16)))
    strategy = draw(st.sampled_from([None, "Recreate", "OnReplenish", "Rolling"]))
    p = the_pool(replicas, strategy)
    # the pool lists the sandboxes labelled with its hash: every one of them here
    # half of them the pool's own, so that scale-downs (excess deletes) are common too
    mixed = (*[MINE] * len(OWNERS), *OWNERS)
    sbs = unique(draw(st.lists(sandboxes(TPL, owners=mixed), max_size=16)))
    for sb in sbs:
        sb["metadata"]["namespace"] = NS
        sb["metadata"]["labels"][keys.LABEL_WARM_POOL_SANDBOX] = name_hash("pool")
    has_template = draw(st.integers(0, 5)) > 0
    tokens = draw(st.one_of(st.none(), st.floats(0, 20)))
    conf = Settings(
        max_batch_size=draw(st.integers(1, 6)),
        readiness_grace_period=300.0,
        replenish_delay=draw(st.sampled_from([0.0, 0.0, 10.0])),
        max_refill_rate=0.0 if tokens is None else 5.0,
    )
    members_before = draw(
        st.one_of(
            st.none(),
            st.frozensets(st.sampled_from([sb["metadata"]["uid"] for sb in sbs] or ["x"])),
        )
    )
    return Snapshot(
        pool=p,
        sandboxes=sbs,
        template=TPL if has_template else None,
        template_error=None if has_template else "NotFound",
        now=NOW,
        expectations_satisfied=draw(st.booleans()),
        settings=conf,
        held_before=frozenset(),
        members_before=members_before,
        missing_since=draw(st.one_of(st.none(), st.just(NOW - 5.0))),
        owed=draw(st.integers(0, 3)),
        refill_tokens=tokens,
    )


PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(pool_states())
def test_the_pool_never_plans_more_than_replicas(snap: Snapshot) -> None:
    out = plan(snap)
    replicas = snap.pool["spec"]["replicas"]
    assert 0 <= out.create <= snap.settings.max_batch_size
    assert len(out.delete_excess) <= snap.settings.max_batch_size
    if out.create:
        deleted = {
            sb["metadata"]["uid"] for sb in out.delete_stale + out.delete_stuck + out.delete_excess
        }
        live = [sb for sb in snap.sandboxes if not sb["metadata"].get("deletionTimestamp")]
        kept_mine = [sb for sb in live if is_mine(sb) and sb["metadata"]["uid"] not in deleted]
        terminating_mine = [
            sb for sb in snap.sandboxes if sb["metadata"].get("deletionTimestamp") and is_mine(sb)
        ]
        deleting_mine = [sb for sb in live if is_mine(sb) and sb["metadata"]["uid"] in deleted]
        total = (
            len(kept_mine)
            + len(out.adopt)
            + out.create
            + len(terminating_mine)
            + len(deleting_mine)
        )
        assert total <= replicas, (
            f"{len(kept_mine)} kept + {len(out.adopt)} adopted + {out.create} created + "
            f"{len(terminating_mine) + len(deleting_mine)} on their way out > {replicas}"
        )
        assert snap.expectations_satisfied and snap.template is not None
        assert out.blueprint is not None
        assert controller_of(out.blueprint) == {
            "apiVersion": EXT_API,
            "kind": "SandboxWarmPool",
            "name": "pool",
            "uid": POOL_UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }


@PROPERTY
@given(pool_states())
def test_the_pool_never_touches_a_foreign_or_terminating_sandbox(snap: Snapshot) -> None:
    out = plan(snap)
    deletes = out.delete_stale + out.delete_stuck + out.delete_excess
    uids = [sb["metadata"]["uid"] for sb in deletes]
    assert len(uids) == len(set(uids)), "a sandbox deleted twice"
    # never adopted in the pass that deletes it as stale or stuck (an adopted orphan may be
    # picked as excess: that DELETE carries the pre-adoption resourceVersion and loses, 409)
    doomed = {sb["metadata"]["uid"] for sb in out.delete_stale + out.delete_stuck}
    assert not doomed & {sb["metadata"]["uid"] for sb in out.adopt}
    touched = deletes + out.adopt
    for sb in touched:
        ref = controller_of(sb)
        assert ref is None or ref.get("uid") == POOL_UID, (
            f"{sb['metadata']['name']} is controlled by {ref}, not by this pool"
        )
        assert not sb["metadata"].get("deletionTimestamp")
    for sb in out.adopt:
        # only an orphan, and only one that is exactly what the template builds
        assert controller_of(sb) is None
        assert snap.template is not None
        assert sb["spec"]["podTemplate"]["spec"]["containers"][0]["image"] == "app:v1"
        assert sb["metadata"]["labels"].get(keys.LABEL_SANDBOX_TEMPLATE_REF_HASH) == name_hash(
            "tpl"
        )
    if snap.template is None:
        assert out.adopt == [] and out.create == 0 and out.delete_stale == []


@PROPERTY
@given(pool_states(), st.integers(2, 4))
def test_repeated_passes_without_news_do_not_add_up(snap: Snapshot, passes: int) -> None:
    """Deciding again on the same snapshot (a requeue before the cache moved) plans the same:
    the decide step is pure, so repeated passes cannot add creates on their own."""
    first = plan(snap)
    for _ in range(passes):
        again = plan(copy.deepcopy(snap))
        assert again.create == first.create
        assert [s["metadata"]["uid"] for s in again.delete_excess] == [
            s["metadata"]["uid"] for s in first.delete_excess
        ]


# ---------------------------------------------------------------------------------- claims
CLAIM_OBJ: dict[str, Any] = {
    "apiVersion": SANDBOX_CLAIM.api_version,
    "kind": "SandboxClaim",
    "metadata": {"name": "c", "namespace": NS, "uid": "the-claim-uid"},
    "spec": {"warmPoolRef": {"name": "pool"}},
}


@st.composite
def claim_states(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any] | None]:
    # half of them controlled by the pool, so that the adoptable case is common too
    sb = draw(sandboxes(TPL, owners=(*[MINE] * len(OWNERS), *OWNERS)))
    pool_obj = draw(
        st.sampled_from(
            [
                the_pool(3, None),
                the_pool(3, None),
                the_pool(3, "Recreate"),
                the_pool(3, None, name="other"),
                None,
            ]
        )
    )
    return sb, pool_obj


@PROPERTY
@given(claim_states())
def test_a_claim_never_adopts_a_sandbox_not_controlled_by_its_pool(
    state: tuple[dict[str, Any], dict[str, Any] | None],
) -> None:
    sb, pool_obj = state
    ok_adoptable = adoptable(sb)
    if ok_adoptable:
        ref = controller_of(sb)
        assert ref is not None and ref["kind"] == "SandboxWarmPool"
        assert str(ref["apiVersion"]).startswith(SANDBOX_WARM_POOL.group + "/")
        assert not sb["metadata"].get("deletionTimestamp")
    problem = candidate_problem(
        sb, NS, TPL, pool_obj, pod_template_hash(TPL["spec"]["podTemplate"])
    )
    if problem is None:
        assert ok_adoptable
        ref = controller_of(sb)
        assert pool_obj is not None and ref is not None
        assert ref["uid"] == pool_obj["metadata"]["uid"] == POOL_UID
        assert ref["name"] == pool_obj["metadata"]["name"]
        assert sb["metadata"]["namespace"] == NS
        assert sb["metadata"]["labels"][keys.LABEL_SANDBOX_TEMPLATE_REF_HASH] == name_hash("tpl")
        patch = adoption_patch(sb, CLAIM_OBJ, TPL)
        meta = patch["metadata"]
        assert meta["resourceVersion"] == sb["metadata"]["resourceVersion"]
        assert meta["ownerReferences"] == [
            {
                "apiVersion": SANDBOX_CLAIM.api_version,
                "kind": "SandboxClaim",
                "name": "c",
                "uid": "the-claim-uid",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert meta["labels"].get(keys.LABEL_WARM_POOL_SANDBOX, "gone") is None
    else:
        assert isinstance(problem, str) and problem


@PROPERTY
@given(st.lists(sandboxes(TPL), min_size=1, max_size=6), st.sampled_from(["", "sb-1", "x"]))
def test_a_claim_with_several_sandboxes_keeps_one_of_them(
    owned: list[dict[str, Any]], status_name: str
) -> None:
    """A claim that controls several sandboxes (two racing processes) keeps exactly one of them:
    the one its status names, else the oldest Ready, else the oldest."""
    owned = unique(owned)
    kept = pick_kept(owned, status_name)
    assert any(kept is sb for sb in owned)
    named = [sb for sb in owned if sb["metadata"]["name"] == status_name]
    if named:
        assert kept is named[0]


@PROPERTY
@given(st.sampled_from(["c", "c" * 253]), st.booleans())
def test_a_cold_sandbox_belongs_to_its_claim_only(name: str, env: bool) -> None:
    claim = {
        **CLAIM_OBJ,
        "metadata": {**CLAIM_OBJ["metadata"], "name": name},
        "spec": {
            "sandboxTemplateRef": {"name": "tpl"},
            **({"env": [{"name": "A", "value": "b"}]} if env else {}),
        },
    }
    tpl = {**TPL, "spec": {**TPL["spec"], "envVarsInjectionPolicy": "Allowed"}}
    sb = cold_sandbox(claim, tpl)
    assert sb["metadata"]["name"] == name and sb["metadata"]["namespace"] == NS
    assert sb["metadata"]["ownerReferences"] == [
        {
            "apiVersion": SANDBOX_CLAIM.api_version,
            "kind": "SandboxClaim",
            "name": name,
            "uid": "the-claim-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert keys.LABEL_WARM_POOL_SANDBOX not in sb["metadata"]["labels"]  # never a pool member
    assert not adoptable(sb)


def test_the_random_states_reach_every_decision() -> None:
    """The properties above mean something only if the generators reach each kind of plan:
    creates, adoptions, stale, stuck and excess deletes, and a claim's adoptable candidate."""
    search = settings(
        max_examples=2000,
        deadline=None,
        database=None,
        phases=[Phase.generate],  # no shrinking
    )
    hits: dict[str, Callable[[Plan], bool]] = {
        "create": lambda p: p.create > 0,
        "adopt": lambda p: bool(p.adopt),
        "stale": lambda p: bool(p.delete_stale),
        "stuck": lambda p: bool(p.delete_stuck),
        "excess": lambda p: bool(p.delete_excess),
    }
    for what, hit in hits.items():

        def reached(snap: Snapshot, hit: Callable[[Plan], bool] = hit) -> bool:
            return hit(plan(snap))

        assert find(pool_states(), reached, settings=search), what
    pod_hash = pod_template_hash(TPL["spec"]["podTemplate"])
    assert find(
        claim_states(),
        lambda st: candidate_problem(st[0], NS, TPL, st[1], pod_hash) is None,
        settings=search,
    )
