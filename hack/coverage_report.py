#!/usr/bin/env python3
"""Branch coverage per package, from a coverage data file, checked against committed floors.

    python hack/coverage_report.py                  # .coverage against hack/coverage_floors.json
    python hack/coverage_report.py --data-file F --floors FLOORS.json
    python hack/coverage_report.py --no-floors      # only show the figures
    python hack/coverage_report.py --write-floors   # record the measured values as the floors

A package is a directory of ``src/agentsandbox`` (``kube``, ``api``, ``cli``, ``sim``,
``devcluster``) or one controller (``controllers/claim``, ...); the few files directly under
``agentsandbox/`` or ``agentsandbox/controllers/`` count as ``agentsandbox`` and ``controllers``.
The figure is branches taken / branches possible (coverage's branch measurement: every
``if``/``while``/``for``/``try`` exit both ways), not statements. Exit status 1 when a package
is below its floor (measured value rounded down to 0.1 %), or a floor names a package that was
not measured, or a measured package has no floor.

The committed floors (hack/coverage_floors.json) are the unit-test run's figures: check them
against the data of ``pytest tests/unit --cov`` alone. The whole suite (integration tests, the
controller processes they start) only adds to them; show it with ``--no-floors``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_FLOORS = ROOT / "hack" / "coverage_floors.json"


@dataclass
class Figures:
    branches: int = 0
    covered_branches: int = 0
    statements: int = 0
    covered_statements: int = 0

    @property
    def branch_percent(self) -> float:
        return 100.0 * self.covered_branches / self.branches if self.branches else 100.0

    @property
    def statement_percent(self) -> float:
        return 100.0 * self.covered_statements / self.statements if self.statements else 100.0


def package_of(path: str) -> str | None:
    """``src/agentsandbox/controllers/claim/act.py`` -> ``controllers/claim``."""
    parts = Path(path).parts
    if "agentsandbox" not in parts:
        return None
    rest = parts[len(parts) - 1 - parts[::-1].index("agentsandbox") + 1 :]
    if len(rest) == 1:
        return "agentsandbox"
    if rest[0] == "controllers":
        return "controllers" if len(rest) == 2 else f"controllers/{rest[1]}"
    return rest[0]


def measure(data_file: Path) -> dict[str, Figures]:
    """Per package figures, through coverage's JSON report (its public per-file summary)."""
    import coverage

    cov = coverage.Coverage(data_file=str(data_file), config_file=str(ROOT / "pyproject.toml"))
    cov.load()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "coverage.json"
        cov.json_report(outfile=str(out), ignore_errors=True)
        report = json.loads(out.read_text())
    packages: dict[str, Figures] = {}
    for path, entry in report["files"].items():
        package = package_of(path)
        if package is None:
            continue
        summary = entry["summary"]
        figures = packages.setdefault(package, Figures())
        figures.branches += int(summary.get("num_branches", 0))
        figures.covered_branches += int(summary.get("covered_branches", 0))
        figures.statements += int(summary["num_statements"])
        figures.covered_statements += int(summary["covered_lines"])
    return packages


def floor_of(percent: float) -> float:
    return math.floor(percent * 10) / 10


def check(packages: dict[str, Figures], floors: dict[str, float]) -> list[str]:
    problems = []
    for name, figures in sorted(packages.items()):
        if name not in floors:
            problems.append(f"{name}: measured but has no floor")
        elif floor_of(figures.branch_percent) < floors[name]:
            problems.append(
                f"{name}: branch coverage {figures.branch_percent:.1f}% is below its floor "
                f"{floors[name]:.1f}%"
            )
    problems.extend(
        f"{name}: has a floor but was not measured" for name in sorted(set(floors) - set(packages))
    )
    return problems


def table(packages: dict[str, Figures], floors: dict[str, float]) -> str:
    lines = [
        f"{'package':<24}{'branches':>10}{'taken':>8}{'branch %':>10}{'floor %':>9}{'stmt %':>9}",
    ]
    total = Figures()
    for name, f in sorted(packages.items()):
        floor = floors.get(name)
        lines.append(
            f"{name:<24}{f.branches:>10}{f.covered_branches:>8}{f.branch_percent:>10.1f}"
            f"{'-' if floor is None else f'{floor:.1f}':>9}{f.statement_percent:>9.1f}"
        )
        total.branches += f.branches
        total.covered_branches += f.covered_branches
        total.statements += f.statements
        total.covered_statements += f.covered_statements
    lines.append(
        f"{'total':<24}{total.branches:>10}{total.covered_branches:>8}"
        f"{total.branch_percent:>10.1f}{'':>9}{total.statement_percent:>9.1f}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-file", type=Path, default=ROOT / ".coverage")
    parser.add_argument("--floors", type=Path, default=DEFAULT_FLOORS)
    what = parser.add_mutually_exclusive_group()
    what.add_argument(
        "--write-floors", action="store_true", help="record the measured values as the floors"
    )
    what.add_argument("--no-floors", action="store_true", help="show the figures, check nothing")
    args = parser.parse_args(argv)
    if not args.data_file.exists():
        print(f"no coverage data at {args.data_file}", file=sys.stderr)
        return 1
    packages = measure(args.data_file)
    if args.write_floors:
        floors = {name: floor_of(f.branch_percent) for name, f in sorted(packages.items())}
        args.floors.write_text(json.dumps(floors, indent=2) + "\n")
        print(f"wrote {args.floors}")
    elif args.no_floors:
        floors = {}
    else:
        floors = json.loads(args.floors.read_text()) if args.floors.exists() else {}
    print(table(packages, floors), flush=True)
    problems = [] if args.no_floors else check(packages, floors)
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
