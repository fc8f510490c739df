"""The edges of picking a warm pool sandbox (docs/design/claim.md, "Candidates and the warm
queue"): a queued name the sandbox cache no longer shows, a sandbox put back that no pool
controls, a template whose hashes cannot be computed, a claim whose creation time cannot be read.
Through the claim controller's harness (tests/unit/controllers/claim/test_controller.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.controllers.claim.candidates import (
    WARM_CANDIDATE_RETRY,
    CandidatesPending,
)
from agentsandbox.kube.errors import InternalError, KubeError
from tests.unit.controllers.claim.test_assignment_protocol import ready_status, status_name
from tests.unit.controllers.claim.test_candidates import CREATED, without_pod_ips
from tests.unit.controllers.claim.test_controller import (
    NS,
    Harness,
    claim_v1beta1,
    pool,
    pool_sandbox,
    setup_pool,
    template,
)


def name_of(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


async def test_a_queued_name_the_sandbox_cache_no_longer_shows_is_dropped_at_the_next_pick() -> (
    None
):
    """X's adoption write fails (a 500) while X's deletion reaches the cache, so X is put back on
    the warm queue after the cache forgot it: the next pick drops X from the queue rather than
    trying it, and the claim adopts a live pool sandbox."""
    h = Harness()
    _, _, sbs = setup_pool(h, members=2)
    h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    tried: list[str] = []

    def deleted_while_the_write_fails(verb: str, plural: str, name: str) -> None:
        if (verb, plural) == ("patch", SANDBOXES.plural) and not tried:
            tried.append(name)
            gone = h.api.objects.pop((plural, NS, name))
            h.sandboxes.remove(gone)  # the delete event arrives before the answer
            raise InternalError(message="etcd timeout")

    h.api.before = deleted_while_the_write_fails
    with pytest.raises(KubeError):
        await h.reconcile()
    (x,) = tried
    (y,) = {name_of(sb) for sb in sbs} - {x}
    assert (NS, x) in h.r.queue, "put back, though the cache no longer shows it"
    h.api.before = None
    h.sync(SANDBOX_CLAIMS.plural)
    await h.reconcile()
    assert (NS, x) not in h.r.queue
    assert status_name(h) == y and ready_status(h) == "True"
    assert not [c for c in h.api.calls if c[:2] == ("create", SANDBOXES.plural)]


@pytest.mark.parametrize("owner", ["orphan", "replicaset"])
def test_put_back_never_queues_a_sandbox_no_pool_controls(owner: str) -> None:
    """Putting a sandbox back on the warm queue queues it only under the pool that controls it:
    one no pool controls is never queued (while a pool's own one is)."""
    h = Harness()
    t, p, _ = setup_pool(h, members=0)
    outsider = h.add(SANDBOXES.plural, pool_sandbox(p, t, owner=owner), cache=False)
    member = h.add(SANDBOXES.plural, pool_sandbox(p, t), cache=False)
    before = len(h.r.queue)
    h.r.writer.picker.put_back(outsider)
    assert (NS, name_of(outsider)) not in h.r.queue
    assert len(h.r.queue) == before
    h.r.writer.picker.put_back(member)
    assert list(h.r.queue.names((NS, p["metadata"]["name"]))) == [name_of(member)]


def test_a_template_that_cannot_be_hashed_calls_no_member_of_a_recreate_pool_stale() -> None:
    """Under a Recreate pool a member built from an older version of the claim's template is
    stale and not adoptable, except when the template's hashes cannot be computed (a pod template
    that does not decode): then nothing is called stale, as the pool itself does."""
    h = Harness()
    built_from = h.add(SANDBOX_TEMPLATES.plural, template("tpl", image="v1"))
    p = h.add(SANDBOX_WARM_POOLS.plural, pool("pool", "tpl", updateStrategy={"type": "Recreate"}))
    sb = h.add(SANDBOXES.plural, pool_sandbox(p, built_from))
    claim = h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    changed = template("tpl", image="v2")
    changed["metadata"] = copy.deepcopy(built_from["metadata"])
    assert h.r.writer.picker.start(claim, changed, [p]).problem(sb) == "stale under a Recreate pool"
    unhashable = copy.deepcopy(changed)
    unhashable["spec"]["podTemplate"]["spec"]["containers"] = "main"  # not a list
    assert h.r.writer.picker.start(claim, unhashable, [p]).problem(sb) is None


@pytest.mark.parametrize("created", [None, "", "not-a-time"], ids=["absent", "empty", "garbage"])
def test_a_claim_whose_creation_time_cannot_be_read_gets_no_grace_for_pending_candidates(
    created: str | None,
) -> None:
    """A claim whose only candidates wait for a pod IP is told to look again shortly only when
    its creation time is known and within the grace; one without a readable creation time is
    not (the pick finds nothing: cold), and the pending candidate stays queued."""
    h = Harness()
    t, p, (sb,) = setup_pool(h, members=1)
    without_pod_ips(h, sb)
    claim = h.add(SANDBOX_CLAIMS.plural, claim_v1beta1())
    h.r.writer.picker.clock = lambda: CREATED + 0.5
    with pytest.raises(CandidatesPending) as pending:
        h.r.writer.picker.start(claim, t, [p]).pick()
    assert pending.value.retry_after == WARM_CANDIDATE_RETRY, "known and young: a short retry"
    unreadable = copy.deepcopy(claim)
    if created is None:
        del unreadable["metadata"]["creationTimestamp"]
    else:
        unreadable["metadata"]["creationTimestamp"] = created
    vetting = h.r.writer.picker.start(unreadable, t, [p])
    assert vetting.retry_after() is None
    assert vetting.pick() is None
    assert vetting.pending == 1
    assert list(h.r.queue.names((NS, p["metadata"]["name"]))) == [name_of(sb)]
