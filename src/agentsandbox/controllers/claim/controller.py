"""The SandboxClaim controller: its wiring and the reconciler (observe -> decide -> act).

A claim gets exactly one Sandbox: one it already controls, else a ready sandbox adopted from a
warm pool, else a cold one built from the template. Then its status names that sandbox, its pod
IPs, and forwards the sandbox's Ready condition, in one write.

What keeps one sandbox from serving two claims, or one claim from getting two sandboxes:

- a warm claim's choice is written on the claim first (an annotation, with the claim's
  ``resourceVersion`` as precondition), and a pass that finds a choice finishes or clears that
  one: a lost answer, a crash or a lagging cache never leads to a second adoption;
- the adoption is a single merge patch carrying the sandbox's ``resourceVersion``: the apiserver
  applies it only to the exact version we vetted, so two claims (two workers, or two controller
  processes) racing for the same sandbox cannot both win; the loser moves to the next candidate;
- the sandbox the claim's status names is looked up first: while it lives and is the claim's it
  stays the claim's, and any other sandbox the claim controls (only possible with two un-elected
  controllers) is the one deleted, with a UID precondition.

Terminal reasons (``TemplateNotFound``, ``WarmPoolNotFound``) are written only after a GET
against the API (not the cache) answered 404, and only for a claim that has no sandbox yet.

The reconciler here handles expiry, the status write and the first-Ready observability; the
decisions are in :mod:`.plan` and :mod:`.claimed_sandbox`; the :class:`~.act.ClaimProvider` it
holds finds the sandbox a claim controls, adopts a warm one or creates a cold one, and records
the claim's Events.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentsandbox.api.conditions import find_condition
from agentsandbox.api.owners import controller_of
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.controllers.claim import metrics as claim_metrics
from agentsandbox.controllers.claim import tracing
from agentsandbox.controllers.claim.act import ClaimProvider
from agentsandbox.controllers.claim.assignment import ClaimChanged, ClaimPass, flush
from agentsandbox.controllers.claim.candidates import CandidatesPending
from agentsandbox.controllers.claim.config import DEFAULT_LABEL_DOMAINS
from agentsandbox.controllers.claim.handlers import (
    OWNER_INDEX,
    ClaimWatches,
    sandbox_change_matters,
)
from agentsandbox.controllers.claim.plan import (
    EVENT_CLAIM_EXPIRED,
    EVENT_QUOTA_EXCEEDED,
    POLICY_DELETE,
    POLICY_DELETE_FOREGROUND,
    REASON_CLAIM_EXPIRED,
    REASON_CREATE_PENDING,
    REASON_QUOTA_EXCEEDED,
    REASON_RECONCILER_ERROR,
    REASON_TEMPLATE_NOT_FOUND,
    REASON_WARM_POOL_NOT_FOUND,
    SANDBOX_NOT_OWNED,
    ClaimFailure,
    claim_status,
    expiry,
    pick_kept,
    ready_condition,
    shutdown_policy,
    status_patch,
    with_ready,
    with_status,
)
from agentsandbox.kube.builder import ControllerBuilder
from agentsandbox.kube.client import Client
from agentsandbox.kube.controller import Controller
from agentsandbox.kube.errors import Conflict, KubeError, NotFound
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.predicate import GenerationChangedPredicate, PredicateFuncs
from agentsandbox.kube.reconcile import RETRY_WITHIN, Request, Result
from agentsandbox.kube.resources import NETWORKPOLICIES
from agentsandbox.kube.store import KubeObject

log = logging.getLogger("agentsandbox.claim")

CONTROLLER_NAME = "sandboxclaim"

MISSING_RECHECK = 60.0  # a missing template or pool: look again (its creation re-queues too)
CONFLICT_RECHECK = 0.2
EXPIRED_RECHECK = 0.001  # the clean-up pass right after Ready=ClaimExpired is written
QUOTA_RECHECK = 10.0  # a create refused by a ResourceQuota: retry at this pace, no backoff


class RetryLater(KubeError):
    """A claim that cannot be served yet for a reason already in its status: retry with
    backoff (one log line, like an API error)."""


class ClaimReconciler:
    """Serves each SandboxClaim with exactly one Sandbox, warm when it can; ``writer`` finds,
    adopts or creates it and records the claim's Events."""

    def __init__(
        self,
        client: Client,
        claims: Informer,
        sandboxes: Informer,
        watches: ClaimWatches,
        clock: Callable[[], float] = time.time,
        *,
        observability_annotations: bool = True,
        networkpolicies: Informer | None = None,
        writer: ClaimProvider,
    ) -> None:
        self.client = client
        self.writer = writer
        self.observability_annotations = observability_annotations
        self.networkpolicies = networkpolicies
        # "<ns>/<claim>" -> (claim UID, when this process first saw it): the controller-measured
        # start of a claim not yet annotated with it, until its first Ready or its deletion
        # (upstream's observedTimes)
        self._observed: dict[str, tuple[str, float]] = {}
        self.claims = claims
        self.sandboxes = sandboxes
        self.clock = clock
        # what the writer adopted or created, until the cache shows it (forgotten with the claim)
        self._bound = writer.bound
        # the warm queue, the indexes and the template/pool -> claims mappings
        self.watches = watches
        self.queue = self.watches.queue
        self.claims_for_pool = self.watches.claims_for_pool
        self.claims_for_template = self.watches.claims_for_template
        self.claim_for_freed_name = self.watches.claim_for_freed_name
        # a deleted pool's served counts and series go with it (autoscaler review #18)
        watches.pools.add_handler(
            None, None, lambda pool: claim_metrics.remove_served_series(pool, writer.served)
        )

    # ---------------------------------------------------------------- reconcile
    @tracing.reconcile_span
    async def reconcile(self, req: Request) -> Result | None:
        key = str(req)
        claim = self.claims.get(req.name, req.namespace)
        if claim is None:
            self._bound.pop(key, None)
            self._observed.pop(key, None)
            return None
        if claim["metadata"].get("deletionTimestamp"):
            return None
        await self._remove_legacy_network_policy(claim)
        now = self.clock()
        claim, first_observed = self._with_first_observed(key, claim, now)
        # the first-observed time is persisted by this pass's first claim write (a warm
        # claim's choice of sandbox), else on its own before anything else it writes: before
        # any status write, so a watcher that sees the claim Ready sees the annotation too
        cp = ClaimPass(claim, dict(first_observed or {}) if self.observability_annotations else {})
        expired, left = expiry(claim, now)
        if expired and cp.pending:
            try:
                await flush(self.client, cp)
            except ClaimChanged:
                return Result(requeue_after=CONFLICT_RECHECK)
            claim = cp.claim
        if expired and _ready_reason(claim) != REASON_CLAIM_EXPIRED:
            return await self._mark_expired(claim, now)  # made visible before anything is deleted
        if expired and shutdown_policy(claim) in (POLICY_DELETE, POLICY_DELETE_FOREGROUND):
            await self._delete_expired_claim(claim)
            return None
        sandbox: KubeObject | None = None
        failure: ClaimFailure | None = None
        error: KubeError | None = None
        try:
            if expired:
                sandbox = await self._retire(claim)
            else:
                sandbox = await self.writer.find_existing(cp)
                if sandbox is None:
                    sandbox = await self.writer.provide(cp)
        except CandidatesPending as pending:
            # pool sandboxes about to get a pod IP, and the claim is young: look again shortly,
            # before any status is written or a cold sandbox made
            return Result(requeue_after=pending.retry_after)
        except ClaimChanged:  # changed or deleted under us: look again
            return Result(requeue_after=CONFLICT_RECHECK)
        except ClaimFailure as f:
            failure = f
        except KubeError as err:
            failure, error = ClaimFailure(REASON_RECONCILER_ERROR, str(err), terminal=False), err
        try:
            await flush(self.client, cp)  # no claim write yet this pass: the annotation first
        except ClaimChanged:
            return Result(requeue_after=CONFLICT_RECHECK)
        except KubeError as err:
            raise _bounded(error or err, left) from (err if error else None)
        # the claim as last written, with the first-observed time kept in memory when it is not
        # persisted (the startup latency is measured from it)
        claim, _ = self._with_first_observed(key, cp.claim, now)
        # the status stops naming its sandbox only when this pass found it gone or not the
        # claim's, or had nothing to fail on: never on an error on the way
        keep = not cp.named_gone and failure is not None and failure.reason != SANDBOX_NOT_OWNED
        status = claim_status(claim, sandbox, failure, now, expired, keep_sandbox=keep)
        if not expired:
            # the Finished condition just mirrored may start a TTL that is already over
            expired, left = expiry(with_status(claim, status), now)
            if expired:
                status = claim_status(
                    with_status(claim, status), sandbox, failure, now, True, keep_sandbox=keep
                )
        try:
            written = await self.write_status(claim, status)
        except KubeError as err:
            raise _bounded(error or err, left) from (err if error else None)
        if (
            written
            and _ready_status(claim) != "True"
            and _ready_status({"status": status}) == "True"
        ):
            await self._first_ready(key, with_status(claim, status), sandbox, now)
        if (
            written
            and failure is not None
            and failure.terminal
            and _ready_reason(claim) != failure.reason
        ):
            # a problem only the user can fix: say it as an Event too, once per transition
            self.writer.event(claim, "Warning", failure.reason, failure.message, "Provisioning")
        if written and expired and _ready_reason(claim) != REASON_CLAIM_EXPIRED:
            self.writer.event(
                claim, "Normal", EVENT_CLAIM_EXPIRED, "Claim expired", "Claim Expired"
            )
            return Result(requeue_after=EXPIRED_RECHECK)
        if error is not None:
            raise _bounded(error, left)
        requeues = [] if left is None else [left]
        if failure is not None:
            if failure.reason in (REASON_RECONCILER_ERROR, REASON_CREATE_PENDING):
                # reported; retried with backoff. A same-name sandbox held Terminating (any
                # editor can) must not make a 0.2 s poll: its deletion event re-queues us
                raise _bounded(RetryLater(failure.message), left)
            if failure.reason in (REASON_TEMPLATE_NOT_FOUND, REASON_WARM_POOL_NOT_FOUND):
                requeues.append(MISSING_RECHECK)
            elif failure.reason == REASON_QUOTA_EXCEEDED:
                if written and _ready_reason(claim) != REASON_QUOTA_EXCEEDED:  # once per spell
                    self.writer.event(
                        claim, "Warning", EVENT_QUOTA_EXCEEDED, failure.message, "Provisioning"
                    )
                requeues.append(QUOTA_RECHECK)
        if not written:
            requeues.append(CONFLICT_RECHECK)
        return Result(requeue_after=min(requeues)) if requeues else None

    async def _remove_legacy_network_policy(self, claim: KubeObject) -> None:
        """Older releases made a NetworkPolicy per claim; delete it if this claim controls it
        (read from the cache; errors are logged, never fatal; docs/design/claim.md, "One pass",
        step 2)."""
        if self.networkpolicies is None:
            return
        meta = claim["metadata"]
        name = f"{meta['name']}-network-policy"
        policy = self.networkpolicies.get(name, meta["namespace"])
        ref = controller_of(policy) if policy is not None else None
        if policy is None or ref is None or ref.get("kind") != "SandboxClaim":
            return
        if ref.get("uid") != meta["uid"]:
            return
        try:
            await self.client.delete(
                NETWORKPOLICIES, name, meta["namespace"], uid=policy["metadata"]["uid"]
            )
        except (NotFound, Conflict):
            pass
        except KubeError as err:
            log.warning(
                "could not delete the legacy NetworkPolicy %s: %s",
                name,
                err,
                extra={"claim": f"{meta['namespace']}/{meta['name']}"},
            )

    # ---------------------------------------------------------------- observability
    def _with_first_observed(
        self, key: str, claim: KubeObject, now: float
    ) -> tuple[KubeObject, dict[str, str] | None]:
        """The claim with its controller-first-observed-at annotation (the persisted one, else
        when this process first saw it), and that annotation when the claim does not carry it
        yet (None when it does).

        This process remembers when it first saw a claim only while that is the sole record
        of it and the claim's first Ready is still to come: not once the annotation is on the
        claim, nor for a claim already Ready or already counted."""
        uid = claim["metadata"]["uid"]
        seen = self._observed.get(key)
        start = seen[1] if seen is not None and seen[0] == uid else now
        added = claim_metrics.controller_first_observed(claim, start)
        if added and _ready_status(claim) != "True" and not claim_metrics.already_recorded(claim):
            self._observed[key] = (uid, start)
        else:
            self._observed.pop(key, None)
        if not added:
            return claim, None
        meta = claim["metadata"]
        annotated = {
            **claim,
            "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}), **added}},
        }
        return annotated, added

    @tracing.ready_span
    async def _first_ready(
        self, key: str, claim: KubeObject, sandbox: KubeObject | None, now: float
    ) -> None:
        """The claim's Ready just turned True: record the startup latencies once, and persist
        the guard annotations so that no flap, restart or other replica counts it again. The
        guards are written with the observability annotations off too: that switch leaves out
        only the first-observed annotation."""
        self._observed.pop(key, None)
        annotations = claim_metrics.first_ready_annotations(claim, now)
        claim_metrics.observe_first_ready(claim, sandbox, now)
        if not annotations:
            return
        meta = claim["metadata"]
        try:
            await self.client.patch(
                SANDBOX_CLAIMS,
                meta["name"],
                {"metadata": {"annotations": annotations}},
                meta["namespace"],
            )
        except KubeError as err:  # the metric is recorded; a lost guard only risks a recount
            log.warning(
                "could not write the claim's observability annotations: %s",
                err,
                extra={"claim": key},
            )

    # ---------------------------------------------------------------- expiry
    async def _mark_expired(self, claim: KubeObject, now: float) -> Result:
        """Ready=False/ClaimExpired first, then (next pass) the clean-up (docs/design/claim.md,
        "Marking expiry first")."""
        status = with_ready(claim, ready_condition(claim, None, None, expired=True), now)
        if not await self.write_status(claim, status):
            return Result(requeue_after=CONFLICT_RECHECK)
        self.writer.event(claim, "Normal", EVENT_CLAIM_EXPIRED, "Claim expired", "Claim Expired")
        return Result(requeue_after=EXPIRED_RECHECK)

    async def _delete_expired_claim(self, claim: KubeObject) -> None:
        """shutdownPolicy Delete/DeleteForeground deletes the claim itself (its sandbox follows
        by garbage collection; docs/design/claim.md, "Deleting an expired claim")."""
        meta = claim["metadata"]
        policy = shutdown_policy(claim)
        self.writer.event(
            claim,
            "Normal",
            EVENT_CLAIM_EXPIRED,
            f"Deleting Claim (ShutdownPolicy={policy})",
            "Deleting",
        )
        with contextlib.suppress(NotFound, Conflict):
            await self.client.delete(
                SANDBOX_CLAIMS,
                meta["name"],
                meta["namespace"],
                uid=meta["uid"],
                propagation_policy="Foreground" if policy == POLICY_DELETE_FOREGROUND else None,
            )

    async def _retire(self, claim: KubeObject) -> KubeObject | None:
        """Retain: delete every sandbox the claim controls (found by its UID, whatever their
        names), never another's (upstream's ``reconcileExpired``; docs/design/claim.md,
        "Retiring the sandbox"). Read from the cache only: a sandbox the cache does not show
        yet re-queues the claim when it appears (the claim controller owns Sandboxes), so an
        expired claim with nothing left costs no API call. Returns the one its status names
        (else the one kept by :func:`pick_kept`), None when it controls none."""
        meta = claim["metadata"]
        ns = meta["namespace"]
        name = ((claim.get("status") or {}).get("sandbox") or {}).get("name") or meta["name"]
        owned = self.sandboxes.by_index(OWNER_INDEX, f"{ns}/{meta['uid']}")
        if not owned:
            if self.sandboxes.get(name, ns) is not None:  # someone else's
                raise ClaimFailure(
                    SANDBOX_NOT_OWNED,
                    f'sandbox not owned by this claim: sandbox "{name}" is not owned by claim '
                    f'"{meta["name"]}"',
                )
            return None
        for sb in owned:
            if sb["metadata"].get("deletionTimestamp"):
                continue
            with contextlib.suppress(NotFound, Conflict):
                await self.client.delete(
                    SANDBOXES,
                    sb["metadata"]["name"],
                    ns,
                    uid=sb["metadata"]["uid"],
                    propagation_policy="Background",
                )
        return dict(pick_kept(owned, name))

    # ---------------------------------------------------------------- writes
    @tracing.status_span
    async def write_status(self, claim: KubeObject, status: Mapping[str, Any]) -> bool:
        """One merge patch of the status, preconditioned on the claim's resourceVersion.
        False when the claim changed under us (look again shortly)."""
        patch = status_patch(claim.get("status") or {}, status)
        if patch is None:
            return True
        meta = claim["metadata"]
        body: dict[str, Any] = {
            "metadata": {"resourceVersion": meta["resourceVersion"]},
            "status": patch,
        }
        try:
            await self.client.patch(
                SANDBOX_CLAIMS, meta["name"], body, meta["namespace"], subresource="status"
            )
        except NotFound:
            return True  # the claim is gone
        except Conflict:
            return False
        return True


