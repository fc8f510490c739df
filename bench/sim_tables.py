"""The simulator runs behind the tables of ``docs/autoscaling.md``: each runs
``python -m agentsandbox.sim`` with the arguments below and keeps its JSON as
``bench/results/sim-<name>.json`` with the exact command, the commit and the machine.

    python bench/sim_tables.py                  # every run (deterministic, CPU only, minutes)
    python bench/sim_tables.py burst steady     # some

``python bench/report.py --write`` then renders the tables from those files.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results import RESULTS, git_state

# name -> the simulator's arguments (its trace's JSON is <trace>.json in --out)
RUNS: dict[str, tuple[str, ...]] = {
    "burst": ("--trace", "burst"),
    "diurnal": ("--trace", "diurnal"),
    "burst-instant": ("--trace", "burst-instant"),
    "steady": ("--trace", "steady", "--rate", "2", "--hours", "2"),
}


def command(name: str) -> str:
    return "python -m agentsandbox.sim " + shlex.join(RUNS[name])


def run(name: str, out: Path = RESULTS) -> Path:
    args = RUNS[name]
    trace = args[args.index("--trace") + 1]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "agentsandbox.sim", *args, "--out", tmp, "--no-plot"],
            check=True,
        )
        seconds = time.monotonic() - t0
        data: dict[str, Any] = json.loads((Path(tmp) / f"{trace}.json").read_text())
    data["run"] = {
        "name": name,
        "command": command(name),
        "seconds": round(seconds, 1),
        **git_state(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"sim-{name}.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="*", help=f"some of {', '.join(RUNS)}; default all")
    args = parser.parse_args()
    unknown = [n for n in args.names if n not in RUNS]
    if unknown:
        parser.error(f"unknown run {unknown}")
    for name in args.names or list(RUNS):
        print(f"== {command(name)}", flush=True)
        print(f"wrote {run(name)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
