"""Warm-pool autoscaler: what a decision keeps between passes (:class:`Memory`), and the part of
it the autoscaler's status keeps across a restart (``status.window``: the arrival bins;
``status.estimates``: what the sizing measured and learnt)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeGuard

from agentsandbox.controllers.autoscaler.cycle import RISES_KEPT, Bursts, Rise
from agentsandbox.controllers.autoscaler.policy import Policy
from agentsandbox.controllers.autoscaler.quiet import Silence
from agentsandbox.controllers.autoscaler.window import ArrivalBins, LongWindow


@dataclass
class Memory:
    """Kept by the caller between decisions; starts empty."""

    recommendations: list[tuple[float, int]] = field(default_factory=list)
    changes: list[tuple[float, int]] = field(default_factory=list)  # (when, replicas delta)
    first_seen: float | None = None  # earliest time observed (first decision or arrival)
    last_decision: float | None = None
    refill_mean: float | None = None  # last measured (kept when the samples run out)
    refill_p99: float | None = None
    refill_kappa: float = 1.0  # ∫S² / ∫S of the refill times (peakedness of the slots)
    restored: ArrivalBins | None = None  # the window a previous process kept (status)
    window: ArrivalBins | None = None  # the window of the last decision (to persist)
    panic_until: float | None = None
    regime_start: float | None = None  # the last significant change of rate
    dropped_at: float | None = None  # when a significant drop was last seen (its end)
    last_panic: float | None = None
    hold: float = 1.0  # the feedback's stretch of the scale-down window
    served_last: tuple[int, int] | None = None  # the served totals of the last decision
    served_warm: float = 0.0  # exponentially weighted served claims (feedback_horizon)
    served_cold: float = 0.0
    allowance_scale: float = 1.0  # the realised share's correction of the allowance
    counted_bin: int = -(2**62)  # the last closed bin added to the grouping statistics
    group_claims: float = 0.0  # exponentially weighted claims and squares (group_horizon)
    group_squares: float = 0.0
    long: LongWindow = field(default_factory=LongWindow)  # the claims of the long_horizon
    trend_bin: int | None = None  # the bin the trend was last tested in, and its result
    trend: float = 0.0
    breaker_since: float | None = None  # when the circuit breaker tripped (None: not tripped)
    breaker_clear_since: float | None = None  # tripped, and no member not Ready since then
    panic_peak: float = 0.0  # the highest panic rate since the panic's rise began (claims/s)
    panic_settled: bool = False  # the panic's rise is over (until the next rise)
    rise_began: float | None = None  # a panic's rise, until it settles or outlasts panic_window
    last_rise: float | None = None  # when the latest panic's rise began
    step_rise: float | None = None  # the latest rise that outlasted panic_window (a step)
    stretched_for: float | None = None  # the rise whose miss last stretched the window
    refill_until: float | None = None  # a kept refill time is used until then (restore)
    bursts: Bursts = field(default_factory=Bursts)  # the panics' rises and their schedule
    quiet: Silence = field(default_factory=Silence)  # the latest claim, for a silence

    def restore(
        self,
        window: ArrivalBins | None,
        now: float,
        replicas: int,
        estimates: Mapping[str, object] | None = None,
    ) -> None:
        """A new process: the window and the estimates from the status, the current size held
        as a recommendation (a restart never shrinks the pool). A kept refill time is used
        until one kept p99 has passed: the members created after the restart that are Ready by
        then are the fast ones only, so their mean would under-state the refill time."""
        self.restored = window
        self.recommendations.append((now, replicas))
        if window is not None and window.claims:
            start = window.first * window.width
            self.first_seen = start if self.first_seen is None else min(self.first_seen, start)
        kept = parse_estimates(estimates)
        mean, p99 = kept.get("refillMeanSeconds"), kept.get("refillP99Seconds")
        if mean is not None and p99 is not None and self.refill_mean is None:
            self.refill_mean, self.refill_p99 = mean, p99
            self.refill_kappa = kept.get("refillKappa", 1.0)  # within (0, 1]: parse_estimates
            self.refill_until = now + p99
        if "allowanceScale" in kept:
            self.allowance_scale = kept["allowanceScale"]
        if "scaleDownStretch" in kept:
            self.hold = max(kept["scaleDownStretch"], 1.0)
        if not self.bursts.rises and isinstance(estimates, Mapping):
            # the schedule of bursts is learnt from several rises (cycle_rises): without them a
            # restart would size as if no schedule were known for that many bursts
            self.bursts.rises = parse_rises(estimates.get("burstRises"), now)

    def estimates(self) -> dict[str, object]:
        """What a new process takes back from the status (:meth:`restore`), rounded so that
        the status changes only when one of them does (the rises: when a burst starts or
        ends)."""
        out: dict[str, object] = {}
        if self.refill_mean is not None and self.refill_p99 is not None:
            out["refillMeanSeconds"] = round(self.refill_mean, 2)
            out["refillP99Seconds"] = round(self.refill_p99, 2)
            out["refillKappa"] = round(self.refill_kappa, 3)
        out["allowanceScale"] = round(self.allowance_scale, 3)
        out["scaleDownStretch"] = round(self.hold, 2)
        if self.bursts.rises:
            out["burstRises"] = [
                {"start": round(r.start, 1)} | ({} if r.end is None else {"end": round(r.end, 1)})
                for r in self.bursts.rises[-RISES_KEPT:]
            ]
        return out


#: the estimates the status keeps: name -> (lowest, highest) accepted
ESTIMATE_BOUNDS: dict[str, tuple[float, float]] = {
    "refillMeanSeconds": (0.0, 86400.0),
    "refillP99Seconds": (0.0, 86400.0),
    "refillKappa": (0.0, 1.0),
    "allowanceScale": (0.0, 100.0),
    "scaleDownStretch": (1.0, 1000.0),
}


def parse_estimates(data: object) -> dict[str, float]:
    """The estimates a previous process wrote (:meth:`Memory.estimates`); a value missing, not
    a number or out of bounds is left out (the decision measures it again)."""
    if not isinstance(data, Mapping):
        return {}
    out: dict[str, float] = {}
    for name, (lo, hi) in ESTIMATE_BOUNDS.items():
        v = data.get(name)
        if _finite(v) and lo <= v <= hi:
            out[name] = float(v)
    for name in ("refillMeanSeconds", "refillKappa"):  # a mean or a factor of 0 is no measure
        if out.get(name, 1.0) <= 0:
            del out[name]
    return out


def parse_rises(data: object, now: float) -> list[Rise]:
    """The bursts' rises a previous process wrote (:meth:`Memory.estimates`), in order: an item
    that is not a mapping with a finite ``start`` not after ``now`` is left out, an ``end`` that
    is not a finite number at or after its start is dropped (the rise is then over at the next
    pass that sees no panic), and only the latest :data:`RISES_KEPT` are kept."""
    if not isinstance(data, list):
        return []
    out: list[Rise] = []
    for item in data[-4 * RISES_KEPT :]:
        if not isinstance(item, Mapping):
            continue
        start, end = item.get("start"), item.get("end")
        if not _finite(start) or start > now:
            continue
        rise = Rise(float(start))
        if _finite(end) and rise.start <= end <= now:
            rise.end = float(end)
        out.append(rise)
    out.sort(key=lambda r: r.start)
    return out[-RISES_KEPT:]


def _finite(v: object) -> TypeGuard[int | float]:
    """A number (not a bool) that is finite."""
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def occupancy_span(policy: Policy, memory: Memory) -> float:
    """Seconds the window counts a claim's occupancy over: the refill time (0: not measured)."""
    return 0.0 if memory.refill_mean is None else memory.refill_mean + policy.refill_overhead


def breaker_limit(policy: Policy, memory: Memory) -> float:
    """Seconds a pool member may stay not Ready before the circuit breaker trips."""
    base = (
        policy.breaker_factor * memory.refill_p99
        if memory.refill_p99 is not None
        else policy.breaker_default
    )
    return min(max(base, policy.breaker_floor), policy.breaker_cap)
