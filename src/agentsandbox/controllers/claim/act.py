"""The SandboxClaim controller's act step, the provide half: get a claim its one Sandbox.

:class:`ClaimProvider` holds it (the reconciler in :mod:`.controller` holds one). In this order:
the sandbox the claim's status names, when it lives and is the claim's (it wins; any other the
claim controls is a duplicate, deleted); the pool sandbox the claim has chosen (the claim's
assignment annotation), finished or cleared, never abandoned for another; one the controller-UID
index shows, or this process made; else a pool sandbox, chosen on the claim first (the
annotation, written with the claim's ``resourceVersion``) and then adopted by a merge patch
carrying the sandbox's ``resourceVersion``; else a cold sandbox created from the template,
once the claim is marked cold (:data:`.assignment.COLD_START`, written with the claim's
``resourceVersion``): no other process adopts for a claim so marked.
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
    SANDBOXES,
)
from agentsandbox.controllers.claim import metrics as claim_metrics
from agentsandbox.controllers.claim import tracing
from agentsandbox.controllers.claim.assignment import (
    ASSIGNED_SANDBOX,
    COLD_START,
    ClaimChanged,
    ClaimPass,
    assignment,
    cold_mark,
    mark_cold,
    write_claim_metadata,
)
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
    ClaimFailure,
    adoptable,
    claim_source,
    forces_cold_start,
    pick_kept,
    pool_owner,
)
from agentsandbox.controllers.claim.resolve import resolve
from agentsandbox.controllers.claim.warm_index import WarmQueue
from agentsandbox.controllers.common.served import ServedCounts
from agentsandbox.kube.client import Client
from agentsandbox.kube.errors import AlreadyExists, Conflict, Forbidden, KubeError, NotFound
from agentsandbox.kube.events import EventRecorder
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.store import KubeObject

__all__ = [
    "MAX_ADOPTION_ATTEMPTS",
    "MAX_ADOPTION_LOOKS",
    "SPREAD",
    "ClaimPass",
    "ClaimProvider",
]

log = logging.getLogger("agentsandbox.claim")

MAX_ADOPTION_ATTEMPTS = 5  # failed adoptions before the cold fallback
MAX_ADOPTION_LOOKS = 64  # candidates looked at in one pass, lost races included
MAX_COMMIT_TRIES = 3  # claim writes of one choice refused by a moving claim, before looking again


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
        served: ServedCounts | None = None,
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
        self.served = claim_metrics.SERVED if served is None else served  # the warm share

    def event(self, claim: KubeObject, kind: str, reason: str, note: str, action: str) -> None:
        if self.recorder is not None and self.events:
            self.recorder.event(claim, kind, reason, note, action=action)

    # ---------------------------------------------------------------- lookup
    async def find_existing(self, cp: ClaimPass) -> KubeObject | None:
        """The sandbox this claim already has, if any (docs/design/claim.md, "Finding the
        claim's sandbox"): the one its status names when that one lives and is the claim's
        (it wins over any other: the others are duplicates, deleted); else the one the claim
        chose, once adopted (a choice still pool-owned is left to :meth:`provide`); else one
        the claim's controller index shows, else what this process made for it (read from the
        API when the cache does not show it yet)."""
        claim = cp.claim
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
        if status_name:
            named = await self._claims(status_name, ns, uid)
            if named is not None:
                others = [sb for sb in owned if sb["metadata"]["name"] != status_name]
                if bound is not None and bound[1] != status_name:
                    made = await self._claims(bound[1], ns, uid)
                    if made is not None and made["metadata"]["name"] not in {
                        sb["metadata"]["name"] for sb in others
                    }:
                        others.append(made)
                    self.bound.pop(key, None)
                if others:
                    await self._delete_duplicates(claim, named, others)
                return named
            cp.named_gone = True
        chosen, from_label = assignment(claim)
        if chosen:
            done = await self._claims(chosen, ns, uid)
            if done is not None:  # the choice was adopted (by this pass's predecessor)
                if from_label:
                    await self._migrate_label(cp, chosen)
                return done
            # not the claim's yet: provide() finishes or clears that choice
        if not owned and bound is not None:
            # the cache may not show our own latest write yet: ask the API
            made = await self._claims(bound[1], ns, uid)
            if made is not None:
                return made
            self.bound.pop(key, None)  # gone (or not the claim's): not worth another read
        if owned:
            return dict(pick_kept(owned, ""))
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

    async def _claims(self, name: str, ns: str, uid: str) -> KubeObject | None:
        """Sandbox ``name`` if it lives and the claim ``uid`` controls it: from the cache when
        it says so, else from the API (a cache that says otherwise may lag); None when gone or
        not the claim's."""
        cached = self.sandboxes.get(name, ns)
        if (
            cached is not None
            and _controlled_by(cached, uid)
            and not cached["metadata"].get("deletionTimestamp")
        ):
            return cached
        sb = await self._get_or_none(name, ns)
        if sb is None or not _controlled_by(sb, uid) or sb["metadata"].get("deletionTimestamp"):
            return None
        return sb

    async def _delete_duplicates(
        self, claim: KubeObject, keep: KubeObject, others: Sequence[KubeObject]
    ) -> None:
        """Delete the claim's other sandboxes (UID precondition), only once the API confirms
        that the claim's status names ``keep`` and that ``keep`` lives: nothing names the
        others then, and nothing can while ``keep`` lives."""
        meta = claim["metadata"]
        ns, name = meta["namespace"], keep["metadata"]["name"]
        fresh = await self.client.get(SANDBOX_CLAIMS, meta["name"], ns)
        named = ((fresh.get("status") or {}).get("sandbox") or {}).get("name") or ""
        if fresh["metadata"].get("uid") != meta["uid"] or named != name:
            return
        kept = await self._get_or_none(name, ns)
        if (
            kept is None
            or not _controlled_by(kept, meta["uid"])
            or kept["metadata"].get("deletionTimestamp")
        ):
            return
        for sb in others:
            log.warning(
                "claim controls several sandboxes; deleting the extra one",
                extra={
                    "claim": f"{ns}/{meta['name']}",
                    "sandbox": sb["metadata"]["name"],
                },
            )
            with contextlib.suppress(NotFound, Conflict):
                await self.client.delete(
                    SANDBOXES,
                    sb["metadata"]["name"],
                    ns,
                    uid=sb["metadata"]["uid"],
                    propagation_policy="Background",
                )

    # ---------------------------------------------------------------- provide
    async def provide(self, cp: ClaimPass) -> KubeObject:
        """Finish the pool sandbox the claim has chosen, else adopt one, else create one
        (docs/design/claim.md, "Warm or cold")."""
        claim = cp.claim
        source = claim_source(claim)
        problem = validate_additional_metadata(
            (claim.get("spec") or {}).get("additionalPodMetadata"), self.label_domains
        )
        if problem is not None:
            raise ClaimFailure("InvalidMetadata", f"invalid additionalPodMetadata: {problem}")
        template, pools = await resolve(
            self.client, self.pools, self.templates, self.watches, claim, source
        )
        chosen, from_label = assignment(claim)
        if chosen:
            done = await self._finish(cp, chosen, from_label, template, pools)
            if done is not None:
                return done
        forced = forces_cold_start(claim)
        # a claim marked cold may have its cold sandbox made by another process right now
        may_adopt = not cold_mark(cp.claim) or cp.named_gone
        if source.policy != POLICY_NONE and forced is None and pools and may_adopt:
            adopted = await self._adopt(cp, template, pools)
            if adopted is not None:
                return adopted
        await mark_cold(self.client, cp)  # with the first-observed time, before the create
        wanted = "" if forced else claim_metrics.wanted_pool(pools)  # a pool could serve it
        created = await self._create(cp.claim, template, wanted)
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

    @tracing.adopt_span
    async def _adopt(
        self, cp: ClaimPass, template: KubeObject, pools: Sequence[KubeObject]
    ) -> KubeObject | None:
        """Choose a pool sandbox on the claim, then adopt it; a choice found gone or taken is
        replaced by the next one in the same claim write (the claim's resourceVersion proves
        that nothing else was chosen meanwhile)."""
        meta = cp.claim["metadata"]
        ns = meta["namespace"]
        candidates = self.picker.start(cp.claim, template, pools)
        failures = 0
        committed = ""  # this pass's choice, on the claim and found dead
        for _ in range(MAX_ADOPTION_LOOKS):
            if failures >= MAX_ADOPTION_ATTEMPTS:
                break
            candidate = candidates.pick()
            if candidate is None:
                break
            name = candidate["metadata"]["name"]
            try:
                other, from_label = await self._commit(cp, name, committed)
            except (KubeError, ClaimChanged):
                self.picker.put_back(candidate)
                raise
            if other:  # another pass chose first: finish or clear that choice, never ours
                self.picker.put_back(candidate)
                done = await self._finish(cp, other, from_label, template, pools)
                if done is not None:
                    return done
                committed = ""
                continue
            committed = name
            try:
                adopted = await self.client.patch(
                    SANDBOXES, name, adoption_patch(candidate, cp.claim, template), ns
                )
            except NotFound:
                continue  # gone since we looked (our cache was late): next candidate
            except Conflict:
                # changed since we looked: another claim took it, another process of ours
                # adopted it for this very claim (leader election off), or only its status moved
                try:
                    fresh = await self._get_or_none(name, ns)
                except KubeError:
                    self.picker.put_back(candidate)
                    raise
                if fresh is None:
                    continue
                if _controlled_by(fresh, meta["uid"]):
                    adopted = fresh
                elif (problem := candidates.problem(fresh)) is None:
                    try:  # still a free pool sandbox: one more try at its current version
                        adopted = await self.client.patch(
                            SANDBOXES, name, adoption_patch(fresh, cp.claim, template), ns
                        )
                    except (Conflict, NotFound):
                        failures += 1
                        continue
                    except KubeError:
                        self.picker.put_back(fresh)
                        raise
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
            except KubeError:
                # refused or unanswered: the sandbox is free as far as anyone knows; the claim
                # keeps its choice, and its next pass finishes (or clears) that one
                self.picker.put_back(candidate)
                raise
            self._adopted(cp.claim, template, candidate)
            return adopted
        if committed:
            await self._clear(cp, committed, from_label=False)
        return None

    async def _commit(self, cp: ClaimPass, name: str, replaces: str) -> tuple[str, bool]:
        """Write the claim's choice of ``name`` (replacing ``replaces``, this pass's own dead
        choice, if any). Returns ("", False) once written, else the choice the claim already
        carries (written by another pass) and whether it is the deprecated label.
        :class:`ClaimChanged` when the claim moved in a way this pass must look at again."""
        for _ in range(MAX_COMMIT_TRIES):
            mark = cold_mark(cp.claim)  # a stale one (its sandbox gone) goes with this choice
            choice: dict[str, str | None] = {ASSIGNED_SANDBOX: name}
            if mark:
                choice[COLD_START] = None
            try:
                await write_claim_metadata(self.client, cp, choice)
                return "", False
            except ClaimChanged:
                pass
            meta = cp.claim["metadata"]
            try:
                fresh = await self.client.get(SANDBOX_CLAIMS, meta["name"], meta["namespace"])
            except NotFound:
                raise ClaimChanged("the claim is gone") from None
            if fresh["metadata"].get("uid") != meta["uid"]:
                raise ClaimChanged("the claim was replaced")
            if ((fresh.get("status") or {}).get("sandbox") or {}).get("name"):
                raise ClaimChanged("the claim's status names a sandbox now")
            if cold_mark(fresh) != mark:
                raise ClaimChanged("another pass serves the claim cold")
            chosen, from_label = assignment(fresh)
            annotations = fresh["metadata"].get("annotations") or {}
            cp.pending = {k: v for k, v in cp.pending.items() if k not in annotations}
            cp.claim = fresh
            if chosen == name and not from_label:
                return "", False  # an earlier write of ours was applied after all
            if chosen and chosen != replaces:
                return chosen, from_label
        raise ClaimChanged("the claim keeps changing")

    async def _finish(
        self,
        cp: ClaimPass,
        name: str,
        from_label: bool,
        template: KubeObject,
        pools: Sequence[KubeObject],
    ) -> KubeObject | None:
        """Finish the adoption of the pool sandbox the claim has chosen, or, when it is gone,
        another's or no longer one this claim may have, clear the choice (None)."""
        meta = cp.claim["metadata"]
        ns, uid = meta["namespace"], meta["uid"]
        candidates = self.picker.start(cp.claim, template, pools)
        for _ in range(MAX_COMMIT_TRIES):
            sb = await self._get_or_none(name, ns)
            if sb is not None and _controlled_by(sb, uid):
                if sb["metadata"].get("deletionTimestamp"):
                    break
                if from_label:
                    await self._migrate_label(cp, name)
                return sb
            # a choice already made is finished even before its pod has an IP (upstream's too)
            if sb is None or candidates.problem(sb, need_pod_ips=False) is not None:
                break
            self.queue.remove(ns, name)  # chosen: no other claim of ours should try it
            try:
                adopted = await self.client.patch(
                    SANDBOXES, name, adoption_patch(sb, cp.claim, template), ns
                )
            except NotFound:
                break
            except KubeError as err:
                self.picker.put_back(sb)  # free as far as anyone knows
                if isinstance(err, Conflict):
                    continue  # look again at its current version
                raise
            if from_label:
                await self._migrate_label(cp, name)
            self._adopted(cp.claim, template, sb)
            return adopted
        else:
            raise ClaimChanged(f"the chosen sandbox {name} keeps changing")
        await self._clear(cp, name, from_label=from_label)
        return None

    async def _clear(self, cp: ClaimPass, name: str, *, from_label: bool) -> None:
        """Remove the claim's choice of ``name`` (it is gone or another's)."""
        log.info(
            "the claim's chosen sandbox is gone or not adoptable; clearing the choice",
            extra={
                "claim": f"{cp.claim['metadata']['namespace']}/{cp.claim['metadata']['name']}",
                "sandbox": name,
            },
        )
        if from_label:
            await write_claim_metadata(self.client, cp, labels={ASSIGNED_SANDBOX: None})
        else:
            await write_claim_metadata(self.client, cp, {ASSIGNED_SANDBOX: None})

    async def _migrate_label(self, cp: ClaimPass, name: str) -> None:
        """Move a choice read from the deprecated label to the annotation (failure: logged; the
        label keeps working)."""
        try:
            await write_claim_metadata(
                self.client, cp, {ASSIGNED_SANDBOX: name}, labels={ASSIGNED_SANDBOX: None}
            )
        except ClaimChanged:
            log.info(
                "could not move the claim's sandbox label to the annotation; the label stays and"
                " is still read"
            )

    def _adopted(self, claim: KubeObject, template: KubeObject, candidate: KubeObject) -> None:
        meta = claim["metadata"]
        ns, name = meta["namespace"], candidate["metadata"]["name"]
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
        claim_metrics.count_first_serving(
            claim, pool_owner(candidate) or "", is_sandbox_ready(candidate), self.pools, self.served
        )

    async def _get_or_none(self, name: str, ns: str) -> KubeObject | None:
        try:
            return await self.client.get(SANDBOXES, name, ns)
        except NotFound:
            return None

    @tracing.create_span
    async def _create(self, claim: KubeObject, template: KubeObject, wanted: str) -> KubeObject:
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
        claim_metrics.count_first_serving(claim, wanted, None, self.pools, self.served)
        return created
