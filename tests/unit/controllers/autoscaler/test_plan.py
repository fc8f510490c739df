"""The autoscaler's sizing decision (pure): Erlang-B, the sizing rule, stabilisation, panic,
grouped arrivals, rate limits, restarts, cost."""

from __future__ import annotations

import itertools
import math
import random
import re
import statistics

import pytest

from agentsandbox.controllers.autoscaler.plan import (
    REASON_AT_MAXIMUM,
    REASON_AT_MINIMUM,
    REASON_HOLDING,
    REASON_NO_DATA,
    REASON_PANICKING,
    REASON_SCALED_DOWN,
    REASON_SCALED_UP,
    ArrivalBins,
    Decision,
    Limit,
    Memory,
    Observation,
    Policy,
    Rules,
    decide,
    erlang_b,
    occupancy_span,
    servers_for,
)
from tests.unit.arrivals import poisson
from tests.unit.controllers.autoscaler.replay import passes

POLICY = Policy(
    min_replicas=1,
    max_replicas=1000,
    target_warm_share=0.99,
    scale_down_window=300,
    scale_up=Rules((Limit("Percent", 100000, 15.0),)),
)


def even(rate: float, now: float, window: float = 600.0) -> list[float]:
    """Claims evenly spaced at ``rate``/s over the window before ``now`` (no bursts)."""
    if rate <= 0:
        return []
    n = int(rate * window)
    return [now - window + (i + 0.5) / rate for i in range(n)]


def once(
    rate: float, refill: float, current: int = 1, policy: Policy = POLICY, now: float = 10_000.0
) -> Decision:
    return decide(Observation(now, even(rate, now), [refill] * 50, current), policy, Memory())


# ----------------------------------------------------------------------------------- Erlang-B
@pytest.mark.parametrize(
    ("servers", "load", "expected"),
    [
        (0, 3.0, 1.0),
        (1, 1.0, 0.5),
        (2, 1.0, 0.2),
        (3, 2.0, 4 / 19),  # (8/6) / (1 + 2 + 2 + 8/6)
        # the classic table: the load N servers carry at 1 % blocking
        (10, 4.461, 0.01),
        (20, 12.031, 0.01),
        (50, 37.901, 0.01),
        (100, 84.064, 0.01),
        # and at 0.1 %
        (10, 3.092, 0.001),
        (100, 75.24, 0.001),
    ],
)
def test_erlang_b_known_values(servers: int, load: float, expected: float) -> None:
    assert erlang_b(servers, load) == pytest.approx(expected, rel=2e-3, abs=1e-9)


def test_erlang_b_is_stable_for_large_pools() -> None:
    b = erlang_b(5000, 4900.0)
    assert 0.0 < b < 0.05
    assert erlang_b(5000, 0.0) == 0.0
    assert erlang_b(3, 1e9) == pytest.approx(1.0, abs=1e-6)


def test_erlang_b_rejects_negative_input() -> None:
    with pytest.raises(ValueError):
        erlang_b(-1, 1.0)
    with pytest.raises(ValueError):
        erlang_b(1, -1.0)


def test_servers_for_is_the_smallest_reaching_the_target() -> None:
    for load in (0.05, 0.5, 4.461, 37.0, 450.0):
        n = servers_for(load, 0.99, 10_000)
        assert 1 - erlang_b(n, load) >= 0.99
        assert 1 - erlang_b(n - 1, load) < 0.99
    assert servers_for(0.0, 0.99, 10) == 0
    assert servers_for(450.0, 0.99, 10) == 11  # above the cap: cap + 1


# ----------------------------------------------------------------------------------- sizing
def test_sized_by_erlang_b_from_rate_and_mean_refill() -> None:
    d = once(rate=2.0, refill=30.0)
    load = 2.0 * (30.0 + POLICY.refill_overhead)
    assert d.recommended == servers_for(load, 0.99, 1000)
    assert d.replicas == d.recommended
    assert d.arrival_rate == pytest.approx(2.0, rel=0.01)
    assert d.refill_time == pytest.approx(30.0 + POLICY.refill_overhead)
    assert d.predicted_warm_share >= 0.99
    assert d.reason == REASON_SCALED_UP
    assert "offered load" in d.message and "/s" in d.message


