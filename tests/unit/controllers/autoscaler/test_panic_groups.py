"""The panic test on a grouped load (plan.py, window.significantly_above_groups): a clump of
chance of a load's largest groups is no rise; a rise of its rate still is."""

from __future__ import annotations

import math

from agentsandbox.controllers.autoscaler.plan import Policy
from agentsandbox.controllers.autoscaler.window import (
    significantly_above,
    significantly_above_groups,
)
from tests.unit.arrivals import poisson
from tests.unit.controllers.autoscaler.replay import passes

POLICY = Policy(min_replicas=1, max_replicas=1000, target_warm_share=0.99)


def test_a_few_large_groups_at_once_are_chance_where_under_one_is_due() -> None:
    """0.83 claims/s plus a group of 32 every 204 s: 66 claims due in the panic window, an
    index of dispersion of about 6. Four groups at once (200 claims) pass the normal reading
    at four standard deviations; with a third of a group due, they are chance."""
    assert significantly_above(200, 66, 5.9, 4.0)
    assert not significantly_above_groups(200, 66, 5.9, 32, 4.0)
    assert significantly_above_groups(400, 66, 5.9, 32, 4.0)  # a rise of the rate still is


def test_without_groups_the_panic_test_reads_as_before() -> None:
    for count in (40, 58, 70, 100):
        for expected in (10.0, 30.0, 60.0):
            assert significantly_above_groups(count, expected, 1.0, 1, 4.0) == significantly_above(
                count, expected, 1.0, 4.0
            )


def _grouped(start: float, end: float, base: float, groups: float, seed: int) -> list[float]:
    out = poisson(base, start, end, seed)
    for t in poisson(groups, start, end, seed + 1):
        out += [t] * 32
    return out


def _panics(arrivals: list[float], until: float) -> list[float]:
    """Decide every 5 s over ``arrivals`` (every claim served warm); the times of the passes
    that panicked."""
    return [
        now
        for now, _, memory in passes(arrivals, until, POLICY, cold_from=math.inf)
        if memory.last_panic == now
    ]


def test_a_clump_of_groups_on_a_steady_grouped_load_does_not_panic() -> None:
    """Round 20's held-out grouped-32 row: such a clump panicked the pool to twice the static
    pool's size, and the scale-down window stretched by the cold claims held it for an hour."""
    steady = _grouped(0, 7800, 0.83, 0.0049, 11)
    clump = [7205.0 + 10.0 * k for k in range(4) for _ in range(32)]
    panics = _panics(steady + clump, 7300)
    assert not [t for t in panics if t >= 7200]


def test_a_step_of_a_grouped_load_still_panics() -> None:
    arrivals = _grouped(0, 7200, 0.83, 0.0049, 11) + _grouped(7200, 7500, 4.0, 0.025, 21)
    assert [t for t in _panics(arrivals, 7500) if t >= 7200]
