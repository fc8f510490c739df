"""Which pool sandbox a claim may adopt (docs/design/claim.md, "Candidates and the warm queue"),
through the claim controller's harness (an in-memory API enforcing preconditions)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from agentsandbox.api import hashing, keys
from agentsandbox.api.kinds import SANDBOX_CLAIM
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.controllers.claim import candidates
from agentsandbox.controllers.claim import plan as claim_plan
from agentsandbox.controllers.warmpool import blueprint
from agentsandbox.kube.reconcile import Result
from tests.unit.controllers.claim.test_controller import (
    NS,
    Harness,
    claim_v1alpha1,
    claim_v1beta1,
    pool,
    pool_sandbox,
    setup_pool,
    template,
)


def rolled_pool(
    h: Harness, *, strategy: str | None = None, members: int = 2
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A pool whose members were built from ``tpl-v1`` and that now names ``tpl-v2``."""
    old = h.add(SANDBOX_TEMPLATES.plural, template("tpl-v1", image="v1"))
    h.add(SANDBOX_TEMPLATES.plural, template("tpl-v2", image="v2"))
    spec: dict[str, Any] = {"updateStrategy": {"type": strategy}} if strategy else {}
    p = h.add(SANDBOX_WARM_POOLS.plural, pool("pool", "tpl-v2", **spec))
    sbs = [h.add(SANDBOXES.plural, pool_sandbox(p, old)) for _ in range(members)]
    return p, sbs


async def test_pool_ref_claim_adopts_an_old_template_member_of_an_onreplenish_pool() -> None:
    """claim review #2: a ``warmPoolRef`` claim takes a Ready member of its pool whatever
    template it was built from; under OnReplenish the pool keeps such members and replaces them
    from the new template only as they are adopted, so refusing them sends every claim cold and
    the pool never refills."""
    h = Harness()
    _, sbs = rolled_pool(h)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    await h.reconcile()
    name = h.claim()["status"]["sandbox"]["name"]
    assert name in {s["metadata"]["name"] for s in sbs}, f"went cold: {name}"
    labels = h.sandbox(name)["metadata"]["labels"]
    assert labels[keys.LABEL_LAUNCH_TYPE] == keys.LAUNCH_TYPE_WARM
    assert not [c for c in h.api.calls if c[:2] == ("create", SANDBOXES.plural)]


async def test_template_named_claim_does_not_adopt_a_member_built_from_another_template() -> None:
    """claim review #2 (companion): a 0.4.x claim names a template, so only sandboxes built
    from that template serve it, whichever policy brought it to the pool."""
    for warmpool in (None, "pool"):
        h = Harness()
        _, sbs = rolled_pool(h)
        h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(tpl="tpl-v2", warmpool=warmpool))
        await h.reconcile()
        assert h.claim()["status"]["sandbox"]["name"] == "claim", warmpool
        for sb in sbs:
            owner = h.sandbox(sb["metadata"]["name"])["metadata"]["ownerReferences"][0]
            assert owner["kind"] == "SandboxWarmPool", warmpool


async def test_pool_ref_claim_does_not_adopt_an_old_template_member_of_a_recreate_pool() -> None:
    """claim review #2 (companion): under Recreate a member of another template is stale (the
    pool is deleting it), so a ``warmPoolRef`` claim goes cold rather than take it."""
    h = Harness()
    _, sbs = rolled_pool(h, strategy="Recreate")
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == "claim"
    assert all((NS, s["metadata"]["name"]) not in h.r.queue for s in sbs), "stale: dropped"


class Counting:
    """A counting wrapper around a hash function."""

    def __init__(self, fn: Callable[[Any], str]) -> None:
        self.fn, self.calls = fn, 0

    def __call__(self, arg: Any) -> str:
        self.calls += 1
        return self.fn(arg)


def count_hashes(monkeypatch: pytest.MonkeyPatch) -> tuple[Counting, Counting]:
    """Counting wrappers on the blueprint and pod template hashes wherever the claim side may
    call them."""
    bp, pod = Counting(hashing.sandbox_blueprint_hash), Counting(hashing.pod_template_hash)
    for module in (blueprint, candidates, claim_plan):
        monkeypatch.setattr(module, "sandbox_blueprint_hash", bp, raising=False)
        monkeypatch.setattr(module, "pod_template_hash", pod, raising=False)
    return bp, pod


def takes_the_first_one_we_try(h: Harness) -> list[str]:
    """Another claim adopts the first sandbox this claim tries (a lost race: a second pick)."""
    lost: list[str] = []

    def another_claim_takes_it(verb: str, plural: str, name: str) -> None:
        if (verb, plural) == ("patch", SANDBOXES.plural) and not lost:
            lost.append(name)
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
            stored["metadata"]["resourceVersion"] = "999"

    h.api.before = another_claim_takes_it
    return lost