def test_monotone_in_rate() -> None:
    sizes = [once(rate, 20.0).replicas for rate in (0.05, 0.1, 0.3, 1, 2, 3, 5, 8, 13)]
    assert sizes == sorted(sizes)
    assert sizes[-1] > sizes[0]


def test_monotone_in_refill_time() -> None:
    sizes = [once(1.0, refill).replicas for refill in (0.1, 0.5, 2, 10, 30, 90, 180)]
    assert sizes == sorted(sizes)
    assert sizes[-1] > sizes[0]


def test_bounded_by_min_and_max() -> None:
    small = Policy(
        min_replicas=3, max_replicas=20, target_warm_share=0.99, scale_up=POLICY.scale_up
    )
    low = once(0.001, 0.1, current=3, policy=small)
    assert low.replicas == 3
    assert low.reason == REASON_AT_MINIMUM
    none = once(0.0, 10.0, current=3, policy=small)
    assert none.replicas == 3 and none.reason == REASON_AT_MINIMUM
    high = once(50.0, 90.0, current=3, policy=small)
    assert high.replicas == 20
    assert high.reason == REASON_SCALED_UP
    again = once(50.0, 90.0, current=20, policy=small)
    assert again.replicas == 20 and again.reason == REASON_AT_MAXIMUM


def test_no_data_keeps_current_within_bounds() -> None:
    small = Policy(min_replicas=3, max_replicas=20, target_warm_share=0.99)
    for current, kept in ((7, 7), (50, 20), (0, 3)):
        d = decide(Observation(100.0, even(5.0, 100.0), [], current), small, Memory())
        assert (d.replicas, d.reason) == (kept, REASON_NO_DATA)


def test_claims_with_no_refill_time_at_zero_replicas_bootstrap_one_sandbox() -> None:
    """Autoscaler review finding 4: with minReplicas 0, a pool at 0 never creates, so never
    gives a refill sample; claims arriving with none measured scale it to max(minReplicas, 1)
    so that one can be measured, every pass until one is, and say so."""
    zero = Policy(min_replicas=0, max_replicas=20, target_warm_share=0.99)
    memory = Memory()
    for now in range(600, 3600, 15):  # 2 claims/s for 50 minutes, no refill sample
        d = decide(Observation(float(now), even(2.0, float(now)), [], 0), zero, memory)
        assert d.replicas == 1
        assert d.reason == "Bootstrap"
        assert "bootstrap" in d.message and "no refill time" in d.message
    # no claims: nothing to bootstrap for
    idle = decide(Observation(3600.0, [], [], 0), zero, Memory())
    assert (idle.replicas, idle.reason) == (0, REASON_NO_DATA)
    # a pool already above 0 is kept as it is (it refills, so it will be measured)
    kept = decide(Observation(3600.0, even(2.0, 3600.0), [], 4), zero, Memory())
    assert (kept.replicas, kept.reason) == (4, REASON_NO_DATA)


def test_refill_time_is_remembered_when_samples_run_out() -> None:
    memory = Memory()
    first = decide(Observation(1000.0, even(1.0, 1000.0), [10.0] * 20, 1), POLICY, memory)
    later = decide(Observation(1015.0, even(1.0, 1015.0), [], first.replicas), POLICY, memory)
    assert later.reason != REASON_NO_DATA
    assert later.refill_time == pytest.approx(first.refill_time)


UNLIMITED = POLICY


def run(
    arrivals: list[float],
    start: float,
    end: float,
    refill: float,
    policy: Policy = UNLIMITED,
    memory: Memory | None = None,
    current: int = 1,
    every: float = 15.0,
) -> list[tuple[float, Decision]]:
    memory = memory if memory is not None else Memory()
    out = []
    now = start
    while now <= end:
        window = [a for a in arrivals if now - policy.rate_window < a <= now]
        d = decide(Observation(now, window, [refill] * 50, current), policy, memory)
        out.append((now, d))
        current = d.replicas
        now += every
    return out


