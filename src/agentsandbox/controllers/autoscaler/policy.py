"""Warm-pool autoscaler: the policy a decision is made under (its spec and the controller's
settings, as :func:`settings.policy_of` builds it), with the model's constants."""

from __future__ import annotations

from dataclasses import dataclass

from agentsandbox.controllers.autoscaler.behavior import DEFAULT_SCALE_DOWN, DEFAULT_SCALE_UP, Rules


@dataclass(frozen=True)
class Policy:
    min_replicas: int
    max_replicas: int
    target_warm_share: float  # e.g. 0.99: the share of claims to serve warm
    scale_down_window: float = 300.0  # seconds a lower recommendation must hold before scaling down
    # seconds of arrivals kept (the stable window is at most this; the state in the status)
    rate_window: float = 1800.0
    bin_width: float = 10.0  # seconds per bin of the arrival window
    stable_window: float = 1800.0  # seconds of claims the stable rate is measured over
    panic_window: float = 60.0  # seconds of claims the panic rate is measured over
    panic_hold: float = 300.0  # seconds panic lasts after its last trigger
    drift_window: float = 300.0  # seconds of claims a slower change of rate is detected over
    panic_sigmas: float = 4.0  # how far above the stable rate the panic window must be
    # seconds of claims that tell a panic's rise is over: fewer than the panic's highest rate
    # predicts (a burst that ended, not a step that goes on)
    settle_window: float = 20.0
    group_gap: float = 0.05  # seconds: claims this close to a group's first join the group
    group_horizon: float = 7200.0  # seconds the grouping of arrivals is measured over
    # seconds of claims whose occupancy quantile (the smallest static pool that met the target
    # over them) floors the size; stretched with the scale-down window by the feedback, up to the
    # rate_window of claims kept
    occupancy_window: float = 1800.0
    # how far (standard deviations of their count) the claims the current size would have
    # served cold must be above the allowance before the occupancy floor rises above it
    floor_sigmas: float = 2.0
    # a steady load whose index of dispersion is over Poisson's (with its chance pairs) by more
    # than this is grouped: it has no occupancy floor (the model's peakedness sizes its groups;
    # a clump of them in the window is chance, not a change of the load)
    grouped_excess: float = 0.25
    # seconds the long rate weighs claims over: a stationary load is sized on hours of claims
    # rather than on the chance of the last window, while the window's claims are consistent
    # with it (floor_sigmas standard deviations of their count)
    long_horizon: float = 7200.0
    # bursts on a schedule (cycle.py): learnt from at least cycle_rises panic rises whose times
    # fit a period within cycle_tolerance of it; between two bursts the pool holds what the
    # claims between them need, and grows back the refill p99 plus cycle_lead seconds (the
    # scale-up's rate-limit steps) before the next burst is due
    cycle_rises: int = 7
    cycle_tolerance: float = 0.1
    cycle_lead: float = 30.0
    # bursts at random gaps (cycle.py): their claims kept from memory_rises of them on size the
    # pool as a burst comes; from gap_rises gaps between rises on, the pool holds what the
    # claims between them need until the shortest gap (less the gaps' spread) nears its end
    memory_rises: int = 2
    gap_rises: int = 5
    gap_quiet_share: float = 0.1  # of the allowance, for the claims between bursts at random gaps
    # a silence (quiet.py): no claim for scale_down_window seconds or more, where the long rate
    # would have brought many: the size of quiet_scale times that rate is held, at quiet_share
    # of the allowance, for at most quiet_hold seconds after the last claim (the load's return
    # after a pause comes as a rush)
    quiet_scale: float = 1.75
    quiet_share: float = 0.3
    quiet_hold: float = 14400.0
    # added to the measured create -> Ready time: the work queue's coalescing and the create call
    # before the create is timed (the slot is busy from the adoption, not from the create)
    refill_overhead: float = 0.05
    # the measured refill time is smoothed over refill_horizon seconds while the recent samples'
    # mean stays within refill_sigmas standard errors of it (queueing.settled_mean)
    refill_horizon: float = 1800.0
    refill_sigmas: float = 3.0
    scale_up: Rules = DEFAULT_SCALE_UP
    scale_down: Rules = DEFAULT_SCALE_DOWN
    # feedback: the scale-down window is stretched up to this factor while the realised cold
    # share misses the allowance, and relaxes back with this time constant (seconds)
    hold_max: float = 12.0
    hold_relax: float = 3600.0
    feedback_min_claims: int = 20  # fewer served claims in the window: no feedback
    # the allowance correction: realised shares weighted over feedback_horizon seconds, a prior
    # of feedback_prior cold claims at the target's share, an integral time of
    # feedback_integral seconds, the correction kept within feedback_min..feedback_max (below 1:
    # aiming above the target, to make up for claims served cold)
    feedback_horizon: float = 3600.0
    feedback_prior: float = 1.0
    feedback_integral: float = 1800.0
    feedback_min: float = 0.25
    feedback_max: float = 2.0
    # it tightens only on a miss the noise of arrivals hardly explains: more cold claims than
    # the allowance by feedback_sigmas standard deviations (window.significantly_above)
    feedback_sigmas: float = 2.0
    # the circuit breaker (docs/design/autoscaler.md, "A pool that never becomes Ready"): it
    # trips when the oldest not-Ready member is older than breaker_factor x the p99 refill time
    # (breaker_default when none was measured), kept within breaker_floor..breaker_cap — the
    # cap below the pool's readiness grace period (300 s by default), after which the pool
    # replaces a stuck member and the oldest not-Ready one is young again
    breaker_factor: float = 3.0
    breaker_default: float = 120.0
    breaker_floor: float = 60.0
    breaker_cap: float = 240.0
