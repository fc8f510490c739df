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

A relaxation is not carried into a rise (:func:`forget_relaxation`): what the claims told of
the model at the load before a rise says nothing of it at the load after.

The same realised share, over the claim controller's window, stretches the scale-down window
after a miss that followed a rise (:func:`stretch_hold`).
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


class Held(Protocol):
    """What the scale-down window's stretch keeps between decisions (plan.Memory has it)."""

    hold: float
    last_panic: float | None
    first_seen: float | None
    last_rise: float | None
    step_rise: float | None
    stretched_for: float | None


def stretch_hold(
    served: tuple[int, int] | None, policy: Policy, memory: Held, now: float, dt: float
) -> tuple[float | None, bool]:
    """The realised warm share of the claim controller's window (``served``: warm, cold; None
    when no claim was served) and whether its cold claims miss the allowance beyond chance;
    such a miss after a rise the model did not see coming stretches the scale-down window
    (``memory.hold``: doubling, up to ``hold_max``), which relaxes back over ``hold_relax``.

    After a burst (a rise over within the panic window), once per rise (``memory.last_rise``):
    the window of served claims keeps a burst's cold claims for minutes, and every pass that saw
    them again doubled the stretch, to ``hold_max`` within seconds; the pool then held the
    burst's size for an hour after it, while the load was back to its rate before. After a
    change of load (a rise that outlasted the panic window: ``memory.step_rise``) every pass
    that sees the miss still doubles it: the rates lag the new load for a stable window, and
    the size the panic reached is kept meanwhile."""
    if served is None:
        return None, False
    warm, cold = served
    total = warm + cold
    realised = warm / total if total else None
    allowed = (1.0 - policy.target_warm_share) * total
    if dt > 0:
        memory.hold = 1.0 + (memory.hold - 1.0) * math.exp(-dt / policy.hold_relax)
    # a miss after a rise the model did not see coming (a panic within the window): keep
    # capacity longer; a miss in steady traffic is the model's noise, not a reason to hold,
    # nor is one of the start-up (the first stable window, while the first members are made:
    # the pool was small because nothing was known, not because it shrank too soon)
    surprised = (
        memory.last_panic is not None
        and memory.first_seen is not None
        and now - memory.last_panic <= policy.rate_window
        and now - memory.first_seen >= policy.stable_window
    )
    missing = total >= policy.feedback_min_claims and significantly_above(cold, allowed)
    step = memory.last_rise is not None and memory.step_rise == memory.last_rise
    if surprised and missing and (step or memory.stretched_for != memory.last_rise):
        memory.stretched_for = memory.last_rise
        memory.hold = min(policy.hold_max, max(memory.hold, 2.0 * memory.hold))
    return realised, missing


def forget_relaxation(memory: Steered, load: float) -> None:
    """A rise of the load (a panic's rise that outlasts the panic window, unlike a burst's, or
    the drift test finds the claims of the last drift window significantly above the regime's
    rate): an allowance relaxed above the spec's goes back to the spec's. The relaxation was
    learnt at the load before (an hour served warmer than the target: often chance, or a
    stabilisation window that held a falling load's size), and at the new load it only sizes
    the pool under the target while the claims of the rise come cold. A tightening is kept:
    it makes up for claims served cold before, and the rise's own cold claims tighten it
    further.

    Not on a load under one sandbox (``load``: the long rate times the refill time, as the
    sparse test of :func:`steer_allowance` reads it): a refill shorter than the gap between
    claims sends few of a rise's claims cold, and a sandbox more for the spec's aim is a large
    share of a pool of a few."""
    if load >= 1.0:
        memory.allowance_scale = min(memory.allowance_scale, 1.0)


def steer_allowance(
    served_total: tuple[int, int],
    policy: Policy,
    memory: Steered,
    dt: float,
    counted: bool,
    rate: float = math.inf,
    refill: float = 0.0,
) -> None:
    """Update ``memory.allowance_scale`` from the served totals (warm, cold) since the claim
    controller started; the claims since the last call count only if ``counted``.

    ``rate`` (the claims' long rate, claims/s) and ``refill`` (seconds) tell a **sparse load**:
    the allowance expects at most ``feedback_sigmas`` squared cold claims over
    ``feedback_horizon`` (4 at 99 %: under 0.11 claims/s), so no miss of it can be significant,
    and its load is a sandbox or more, so the aim decides the size. On such a load a miss
    tightens as a surplus relaxes, on the plain integral: with the significance test alone it
    only ever relaxed, to ``feedback_max``, and aimed under the target. And each step is scaled
    by the cold claims the horizon expects over ``feedback_sigmas`` squared (a quarter at 1 %
    of 100 claims an hour): at the full step, each cold claim, or an hour without one, swung
    the allowance by a factor of two or more, and the size by a sandbox with it."""
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
    # a sparse load (see above): a miss tightens without the significance test, and each step
    # weighs what the horizon can tell, its expected cold claims over feedback_sigmas squared
    expected = allowance * rate * policy.feedback_horizon
    sparse = expected <= policy.feedback_sigmas**2 and rate * refill >= 1.0
    if sparse:
        step *= expected / policy.feedback_sigmas**2
    if (
        error < 0
        and not sparse
        and not significantly_above(
            memory.served_cold,
            allowance * (memory.served_warm + memory.served_cold),
            sigmas=policy.feedback_sigmas,
        )
    ):
        error = 0.0  # a miss chance alone explains: hold, neither tighten nor relax
    memory.allowance_scale *= math.exp(step * error)
    memory.allowance_scale = min(
        max(memory.allowance_scale, policy.feedback_min), policy.feedback_max
    )
