"""The benchmark harness runs end to end at tiny sizes, and the report pages render from what it
writes.

Not timed tests and not benchmarks: they assert that every scenario P1-P8 (P1 with its ceiling)
ran, wrote its JSON with every headline figure present and its PNG, that the report's generated
tables render from that JSON (the schema the committed data will have), the same for the soak
and the real-cluster autoscaler run, and that a smoke run is refused in ``bench/results/`` (the
committed data). Each is over 30 s because each script starts its own control plane (about 10 s
here; the bench's and the soak's with the apiserver audit log on, which P6 and the soak's claim
history read) and its own controller processes, which is part of what it checks: the bench smoke
(about 90 s) runs eight scenarios, each with a controller process of its own (ten in all), the
soak smoke (about 35 s) two replicas with leader election under 12 s of load, the autoscaler
smoke (about 50 s) two runs of one burst, each with its own controller, and the simulator
between them. The sizes are the smallest that still make every step happen (see each test).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
SCENARIOS = ("P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8")
# figures that may be None, and why: not a missing measurement but a fact of tiny sizes
MAY_BE_NONE = {
    # no rate met p99 <= 500 ms, so there is no rate under the knee to report
    ("P1", "worst_p50_below_knee_ms"),
    # the ceiling met no rate (p99 <= 500 ms at 5/s on a loaded machine): no ratio to report
    ("P1", "knee_ratio_to_ceiling"),
}


def _report() -> Any:
    sys.path.insert(0, str(BENCH))
    return importlib.import_module("report")


def _listing() -> dict[str, float]:
    """bench/results/ but the simulator's files (deterministic, CPU only: ``bench/sim_tables.py``
    may rewrite them while this runs, and no bench script writes them)."""
    return {
        str(p): p.stat().st_mtime
        for p in (BENCH / "results").rglob("*")
        if not p.name.startswith("sim-")
    }


def _run(*argv: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_a_smoke_run_never_writes_into_bench_results() -> None:
    before = _listing()
    for argv in (
        ("bench/run.py", "--smoke"),
        ("bench/run.py", "--smoke", "--out", "bench/results"),
        ("bench/autoscale_real.py", "--smoke"),
        ("bench/autoscale_real.py", "--smoke", "--out", "bench/results"),
        ("bench/soak.py", "--duration", "60s", "--out", "bench/results"),
    ):
        proc = _run(*argv, timeout=120)
        assert proc.returncode == 2, (argv, proc.stdout[-2000:], proc.stderr[-2000:])
        assert "bench/results" in proc.stderr or "bench/results/" in proc.stderr, proc.stderr
    assert _listing() == before


def test_every_scenario_writes_its_figures_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "results"
    before = _listing()
    proc = _run("bench/run.py", "--smoke", "--out", str(out), timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert _listing() == before, "the smoke run wrote into bench/results/"
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["scenarios"]) == set(SCENARIOS), summary["scenarios"]
    assert summary["machine"]["cpus"] and summary["machine"]["control_plane"]
    for key in SCENARIOS:
        result = json.loads((out / f"{key}.json").read_text())
        figures = result["figures"]
        assert figures, f"{key}: no figures"
        nulls = [n for n, v in figures.items() if v is None and (key, n) not in MAY_BE_NONE]
        assert not nulls, f"{key}: null figures {nulls}"
        assert result["smoke"] is True and result["machine"]["commit"]
        assert result["command"].startswith("python bench/run.py")
        png = out / f"{key}.png"
        assert png.is_file() and png.stat().st_size > 1000, f"{key}: no plot"
    p1 = json.loads((out / "P1.json").read_text())
    assert p1["ceiling"]["sweeps"][0]["steps"][0]["claims_ready"] == 4
    api = p1["sweeps"][0]["steps"][0]["cpu_claims"]["processes"]["kube-apiserver"]
    assert api["cpu_seconds"] > 0, "the apiserver's CPU was not measured"
    report = _report()
    for name, block in report.BLOCKS.items():
        if set(block.source) & set(SCENARIOS):
            text = report.render(name, out)
            assert "not measured" not in text.lower(), (name, text)


def test_the_soak_smoke_renders_its_report_block(tmp_path: Path) -> None:
    # 12 s of load is enough for each of the soak's jobs to act at least twice (a pool scale
    # every 3 s, a template change every 4.8 s, a standby restart every 4 s, SIGTERM then
    # SIGKILL, an RSS sample every second: points enough for the slope after half the run); a
    # small pool and short-lived claims keep the fill and the drain after the load short
    proc = _run(
        "bench/soak.py",
        *("--duration", "12s", "--claim-lifetime", "2s", "--pool", "3", "--pool-high", "5"),
        *("--out", str(tmp_path)),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    data = json.loads((tmp_path / "soak.json").read_text())
    assert data["claims_served"] > 0 and data["rss_every_minute"]
    assert data["leader_unrestarted_and_leading"] is True
    assert data["standby_restarts"] >= 2, data["events"]
    signals = {e.get("signal") for e in data["events"] if e["what"] == "standby restarted"}
    assert signals == {"SIGTERM", "SIGKILL"}, data["events"]
    assert any(e["what"] == "pool scaled" for e in data["events"]), data["events"]
    assert any(e["what"] == "template changed" for e in data["events"]), data["events"]
    assert data["leader_rss_slope_mb_per_10min"] is not None, data["rss_every_minute"]
    text = _report().render("soak", tmp_path)
    assert "not measured" not in text.lower() and "MB per 10 min" in text, text


def test_the_autoscale_real_smoke_renders_its_report_block(tmp_path: Path) -> None:
    proc = _run("bench/autoscale_real.py", "--smoke", "--out", str(tmp_path), timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = _report()
    for name in ("autoscale-real", "autoscaling-goals"):
        text = report.render(name, tmp_path)
        assert "python bench/autoscale_real.py`) |" not in text, (name, text)
        assert "not measured since the data became committed: run" not in text, (name, text)
