"""Warm-pool autoscaler: the circuit breaker around the sizing (:func:`guard`), for a pool whose
members never become Ready (docs/design/autoscaler.md, "A pool that never becomes Ready")."""

from __future__ import annotations

from dataclasses import replace

from agentsandbox.controllers.autoscaler.decision import (
    REASON_MEMBERS_NEVER_READY,
    REASON_POOL_NOT_READY,
    Decision,
    Observation,
)
from agentsandbox.controllers.autoscaler.memory import Memory, breaker_limit
from agentsandbox.controllers.autoscaler.policy import Policy


def guard(sized: Decision, obs: Observation, policy: Policy, memory: Memory) -> Decision:
    """``sized`` as the circuit breaker lets it through (:func:`plan.decide`)."""
    limit = breaker_limit(policy, memory)
    age = obs.oldest_not_ready_age
    old = age is not None and age > limit
    # a slow but healthy pool has members turning Ready all the time; a broken one has none
    idle = obs.last_ready_age is None or obs.last_ready_age > limit
    if memory.breaker_since is not None and obs.pool_progressing:
        ready_since_trip = (
            obs.last_ready_age is not None and obs.now - obs.last_ready_age >= memory.breaker_since
        )
        # no member left not Ready: a stuck one deleted before its replacement is made looks
        # the same for a moment, so it counts once it has lasted a whole limit
        if age is not None:
            memory.breaker_clear_since = None
        elif memory.breaker_clear_since is None:
            memory.breaker_clear_since = obs.now
        clear = memory.breaker_clear_since
        if ready_since_trip or (clear is not None and obs.now - clear >= limit):
            memory.breaker_since = memory.breaker_clear_since = None
    if memory.breaker_since is None:
        if obs.pool_progressing and not (old and idle):
            return sized
        memory.breaker_since = obs.now
    frozen = max(obs.current_replicas, policy.min_replicas)
    replicas = min(sized.replicas, frozen)
    if not obs.pool_progressing:
        reason = REASON_POOL_NOT_READY
        why = "the pool reports it cannot progress" + (
            f" ({obs.pool_condition})" if obs.pool_condition else ""
        )
    else:
        reason = REASON_MEMBERS_NEVER_READY
        why = (
            f"a pool member is still not Ready {age:.0f}s after its create (limit {limit:.0f}s)"
            if old and age is not None
            else "no pool member has become Ready since the breaker tripped "
            f"{obs.now - memory.breaker_since:.0f}s ago"
        )
    message = (
        f"{why}: scale-up frozen at {frozen} replicas (sizing wanted {sized.replicas}: "
        f"{sized.message}); resumes when a member becomes Ready"
    )
    return replace(sized, replicas=replicas, reason=reason, message=message, stalled=True)
