"""Warm-pool autoscaler: what a decision is given (:class:`Observation`) and what it returns
(:class:`Decision`, with one of the ``REASON_*`` reasons)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentsandbox.controllers.autoscaler.window import ArrivalBins

REASON_NO_DATA = "NoData"
REASON_BOOTSTRAP = "Bootstrap"
REASON_SCALED_UP = "ScaledUp"
REASON_SCALED_DOWN = "ScaledDown"
REASON_HOLDING = "HoldingForWindow"
REASON_PANICKING = "HoldingInPanic"
REASON_RATE_LIMITED = "RateLimited"
REASON_AT_MINIMUM = "AtMinimum"
REASON_AT_MAXIMUM = "AtMaximum"
REASON_STEADY = "Steady"
# the circuit breaker (not sizing reasons: ScalingActive=False)
REASON_MEMBERS_NEVER_READY = "MembersNeverReady"
REASON_POOL_NOT_READY = "PoolNotReady"


@dataclass(frozen=True)
class Observation:
    now: float  # seconds (any epoch, monotonic in tests/sim)
    arrivals: Sequence[float]  # claim creation times seen (the caller keeps a window, e.g. 10 min)
    refill_seconds: Sequence[float]  # recent pool-sandbox create->Ready durations
    current_replicas: int  # the pool's spec.replicas now
    # the arrivals already binned (the controller's windows keep them so); None: bin arrivals
    bins: ArrivalBins | None = None
    # the claims of the pool served warm and cold in the window, as counted by the claim
    # controller (None: not known)
    served: tuple[int, int] | None = None
    # the same, in total since the claim controller started (None: not known)
    served_total: tuple[int, int] | None = None
    # the circuit breaker's inputs: seconds since the oldest not-Ready pool member was created
    # (None: every member is Ready), whether the pool reports it can progress (its Ready
    # condition not SandboxCreateFailed, SandboxesBlocked, TemplateNotFound or TemplateError),
    # and seconds since a member was last seen turning Ready (None: not seen)
    oldest_not_ready_age: float | None = None
    pool_progressing: bool = True
    pool_condition: str = ""  # the pool's Ready reason and message, for the decision's message
    last_ready_age: float | None = None


@dataclass(frozen=True)
class Decision:
    replicas: int  # the pool size to set (within min..max)
    reason: str  # CamelCase: see the REASON_* constants
    message: str  # human sentence: why (rates, refill time, Erlang-B cold share, holds)
    arrival_rate: float  # per second: the stable window's rate
    refill_time: float  # seconds: the mean create -> Ready time measured (+ refill_overhead)
    predicted_warm_share: float  # 1 - blocking of the offered load at ``replicas``
    panic_rate: float = 0.0  # per second: the panic window's rate
    panicking: bool = False
    peakedness: float = 1.0  # z of the offered load (1: Poisson)
    realised_warm_share: float | None = None  # from the served counts given (None: unknown)
    recommended: int = 0  # the unstabilised, unlimited size (within min..max)
    stalled: bool = False  # the circuit breaker is tripped: no growth (ScalingActive=False)
    burst_period: float = 0.0  # seconds: the period of the bursts' schedule learnt (0: none)
