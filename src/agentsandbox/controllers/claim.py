"""The SandboxClaim controller: observe (caches) -> decide (:mod:`.claim_plan`) -> act.

A claim gets exactly one Sandbox: one it already controls, else a ready sandbox adopted from a
warm pool, else a cold one built from the template. Then its status names that sandbox, its pod
IPs, and forwards the sandbox's Ready condition, in one write.

What keeps one sandbox from serving two claims, or one claim from getting two sandboxes:

- the adoption is a single merge patch carrying the sandbox's ``resourceVersion``: the apiserver
  applies it only to the exact version we vetted, so two claims (two workers, or two controller
  processes) racing for the same sandbox cannot both win; the loser moves to the next candidate;
- before adopting or creating, the claim looks for any sandbox it already controls (an informer
  index on the controller UID), and for what this process or the claim's status says it holds
  (read from the API when the cache does not show it yet): a pass that crashed after the adoption
  write, or a cache that lags, never leads to a second adoption;
- a claim found controlling several sandboxes (only possible with two un-elected controllers)
  keeps the one its status names and deletes the others with a UID precondition.

Terminal reasons (``TemplateNotFound``, ``WarmPoolNotFound``) are written only after a GET
against the API (not the cache) answered 404, and only for a claim that has no sandbox yet.
"""

from __future__ import annotations

import contextlib
import logging
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentsandbox.api import keys
from agentsandbox.api.conditions import find_condition, is_sandbox_ready
from agentsandbox.api.gojson import GoJSONError
from agentsandbox.api.hashing import pod_template_hash
from agentsandbox.api.owners import controller_of
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.kube.client import Client
from agentsandbox.kube.controller import (
    RETRY_WITHIN,
    Controller,
    ControllerBuilder,
    Request,
    Result,
)
from agentsandbox.kube.errors import AlreadyExists, Conflict, Forbidden, KubeError, NotFound
from agentsandbox.kube.events import EventRecorder
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.manager import Manager
from agentsandbox.kube.resources import NETWORKPOLICIES, Resource
from agentsandbox.kube.store import KubeObject

from . import claim_metrics, tracing
from .claim_handler import OWNER_INDEX, ClaimWatches
from .claim_plan import (
    EVENT_ADOPTED,
    EVENT_CLAIM_EXPIRED,
    EVENT_COLD_START_FORCED,
    EVENT_PROVISIONED,
    EVENT_QUOTA_EXCEEDED,
    POLICY_DELETE,
    POLICY_DELETE_FOREGROUND,
    POLICY_NONE,
    REASON_CLAIM_EXPIRED,
    REASON_CREATE_PENDING,
    REASON_QUOTA_EXCEEDED,
    REASON_RECONCILER_ERROR,
    REASON_TEMPLATE_NOT_FOUND,
    REASON_WARM_POOL_NOT_FOUND,
    SANDBOX_NOT_OWNED,
    ClaimFailure,
    Source,
    adoptable,
    adoption_patch,
    candidate_problem,
    claim_source,
    claim_status,
    cold_sandbox,
    expiry,
    forces_cold_start,
    pick_kept,
    pool_owner,
    ready_condition,
    shutdown_policy,
    status_patch,
    validate_additional_metadata,
    with_ready,
    with_status,
)

log = logging.getLogger("agentsandbox.claim")

CONTROLLER_NAME = "sandboxclaim"

MISSING_RECHECK = 60.0  # a missing template or pool: look again (its creation re-queues too)
CREATE_PENDING_RECHECK = 0.2
CONFLICT_RECHECK = 0.2
MAX_ADOPTION_ATTEMPTS = 5  # failed adoptions before the cold fallback
MAX_ADOPTION_LOOKS = 64  # candidates looked at in one pass, lost races included
EXPIRED_RECHECK = 0.001  # the clean-up pass right after Ready=ClaimExpired is written
QUOTA_RECHECK = 10.0  # a create refused by a ResourceQuota: retry at this pace, no backoff
SPREAD = 32  # Ready candidates among which a claim's UID picks (see ClaimReconciler._pick)


class RetryLater(KubeError):
    """A claim that cannot be served yet for a reason already in its status: retry with
    backoff (one log line, like an API error)."""


