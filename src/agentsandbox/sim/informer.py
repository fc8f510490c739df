"""The autoscaler's view through the real informer windows: restarts and clock skew.

By default the simulator hands ``decide()`` the exact claim times and create -> Ready durations
(:class:`~.engine.Simulation`). With a restart or a clock skew it instead feeds the controller's
own :class:`~agentsandbox.controllers.autoscaler.source.Windows` the objects an informer would
show, as the handlers of :mod:`agentsandbox.controllers.autoscaler.handlers` do:

- the controller's clock is the API server's plus ``skew`` seconds (its monotonic clock is the
  same, a constant offset away); ``creationTimestamp`` is the API server's time, whole seconds;
  a Ready condition's ``lastTransitionTime`` is written by the sandbox controller (the same
  process as the autoscaler): the controller's clock, whole seconds. The refill samples are
  timed on the controller's clock alone (watch event to watch event), the arrivals still compare
  it with ``creationTimestamp``;
- a claim is seen when it is created (``claim_added``), a pool member when it is created
  (``sandbox_added``, not Ready), when it turns Ready (``sandbox_updated``) and when it is deleted
  (``sandbox_deleted``); a member adopted by a claim leaves the pool (its controller reference
  moves to the claim), which the windows ignore;
- a **restart** loses everything in memory: a new ``Windows``, a new ``plan.Memory``, and the
  first pass holds the current size as a recommendation (``AutoscalerMemory.seeded``). The new
  process's informers list what exists: the claims still alive (a claim lives until its dwell
  after it was served; deleted ones are gone), then the pool's members, Ready or not, each
  given to the handlers as an ADDED event of the list at the restart (``listed``: they give no
  refill sample, not even those that turn Ready later).

The pool's members that exist at the start of a run became Ready long before it (their
``lastTransitionTime`` is a day earlier) and are not shown to the windows: they give no refill
sample, as in the default view.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections import deque
from typing import Any

from agentsandbox.api.kinds import SANDBOX_CLAIM
from agentsandbox.controllers.autoscaler.plan import ArrivalBins, Memory, Observation
from agentsandbox.controllers.autoscaler.source import Windows

READY_REASON = "DependenciesReady"
LONG_AGO = -86_400.0  # seconds: the initial members' Ready transition (outside any window)


@functools.lru_cache(maxsize=65536)
def stamp(epoch: float, t: float) -> str:
    """``metav1.Time`` of ``epoch + t``: whole seconds, truncated."""
    return dt.datetime.fromtimestamp(epoch + t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Informed:
    """What the autoscaler observes, through ``Windows`` fed as the informers would."""

    def __init__(
        self,
        epoch: float,
        namespace: str,
        pool: str,
        window: float,
        skew: float,
        dwell: float,
    ) -> None:
        self.epoch = epoch
        self.namespace = namespace
        self.pool = pool
        self.key = f"{namespace}/pool/{pool}"  # the pool's claims' key in the windows
        self.window = window
        self.skew = skew
        self.dwell = dwell
        self.t = 0.0  # API server time (the simulation's), seconds from the epoch
        self.windows = Windows(window, self._clock)
        self.memory = Memory()
        self.seeded = False
        self.persisted: ArrivalBins | None = None
        self.estimates: dict[str, object] | None = None  # the status' estimates at the restart
        self.claims = 0
        # (created, deleted, uid) of recent claims, for a relist
        self.recent: deque[tuple[float, float, str]] = deque()

    def _clock(self) -> float:
        return self.epoch + self.t + self.skew

    # ------------------------------------------------------------------ objects
    def ready_status(self, t: float) -> dict[str, Any]:
        """A Ready condition written by the controller at API time ``t``."""
        return {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": READY_REASON,
                    "lastTransitionTime": stamp(self.epoch, t + self.skew),
                }
            ]
        }

    def initial_status(self) -> dict[str, Any]:
        return self.ready_status(LONG_AGO)

    def _claim(self, uid: str, created: float) -> dict[str, Any]:
        return {
            "apiVersion": SANDBOX_CLAIM.api_version,
            "kind": "SandboxClaim",
            "metadata": {
                "name": uid,
                "namespace": self.namespace,
                "uid": uid,
                "creationTimestamp": stamp(self.epoch, float(int(created))),
            },
            "spec": {"warmPoolRef": {"name": self.pool}},
        }

    # ------------------------------------------------------------------ events
    def claim_added(self, t: float, served_after: float) -> None:
        """A claim created at ``t``; it is deleted ``served_after + dwell`` seconds later."""
        self.t = t
        self.claims += 1
        uid = f"claim-{self.claims}"
        self.recent.append((t, t + served_after + self.dwell, uid))
        keep = t - self.window - abs(self.skew) - 5.0
        while self.recent and self.recent[0][0] < keep:
            self.recent.popleft()
        self.windows.claim_added(self._claim(uid, t))

    def sandbox_added(self, t: float, sb: dict[str, Any]) -> None:
        self.t = t
        self.windows.sandbox_added(sb)

    def sandbox_ready(self, t: float, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.t = t
        self.windows.sandbox_updated(old, new)

    def sandbox_deleted(self, t: float, sb: dict[str, Any]) -> None:
        self.t = t
        self.windows.sandbox_deleted(sb)

    def restart(self, t: float, members: list[dict[str, Any]]) -> None:
        """A new process at ``t``: a new memory with what the status keeps (the window and the
        estimates), windows rebuilt from a relist."""
        self.t = t
        self.windows = Windows(self.window, self._clock)
        # the window the previous process wrote to the autoscaler's status
        kept = self.memory.window
        self.persisted = None if kept is None else kept.copy()
        self.estimates = self.memory.estimates()
        self.memory = Memory()
        self.seeded = False
        for created, deleted, uid in list(self.recent):
            if created <= t < deleted:
                self.windows.claim_added(self._claim(uid, created), listed=True)
        for sb in members:
            self.windows.sandbox_added(sb, listed=True)

    # ------------------------------------------------------------------ the pass
    def observe(self, t: float, replicas: int) -> Observation:
        """The Observation of a pass at API time ``t`` (times in the controller's clock, from
        the epoch); the first pass of a process seeds the memory with the current size."""
        self.t = t
        now = self._clock()
        bins = self.windows.bins_for([self.key])
        bins.first -= round(self.epoch / bins.width)  # the simulation's times, from the epoch
        obs = Observation(
            now=now - self.epoch,
            arrivals=(),
            bins=bins,
            refill_seconds=self.windows.refills_for(f"{self.namespace}/{self.pool}"),
            current_replicas=replicas,
        )
        if not self.seeded:
            self.seeded = True
            self.memory.restore(self.persisted, obs.now, replicas, self.estimates)
        return obs