def test_fast_up_slow_down() -> None:
    """A step from 1/s to 4/s is followed within a minute (the panic window); when it ends the
    pool is held for the scale-down window (and while panicking), then goes down."""
    arrivals = poisson(1.0, 0, 3600, 1) + poisson(4.0, 3600, 5400, 2) + poisson(1.0, 5400, 9000, 3)
    arrivals.sort()
    log = run(arrivals, 1800, 9000, 20.0)
    low = max(d.replicas for t, d in log if t < 3600)
    high = servers_for(4.0 * (20.0 + UNLIMITED.refill_overhead), 0.99, 1000)
    up = [t for t, d in log if t >= 3600 and d.replicas >= 0.9 * high]
    assert up and up[0] - 3600 <= 75, "the step is followed within the panic window"
    assert low < 0.5 * high
    # back down: nothing lower than the step's size within the scale-down window of its end
    after = [(t, d) for t, d in log if 5400 <= t < 5400 + UNLIMITED.scale_down_window]
    assert all(d.replicas >= 0.9 * high for _, d in after)
    assert any(d.reason in (REASON_HOLDING, REASON_PANICKING) for _, d in after)
    late = [d.replicas for t, d in log if t > 5400 + 2 * UNLIMITED.scale_down_window + 600]
    assert late and max(late) < 0.5 * high
    assert any(d.reason == REASON_SCALED_DOWN for _, d in log)


def test_a_sustained_step_is_never_cut_while_it_lasts() -> None:
    """Autoscaler review finding 1: a step from 1/s to 5/s (90 s refill) was read as a burst and
    cut from 561 to 103 about 5 minutes later. The size never falls below the Erlang-B size at
    the new rate (less a margin for noise) while the step lasts, and never scales down while
    the short window's rate is significantly above the long one's (panicking)."""
    arrivals = sorted(poisson(1.0, 0, 3600, 4) + poisson(5.0, 3600, 7200, 5))
    log = run(arrivals, 1800, 7200, 90.0)
    need = servers_for(5.0 * (90.0 + UNLIMITED.refill_overhead), 0.99, 1000)
    settled = [d.replicas for t, d in log if t >= 3600 + 120]
    assert min(settled) >= 0.95 * need, (min(settled), need)
    assert not any(d.reason == REASON_SCALED_DOWN and d.panicking for _, d in log)


def test_no_scale_down_while_a_panics_rise_goes_on() -> None:
    """A rise no Poisson noise explains starts a panic; while the rise goes on (the claims of
    the last settle_window as many as the panic's rate predicts: a step from 0.5/s to 5/s)
    the size never goes down, even when the recommendation does."""
    arrivals = sorted(poisson(0.5, 0, 3600, 6) + poisson(5.0, 3600, 3900, 7))
    log = run(arrivals, 1800, 3900, 30.0, every=5.0)
    panics = [(t, d) for t, d in log if d.panicking]
    assert panics and panics[0][0] <= 3600 + 15
    assert not any("panic settling" in d.message for _, d in panics)
    sizes = [d.replicas for _, d in panics]
    assert all(b >= a for a, b in itertools.pairwise(sizes))
    assert any(d.recommended < d.replicas for _, d in panics)


def run_counted(
    arrivals: list[float], start: float, end: float, refill: float, every: float = 5.0
) -> list[tuple[float, Decision]]:
    """As the controller does it: the window's bins kept as claims come, their occupancy
    counted over the refill time (so the occupancy floor takes part)."""
    memory = Memory()
    bins = ArrivalBins(UNLIMITED.bin_width)
    pending = sorted(arrivals)
    out = []
    current = 1
    now = start
    i = 0
    while now <= end:
        while i < len(pending) and pending[i] <= now:
            bins.add(pending[i], UNLIMITED.group_gap)
            i += 1
        obs = Observation(now, (), [refill] * 50, current, bins=bins)
        d = decide(obs, UNLIMITED, memory)
        bins.span = occupancy_span(UNLIMITED, memory)
        out.append((now, d))
        current = d.replicas
        now += every
    return out


