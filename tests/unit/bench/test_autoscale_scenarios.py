"""The autoscaler's evaluation scenarios (bench/autoscale): the files parse, the evaluation set
covers every required kind and is held out from the tuning set, every event falls after the
warm-up, the traces are generated deterministically, and the goal rule."""

from __future__ import annotations

import dataclasses
import gzip
import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

AUTOSCALE = Path(__file__).resolve().parents[3] / "bench" / "autoscale"
FAMILIES = (
    "steady",
    "steps",
    "diurnal",
    "bursts",
    "grouped",
    "quiet-then-burst",
    "restart",
    "skew",
    "min-replicas-0",
    "never-ready",
)


def _module(name: str) -> ModuleType:
    if str(AUTOSCALE) not in sys.path:
        sys.path.insert(0, str(AUTOSCALE))
    return importlib.import_module(name)


@pytest.fixture(scope="module")
def sc() -> ModuleType:
    return _module("scenarios")


@pytest.fixture(scope="module")
def mt() -> ModuleType:
    return _module("make_traces")


def test_scenario_files_parse(sc: ModuleType) -> None:
    traces = sc.load_traces()
    for which in ("tuning", "evaluation"):
        scenarios = sc.load_set(which, traces)
        assert len(scenarios) >= 12, which
        for s in scenarios:
            assert s.trace in traces
            assert s.warmup == 3600
            assert 3 * 3600 <= traces[s.trace].duration <= 12 * 3600, s.name


def test_a_trace_longer_than_six_hours_is_a_stationary_process(sc: ModuleType) -> None:
    """Only a process whose parts are not placed in time may run past 6 h (round 14's held-out
    stationary rows last 12 h); a shape placed in time keeps the length it was designed for."""
    long = {n: t for n, t in sc.load_traces().items() if t.duration > 6 * 3600}
    assert long, "no trace is longer than 6 h"
    for name, trace in long.items():
        placed = [p for p in trace.parts if {"start", "end", "at"} & set(p)]
        assert not placed, (name, placed)


def test_evaluation_set_covers_every_required_kind(sc: ModuleType) -> None:
    tags = {t for s in sc.load_set("evaluation") for t in s.tags}
    missing = [t for t in sc.REQUIRED_EVALUATION_TAGS if t not in tags]
    assert not missing


def test_both_sets_cover_every_family(sc: ModuleType) -> None:
    for which in ("tuning", "evaluation"):
        tags = {t for s in sc.load_set(which) for t in s.tags}
        assert set(FAMILIES) <= tags, which


def test_evaluation_traces_are_held_out_from_the_tuning_set(sc: ModuleType) -> None:
    traces = sc.load_traces()
    tuning = {traces[s.trace].name for s in sc.load_set("tuning", traces)}
    evaluation = {traces[s.trace].name for s in sc.load_set("evaluation", traces)}
    assert not tuning & evaluation
    assert not {traces[n].seed for n in tuning} & {traces[n].seed for n in evaluation}
    shapes = {repr(traces[n].parts) for n in tuning}
    assert not shapes & {repr(traces[n].parts) for n in evaluation}


def test_every_event_falls_after_the_warmup(sc: ModuleType) -> None:
    traces = sc.load_traces()
    for which in ("tuning", "evaluation"):
        for s in sc.load_set(which, traces):
            assert all(s.warmup < at < traces[s.trace].duration for at in s.restart_at)
    s = sc.load_set("evaluation", traces)[0]
    early = dataclasses.replace(s, restart_at=(s.warmup - 1,))
    with pytest.raises(sc.ScenarioFileError, match="must fall after the warm-up"):
        sc.check([early], traces, "test")
    long_warmup = dataclasses.replace(s, warmup=traces[s.trace].duration / 2)
    with pytest.raises(sc.ScenarioFileError, match="first quarter"):
        sc.check([long_warmup], traces, "test")


def test_trace_generation_is_deterministic(sc: ModuleType, mt: ModuleType, tmp_path: Path) -> None:
    spec = sc.load_traces()["eval-bursts-regular"]
    short = dataclasses.replace(spec, duration=1800.0)
    a = mt.write(short, tmp_path / "a")
    b = mt.write(short, tmp_path / "b")
    assert a.read_bytes() == b.read_bytes()
    za = mt.write(short, tmp_path / "a", gz=True)
    zb = mt.write(short, tmp_path / "b", gz=True)
    assert za.read_bytes() == zb.read_bytes()
    assert gzip.decompress(za.read_bytes()) == a.read_bytes()
    other = mt.arrivals(dataclasses.replace(short, seed=short.seed + 1))
    assert other != mt.arrivals(short)


