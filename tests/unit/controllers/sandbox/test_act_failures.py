"""The Sandbox act step on failures tests/unit/controllers/sandbox/test_act.py does not script
(through that module's fake): the pod-name annotation patch of a Sandbox deleted meanwhile, and
a pod create refused because the namespace is being deleted."""

from __future__ import annotations

from agentsandbox.api import keys
from agentsandbox.controllers.sandbox.act import Failure, SandboxReconcileError
from agentsandbox.kube.errors import Forbidden, NotFound
from agentsandbox.kube.reconcile import is_terminal
from tests.unit.controllers.sandbox.test_act import POD, SANDBOX_KIND, rig
from tests.unit.controllers.sandbox.test_plan import sandbox


async def test_an_annotation_patch_of_a_sandbox_deleted_meanwhile_is_no_error() -> None:
    """The Sandbox went away between the cache read and the patch: nothing to annotate, no
    error for the pass (its deletion brings its own event); the rest of the pass goes on."""
    r = rig(sandbox(sandbox_annotations={keys.ANNOTATION_POD_NAME: "gone"}))
    r.client.fail[("patch", SANDBOX_KIND, "my-sandbox")] = NotFound(message="gone")
    await r.run()  # no SandboxReconcileError
    sent = r.client.sent()
    assert ("create", POD, "my-sandbox") in sent
    assert ("patch", SANDBOX_KIND, "my-sandbox") in sent
    assert r.client.status_patches()  # the status write still happened


def _namespace_terminating() -> Forbidden:
    return Forbidden(
        403,
        "Forbidden",
        'pods "my-sandbox" is forbidden: unable to create new content in namespace ns because '
        "it is being terminated",
        {"causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}]},
    )


async def test_a_pod_create_refused_by_a_terminating_namespace_is_reported_and_terminal() -> None:
    """The pass still reports the refusal (status and Event), but its error is terminal: the
    runtime does not retry it, so a dying namespace's sandboxes take none of the retry budget
    every other Sandbox shares; their deletion is their next event."""
    r = rig(sandbox())
    r.client.fail[("create", POD, "my-sandbox")] = _namespace_terminating()
    err = await r.fails()
    assert err.terminal is True and is_terminal(err)
    assert "because it is being terminated" in err.errors[0]
    assert r.client.status_patches()  # the observer still sees why
    assert r.recorder.reasons() == ["ReconcilerError"]


async def test_a_pass_with_any_other_failure_is_retried() -> None:
    r = rig(sandbox())
    r.client.fail[("create", POD, "my-sandbox")] = Forbidden(
        403, "Forbidden", 'pods "my-sandbox" is forbidden: exceeded quota: pods'
    )
    err = await r.fails()
    assert err.terminal is False and not is_terminal(err)


def test_one_mendable_failure_among_terminal_ones_keeps_the_retry() -> None:
    refused = Failure.of("refused", _namespace_terminating())
    assert refused.terminal
    assert SandboxReconcileError("ns/a", [refused]).terminal
    assert not SandboxReconcileError("ns/a", [refused, "status update failed: timeout"]).terminal
    assert not SandboxReconcileError("ns/a", []).terminal
