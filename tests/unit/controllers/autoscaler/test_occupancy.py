"""The occupancy of claims (the claims within one refill time up to each) and its quantile, the
smallest static pool that would have met the target over the window (ArrivalBins,
occupancy_floor): counted as the controller's window sees claims, summed over keys, kept in
step with the bins, and safe — a static pool of that size meets the target on the same claims."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from agentsandbox.controllers.autoscaler import plan as plan_module
from agentsandbox.controllers.autoscaler.plan import Decision, Memory, Observation, decide
from agentsandbox.controllers.autoscaler.policy import Policy
from agentsandbox.controllers.autoscaler.queueing import servers_for
from agentsandbox.controllers.autoscaler.source import Windows
from agentsandbox.controllers.autoscaler.window import (
    ArrivalBins,
    LongWindow,
    bucket_value,
    occupancy_bucket,
    occupancy_floor,
    significantly_below,
)
from tests.unit.arrivals import poisson


def _bins(times: list[float], span: float, width: float = 10.0) -> ArrivalBins:
    bins = ArrivalBins(width, span=span)
    for t in sorted(times):
        bins.add(t, 0.05)
    return bins


def _counted(bins: ArrivalBins) -> dict[int, int]:
    out: dict[int, int] = {}
    for h in bins.occupancy:
        for b, n in h.items():
            out[b] = out.get(b, 0) + n
    return out


def _static_warm_share(times: list[float], size: int, refill: float) -> float:
    """A static pool of ``size`` with a constant refill time: a claim finding a Ready member
    takes it (a replacement is Ready ``refill`` later), one finding none is served cold."""
    busy: list[float] = []  # when each busy slot is Ready again
    warm = 0
    for t in sorted(times):
        busy = [r for r in busy if r > t]
        if len(busy) < size:
            warm += 1
            busy.append(t + refill)
    return warm / len(times)


def test_a_claims_occupancy_counts_the_claims_within_one_refill_time_up_to_it() -> None:
    bins = _bins([0.0, 0.2, 0.4, 1.05, 5.0], span=1.0)
    assert _counted(bins) == {1: 2, 2: 1, 3: 2}  # 1.05 finds 0.2 and 0.4 only


def test_no_occupancy_is_counted_before_the_refill_time_is_known_nor_for_listed_claims() -> None:
    unknown = _bins([1.0, 1.1, 1.2], span=0.0)
    assert _counted(unknown) == {}
    listed = ArrivalBins(10.0, span=5.0)
    for t in (1.0, 1.1):
        listed.add(t, -1.0)  # a relist's creationTimestamp: not timed by this process
    assert _counted(listed) == {} and listed.claims == [2]


def test_occupancy_buckets_round_up_so_that_the_floor_errs_on_the_safe_side() -> None:
    for c in (1, 5, 32, 33, 40, 100, 1000, 29_832):
        assert bucket_value(occupancy_bucket(c)) >= c
        assert bucket_value(occupancy_bucket(c)) <= max(c + 1, c * 1.04 + 1)


def test_the_occupancy_floor_is_a_static_pool_that_meets_the_target_on_those_claims() -> None:
    """Bursts shorter than the panic window (30 claims within 3 s every 5 min) on Poisson
    traffic: a static pool of the floor's size serves at least the target warm, a much
    smaller one does not."""
    rng = random.Random(7)
    times = poisson(0.3, 0.0, 3600.0, seed=11)
    for k in range(12):
        start = 150.0 + 300.0 * k
        times += [start + rng.uniform(0.0, 3.0) for _ in range(30)]
    refill = 20.0
    bins = _bins(times, span=refill)
    floor = occupancy_floor(bins, 0.0, 0.01)
    assert _static_warm_share(times, floor, refill) >= 0.99
    assert _static_warm_share(times, floor // 2, refill) < 0.99
    assert floor >= 30  # a burst's claims, all within one refill time


def test_on_poisson_traffic_the_occupancy_floor_is_near_the_erlang_size() -> None:
    times = poisson(1.5, 0.0, 7200.0, seed=3)
    floor = occupancy_floor(_bins(times, span=90.0), 0.0, 0.01)
    erlang = servers_for(1.5 * 90.0, 0.99, 10_000)
    assert erlang <= floor <= erlang * 1.08  # the quantile ignores that cold claims free no slot


def test_one_coincidence_among_few_claims_raises_no_floor() -> None:
    """Sparse claims (one a minute) and two of them a second apart: a pool of 1 served all but
    one warm, and one claim is chance, not a reason to keep a second sandbox."""
    times = [60.0 * i for i in range(30)] + [600.5]
    assert occupancy_floor(_bins(times, span=2.0), 0.0, 0.01) == 1
    times += [1200.5, 1201.0]  # the same three times: no longer chance
    assert occupancy_floor(_bins(times, span=2.0), 0.0, 0.01) >= 2


def test_the_floor_counts_only_the_bins_from_since_on() -> None:
    times = [100.0 + 0.1 * i for i in range(40)] + [2000.0 + 60.0 * i for i in range(20)]
    bins = _bins(times, span=10.0)
    assert occupancy_floor(bins, 0.0, 0.01) >= 39  # all but the one claim allowed
    assert occupancy_floor(bins, 1990.0, 0.01) == 1
    bins.trim(3000.0, 900.0)  # the burst's bins dropped: its occupancies with them
    assert len(bins.occupancy) == len(bins.claims)
    assert occupancy_floor(bins, 0.0, 0.01) == 1


def test_windows_count_occupancy_per_key_once_the_span_is_set_and_sum_them() -> None:
    now = [1000.0]
    windows = Windows(1800.0, lambda: now[0])

    def claim(uid: str, pool: str) -> dict[str, object]:
        return {
            "metadata": {"name": uid, "uid": uid, "namespace": "ns"},
            "spec": {"warmpool": pool, "sandboxTemplateRef": {"name": "tpl"}},
        }

    key = "ns/pool/p"
    windows.claim_added(claim("a", "p"))  # before the span is known: not counted
    windows.set_span([key], 30.0)
    for i in range(5):
        now[0] += 1.0
        windows.claim_added(claim(f"b{i}", "p"))
    counted = _counted(windows.bins_for([key]))
    assert sum(counted.values()) == 5
    assert max(counted) == 5  # the fifth claim finds four within 30 s before it
    windows.set_span([key], 0.0)
    assert key not in windows.spans


def test_a_copy_and_a_merge_keep_the_occupancy_in_step_with_the_bins() -> None:
    bins = _bins([5.0, 5.5, 25.0], span=10.0)
    copied = bins.copy()
    copied.occupancy[0][9] = 1
    assert 9 not in bins.occupancy[0]  # independent
    older = {k: v for k, v in bins.to_status().items() if k != "occupancy"}
    restored = ArrivalBins.from_status(older, 10.0)  # a status written before it was kept
    assert restored is not None and restored.occupancy == [{}, {}, {}]
    restored.merge_max(bins)  # the relisted bins have more: theirs are taken
    assert restored.occupancy == bins.occupancy


def test_the_occupancy_survives_a_restart_in_the_status() -> None:
    times = [100.0 + 0.1 * i for i in range(30)] + [200.0, 500.0]
    bins = _bins(times, span=10.0)
    kept = bins.to_status()
    assert kept["occupancy"][0] == [x for c in range(1, 31) for x in (c, 1)]  # exact to 32
    restored = ArrivalBins.from_status(kept, 10.0)
    assert restored is not None
    assert restored.occupancy == bins.occupancy
    assert occupancy_floor(restored, 0.0, 0.01) == occupancy_floor(bins, 0.0, 0.01) >= 29
    for broken in ([[1, 2, 3]], [[0, 1]] + [[]] * (len(bins.claims) - 1), "x", [[]]):
        assert ArrivalBins.from_status({**kept, "occupancy": broken}, 10.0) is None


def _decide_through(
    times: list[float], start: float, end: float, refill: float, every: float = 5.0
) -> list[Decision]:
    """Decisions every ``every`` seconds from ``start`` to ``end``, the window fed claim by claim
    as the controller's informers would (the occupancy counted over the refill time)."""
    policy = Policy(min_replicas=1, max_replicas=1000, target_warm_share=0.99)
    memory = Memory()
    bins = ArrivalBins(policy.bin_width, span=refill + policy.refill_overhead)
    pending = sorted(times)
    out: list[Decision] = []
    current, now, i = 1, 0.0, 0
    while now <= end:
        while i < len(pending) and pending[i] <= now:
            bins.add(pending[i], policy.group_gap)
            i += 1
        if now >= start:
            d = decide(Observation(now, [], [refill] * 50, current, bins=bins), policy, memory)
            out.append(d)
            current = d.replicas
        now += every
    return out


