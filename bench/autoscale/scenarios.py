"""The autoscaler's evaluation scenarios: traces (``traces.toml``) and the two sets of scenarios
(``scenarios-tuning.toml``, ``scenarios-evaluation.toml``), read and checked.

A scenario replays one trace through ``python -m agentsandbox.sim --csv`` with a fixed warm-up
and, optionally, events (``restart_at``: seconds, a list; ``skew``: seconds; ``never_ready``) and
policy overrides (``min_replicas``, ``target``). Its ``tags`` name what it covers
(:data:`REQUIRED_EVALUATION_TAGS`); the tag ``stationary`` gives it the 1.05 idle allowance of
the goal rule (``docs/autoscaling.md``, "How the autoscaler is evaluated").
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TRACES = HERE / "traces.toml"
SETS = {
    "tuning": HERE / "scenarios-tuning.toml",
    "evaluation": HERE / "scenarios-evaluation.toml",
}
DWELL = 120.0  # the replay's default (--dwell)

# what the evaluation set must cover, each by at least one scenario's tag
REQUIRED_EVALUATION_TAGS = (
    "steady-low",
    "steady-mid",
    "steady-high",
    "step-up-x2",
    "step-down-x2",
    "step-up-x5",
    "step-down-x5",
    "diurnal",
    "bursts-regular",
    "bursts-irregular",
    "grouped-4",
    "grouped-8",
    "grouped-32",
    "quiet-then-burst",
    "restart",
    "skew-plus-3",
    "skew-minus-3",
    "min-replicas-0",
    "never-ready",
)
STATIONARY = "stationary"
SCENARIO_KEYS = {
    "name",
    "trace",
    "warmup",
    "tags",
    "restart_at",
    "skew",
    "never_ready",
    "min_replicas",
    "target",
    "note",
}


@dataclass(frozen=True)
class TraceSpec:
    name: str
    seed: int
    duration: float  # seconds
    parts: tuple[Mapping[str, Any], ...]
    dwell: float = DWELL
    description: str = ""


@dataclass(frozen=True)
class Scenario:
    name: str
    trace: str
    warmup: float
    tags: tuple[str, ...]
    restart_at: tuple[float, ...] = ()
    skew: float = 0.0
    never_ready: bool = False
    min_replicas: int = 1
    target: float = 0.99
    note: str = ""

    @property
    def stationary(self) -> bool:
        return STATIONARY in self.tags


class ScenarioFileError(ValueError):
    """A trace or scenario file that does not hold together."""


def load_traces(path: Path = TRACES) -> dict[str, TraceSpec]:
    data = tomllib.loads(path.read_text())
    out: dict[str, TraceSpec] = {}
    for name, table in data.items():
        if not isinstance(table, dict):
            raise ScenarioFileError(f"{path.name}: {name} is not a table")
        parts = table.get("parts") or []
        if not parts:
            raise ScenarioFileError(f"{path.name}: trace {name} has no parts")
        out[name] = TraceSpec(
            name=name,
            seed=int(table["seed"]),
            duration=float(table["duration"]),
            parts=tuple(parts),
            dwell=float(table.get("dwell", DWELL)),
            description=str(table.get("description", "")),
        )
    return out


def load_set(which: str, traces: Mapping[str, TraceSpec] | None = None) -> list[Scenario]:
    """The scenarios of a set, checked against the traces (:func:`check`)."""
    path = SETS[which]
    data = tomllib.loads(path.read_text())
    scenarios = [_scenario(path, s) for s in data.get("scenario", [])]
    check(scenarios, traces if traces is not None else load_traces(), path.name)
    return scenarios


def _scenario(path: Path, table: Mapping[str, Any]) -> Scenario:
    unknown = set(table) - SCENARIO_KEYS
    if unknown:
        raise ScenarioFileError(f"{path.name}: {table.get('name')}: unknown keys {unknown}")
    return Scenario(
        name=str(table["name"]),
        trace=str(table["trace"]),
        warmup=float(table["warmup"]),
        tags=tuple(str(t) for t in table.get("tags", [])),
        restart_at=tuple(float(t) for t in table.get("restart_at", [])),
        skew=float(table.get("skew", 0.0)),
        never_ready=bool(table.get("never_ready", False)),
        min_replicas=int(table.get("min_replicas", 1)),
        target=float(table.get("target", 0.99)),
        note=str(table.get("note", "")),
    )


def check(scenarios: list[Scenario], traces: Mapping[str, TraceSpec], where: str) -> None:
    """Names unique, traces known, the warm-up within the first quarter of the trace (the
    replay caps it there), every event after the warm-up and before the end."""
    seen: set[str] = set()
    for s in scenarios:
        if s.name in seen:
            raise ScenarioFileError(f"{where}: scenario {s.name} appears twice")
        seen.add(s.name)
        trace = traces.get(s.trace)
        if trace is None:
            raise ScenarioFileError(f"{where}: scenario {s.name}: no trace {s.trace!r}")
        if not 0 < s.warmup <= trace.duration / 4:
            raise ScenarioFileError(
                f"{where}: scenario {s.name}: warm-up {s.warmup:g}s must be within the first "
                f"quarter of its trace ({trace.duration:g}s)"
            )
        for at in s.restart_at:
            if not s.warmup < at < trace.duration:
                raise ScenarioFileError(
                    f"{where}: scenario {s.name}: the restart at {at:g}s must fall after the "
                    f"warm-up ({s.warmup:g}s) and before the end of the trace "
                    f"({trace.duration:g}s)"
                )


def sim_argv(s: Scenario, trace: TraceSpec, csv: Path, latency: str, out: Path) -> list[str]:
    """The arguments of ``python -m agentsandbox.sim`` that replay the scenario."""
    argv = ["--csv", str(csv), "--latency", latency, "--hours", f"{trace.duration / 3600:g}"]
    argv += ["--target", f"{s.target:g}", "--warmup", f"{s.warmup:g}", "--no-plot"]
    argv += ["--out", str(out)]
    if trace.dwell != DWELL:
        argv += ["--dwell", f"{trace.dwell:g}"]
    if s.min_replicas != 1:
        argv += ["--min-replicas", str(s.min_replicas)]
    for at in s.restart_at:
        argv += ["--restart-at", f"{at:g}"]
    if s.skew:
        argv += ["--skew", f"{s.skew:g}"]
    if s.never_ready:
        argv.append("--never-ready")
    return argv
