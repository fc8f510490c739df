"""Replay a scenario set through the simulator and judge the autoscaler against the goal rule.

    python bench/autoscale/evaluate.py --set tuning                 # tune against these only
    python bench/autoscale/evaluate.py --set evaluation --jobs 2    # the held-out set
    python bench/autoscale/evaluate.py --set tuning --only steady-b --only diurnal

Each scenario (``scenarios-<set>.toml``) is run for both refill distributions, ``local`` and the
90 s lognormal, through the same code as ``python -m agentsandbox.sim --csv build/traces/<trace>.csv
--latency <one> --hours H --target T --warmup W --no-plot`` plus the scenario's events and policy
overrides (:func:`agentsandbox.sim.__main__.run`: the autoscaled pool, then the search for the
smallest static pool reaching the target). The traces are (re)written first when missing or
out of date (``make_traces.py``).

The goal of a scenario x distribution: warm share after the warm-up >= target - 0.5 points AND
idle sandbox-seconds <= 1.05 x (stationary traces) or 1.00 x (the others) those of the smallest
static pool reaching the target. The never-Ready scenario has no static pool (none reaches any
target) and its own goal (:func:`breaker_goal`): the circuit breaker trips once, within three
refill p99s (at least three minutes) of the first member that never becomes Ready, and the size
never grows after it; its pool size over time after the warm-up is reported too.

Writes ``<out>/<set>.json`` (every figure, the exact command of each run, the commit) and prints a
summary. The results of a run are not committed: the output directory may not be in ``bench/``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "src"))

import make_traces  # noqa: E402
from scenarios import SETS, Scenario, TraceSpec, load_set, load_traces, sim_argv  # noqa: E402

from agentsandbox.sim import latency as lat  # noqa: E402
from agentsandbox.sim.__main__ import parser, run  # noqa: E402
from agentsandbox.sim.engine import Result  # noqa: E402

LATENCIES = ("local", "lognormal")
WARM_SLACK = 0.005  # the warm share may fall this far below the target (0.5 points)
IDLE_STATIONARY = 1.05
IDLE_OTHER = 1.00
POOL_SERIES_EVERY = 60.0  # seconds between the reported pool sizes (never-Ready)
# never-Ready: the circuit breaker trips within this many refill p99s of the first member that
# never becomes Ready, a p99 under BREAKER_P99_FLOOR seconds counting as that (a breaker that
# tripped within seconds would trip on any slow create)
BREAKER_P99S = 3
BREAKER_P99_FLOOR = 60.0


def ensure_trace(spec: TraceSpec, directory: Path) -> Path:
    """``<directory>/<name>.csv``, written when missing or different from its parameters'."""
    path = directory / f"{spec.name}.csv"
    data = make_traces.csv_text(make_traces.arrivals(spec)).encode()
    if not path.exists() or path.read_bytes() != data:
        directory.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return path


def _figures(r: Result) -> dict[str, Any]:
    return {
        "warm_share": r.warm_share,
        "claims": r.claims,
        "idle_sandbox_seconds": r.idle_seconds,
        "ready_idle_sandbox_seconds": r.ready_idle_seconds,
        "mean_pool": r.mean_pool,
        "peak_replicas": r.max_replicas,
        "creates": r.creates,
        "deletes": r.deletes,
        "deletes_before_ready": r.deletes_before_ready,
        "restarts": r.restarts,
        "p99_latency_s": r.percentile(0.99),
        "runtime_s": r.runtime,
    }


def refill_p99(latency: str) -> float:
    """The p99 of the refill distribution ``latency`` names (the simulator's defaults)."""
    dist = lat.LOCAL if latency == "local" else lat.lognormal()
    return dist.quantile(0.99)


