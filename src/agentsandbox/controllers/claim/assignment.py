"""The claim's side of the assignment protocol: which pool sandbox a claim has chosen, written
on the claim before the sandbox is touched (docs/design/claim.md, "Finding the claim's
sandbox" and "Warm or cold").

The choice is the claim annotation ``agents.x-k8s.io/sandbox-name`` (upstream v1.0.1's key;
older upstream releases wrote a label of the same key, read too and moved to the annotation
when used). Every write here is a merge patch of the claim's metadata carrying the
``resourceVersion`` the pass last saw: a claim changed by anyone else since refuses it, and the
pass looks again (:class:`ClaimChanged`) instead of writing over what it did not see.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agentsandbox.api import keys
from agentsandbox.api.resources import SANDBOX_CLAIMS
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import Conflict, NotFound
from agentsandbox.kube.store import KubeObject

__all__ = [
    "ASSIGNED_SANDBOX",
    "COLD_START",
    "ClaimChanged",
    "ClaimPass",
    "assignment",
    "cold_mark",
    "flush",
    "mark_cold",
    "write_claim_metadata",
]

#: The claim annotation naming the pool sandbox the claim has chosen (and, deprecated, the
#: label of the same key that upstream releases before v1.0.1 wrote).
ASSIGNED_SANDBOX = keys.LABEL_SANDBOX_NAME

#: Ours: the claim annotation a pass writes (with the claim's ``resourceVersion``) before it
#: creates the claim's cold sandbox; its value counts those decisions ("1", "2", ...). A pass
#: that reads it does not adopt from a pool while the sandbox it was written for may live, and
#: a choice written over a claim that gained it is refused: a cold create and an adoption by two
#: processes cannot both go ahead for one claim.
COLD_START = keys.ANNOTATION_COLD_START


class ClaimChanged(Exception):
    """The claim changed (or went) since this pass read it: nothing more is written, the pass
    looks again shortly."""


@dataclass
class ClaimPass:
    """What one pass knows of its claim.

    ``claim``: the claim as this pass last read or wrote it (its ``resourceVersion`` is the
    precondition of the pass's next claim write). ``pending``: annotations the pass still has
    to persist, carried by its first claim write (the first-observed time), written on their
    own before anything else when the pass has no claim write of its own to make.
    ``named_gone``: the sandbox the claim's status names was found gone or not the claim's.
    """

    claim: KubeObject
    pending: dict[str, str] = field(default_factory=dict)
    named_gone: bool = False


def assignment(claim: KubeObject) -> tuple[str, bool]:
    """The sandbox the claim has chosen ("" if none), and whether it was read from the
    deprecated label (the annotation wins when both are set)."""
    meta = claim.get("metadata") or {}
    annotated = (meta.get("annotations") or {}).get(ASSIGNED_SANDBOX) or ""
    if annotated:
        return str(annotated), False
    labelled = (meta.get("labels") or {}).get(ASSIGNED_SANDBOX) or ""
    return str(labelled), bool(labelled)


def cold_mark(claim: KubeObject) -> str:
    """The claim's cold-start mark ("" if none)."""
    return str(((claim.get("metadata") or {}).get("annotations") or {}).get(COLD_START) or "")


async def mark_cold(client: Client, cp: ClaimPass) -> None:
    """Record on the claim, before its cold sandbox is created, that this pass serves it cold
    (with any pending annotations, in one write guarded by the claim's ``resourceVersion``).
    Written anew (the count moved on) unless the claim already carries a mark made for a
    sandbox that may live: a write that changes nothing would not move the
    ``resourceVersion``, and a racing choice could still be written."""
    mark = cold_mark(cp.claim)
    if mark and not cp.named_gone:
        await flush(client, cp)
        return
    count = int(mark) + 1 if mark.isdigit() else 1
    await write_claim_metadata(client, cp, {COLD_START: str(count)})


async def write_claim_metadata(
    client: Client,
    cp: ClaimPass,
    annotations: Mapping[str, str | None] | None = None,
    labels: Mapping[str, str | None] | None = None,
) -> None:
    """One merge patch of the claim's metadata (``None`` removes a key), carrying the pass's
    pending annotations and the ``resourceVersion`` it last saw; ``cp.claim`` becomes the
    claim as written. :class:`ClaimChanged` when the claim changed or went meanwhile."""
    meta = cp.claim["metadata"]
    body: dict[str, object] = {"resourceVersion": meta["resourceVersion"]}
    merged: dict[str, str | None] = {**cp.pending, **(annotations or {})}
    if merged:
        body["annotations"] = merged
    if labels:
        body["labels"] = dict(labels)
    try:
        cp.claim = await client.patch(
            SANDBOX_CLAIMS, meta["name"], {"metadata": body}, meta["namespace"]
        )
    except (Conflict, NotFound):
        raise ClaimChanged(f"claim {meta['namespace']}/{meta['name']} changed") from None
    cp.pending = {}


async def flush(client: Client, cp: ClaimPass) -> None:
    """Persist the pass's pending annotations now (before a write that must come after them)."""
    if cp.pending:
        await write_claim_metadata(client, cp)
