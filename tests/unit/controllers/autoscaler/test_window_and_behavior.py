"""The autoscaler's arrival window (per-bin counts kept in the status), the rate limits of its
spec.behavior, the loss formulas at their edges, and the status fields a pass carries over."""

from __future__ import annotations

import pytest

from agentsandbox.api.conditions import TRUE
from agentsandbox.controllers.autoscaler.behavior import (
    PERCENT,
    PODS,
    SELECT_DISABLED,
    SELECT_MIN,
    Limit,
    Rules,
    limit,
)
from agentsandbox.controllers.autoscaler.plan import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    Decision,
)
from agentsandbox.controllers.autoscaler.queueing import (
    erlang_b,
    hayward_blocking,
    hayward_servers,
    servers_for,
    settled_mean,
    slot_kappa,
)
from agentsandbox.controllers.autoscaler.rules import StatusInput, build_status
from agentsandbox.controllers.autoscaler.settings import Settings, policy_of
from agentsandbox.controllers.autoscaler.window import ArrivalBins, group_floor, trend


# ------------------------------------------------------------------------------- the window
def test_a_claim_older_than_the_kept_bins_is_not_counted() -> None:
    bins = ArrivalBins(10.0)
    bins.add(100.0, 0.05)
    bins.add(50.0, 0.05)  # before the first bin kept
    assert (bins.first, bins.claims) == (10, [1])


def test_an_arrival_out_of_order_starts_no_group_and_leaves_the_latest_one() -> None:
    bins = ArrivalBins(10.0)
    for t in (105.0, 105.01, 104.0, 105.02):
        bins.add(t, 0.05)
    # 104.0 is single (1); 105.02 joins the group begun at 105.0 (three claims: 1 + 3 + 5)
    assert bins.claims == [4]
    assert bins.squares == [10]
    assert bins.largest == [3]


def test_a_group_whose_first_bin_was_trimmed_still_counts_its_claims() -> None:
    bins = ArrivalBins(10.0)
    bins.add(19.99, 0.05)
    bins.trim(now=40.0, window=15.0)  # drops the bins before 20 s
    bins.add(20.01, 0.05)
    assert (bins.first, bins.claims, bins.squares) == (2, [1], [3])


def test_the_bins_of_several_keys_add_up() -> None:
    a = ArrivalBins.of([5.0, 25.0], 10.0, 0.05)
    b = ArrivalBins.of([15.0, 15.01], 10.0, 0.05)
    both = ArrivalBins.summed([a, b], 10.0)
    assert (both.first, both.claims, both.squares, both.largest) == (
        0,
        [1, 2, 1],
        [1, 4, 1],
        [1, 2, 1],
    )


def test_the_group_floor_keeps_the_largest_groups_cold_claims_within_the_allowance() -> None:
    bins = ArrivalBins(10.0)
    for k in range(10):  # ten groups of 16 claims
        for i in range(16):
            bins.add(k * 10.0 + i * 0.001, 0.05)
    assert group_floor(bins, 0.0, allowed=0.5) == 16
    assert group_floor(bins, 0.0, allowed=10.0) == 15  # one cold claim per group is allowed
    assert group_floor(ArrivalBins(10.0), 0.0, allowed=1.0) == 0


def test_the_group_floor_allows_one_coincidence_among_few_claims() -> None:
    """Sparse claims: two with one creation time once among a few are a coincidence, and a
    pool of 1 is enough for them even when the allowance of so few claims is below one claim;
    the same twice is a group to hold a second sandbox for."""
    bins = ArrivalBins(10.0)
    for t in (0.0, 40.0, 80.0, 80.001, 120.0):
        bins.add(t, 0.05)
    assert group_floor(bins, 0.0, allowed=0.05) == 1
    bins.add(160.0, 0.05)
    bins.add(160.001, 0.05)
    assert group_floor(bins, 0.0, allowed=0.05) == 2


def test_a_trend_needs_enough_bins_and_a_significant_slope() -> None:
    flat = ArrivalBins.of([k * 1.0 for k in range(600)], 10.0, 0.05)
    assert trend(flat, 0.0, 600.0, 1.0) == 0.0
    few = ArrivalBins.of([1.0, 11.0, 21.0], 10.0, 0.05)
    assert trend(few, 0.0, 30.0, 1.0) == 0.0
    rising = ArrivalBins.of(
        [t for k in range(60) for t in [k * 10.0 + i * 0.2 for i in range(k)]], 10.0, 0.0
    )
    assert trend(rising, 0.0, 600.0, 1.0) == pytest.approx(0.01, rel=0.05)


def test_a_burst_in_the_last_bins_is_not_a_trend() -> None:
    """200 claims within 2 s (groups of about five at 50 ms), after five minutes without a claim:
    the slope of the bins is large, but so is their scatter about it. Judged by the noise of
    the arrivals' dispersion alone it was a ramp, whose rate a refill time ahead sized the pool
    at its maximum after every burst (the day-long burst-instant table: 2000 sandboxes)."""
    burst = ArrivalBins.of([0.0] + [309.0 + i * 0.01 for i in range(200)], 10.0, 0.05)
    assert len(burst.claims) == 32 and burst.claims[-2:] == [100, 100]
    assert trend(burst, 0.0, 320.0, 6.8) == 0.0


