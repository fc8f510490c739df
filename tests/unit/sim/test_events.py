"""The simulator's scenario events (restart, clock skew, never-Ready members), the gzipped CSV
replay, and the replay command the out-of-sample evaluation runs."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import pytest

from agentsandbox.controllers.autoscaler.plan import Policy
from agentsandbox.sim import latency, traces
from agentsandbox.sim.__main__ import main
from agentsandbox.sim.engine import EPOCH, Config, Simulation, simulate
from agentsandbox.sim.report import HEADER
from tests.unit.latencies import Fixed

KEY = "sim/pool/pool"
POOL = "sim/pool"


def regular(start: float, stop: float, every: float, duration: float) -> traces.Trace:
    times: list[float] = []
    t = start
    while t < stop:
        times.append(t)
        t += every
    return traces.Trace("regular", times, 120.0, duration)


def test_restart_relists_live_claims_and_takes_back_the_kept_window() -> None:
    # a claim every 10 s from 0 to 590 s, each held 120 s after it is served (Ready in 1 s:
    # every claim but the first few is warm); the controller restarts at 600.05 s
    trace = regular(0.0, 600.0, 10.0, 600.1)
    cfg = Config(trace, Fixed(1.0), warmup=300.0, restarts=(600.05,))
    sim = Simulation(cfg)
    result = sim.run()
    assert result.restarts == 1
    assert sim.informed is not None
    # the first pass after the restart: the current size held as a recommendation, and one
    # of its own on the refill time the status kept (the relisted members are not measured;
    # the kept one is used until one kept p99 has passed)
    assert len(sim.memory.recommendations) == 2
    assert sim.memory.recommendations[0] == (sim.memory.recommendations[1][0], sim.replicas)
    assert sim.memory.refill_mean == pytest.approx(1.0, abs=0.01)
    assert sim.memory.refill_until == pytest.approx(600.05 + sim.memory.refill_p99, abs=0.01)
    # the relist shows the claims alive at 600.05 s: created after 600.05 - 120 - latency
    seen = sim.informed.windows.arrivals_for([KEY])
    assert seen and min(seen) - EPOCH >= 470.0
    # the window the previous process kept in the status comes back: every claim of it
    assert sim.memory.restored is not None
    assert sum(sim.memory.restored.claims) == len(trace.arrivals)
    assert sim.memory.first_seen == 0.0
    # without the restart the window holds every claim of the last 600 s
    kept = Simulation(Config(trace, Fixed(1.0), warmup=300.0, informed=True))
    kept.run()
    assert kept.informed is not None
    assert len(kept.informed.windows.arrivals_for([KEY])) == len(trace.arrivals)
    assert len(kept.memory.recommendations) > 2


def test_after_a_restart_only_members_created_since_are_measured() -> None:
    # members Ready 1 s after creation; the relist at the restart shows members the new process
    # did not see created: they give no sample. Those created after it are timed on the
    # controller's clock: 1 s exactly, not whole seconds of timestamps
    trace = regular(0.0, 900.0, 10.0, 900.1)
    sim = Simulation(Config(trace, Fixed(1.0), warmup=300.0, restarts=(600.05,)))
    sim.run()
    assert sim.informed is not None
    after = sim.informed.windows.refills[POOL]
    assert len(after) >= 25  # a replacement for each claim since the restart
    assert all(when - EPOCH > 600.05 for when, _ in after)
    assert [s for _, s in after] == pytest.approx([1.0] * len(after))


def test_restart_before_the_warmup_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = regular(0.0, 600.0, 10.0, 1200.0)
    with pytest.raises(ValueError, match="not after the warm-up"):
        Config(trace, Fixed(1.0), warmup=300.0, restarts=(200.0,))
    csv = tmp_path / "c.csv"
    csv.write_text("\n".join(str(t) for t in trace.arrivals))
    with pytest.raises(SystemExit) as exit_:
        main(["--csv", str(csv), "--warmup", "300", "--restart-at", "100", "--no-plot"])
    assert exit_.value.code == 2
    assert "must fall after the warm-up" in capsys.readouterr().err


def test_skew_minus_1_5_with_0_3s_refills_measures_every_refill() -> None:
    # the controller's clock 1.5 s behind the API server's: the refills are timed on the
    # controller's clock alone (watch event to watch event), as without skew
    trace = traces.steady(seed=1, rate=0.5, duration=900)
    skewed = Simulation(Config(trace, Fixed(0.3), warmup=300.0, skew=-1.5))
    result = skewed.run()
    plain = Simulation(Config(trace, Fixed(0.3), warmup=300.0, informed=True))
    plain.run()
    assert skewed.informed is not None and plain.informed is not None
    measured = skewed.informed.windows.refills_for(POOL)
    assert measured and all(abs(s - 0.3) < 1e-6 for s in measured)
    assert len(measured) == len(plain.informed.windows.refills_for(POOL))
    assert result.reasons.get("NoData", 0) <= 1


@pytest.mark.parametrize("skew", [3.0, -3.0])
def test_skew_leaves_the_refill_samples_and_the_pool_size_as_without(skew: float) -> None:
    """Autoscaler review finding 11: a controller clock 3 s off the API server's, steady
    traffic and the local refills: the windows measure the refills as without skew, and the
    autoscaled pool is the same size."""
    trace = traces.steady(seed=3, rate=0.5, duration=1800)
    plain = Simulation(Config(trace, latency.LOCAL, warmup=600.0, informed=True))
    expected = plain.run()
    skewed = Simulation(Config(trace, latency.LOCAL, warmup=600.0, skew=skew))
    result = skewed.run()
    assert plain.informed is not None and skewed.informed is not None
    baseline = plain.informed.windows.refills_for(POOL)
    measured = skewed.informed.windows.refills_for(POOL)
    assert len(baseline) > 100
    assert len(measured) == pytest.approx(len(baseline), abs=3)  # the window ends skew later
    assert sum(measured) / len(measured) == pytest.approx(sum(baseline) / len(baseline), abs=0.02)
    assert result.mean_pool == pytest.approx(expected.mean_pool, abs=0.25)
    assert result.max_replicas == expected.max_replicas


def test_claims_seen_by_the_watch_are_timed_on_the_controllers_clock() -> None:
    """Autoscaler review finding 11: a claim the watch shows as it is created is timed by this
    process's first sight, whatever the API server's clock says (its creationTimestamp, whole
    seconds, would group the claims of one second and shift them by the skew)."""
    trace = regular(0.5, 600.0, 10.0, 600.1)
    sim = Simulation(Config(trace, Fixed(1.0), warmup=300.0, skew=3.0))
    sim.run()
    assert sim.informed is not None
    seen = [t - EPOCH for t in sim.informed.windows.arrivals_for([KEY])]
    # the controller's clock is 3 s ahead; the window ends at its now
    expected = [t + 3.0 for t in trace.arrivals if t + 3.0 >= 600.1 + 3.0 - 1800.0]
    assert seen == pytest.approx(expected, abs=1e-5)
    bins = sim.informed.windows.bins_for([KEY])
    assert sum(bins.claims) == len(expected) and sum(bins.squares) == len(expected)  # no groups


def test_min_replicas_0_on_sparse_traffic_serves_claims_warm_after_the_warmup() -> None:
    """Autoscaler review finding 4: a pool autoscaled from minReplicas 0 on sparse claims (the
    sparse-min-0 scenarios: Poisson 0.01-0.02/s) bootstraps a sandbox, measures its refill and
    serves claims warm after the warm-up (it stayed at 0, every claim cold)."""
    trace = traces.steady(seed=4, rate=0.02, duration=7200)
    policy = Policy(min_replicas=0, max_replicas=2000, target_warm_share=0.99)
    result = simulate(Config(trace, latency.LOCAL, policy=policy, warmup=3600.0))
    assert result.claims > 40
    assert result.warm_share > 0.5
    assert result.creates >= 1


def test_never_ready_serves_no_claim_warm_and_replaces_stuck_members() -> None:
    trace = traces.steady(seed=2, rate=0.2, duration=1500)
    result = simulate(Config(trace, latency.LOCAL, warmup=300.0, never_ready=True))
    assert result.claims_all > 100
    assert result.warm_all == 0
    assert result.deletes_before_ready >= 4  # one stuck member replaced every 300 s
    static = simulate(Config(trace, latency.LOCAL, static=5, warmup=300.0, never_ready=True))
    assert static.warm_all == 0
    assert all(ready == 0 for _, _, _, ready in static.series)


def test_never_ready_members_trip_the_breaker_and_the_size_stops_growing() -> None:
    """Autoscaler review finding 14: the pool was healthy (a refill time is remembered, 2 s),
    then its members stop becoming Ready while the claim rate rises from 0.2/s to 2/s. Once
    the oldest not-Ready member is older than the breaker's limit the desired size never grows
    again (without the breaker it follows the rate on the remembered refill time)."""
    slow = traces.steady(seed=3, rate=0.2, duration=300)
    fast = traces.steady(seed=4, rate=2.0, duration=600)
    arrivals = slow.arrivals + [300.0 + t for t in fast.arrivals]
    trace = traces.Trace("step", arrivals, 120.0, 900.0)
    sim = Simulation(Config(trace, Fixed(2.0), warmup=0.0, never_ready=True))
    sim.memory.refill_mean, sim.memory.refill_p99 = 2.0, 2.0
    sim.memory.refill_sorted = [2.0] * 50
    result = sim.run()
    assert result.warm_all == 0
    assert result.reasons.get("MembersNeverReady", 0) > 0
    trip = sim.memory.breaker_since
    assert trip is not None and trip < 300.0
    at_trip = next(r for t, r, _, _ in result.series if t >= trip)
    assert max(r for t, r, _, _ in result.series if t >= trip) <= at_trip


def test_gzipped_csv_reads_the_same_as_plain(tmp_path: Path) -> None:
    text = "created\n" + "".join(f"{t + 100:.3f}\n" for t in (0.0, 1.5, 1.5, 7.25))
    plain = tmp_path / "c.csv"
    plain.write_text(text)
    packed = tmp_path / "c.csv.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    a, b = traces.from_csv(plain), traces.from_csv(packed)
    assert a.arrivals == b.arrivals == [0.0, 1.5, 1.5, 7.25]
    assert a.duration == b.duration


def test_replay_command_with_the_evaluation_flags_prints_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = traces.steady(seed=5, rate=0.1, duration=900)
    csv = tmp_path / "c.csv"
    csv.write_text("\n".join(f"{t:.3f}" for t in trace.arrivals))
    out = tmp_path / "out"
    argv = ["--csv", str(csv), "--latency", "both", "--hours", "0.25", "--target", "0.9"]
    argv += ["--warmup", "200", "--no-plot", "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert HEADER in text
    assert "| local | autoscaled |" in text and "| lognormal 90s | autoscaled |" in text
    assert "figures after a 3.33333 min warm-up" in text
    assert (out / "csv-c.csv.json").exists() and not (out / "csv-c.csv.png").exists()


def test_a_pool_held_at_the_static_size_serves_every_claim_as_the_static_pool_does() -> None:
    """Common random numbers: the autoscaled pool starts at 1 and is capped at 3, so it makes
    other creates than the static pool of 3 while it grows (before the warm-up ends), then holds
    3. From then on both runs draw the same refill time for the same adoption and the same cold
    start for the same claim, so the paired comparison shows no difference made by the draws
    alone (with one stream of draws consumed in order, the growth's creates shifted every later
    draw, and the runs differed by chance)."""
    rng = random.Random(7)
    times = traces.poisson(lambda t: 1.5, 1.5, 5400.0, rng)
    trace = traces.Trace("steady", times, 120.0, 5400.0)
    capped = Policy(min_replicas=1, max_replicas=3, target_warm_share=0.99)
    auto = simulate(Config(trace, latency.LOCAL, policy=capped, warmup=1800.0))
    static = simulate(Config(trace, latency.LOCAL, static=3, warmup=1800.0))
    assert auto.series[0][1] == 1 and static.series[0][1] == 3
    held = [replicas for t, replicas, _, _ in auto.series if t >= 900.0]
    assert held and set(held) == {3}, "the autoscaled pool holds 3 long before the warm-up ends"
    assert 0 < static.warm < static.claims
    assert (auto.warm, auto.claims) == (static.warm, static.claims)
    assert auto.idle_seconds == pytest.approx(static.idle_seconds, abs=1e-6)
