"""bench/autoscale/realisations.py: a scenario replayed on other realisations of its trace's
process. The searches for the fixed sizes that would meet the goal, the best fixed size, the
seeds (never a set's), and one short realisation run end to end."""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

AUTOSCALE = Path(__file__).resolve().parents[3] / "bench" / "autoscale"


@pytest.fixture(scope="module")
def rz() -> ModuleType:
    if str(AUTOSCALE) not in sys.path:
        sys.path.insert(0, str(AUTOSCALE))
    return importlib.import_module("realisations")


class Curve:
    """Stands in for :class:`realisations.Sizes`: warm share and idle seconds per size."""

    def __init__(self, warm: dict[int, float], idle_per_member: float = 100.0) -> None:
        self.warm = warm
        self.idle_per_member = idle_per_member
        self.asked: list[int] = []

    def __call__(self, n: int) -> tuple[float, float]:
        self.asked.append(n)
        w = max((v for k, v in self.warm.items() if k <= n), default=0.0)
        return w, n * self.idle_per_member


def test_lowest_is_the_smallest_size_reaching_the_warm_share(rz: ModuleType) -> None:
    curve = Curve({100: 0.97, 108: 0.984, 109: 0.985, 112: 0.99})
    assert rz.lowest(curve, 0.985, 112) == 109
    assert rz.lowest(curve, 0.99, 112) == 112  # the start itself when nothing below reaches it
    assert rz.lowest(Curve({1: 0.999}), 0.985, 30) == 1  # never below one member


def test_highest_is_the_largest_size_within_the_idle_allowance(rz: ModuleType) -> None:
    curve = Curve({1: 1.0})
    assert rz.highest(curve, 1.05 * 118 * 100, 118) == 123  # 123 x 100 <= 12 390 < 124 x 100
    assert rz.highest(curve, 118 * 100, 118) == 118


def test_the_best_fixed_size_is_the_one_most_realisations_allow(rz: ModuleType) -> None:
    def entry(lo: int, hi: int, met: bool, static: int) -> dict[str, Any]:
        return {
            "goal": {"met": met, "warm_ok": True},
            "fixed_sizes_meeting": [lo, hi],
            "static_size": static,
            "idle_ratio": 1.0,
        }

    s = rz.summarise(
        [entry(110, 118, True, 114), entry(115, 125, False, 120), entry(119, 130, True, 125)]
    )
    assert s["realisations"] == 3
    assert s["autoscaler_met"] == 2
    assert s["best_fixed_met"] == 2
    assert s["best_fixed_sizes"] == [115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125]
    assert s["fixed_met_by_size"]["110"] == 1 and s["fixed_met_by_size"]["130"] == 1
    assert s["hindsight_static_size"] == {"min": 114, "median": 120, "max": 125}


def test_no_realisation_has_the_seed_of_a_trace_of_either_set(rz: ModuleType) -> None:
    traces = importlib.import_module("scenarios").load_traces()
    spec = traces["held14-grouped-8"]
    r = rz.realisation(spec, 3)
    assert r.seed == rz.SEED_BASE + 3 and r.parts == spec.parts and r.name != spec.name
    assert max(t.seed for t in traces.values()) < rz.SEED_BASE


def test_a_realisation_is_judged_and_its_fixed_sizes_found(rz: ModuleType, tmp_path: Path) -> None:
    sc = importlib.import_module("scenarios")
    traces = sc.load_traces()
    s = next(x for x in sc.load_set("tuning", traces) if x.name == "steady-a")
    trace = dataclasses.replace(traces[s.trace], duration=2 * 3600.0)
    s = dataclasses.replace(s, warmup=1800.0)
    e = rz.run_one(s, trace, 0, "local", tmp_path)
    lo, hi = e["fixed_sizes_meeting"]
    assert e["seed"] == rz.SEED_BASE and e["goal"]["met"] is not None
    assert lo <= e["static_size"] <= hi
    tried = {int(n): v for n, v in e["fixed_sizes_tried"].items()}
    assert tried[lo][0] >= s.target - 0.005 and (
        lo - 1 not in tried or tried[lo - 1][0] < s.target - 0.005
    )
    assert tried[hi][1] <= 1.05 * e["static"]["idle_sandbox_seconds"] < tried[hi + 1][1]