def test_generated_traces_have_their_shapes(sc: ModuleType, mt: ModuleType) -> None:
    traces = sc.load_traces()
    grouped = mt.arrivals(dataclasses.replace(traces["eval-grouped-32"], duration=3600.0))
    counts: dict[float, int] = {}
    for t in grouped:
        counts[t] = counts.get(t, 0) + 1
    assert max(counts.values()) >= 32  # claims with one creation time
    quiet = mt.arrivals(traces["eval-quiet-burst"])
    assert quiet[0] == 0.0
    assert not [t for t in quiet if 3700 < t < 14_400]  # hours of nothing
    assert sum(1 for t in quiet if 14_400 <= t < 14_410) >= 150


def test_replay_reads_a_generated_trace(sc: ModuleType, mt: ModuleType, tmp_path: Path) -> None:
    from agentsandbox.sim import traces as sim_traces

    spec = dataclasses.replace(sc.load_traces()["eval-steps-x5"], duration=1200.0)
    path = mt.write(spec, tmp_path, gz=True)
    trace = sim_traces.from_csv(path, duration=spec.duration)
    assert trace.arrivals == pytest.approx(mt.arrivals(spec), abs=5e-4)


def test_goal_rule_allows_half_a_point_and_5_percent_idle_on_stationary_traces(
    sc: ModuleType,
) -> None:
    evaluate = _module("evaluate")
    steady = sc.Scenario("s", "t", 3600.0, ("stationary",))
    bursty = sc.Scenario("b", "t", 3600.0, ("bursts",))
    assert evaluate.goal(steady, 0.985, 105.0, 100.0)["met"] is True
    assert evaluate.goal(steady, 0.984, 100.0, 100.0)["met"] is False
    assert evaluate.goal(steady, 0.99, 105.1, 100.0)["met"] is False
    assert evaluate.goal(bursty, 0.99, 100.0, 100.0)["met"] is True
    assert evaluate.goal(bursty, 0.99, 100.1, 100.0)["met"] is False


def _stuck(trips: list[float], sizes: list[int]) -> Any:
    from agentsandbox.sim.engine import Result

    r = Result("autoscaled", "t", "lognormal 90s", None, stuck_since=0.0, breaker_trips=trips)
    r.series = [(10.0 * i, n, n, 0) for i, n in enumerate(sizes)]
    return r


def test_never_ready_goal_is_one_trip_within_three_refill_p99s_and_no_growth_after() -> None:
    evaluate = _module("evaluate")
    limit = 3 * evaluate.refill_p99("lognormal")  # 3 x 181 s
    assert 540 < limit < 546
    assert evaluate.breaker_goal(_stuck([125.0], [1] * 30), "lognormal")["met"] is True
    assert evaluate.breaker_goal(_stuck([125.0], [1] * 20 + [2] * 10), "lognormal")["met"] is False
    assert evaluate.breaker_goal(_stuck([125.0, 200.0], [1] * 30), "lognormal")["met"] is False
    assert evaluate.breaker_goal(_stuck([limit + 1], [1] * 80), "lognormal")["met"] is False
    assert evaluate.breaker_goal(_stuck([], [1] * 30), "lognormal")["met"] is False
    # growth before the trip is not judged: the breaker stops growth, it does not undo it
    assert evaluate.breaker_goal(_stuck([125.0], [1] * 5 + [3] * 25), "lognormal")["met"] is True
    # a local refill's p99 is about a second: three minutes, not three seconds
    assert evaluate.breaker_goal(_stuck([170.0], [1] * 30), "local")["met"] is True
    assert evaluate.breaker_goal(_stuck([185.0], [1] * 30), "local")["met"] is False


def test_the_never_ready_scenario_meets_its_own_goal(sc: ModuleType, tmp_path: Path) -> None:
    evaluate = _module("evaluate")
    traces = sc.load_traces()
    s = next(x for x in sc.load_set("tuning", traces) if x.never_ready)
    csv = evaluate.ensure_trace(traces[s.trace], tmp_path)
    for latency in evaluate.LATENCIES:
        g = evaluate.run_one(s, traces[s.trace], csv, latency, tmp_path, None)["goal"]
        assert g["met"] is True, g
        assert g["trips"] == 1 and g["growth_after_trip"] == 0 and g["tripped_after_s"] < 180


def test_scenario_argv_is_the_replay_command(sc: ModuleType, tmp_path: Path) -> None:
    from agentsandbox.sim.__main__ import parser

    traces = sc.load_traces()
    for s in sc.load_set("evaluation", traces):
        argv = sc.sim_argv(s, traces[s.trace], tmp_path / "x.csv", "both", tmp_path)
        args = parser().parse_args(argv)
        assert args.warmup == s.warmup and args.no_plot and args.target == s.target
        assert args.hours * 3600 == pytest.approx(traces[s.trace].duration)
        assert tuple(args.restart_at) == s.restart_at
        assert (args.skew, args.never_ready, args.min_replicas) == (
            s.skew,
            s.never_ready,
            s.min_replicas,
        )
