"""The SandboxClaim controller's act step, the provide half: get a claim its one Sandbox.

:class:`ClaimProvider` holds it (the reconciler in :mod:`.controller` holds one): the sandbox
the claim already controls (the controller-UID index, then what this process or the claim's
status says it holds, read from the API when the cache does not show it yet), settling
duplicates with a UID precondition; else a pool sandbox adopted by a merge patch carrying its
``resourceVersion`` (a lost race moves on to the next candidate); else a cold sandbox created
from the template.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

from agentsandbox.api import keys
from agentsandbox.api.conditions import is_sandbox_ready
from agentsandbox.api.owners import controller_of
from agentsandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from agentsandbox.controllers.claim import metrics as claim_metrics
from agentsandbox.controllers.claim import tracing
from agentsandbox.controllers.claim.candidates import SPREAD, CandidatePicker
from agentsandbox.controllers.claim.claimed_sandbox import (
    adoption_patch,
    cold_sandbox,
    validate_additional_metadata,
)
from agentsandbox.controllers.claim.config import DEFAULT_LABEL_DOMAINS
from agentsandbox.controllers.claim.handlers import OWNER_INDEX, ClaimWatches
from agentsandbox.controllers.claim.plan import (
    EVENT_ADOPTED,
    EVENT_COLD_START_FORCED,
    EVENT_PROVISIONED,
    POLICY_NONE,
    REASON_CREATE_PENDING,
    REASON_QUOTA_EXCEEDED,
    REASON_RECONCILER_ERROR,
    REASON_TEMPLATE_NOT_FOUND,
    REASON_WARM_POOL_NOT_FOUND,
    ClaimFailure,
    Source,
    adoptable,
    claim_source,
    forces_cold_start,
    pick_kept,
    pool_owner,
)
from agentsandbox.controllers.claim.warm_index import WarmQueue
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import AlreadyExists, Conflict, Forbidden, NotFound
from agentsandbox.kube.events import EventRecorder
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.resources import Resource
from agentsandbox.kube.store import KubeObject

__all__ = [
    "MAX_ADOPTION_ATTEMPTS",
    "MAX_ADOPTION_LOOKS",
    "SPREAD",
    "ClaimProvider",
]

log = logging.getLogger("agentsandbox.claim")

MAX_ADOPTION_ATTEMPTS = 5  # failed adoptions before the cold fallback
MAX_ADOPTION_LOOKS = 64  # candidates looked at in one pass, lost races included


def _controlled_by(sb: KubeObject, uid: str) -> bool:
    ref = controller_of(sb)
    return ref is not None and ref.get("uid") == uid


def _taken_by_a_claim(sb: KubeObject) -> bool:
    """The sandbox now has a SandboxClaim as its controller (a race lost, not a fault)."""
    ref = controller_of(sb)
    return ref is not None and ref.get("kind") == "SandboxClaim"


class ClaimProvider:
    """Finds, adopts or creates the Sandbox of a claim; the claim reconciler holds one and
    records its claim Events through it too (``events`` False: none at all)."""

    def __init__(
        self,
        client: Client,
        sandboxes: Informer,
        pools: Informer,
        templates: Informer,
        watches: ClaimWatches,
        recorder: EventRecorder | None,
        *,
        events: bool = True,
        label_domains: Sequence[str] = DEFAULT_LABEL_DOMAINS,
    ) -> None:
        self.client = client
        self.sandboxes = sandboxes
        self.pools = pools
        self.templates = templates
        self.watches = watches
        self.queue: WarmQueue = watches.queue
        self.picker = CandidatePicker(sandboxes, self.queue)
        self.recorder = recorder
        self.events = events
        # the domains (with their subdomains) a claim's additionalPodMetadata labels may use
        self.label_domains = tuple(label_domains)
        # "<ns>/<claim>" -> (claim UID, sandbox name) this process adopted or created for it,
        # until the cache shows it: a pass that follows our own write must not miss it
        self.bound: dict[str, tuple[str, str]] = {}

    def event(self, claim: KubeObject, kind: str, reason: str, note: str, action: str) -> None:
        if self.recorder is not None and self.events:
            self.recorder.event(claim, kind, reason, note, action=action)

    # ---------------------------------------------------------------- lookup
    async def find_existing(self, claim: KubeObject) -> KubeObject | None:
        """The sandbox this claim already controls, if any, settling duplicates
        (docs/design/claim.md, "Finding the claim's sandbox")."""
        meta = claim["metadata"]
        ns, uid, key = meta["namespace"], meta["uid"], f"{meta['namespace']}/{meta['name']}"
        status_name = ((claim.get("status") or {}).get("sandbox") or {}).get("name") or ""
        owned = [
            sb
            for sb in self.sandboxes.by_index(OWNER_INDEX, f"{ns}/{uid}")  # never another ns
            if not sb["metadata"].get("deletionTimestamp")
        ]
        bound = self.bound.get(key)
        if bound is not None and (
            bound[0] != uid or any(sb["metadata"]["name"] == bound[1] for sb in owned)
        ):
            self.bound.pop(key, None)  # the cache caught up (or another claim of that name)
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
        """Adopt a pool sandbox or create one (docs/design/claim.md, "Warm or cold")."""
        source = claim_source(claim)
        problem = validate_additional_metadata(
            (claim.get("spec") or {}).get("additionalPodMetadata"), self.label_domains
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
            self.event(
                claim,
                "Normal",
                EVENT_COLD_START_FORCED,
                f"spec.{forced} needs a sandbox made for this claim: started cold, not from a "
                "warm pool",
                "Provisioning",
            )
        return created

    async def lookup(
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
            pool = await self.lookup(SANDBOX_WARM_POOLS, self.pools, source.pool, ns)
            if pool is None and source.by_pool_ref:
                raise ClaimFailure(
                    REASON_WARM_POOL_NOT_FOUND, f'SandboxWarmPool "{source.pool}" not found'
                )
            if source.by_pool_ref and pool is not None:
                template_name = ((pool.get("spec") or {}).get("sandboxTemplateRef") or {}).get(
                    "name"
                )
        template = (
            await self.lookup(SANDBOX_TEMPLATES, self.templates, template_name, ns)
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

    @tracing.adopt_span
    async def _adopt(
        self, claim: KubeObject, template: KubeObject, pools: Sequence[KubeObject]
    ) -> KubeObject | None:
        meta = claim["metadata"]
        ns = meta["namespace"]
        pod_hash = self.picker.pod_hash(template)
        failures = 0
        for _ in range(MAX_ADOPTION_LOOKS):
            if failures >= MAX_ADOPTION_ATTEMPTS:
                break
            candidate = self.picker.pick(meta["uid"], template, pools, pod_hash, ns)
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
                elif (problem := self.picker.problem(fresh, ns, template, pools, pod_hash)) is None:
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
            self.bound[f"{ns}/{meta['name']}"] = (meta["uid"], name)
            self.event(
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
        self.bound[f"{ns}/{meta['name']}"] = (meta["uid"], created["metadata"]["name"])
        self.event(
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
