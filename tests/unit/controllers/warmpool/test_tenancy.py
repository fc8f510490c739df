"""A warm pool never treats a Sandbox in another namespace as its own (security review #1).

Owner references cannot cross namespaces, but anyone who may create Sandboxes in namespace B can
write one whose controller reference names a pool of namespace A by its UID (until the garbage
collector strips it, and again and again). The pool's lookup by controller UID was keyed by the
UID alone, so such a sandbox was counted among the pool's own: the pool tried to release it (a
PATCH in its own namespace) and its ADDED event lowered the pool's create expectations.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.unit.controllers.warmpool.test_act import (
    Harness,
    _strip_pool_label,
    pool,
    sandbox,
    template,
)


def elsewhere(sb: dict[str, Any], ns: str = "mallory") -> dict[str, Any]:
    out = copy.deepcopy(sb)
    out["metadata"]["namespace"] = ns
    out["metadata"]["uid"] = "forged-" + out["metadata"]["uid"]
    return out


async def test_a_sandbox_in_another_namespace_naming_the_pool_is_never_released() -> None:
    t = template()
    p = pool(1)
    forged = elsewhere(_strip_pool_label(sandbox(p, t)))  # no pool label: a release candidate
    h = Harness(p, t, sandbox(p, t), forged)
    await h.reconcile()
    assert [v for v, _ in h.verbs()].count("patch") == 0, h.verbs()
    assert "create" not in [v for v, _ in h.verbs()]  # one member for one replica: nothing to do


async def test_a_sandbox_added_in_another_namespace_does_not_meet_the_pools_expectations() -> None:
    t = template()
    p = pool(2)
    h = Harness(p, t)
    await h.reconcile()  # two creates expected, not observed yet
    assert h.pending().creates == 2
    h.sandboxes.put(elsewhere(sandbox(p, t)))
    h.sandboxes.put(elsewhere(sandbox(p, t), "eve"))
    assert h.pending().creates == 2, "another namespace's sandboxes met the pool's expectations"
    h.observe_created()
    assert h.pending().creates == 0
