"""What the sizing has measured and learnt, kept in the autoscaler's status across a restart
(``status.estimates``): the refill time's mean, p99 and peakedness factor, the allowance
correction from the realised warm share, the scale-down window's stretch and the bursts' rises
(the schedule of bursts is learnt from them)."""

from __future__ import annotations

import math

import pytest

from agentsandbox.api.conditions import TRUE
from agentsandbox.controllers.autoscaler.cycle import Rise
from agentsandbox.controllers.autoscaler.memory import parse_rises
from agentsandbox.controllers.autoscaler.plan import (
    REASON_NO_DATA,
    Memory,
    Observation,
    Policy,
    decide,
    parse_estimates,
)
from agentsandbox.controllers.autoscaler.rules import StatusInput, build_status
from agentsandbox.sim import traces
from agentsandbox.sim.engine import Config, Simulation
from tests.unit.arrivals import poisson
from tests.unit.latencies import Fixed

POLICY = Policy(min_replicas=1, max_replicas=2000, target_warm_share=0.99)


def learnt(refills: list[float]) -> Memory:
    """A memory that measured ``refills`` over an hour of 1 claim/s."""
    memory = Memory()
    arrivals = poisson(1.0, 0, 3600, 3)
    decide(Observation(3600.0, arrivals, refills, 100), POLICY, memory)
    return memory


def test_a_restart_keeps_the_refill_time_until_one_kept_p99_has_passed() -> None:
    """Before, a new process had no refill time until a member it created became Ready, and
    then only the fast ones had: the first samples after a restart (20-30 s where the mean is
    90 s) under-sized the pool. The kept mean is used until one kept p99 has passed."""
    before = learnt([60.0, 80.0, 90.0, 100.0, 120.0])
    kept = before.estimates()
    assert kept["refillMeanSeconds"] == pytest.approx(90.0)
    fresh = Memory()
    fresh.restore(None, 4000.0, 100, kept)
    arrivals = poisson(1.0, 3900, 4000, 4)
    early = decide(Observation(4030.0, arrivals, [20.0, 30.0], 100), POLICY, fresh)
    assert early.reason != REASON_NO_DATA
    assert early.refill_time == pytest.approx(90.0 + POLICY.refill_overhead, abs=0.01)
    p99 = kept["refillP99Seconds"]
    assert isinstance(p99, float)
    late = decide(
        Observation(4000.0 + p99 + 1, arrivals, [20.0, 30.0], 100),
        POLICY,
        fresh,
    )
    assert late.refill_time == pytest.approx(25.0 + POLICY.refill_overhead, abs=0.01)


def test_a_restart_keeps_the_allowance_correction_and_the_stretch() -> None:
    """The feedback's state (the allowance relaxed by a realised share above the target, the
    scale-down window stretched after misses) was lost with the process: a restart went back
    to the unrelaxed target and the unstretched window."""
    before = learnt([30.0] * 10)
    before.allowance_scale, before.hold = 1.7, 4.0
    fresh = Memory()
    fresh.restore(None, 4000.0, 50, before.estimates())
    assert (fresh.allowance_scale, fresh.hold) == (1.7, 4.0)
    # a kept value outside this policy's bounds is brought within them
    other = Memory()
    other.restore(None, 4000.0, 50, {**before.estimates(), "allowanceScale": 9.0})
    decide(Observation(4001.0, [3999.0], [], 50), POLICY, other)
    assert other.allowance_scale == POLICY.feedback_max


