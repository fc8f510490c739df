"""Picking a warm pool sandbox for a claim: vet the queued candidates, take one off the queue.

:class:`CandidatePicker` is the adoption step's view of the warm queue (:mod:`.warm_index`): for
one adoption pass of one claim (:meth:`CandidatePicker.start`, an :class:`AdoptionPass`) it
looks at the queues of the pools the claim may draw from, checks each queued name against the
Sandbox cache (:func:`.plan.candidate_problem`), takes one off its queue, and puts a candidate
back when an adoption write failed for a reason other than "gone" or "taken".
Everything here is synchronous (no ``await``): two workers of this process never take the same
sandbox.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Sequence

from agentsandbox.api.conditions import is_sandbox_ready
from agentsandbox.api.gojson import GoJSONError
from agentsandbox.api.hashing import pod_template_hash, sandbox_blueprint_hash
from agentsandbox.api.timefmt import parse_rfc3339
from agentsandbox.controllers.claim.plan import (
    adoptable,
    candidate_problem,
    claim_source,
    pool_owner,
)
from agentsandbox.controllers.claim.warm_index import QueueKey, WarmQueue
from agentsandbox.controllers.warmpool.plan import RECREATE, update_strategy
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.store import KubeObject

__all__ = [
    "SPREAD",
    "WARM_CANDIDATE_GRACE",
    "WARM_CANDIDATE_RETRY",
    "AdoptionPass",
    "CandidatePicker",
    "CandidatesPending",
]

SPREAD = 32  # Ready candidates among which a claim's UID picks (see AdoptionPass.pick)
# A claim this young (seconds since its creation) whose only candidates have no pod IP yet
# looks again every WARM_CANDIDATE_RETRY seconds instead of going cold (upstream's values):
# short IP allocation delays are covered, a pool that cannot start pods delays nobody long.
WARM_CANDIDATE_GRACE = 2.0
WARM_CANDIDATE_RETRY = 0.1


class CandidatesPending(Exception):
    """The claim's only candidates have no pod IP yet and the claim is within the grace: look
    again after ``retry_after`` seconds, with no status write and no cold create."""

    def __init__(self, count: int, retry_after: float) -> None:
        super().__init__(f"{count} warm pool candidate(s) are waiting for a pod IP")
        self.count = count
        self.retry_after = retry_after


class CandidatePicker:
    """Takes adoption candidates off the warm queue, vetted against the Sandbox cache."""

    def __init__(
        self, sandboxes: Informer, queue: WarmQueue, clock: Callable[[], float] = time.time
    ) -> None:
        self.sandboxes = sandboxes
        self.queue = queue
        self.clock = clock

    def start(
        self, claim: KubeObject, template: KubeObject, pools: Sequence[KubeObject]
    ) -> AdoptionPass:
        """One adoption pass of ``claim``: ``template`` is what it is served from, ``pools``
        the pools it may draw from."""
        return AdoptionPass(self, claim, template, pools)

    @staticmethod
    def pool_of(sb: KubeObject, pools: Sequence[KubeObject]) -> KubeObject | None:
        owner = pool_owner(sb)
        return next((p for p in pools if p["metadata"]["name"] == owner), None)

    def put_back(self, sb: KubeObject) -> None:
        """Queue ``sb`` again (an adoption write failed and left it free); the next pick
        re-vets it against the cache."""
        owner = pool_owner(sb)
        if owner:
            self.queue.add((sb["metadata"]["namespace"], owner), sb["metadata"]["name"])


def _template_hashes(template: KubeObject) -> tuple[str, str]:
    """The template's pod template and blueprint hashes ("" for one that cannot be computed:
    the staleness test then calls nothing stale, as the pool's does)."""
    spec = template.get("spec") or {}
    try:
        pod_hash = pod_template_hash(spec.get("podTemplate") or {})
    except (GoJSONError, TypeError, ValueError):
        pod_hash = ""
    try:
        blueprint_hash = sandbox_blueprint_hash(spec)
    except (GoJSONError, TypeError, ValueError):
        blueprint_hash = ""
    return pod_hash, blueprint_hash


