"""The benchmark harness runs end to end at tiny sizes (``bench/run.py --smoke``).

Not a timed test and not a benchmark: it asserts that every scenario P1-P7 ran, wrote its JSON
with every headline figure present (non-null) and its PNG, and that the summary names them all.
It takes about two minutes (over 30 s) because it starts its own control plane with the audit
log on (P6 reads it) and runs seven scenarios, each with its own controller process and fresh
namespace, which is exactly what it checks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ("P1", "P2", "P3", "P4", "P5", "P6", "P7")


def test_every_scenario_writes_its_figures_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--smoke", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["scenarios"]) == set(SCENARIOS), summary["scenarios"]
    assert summary["machine"]["cpus"] and summary["machine"]["control_plane"]
    for key in SCENARIOS:
        result = json.loads((out / f"{key}.json").read_text())
        figures = result["figures"]
        assert figures, f"{key}: no figures"
        nulls = [name for name, value in figures.items() if value is None]
        assert not nulls, f"{key}: null figures {nulls}"
        assert result["smoke"] is True and result["machine"]["commit"]
        png = out / f"{key}.png"
        assert png.is_file() and png.stat().st_size > 1000, f"{key}: no plot"
