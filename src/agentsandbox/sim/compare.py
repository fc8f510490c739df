"""Autoscaled pool vs the smallest static pool that reaches the target warm share.

The static size is found by a search over sizes in steps of 1: a static pool's warm share grows
with its size (more Ready sandboxes can only serve more claims warm; with a fixed seed the
trace is the same for every size, only the create -> Ready draws are consumed in a different
order), so a bisection between a size that misses the target and one that reaches it finds the
smallest that reaches it. The search starts from the autoscaled pool's peak ``spec.replicas``
and gallops outwards, so it usually needs 5-8 simulated days.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .engine import Config, Result, simulate


@dataclass
class Comparison:
    autoscaled: Result
    static: Result | None
    static_size: int | None
    target: float
    tried: dict[int, float] = field(default_factory=dict)  # size -> warm share
    search_seconds: float = 0.0

    @property
    def idle_ratio(self) -> float | None:
        if self.static is None or not self.static.idle_seconds:
            return None
        return self.autoscaled.idle_seconds / self.static.idle_seconds

    @property
    def ready_idle_ratio(self) -> float | None:
        if self.static is None or not self.static.ready_idle_seconds:
            return None
        return self.autoscaled.ready_idle_seconds / self.static.ready_idle_seconds


def smallest_static(
    cfg: Config,
    target: float,
    hint: int,
    limit: int = 100_000,
    log: Callable[[str], None] | None = None,
) -> tuple[int | None, Result | None, dict[int, float]]:
    """The smallest static size whose warm share (after the warm-up) reaches ``target``."""
    runs: dict[int, Result] = {}

    def run(n: int) -> bool:
        if n not in runs:
            runs[n] = simulate(dataclasses.replace(cfg, static=n, policy=None))
            if log is not None:
                r = runs[n]
                log(f"  static {n}: warm {r.warm_share:.4f} ({r.runtime:.1f}s)")
        return runs[n].warm_share >= target

    hint = max(1, hint)
    good: int | None = None
    bad = -1  # 0 replicas serves nothing warm
    if run(hint):
        good = hint
        step = max(1, hint // 20)
        while good - step > 0:
            n = good - step
            if run(n):
                good, step = n, step * 2
            else:
                bad = n
                break
    else:
        bad = hint
        step = max(1, hint // 20)
        while good is None:
            n = min(bad + step, limit)
            if run(n):
                good = n
            elif n >= limit:
                break
            else:
                bad, step = n, step * 2
    if good is None:
        return None, None, {n: r.warm_share for n, r in runs.items()}
    while good - bad > 1:
        mid = (good + bad) // 2
        if run(mid):
            good = mid
        else:
            bad = mid
    return good, runs[good], {n: r.warm_share for n, r in sorted(runs.items())}


def compare(
    cfg: Config,
    target: float,
    static_size: int | None = None,
    search: bool = True,
    log: Callable[[str], None] | None = None,
) -> Comparison:
    auto = simulate(dataclasses.replace(cfg, static=None))
    if log is not None:
        log(
            f"  autoscaled: warm {auto.warm_share:.4f}, peak {auto.max_replicas} "
            f"({auto.runtime:.1f}s)"
        )
    if static_size is not None:
        fixed = simulate(dataclasses.replace(cfg, static=static_size, policy=None))
        return Comparison(auto, fixed, static_size, target, {static_size: fixed.warm_share})
    if not search:
        return Comparison(auto, None, None, target)
    started = time.perf_counter()
    size, static, tried = smallest_static(cfg, target, auto.max_replicas, log=log)
    return Comparison(auto, static, size, target, tried, time.perf_counter() - started)
