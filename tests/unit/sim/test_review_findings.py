"""The autoscaler review's findings, replayed in the simulator (the real warm-pool plan and the
real decide()) on traces of their own shape, 90 s lognormal refills unless said otherwise. Each
failed with the design that had a burst/base split."""

from __future__ import annotations

from agentsandbox.controllers.autoscaler.plan import Policy, servers_for
from agentsandbox.sim import latency, traces
from agentsandbox.sim.compare import compare
from agentsandbox.sim.engine import Config, Result, simulate
from tests.unit.arrivals import poisson

SLOW = latency.lognormal(90.0, 0.3)
POLICY = Policy(min_replicas=1, max_replicas=2000, target_warm_share=0.99)


def run(
    arrivals: list[float], duration: float, warmup: float, dist: latency.Latency = SLOW
) -> Result:
    trace = traces.Trace("finding", sorted(arrivals), 120.0, duration)
    return simulate(Config(trace, dist, policy=POLICY, warmup=warmup))


def test_a_sustained_step_keeps_its_size_and_its_warm_share() -> None:
    """Finding 1 (and 8): a step from 1/s to 5/s was read as a burst; when the "burst" ended the
    pool was cut to about 100 while about 480 were needed (81 % warm over the 30 minutes after
    the step). The pool reaches the new size within the panic window and keeps it.

    The warm share over those 30 minutes includes the step's own transient (the claims that come
    before the new members are Ready, 90 s on): over 12 seeds of the refill draws it is 95.4 to
    96.0 % (95.7 to 96.1 % before the draws were keyed by what they are for, when this bound
    was 96 % and passed on seed 1 alone), hence 95 %, far above the finding's 81 %."""
    arrivals = poisson(1.0, 0, 2400, 1) + poisson(5.0, 2400, 4200, 2)
    result = run(arrivals, 4200, warmup=2400)
    need = servers_for(5.0 * (90.0 + POLICY.refill_overhead), 0.99, 2000)
    settled = [replicas for t, replicas, _, _ in result.series if t >= 2400 + 180]
    assert min(settled) >= 0.95 * need, (min(settled), need)
    assert result.warm_share >= 0.95


def test_one_off_spikes_at_irregular_gaps_are_not_held_forever() -> None:
    """Finding 3: spikes at irregular gaps were held for good (three of them pinned about 100
    extra sandboxes for as long as traffic lasted). Two and a half hours after the last one the
    pool is back near the Erlang-B size of the traffic between them."""
    spikes = [s + i * 0.1 for s in (1200, 2000, 4000) for i in range(100)]
    result = run(poisson(0.2, 0, 13_000, 4) + spikes, 13_000, warmup=600)
    base = servers_for(0.2 * (90.0 + POLICY.refill_overhead), 0.99, 2000)
    end = [replicas for t, replicas, _, _ in result.series if t >= 13_000 - 600]
    assert max(end) <= 1.3 * base, (max(end), base)


def test_grouped_claims_are_served_warm() -> None:
    """Finding 7: eight claims created at once (as parallel rollouts do), on top of 0.5/s, with
    the local refill times: 93.7 % warm where a static pool reaches 99 %."""
    groups = [t for t in poisson(0.02, 0, 7200, 6) for _ in range(8)]
    result = run(poisson(0.5, 0, 7200, 7) + groups, 7200, warmup=1800, dist=latency.LOCAL)
    assert result.warm_share >= 0.985


def test_a_single_spike_makes_no_storm_of_sandboxes_deleted_before_ready() -> None:
    """Finding 9: a spike of 100 claims within 5 s made about 100 pool sandboxes that were
    deleted before they were Ready (the headroom went as the claims were seen).

    Not a storm: at most the one scale-down after the panic. The pool deletes its not-Ready
    members first, and at 0.2 claims/s with a 90 s refill about 19 replacements are always
    being made, so a scale-down of k sandboxes under traffic deletes up to k of them; the
    sandboxes the spike's panic added beyond the occupancy floor (about 16 here) are that k.
    How many of them are not yet Ready then depends on the refill draws: over 12 seeds 4 to 13
    since the occupancy floor rises above the pool only on significantly more cold claims (1 to
    18 before, since the panic lets go as soon as the spike is over; 16 to 32 when it held for
    300 s; 17 to 26 before the draws were keyed by what they are for, when this bound was 20
    and held on seed 1), hence 40, against the finding's 100."""
    spike = [1800 + i * 0.05 for i in range(100)]
    result = run(poisson(0.2, 0, 3600, 8) + spike, 3600, warmup=600)
    assert result.deletes_before_ready <= 40, result.deletes_before_ready
    assert max(replicas for t, replicas, _, _ in result.series if t > 1800) <= 150


def test_instant_bursts_never_run_the_pool_to_its_maximum() -> None:
    """Found in the day-long burst-instant table (not a review finding): 200 claims within 2 s
    every 5 minutes, nothing between. A burst in the last bins of the regime was read as a
    rising trend, and the rate a refill time ahead sized the pool at its maximum (2000) after
    every burst. The pool stays near the bursts' size (one burst needs 200 sandboxes)."""
    trace = traces.burst(1, 3 * 3600.0, dwell=600.0, instant=2.0)
    result = simulate(Config(trace, SLOW, policy=POLICY, warmup=3600.0))
    assert max(replicas for _, replicas, _, _ in result.series) <= 400


def test_poisson_traffic_under_bursts_is_served_warm_at_about_a_static_pools_cost() -> None:
    """Finding 5: base traffic was under-counted when bursts rode on it (the burst claims left
    the count, the burst time stayed in the span), so the pool missed the target between
    bursts. Scenario: 2 claims/s Poisson plus 200-claim bursts every 300 s (each claim uniform
    within 30 s of its burst's mark: ``traces.burst``'s default shape), 90 s lognormal refills,
    4 hours, counted after a 1 h warm-up, target 99 %. The review measured 96.84 % warm (mean
    pool 325; the smallest static pool reaching 99 % was 385); this trace gives 96.71 % (pool
    322) at 5fd572e. With the claims of each burst within a few seconds (``instant``) that
    code was already at 99.9 %, so that shape does not show the finding.

    Bound: at least 98.5 % warm (target less half a point; 99.94 % today), and idle
    sandbox-seconds at most 1.10 x a static pool of 384, which misses the target (98.91 %), so
    at most 1.10 x the smallest static pool reaching it (385, as the review found, by
    ``compare``'s search, which costs 20 s more than this one static run): 1.09 today (mean pool
    418). About 12 s, the 4 hours being the scenario's."""
    duration = 4 * 3600.0
    arrivals = sorted(poisson(2.0, 0, duration, 9) + list(traces.burst(1, duration).arrivals))
    trace = traces.Trace("finding", arrivals, 120.0, duration)
    cmp = compare(Config(trace, SLOW, policy=POLICY, warmup=3600.0), 0.99, static_size=384)
    assert cmp.static is not None and cmp.idle_ratio is not None
    assert cmp.static.warm_share < POLICY.target_warm_share, cmp.static.warm_share
    assert cmp.autoscaled.warm_share >= 0.985, cmp.autoscaled.warm_share
    assert cmp.idle_ratio <= 1.10, (cmp.idle_ratio, cmp.autoscaled.mean_pool)
