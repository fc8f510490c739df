"""hack/coverage_report.py: how files map to packages, that a package under its floor (or
without one) fails the check, and that the committed floors name every package under src/."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.project.scripts import load_script

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "hack" / "coverage_report.py"


report = load_script(SCRIPT)


def test_files_map_to_their_package() -> None:
    assert report.package_of("src/agentsandbox/kube/client.py") == "kube"
    assert report.package_of("/abs/src/agentsandbox/controllers/claim/act.py") == (
        "controllers/claim"
    )
    assert report.package_of("src/agentsandbox/controllers/__init__.py") == "controllers"
    assert report.package_of("src/agentsandbox/__init__.py") == "agentsandbox"
    assert report.package_of("bench/run.py") is None


def _figures(branches: int, taken: int) -> object:
    return report.Figures(branches=branches, covered_branches=taken)


def test_a_package_under_its_floor_fails_and_one_at_it_passes() -> None:
    measured = {"kube": _figures(1000, 900), "api": _figures(3, 2)}
    assert report.check(measured, {"kube": 90.0, "api": 66.6}) == []
    (problem,) = report.check(measured, {"kube": 90.1, "api": 66.6})
    assert problem.startswith("kube: branch coverage 90.0% is below its floor 90.1%")
    # 2/3 is 66.67 %: the floor is the measured value rounded down, so 66.7 is above it
    assert report.check(measured, {"kube": 90.0, "api": 66.7}) != []


def test_a_package_without_a_floor_or_a_floor_without_a_package_fails() -> None:
    measured = {"kube": _figures(10, 10)}
    assert report.check(measured, {}) == ["kube: measured but has no floor"]
    assert report.check(measured, {"kube": 100.0, "gone": 50.0}) == [
        "gone: has a floor but was not measured"
    ]


def test_the_committed_floors_name_every_package_under_src() -> None:
    floors = json.loads((ROOT / "hack" / "coverage_floors.json").read_text())
    src = ROOT / "src" / "agentsandbox"
    packages = {"agentsandbox"} | {
        report.package_of(str(path)) for path in src.rglob("*.py") if "__pycache__" not in str(path)
    }
    assert set(floors) == packages
    assert all(0.0 <= value <= 100.0 for value in floors.values())