@pytest.mark.parametrize("seed", [22, 23, 26, 28])
def test_steady_traffic_starts_no_new_regime(seed: int) -> None:
    """Poisson claims at 0.5/s for 4 h: no panic and no new regime. A drop is judged by the
    noise of the count expected at the regime's rate; judged by the noise of the lower count
    seen, chance dips cut the stable window short (on each of these seeds) and made its rate
    noisy."""
    policy = Policy(min_replicas=1, max_replicas=1000, target_warm_share=0.99)
    memory = Memory()
    times = poisson(0.5, 0, 14400, seed)
    for k in range(180, 1440):
        now = k * 10.0
        window = [t for t in times if now - policy.rate_window < t <= now]
        decide(Observation(now, window, [90.0] * 50, 60), policy, memory)
    assert memory.last_panic is None
    assert memory.regime_start is None


def test_a_drop_is_judged_by_the_noise_of_the_count_expected() -> None:
    # 15 claims where 30 were due happens by chance (Poisson: about 0.2 % of windows, many
    # times a day when tested every pass); 10 hardly does
    assert not significantly_below(15, 30.0)
    assert significantly_below(10, 30.0)
    # a halving of a busier rate is a drop
    assert significantly_below(60, 120.0)


def _histogram(counts: dict[int, int]) -> ArrivalBins:
    """One bin whose claims have the given occupancies (occupancy: claims)."""
    h: dict[int, int] = {}
    for c, n in counts.items():
        h[occupancy_bucket(c)] = h.get(occupancy_bucket(c), 0) + n
    return ArrivalBins(10.0, 0, [sum(counts.values())], [0], [1], occupancy=[h])


