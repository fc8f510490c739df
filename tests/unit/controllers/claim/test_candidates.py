"""Which pool sandbox a claim may adopt (docs/design/claim.md, "Candidates and the warm queue"),
through the claim controller's harness (an in-memory API enforcing preconditions)."""

from __future__ import annotations

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
from tests.unit.controllers.claim.test_controller import (
    NS,
    Harness,
    claim_v1alpha1,
    claim_v1beta1,
    pool,
    pool_sandbox,
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