def test_the_status_window_round_trips_and_refuses_what_it_cannot_read() -> None:
    bins = ArrivalBins.of([1.0, 1.01, 15.0, 33.0], 10.0, 0.05)
    kept = bins.to_status(before=30.0)  # the bins ended by 30 s only
    assert kept["claims"] == [2, 1, 0]
    back = ArrivalBins.from_status(kept, 10.0)
    assert back is not None and back.largest == [2, 1, 0]
    assert ArrivalBins.from_status(None, 10.0) is None
    assert ArrivalBins.from_status({**kept, "largestGroups": [1]}, 10.0) is None


# ------------------------------------------------------------------------------- behavior
def test_policy_of_reads_spec_behavior_as_hpa_has_it() -> None:
    spec = {
        "maxReplicas": 50,
        "targetWarmShare": 0.99,
        "behavior": {
            "scaleUp": {
                "policies": [
                    {"type": "Pods", "value": 2, "periodSeconds": 60},
                    {"type": "Percent", "value": 50, "periodSeconds": 30},
                    {"type": "Bogus", "value": 9, "periodSeconds": 1},
                ],
                "selectPolicy": "Min",
            },
            "scaleDown": {"selectPolicy": "Disabled"},
        },
    }
    policy = policy_of(spec, Settings())
    assert policy.scale_up == Rules((Limit(PODS, 2, 60.0), Limit(PERCENT, 50, 30.0)), SELECT_MIN)
    assert policy.scale_down == Rules(DEFAULT_SCALE_DOWN.limits, SELECT_DISABLED)
    plain = policy_of({"maxReplicas": 5, "behavior": {"scaleUp": "nonsense"}}, Settings())
    assert (plain.scale_up, plain.scale_down) == (DEFAULT_SCALE_UP, DEFAULT_SCALE_DOWN)
    assert plain.rate_window == plain.stable_window == Settings().rate_window


def test_rate_limits_without_policies_limit_nothing() -> None:
    assert limit(Rules(()), True, 5, [], 0.0) is None
    assert limit(Rules((), SELECT_DISABLED), False, 5, [], 0.0) == 5
    # Min picks the policy allowing the smaller change
    both = Rules((Limit(PODS, 4, 15.0), Limit(PERCENT, 100, 15.0)), SELECT_MIN)
    assert limit(both, True, 10, [], 0.0) == 14
    assert limit(both, False, 10, [], 0.0) == 6


# ------------------------------------------------------------------------------- formulas
def test_loss_formulas_at_their_edges() -> None:
    assert hayward_blocking(5, 0.0, 2.0) == 0.0
    assert hayward_servers(0.0, 2.0, 0.99, 10) == 0
    assert hayward_servers(500.0, 3.0, 0.99, 10) == 11  # more than the cap
    assert servers_for(500.0, 0.99, 10) == 11
    assert slot_kappa([]) == 1.0 and slot_kappa([0.0, 0.0]) == 1.0
    assert slot_kappa([5.0] * 10) == pytest.approx(1.0)
    # a large load starts the recursion near it: below that start, the heavy-traffic value
    assert erlang_b(10, 1000.0) == pytest.approx(1.0 - 10 / 1000.0)
    # Hayward at a fraction of a server interpolates, and a blocking of 0 stays 0
    assert hayward_blocking(3, 0.5, 2.0) < hayward_blocking(2, 0.5, 2.0)
    assert hayward_blocking(100, 1e-9, 1.5) == pytest.approx(0.0, abs=1e-300)


def test_the_settled_refill_mean_at_its_edges() -> None:
    # nothing settled yet, or one sample (no spread to test against): the recent mean
    assert settled_mean(None, [1.0, 3.0], 10.0, 100.0, 3.0) == 2.0
    assert settled_mean(5.0, [2.0], 10.0, 100.0, 3.0) == 2.0
    # within chance: the pass's share of the horizon, at most all of it
    samples = [9.0, 11.0] * 50  # mean 10, one standard error 0.1
    assert settled_mean(10.2, samples, 10.0, 100.0, 3.0) == pytest.approx(10.18)
    assert settled_mean(10.2, samples, 500.0, 100.0, 3.0) == pytest.approx(10.0)
    assert settled_mean(10.2, samples, -5.0, 100.0, 3.0) == pytest.approx(10.2)
    # beyond chance, or no horizon: the recent mean at once
    assert settled_mean(10.4, samples, 10.0, 100.0, 3.0) == pytest.approx(10.0)
    assert settled_mean(10.2, samples, 10.0, 0.0, 3.0) == pytest.approx(10.0)
    # all equal: any other settled value is beyond chance
    assert settled_mean(4.0, [5.0] * 10, 10.0, 100.0, 3.0) == 5.0


# ------------------------------------------------------------------------------- status
def _decision(realised: float | None) -> Decision:
    return Decision(
        replicas=4,
        reason="Steady",
        message="m",
        arrival_rate=1.0,
        refill_time=2.0,
        predicted_warm_share=0.99,
        realised_warm_share=realised,
    )


def test_a_pass_carries_over_what_it_does_not_measure() -> None:
    before = {"realisedWarmShare": 0.97, "window": {"claims": [1]}, "desiredReplicas": 3}
    ok = (TRUE, "R", "m")
    out, _ = build_status(before, StatusInput(1, 4, _decision(None), ok, ok), "now")
    assert out["realisedWarmShare"] == 0.97 and out["window"] == {"claims": [1]}
    out, _ = build_status(before, StatusInput(1, 4, _decision(0.9912345), ok, ok), "now")
    assert out["realisedWarmShare"] == 0.9912
    out, _ = build_status(before, StatusInput(1, None, None, ok, ok), "now")
    assert (out["realisedWarmShare"], out["desiredReplicas"]) == (0.97, 3)
    assert out["window"] == {"claims": [1]}
