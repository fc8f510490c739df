"""``--sandbox-write-behind-window`` (``controllers/sandbox/act.py``, ``WriteBehind``).

With a window, the repair of an owned pod's drifted labels and annotations may wait up to the
window (at most 1 s for pods, as upstream) and the drifts of that time reach the pod as one
patch; every other write is made in the pass that decides it. The clock is a fake one moved by
hand, so no test depends on how fast the machine is.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agentsandbox.api import keys
from agentsandbox.api.hashing import name_hash
from agentsandbox.controllers.sandbox.act import (
    POD_METADATA_FLUSH_BOUND,
    WriteBehind,
    is_metadata_repair,
)
from agentsandbox.controllers.sandbox.types import Action, ChildStep
from agentsandbox.kube.errors import InternalError
from tests.unit.controllers.sandbox.test_act import (
    POD,
    SANDBOX_KIND,
    STATUS,
    SVC,
    Rig,
    merge_patch,
    rig,
)
from tests.unit.controllers.sandbox.test_plan import (
    NS,
    _Cache,
    running_pod,
    sandbox,
    service_obj,
)

HASH = name_hash("my-sandbox")
NAME = "my-sandbox"


def drifted_pod(**labels: str) -> dict[str, Any]:
    """Our running pod, with template labels ``labels`` propagated to it earlier."""
    return running_pod(
        labels={keys.LABEL_SANDBOX_NAME_HASH: HASH, **labels},
        annotations={keys.ANNOTATION_PROPAGATED_LABELS: ",".join(sorted(labels))},
    )


def with_window(r: Rig, window: float) -> Rig:
    r.reconciler.writer.write_behind = WriteBehind(window, clock=r.monotonic)
    return r


def pod_patches(r: Rig, since: int = 0) -> list[Any]:
    return [c.body for c in r.client.calls[since:] if c.key == ("patch", POD, NAME)]


def update_sandbox(r: Rig, labels: dict[str, str] | None = None, status: Any = None) -> None:
    """A new version of the Sandbox in the cache: the user's edit of its pod template labels,
    or our status patch applied."""
    sb = copy.deepcopy(r.reconciler.sandboxes.get(NAME, NS))
    assert sb is not None
    if labels is not None:
        sb["spec"]["podTemplate"]["metadata"]["labels"] = labels
    if status is not None:
        sb = merge_patch(sb, status)
    sb["metadata"]["resourceVersion"] = str(int(sb["metadata"]["resourceVersion"]) + 1)
    r.reconciler.sandboxes = _Cache(sb)  # type: ignore[assignment]


def set_template_labels(r: Rig, labels: dict[str, str]) -> None:
    update_sandbox(r, labels=labels)


def apply_pod_patches(r: Rig, since: int) -> None:
    """What the watch would bring: our pod patches, applied to the cached pod."""
    live = r.reconciler.pods.get(NAME, NS)
    assert live is not None
    for body in pod_patches(r, since):
        live = merge_patch(live, body)
    r.reconciler.pods = _Cache(live)  # type: ignore[assignment]


# ---------------------------------------------------------------------------- which steps
def test_only_a_patch_of_labels_and_annotations_is_a_metadata_repair() -> None:
    labels = {"metadata": {"labels": {"team": "b"}}}
    both = {"metadata": {"labels": {"a": "1"}, "annotations": {"b": None}}}
    adopt = {"metadata": {"labels": {"a": "1"}, "ownerReferences": [], "resourceVersion": "7"}}
    selector = {"spec": {"selector": {"x": "y"}}}
    assert is_metadata_repair(ChildStep(Action.PATCH, "p", body=labels))
    assert is_metadata_repair(ChildStep(Action.PATCH, "p", body=both))
    assert not is_metadata_repair(ChildStep(Action.PATCH, "p", body=adopt))
    assert not is_metadata_repair(ChildStep(Action.PATCH, "p", body=selector))
    assert not is_metadata_repair(ChildStep(Action.PATCH, "p", body={"metadata": {}}))
    assert not is_metadata_repair(ChildStep(Action.CREATE, "p", body=labels))
    assert not is_metadata_repair(ChildStep(Action.DELETE, "p", uid="u"))
    assert not is_metadata_repair(ChildStep(Action.NONE, "p"))


# ---------------------------------------------------------------------------- window 0
async def test_a_window_of_zero_puts_nothing_off() -> None:
    """The default: the pass that finds the drift patches the pod, and asks for no requeue."""
    r = rig(sandbox(labels={"team": "b"}), drifted_pod(team="a"))
    assert r.reconciler.writer.write_behind.enabled is False
    assert r.reconciler.writer.deferral(NS, NAME) is None
    with_window(r, 0.0)
    assert r.reconciler.writer.deferral(NS, NAME) is None
    result = await r.run()
    assert pod_patches(r) == [{"metadata": {"labels": {"team": "b"}}}]
    assert result is None
    assert r.reconciler.writer.write_behind.pending() == 0


def test_a_negative_window_is_refused() -> None:
    with pytest.raises(ValueError):
        WriteBehind(-0.5)


# ---------------------------------------------------------------------------- what waits
async def test_a_pod_label_repair_waits_for_the_window_and_the_status_does_not() -> None:
    stale = {keys.ANNOTATION_POD_NAME: "gone"}  # names a pod that is gone: cleared
    r = with_window(
        rig(sandbox(labels={"team": "b"}, sandbox_annotations=stale), drifted_pod(team="a")), 0.25
    )
    result = await r.run()
    assert pod_patches(r) == []
    assert result is not None and result.requeue_after == pytest.approx(0.25)
    # the status and the clearing of the stale pod-name annotation are written at once
    assert ("patch", STATUS, NAME) in r.client.sent()
    assert ("patch", SANDBOX_KIND, NAME) in r.client.sent()
    r.monotonic.now += 0.25
    result = await r.run()
    assert pod_patches(r) == [{"metadata": {"labels": {"team": "b"}}}]
    assert result is None
    assert r.reconciler.writer.write_behind.pending() == 0


async def test_a_pod_annotation_repair_waits_too() -> None:
    sb = sandbox(pod_annotations={"note": "two"})
    stale = running_pod(
        annotations={"note": "one", keys.ANNOTATION_PROPAGATED_ANNOTATIONS: "note"},
    )
    r = with_window(rig(sb, stale), 0.5)
    await r.run()
    assert pod_patches(r) == []
    r.monotonic.now += 0.5
    await r.run()
    assert pod_patches(r) == [{"metadata": {"annotations": {"note": "two"}}}]


async def test_creates_deletes_adoptions_service_repairs_and_the_pod_name_never_wait() -> None:
    """The window is open the whole time (the clock never moves): each of these writes is made
    by the pass that decides it, as with no window."""
    window = 1.0
    # a create, and the clearing of a pod-name annotation whose pod is gone
    stale = {keys.ANNOTATION_POD_NAME: "gone"}
    r = with_window(rig(sandbox(labels={"team": "b"}, sandbox_annotations=stale)), window)
    await r.run()
    assert ("create", POD, NAME) in r.client.sent()
    assert ("patch", SANDBOX_KIND, NAME) in r.client.sent()
    # an adoption: owner references (and labels) in one patch, at once
    unowned = running_pod(owner=None, labels={keys.LABEL_ADOPTABLE: "true"})
    r = with_window(rig(sandbox(labels={"team": "b"}), unowned), window)
    await r.run()
    [adopt] = pod_patches(r)
    assert adopt["metadata"]["ownerReferences"][0]["uid"] == "sandbox-uid"
    assert adopt["metadata"]["labels"]["team"] == "b"
    # a delete (suspended), with a drifted pod
    r = with_window(rig(sandbox(replicas=0, labels={"team": "b"}), drifted_pod(team="a")), window)
    await r.run()
    assert ("delete", POD, NAME) in r.client.sent()
    assert pod_patches(r) == []
    # a drifted Service selector is restored at once, while the pod's labels wait
    svc = service_obj(selector={"app": "x"})
    r = with_window(
        rig(sandbox(service=True, labels={"team": "b"}), drifted_pod(team="a"), service=svc),
        window,
    )
    await r.run()
    assert ("patch", SVC, NAME) in r.client.sent()
    assert pod_patches(r) == []


# ---------------------------------------------------------------------------- the cap
@pytest.mark.parametrize("window", [1.0, 5.0, 3600.0])
async def test_a_pod_repair_waits_at_most_one_second_whatever_the_window(window: float) -> None:
    assert WriteBehind(window).window == POD_METADATA_FLUSH_BOUND == 1.0
    r = with_window(rig(sandbox(labels={"team": "b"}), drifted_pod(team="a")), window)
    result = await r.run()
    assert result is not None and result.requeue_after == pytest.approx(1.0)
    r.monotonic.now += 0.875
    result = await r.run()
    assert pod_patches(r) == []
    assert result is not None and result.requeue_after == pytest.approx(0.125)
    r.monotonic.now += 0.125
    await r.run()
    assert pod_patches(r) == [{"metadata": {"labels": {"team": "b"}}}]


async def test_a_pass_that_fails_retries_no_later_than_the_repair_is_due() -> None:
    """Another child's error makes the pass fail; its retry (whatever the backoff) comes by the
    time the pod repair put off is due, so the error cannot stretch the 1 s bound."""
    r = with_window(rig(sandbox(service=True, labels={"team": "b"}), drifted_pod(team="a")), 0.75)
    r.client.fail[("create", SVC, NAME)] = InternalError(message="etcd is away")
    err = await r.fails()
    assert pod_patches(r) == []
    assert err.retry_within == pytest.approx(0.75)
    assert r.reconciler.writer.write_behind.pending() == 1


# ---------------------------------------------------------------------------- coalescing
async def test_drifts_within_the_window_reach_the_pod_as_one_patch_with_the_final_state() -> None:
    r = with_window(rig(sandbox(labels={"team": "b"}), drifted_pod(team="a")), 1.0)
    await r.run()  # t=0: team a -> b found, put off
    r.monotonic.now += 0.25
    set_template_labels(r, {"team": "c", "tier": "gold"})
    result = await r.run()  # t=0.25: the window is not re-armed
    assert result is not None and result.requeue_after == pytest.approx(0.75)
    r.monotonic.now += 0.25
    set_template_labels(r, {"team": "d", "tier": "gold"})
    await r.run()  # t=0.5
    assert pod_patches(r) == []
    r.monotonic.now += 0.5
    await r.run()  # t=1.0: due
    [body] = pod_patches(r)
    # the patch an undeferred pass would send for the final template, and nothing else
    undeferred = rig(sandbox(labels={"team": "d", "tier": "gold"}), drifted_pod(team="a"))
    await undeferred.run()
    assert pod_patches(undeferred) == [body]
    assert body["metadata"]["labels"] == {"team": "d", "tier": "gold"}


async def test_a_drift_that_goes_away_within_the_window_writes_nothing_and_ends_it() -> None:
    r = with_window(rig(sandbox(labels={"team": "b"}), drifted_pod(team="a")), 1.0)
    await r.run()
    assert r.reconciler.writer.write_behind.pending() == 1
    r.monotonic.now += 0.5
    set_template_labels(r, {"team": "a"})  # back to what the pod has
    result = await r.run()
    assert pod_patches(r) == [] and result is None
    assert r.reconciler.writer.write_behind.pending() == 0
    # a later drift opens a new window of its own
    r.monotonic.now += 10.0
    set_template_labels(r, {"team": "z"})
    result = await r.run()
    assert pod_patches(r) == []
    assert result is not None and result.requeue_after == pytest.approx(1.0)


async def test_a_deleted_sandbox_drops_its_pending_repair() -> None:
    r = with_window(rig(sandbox(labels={"team": "b"}), drifted_pod(team="a")), 1.0)
    await r.run()
    assert r.reconciler.writer.write_behind.pending() == 1
    r.reconciler.sandboxes = _Cache()  # type: ignore[assignment]
    assert await r.run() is None
    assert r.reconciler.writer.write_behind.pending() == 0


# ---------------------------------------------------------------------------- final state
EDITS: list[tuple[float, dict[str, str]]] = [
    (0.0, {"team": "b"}),
    (0.25, {"team": "c", "tier": "gold"}),
    (0.5, {"tier": "silver"}),
    (2.0, {"tier": "silver", "zone": "z1"}),
    (2.125, {"zone": "z2"}),
]


async def run_edits(window: float) -> tuple[Rig, dict[str, Any], list[dict[str, Any]]]:
    """Each edit of the template's labels at its time, and a pass at each edit and at every
    requeue a pass asks for (as the work queue would), the caches following our writes; until
    no pass asks for another. Returns the rig, the final pod and the status writes in order."""
    r = with_window(rig(sandbox(labels={"team": "a"}), drifted_pod(team="a")), window)
    start = r.monotonic.now
    edits = [(start + t, labels) for t, labels in EDITS]
    due: list[float] = []
    statuses: list[dict[str, Any]] = []
    for _ in range(100):  # a bound for a bug that requeues forever
        if not edits and not due:
            break
        now = min([*due, *(t for t, _ in edits[:1])])
        r.monotonic.now = now
        due = [d for d in due if d > now]
        while edits and edits[0][0] <= now:
            set_template_labels(r, edits.pop(0)[1])
        before = len(r.client.calls)
        result = await r.run()
        apply_pod_patches(r, before)
        for call in r.client.calls[before:]:
            if call.key == ("patch", STATUS, NAME):
                statuses.append(call.body)
                update_sandbox(r, status=call.body)
        if result is not None and result.requeue_after:
            due.append(now + result.requeue_after)
    else:
        raise AssertionError("the passes never settled")
    live = r.reconciler.pods.get(NAME, NS)
    assert live is not None
    return r, live, statuses


async def test_the_final_pod_and_status_equal_those_of_a_run_without_a_window() -> None:
    plain, plain_pod, plain_statuses = await run_edits(0.0)
    deferred, deferred_pod, deferred_statuses = await run_edits(1.0)
    assert deferred_pod["metadata"] == plain_pod["metadata"]
    assert deferred_pod["metadata"]["labels"] == {
        keys.LABEL_SANDBOX_NAME_HASH: HASH,
        "zone": "z2",
    }
    assert deferred_statuses == plain_statuses  # the status writes are the same ones
    # fewer pod writes: edits 0.0/0.2/0.5 coalesce into one, and 2.0/2.1 into another
    assert len(pod_patches(plain)) == len(EDITS)
    assert len(pod_patches(deferred)) == 2
    assert deferred.reconciler.writer.write_behind.pending() == 0