def test_the_floor_rises_above_the_pool_only_on_significantly_more_cold_claims() -> None:
    """14 claims of 1014 with occupancy 5 where 10 are allowed cold: the 99 % quantile is 5,
    but 14 against 10 is chance (2 standard deviations of the count are about 8 claims), so a
    pool of 4 is not raised by the floor; 30 such claims are not chance, and raise it. With
    no size given (or no test asked) the floor is the quantile as before."""
    chance = _histogram({5: 14, 1: 1000})
    assert occupancy_floor(chance, 0.0, 0.01) == 5
    assert occupancy_floor(chance, 0.0, 0.01, current=4, sigmas=2.0) == 4
    assert occupancy_floor(chance, 0.0, 0.01, current=6, sigmas=2.0) == 5  # never above
    assert occupancy_floor(chance, 0.0, 0.01, current=4, sigmas=0.0) == 5
    many = _histogram({5: 30, 1: 1000})
    assert occupancy_floor(many, 0.0, 0.01, current=4, sigmas=2.0) == 5


def test_a_pool_serving_its_target_is_not_stepped_up_by_a_chance_tail() -> None:
    """The decision gives the floor the pool's size and the policy's test (``floor_sigmas``):
    over 100 bins of 10 claims, 14 with occupancy 5 where 10 are allowed, a pool of 4 is kept
    at 4; without the test the floor asks for a fifth sandbox."""
    tail = [{1: 10}] * 93 + [{1: 8, 5: 2}] * 7
    hists = [{occupancy_bucket(c): n for c, n in h.items()} for h in tail]
    bins = ArrivalBins(10.0, 0, [10] * 100, [10] * 100, [1] * 100, occupancy=hists)
    policy = Policy(min_replicas=1, max_replicas=100, target_warm_share=0.99)

    def size(p: Policy) -> int:
        memory = Memory()
        memory.first_seen = 0.0
        return decide(Observation(1000.0, (), [0.2] * 50, 4, bins=bins), p, memory).replicas

    assert size(policy) == 4
    assert size(dataclasses.replace(policy, floor_sigmas=0.0)) == 5