def test_a_panic_whose_rise_is_over_gives_back_its_load() -> None:
    """A burst like one seen 10 minutes before (60 claims in 10 s on 0.5/s, 60 s refill) starts
    a panic whose load is sized by Erlang-B above what the occupancy floor (the bursts seen)
    asks. Once the claims of the last settle_window are significantly fewer than the panic's
    highest rate predicts, the panic neither sizes on that load nor holds the size: the pool
    goes back to the floor while the panic lasts. Before the rule it stayed at the panic's
    peak for the whole panic_hold (300 s)."""
    burst = [3000 + i / 6 for i in range(60)] + [3600 + i / 6 for i in range(60)]
    arrivals = sorted(poisson(0.5, 0, 4200, 6) + burst)
    log = run_counted(arrivals, 0, 4200, 60.0)
    peak = max(d.replicas for t, d in log if 3600 <= t <= 3640)
    after = [(t, d) for t, d in log if 3610 + UNLIMITED.settle_window + 20 <= t <= 3600 + 200]
    assert after and all(d.panicking for _, d in after)
    assert "panic settling" in after[-1][1].message
    assert max(d.replicas for _, d in after) < peak


def test_a_step_is_a_rise_that_goes_on() -> None:
    """A sustained step (1/s to 5/s) never settles its panic: the claims of the last
    settle_window keep up with the panic's rate, so the panic holds and sizes on its load."""
    arrivals = sorted(poisson(1.0, 0, 3600, 4) + poisson(5.0, 3600, 7200, 5))
    log = run(arrivals, 1800, 4200, 90.0)
    panics = [d for t, d in log if d.panicking]
    assert panics
    assert not any("panic settling" in d.message for d in panics)


def test_poisson_noise_does_not_panic() -> None:
    """Poisson claims at 5/s for two hours: no panic."""
    arrivals = poisson(5.0, 0, 7200, 11)
    log = run(arrivals, 600, 7200, 30.0)
    assert not any(d.panicking for _, d in log)


def test_a_restart_does_not_shrink_the_pool() -> None:
    """Autoscaler review finding 2: a new process saw only the live claims (the deleted ones are
    gone) and cut the pool. With the window kept in the status and the current size held as a
    recommendation, the size after a restart is never below the one before it, and the rate
    is the one measured before."""
    arrivals = poisson(2.0, 0, 4300, 7)
    memory = Memory()
    before = run(arrivals, 1800, 3600, 90.0, memory=memory)[-1][1]
    kept = memory.window
    assert kept is not None
    status = kept.to_status()
    # the new process lists only the claims still alive (the last 2 minutes), then sees new ones
    seen = [a for a in arrivals if a > 3600 - 120]
    fresh = Memory()
    fresh.restore(ArrivalBins.from_status(status, POLICY.bin_width), 3615.0, before.replicas)
    after = run(seen, 3615, 3615 + 600, 90.0, memory=fresh, current=before.replicas)
    assert min(d.replicas for _, d in after) >= 0.97 * before.replicas
    assert all(
        d.replicas >= before.replicas for t, d in after if t < 3615 + POLICY.scale_down_window
    )
    assert after[0][1].arrival_rate == pytest.approx(before.arrival_rate, rel=0.1)