def _controlled_by(sb: KubeObject, uid: str) -> bool:
    ref = controller_of(sb)
    return ref is not None and ref.get("uid") == uid


def _taken_by_a_claim(sb: KubeObject) -> bool:
    """The sandbox now has a SandboxClaim as its controller (a race lost, not a fault)."""
    ref = controller_of(sb)
    return ref is not None and ref.get("kind") == "SandboxClaim"


class ClaimReconciler:
    """Serves each SandboxClaim with exactly one Sandbox, warm when it can."""

    def __init__(
        self,
        client: Client,
        claims: Informer,
        sandboxes: Informer,
        pools: Informer,
        templates: Informer,
        recorder: EventRecorder | None,
        clock: Callable[[], float] = time.time,
        *,
        events: bool = True,
        observability_annotations: bool = True,
        networkpolicies: Informer | None = None,
    ) -> None:
        self.client = client
        self.events = events
        self.observability_annotations = observability_annotations
        self.networkpolicies = networkpolicies
        # "<ns>/<claim>" -> (claim UID, when this process first saw it): the controller-measured
        # start of a claim until its first Ready (upstream's observedTimes)
        self._observed: dict[str, tuple[str, float]] = {}
        self.claims = claims
        self.sandboxes = sandboxes
        self.pools = pools
        self.templates = templates
        self.recorder = recorder
        self.clock = clock
        # "<ns>/<claim>" -> (claim UID, sandbox name) this process adopted or created for it,
        # until the cache shows it: a pass that follows our own write must not miss it
        self._bound: dict[str, tuple[str, str]] = {}
        # the warm queue, the indexes and the template/pool -> claims mappings
        self.watches = ClaimWatches(claims, sandboxes, pools, templates)
        self.queue = self.watches.queue
        self.claims_for_pool = self.watches.claims_for_pool
        self.claims_for_template = self.watches.claims_for_template

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
        claim = self._with_first_observed(key, claim, now)
        expired, left = expiry(claim, now)
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
                sandbox = await self.find_existing(claim)
                if sandbox is None:
                    sandbox = await self.provide(claim)
        except ClaimFailure as f:
            failure = f
        except KubeError as err:
            failure, error = ClaimFailure(REASON_RECONCILER_ERROR, str(err), terminal=False), err
        status = claim_status(claim, sandbox, failure, now, expired)
        if not expired:
            # the Finished condition just mirrored may start a TTL that is already over
            expired, left = expiry(with_status(claim, status), now)
            if expired:
                status = claim_status(with_status(claim, status), sandbox, failure, now, True)
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
            self._event(claim, "Warning", failure.reason, failure.message, "Provisioning")
        if written and expired and _ready_reason(claim) != REASON_CLAIM_EXPIRED:
            self._event(claim, "Normal", EVENT_CLAIM_EXPIRED, "Claim expired", "Claim Expired")
            return Result(requeue_after=EXPIRED_RECHECK)
        if error is not None:
            raise _bounded(error, left)
        requeues = [] if left is None else [left]
        if failure is not None:
            if failure.reason == REASON_RECONCILER_ERROR:
                raise _bounded(RetryLater(failure.message), left)  # reported; retried with backoff
            if failure.reason in (REASON_TEMPLATE_NOT_FOUND, REASON_WARM_POOL_NOT_FOUND):
                requeues.append(MISSING_RECHECK)
            elif failure.reason == REASON_CREATE_PENDING:
                requeues.append(CREATE_PENDING_RECHECK)
            elif failure.reason == REASON_QUOTA_EXCEEDED:
                self._event(claim, "Warning", EVENT_QUOTA_EXCEEDED, failure.message, "Provisioning")
                requeues.append(QUOTA_RECHECK)
        if not written:
            requeues.append(CONFLICT_RECHECK)
        return Result(requeue_after=min(requeues)) if requeues else None

    async def _remove_legacy_network_policy(self, claim: KubeObject) -> None:
        """Spec §5.4 step 2: older releases made a NetworkPolicy per claim; delete it if this
        claim controls it (read from the cache; errors are logged, never fatal)."""
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
    def _with_first_observed(self, key: str, claim: KubeObject, now: float) -> KubeObject:
        """The claim with its controller-first-observed-at annotation: the persisted one, else
        when this process first saw it (written with the first-Ready annotations, one write)."""
        uid = claim["metadata"]["uid"]
        seen = self._observed.get(key)
        if seen is None or seen[0] != uid:
            seen = self._observed[key] = (uid, now)
        added = claim_metrics.controller_first_observed(claim, seen[1])
        if not added:
            return claim
        meta = claim["metadata"]
        return {
            **claim,
            "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}), **added}},
        }

    @tracing.ready_span
    async def _first_ready(
        self, key: str, claim: KubeObject, sandbox: KubeObject | None, now: float
    ) -> None:
        """The claim's Ready just turned True: record the startup latencies once, and persist
        the guard annotations so that no restart or other replica counts it again."""
        self._observed.pop(key, None)
        annotations = claim_metrics.first_ready_annotations(claim, now)
        claim_metrics.observe_first_ready(claim, sandbox, now)
        if not self.observability_annotations:
            return
        meta = claim["metadata"]
        first = meta.get("annotations", {}).get(keys.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT)
        original = self.claims.get(meta["name"], meta["namespace"]) or claim
        if first and keys.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT not in (
            original["metadata"].get("annotations") or {}
        ):
            annotations[keys.ANNOTATION_CONTROLLER_FIRST_OBSERVED_AT] = first
        if not annotations:
            return
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

    def _event(self, claim: KubeObject, kind: str, reason: str, note: str, action: str) -> None:
        if self.recorder is not None and self.events:
            self.recorder.event(claim, kind, reason, note, action=action)

    # ---------------------------------------------------------------- expiry
    async def _mark_expired(self, claim: KubeObject, now: float) -> Result:
        """Spec §5.4 step 8: Ready=False/ClaimExpired first, then (next pass) the clean-up."""
        status = with_ready(claim, ready_condition(claim, None, None, expired=True), now)
        if not await self.write_status(claim, status):
            return Result(requeue_after=CONFLICT_RECHECK)
        self._event(claim, "Normal", EVENT_CLAIM_EXPIRED, "Claim expired", "Claim Expired")
        return Result(requeue_after=EXPIRED_RECHECK)

    async def _delete_expired_claim(self, claim: KubeObject) -> None:
        """Spec §5.4 step 9: shutdownPolicy Delete/DeleteForeground deletes the claim itself (its
        sandbox follows by garbage collection)."""
        meta = claim["metadata"]
        policy = shutdown_policy(claim)
        self._event(
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
        """Spec §5.8 ``reconcileExpired`` (Retain): delete the claim's sandbox, never another's."""
        meta = claim["metadata"]
        ns = meta["namespace"]
        name = ((claim.get("status") or {}).get("sandbox") or {}).get("name") or meta["name"]
        sb = await self._get(SANDBOXES, self.sandboxes, name, ns)
        if sb is None:
            return None
        if not _controlled_by(sb, meta["uid"]):
            raise ClaimFailure(
                SANDBOX_NOT_OWNED,
                f'sandbox not owned by this claim: sandbox "{name}" is not owned by claim '
                f'"{meta["name"]}"',
            )
        if not sb["metadata"].get("deletionTimestamp"):
            with contextlib.suppress(NotFound):
                await self.client.delete(
                    SANDBOXES,
                    name,
                    ns,
                    uid=sb["metadata"]["uid"],
                    propagation_policy="Background",
                )
        return sb

    # ---------------------------------------------------------------- lookup
    async def find_existing(self, claim: KubeObject) -> KubeObject | None:
        """The sandbox this claim already controls, if any (spec §5.6 steps 1-3, plus the
        controller-UID index), settling duplicates."""
        meta = claim["metadata"]
        ns, uid, key = meta["namespace"], meta["uid"], f"{meta['namespace']}/{meta['name']}"
        status_name = ((claim.get("status") or {}).get("sandbox") or {}).get("name") or ""
        owned = [
            sb
            for sb in self.sandboxes.by_index(OWNER_INDEX, uid)
            if not sb["metadata"].get("deletionTimestamp")
        ]
        bound = self._bound.get(key)
        if bound is not None and (
            bound[0] != uid or any(sb["metadata"]["name"] == bound[1] for sb in owned)
        ):
            self._bound.pop(key, None)  # the cache caught up (or another claim of that name)
            bound = None
        if not owned:
            # the cache may not show our own latest write yet: ask the API
            for name in dict.fromkeys(n for n in (bound[1] if bound else "", status_name) if n):
                try:
                    sb = await self.client.get(SANDBOXES, name, ns)
                except NotFound:
                    continue
                if _controlled_by(sb, uid) and not sb["metadata"].get("deletionTimestamp"):
                    return sb
        if len(owned) > 1:
            return await self._settle_duplicates(claim, owned)
        if owned:
            return owned[0]
        same_name = self.sandboxes.get(meta["name"], ns)
        if (
            same_name is not None
            and not _controlled_by(same_name, uid)
            and not same_name["metadata"].get("deletionTimestamp")
            and not adoptable(same_name)
        ):
            raise ClaimFailure(
                REASON_RECONCILER_ERROR,
                f'sandbox "{meta["name"]}" is not controlled by claim "{meta["name"]}". '
                "Please use a different claim name or delete the sandbox manually",
                terminal=False,
            )
        return None

    async def _settle_duplicates(
        self, claim: KubeObject, owned: Sequence[KubeObject]
    ) -> KubeObject:
        """Keep one sandbox (the one the claim's current status names, read from the API),
        delete the others with a UID precondition."""
        meta = claim["metadata"]
        fresh = await self.client.get(SANDBOX_CLAIMS, meta["name"], meta["namespace"])
        name = ((fresh.get("status") or {}).get("sandbox") or {}).get("name") or ""
        keep = pick_kept(owned, name)
        for sb in owned:
            if sb is keep:
                continue
            log.warning(
                "claim controls several sandboxes; deleting the extra one",
                extra={
                    "claim": f"{meta['namespace']}/{meta['name']}",
                    "sandbox": sb["metadata"]["name"],
                },
            )
            with contextlib.suppress(NotFound, Conflict):
                await self.client.delete(
                    SANDBOXES,
                    sb["metadata"]["name"],
                    meta["namespace"],
                    uid=sb["metadata"]["uid"],
                    propagation_policy="Background",
                )
        return dict(keep)

    # ---------------------------------------------------------------- provide
    async def provide(self, claim: KubeObject) -> KubeObject:
        """Adopt a pool sandbox or create one (spec §5.6 steps 4-6, §5.10, §5.11)."""
        source = claim_source(claim)
        problem = validate_additional_metadata(
            (claim.get("spec") or {}).get("additionalPodMetadata")
        )
        if problem is not None:
            raise ClaimFailure("InvalidMetadata", f"invalid additionalPodMetadata: {problem}")
        template, pools = await self._resolve(claim, source)
        forced = forces_cold_start(claim)
        if source.policy != POLICY_NONE and forced is None and pools:
            adopted = await self._adopt(claim, template, pools)
            if adopted is not None:
                return adopted
        created = await self._create(claim, template)
        if forced is not None and source.policy != POLICY_NONE and pools:
            self._event(
                claim,
                "Normal",
                EVENT_COLD_START_FORCED,
                f"spec.{forced} needs a sandbox made for this claim: started cold, not from a "
                "warm pool",
                "Provisioning",
            )
        return created

    async def _get(
        self, resource: Resource, informer: Informer, name: str, ns: str
    ) -> KubeObject | None:
        """From the cache, else from the API (a cache miss is not a 404 yet)."""
        cached = informer.get(name, ns)
        if cached is not None:
            return cached
        try:
            return await self.client.get(resource, name, ns)
        except NotFound:
            return None

    async def _resolve(
        self, claim: KubeObject, source: Source
    ) -> tuple[KubeObject, list[KubeObject]]:
        """The template and the pools the claim may draw from."""
        ns = claim["metadata"]["namespace"]
        pool: KubeObject | None = None
        template_name = source.template
        if source.pool is not None:
            pool = await self._get(SANDBOX_WARM_POOLS, self.pools, source.pool, ns)
            if pool is None and source.by_pool_ref:
                raise ClaimFailure(
                    REASON_WARM_POOL_NOT_FOUND, f'SandboxWarmPool "{source.pool}" not found'
                )
            if source.by_pool_ref and pool is not None:
                template_name = ((pool.get("spec") or {}).get("sandboxTemplateRef") or {}).get(
                    "name"
                )
        template = (
            await self._get(SANDBOX_TEMPLATES, self.templates, template_name, ns)
            if template_name
            else None
        )
        if template is None:
            raise ClaimFailure(
                REASON_TEMPLATE_NOT_FOUND, f'SandboxTemplate "{template_name or ""}" not found'
            )
        if source.policy == POLICY_NONE:
            return template, []
        if source.pool is not None:
            return template, [pool] if pool is not None else []
        return template, self.watches.pools_of_template(template)

    def _pick(
        self,
        claim_uid: str,
        template: KubeObject,
        pools: Sequence[KubeObject],
        pod_hash: str,
        ns: str,
    ) -> KubeObject | None:
        """Take a candidate off the queues: a Ready one if any, else the oldest not-Ready one.

        Among the oldest Ready candidates the choice is spread by the claim's UID: one process
        takes them in any order it likes (the take is atomic), but two processes racing (leader
        election off) then mostly try different sandboxes for different claims, and the same
        sandbox for the same claim, which the loser recognises as its own. Synchronous (no
        await): two workers of this process never take the same sandbox.
        """
        fallback: tuple[tuple[str, str], KubeObject] | None = None
        ready: list[tuple[tuple[str, str], KubeObject]] = []
        for pool in pools:
            qkey = (ns, pool["metadata"]["name"])
            for name in self.queue.names(qkey):
                sb = self.sandboxes.get(name, ns)
                if sb is None or not adoptable(sb):
                    self.queue.remove(ns, name)
                    continue
                problem = candidate_problem(sb, ns, template, pool, pod_hash)
                if problem is not None:
                    if problem.startswith("stale"):
                        self.queue.remove(ns, name)
                    continue
                if is_sandbox_ready(sb):
                    ready.append((qkey, sb))
                    if len(ready) >= SPREAD:
                        break
                elif fallback is None:
                    fallback = (qkey, sb)
            if len(ready) >= SPREAD:
                break
        if ready:
            choice = ready[zlib.crc32(claim_uid.encode()) % len(ready)]
        elif fallback is not None:
            choice = fallback
        else:
            return None
        self.queue.take(choice[0], choice[1]["metadata"]["name"])
        return choice[1]

    @tracing.adopt_span
    async def _adopt(
        self, claim: KubeObject, template: KubeObject, pools: Sequence[KubeObject]
    ) -> KubeObject | None:
        meta = claim["metadata"]
        ns = meta["namespace"]
        try:
            pod_hash = pod_template_hash((template.get("spec") or {}).get("podTemplate") or {})
        except (GoJSONError, TypeError, ValueError):
            pod_hash = ""
        failures = 0
        for _ in range(MAX_ADOPTION_LOOKS):
            if failures >= MAX_ADOPTION_ATTEMPTS:
                break
            candidate = self._pick(meta["uid"], template, pools, pod_hash, ns)
            if candidate is None:
                return None
            name = candidate["metadata"]["name"]
            try:
                adopted = await self.client.patch(
                    SANDBOXES, name, adoption_patch(candidate, claim, template), ns
                )
            except NotFound:
                continue  # gone since we looked (our cache was late): next candidate
            except Conflict:
                # changed since we looked: another claim took it, another process of ours
                # adopted it for this very claim (leader election off), or only its status moved
                fresh = await self._get_or_none(name, ns)
                if fresh is None:
                    continue
                if _controlled_by(fresh, meta["uid"]):
                    adopted = fresh
                elif (
                    problem := candidate_problem(
                        fresh, ns, template, self._pool_of(fresh, pools), pod_hash
                    )
                ) is None:
                    try:  # still a free pool sandbox: one more try at its current version
                        adopted = await self.client.patch(
                            SANDBOXES, name, adoption_patch(fresh, claim, template), ns
                        )
                    except (Conflict, NotFound):
                        failures += 1
                        continue
                    candidate = fresh
                else:
                    # taken by another writer after our cache saw it: our cache was late, the
                    # next candidate is as good as this one was; only other failures count
                    # towards the cold fallback (two processes racing would otherwise send a
                    # claim cold while free pool sandboxes remain)
                    if not _taken_by_a_claim(fresh):
                        failures += 1
                    log.debug("adoption of %s/%s lost: %s", ns, name, problem)
                    continue
            self._bound[f"{ns}/{meta['name']}"] = (meta["uid"], name)
            self._event(
                claim, "Normal", EVENT_ADOPTED, f'Adopted warm pool Sandbox "{name}"', "Adoption"
            )
            claim_metrics.count_claim_creation(
                ns,
                template["metadata"]["name"],
                keys.LAUNCH_TYPE_WARM,
                pool_owner(candidate) or "",
                is_sandbox_ready(candidate),
                created_by=claim_metrics.claim_created_by(claim),
            )
            return adopted
        return None

    async def _get_or_none(self, name: str, ns: str) -> KubeObject | None:
        try:
            return await self.client.get(SANDBOXES, name, ns)
        except NotFound:
            return None

    @staticmethod
    def _pool_of(sb: KubeObject, pools: Sequence[KubeObject]) -> KubeObject | None:
        owner = pool_owner(sb)
        return next((p for p in pools if p["metadata"]["name"] == owner), None)

    @tracing.create_span
    async def _create(self, claim: KubeObject, template: KubeObject) -> KubeObject:
        meta = claim["metadata"]
        ns = meta["namespace"]
        body = cold_sandbox(claim, template)
        try:
            created = await self.client.create(SANDBOXES, body, ns)
        except Forbidden as err:
            if "exceeded quota" not in (err.message or ""):
                raise
            raise ClaimFailure(
                REASON_QUOTA_EXCEEDED,
                f"cannot create the sandbox: {err.message}",
                terminal=False,
            ) from None
        except AlreadyExists:
            try:
                existing = await self.client.get(SANDBOXES, meta["name"], ns)
            except NotFound:
                raise ClaimFailure(
                    REASON_CREATE_PENDING,
                    f'sandbox "{meta["name"]}" is being replaced; retrying',
                    terminal=False,
                ) from None
            if _controlled_by(existing, meta["uid"]):
                return existing
            if existing["metadata"].get("deletionTimestamp"):
                raise ClaimFailure(
                    REASON_CREATE_PENDING,
                    f'sandbox "{meta["name"]}" is still being deleted; retrying',
                    terminal=False,
                ) from None
            raise ClaimFailure(
                REASON_RECONCILER_ERROR,
                f'sandbox "{meta["name"]}" is not controlled by claim "{meta["name"]}". '
                "Please use a different claim name or delete the sandbox manually",
                terminal=False,
            ) from None
        self._bound[f"{ns}/{meta['name']}"] = (meta["uid"], created["metadata"]["name"])
        self._event(
            claim,
            "Normal",
            EVENT_PROVISIONED,
            f'Created Sandbox "{created["metadata"]["name"]}"',
            "Provisioning",
        )
        claim_metrics.count_claim_creation(
            ns,
            template["metadata"]["name"],
            keys.LAUNCH_TYPE_COLD,
            "",
            False,
            created_by=claim_metrics.claim_created_by(claim),
        )
        return created

    # ---------------------------------------------------------------- status
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


def setup(
    mgr: Manager,
    workers: int = 1,
    *,
    events: bool = True,
    observability_annotations: bool = True,
) -> Controller:
    """Register the SandboxClaim controller with a manager."""
    claims = mgr.get_informer(SANDBOX_CLAIMS)
    sandboxes = mgr.get_informer(SANDBOXES)
    pools = mgr.get_informer(SANDBOX_WARM_POOLS)
    templates = mgr.get_informer(SANDBOX_TEMPLATES)
    reconciler = ClaimReconciler(
        mgr.client,
        claims,
        sandboxes,
        pools,
        templates,
        mgr.event_recorder("sandboxclaim-controller"),
        events=events,
        observability_annotations=observability_annotations,
        networkpolicies=mgr.get_informer(NETWORKPOLICIES),
    )
    return (
        ControllerBuilder(mgr)
        .named(CONTROLLER_NAME)
        .for_(SANDBOX_CLAIMS)
        .owns(SANDBOXES)
        .watches(SANDBOX_WARM_POOLS, reconciler.claims_for_pool)
        .watches(SANDBOX_TEMPLATES, reconciler.claims_for_template)
        .workers(workers)
        .complete(reconciler)
    )


__all__ = ["ClaimReconciler", "setup"]
