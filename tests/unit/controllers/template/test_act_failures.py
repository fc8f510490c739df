"""The template's label patch on the failures tests/unit/controllers/template/test_controller.py
does not script: the template gone meanwhile (NotFound) and any other refusal, through that
module's in-memory API (resourceVersion preconditions as the real one)."""

from __future__ import annotations

import pytest

from agentsandbox.kube.errors import Forbidden, NotFound
from tests.unit.controllers.template.test_controller import NP, NS, TPL, Rig, template


async def test_a_label_patch_of_a_template_deleted_meanwhile_is_no_error() -> None:
    rig = Rig()
    rig.add_template(template())
    rig.api.fail[("patch", TPL)] = [NotFound(404, "NotFound", "gone")]
    assert await rig.reconcile() is None
    assert rig.api.writes() == [
        ("create", NP, "test-template-network-policy"),
        ("patch", TPL, "test-template"),
    ]


async def test_a_refused_label_patch_is_raised_and_sent_again_next_pass() -> None:
    rig = Rig()
    rig.add_template(template())
    rig.api.fail[("patch", TPL)] = [Forbidden(403, "Forbidden", "patch is forbidden")]
    with pytest.raises(Forbidden):
        await rig.reconcile()
    stored = rig.api.stored(TPL, NS, "test-template")
    assert stored is not None and not stored["metadata"].get("labels")
    rig.sync()
    assert await rig.reconcile() is None
    assert rig.api.writes() == [("patch", TPL, "test-template")]  # not remembered as done
    stored = rig.api.stored(TPL, NS, "test-template")
    assert stored is not None and stored["metadata"]["labels"]
