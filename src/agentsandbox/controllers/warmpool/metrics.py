"""The SandboxWarmPool controller's metric families (upstream's names) and their clean-up."""

from __future__ import annotations

import contextlib
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from agentsandbox.kube import metrics as kube_metrics

_R = kube_metrics.REGISTRY
DESIRED = Gauge(
    "agent_sandbox_warmpool_desired_replicas",
    "spec.replicas of a warm pool",
    ["namespace", "pool"],
    registry=_R,
)
CURRENT = Gauge(
    "agent_sandbox_warmpool_replicas",
    "Active sandboxes of a warm pool",
    ["namespace", "pool"],
    registry=_R,
)
READY = Gauge(
    "agent_sandbox_warmpool_ready_replicas",
    "Ready sandboxes of a warm pool",
    ["namespace", "pool"],
    registry=_R,
)
CREATES = Counter(
    "agent_sandbox_warmpool_sandbox_creates_total",
    "Sandbox creates by warm pools",
    ["namespace", "pool", "result"],
    registry=_R,
)
DELETES = Counter(
    "agent_sandbox_warmpool_sandbox_deletes_total",
    "Sandbox deletes by warm pools (reason: stale, stuck, excess)",
    ["namespace", "pool", "reason"],
    registry=_R,
)
DELETES_BEFORE_READY = Counter(
    "agent_sandbox_warmpool_sandbox_deletes_before_ready_total",
    "Deletes by warm pools of their own sandboxes whose Ready condition was not True (churn)",
    ["namespace", "pool"],
    registry=_R,
)
ADOPTIONS = Counter(
    "agent_sandbox_warmpool_adoptions_total",
    "Orphan sandboxes adopted by warm pools",
    ["namespace", "pool"],
    registry=_R,
)
TIME_TO_READY = Histogram(
    "agent_sandbox_warmpool_sandbox_time_to_ready_seconds",
    "From a pool sandbox's creation to its first Ready=True",
    ["namespace", "pool"],
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, float("inf")),
    registry=_R,
)


def remove_series(ns: str, name: str) -> None:
    """Drop every metric series of a deleted pool."""
    series: list[tuple[Any, tuple[str, ...]]] = [
        (DESIRED, ()),
        (CURRENT, ()),
        (READY, ()),
        (ADOPTIONS, ()),
        (DELETES_BEFORE_READY, ()),
        (TIME_TO_READY, ()),
        (CREATES, ("success",)),
        (CREATES, ("error",)),
        *((DELETES, (reason,)) for reason in DELETE_REASONS),
    ]
    for metric, extra in series:
        with contextlib.suppress(KeyError):
            metric.remove(ns, name, *extra)


DELETE_REASONS = ("stale", "stuck", "excess")


__all__ = [
    "ADOPTIONS",
    "CREATES",
    "CURRENT",
    "DELETES",
    "DELETES_BEFORE_READY",
    "DELETE_REASONS",
    "DESIRED",
    "READY",
    "TIME_TO_READY",
    "remove_series",
]