def breaker_goal(r: Result, latency: str) -> dict[str, Any]:
    """A never-Ready pool's own goal: the circuit breaker trips once, within a few refill p99s
    of the first member that never becomes Ready, and the size never grows after it."""
    limit = BREAKER_P99S * max(refill_p99(latency), BREAKER_P99_FLOOR)
    rule = (
        f"the breaker trips once, within {limit:.0f} s of the first member that never becomes "
        "Ready, and spec.replicas never grows after it"
    )
    if not r.breaker_trips or r.stuck_since is None:
        return {"rule": rule, "met": False, "warm_ok": None, "trips": 0, "limit_s": limit}
    trip = r.breaker_trips[0]
    at_trip = next((n for t, n, _, _ in r.series if t >= trip), None)
    after = [n for t, n, _, _ in r.series if t >= trip]
    growth = max(after) - at_trip if at_trip is not None else 0
    within = trip - r.stuck_since
    return {
        "rule": rule,
        "met": len(r.breaker_trips) == 1 and within <= limit and growth <= 0,
        "warm_ok": None,
        "trips": len(r.breaker_trips),
        "tripped_after_s": within,
        "limit_s": limit,
        "growth_after_trip": growth,
    }


def thresholds(s: Scenario) -> tuple[float, float]:
    """The goal's lines for a scenario: the warm share needed (the target less the slack) and
    the allowance on the smallest static pool's idle time."""
    return s.target - WARM_SLACK - 1e-12, IDLE_STATIONARY if s.stationary else IDLE_OTHER


def goal(s: Scenario, warm: float, idle: float, static_idle: float | None) -> dict[str, Any]:
    needed, allowance = thresholds(s)
    rule = (
        f"warm >= {s.target - WARM_SLACK:.3f} and idle <= {allowance:.2f} x the smallest "
        "static pool's"
    )
    warm_ok = warm >= needed
    if static_idle is None:
        return {"rule": rule, "met": None, "warm_ok": warm_ok, "why": "no static pool"}
    idle_ok = idle <= allowance * static_idle
    return {
        "rule": rule,
        "met": warm_ok and idle_ok,
        "warm_ok": warm_ok,
        "idle_ok": idle_ok,
        "allowance": allowance,
    }


def shortened(s: Scenario, trace: TraceSpec, hours: float) -> tuple[Scenario, TraceSpec]:
    """A smoke run's scenario: the trace's first ``hours``, the warm-up and the events at the
    same fractions of it (a check of the plumbing; its numbers mean nothing)."""
    f = hours * 3600 / trace.duration
    return (
        dataclasses.replace(s, warmup=s.warmup * f, restart_at=tuple(t * f for t in s.restart_at)),
        dataclasses.replace(trace, duration=hours * 3600),
    )


def _shown(path: Path) -> Path:
    """``path`` relative to the repository when it is inside it (the recorded commands name no
    machine's directories; they run from the repository's root)."""
    try:
        return path.resolve().relative_to(ROOT)
    except ValueError:
        return path


def run_one(
    s: Scenario, trace: TraceSpec, csv: Path, latency: str, out: Path, smoke_hours: float | None
) -> dict[str, Any]:
    if smoke_hours is not None:
        s, trace = shortened(s, trace, smoke_hours)
    argv = sim_argv(s, trace, csv, latency, out / "sim" / s.name)
    shown = sim_argv(s, trace, _shown(csv), latency, _shown(out / "sim" / s.name))
    started = time.perf_counter()
    log = io.StringIO()
    with contextlib.redirect_stderr(log):
        _, [cmp], warmup = run(parser().parse_args(argv))
    auto = cmp.autoscaled
    static = cmp.static
    entry: dict[str, Any] = {
        "scenario": s.name,
        "trace": s.trace,
        "latency": auto.latency,
        "tags": list(s.tags),
        "stationary": s.stationary,
        "events": {"restart_at": list(s.restart_at), "skew": s.skew, "never_ready": s.never_ready},
        "policy": {"min_replicas": s.min_replicas, "target": s.target},
        "warmup_s": warmup,
        "command": "python -m agentsandbox.sim " + shlex.join(shown),
        "autoscaled": _figures(auto),
        "static_size": cmp.static_size,
        "static": _figures(static) if static is not None else None,
        "static_sizes_tried": {str(k): v for k, v in sorted(cmp.tried.items())},
        "idle_ratio": cmp.idle_ratio,
        "goal": (
            breaker_goal(auto, latency)
            if s.never_ready
            else goal(
                s, auto.warm_share, auto.idle_seconds, static.idle_seconds if static else None
            )
        ),
        "wall_s": time.perf_counter() - started,
    }
    if s.never_ready:
        series = [p for p in auto.series if p[0] >= warmup]
        step = max(1, round(POOL_SERIES_EVERY / (series[1][0] - series[0][0]))) if series else 1
        entry["pool_after_warmup"] = {
            "columns": ["t_s", "spec_replicas", "members", "ready"],
            "rows": [list(p) for p in series[::step]],
            "growth": (max(p[1] for p in series) - series[0][1]) if series else 0,
        }
    return entry