@pytest.mark.parametrize("seed", [1, 3, 4])
def test_a_restart_holds_the_pool_for_a_whole_rate_window(seed: int) -> None:
    """Autoscaler review finding 2, as the review asked it: "the pool never falls below about
    0.9 x the pre-restart Erlang size during the first rate_window". Scenario: 2 claims/s with
    a 90 s refill until a restart at 3600 s; claims are deleted after use (dwell exponential,
    mean 120 s), so the new process relists only the claims alive at the restart (about 240 of
    the last hour's 7200), takes back the window kept in the status and holds the current
    size as a recommendation (``Memory.restore``), then sees the new claims. At 5fd572e (no
    kept window; a fresh memory and the relisted claims, in its own loop) the size fell to
    21-37, 0.11-0.19 x the Erlang-B size, within 4 minutes.

    Bound: over the whole ``rate_window`` (1800 s) after the restart the size never falls
    below 0.9 x Erlang-B's size at the rate measured before it; the lowest size is 0.98 x to
    1.02 x it on these seeds today."""
    restart = 3600.0
    arrivals = poisson(2.0, 0, restart + POLICY.rate_window + 100, seed)
    memory = Memory()
    before = run(arrivals, 1800, restart, 90.0, memory=memory)[-1][1]
    kept = memory.window
    assert kept is not None
    need = servers_for(before.arrival_rate * (90.0 + POLICY.refill_overhead), 0.99, 1000)
    rng = random.Random(seed + 1000)
    deleted = [a + rng.expovariate(1 / 120.0) for a in arrivals]
    seen = [a for a, gone in zip(arrivals, deleted, strict=True) if a > restart or gone > restart]
    assert len([a for a in seen if a <= restart]) < 400  # only the live claims are relisted
    fresh = Memory()
    fresh.restore(
        ArrivalBins.from_status(kept.to_status(), POLICY.bin_width),
        restart + 15,
        before.replicas,
        memory.estimates(),
    )
    after = run(
        seen,
        restart + 15,
        restart + POLICY.rate_window,
        90.0,
        memory=fresh,
        current=before.replicas,
    )
    lowest = min(d.replicas for _, d in after)
    assert lowest >= 0.9 * need, (lowest, need)


def test_a_small_step_is_followed_within_two_minutes_and_not_let_go() -> None:
    """Autoscaler review finding 8: "up at once" held for the decision, not for the rate it
    decides on (a 10-minute boxcar mean), so a Poisson step from 1/s to 2/s (too small a level
    shift to look like a burst; 90 s refill) reached the new Erlang-B size (about 201 at
    99 %) only about 10 minutes after the step. Scenario: decided every 5 s through
    :func:`replay.passes` with the default policy, 2 h at 1/s then the step, six seeds. The
    reference is the median size of the same loop over the second half of 4-hour runs at a
    steady 2/s (three seeds: 201). At 5fd572e (its own loop: the claims of its 600 s window
    each pass) the size first reached 0.95 x its own such reference 530-625 s after the step
    on seeds 1-5 (on seed 6 a chance clump reached it at 60 s and fell back).

    Bound: the size reaches 0.95 x the reference within 120 s of the step (45-90 s today
    over 12 seeds), and from then until 10 minutes after the step never falls below 0.9 x it.
    Not 0.95: once the step's panic lets go (about 350 s on) the size is Erlang-B's at the rate
    measured over the few minutes since the step, a 4 % standard error, and where those claims
    came at 1.83-1.93/s (seeds 1, 5 and 8 of 12) it is 186-188, 0.93 x (0.925 x at worst)."""
    policy = Policy(min_replicas=1, max_replicas=1000, target_warm_share=0.99)
    steady: list[int] = []
    for seed in (51, 52, 53):
        log = passes(poisson(2.0, 0, 14_400, seed), 14_400, policy, refill=90.0)
        steady += [d.replicas for now, d, _ in log if now >= 7200]
    reference = statistics.median(steady)
    assert 195 <= reference <= 210, reference
    step = 7200.0
    for seed in range(1, 7):
        arrivals = sorted(poisson(1.0, 0, step, seed) + poisson(2.0, step, step + 900, seed + 10))
        log = [
            (now - step, d.replicas)
            for now, d, _ in passes(arrivals, step + 600, policy, refill=90.0)
        ]
        assert max(n for t, n in log if -600 <= t < 0) < 0.6 * reference  # a step indeed
        reached = next(t for t, n in log if t >= 0 and n >= 0.95 * reference)
        assert reached <= 120, (seed, reached)
        lowest = min(n for t, n in log if reached <= t <= 600)
        assert lowest >= 0.9 * reference, (seed, lowest, reference)


