"""Two scenarios of the autoscaler's tuning set replayed in full as a regression check (the whole
sets are ``make autoscale-eval``, outside ``make test``): a step up and down of x4, and groups of
16 claims created together on top of steady traffic, both with the measured local refill times.
Each is the same run as ``bench/autoscale/evaluate.py --set tuning --only <name>``: the
autoscaled pool, then the search for the smallest static pool reaching the target; the goal
(warm share within half a point of the target, idle sandbox-seconds at most the static pool's)
must hold. About 10 s together."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

AUTOSCALE = Path(__file__).resolve().parents[3] / "bench" / "autoscale"


def _module(name: str) -> ModuleType:
    if str(AUTOSCALE) not in sys.path:
        sys.path.insert(0, str(AUTOSCALE))
    return importlib.import_module(name)


@pytest.mark.parametrize("name", ["steps-x4", "grouped-16"])
def test_a_tuning_scenario_still_meets_its_goal(name: str, tmp_path: Path) -> None:
    scenarios = _module("scenarios")
    evaluate = _module("evaluate")
    traces = scenarios.load_traces()
    (s,) = [x for x in scenarios.load_set("tuning", traces) if x.name == name]
    spec = traces[s.trace]
    csv = evaluate.ensure_trace(spec, tmp_path)
    entry = evaluate.run_one(s, spec, csv, "local", tmp_path, None)
    assert entry["goal"]["met"] is True, entry["goal"]
    assert entry["autoscaled"]["claims"] > 1000