@pytest.mark.parametrize(
    "broken",
    [
        {"refillMeanSeconds": "90", "refillP99Seconds": 180.0},
        {"refillMeanSeconds": -1.0, "refillP99Seconds": 180.0},
        {"refillMeanSeconds": 0.0, "refillP99Seconds": 180.0},
        {"refillMeanSeconds": math.nan, "refillP99Seconds": 180.0},
        {"refillMeanSeconds": True, "refillP99Seconds": 180.0},
        {"refillMeanSeconds": 90.0},
        [90.0, 180.0],
        None,
    ],
)
def test_a_kept_refill_time_that_is_not_valid_is_measured_again(broken: object) -> None:
    fresh = Memory()
    fresh.restore(None, 4000.0, 10, broken)  # type: ignore[arg-type]
    assert fresh.refill_mean is None and fresh.refill_until is None
    d = decide(Observation(4001.0, [3999.0], [], 10), POLICY, fresh)
    assert d.reason == REASON_NO_DATA


def test_parse_estimates_keeps_what_is_in_bounds_only() -> None:
    got = parse_estimates(
        {
            "refillMeanSeconds": 12.5,
            "refillP99Seconds": 30,
            "refillKappa": 2.0,  # above 1: left out
            "allowanceScale": -1,  # below 0: left out
            "scaleDownStretch": 0.5,  # below 1: left out
            "other": 3,
        }
    )
    assert got == {"refillMeanSeconds": 12.5, "refillP99Seconds": 30.0}


def test_the_status_keeps_the_estimates_and_a_pass_without_them_carries_them_over() -> None:
    ok = (TRUE, "R", "m")
    kept = {"refillMeanSeconds": 90.0, "refillP99Seconds": 180.0, "allowanceScale": 1.2}
    out, _ = build_status({}, StatusInput(1, 4, None, ok, ok, estimates=kept), "now")
    assert out["estimates"] == kept
    again, _ = build_status(out, StatusInput(1, 4, None, ok, ok), "now")
    assert again["estimates"] == kept


def test_the_simulated_restart_hands_the_estimates_to_the_new_process() -> None:
    """The simulator's restart goes through the status, as the controller's does: the new
    process starts from the estimates the old one had."""
    trace = traces.Trace("regular", [i * 2.0 for i in range(600)], 60.0, 1200.5)
    sim = Simulation(Config(trace, Fixed(5.0), warmup=300.0, restarts=(1200.0,)))
    sim.run()
    assert sim.informed is not None
    assert sim.informed.estimates is not None
    assert sim.informed.estimates["refillMeanSeconds"] == pytest.approx(5.0, abs=0.01)
    assert sim.memory.refill_mean == pytest.approx(5.0, abs=0.01)


def test_kept_rises_that_are_not_valid_are_left_out() -> None:
    """The bursts' rises come from the status, which any writer of it may have changed: what is
    not a rise (not a mapping, no finite start, a start in the future) is left out, an end
    before its start is dropped, and at most the latest twelve are kept, in order."""
    kept = [
        {"start": 300.0, "end": 310.0},
        "not a rise",
        {"start": 100.0},
        {"start": math.inf},
        {"start": True},
        {"start": 5000.0},  # after now
        {"start": 200.0, "end": 150.0},  # ends before it starts: the end dropped
        {"end": 20.0},
    ]
    rises = parse_rises(kept, 4000.0)
    assert [(r.start, r.end) for r in rises] == [(100.0, None), (200.0, None), (300.0, 310.0)]
    many = [{"start": float(i), "end": float(i) + 1} for i in range(30)]
    assert [r.start for r in parse_rises(many, 4000.0)] == [float(i) for i in range(18, 30)]
    assert parse_rises({"start": 1.0}, 4000.0) == []
    fresh = Memory()
    fresh.restore(None, 4000.0, 5, {"burstRises": kept})
    assert [r.start for r in fresh.bursts.rises] == [100.0, 200.0, 300.0]


def test_the_rises_are_written_rounded_and_only_while_there_are_some() -> None:
    memory = Memory()
    assert "burstRises" not in memory.estimates()
    memory.bursts.rises = [Rise(100.04, 115.96), Rise(700.0)]
    assert memory.estimates()["burstRises"] == [{"start": 100.0, "end": 116.0}, {"start": 700.0}]