class AdoptionPass:
    """The candidates of one adoption pass of one claim (:meth:`CandidatePicker.start`)."""

    def __init__(
        self,
        picker: CandidatePicker,
        claim: KubeObject,
        template: KubeObject,
        pools: Sequence[KubeObject],
    ) -> None:
        self.picker = picker
        self.claim = claim
        self.template = template
        self.pools = list(pools)
        self.ns: str = claim["metadata"]["namespace"]
        self.by_pool_ref = claim_source(claim).by_pool_ref
        # the template's hashes and the staleness memo, for Recreate pools only: computed at
        # the first candidate of such a pool, then shared by every pick of the pass
        self._hashes: tuple[str, str] | None = None
        self._vetted: dict[str, bool] = {}
        self.pending = 0  # candidates the last pick skipped for want of a pod IP

    def _problem(self, sb: KubeObject, pool: KubeObject | None) -> str | None:
        pod_hash, blueprint_hash = "", ""
        if pool is not None and update_strategy(pool) == RECREATE:
            if self._hashes is None:
                self._hashes = _template_hashes(self.template)
            pod_hash, blueprint_hash = self._hashes
        return candidate_problem(
            sb,
            self.ns,
            self.template,
            pool,
            pod_hash,
            by_pool_ref=self.by_pool_ref,
            blueprint_hash=blueprint_hash,
            vetted=self._vetted,
        )

    def problem(self, sb: KubeObject, *, need_pod_ips: bool = True) -> str | None:
        """Why ``sb`` (a fresh copy, say) may not serve the claim, or None; ``need_pod_ips``
        False: a sandbox whose pod has no IP yet may (a choice already committed)."""
        problem = self._problem(sb, CandidatePicker.pool_of(sb, self.pools))
        if problem is None and need_pod_ips and not _has_pod_ips(sb):
            return "the sandbox's pod has no IP yet"
        return problem

    def pick(self) -> KubeObject | None:
        """Take a candidate off the queues: a Ready one if any, else the oldest not-Ready one;
        never one whose pod has no IP yet.

        Among the oldest Ready candidates the choice is spread by the claim's UID: one process
        takes them in any order it likes (the take is atomic), but two processes racing (leader
        election off) then mostly try different sandboxes for different claims, and the same
        sandbox for the same claim, which the loser recognises as its own.

        None: nothing to adopt, go cold. When candidates were skipped only for want of a pod IP
        and the claim is younger than :data:`WARM_CANDIDATE_GRACE`, raises
        :class:`CandidatesPending` instead (they stay queued).
        """
        queue, sandboxes = self.picker.queue, self.picker.sandboxes
        fallback: tuple[QueueKey, KubeObject] | None = None
        ready: list[tuple[QueueKey, KubeObject]] = []
        self.pending = 0
        for pool in self.pools:
            qkey = (self.ns, pool["metadata"]["name"])
            for name in queue.names(qkey):
                sb = sandboxes.get(name, self.ns)
                if sb is None or not adoptable(sb):
                    queue.remove(self.ns, name)
                    continue
                problem = self._problem(sb, pool)
                if problem is not None:
                    if problem.startswith("stale"):
                        queue.remove(self.ns, name)
                    continue
                if not _has_pod_ips(sb):
                    self.pending += 1  # stays queued: its pod may get an IP any moment
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
            uid: str = self.claim["metadata"]["uid"]
            choice = ready[zlib.crc32(uid.encode()) % len(ready)]
        elif fallback is not None:
            choice = fallback
        else:
            retry_after = self.retry_after()
            if self.pending and retry_after is not None:
                raise CandidatesPending(self.pending, retry_after)
            return None
        queue.take(choice[0], choice[1]["metadata"]["name"])
        return choice[1]

    def retry_after(self) -> float | None:
        """How soon to look again for a candidate to get its pod IP: at most
        :data:`WARM_CANDIDATE_RETRY`, never past the claim's grace; None past it (or for a
        claim without a creation time)."""
        created = (self.claim.get("metadata") or {}).get("creationTimestamp")
        if not created:
            return None
        try:
            left = parse_rfc3339(created).timestamp() + WARM_CANDIDATE_GRACE - self.picker.clock()
        except ValueError:
            return None
        return min(WARM_CANDIDATE_RETRY, left) if left > 0 else None


def _has_pod_ips(sb: KubeObject) -> bool:
    return bool((sb.get("status") or {}).get("podIPs"))
