"""The report pages' generated tables match the committed data in ``bench/results/``.

``docs/benchmarks.md``, ``docs/reliability.md`` and ``docs/autoscaling.md`` hold their figures
between ``<!-- generated: NAME -->`` and ``<!-- end -->``; ``bench/report.py`` renders them from
the JSON the bench scripts write. A doc edited by hand, or data committed without regenerating,
fails here. (That the renderers read what the scripts really write is checked against smoke runs
in ``tests/integration/test_bench_smoke.py``.)
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "bench"


@pytest.fixture(scope="module")
def report() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    return importlib.import_module("report")


def test_the_docs_match_the_committed_data(report: Any) -> None:
    problems = report.check()
    assert not problems, "run `python bench/report.py --write`:\n" + "\n".join(problems)


def test_a_figure_edited_by_hand_is_drift(report: Any) -> None:
    text = (ROOT / "docs" / "autoscaling.md").read_text()
    block = report.render("sim-burst")
    first_row = next(line for line in block.splitlines() if line.startswith("| local |"))
    edited = first_row.replace("| autoscaled | ", "| autoscaled | 1", 1)  # a warm share
    assert edited != first_row
    tampered = text.replace(first_row, edited, 1)
    assert tampered != text
    regenerated, seen = report.regenerate(tampered)
    assert "sim-burst" in seen
    assert regenerated == text  # what --check compares: the edit shows as a difference


def test_a_block_without_its_data_says_so_and_shows_no_number(report: Any, tmp_path: Path) -> None:
    for name, block in report.BLOCKS.items():
        if not block.source:
            continue  # rendered from code (the ceiling's write list, the latency samples)
        text = report.render(name, tmp_path)
        assert "not measured since the data became committed" in text.lower(), name
        if name in ("bench-goals", "autoscaling-goals", "sim-goals"):
            continue  # goal rows keep their targets
        body = text
        for key in report.BENCH_ORDER:  # the scenario names P1, P2, ...
            body = body.replace(key, "")
        assert not any(ch.isdigit() for ch in body), (name, text)


def test_every_bench_goal_keeps_its_row_without_data(report: Any, tmp_path: Path) -> None:
    text = report.render("bench-goals", tmp_path)
    for key in report.BENCH_ORDER:
        mod = report._scenario(key)
        for name, target in mod.GOALS:
            assert f"| {name} | {target} |" in text


def test_each_committed_json_names_how_it_was_made() -> None:
    sys.path.insert(0, str(BENCH))
    sim_tables = importlib.import_module("sim_tables")
    files = sorted((BENCH / "results").glob("*.json"))
    assert files, "bench/results/ holds the committed data"
    for path in files:
        data = json.loads(path.read_text())
        if path.name.startswith("sim-"):
            name = path.stem.removeprefix("sim-")
            assert data["run"]["command"] == sim_tables.command(name), path
            assert data["run"]["commit"] not in ("", "unknown"), path
        else:
            assert data.get("smoke") is not True, f"{path}: a smoke run's numbers"
            assert data.get("command"), path
            assert (data.get("machine") or {}).get("commit") not in (None, "", "unknown"), path


def test_a_smoke_run_is_refused_in_bench_results(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH))
    results = importlib.import_module("results")
    for out in (results.RESULTS, results.RESULTS / "sub", BENCH / "results" / ".." / "results"):
        with pytest.raises(results.SmokeInResults):
            results.refuse_smoke_in_results(out, smoke=True)
        results.refuse_smoke_in_results(out, smoke=False)  # a full run writes there
    results.refuse_smoke_in_results(tmp_path, smoke=True)


def _p7_result(rss_peak_mib: float, growth: float) -> dict[str, Any]:
    step = {"sandboxes": 10000}
    return {
        "steps": [{"sandboxes": 1000}, step],
        "figures": {
            "rss_peak_mib": rss_peak_mib,
            "rss_peak_mb": round(rss_peak_mib * 1024 * 1024 / 1e6, 1),
            "noop_p50_growth": growth,
            "probe_noop_p50_growth": 1.1,
        },
    }


def test_p7_compares_its_rss_in_mb_with_the_goal_in_mb(report: Any) -> None:
    p7 = report._scenario("P7")
    # 290 MiB is 304.1 MB: over a 300 MB goal (comparing the MiB figure would say "met")
    rss, _flat = p7.goals(_p7_result(290.0, 1.0))
    assert rss[3] is False and "304.1 MB" in rss[2] and "290.0 MiB" in rss[2]
    rss, _flat = p7.goals(_p7_result(280.0, 1.0))  # 293.6 MB
    assert rss[3] is True


def test_p7_flat_goal_is_the_measured_growth_and_says_when_it_is_not_flat(report: Any) -> None:
    p7 = report._scenario("P7")
    _rss, flat = p7.goals(_p7_result(100.0, 10.27))
    assert flat[3] is False and "10.27x: not flat" in flat[2]
    _rss, flat = p7.goals(_p7_result(100.0, 1.2))
    assert flat[3] is True and "1.2x: flat" in flat[2]


def _p1_result(gate_p99: float, worst_p50: float | None) -> dict[str, Any]:
    return {
        "gate": {"rate": 75, "claims": 750, "pool": 1050},
        "figures": {
            "knee_claims_per_s": 20.0,
            "ceiling_knee_claims_per_s": 35.0,
            "knee_ratio_to_ceiling": 0.571,
            "worst_p50_below_knee_ms": worst_p50,
            "gate_p99_ms": gate_p99,
            "sdk_minus_generator_p50_ms": 3.0,
        },
    }


def test_p1_gate_shape_is_a_goal_row_missed_when_its_p99_is_over_500_ms(report: Any) -> None:
    p1 = report._scenario("P1")
    rows = {
        name: (target, measured, met)
        for name, target, measured, met in p1.goals(_p1_result(9082.0, 45.0))
    }
    target, measured, met = rows["P1 gate shape 75/s x 750 (pool 1050)"]
    assert (target, measured, met) == ("p99 <= 500 ms", "p99 9082.0 ms", False)
    assert rows["P1 knee"][2] is False  # 20 < 30
    assert [name for name, _t in p1.GOALS] == list(rows)


def test_p1_without_a_knee_reports_no_p50_below_it(report: Any) -> None:
    p1 = report._scenario("P1")
    rows = {g[0]: g for g in p1.goals(_p1_result(100.0, None))}
    _name, _target, measured, met = rows["P1 p50 below the knee (worst)"]
    assert measured == "no rate under the knee" and met is False


def test_p1_worst_p50_below_the_knee_is_none_without_a_knee(report: Any) -> None:
    p1 = report._scenario("P1")

    def step(rate: float, p50: float) -> dict[str, Any]:
        return {"rate": rate, "counts": True, "latency_ms": {"p50": p50}}

    steps = [step(10, 600.0), step(20, 900.0)]
    assert p1.worst_p50_below_knee(steps, p1.knee([])) is None  # knee 0: no stand-in p50
    assert p1.worst_p50_below_knee(steps, 10.0) == 600.0
    assert p1.worst_p50_below_knee(steps, 20.0) == 900.0


def test_a_judge_only_realisation_study_shows_no_best_fixed_size(
    report: Any, tmp_path: Path
) -> None:
    """realisations.py --judge-only skips the fixed sizes' search: the table says so rather
    than failing or showing a share of nothing."""
    study = json.loads((BENCH / "results" / "autoscale-realisations.json").read_text())
    for s in study["summaries"]:
        s.update(best_fixed_met=None, best_fixed_sizes=None, fixed_met_by_size=None)
    (tmp_path / "autoscale-realisations.json").write_text(json.dumps(study))
    rows = [
        line
        for line in report.render("autoscale-realisations", tmp_path).splitlines()
        if line.startswith("| grouped-")
    ]
    assert rows and all("| not searched | — |" in line for line in rows), rows


def test_the_length_table_pools_each_shape_over_its_processes(report: Any, tmp_path: Path) -> None:
    """One row per trace length and shape: the draws of every process of that shape (the
    scenario name's last part) counted together, met and with the warm share needed."""

    def entry(scenario: str, met: bool, warm_ok: bool, ratio: float, hours: float) -> Any:
        return {
            "scenario": scenario,
            "latency": "lognormal 90s",
            "goal": {"met": met, "warm_ok": warm_ok},
            "idle_ratio": ratio,
            "duration_s": hours * 3600,
        }

    for stem, hours in zip(report.LENGTH_STUDIES, (4, 12), strict=True):
        study = {
            "command": f"python bench/autoscale/realisations.py --hours {hours}",
            "commit": "0123456789",
            "machine": {"cpus": 2},
            "elapsed_s": 600,
            "jobs": 2,
            "seed_base": 900000,
            "results": [
                entry("r1-grouped-8", True, True, 1.01, hours),
                entry("r2-grouped-8", hours == 12, True, 1.07, hours),
                entry("r1-grouped-32", False, False, 0.98, hours),
                entry("r1-grouped-32", True, True, 1.03, hours),
            ],
        }
        (tmp_path / f"{stem}.json").write_text(json.dumps(study))
    rows = [ln for ln in report.render("autoscale-lengths", tmp_path).splitlines() if "| 4 h" in ln]
    assert rows == [
        "| 4 h | groups of 8 | lognormal 90s | 2 | 2 | 1 (50%) | 2 | 1.04 / 1.07 |",
        "| 4 h | groups of 32 | lognormal 90s | 1 | 2 | 1 (50%) | 1 | 1.00 / 1.03 |",
    ]
    assert "| 12 h | groups of 8 | lognormal 90s | 2 | 2 | 2 (100%) | 2 |" in report.render(
        "autoscale-lengths", tmp_path
    )


def test_the_family_table_says_no_autoscaler_only_where_the_bound_clears_the_static_pool(
    report: Any, tmp_path: Path
) -> None:
    """A quiet-then-burst row reads "yes" only when both bounds (mean and cautious refill) are
    above the static pool's idle time on the trace without the burst, and says which otherwise."""

    def entry(name: str, none: tuple[bool, bool]) -> Any:
        return {
            "scenario": name,
            "latency": "lognormal 90s",
            "burst": {"size": 110, "spread_s": 12.0},
            "members_needed": 74,
            "with_burst": {"cold_allowed": 36},
            "quiet_span_s": [4860.0, 12600.0],
            "bound_idle_sandbox_seconds": {"mean": 742605.4, "p1": 654255.2},
            "no_autoscaler_meets_family": {"mean": none[0], "p1": none[1]},
            "without_burst": {
                "static_idle_sandbox_seconds": 631684.1,
                "static_size": 45,
                "design": {"warm_share": 0.98068},
                "design_goal": {"met": False},
            },
        }

    for stem, which in zip(report.FAMILY_STUDIES, ("evaluation", "tuning"), strict=True):
        study = {
            "set": which,
            "command": "python bench/autoscale/family.py",
            "commit": "0123456789",
            "machine": {"cpus": 2},
            "elapsed_s": 12.0,
            "results": [entry("a", (True, True)), entry("b", (True, False))],
        }
        if which == "tuning":
            study["results"] = [entry("c", (False, False))]
        (tmp_path / f"{stem}.json").write_text(json.dumps(study))
    rows = [ln for ln in report.render("autoscale-family", tmp_path).splitlines() if ln[:2] == "| "]
    assert rows[1:] == [  # after the header
        "| evaluation | a | lognormal 90s | 110 in 12 s | 74 (36) | 2.15 h | 742 605 / 654 255 "
        "| 631 684 (static 45) | yes | 98.07 %, **missed** |",
        "| evaluation | b | lognormal 90s | 110 in 12 s | 74 (36) | 2.15 h | 742 605 / 654 255 "
        "| 631 684 (static 45) | with the mean refill only | 98.07 %, **missed** |",
        "| tuning | c | lognormal 90s | 110 in 12 s | 74 (36) | 2.15 h | 742 605 / 654 255 "
        "| 631 684 (static 45) | not shown | 98.07 %, **missed** |",
    ]