def test_claims_that_come_in_groups_are_cold_in_groups_and_the_floor_test_says_so() -> None:
    """30 claims of 1030 with occupancy 5 where 10 are allowed cold raise a pool of 4 when the
    claims come one by one; when they come in groups of 8 (index of dispersion 8) the same 30
    are about four groups, which chance explains: the pool of 4 is kept."""
    many = _histogram({5: 30, 1: 1000})
    assert occupancy_floor(many, 0.0, 0.01, current=4, sigmas=2.0) == 5
    assert occupancy_floor(many, 0.0, 0.01, current=4, sigmas=2.0, dispersion=8.0) == 4
    far = _histogram({5: 80, 1: 1000})
    assert occupancy_floor(far, 0.0, 0.01, current=4, sigmas=2.0, dispersion=8.0) == 5


def test_the_long_window_weighs_every_closed_bin_empty_ones_too() -> None:
    """The long window's rate is its weighted claims over its weighted seconds: an empty bin
    lowers it as a bin with claims raises it; bins no pass counted fade it all at once."""
    long = LongWindow()
    assert long.rate() == 0.0
    long.add(10, 10.0, 0.5)
    assert long.rate() == pytest.approx(1.0)
    long.add(0, 10.0, 0.5)
    assert long.rate() == pytest.approx(5.0 / 15.0)
    long.fade(0.5)
    assert long.rate() == pytest.approx(5.0 / 15.0)
    assert (long.claims, long.span) == (pytest.approx(2.5), pytest.approx(7.5))


def test_grouped_claims_do_not_step_the_pool_up_on_a_chance_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Groups of 32 claims at 0.005 groups/s on 0.5 claims/s, 60 s refill. The claims a pool
    would serve cold come a group at a time, so their count is as noisy as the groups' (the
    measured index of dispersion), not as single claims'. The decision's floor test says so:
    over the last two of three hours the pool is smaller on average (92 against 95 here), and
    its largest size lower (113 against 123), than when the same test counts the cold claims
    as single ones (the decision before this rule). The load is kept from being judged steady,
    as a load that changes is: a steady grouped load has no occupancy floor."""
    refill = 60.0
    rng = random.Random(5)
    groups = [rng.uniform(0, 10_800) for _ in range(54)]
    times = sorted(poisson(0.5, 0, 10_800, 6) + [g for g in groups for _ in range(32)])
    # a long horizon shorter than the stable window: the load is never judged steady, so the
    # floor is consulted on every pass, as on a load that changes (a steady grouped one has none)
    policy = Policy(min_replicas=1, max_replicas=1000, target_warm_share=0.99, long_horizon=60.0)

    def sizes() -> list[int]:
        bins = ArrivalBins(policy.bin_width, span=refill + policy.refill_overhead)
        memory = Memory()
        memory.first_seen = 0.0
        out, i, current = [], 0, 40
        for now in range(30, 10_800, 30):
            while i < len(times) and times[i] <= now:
                bins.add(times[i], policy.group_gap)
                i += 1
            bins.trim(now, policy.rate_window)
            obs = Observation(float(now), (), [refill] * 50, current, bins=bins.copy())
            current = decide(obs, policy, memory).replicas
            if now >= 3600:
                out.append(current)
        return out

    grouped = sizes()
    real = plan_module.occupancy_floor

    def single(*args: Any, **kwargs: Any) -> int:
        return real(*args[:5])  # the same test, the claims counted one by one

    monkeypatch.setattr(plan_module, "occupancy_floor", single)
    counted_singly = sizes()
    assert sum(grouped) < 0.98 * sum(counted_singly), (sum(grouped), sum(counted_singly))
    assert max(grouped) < max(counted_singly)
