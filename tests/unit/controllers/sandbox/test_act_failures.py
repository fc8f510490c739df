"""The Sandbox act step on a failure tests/unit/controllers/sandbox/test_act.py does not script:
the pod-name annotation patch of a Sandbox deleted meanwhile (through that module's fake)."""

from __future__ import annotations

from agentsandbox.api import keys
from agentsandbox.kube.errors import NotFound
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