def test_grouped_arrivals_raise_the_size() -> None:
    """Autoscaler review finding 7: claims created together (8 at once, as parallel rollouts
    do) were invisible. At the same mean rate, grouped arrivals are given more sandboxes."""
    rng = random.Random(8)
    single = poisson(0.8, 0, 3600, 9)
    groups = [t for t in poisson(0.1, 0, 3600, 10) for _ in range(8)]
    assert len(groups) == pytest.approx(len(single), rel=0.15)
    alone = run(single, 3600, 3600, 60.0)[-1][1]
    grouped = run(sorted(groups), 3600, 3600, 60.0)[-1][1]
    assert alone.peakedness == pytest.approx(1.0, abs=0.05)
    assert grouped.peakedness > 3.0
    scale = len(groups) / len(single)
    assert grouped.recommended > 1.3 * alone.recommended * scale
    assert rng  # the groups' times are drawn above


def test_rate_limits_follow_hpa_policies() -> None:
    """Scale-up and scale-down are limited per period as HPA's behavior policies are: the
    larger change of the policies (select Max), Disabled: no change in that direction."""
    slow = Policy(
        min_replicas=1,
        max_replicas=1000,
        target_warm_share=0.99,
        scale_down_window=0,
        scale_up=Rules((Limit("Pods", 5, 60.0),)),
        scale_down=Rules((Limit("Percent", 10, 60.0),)),
    )
    memory = Memory()
    arrivals = [i * 0.25 for i in range(4 * 600)]  # 4/s for 10 minutes
    log = run(arrivals, 600, 780, 30.0, policy=slow, memory=memory)
    sizes = [d.replicas for _, d in log]
    # at most 5 more within any 60 s
    for i, (t, d) in enumerate(log):
        earlier = [e.replicas for s, e in log[:i] if s <= t - 60]
        base = earlier[-1] if earlier else 1
        assert d.replicas - base <= 5
    assert sizes[-1] < servers_for(4 * 30.05, 0.99, 1000)
    frozen = Policy(1, 1000, 0.99, scale_up=Rules(select="Disabled"))
    d = decide(Observation(600.0, arrivals, [30.0] * 50, 3), frozen, Memory())
    assert d.replicas == 3 and d.recommended > 3


def test_the_window_survives_a_status_round_trip() -> None:
    bins = ArrivalBins.of([1.0, 1.01, 1.02, 15.0, 33.0], 10.0, 0.05)
    assert bins.claims == [3, 1, 0, 1]
    assert bins.squares == [1 + 3 + 5, 1, 0, 1]  # a group of 3: 9
    back = ArrivalBins.from_status(bins.to_status(), 10.0)
    assert back is not None and (back.first, back.claims, back.squares) == (
        0,
        bins.claims,
        bins.squares,
    )
    assert ArrivalBins.from_status(bins.to_status(), 5.0) is None  # another bin width
    assert (
        ArrivalBins.from_status(
            {"binSeconds": 10.0, "firstBin": 0, "claims": [-1], "groupSquares": [1]}, 10.0
        )
        is None
    )


def test_the_floor_message_gives_the_seconds_of_claims_the_window_holds() -> None:
    """The occupancy floor counts the claims of the bins the window keeps (at most
    ``rate_window`` seconds), whatever the feedback's stretch of the scale-down window: the
    message gives those seconds. It once gave the stretched span (4 x 1800 s here, 7200 s),
    claims the window no longer held."""
    now = 10_000.0
    burst = [t0 + i / 6 for t0 in range(3000, 10_000, 600) for i in range(60)]
    bins = ArrivalBins(UNLIMITED.bin_width)
    bins.span = 60.0 + UNLIMITED.refill_overhead
    for t in sorted(poisson(0.5, 0, now, 9) + burst):
        bins.add(t, UNLIMITED.group_gap)
    memory = Memory()
    memory.first_seen = 0.0
    memory.hold = 4.0
    d = decide(Observation(now, (), [60.0] * 50, 60, bins=bins), UNLIMITED, memory)
    counted = re.search(r"the claims' occupancy over the last (\d+)s", d.message)
    assert counted is not None, d.message
    assert float(counted.group(1)) <= UNLIMITED.rate_window