@pytest.mark.parametrize("strategy", ["Recreate", "OnReplenish"])
async def test_an_adoption_pass_hashes_the_template_at_most_once(
    strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """claim review #4: vetting candidates of a Recreate pool needs the template's blueprint
    and pod template hashes; they are computed once per adoption pass (a pass with two picks
    and a lost race, over 40 Ready members), and never for an OnReplenish pool."""
    h = Harness()
    t = h.add(SANDBOX_TEMPLATES.plural, template())
    p = h.add(SANDBOX_WARM_POOLS.plural, pool(updateStrategy={"type": strategy}))
    for _ in range(40):
        sb = pool_sandbox(p, t)
        sb["metadata"]["labels"][keys.LABEL_SANDBOX_TEMPLATE_HASH] = hashing.sandbox_blueprint_hash(
            t["spec"]
        )
        h.add(SANDBOXES.plural, sb)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    lost = takes_the_first_one_we_try(h)
    bp, pod = count_hashes(monkeypatch)
    await h.reconcile()
    name = h.claim()["status"]["sandbox"]["name"]
    assert lost and name not in (lost[0], "claim"), "adopted in a second pick"
    most = 1 if strategy == "Recreate" else 0
    assert bp.calls <= most and pod.calls <= most, (
        f"blueprint hash {bp.calls} calls, pod template hash {pod.calls} calls"
    )


# ------------------------------------------------------------------------- pod IPs and the grace
CREATED = 1_767_225_600.0  # 2026-01-01T00:00:00Z, the fake API's creationTimestamp


def without_pod_ips(h: Harness, sb: dict[str, Any]) -> dict[str, Any]:
    stored = h.api.objects[(SANDBOXES.plural, NS, sb["metadata"]["name"])]
    stored["status"].pop("podIPs", None)
    stored["metadata"]["resourceVersion"] = f"{stored['metadata']['resourceVersion']}0"
    h.sync(SANDBOXES.plural)
    assert not h.sandboxes.get(sb["metadata"]["name"], NS)["status"].get("podIPs")
    return copy.deepcopy(stored)


def at(h: Harness, seconds_after_creation: float) -> None:
    """The controller's clocks read this long after the claim's creation."""
    now = CREATED + seconds_after_creation
    h.r.clock = lambda: now
    h.r.writer.picker.clock = lambda: now


async def test_a_pool_sandbox_without_pod_ips_is_never_adopted() -> None:
    """claim review note 13: a pool sandbox whose pod has no IP (unschedulable, image pull
    failing, not started) is never adopted, Ready or not: once claimed it is beyond the pool's
    clean-up and the claim may never get a usable sandbox. Past the grace, the claim goes
    cold."""
    h = Harness()
    t, p, (ready,) = setup_pool(h, members=1, ready=True)
    starting = h.add(SANDBOXES.plural, pool_sandbox(p, t, ready=False))
    no_ip = [without_pod_ips(h, sb) for sb in (ready, starting)]
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    at(h, 60.0)
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == "claim", "cold"
    for sb in no_ip:
        owner = h.sandbox(sb["metadata"]["name"])["metadata"]["ownerReferences"][0]
        assert owner["kind"] == "SandboxWarmPool"


async def test_a_not_ready_candidate_with_pod_ips_beats_an_older_one_without() -> None:
    """claim review note 13: with no Ready candidate, the oldest not-Ready one that has pod IPs
    is taken (as upstream v1.0.1); an older one without pod IPs, or a Ready one without, never
    is."""
    h = Harness()
    t, p, (older,) = setup_pool(h, members=1, ready=False)
    ready_no_ip = h.add(SANDBOXES.plural, pool_sandbox(p, t, ready=True))
    younger = h.add(SANDBOXES.plural, pool_sandbox(p, t, ready=False))
    without_pod_ips(h, older)
    without_pod_ips(h, ready_no_ip)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    at(h, 60.0)
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == younger["metadata"]["name"]


async def test_pending_candidates_within_the_grace_give_a_short_retry_not_a_cold_start() -> None:
    """claim review note 13: a claim younger than the grace (2 s) whose only candidates have no
    pod IP yet looks again shortly (0.1 s, never past the grace) without a status write or a
    cold create; a candidate that got its IP meanwhile is adopted; past the grace, cold."""
    h = Harness()
    h.r.observability_annotations = False
    _, _, (sb,) = setup_pool(h, members=1)
    without_pod_ips(h, sb)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    h.api.calls.clear()
    at(h, 0.5)
    assert await h.reconcile() == Result(requeue_after=0.1)
    at(h, 1.95)
    result = await h.reconcile()
    assert result is not None and result.requeue_after == pytest.approx(0.05)
    assert h.api.writes() == [], "no status, no cold sandbox, no adoption"
    # the IP arrives within the grace: adopted on the next look
    h.api.objects[(SANDBOXES.plural, NS, sb["metadata"]["name"])]["status"]["podIPs"] = ["10.0.9.9"]
    h.api.objects[(SANDBOXES.plural, NS, sb["metadata"]["name"])]["metadata"]["resourceVersion"] = (
        "998"
    )
    h.sync(SANDBOXES.plural)
    await h.reconcile()
    assert h.claim()["status"]["sandbox"]["name"] == sb["metadata"]["name"]
    # another claim, past the grace with only a pending candidate: cold
    h2 = Harness()
    _, _, (sb2,) = setup_pool(h2, members=1)
    without_pod_ips(h2, sb2)
    h2.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    at(h2, 2.0)
    await h2.reconcile()
    assert h2.claim()["status"]["sandbox"]["name"] == "claim"


def test_a_fresh_copy_without_pod_ips_is_not_adopted_on_a_retry() -> None:
    """A candidate re-read after a conflict (its status moved) is tried again only if it still
    has pod IPs: the same rule as the pick."""
    h = Harness()
    t, p, (sb,) = setup_pool(h, members=1)
    claim = h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    vetting = h.r.writer.picker.start(claim, t, [p])
    assert vetting.problem(sb) is None
    fresh = copy.deepcopy(sb)
    fresh["status"]["podIPs"] = []
    assert vetting.problem(fresh) == "the sandbox's pod has no IP yet"
