"""Warm-pool autoscaler: a silence (:class:`Silence`).

A load that stops for good and one that pauses look alike while the pause lasts. A static pool
keeps its size through both; an autoscaler that shrinks to its minimum as the claims stop meets
the claims' return with an empty pool, and the return after a pause tends to come at once (a
batch resumes, a team starts its day). So a **silence** — no claim for far longer than the long
rate allows by chance — holds the size of ``quiet_scale`` times the long rate before it, at a
tighter share (``quiet_share`` of the allowance), for at most ``quiet_hold`` seconds after the
last claim; then the pool shrinks as before. Only when a refill is slow enough for the return
to cost more cold claims than the allowance of ``feedback_horizon`` (:meth:`Silence.hold`).

A silence is told from a lull of a slower load by two tests: the time since the last claim is at
least ``scale_down_window`` (a lull shorter than that never shrinks the pool anyway), and the long
rate before it would have brought :data:`window.MIN_EVIDENCE` claims or more in that time (the
chance of none is then below e^-20). Kept in memory only: a restart during a silence shrinks the
pool as before it (docs/design/autoscaler.md, "A silence").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentsandbox.controllers.autoscaler.policy import Policy
from agentsandbox.controllers.autoscaler.queueing import hayward_servers
from agentsandbox.controllers.autoscaler.window import MIN_EVIDENCE, ArrivalBins, LongWindow


def latest_claim(bins: ArrivalBins, arrivals: Sequence[float], now: float) -> float | None:
    """The latest claim's time: the arrivals' own, else the end of the latest bin with claims
    (at most ``now``)."""
    if arrivals:
        return max(arrivals)
    for i in range(len(bins.claims) - 1, -1, -1):
        if bins.claims[i]:
            return min((bins.first + i + 1) * bins.width, now)
    return None


@dataclass
class Silence:
    """The latest claim seen and the long rate then; the rate a silence holds the size of."""

    last_claim: float | None = None
    rate: float = 0.0  # the long rate (claims/s) as of the latest claim
    evidence: float = 0.0  # the long window's weighted claims then

    def observe(
        self,
        bins: ArrivalBins,
        arrivals: Sequence[float],
        now: float,
        long: LongWindow,
        policy: Policy,
    ) -> float | None:
        """The rate whose size a silence holds now, or None (no silence, or held long enough)."""
        latest = latest_claim(bins, arrivals, now)
        if latest is not None and (self.last_claim is None or latest > self.last_claim):
            self.last_claim, self.rate, self.evidence = latest, long.rate(), long.claims
        if self.last_claim is None or self.evidence < MIN_EVIDENCE:
            return None
        quiet = now - self.last_claim
        if quiet < policy.scale_down_window or self.rate * quiet < MIN_EVIDENCE:
            return None
        if quiet > policy.quiet_hold:
            return None
        return self.rate

    def hold(
        self,
        bins: ArrivalBins,
        arrivals: Sequence[float],
        now: float,
        long: LongWindow,
        refill: float,
        z: float,
        policy: Policy,
        most: int,
    ) -> int:
        """The size a silence holds now (0: none). Only when the claims of one refill time, which
        a pool at its minimum serves cold as the load returns, outnumber the allowance of the
        claims of ``feedback_horizon`` (the span the realised share is steered over): with a
        refill of seconds, the return costs a handful of cold claims, and holding costs hours."""
        rate = self.observe(bins, arrivals, now, long, policy)
        allowance = 1.0 - policy.target_warm_share
        if rate is None or refill <= allowance * policy.feedback_horizon:
            return 0
        share = 1.0 - allowance * policy.quiet_share
        return min(hayward_servers(rate * policy.quiet_scale * refill, z, share, most), most)

    def describe(self, now: float, held: int) -> str:
        quiet = now - (self.last_claim or now)
        return (
            f"no claim for {quiet:.0f}s after {self.rate:.3g}/s: holding the {held} sandboxes "
            "that rate needs"
        )
