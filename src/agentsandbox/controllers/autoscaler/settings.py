"""The SandboxWarmPoolAutoscaler controller's settings (its flags) and the plan's ``Policy`` an
autoscaler's spec and those settings make."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentsandbox.controllers.autoscaler.behavior import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    PERCENT,
    PODS,
    SELECT_DISABLED,
    SELECT_MAX,
    SELECT_MIN,
    Limit,
    Rules,
)
from agentsandbox.controllers.autoscaler.policy import Policy

DEFAULT_SCALE_DOWN_WINDOW = 300.0


@dataclass(frozen=True)
class Settings:
    """Controller settings. The defaults are the flags' (``register_controllers`` builds these
    from them): ``sync_period`` is ``--warm-pool-autoscaler-sync-period``, ``rate_window``
    ``--warm-pool-autoscaler-rate-window`` and ``burst_bin`` ``--warm-pool-autoscaler-burst-bin``;
    ``min_interval`` is not a flag. Tests shorten them in-process."""

    sync_period: float = 5.0  # seconds between passes when nothing happens
    min_interval: float = 1.0  # events within this long of a pass are served by one later pass
    rate_window: float = 1800.0  # seconds of arrivals and refill samples kept (Policy.rate_window)
    burst_bin: float | None = 10.0  # Policy.bin_width (None: Policy's default, also 10 s)
    # seconds a pool slot stays busy beyond a member's create -> Ready, which the samples do not
    # see: the warm pool's replenish delay (it waits that long after a member leaves before
    # creating the replacement) and one create interval of its refill rate limit
    # (``slot_extra_of``); added to every refill sample the sizing reads
    slot_extra: float = 0.0


def slot_extra_of(replenish_delay: float, max_refill_rate: float) -> float:
    """The seconds ``--sandbox-warm-pool-replenish-delay`` and
    ``--sandbox-warm-pool-max-refill-rate`` add to a slot: the delay whole (a replacement is
    created that long after its member left), and one create interval of the rate limit (at a
    steady rate under it a replacement waits at most that long for its token; a burst's queue
    of replacements is not modelled: the burst sizing holds a burst's worth of members)."""
    extra = max(0.0, replenish_delay)
    if max_refill_rate > 0:
        extra += 1.0 / max_refill_rate
    return extra


def rules_of(behavior: Any, default: Rules) -> Rules:
    """A direction of ``spec.behavior`` (HPA's shape) as :class:`Rules`; absent: the default."""
    if not isinstance(behavior, Mapping):
        return default
    policies = behavior.get("policies")
    limits = default.limits
    if isinstance(policies, list) and policies:
        limits = tuple(
            Limit(str(p.get("type")), int(p.get("value", 0)), float(p.get("periodSeconds", 15)))
            for p in policies
            if isinstance(p, Mapping) and p.get("type") in (PODS, PERCENT)
        )
    select = behavior.get("selectPolicy")
    return Rules(
        limits, str(select) if select in (SELECT_MAX, SELECT_MIN, SELECT_DISABLED) else SELECT_MAX
    )


def policy_of(spec: Mapping[str, Any], settings: Settings) -> Policy:
    window = spec.get("scaleDownStabilizationSeconds")
    behavior = spec.get("behavior") or {}
    extra: dict[str, Any] = {
        "rate_window": settings.rate_window,
        "stable_window": settings.rate_window,
    }
    if settings.burst_bin is not None:
        extra["bin_width"] = settings.burst_bin
    return Policy(
        min_replicas=int(spec.get("minReplicas", 1)),
        max_replicas=int(spec.get("maxReplicas", 0)),
        target_warm_share=float(spec.get("targetWarmShare", 0.99)),
        scale_down_window=float(window) if window is not None else DEFAULT_SCALE_DOWN_WINDOW,
        scale_up=rules_of(behavior.get("scaleUp"), DEFAULT_SCALE_UP),
        scale_down=rules_of(behavior.get("scaleDown"), DEFAULT_SCALE_DOWN),
        **extra,
    )
