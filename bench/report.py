"""Markdown tables of a bench run, for ``docs/benchmarks.md``: one row per figure, from the JSON
``bench/run.py`` wrote (``python bench/report.py [results-dir]``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import ORDER, load


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "results"
    summary = json.loads((out / "summary.json").read_text())
    m = summary["machine"]
    print(
        f"Machine: {m['cpus']} CPUs ({m['cpu_model']}), {m['memory_gib']} GiB, Python "
        f"{m['python']}, control plane {m['control_plane']}, {m['kwok_nodes']} kwok nodes, "
        f"commit {m['commit']}, load average at the end {m['load_average']}.\n"
    )
    for key in ORDER:
        path = out / f"{key}.json"
        if not path.exists():
            err = summary["scenarios"].get(key, {}).get("error")
            if err:
                print(f"### {key}\n\nfailed: {err}\n")
            continue
        result = json.loads(path.read_text())
        mod = load(key)
        print(f"### {key} — {mod.TITLE} ({result['seconds_total']} s)\n")
        print("| figure | measured | goal |\n|---|---|---|")
        for figure, measured, goal in mod.rows(result):
            print(f"| {figure} | {measured} | {goal} |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
