"""Warm-pool autoscaler: the rate limits of its ``spec.behavior``, as HorizontalPodAutoscaler's
``behavior`` has them (pure)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

PODS = "Pods"
PERCENT = "Percent"
SELECT_MAX = "Max"
SELECT_MIN = "Min"
SELECT_DISABLED = "Disabled"


@dataclass(frozen=True)
class Limit:
    """At most ``value`` sandboxes (``Pods``) or percent of the size at the period's start
    (``Percent``) added or removed within ``period`` seconds (HPA's ``HPAScalingPolicy``)."""

    kind: str
    value: int
    period: float


@dataclass(frozen=True)
class Rules:
    """A direction's limits; ``select``: ``Max`` (the limit allowing the larger change), ``Min``
    or ``Disabled`` (no change in this direction)."""

    limits: tuple[Limit, ...] = ()
    select: str = SELECT_MAX


#: HPA's defaults: up by 100 % or 4 sandboxes per 15 s, whichever is more; down by 100 % per 15 s
DEFAULT_SCALE_UP = Rules((Limit(PERCENT, 100, 15.0), Limit(PODS, 4, 15.0)))
DEFAULT_SCALE_DOWN = Rules((Limit(PERCENT, 100, 15.0),))


def limit(
    rules: Rules, up: bool, current: int, changes: Sequence[tuple[float, int]], now: float
) -> int | None:
    """HPA's rate limit: the highest (``up``) or lowest size the direction's rules allow now;
    None: no limit."""
    if rules.select == SELECT_DISABLED:
        return current
    found: list[int] = []
    for lim in rules.limits:
        moved = sum(d for t, d in changes if t > now - lim.period and (d > 0) == up)
        start = current - moved  # the size at the period's start, this direction's moves undone
        if lim.kind == PERCENT:
            step = (
                math.ceil(start * lim.value / 100.0)
                if up
                else math.floor(start * lim.value / 100.0)
            )
        else:
            step = lim.value
        found.append(start + step if up else start - step)
    if not found:
        return None
    pick = max if (rules.select == SELECT_MAX) == up else min
    return pick(found)
