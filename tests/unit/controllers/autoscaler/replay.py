"""One decide loop for the autoscaler's unit tests: passes at a fixed interval over a list of
claim creation times, with the window's bins filled as the claims come and the occupancy span
set after each pass, as the controller does."""

from __future__ import annotations

from collections.abc import Iterator

from agentsandbox.controllers.autoscaler.plan import (
    ArrivalBins,
    Decision,
    Memory,
    Observation,
    Policy,
    decide,
    occupancy_span,
)


def passes(
    arrivals: list[float],
    end: float,
    policy: Policy,
    *,
    refill: float = 90.0,
    every: float = 5.0,
    cold_from: float | None = None,
    served_window: float = 600.0,
    memory: Memory | None = None,
) -> Iterator[tuple[float, Decision, Memory]]:
    """(time, decision, memory) of each pass from 0 to ``end``, every ``every`` seconds, with
    refills of ``refill`` seconds. With ``cold_from`` the claim controller reports its served
    claims (each warm before ``cold_from`` and cold from then on), in total and over its last
    ``served_window`` seconds; without, it reports none."""
    memory = memory if memory is not None else Memory()
    bins = ArrivalBins(policy.bin_width)
    pending = sorted(arrivals)
    current, now, i, warm, cold = 1, 0.0, 0, 0, 0
    while now <= end:
        while i < len(pending) and pending[i] <= now:
            bins.add(pending[i], policy.group_gap)
            if cold_from is None or pending[i] < cold_from:
                warm += 1
            else:
                cold += 1
            i += 1
        served = served_total = None
        if cold_from is not None:
            recent = [a for a in pending[:i] if a > now - served_window]
            recent_cold = sum(1 for a in recent if a >= cold_from)
            served = (len(recent) - recent_cold, recent_cold)
            served_total = (warm, cold)
        obs = Observation(
            now,
            (),
            [refill] * 50,
            current,
            bins=bins,
            served=served,
            served_total=served_total,
        )
        decision = decide(obs, policy, memory)
        bins.span = occupancy_span(policy, memory)
        yield now, decision, memory
        current = decision.replicas
        now += every