def test_a_steady_load_is_sized_on_the_long_horizons_rate() -> None:
    """At 0.016 claims/s a 30-minute window holds about 29 claims, whose rate moves by a fifth
    with chance, and the Erlang-B size (6 for the 94 s refill) with it, between 5 and 8. While
    the window's claims are consistent with the long horizon's rate (2 h, exponentially
    weighted), the size is that rate's: over five seeds, after 2 h, the size is 6 on at least
    65 % of the passes (71 % here; 53 % when sized on the window's rate alone)."""
    at_size = total = 0
    for seed in range(1, 6):
        arrivals = sorted(poisson(0.016, 0, 14_400, seed))
        log = run(arrivals, 0, 14_400, 94.0, every=30.0)
        late = [d for t, d in log if t >= 7200]
        assert any("steady at" in d.message for d in late)
        at_size += sum(d.replicas == 6 for d in late)
        total += len(late)
    assert at_size / total >= 0.65, at_size / total


def lognormal_refills(seed: int, n: int = 200) -> list[float]:
    """``n`` draws of a refill time like a pulled image's: median 90 s, sigma 0.3."""
    rng = random.Random(seed)
    return [rng.lognormvariate(math.log(90.0), 0.3) for _ in range(n)]


def test_the_size_does_not_follow_the_chance_of_the_refill_samples() -> None:
    """200 draws of a 90 s lognormal refill time have a mean that wanders by about 2 % with
    chance (one standard error is 2.2 %), and the Erlang-B size at 1.5 claims/s with it: up at
    once, down only after the scale-down window, so a mean pool above the static one. A recent
    mean within three standard errors of the settled one moves it by the pass's share of the
    refill horizon only."""
    memory = Memory()
    first_samples = lognormal_refills(1)
    first = decide(Observation(10_000.0, even(1.5, 10_000.0), first_samples, 1), POLICY, memory)
    mean = sum(first_samples) / len(first_samples)
    assert first.refill_time == pytest.approx(mean + POLICY.refill_overhead)
    wandered = [x * 1.02 for x in first_samples]  # 2 %: within chance
    later = decide(
        Observation(10_015.0, even(1.5, 10_015.0), wandered, first.replicas), POLICY, memory
    )
    moved = 0.02 * mean * 15.0 / POLICY.refill_horizon
    assert later.refill_time == pytest.approx(mean + moved + POLICY.refill_overhead)
    assert later.replicas == first.replicas


def test_a_refill_time_that_moves_beyond_chance_is_taken_at_once() -> None:
    """Pods that start to take 30 % longer (a slower registry) are no chance of the samples:
    the size follows at the next pass."""
    memory = Memory()
    samples = lognormal_refills(2)
    first = decide(Observation(10_000.0, even(1.5, 10_000.0), samples, 1), POLICY, memory)
    slower = [x * 1.3 for x in samples]
    later = decide(
        Observation(10_015.0, even(1.5, 10_015.0), slower, first.replicas), POLICY, memory
    )
    assert later.refill_time == pytest.approx(sum(slower) / len(slower) + POLICY.refill_overhead)
    assert later.replicas > first.replicas


def test_a_chance_dip_and_the_recovery_after_it_are_no_ramp() -> None:
    """Steady claims at 1.5/s with a 94 s refill, and one minute at a quarter of that rate (a
    significant drop: a new regime). When the claims come back, the new regime's bins rise from
    the dip: fitted over them alone that was a steep ramp, extrapolated a refill time ahead to
    twice the load (round 11's design stepped a steady pool from 190 to 314 for ten minutes).
    Fitted from the end of the drop on, and over the drift window at least, there is no ramp."""
    dip = 7200.0
    arrivals = [
        t
        for t in even(1.5, dip + 900.0, window=dip + 900.0)
        if not (dip <= t < dip + 60.0) or int(t * 1.5) % 4 == 0
    ]
    log = run(arrivals, 0.0, dip + 900.0, 94.0, every=5.0)
    before = max(d.replicas for t, d in log if dip - 900.0 <= t < dip)
    after = max(d.replicas for t, d in log if dip <= t)
    assert after <= before * 1.1, (before, after)


