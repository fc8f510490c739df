"""The warm-pool simulator: Erlang-B agreement, determinism, traces, CSV replay, the CLI."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path

import pytest

from agentsandbox.controllers.autoscaler.plan import Policy, erlang_b
from agentsandbox.sim import latency, traces
from agentsandbox.sim.__main__ import main
from agentsandbox.sim.compare import smallest_static
from agentsandbox.sim.engine import TICK, Config, simulate


@pytest.mark.parametrize(("size", "tolerance"), [(3, 0.01), (7, 0.01), (10, 0.003)])
def test_constant_rate_poisson_matches_erlang_b(size: int, tolerance: float) -> None:
    """A static pool under Poisson claims is an Erlang loss system: its cold share is
    Erlang-B(N, λ·T), T = the mean time a slot is busy (the draw + the coalescing wait).

    Autoscaler review finding 19: this allowed ±2 points at sizes 3 and 7 (52 % and 92 %
    warm), far from the operating point. Size 10 is Erlang-B's 99.21 % warm. Over seeds 1-10
    of this run the simulator is off Erlang-B by at most 0.67 points at size 3, 0.42 at 7 and
    0.17 at 10 (seed 7, asserted: -0.41, -0.42, -0.10), hence 1 point, 1 point and 0.3."""
    rate = 2.0
    dist = latency.lognormal(median=2.0, sigma=0.3)
    trace = traces.steady(seed=7, rate=rate, duration=6000)
    result = simulate(Config(trace, dist, seed=7, static=size, warmup=120))
    load = rate * (dist.mean() + TICK / 2)
    expected = 1 - erlang_b(size, load)
    assert result.claims > 10_000
    assert abs(result.warm_share - expected) <= tolerance, (result.warm_share, expected)


def test_compact_view_decides_as_the_whole_pool() -> None:
    """``check_view`` plans every hidden-member reconcile on the whole pool too and asserts the
    same creates, stuck deletions and requeue; a long-tailed latency makes some stuck."""
    trace = traces.steady(seed=3, rate=1.0, duration=1500)
    dist = latency.lognormal(median=60.0, sigma=1.2)  # ~0.5 % past the 300 s grace period
    result = simulate(Config(trace, dist, static=80, warmup=0, check_view=True))
    assert result.plan_calls > 500
    assert result.deletes > 0  # stuck sandboxes were replaced


def test_fixed_seed_is_deterministic() -> None:
    trace = traces.burst(seed=3, duration=3600)
    cfg = Config(trace, latency.lognormal(20.0, 0.3), seed=3, warmup=600)
    a, b = simulate(cfg), simulate(cfg)
    assert (a.warm, a.claims, a.idle_seconds, a.series, a.latencies, a.reasons) == (
        b.warm,
        b.claims,
        b.idle_seconds,
        b.series,
        b.latencies,
        b.reasons,
    )
    assert traces.burst(seed=3, duration=3600).arrivals == trace.arrivals
    other = simulate(dataclasses.replace(cfg, seed=4))
    assert other.latencies != a.latencies or other.idle_seconds != a.idle_seconds


def test_traces_have_their_shapes() -> None:
    burst = traces.burst(seed=1, duration=3600)
    # marks at 5 .. 55 min, and about half of the one at 60 min
    assert 11 * 200 + 70 < len(burst.arrivals) < 11 * 200 + 130
    for t in burst.arrivals:
        mark = round(t / 300) * 300
        assert abs(t - mark) <= 30
    assert burst.dwell == 600
    day = traces.diurnal(seed=1)
    night = sum(1 for t in day.arrivals if t < 3600)
    noon = sum(1 for t in day.arrivals if 41_400 <= t < 45_000)
    assert 0.1 * 3600 * 0.8 < night < 0.3 * 3600
    assert 4.8 * 3600 < noon < 5.2 * 3600
    assert day.dwell == 120
    assert day.arrivals == sorted(day.arrivals)


def test_csv_replay(tmp_path: Path) -> None:
    path = tmp_path / "claims.csv"
    path.write_text(
        "created,who\n"
        "1000.5,a\n"
        "1000.0,b\n"
        "# a comment\n"
        "\n"
        "2027-01-01T00:00:10Z,c\n"
        "2027-01-01T00:00:00Z,d\n"
    )
    trace = traces.from_csv(path, dwell=30)
    base = 1000.0
    stamp = 1798761600.0  # 2027-01-01T00:00:00Z
    assert trace.arrivals[:2] == [0.0, 0.5]
    assert trace.arrivals[2:] == [stamp - base, stamp + 10 - base]
    assert trace.dwell == 30
    bad = tmp_path / "bad.csv"
    bad.write_text("1\nsoon\n")
    with pytest.raises(ValueError, match="not a time"):
        traces.from_csv(bad)

    steady = traces.steady(seed=2, rate=0.5, duration=1800)
    replay = tmp_path / "steady.csv"
    replay.write_text("".join(f"{t + 5000:.6f}\n" for t in steady.arrivals))
    loaded = traces.from_csv(replay, duration=1800)
    assert loaded.arrivals == pytest.approx([t - steady.arrivals[0] for t in steady.arrivals])
    result = simulate(Config(loaded, latency.LOCAL, static=2, warmup=0))
    assert result.claims == len(steady.arrivals)
    assert result.warm_share > 0.9


def test_cli_csv_writes_table_json_and_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = traces.steady(seed=5, rate=0.2, duration=900)
    csv = tmp_path / "c.csv"
    csv.write_text("\n".join(str(t) for t in trace.arrivals))
    out = tmp_path / "out"
    code = main(["--csv", str(csv), "--latency", "local", "--static", "2", "--out", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "| local | autoscaled |" in text and "| local | static 2 |" in text
    data = json.loads((out / "csv-c.csv.json").read_text())
    [cmp] = data["comparisons"]
    assert cmp["static_size"] == 2 and cmp["autoscaled"]["claims"] > 0
    assert (out / "csv-c.csv.png").stat().st_size > 10_000


def test_static_search_finds_the_smallest_size() -> None:
    trace = traces.steady(seed=9, rate=0.5, duration=3600)
    cfg = Config(trace, latency.lognormal(8.0, 0.3), seed=9, warmup=300)
    size, result, tried = smallest_static(cfg, 0.95, hint=12)
    assert size is not None and result is not None
    assert tried[size] >= 0.95
    assert tried[size - 1] < 0.95
    # Erlang-B says about the same
    load = 0.5 * (cfg.latency.mean() + TICK / 2)
    assert abs(size - min(n for n in range(50) if 1 - erlang_b(n, load) >= 0.95)) <= 1


def test_autoscaled_pool_grows_for_bursts_and_costs_less() -> None:
    """Bursts of 50 claims every 5 minutes, 30 s refills, target 99 %. Autoscaler review
    finding 19: this accepted 98 % warm; the goal is the target less half a point, 98.5 %
    (99.44 % here; 99.33 to 99.56 % over burst seeds 1-6). This trace is of the tuning set's
    burst shape, so it is no evidence on held-out shapes: the review-era code met it too."""
    trace = traces.burst(seed=1, duration=2 * 3600, size=50)
    dist = latency.lognormal(30.0, 0.3)
    policy = Policy(min_replicas=1, max_replicas=500, target_warm_share=0.99)
    auto = simulate(Config(trace, dist, policy=policy, warmup=1800))
    static = simulate(Config(trace, dist, static=50, warmup=1800))
    assert auto.warm_share >= 0.985, auto.warm_share
    assert auto.idle_seconds < 0.8 * static.idle_seconds
    sizes = [replicas for _, replicas, _, _ in auto.series]
    moves = list(itertools.pairwise(sizes))
    # it grew for the bursts (and, having missed the first one, holds what they need)
    assert sum(1 for a, b in moves if b > a) >= 5
    assert math.isclose(auto.measured_seconds, trace.duration - 1800)