def test_the_results_of_a_run_are_not_written_into_bench(
    rz: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        rz.main(["--only", "grouped-8", "--count", "1", "--out", str(AUTOSCALE / "x")])
    assert "are not committed; write them under build/" in capsys.readouterr().err
    assert not (AUTOSCALE / "x").exists()


def test_only_takes_names_and_shell_patterns_in_the_sets_order(rz: ModuleType) -> None:
    names = ["steady-a", "r1-grouped-8", "r1-grouped-32", "r2-grouped-32", "r12-grouped-32"]
    assert rz.chosen_names(["r*-grouped-32"], names) == (
        ["r1-grouped-32", "r2-grouped-32", "r12-grouped-32"],
        [],
    )
    assert rz.chosen_names(["r1-grouped-8", "steady-a"], names) == (
        ["steady-a", "r1-grouped-8"],
        [],
    )
    assert rz.chosen_names(["r9-*", "steady-a"], names) == (["steady-a"], ["r9-*"])


def test_judge_only_skips_the_fixed_sizes_and_the_summary_says_so(
    rz: ModuleType, tmp_path: Path
) -> None:
    sc = importlib.import_module("scenarios")
    traces = sc.load_traces()
    s = next(x for x in sc.load_set("tuning", traces) if x.name == "steady-a")
    trace = dataclasses.replace(traces[s.trace], duration=2 * 3600.0)
    s = dataclasses.replace(s, warmup=1800.0)
    e = rz.run_one(s, trace, 1, "local", tmp_path, fixed=False)
    assert e["goal"]["met"] is not None and e["static_size"] is not None
    assert "fixed_sizes_meeting" not in e and "fixed_sizes_tried" not in e
    summary = rz.summarise([e])
    assert summary["realisations"] == 1
    assert summary["best_fixed_met"] is None and summary["best_fixed_sizes"] is None


def test_the_pooled_line_adds_the_scenarios_per_refill(rz: ModuleType) -> None:
    def summary(latency: str, met: int, warm_ok: int, n: int) -> dict[str, Any]:
        return {
            "latency": latency,
            "autoscaler_met": met,
            "autoscaler_warm_ok": warm_ok,
            "realisations": n,
        }

    assert rz.pooled_counts(
        [summary("local", 5, 5, 5), summary("lognormal 90s", 3, 4, 5), summary("local", 4, 5, 5)]
    ) == {"local": (9, 10, 10), "lognormal 90s": (3, 4, 5)}


def test_a_pattern_that_selects_no_scenario_is_refused(
    rz: ModuleType, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit):
        rz.main(["--set", "tuning", "--only", "r99-*", "--out", str(tmp_path)])
    assert "no such scenario in the tuning set: r99-*" in capsys.readouterr().err


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_judge_only_run_writes_the_pooled_counts(
    rz: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, jobs: int
) -> None:
    """main() end to end, each realisation stood in for: with one job and with a pool of
    processes (whose name once shadowed the pooling function)."""

    def judged(
        s: Any,
        trace: Any,
        i: int,
        latency: str,
        out: Path,
        fixed: bool = True,
        hours: float | None = None,
    ) -> dict[str, Any]:
        assert not fixed and hours is None
        return {
            "scenario": s.name,
            "trace": s.trace,
            "latency": "local",
            "realisation": i,
            "goal": {"met": i % 2 == 0, "warm_ok": True},
            "static_size": 5,
            "idle_ratio": 1.0,
            "autoscaled": {"warm_share": 0.99},
            "static": {"warm_share": 0.99},
        }

    monkeypatch.setattr(rz, "run_one", judged)
    monkeypatch.setattr(rz.evaluate, "summary_line", lambda e: e["scenario"])
    argv = ["--set", "tuning", "--only", "r1-grouped-*", "--count", "3", "--latency", "local"]
    argv += ["--judge-only", "--jobs", str(jobs), "--out", str(tmp_path)]
    assert rz.main(argv) == 0
    written = json.loads((tmp_path / "realisations.json").read_text())
    assert [s["scenario"] for s in written["summaries"]] == [
        "r1-grouped-4",
        "r1-grouped-8",
        "r1-grouped-32",
    ]
    assert written["pooled"] == {
        "local": {"autoscaler_met": 6, "autoscaler_warm_ok": 9, "realisations": 9}
    }


def test_a_longer_realisation_is_the_same_draw_drawn_longer(rz: ModuleType) -> None:
    traces = importlib.import_module("scenarios").load_traces()
    spec = traces["held14-grouped-8"]
    short, long = rz.realisation(spec, 3), rz.realisation(spec, 3, 12.0)
    assert long.seed == short.seed and long.parts == short.parts
    assert long.duration == 12 * 3600.0 and short.duration == spec.duration
    assert long.name != short.name  # its own CSV


def test_only_stationary_scenarios_are_drawn_longer(
    rz: ModuleType, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A stationary trace's parts hold all the way through, so a longer draw is more of the same
    process; a step's or a burst's parts are placed in time, and a longer draw is another shape."""
    sc = importlib.import_module("scenarios")
    traces = sc.load_traces()
    tuning = {s.name: s for s in sc.load_set("tuning", traces)}
    grouped = tuning["r1-grouped-32"]
    assert rz.lengthened(grouped, traces[grouped.trace], 12.0) is None
    assert "warm-up" in rz.lengthened(grouped, traces[grouped.trace], 0.5)
    steps = tuning["r1-steps-x2"]
    assert "not stationary" in rz.lengthened(steps, traces[steps.trace], 12.0)
    timed = dataclasses.replace(traces[grouped.trace], parts=({"kind": "poisson", "end": 60},))
    assert "placed in time" in rz.lengthened(grouped, timed, 12.0)
    with pytest.raises(SystemExit):
        rz.main(
            ["--set", "tuning", "--only", "r1-steps-x2", "--hours", "12", "--out", str(tmp_path)]
        )
    assert "--hours: r1-steps-x2 is not stationary" in capsys.readouterr().err


def test_hours_reach_every_realisation_and_the_report(
    rz: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    asked: list[float | None] = []

    def judged(*args: Any) -> dict[str, Any]:
        s, _, i, *_, hours = args
        asked.append(hours)
        return {
            "scenario": s.name,
            "trace": s.trace,
            "latency": "local",
            "realisation": i,
            "goal": {"met": True, "warm_ok": True},
            "static_size": 5,
            "idle_ratio": 1.0,
        }

    monkeypatch.setattr(rz, "run_one", judged)
    monkeypatch.setattr(rz.evaluate, "summary_line", lambda e: e["scenario"])
    argv = ["--set", "tuning", "--only", "r1-grouped-8", "--count", "2", "--latency", "local"]
    assert rz.main([*argv, "--judge-only", "--hours", "12", "--out", str(tmp_path)]) == 0
    assert asked == [12.0, 12.0]
    assert json.loads((tmp_path / "realisations.json").read_text())["hours"] == 12.0
