"""The SandboxWarmPoolAutoscaler's metric families (autoscaler review #18) and their clean-up.

Per autoscaler, labelled ``(namespace, autoscaler)``: the last decision's sizes (desired, and
recommended before stabilisation and rate limits), its predicted and realised warm shares,
whether it panics, the measured peakedness and the measured inputs it used (claim arrival rate,
refill time), the target's ``spec.replicas`` as read, and the decisions taken by reason; and,
labelled ``(namespace, autoscaler, pool)``, the period of the bursts' schedule it learnt (the
pool churn alert leaves out the pools it shrinks between bursts on purpose). The
reconciler calls :func:`record` after each decision and :func:`remove_series` once the autoscaler
is gone, so label values are only those of autoscalers that exist; ``reason`` is one of the
decision reasons of :mod:`.plan` or ``other``. A pass that decides nothing (an ambiguous or
unreadable target, a target of another kind) leaves the last decision's values in place.
"""

from __future__ import annotations

import contextlib
from typing import Final

from prometheus_client import Counter, Gauge

from agentsandbox.controllers.autoscaler import decision
from agentsandbox.controllers.autoscaler.plan import Decision
from agentsandbox.kube import metrics as kube_metrics

_R = kube_metrics.REGISTRY
_LABELS = ("namespace", "autoscaler")
_PREFIX = "agent_sandbox_warmpool_autoscaler_"

DESIRED = Gauge(
    _PREFIX + "desired_replicas",
    "The size the autoscaler's last decision set for its pool (within min..max)",
    _LABELS,
    registry=_R,
)
CURRENT = Gauge(
    _PREFIX + "current_replicas",
    "The target pool's spec.replicas as the autoscaler last read it",
    _LABELS,
    registry=_R,
)
RECOMMENDED = Gauge(
    _PREFIX + "recommended_replicas",
    "The size the last decision's sizing wanted, before stabilisation and rate limits",
    _LABELS,
    registry=_R,
)
REALISED_WARM_SHARE = Gauge(
    _PREFIX + "realised_warm_share",
    "The share of the pool's claims of the last 10 minutes that adopted a member (as the "
    "claim controller counted them); absent until a claim was counted",
    _LABELS,
    registry=_R,
)
PANICKING = Gauge(
    _PREFIX + "panicking",
    "1 while the autoscaler panics (a rise of claims no noise explains: no scale-down), else 0",
    _LABELS,
    registry=_R,
)
PEAKEDNESS = Gauge(
    _PREFIX + "peakedness",
    "The measured peakedness of the offered load (1: Poisson; more: claims come in groups)",
    _LABELS,
    registry=_R,
)
PREDICTED_WARM_SHARE = Gauge(
    _PREFIX + "predicted_warm_share",
    "The share of claims the last decision's size serves warm, by Erlang-B",
    _LABELS,
    registry=_R,
)
ARRIVAL_RATE = Gauge(
    _PREFIX + "claim_arrival_rate",
    "Claims per second the last decision measured for the pool",
    _LABELS,
    registry=_R,
)
BURST_PERIOD = Gauge(
    _PREFIX + "burst_period_seconds",
    "The period of the bursts of claims the autoscaler learnt for its pool (between bursts it "
    "shrinks the pool, deleting members being made); 0: no schedule",
    (*_LABELS, "pool"),
    registry=_R,
)
#: the pool each autoscaler's burst_period series names (its scaleTargetRef when recorded)
_POOLS: dict[tuple[str, str], str] = {}
REFILL = Gauge(
    _PREFIX + "refill_seconds",
    "The mean create -> Ready time the last decision used (with the refill overhead)",
    _LABELS,
    registry=_R,
)
DECISIONS = Counter(
    _PREFIX + "decisions_total",
    "Autoscaler decisions by reason",
    [*_LABELS, "reason"],
    registry=_R,
)

#: The decision reasons of :mod:`.plan`; any other is counted as :data:`OTHER`.
REASONS: Final = (
    decision.REASON_NO_DATA,
    decision.REASON_BOOTSTRAP,
    decision.REASON_SCALED_UP,
    decision.REASON_SCALED_DOWN,
    decision.REASON_HOLDING,
    decision.REASON_PANICKING,
    decision.REASON_RATE_LIMITED,
    decision.REASON_AT_MINIMUM,
    decision.REASON_AT_MAXIMUM,
    decision.REASON_STEADY,
    decision.REASON_MEMBERS_NEVER_READY,
    decision.REASON_POOL_NOT_READY,
)
OTHER: Final = "other"
_GAUGES: Final = (
    DESIRED,
    CURRENT,
    RECOMMENDED,
    PREDICTED_WARM_SHARE,
    REALISED_WARM_SHARE,
    PANICKING,
    PEAKEDNESS,
    ARRIVAL_RATE,
    REFILL,
)


def reason_label(reason: str) -> str:
    """A decision's reason as a bounded label value."""
    return reason if reason in REASONS else OTHER


def record(namespace: str, name: str, decision: Decision, current: int, pool: str = "") -> None:
    """One decision of autoscaler ``namespace/name``; ``current``: the target's replicas read;
    ``pool``: the target pool's name."""
    before = _POOLS.get((namespace, name))
    if before is not None and before != pool:
        with contextlib.suppress(KeyError):
            BURST_PERIOD.remove(namespace, name, before)
    _POOLS[(namespace, name)] = pool
    BURST_PERIOD.labels(namespace, name, pool).set(decision.burst_period)
    DESIRED.labels(namespace, name).set(decision.replicas)
    CURRENT.labels(namespace, name).set(current)
    RECOMMENDED.labels(namespace, name).set(decision.recommended)
    if decision.realised_warm_share is not None:
        REALISED_WARM_SHARE.labels(namespace, name).set(decision.realised_warm_share)
    PANICKING.labels(namespace, name).set(1 if decision.panicking else 0)
    PEAKEDNESS.labels(namespace, name).set(decision.peakedness)
    PREDICTED_WARM_SHARE.labels(namespace, name).set(decision.predicted_warm_share)
    ARRIVAL_RATE.labels(namespace, name).set(decision.arrival_rate)
    REFILL.labels(namespace, name).set(decision.refill_time)
    DECISIONS.labels(namespace, name, reason_label(decision.reason)).inc()


def remove_series(namespace: str, name: str) -> None:
    """Drop every series of a deleted autoscaler."""
    for gauge in _GAUGES:
        with contextlib.suppress(KeyError):
            gauge.remove(namespace, name)
    pool = _POOLS.pop((namespace, name), None)
    if pool is not None:
        with contextlib.suppress(KeyError):
            BURST_PERIOD.remove(namespace, name, pool)
    for reason in (*REASONS, OTHER):
        with contextlib.suppress(KeyError):
            DECISIONS.remove(namespace, name, reason)


__all__ = [
    "ARRIVAL_RATE",
    "BURST_PERIOD",
    "CURRENT",
    "DECISIONS",
    "DESIRED",
    "OTHER",
    "PANICKING",
    "PEAKEDNESS",
    "PREDICTED_WARM_SHARE",
    "REALISED_WARM_SHARE",
    "REASONS",
    "RECOMMENDED",
    "REFILL",
    "reason_label",
    "record",
    "remove_series",
]
