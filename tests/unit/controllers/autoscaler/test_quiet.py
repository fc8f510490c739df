"""The autoscaler through a silence (quiet.py and the decision): the size held while no claim
comes, how long, what is no silence, and the rate after a silence longer than the window."""

from __future__ import annotations

from dataclasses import replace

from agentsandbox.controllers.autoscaler.plan import (
    ArrivalBins,
    Policy,
    servers_for,
)
from agentsandbox.controllers.autoscaler.quiet import Silence, latest_claim
from agentsandbox.controllers.autoscaler.window import LongWindow
from tests.unit.arrivals import poisson
from tests.unit.controllers.autoscaler.replay import passes
from tests.unit.controllers.autoscaler.test_plan import UNLIMITED

POLICY = UNLIMITED


def drive(
    arrivals: list[float],
    end: float,
    refill: float,
    policy: Policy = POLICY,
    every: float = 15.0,
) -> list[tuple[float, int, str]]:
    """As the controller does it: the window's bins kept as claims come (the occupancy counted
    over the refill time); (time, replicas, message) per pass."""
    return [
        (now, d.replicas, d.message)
        for now, d, _ in passes(arrivals, end, policy, refill=refill, every=every)
    ]


def test_a_silence_holds_the_size_the_claims_before_it_needed() -> None:
    """0.5/s for an hour, then two hours without a claim (90 s refill): the pool keeps at least
    the Erlang-B size of 0.5/s at the target through the silence, and says why. Before the rule
    it shrank to 1 within 20 minutes: the load's return found an empty pool (94.7 % warm on the
    tuning set's quiet-then-burst traces)."""
    refill = 90.0
    log = drive(poisson(0.5, 0, 3600, 21), 3600 + 7200, refill)
    load = 0.5 * (refill + POLICY.refill_overhead)
    need = servers_for(load, POLICY.target_warm_share, 1000)
    silent = [(t, n, m) for t, n, m in log if 3600 + 600 <= t <= 3600 + 7200]
    assert silent and min(n for _, n, _ in silent) >= need, (min(n for _, n, _ in silent), need)
    assert "no claim for" in silent[-1][2]
    # the bet on the return: quiet_scale times that load at quiet_share of the allowance (the
    # rate measured over an hour of Poisson claims: within a few percent of 0.5/s)
    share = 1.0 - (1.0 - POLICY.target_warm_share) * POLICY.quiet_share
    bet = [servers_for(f * POLICY.quiet_scale * load, share, 1000) for f in (0.93, 1.07)]
    assert bet[0] <= min(n for _, n, _ in silent) <= max(n for _, n, _ in silent) <= bet[1], bet


def test_a_silence_is_held_at_most_quiet_hold() -> None:
    """Past quiet_hold seconds after the last claim the pool shrinks as before the rule."""
    policy = replace(POLICY, quiet_hold=3600.0)
    log = drive(poisson(0.5, 0, 3600, 22), 3600 + 3600 + 1800, 90.0, policy)
    late = [n for t, n, _ in log if t >= 3600 + 3600 + 2 * policy.scale_down_window + 300]
    assert late and max(late) <= 2, late


def test_a_fast_refill_holds_nothing() -> None:
    """With a 2 s refill a pool at its minimum serves about one claim cold as 0.5/s returns:
    no hold (the silence would cost hours of idle sandboxes for it)."""
    with_rule = drive(poisson(0.5, 0, 3600, 23), 3600 + 3600, 2.0)
    without = drive(poisson(0.5, 0, 3600, 23), 3600 + 3600, 2.0, replace(POLICY, quiet_hold=0.0))
    assert [n for _, n, _ in with_rule] == [n for _, n, _ in without]


def test_a_step_down_is_no_silence() -> None:
    """A step from 1/s to 0.2/s (x5 down, 90 s refill): its lulls are short and it goes on, so
    every pass decides as without the rule."""
    arrivals = poisson(1.0, 0, 3600, 24) + poisson(0.2, 3600, 9000, 25)
    with_rule = drive(arrivals, 9000, 90.0)
    without = drive(arrivals, 9000, 90.0, replace(POLICY, quiet_hold=0.0))
    assert [n for _, n, _ in with_rule] == [n for _, n, _ in without]


def _long(rate: float, seconds: float) -> LongWindow:
    return LongWindow(span=seconds, claims=rate * seconds)


def test_what_counts_as_a_silence() -> None:
    """At least scale_down_window without a claim, and the long rate before it would have
    brought MIN_EVIDENCE (20) claims in that time; never from fewer than 20 claims seen."""
    bins = ArrivalBins(10.0)
    bins.add(1005.0, 0.05)  # read from the bins: its bin's end, 1010
    busy = _long(0.5, 3600)
    silence = Silence()
    assert silence.observe(bins, [], 1010.0, busy, POLICY) is None
    assert silence.observe(bins, [], 1010.0 + POLICY.scale_down_window - 1, busy, POLICY) is None
    assert silence.observe(bins, [], 1010.0 + POLICY.scale_down_window, busy, POLICY) == 0.5
    slow = Silence()  # 0.05/s: 300 s without a claim is 15 expected, chance e^-15, but < 20
    slow.observe(bins, [], 1010.0, _long(0.05, 3600), POLICY)
    assert slow.observe(bins, [], 1310.0, busy, POLICY) is None
    assert slow.observe(bins, [], 1410.0, busy, POLICY) == 0.05
    few = Silence()  # 10 claims seen in all
    few.observe(bins, [], 1010.0, _long(0.5, 20), POLICY)
    assert few.observe(bins, [], 2010.0, busy, POLICY) is None
    assert silence.observe(bins, [], 1010.0 + POLICY.quiet_hold + 1, busy, POLICY) is None


def test_the_latest_claim_is_read_from_the_bins_without_arrivals() -> None:
    bins = ArrivalBins(10.0)
    assert latest_claim(bins, [], 50.0) is None
    bins.add(123.0, 0.05)
    assert latest_claim(bins, [], 500.0) == 130.0  # the end of its bin
    assert latest_claim(bins, [], 125.0) == 125.0
    assert latest_claim(bins, [124.5], 500.0) == 124.5


def test_a_window_emptied_by_a_silence_still_covers_its_time() -> None:
    """After a silence longer than the window, the rate over the window counts its empty
    seconds: the first claims back are not a rate of their own bin. Before the fix the window
    began at the first new claim, so 100 claims within 10 s after two silent hours read as a
    stable 10/s (a pool of 1000 asked for, where the burst has 100 claims)."""
    bins = ArrivalBins(10.0)
    for t in poisson(0.5, 0, 3600, 26):
        bins.add(t, 0.05)
    bins.trim(3600 + 7200, 1800.0)
    bins.add(3600 + 7200 + 5, 0.05)
    claims, _, _, start = bins.total(3600 + 7200 + 5 - 1800.0)
    assert claims == 1
    assert start == 3600 + 7200 + 5 - 1805.0


def test_a_burst_after_a_silence_longer_than_the_window_is_a_panic() -> None:
    """The same burst through the decision: it panics (a rise over the window's rate), and its
    load is capped by the claims of the last refill time."""
    burst = [3600 + 7200 + i / 10 for i in range(100)]
    log = drive(poisson(0.5, 0, 3600, 27) + burst, 3600 + 7200 + 60, 90.0)
    after = [(t, n, m) for t, n, m in log if t >= 3600 + 7200 + 15]
    assert after and "panicking" in after[0][2], after[0][2]
    assert max(n for _, n, _ in after) <= 2 * 100, max(n for _, n, _ in after)