def test_a_step_the_long_horizon_has_not_caught_up_with_is_sized_on_the_window() -> None:
    """A step from 1/s to 1.6/s (too small to panic on) is inconsistent with the long horizon's
    rate for hours: the size follows the window's rate, within 5 % of Erlang-B's size at the
    new rate from ten minutes after the step, and no pass calls the load steady."""
    need = servers_for(1.6 * (30.0 + UNLIMITED.refill_overhead), 0.99, 1000)
    for seed in range(1, 4):
        arrivals = sorted(poisson(1.0, 0, 7200, seed) + poisson(1.6, 7200, 10_800, seed + 10))
        log = run(arrivals, 0, 10_800, 30.0, every=30.0)
        after = [d for t, d in log if t >= 7200 + 600]
        assert min(d.replicas for d in after) >= 0.95 * need
        assert not any("steady at" in d.message for d in after)


def grouped(rate: float, size: int, groups_per_s: float, end: float, seed: int) -> list[float]:
    """Poisson claims at ``rate`` plus groups of ``size`` claims with one creation time."""
    return sorted(
        poisson(rate, 0, end, seed)
        + [t for t in poisson(groups_per_s, 0, end, seed + 100) for _ in range(size)]
    )


def binned_run(
    arrivals: list[float], end: float, refill: float, every: float = 15.0
) -> list[tuple[float, Decision]]:
    """As :func:`run`, with the arrivals binned as the controller's windows keep them (their
    occupancy counted once the refill time is known)."""
    bins = ArrivalBins(UNLIMITED.bin_width)
    bins.span = refill + UNLIMITED.refill_overhead
    memory, current, i, now, out = Memory(), 1, 0, 0.0, []
    while now <= end:
        while i < len(arrivals) and arrivals[i] <= now:
            bins.add(arrivals[i], UNLIMITED.group_gap)
            i += 1
        d = decide(Observation(now, (), [refill] * 50, current, bins=bins), UNLIMITED, memory)
        out.append((now, d))
        current = d.replicas
        now += every
    return out


@pytest.mark.parametrize("seed", [7, 8, 9])
def test_a_chance_clump_of_a_steady_grouped_load_raises_no_floor(seed: int) -> None:
    """Groups of 32 claims at 0.0052/s on 0.85 claims/s with a 90 s refill, steady for three
    hours, then two groups 20 s apart: a clump such a load makes by chance, neither a panic nor
    a change of its rate. The size stays the model's for the load's peakedness, within 5 % of
    the hour before. The occupancy floor had raised it by a fifth (seed 7: 151 to 180) and
    held it there for the 30 minutes the clump stayed in its window."""
    clump = 10_800.0
    arrivals = sorted(grouped(0.85, 32, 0.0052, clump + 1800.0, seed) + [clump, clump + 20.0] * 32)
    log = binned_run(arrivals, clump + 1800.0, 90.0)
    before = max(d.replicas for t, d in log if clump - 3600.0 <= t < clump)
    after = [d for t, d in log if clump <= t]
    assert not any(d.panicking for d in after)
    assert all("steady at" in d.message for d in after)
    assert max(d.replicas for d in after) <= 1.05 * before, (before, [d.replicas for d in after])


@pytest.mark.parametrize("seed", [7, 8])
def test_a_steady_poisson_load_keeps_its_occupancy_floor(seed: int) -> None:
    """Only a grouped steady load goes without the occupancy floor: Poisson claims at 1/s with a
    90 s refill, steady for two of three hours, are still sized on their occupancy on many
    passes (the floor over Erlang-B's size). A steady load without any floor (as tried in round
    14) had it on none, and lost a x2 step with the local refill of the tuning set."""
    log = binned_run(poisson(1.0, 0, 10_800.0, seed), 10_800.0, 90.0)
    steady = [d for t, d in log if t >= 3600.0 and "steady at" in d.message]
    assert len(steady) > 400
    assert sum("the claims' occupancy" in d.message for d in steady) > len(steady) // 2
