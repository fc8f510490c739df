"""Where the committed raw data of the report pages live, and the rule that keeps smoke runs out.

``bench/results/`` is committed: every figure in ``docs/benchmarks.md``,
``docs/reliability.md`` (soak) and ``docs/autoscaling.md`` is rendered from a JSON file there by
``bench/report.py``. A full run overwrites its file; a smoke run (tiny sizes, numbers that mean
nothing) must never write there, so every script that writes results refuses a smoke run whose
output directory is this one (``refuse_smoke_in_results``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"


class SmokeInResults(ValueError):
    """A smoke run was asked to write into ``bench/results/``."""


def is_results_dir(path: Path) -> bool:
    """True when ``path`` is ``bench/results`` or anything inside it."""
    try:
        resolved = path.resolve()
    except OSError:
        return False
    return resolved == RESULTS or RESULTS in resolved.parents


def refuse_smoke_in_results(out: Path, *, smoke: bool) -> None:
    """Raise ``SmokeInResults`` for a smoke run whose output would land in ``bench/results``."""
    if smoke and is_results_dir(out):
        raise SmokeInResults(
            f"a smoke run never writes into {RESULTS} (its numbers mean nothing and the "
            "directory holds the committed data of the report pages): pass --out DIR"
        )


def git_state() -> dict[str, object]:
    """The commit the numbers were measured at, and whether the work tree had changes."""

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    # changes to tracked files other than the results themselves (a run rewrites those)
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results")
    return {"commit": git("rev-parse", "--short", "HEAD") or "unknown", "dirty": bool(status)}