def _ready_status(claim: Mapping[str, Any]) -> str | None:
    cond = find_condition((claim.get("status") or {}).get("conditions"), "Ready")
    return None if cond is None else cond.get("status")


def _ready_reason(claim: KubeObject) -> str | None:
    cond = find_condition((claim.get("status") or {}).get("conditions"), "Ready")
    return None if cond is None else cond.get("reason")


def _bounded(err: Exception, left: float | None) -> Exception:
    """``err`` retried no later than the claim's expiry (backoff never postpones it)."""
    if left is not None:
        setattr(err, RETRY_WITHIN, max(left, 0.001))
    return err


def _never(_obj: KubeObject) -> bool:
    return False


def _never_changed(_old: KubeObject, _new: KubeObject) -> bool:
    return False


def setup(
    mgr: Manager,
    workers: int = 1,
    *,
    events: bool = True,
    observability_annotations: bool = True,
    label_domains: Sequence[str] = DEFAULT_LABEL_DOMAINS,
) -> Controller:
    """Register the SandboxClaim controller with a manager; ``label_domains``: the domains
    (with their subdomains) a claim's ``additionalPodMetadata`` labels may use."""
    claims = mgr.get_informer(SANDBOX_CLAIMS)
    sandboxes = mgr.get_informer(SANDBOXES)
    pools = mgr.get_informer(SANDBOX_WARM_POOLS)
    templates = mgr.get_informer(SANDBOX_TEMPLATES)
    # the warm queue, the indexes and the template/pool -> claims mappings
    watches = ClaimWatches(claims, sandboxes, pools, templates)
    writer = ClaimProvider(
        mgr.client,
        sandboxes,
        pools,
        templates,
        watches,
        mgr.event_recorder("sandboxclaim-controller"),
        events=events,
        label_domains=label_domains,
    )
    reconciler = ClaimReconciler(
        mgr.client,
        claims,
        sandboxes,
        watches,
        observability_annotations=observability_annotations,
        networkpolicies=mgr.get_informer(NETWORKPOLICIES),
        writer=writer,
    )
    return (
        ControllerBuilder(mgr)
        .named(CONTROLLER_NAME)
        .for_(SANDBOX_CLAIMS)
        # only the changes of an owned Sandbox that the claim reads
        .owns(SANDBOXES, predicates=[PredicateFuncs(on_update=sandbox_change_matters)])
        # claims never wait on a pool's status (warm sandboxes reach them through the warm
        # queue): only a pool's creation, deletion or spec change re-queues its claims
        .watches(
            SANDBOX_WARM_POOLS,
            reconciler.claims_for_pool,
            predicates=[GenerationChangedPredicate()],
        )
        .watches(SANDBOX_TEMPLATES, reconciler.claims_for_template)
        # a Sandbox's deletion frees its name for the claim of that name (a cold create)
        .watches(
            SANDBOXES,
            reconciler.claim_for_freed_name,
            predicates=[PredicateFuncs(on_create=_never, on_update=_never_changed)],
        )
        .workers(workers)
        .complete(reconciler)
    )


__all__ = [
    "CONFLICT_RECHECK",
    "CONTROLLER_NAME",
    "EXPIRED_RECHECK",
    "MISSING_RECHECK",
    "QUOTA_RECHECK",
    "ClaimReconciler",
    "RetryLater",
    "setup",
]
