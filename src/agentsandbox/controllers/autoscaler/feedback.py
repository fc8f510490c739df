"""Warm-pool autoscaler: feedback from the realised warm share (pure; the decision's helper).

The realised cold share over about ``feedback_horizon`` seconds (exponentially weighted
increments of the claim controller's served totals, with a prior of ``feedback_prior`` cold
claims at the target's share) corrects the allowance the sizing uses (integral action), within
``feedback_min`` and ``feedback_max`` times the spec's. A model that over-sizes (peakedness
approximated, refill times not independent) is relaxed to the target by what the claims actually
got. Claims served worse than the target tighten it below the spec's: the claims a change of
rate sent cold (a step up no autoscaler sees coming) are made up for by serving the next hour's
claims better than the target, so that the share over the hour — what the target is for —
comes back to it. Only a miss the noise of arrivals hardly explains tightens (``feedback_sigmas``
standard deviations above the allowance's count: one or two cold claims among a hundred are
chance).
"""

from __future__ import annotations

import math
from typing import Protocol

from agentsandbox.controllers.autoscaler.policy import Policy
from agentsandbox.controllers.autoscaler.window import significantly_above


class Steered(Protocol):
    """What the steering keeps between decisions (plan.Memory has it)."""

    served_last: tuple[int, int] | None
    served_warm: float
    served_cold: float
    allowance_scale: float


def steer_allowance(
    served_total: tuple[int, int], policy: Policy, memory: Steered, dt: float, counted: bool
) -> None:
    """Update ``memory.allowance_scale`` from the served totals (warm, cold) since the claim
    controller started; the claims since the last call count only if ``counted``."""
    allowance = 1.0 - policy.target_warm_share
    warm_total, cold_total = served_total
    last_warm, last_cold = memory.served_last or (0, 0)
    if warm_total >= last_warm and cold_total >= last_cold:
        new_warm, new_cold = warm_total - last_warm, cold_total - last_cold
    else:  # the counts restarted (a new claim controller process)
        new_warm, new_cold = warm_total, cold_total
    memory.served_last = (warm_total, cold_total)
    if dt <= 0 or not counted:
        return
    decay = math.exp(-dt / policy.feedback_horizon)
    memory.served_warm = memory.served_warm * decay + new_warm
    memory.served_cold = memory.served_cold * decay + new_cold
    prior = policy.feedback_prior / allowance
    measured = (memory.served_cold + policy.feedback_prior) / (
        memory.served_warm + memory.served_cold + prior
    )
    step = min(1.0, dt / policy.feedback_integral)
    error = min(max(math.log(allowance / measured), -1.0), 1.0)
    if error < 0 and not significantly_above(
        memory.served_cold,
        allowance * (memory.served_warm + memory.served_cold),
        sigmas=policy.feedback_sigmas,
    ):
        error = 0.0  # a miss chance alone explains: hold, neither tighten nor relax
    memory.allowance_scale *= math.exp(step * error)
    memory.allowance_scale = min(
        max(memory.allowance_scale, policy.feedback_min), policy.feedback_max
    )
