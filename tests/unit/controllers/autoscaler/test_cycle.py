"""The autoscaler's bursts on a schedule (cycle.py and the decision): the schedule learnt from the
panics' rises, the size between bursts, the size as a burst is due, and what breaks the schedule."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

from agentsandbox.controllers.autoscaler.cycle import (
    Cycle,
    Rise,
    base_rate,
    burst_floor,
    cycle_of,
    served_cold,
    spacing_of,
)
from agentsandbox.controllers.autoscaler.plan import (
    ArrivalBins,
    Decision,
    Memory,
    Observation,
    Policy,
    decide,
    occupancy_span,
    servers_for,
)
from tests.unit.arrivals import poisson
from tests.unit.controllers.autoscaler.test_plan import UNLIMITED

POLICY = UNLIMITED
RISES, TOLERANCE, LEAST = POLICY.cycle_rises, POLICY.cycle_tolerance, 2 * POLICY.bin_width


def fit(starts: list[float]) -> Cycle | None:
    return cycle_of(starts, RISES, TOLERANCE, LEAST)


def scheduled(
    period: float, jitter: float, count: int, seed: int, start: float = 600.0
) -> list[float]:
    rng = random.Random(seed)
    return [start + k * period + rng.uniform(-jitter, jitter) for k in range(count)]


def bursts(starts: list[float], size: int, spread: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [s + rng.uniform(0, spread) for s in starts for _ in range(size)]


# ------------------------------------------------------------------------------- the schedule
def test_a_schedule_is_learnt_from_rises_that_fit_a_period() -> None:
    """Rises every 660 s within 40 s (the bursts' start within 40 s of their mark, as the
    evaluation's traces have them): from the policy's number of rises on, the period within 2 %,
    a spread covering the jitter, and the next mark within the jitter of the next rise."""
    for seed in range(20):
        starts = scheduled(660.0, 40.0, RISES + 1, seed)
        assert fit(starts[: RISES - 1]) is None
        cycle = fit(starts[:RISES])
        assert cycle is not None
        assert abs(cycle.period - 660.0) <= 0.02 * 660.0
        assert cycle.spread >= 33.0  # a twentieth of the period at least
        assert abs(cycle.next_mark(starts[RISES - 1]) - starts[RISES]) <= 2 * 40.0 + 14.0


def test_bursts_at_random_gaps_have_no_schedule() -> None:
    """Gaps uniform between 5 and 20 minutes (a schedule found there would leave the pool small
    as a burst comes): over 1000 runs of twelve rises (as many as the decision keeps), some
    latest run of them fits a period in under 1 % (0.4 %; about 5 % with five rises, which is why
    the policy wants seven)."""
    fitted = 0
    for seed in range(1000):
        rng = random.Random(seed)
        starts = [0.0]
        for _ in range(11):
            starts.append(starts[-1] + rng.uniform(300.0, 1200.0))
        fitted += fit(starts) is not None
    assert fitted < 10, fitted


def test_a_rise_off_the_schedule_breaks_it_until_enough_fit_again() -> None:
    starts = scheduled(600.0, 20.0, RISES, 1)
    assert fit(starts) is not None
    early = [*starts, starts[-1] + 250.0]  # a burst 350 s before its mark
    assert fit(early) is None
    again = early + [early[-1] + 600.0 * k for k in range(1, RISES - 1)]
    assert fit(again) is None
    # as many rises on the schedule after the odd one as the policy wants: learnt again
    again.append(again[-1] + 600.0)
    cycle = fit(again)
    assert cycle is not None and cycle.rises == RISES


def test_the_claims_between_bursts_leave_the_bursts_out() -> None:
    bins = ArrivalBins(10.0)
    base = poisson(0.3, 0, 3600, 7)
    starts = [600.0, 1800.0, 3000.0]
    for t in sorted(base + bursts(starts, 80, 15.0, 3)):
        bins.add(t, 0.05)
    rises = [Rise(s + 2.0, s + 25.0) for s in starts]
    rate = base_rate(bins, 0.0, 3600.0, rises, 20.0)
    assert 0.25 <= rate <= 0.35, rate
    assert sum(bins.claims) / 3600.0 > 0.35  # with the bursts


def test_the_size_a_burst_needs_counts_the_bursts_claims_only() -> None:
    """Bursts of 80 claims within 15 s with a 90 s refill: the static pool that serves the
    bursts' claims at 99 % holds about all of a burst, whatever the claims between them."""
    bins = ArrivalBins(10.0)
    bins.span = 90.0
    starts = [600.0, 1800.0, 3000.0]
    for t in sorted(poisson(0.3, 0, 3600, 7) + bursts(starts, 80, 15.0, 3)):
        bins.add(t, 0.05)
    rises = [Rise(s + 2.0, s + 25.0) for s in starts]
    floor = burst_floor(bins, 0.0, 3600.0, rises, 20.0, 0.01)
    assert 80 <= floor <= 80 + 0.3 * 90 * 2, floor
    assert burst_floor(bins, 0.0, 3600.0, [], 20.0, 0.01) == 0


# ------------------------------------------------------------------------------ the decision
def replay(
    arrivals: list[float], end: float, refill: float, policy: Policy = POLICY, served: bool = False
) -> tuple[list[tuple[float, Decision]], Memory]:
    """The decision every 5 s as the controller runs it (bins kept as claims come, occupancy
    counted over the refill time); ``served``: every claim reported warm."""
    memory = Memory()
    bins = ArrivalBins(policy.bin_width)
    pending = sorted(arrivals)
    out: list[tuple[float, Decision]] = []
    current, now, i = 1, 0.0, 0
    while now <= end:
        while i < len(pending) and pending[i] <= now:
            bins.add(pending[i], policy.group_gap)
            i += 1
        window = sum(1 for a in pending[:i] if a > now - policy.rate_window)
        obs = Observation(
            now,
            (),
            [refill] * 50,
            current,
            bins=bins,
            served=(window, 0) if served else None,
        )
        d = decide(obs, policy, memory)
        bins.span = occupancy_span(policy, memory)
        out.append((now, d))
        current = d.replicas
        now += 5.0
    return out, memory


def size_at(log: list[tuple[float, Decision]], t: float) -> int:
    return [d.replicas for when, d in log if when <= t][-1]


def test_between_scheduled_bursts_the_pool_holds_what_the_claims_between_them_need() -> None:
    """0.3 claims/s plus 80 claims within 15 s every 10 minutes (± 30 s), a 90 s refill. Once the
    schedule is learnt (seven bursts): as each burst comes the pool holds at least a burst's
    claims, and between bursts it goes down to about the Erlang-B size of the claims between
    them. Without a schedule the pool held the bursts' size all the time (never below 80
    after the first bursts)."""
    for seed in range(1, 4):
        starts = scheduled(600.0, 30.0, 17, seed)
        arrivals = poisson(0.3, 0, 10_800, seed) + bursts(starts, 80, 15.0, seed)
        log, memory = replay(arrivals, 10_800.0, 90.0)
        assert memory.bursts.cycle is not None and abs(memory.bursts.cycle.period - 600.0) < 15.0
        base = servers_for(0.3 * (90.0 + POLICY.refill_overhead), 0.99, 1000)
        late = [s for s in starts if s > 5400.0]
        for s in late:
            assert size_at(log, s) >= 80, (seed, s, size_at(log, s))
        between = [d.replicas for t, d in log if t > 4500.0 and "between bursts until" in d.message]
        assert between, seed
        assert max(between) <= base + 6, (seed, max(between), base)
        # most of the time between bursts is spent at that size
        quiet = sum(1 for t, d in log if t > 5400.0 and d.replicas <= base + 6)
        assert quiet / sum(1 for t, _ in log if t > 5400.0) >= 0.3


def test_between_bursts_at_random_gaps_the_pool_holds_what_the_claims_between_them_need() -> None:
    """Gaps uniform between 10 and 20 minutes, no schedule: from five gaps on, after each burst
    the pool holds what the claims between bursts need (at a tenth of the allowance) until the
    shortest gap, less the gaps' spread over their count, nears its end; as each later burst
    comes it holds at least a burst's claims. Before, without a schedule, no pass sized for the
    claims between bursts."""
    for seed in range(1, 4):
        rng = random.Random(seed)
        starts = [600.0]
        while starts[-1] < 12_000:
            starts.append(starts[-1] + rng.uniform(600.0, 1200.0))
        arrivals = poisson(0.3, 0, 12_600, seed) + bursts(starts, 80, 15.0, seed)
        log, memory = replay(arrivals, 12_600.0, 90.0)
        assert memory.bursts.cycle is None and memory.bursts.spacing is not None
        base = servers_for(0.3 * (90.0 + POLICY.refill_overhead), 0.999, 1000)
        between = [d.replicas for t, d in log if "between bursts until" in d.message]
        assert between, seed
        assert max(between) <= base + 6, (seed, max(between), base)
        for s in [s for s in starts if s > 7200.0]:
            assert size_at(log, s) >= 80, (seed, s, size_at(log, s))


def test_the_spacing_of_bursts_is_the_shortest_gap_less_the_spread_over_the_count() -> None:
    """Gaps 500 to 900 s, five of them: 500 - 400 / 4. Fewer than the policy's gaps: none."""
    starts = [0.0, 500.0, 1300.0, 1900.0, 2600.0, 3500.0]
    spacing = spacing_of(starts, POLICY.gap_rises)
    assert spacing is not None and spacing.period == 400.0 and spacing.rises == 5
    assert spacing.next_mark(3500.0) == 3900.0
    assert spacing_of(starts[:-1], POLICY.gap_rises) is None
    assert spacing_of([0.0, 10.0, 20.0, 30.0, 40.0, 1000.0], POLICY.gap_rises) is None


def test_the_next_gap_rarely_falls_short_of_the_spacing() -> None:
    """Gaps uniform between 400 and 1240 s (the shape of the evaluation's irregular bursts):
    with n gaps seen, the next is shorter than the shortest of them one time in n + 1 whatever
    their law (17 % with the policy's five gaps); less the spread over n - 1, 7 % here. That
    much of the time the next burst comes before the pool is armed again."""
    short = shortest = 0
    runs = 4000
    for seed in range(runs):
        rng = random.Random(seed)
        starts = [0.0]
        for _ in range(POLICY.gap_rises):
            starts.append(starts[-1] + rng.uniform(400.0, 1240.0))
        spacing = spacing_of(starts, POLICY.gap_rises)
        nxt = rng.uniform(400.0, 1240.0)
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        shortest += nxt < min(gaps)
        short += spacing is not None and nxt < spacing.period
    assert 0.05 < short / runs < 0.09, short / runs
    assert 0.15 < shortest / runs < 0.19, shortest / runs


def test_a_static_pool_serves_cold_the_claims_beyond_its_free_slots() -> None:
    """Six slots, a refill of 100 s: ten claims at once find six; three more at 50 s find none
    (a cold claim frees no slot); one at 101 s finds one again. Claims before ``counted`` take
    slots but are not counted."""
    times = [0.1 * k for k in range(10)] + [50.0, 50.5, 51.0, 101.0]
    assert served_cold(times, 0.0, 6, 100.0) == 4 + 3
    assert served_cold(times, 10.0, 6, 100.0) == 3
    assert served_cold(times, 0.0, 14, 100.0) == 0
    assert served_cold([], 0.0, 1, 100.0) == 0


def test_bursts_at_random_gaps_are_remembered_beyond_the_occupancy_window() -> None:
    """Bursts of 40 claims 400 to 1400 s apart (no schedule), every third of 110: the
    occupancy's half hour forgot a large burst, and the pool was 62 to 72 as the next one came.
    The bursts of the long horizon are remembered, counted as a static pool would have served
    them: as each later large burst comes the pool holds more than its claims (126 to 136), and
    on average less than before (108 to 119, against 121 to 128: the occupancy held each burst's
    size for half an hour after it)."""
    for seed in range(1, 5):
        rng = random.Random(seed)
        starts = [600.0]
        while starts[-1] < 14_000:
            starts.append(starts[-1] + rng.uniform(400.0, 1400.0))
        big = set(range(0, len(starts), 3))
        claims = [
            s + rng.uniform(0, 15.0)
            for k, s in enumerate(starts)
            for _ in range(110 if k in big else 40)
        ]
        log, memory = replay(poisson(0.3, 0, 14_400, seed) + claims, 14_400.0, 90.0)
        assert memory.bursts.cycle is None
        assert sum(1 for r in memory.bursts.rises if r.claims) >= POLICY.memory_rises
        late = [s for k, s in enumerate(starts) if k in big and 7200.0 < s < 14_000]
        assert late, seed
        for s in late:
            assert size_at(log, s) >= 110, (seed, s, size_at(log, s))
        sizes = [d.replicas for t, d in log if t > 7200.0]
        assert sum(sizes) / len(sizes) <= 120, (seed, sum(sizes) / len(sizes))


def test_a_burst_off_the_schedule_is_answered_and_ends_the_schedule() -> None:
    """A burst 250 s early: the panic sizes up at once, as without a schedule, and no pass sizes
    for the claims between bursts on a schedule until seven bursts fit a period again (the
    spacing of the rises may meanwhile, from their shortest gap)."""
    starts = scheduled(600.0, 20.0, 9, 5)
    odd = starts[-1] + 350.0
    later = [odd + 600.0 * k for k in range(1, 9)]
    arrivals = poisson(0.3, 0, later[-1] + 300, 5) + bursts([*starts, odd, *later], 80, 15.0, 5)
    log, _ = replay(arrivals, later[-1] + 300, 90.0)
    assert any("between bursts until" in d.message for t, d in log if t < odd)
    assert size_at(log, odd + 20.0) >= 80
    resumed = [
        t
        for t, d in log
        if t > odd + 30 and "bursts every" in d.message and "between bursts until" in d.message
    ]
    assert resumed and resumed[0] > later[RISES - 2], (resumed[:1], later)


def test_no_size_between_bursts_while_the_realised_share_misses() -> None:
    """The claim controller reports every claim of the window cold: the schedule may be wrong,
    so the pool is sized as without one."""
    starts = scheduled(600.0, 30.0, 14, 2)
    arrivals = poisson(0.3, 0, 9000, 2) + bursts(starts, 80, 15.0, 2)
    memory = Memory()
    bins = ArrivalBins(POLICY.bin_width)
    pending = sorted(arrivals)
    current, now, i = 1, 0.0, 0
    messages = []
    while now <= 9000:
        while i < len(pending) and pending[i] <= now:
            bins.add(pending[i], POLICY.group_gap)
            i += 1
        window = sum(1 for a in pending[:i] if a > now - POLICY.rate_window)
        obs = Observation(now, (), [90.0] * 50, current, bins=bins, served=(0, window))
        d = decide(obs, POLICY, memory)
        bins.span = occupancy_span(POLICY, memory)
        messages.append(d.message)
        current = d.replicas
        now += 5.0
    assert memory.bursts.cycle is not None
    assert not any("between bursts until" in m for m in messages)


def test_a_panic_raised_again_within_its_window_is_the_same_burst() -> None:
    """One burst a panic settles on and raises again while its claims are in the panic window
    counts once: six bursts, six rises."""
    starts = scheduled(600.0, 20.0, 6, 9)
    arrivals = poisson(0.3, 0, 4000, 9) + bursts(starts, 80, 15.0, 9)
    _, memory = replay(arrivals, 4000.0, 90.0)
    assert len(memory.bursts.rises) == 6, [round(r.start) for r in memory.bursts.rises]


def test_without_a_schedule_the_pool_holds_a_bursts_size_between_bursts() -> None:
    """The same bursts with no schedule learnt (a policy wanting more rises than there are):
    the pool never goes down to the size of the claims between bursts, which is what the
    schedule's test above measures."""
    never = replace(POLICY, cycle_rises=1000, gap_rises=1000)
    starts = scheduled(600.0, 30.0, 17, 1)
    arrivals = poisson(0.3, 0, 10_800, 1) + bursts(starts, 80, 15.0, 1)
    log, memory = replay(arrivals, 10_800.0, 90.0, never)
    assert memory.bursts.cycle is None
    base = servers_for(0.3 * (90.0 + POLICY.refill_overhead), 0.99, 1000)
    late = [d.replicas for t, d in log if t > 5400.0]
    assert min(late) > base + 6, (min(late), base)


def test_a_restart_keeps_the_schedule_of_bursts() -> None:
    """The schedule is learnt from seven rises; before, a restart forgot them, and the new
    process held a burst's size between bursts for seven more bursts (the restart between two
    bursts of round 10's evaluation set: 1.08 x the static pool's idle time). The rises are
    kept with the estimates, and the first pass of the new process has the schedule back."""
    starts = scheduled(600.0, 30.0, 12, 5)
    arrivals = poisson(0.3, 0, 7200, 5) + bursts(starts, 80, 15.0, 5)
    log, memory = replay(arrivals, 7000.0, 90.0)
    assert memory.bursts.cycle is not None and memory.window is not None
    kept = memory.estimates()
    fresh = Memory()
    fresh.restore(memory.window.copy(), 7005.0, log[-1][1].replicas, kept)
    obs = Observation(7005.0, (), [90.0] * 50, log[-1][1].replicas, bins=memory.window.copy())
    d = decide(obs, POLICY, fresh)
    assert fresh.bursts.cycle is not None
    assert abs(fresh.bursts.cycle.period - memory.bursts.cycle.period) < 1.0
    assert "bursts every" in d.message
    # without the rises (a status written before they were kept), no schedule
    old = Memory()
    old.restore(memory.window.copy(), 7005.0, log[-1][1].replicas, {**kept, "burstRises": None})
    decide(obs, POLICY, old)
    assert old.bursts.cycle is None
