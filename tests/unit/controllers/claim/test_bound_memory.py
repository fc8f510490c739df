"""What this process remembers having made for a claim (``ClaimProvider.bound``) is dropped once
the API says that sandbox is gone: it must not cost a GET on every later pass."""

from __future__ import annotations

import contextlib

from agentsandbox.api.resources import SANDBOX_CLAIMS
from agentsandbox.kube.errors import KubeError

from .test_controller import NS, Harness, claim_v1alpha1


async def test_a_remembered_sandbox_the_api_says_is_gone_is_read_once_not_every_pass() -> None:
    """claim review note 15: a ``bound`` entry whose sandbox was deleted before the cache saw
    it was read from the API on every pass with no owned sandbox (here the claim's template is
    missing, so every pass fails and nothing replaces the entry)."""
    h = Harness()
    claim = h.add(SANDBOX_CLAIMS.plural, claim_v1alpha1(tpl="missing"))
    h.r.writer.bound[f"{NS}/claim"] = (claim["metadata"]["uid"], "made-then-deleted")
    for _ in range(3):
        with contextlib.suppress(KubeError):
            await h.reconcile()
        h.sync()
    reads = [c for c in h.api.calls if c == ("get", "sandboxes", "made-then-deleted")]
    assert len(reads) == 1, f"the gone sandbox was read {len(reads)} times in 3 passes"
    assert f"{NS}/claim" not in h.r.writer.bound