def _task(args: tuple[Scenario, TraceSpec, Path, str, Path, float | None]) -> dict[str, Any]:
    return run_one(*args)


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def summary_line(e: dict[str, Any]) -> str:
    a = e["autoscaled"]
    verdict = {True: "MET", False: "missed", None: "report"}[e["goal"]["met"]]
    static = (
        f"static {e['static_size']}: {e['static']['idle_sandbox_seconds']:.0f}"
        if e["static"]
        else "no static"
    )
    extra = ""
    if "pool_after_warmup" in e:
        extra = f", pool growth after the warm-up {e['pool_after_warmup']['growth']}"
    return (
        f"{e['scenario']:<22} {e['latency']:<14} warm {a['warm_share']:.2%} idle "
        f"{a['idle_sandbox_seconds']:.0f} ({static}) {verdict}{extra} [{e['wall_s']:.0f}s]"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", choices=sorted(SETS), required=True, dest="which")
    p.add_argument("--only", action="append", default=[], metavar="NAME")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("build/autoscale-eval"))
    p.add_argument("--traces-dir", type=Path, default=Path("build/traces"))
    p.add_argument("--latency", choices=LATENCIES, action="append", default=[])
    p.add_argument(
        "--smoke-hours",
        type=float,
        default=None,
        metavar="H",
        help="a smoke run: only the first H hours of each trace (the warm-up and the events "
        "scaled to it); the numbers mean nothing",
    )
    args = p.parse_args(argv)
    argv_shown = sys.argv[1:] if argv is None else argv
    out = args.out.resolve()
    if out == HERE.parent or HERE.parent in out.parents:
        p.error(f"{args.out}: the results of a run are not committed; write them under build/")
    specs = load_traces()
    scenarios = load_set(args.which, specs)
    unknown = set(args.only) - {s.name for s in scenarios}
    if unknown:
        p.error(f"no such scenario in the {args.which} set: {', '.join(sorted(unknown))}")
    chosen = [s for s in scenarios if not args.only or s.name in args.only]
    csvs = {s.trace: ensure_trace(specs[s.trace], args.traces_dir) for s in chosen}
    latencies = args.latency or list(LATENCIES)
    tasks = [
        (s, specs[s.trace], csvs[s.trace].resolve(), lat, out, args.smoke_hours)
        for s in chosen
        for lat in latencies
    ]
    # the longest first (more claims: more events), so that the jobs end together
    tasks.sort(key=lambda t: -t[2].stat().st_size)
    head = commit()  # the code that runs is the code at the start
    started = time.perf_counter()
    entries: list[dict[str, Any]] = []
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            for entry in pool.map(_task, tasks):
                print(summary_line(entry), flush=True)
                entries.append(entry)
    else:
        for task in tasks:
            entry = _task(task)
            print(summary_line(entry), flush=True)
            entries.append(entry)
    order = {(s.name, lat): i for i, s in enumerate(chosen) for lat in ("local", "lognormal")}
    entries.sort(key=lambda e: order[(e["scenario"], e["latency"].split()[0])])
    judged = [e for e in entries if e["goal"]["met"] is not None]
    report = {
        "set": args.which,
        "smoke_hours": args.smoke_hours,
        "command": "python bench/autoscale/evaluate.py " + shlex.join(argv_shown),
        "commit": head,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "commit": head},
        "jobs": args.jobs,
        "elapsed_s": time.perf_counter() - started,
        "goal": {
            "warm_slack": WARM_SLACK,
            "idle_allowance": {"stationary": IDLE_STATIONARY, "other": IDLE_OTHER},
        },
        "met": sum(1 for e in judged if e["goal"]["met"]),
        "judged": len(judged),
        "results": entries,
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{args.which}.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(
        f"{args.which}: goal met in {report['met']} of {report['judged']} judged runs "
        f"({report['elapsed_s']:.0f} s); wrote {path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
