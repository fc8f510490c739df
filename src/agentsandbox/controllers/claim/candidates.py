"""Picking a warm pool sandbox for a claim: vet the queued candidates, take one off the queue.

:class:`CandidatePicker` is the adoption step's view of the warm queue (:mod:`.warm_index`): it
looks at the queues of the pools a claim may draw from, checks each queued name against the
Sandbox cache (:func:`.plan.candidate_problem`), takes one off its queue, and puts a candidate
back when an adoption write failed for a reason other than "gone" or "taken".
Everything here is synchronous (no ``await``): two workers of this process never take the same
sandbox.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from agentsandbox.api.conditions import is_sandbox_ready
from agentsandbox.api.gojson import GoJSONError
from agentsandbox.api.hashing import pod_template_hash
from agentsandbox.controllers.claim.plan import adoptable, candidate_problem, pool_owner
from agentsandbox.controllers.claim.warm_index import QueueKey, WarmQueue
from agentsandbox.kube.informer import Informer
from agentsandbox.kube.store import KubeObject

__all__ = ["SPREAD", "CandidatePicker"]

SPREAD = 32  # Ready candidates among which a claim's UID picks (see CandidatePicker.pick)


class CandidatePicker:
    """Takes adoption candidates off the warm queue, vetted against the Sandbox cache."""

    def __init__(self, sandboxes: Informer, queue: WarmQueue) -> None:
        self.sandboxes = sandboxes
        self.queue = queue

    @staticmethod
    def pod_hash(template: KubeObject) -> str:
        try:
            return pod_template_hash((template.get("spec") or {}).get("podTemplate") or {})
        except (GoJSONError, TypeError, ValueError):
            return ""

    def problem(
        self,
        sb: KubeObject,
        ns: str,
        template: KubeObject,
        pools: Sequence[KubeObject],
        pod_hash: str,
    ) -> str | None:
        """Why ``sb`` (a fresh copy, say) may not serve the claim, or None."""
        return candidate_problem(sb, ns, template, self.pool_of(sb, pools), pod_hash)

    @staticmethod
    def pool_of(sb: KubeObject, pools: Sequence[KubeObject]) -> KubeObject | None:
        owner = pool_owner(sb)
        return next((p for p in pools if p["metadata"]["name"] == owner), None)

    def pick(
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
        sandbox for the same claim, which the loser recognises as its own.
        """
        fallback: tuple[QueueKey, KubeObject] | None = None
        ready: list[tuple[QueueKey, KubeObject]] = []
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

    def put_back(self, sb: KubeObject) -> None:
        """Queue ``sb`` again (an adoption write failed and left it free); the next pick
        re-vets it against the cache."""
        owner = pool_owner(sb)
        if owner:
            self.queue.add((sb["metadata"]["namespace"], owner), sb["metadata"]["name"])
