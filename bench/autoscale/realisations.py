"""How much of a scenario's verdict is chance: its trace's process redrawn with other seeds.

    python bench/autoscale/realisations.py --only grouped-8 --count 40 --latency lognormal --jobs 2
    python bench/autoscale/realisations.py --set tuning --only 'r*-grouped-32' --count 5 \
        --latency lognormal --judge-only --jobs 2

One trace is one realisation of a random process, and the goal compares the autoscaler with the
smallest static pool reaching the target *on that realisation*: a size chosen with hindsight.
This replays each named scenario (of the evaluation set unless ``--set`` says otherwise) on
``--count`` realisations of its trace's process: the same parts and parameters, seeds
``SEED_BASE + i`` (no trace of either set has such a seed). Each realisation is judged exactly as
``evaluate.py`` judges a run (:func:`evaluate.run_one`). Besides, it finds the fixed sizes that
would meet the goal on that realisation: from ``lo``, the smallest whose warm share after the
warm-up reaches the target minus the slack, to ``hi``, the largest whose idle sandbox-seconds are
within the allowance of the hindsight static pool's (the hindsight size itself is always in the
range).

An autoscaler that knew the process exactly, but not how it falls, can do no better with one
fixed size than the size held by the most of those ranges: the **best fixed size**, chosen here
over the very realisations it is scored on, so its share is if anything flattering. The summary
gives, per scenario and refill distribution, the share of realisations on which the autoscaler
meets the goal and the share on which the best fixed size does.

``--hours H`` draws each realisation ``H`` hours long instead of its trace's duration, warm-up
and goal unchanged: on a longer trace chance weighs less in the verdict. Only stationary scenarios
are lengthened (their parts hold all the way through; another shape's parts and events are placed
in time).

``--only`` takes names or shell patterns (``'r*-grouped-32'``: that family in every round of the
tuning set, other processes of one shape), chosen in the set's order. ``--judge-only`` judges the
autoscaler alone and skips the search for the fixed sizes meeting the goal: the objective a tuning
round steers on, pooled over the scenarios named (the last summary line).

Writes ``<out>/realisations.json`` (every figure, the commands, the commit); under ``build/`` only,
as ``evaluate.py``. Both warm share and idle time grow with the size (common random numbers, as
the static search assumes), so ``lo`` and ``hi`` are found by bisection.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fnmatch
import io
import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import evaluate  # noqa: E402
from scenarios import SETS, Scenario, TraceSpec, load_set, load_traces, sim_argv  # noqa: E402

from agentsandbox.sim.__main__ import configs, parser  # noqa: E402
from agentsandbox.sim.engine import Config, simulate  # noqa: E402

SEED_BASE = 900_000  # realisation i of every trace is drawn with seed SEED_BASE + i


#: a part placed in time has one of these; a stationary trace's parts have none
TIMED_KEYS = ("start", "end", "at")


def realisation(trace: TraceSpec, i: int, hours: float | None = None) -> TraceSpec:
    """Realisation ``i`` of ``trace``'s process; ``hours`` long if given (its own name, so that
    its CSV is not another length's)."""
    name, duration = f"{trace.name}~{i}", trace.duration
    if hours is not None:
        name, duration = f"{name}@{hours:g}h", hours * 3600.0
    return dataclasses.replace(trace, name=name, seed=SEED_BASE + i, duration=duration)


def lengthened(s: Scenario, trace: TraceSpec, hours: float) -> str | None:
    """Why ``s`` cannot be drawn ``hours`` long (None: it can)."""
    if not s.stationary:
        return f"{s.name} is not stationary"
    if any(key in part for part in trace.parts for key in TIMED_KEYS):
        return f"{s.name}'s trace has parts placed in time"
    if hours * 3600.0 <= s.warmup:
        return f"{hours:g} h is within {s.name}'s warm-up ({s.warmup:g} s)"
    return None


class Sizes:
    """Static pools of one realisation, simulated once per size."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.runs: dict[int, tuple[float, float]] = {}  # size -> (warm share, idle seconds)

    def __call__(self, n: int) -> tuple[float, float]:
        if n not in self.runs:
            r = simulate(dataclasses.replace(self.cfg, static=n, policy=None))
            self.runs[n] = (r.warm_share, r.idle_seconds)
        return self.runs[n]


def edge(ok: Callable[[int], bool], start: int, direction: int) -> int:
    """The last size from ``start`` (which is ``ok``) in ``direction`` (-1 or +1) that is still
    ``ok``: galloping, then bisecting (``ok`` changes once along the sizes; below 1 it never
    holds)."""

    def holds(n: int) -> bool:
        return n >= 1 and ok(n)

    good, step = start, 1
    while holds(good + direction * step):
        good, step = good + direction * step, step * 2
    bad = good + direction * step
    while abs(good - bad) > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if holds(mid) else (good, mid)
    return good


def lowest(sizes: Sizes, warm: float, start: int) -> int:
    """The smallest size whose warm share reaches ``warm`` (``start`` reaches it)."""
    return edge(lambda n: sizes(n)[0] >= warm, start, -1)


def highest(sizes: Sizes, idle: float, start: int) -> int:
    """The largest size whose idle seconds are at most ``idle`` (``start``'s are)."""
    return edge(lambda n: sizes(n)[1] <= idle, start, +1)


def run_one(
    s: Scenario,
    trace: TraceSpec,
    i: int,
    latency: str,
    out: Path,
    fixed: bool = True,
    hours: float | None = None,
) -> dict[str, Any]:
    spec = realisation(trace, i, hours)
    csv = evaluate.ensure_trace(spec, out / "traces")
    entry = evaluate.run_one(s, spec, csv, latency, out, None)
    entry["realisation"] = i
    entry["seed"] = spec.seed
    entry["duration_s"] = spec.duration
    if entry["static_size"] is None or not fixed:  # never Ready, or no search asked for
        return entry
    started = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):
        _, [cfg], _ = configs(parser().parse_args(sim_argv(s, spec, csv, latency, out)))
    sizes = Sizes(cfg)
    hindsight = entry["static_size"]
    needed, allowance = evaluate.thresholds(s)
    sizes(hindsight)  # recorded beside the others (its warm share and idle time are known)
    lo = lowest(sizes, needed, hindsight)
    hi = highest(sizes, allowance * entry["static"]["idle_sandbox_seconds"], hindsight)
    entry["fixed_sizes_meeting"] = [lo, hi]
    entry["fixed_sizes_tried"] = {str(n): list(v) for n, v in sorted(sizes.runs.items())}
    entry["wall_s"] += time.perf_counter() - started
    return entry


def _task(
    args: tuple[Scenario, TraceSpec, int, str, Path, bool, float | None],
) -> dict[str, Any]:
    return run_one(*args)


def chosen_names(patterns: list[str], names: list[str]) -> tuple[list[str], list[str]]:
    """The scenario names ``patterns`` (names or shell patterns) select, in the set's order,
    and the patterns that select none."""
    chosen = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    return chosen, [p for p in patterns if not fnmatch.filter(names, p)]


def summarise(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The autoscaler's and the best fixed size's share of realisations meeting the goal (the
    best fixed size's fields are None when its search was skipped)."""
    judged = [e for e in entries if e["goal"]["met"] is not None]
    ranges = [e["fixed_sizes_meeting"] for e in judged if "fixed_sizes_meeting" in e]
    held = (
        {
            n: sum(1 for lo, hi in ranges if lo <= n <= hi)
            for n in range(min(r[0] for r in ranges), max(r[1] for r in ranges) + 1)
        }
        if ranges
        else {}
    )
    best = max(held.values()) if held else None
    statics = [e["static_size"] for e in judged]
    return {
        "realisations": len(judged),
        "autoscaler_met": sum(1 for e in judged if e["goal"]["met"]),
        "autoscaler_warm_ok": sum(1 for e in judged if e["goal"]["warm_ok"]),
        "best_fixed_met": best,
        "best_fixed_sizes": [n for n, c in held.items() if c == best] if held else None,
        "fixed_met_by_size": {str(n): c for n, c in held.items()} if held else None,
        "hindsight_static_size": {
            "min": min(statics),
            "median": statistics.median(statics),
            "max": max(statics),
        },
        "idle_ratio": {
            "min": min(e["idle_ratio"] for e in judged),
            "median": statistics.median(e["idle_ratio"] for e in judged),
            "max": max(e["idle_ratio"] for e in judged),
        },
    }


def pooled_counts(summaries: list[dict[str, Any]]) -> dict[str, tuple[int, int, int]]:
    """Per refill distribution, over every scenario: realisations met, with the warm share
    needed, and judged."""
    out: dict[str, tuple[int, int, int]] = {}
    for s in summaries:
        met, warm_ok, n = out.get(s["latency"], (0, 0, 0))
        out[s["latency"]] = (
            met + s["autoscaler_met"],
            warm_ok + s["autoscaler_warm_ok"],
            n + s["realisations"],
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", choices=sorted(SETS), default="evaluation", dest="which")
    p.add_argument("--only", action="append", required=True, metavar="NAME_OR_PATTERN")
    p.add_argument("--count", type=int, default=40, help="realisations per scenario")
    p.add_argument("--latency", choices=evaluate.LATENCIES, action="append", default=[])
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument(
        "--judge-only",
        action="store_true",
        help="judge the autoscaler alone: no search for the fixed sizes meeting the goal",
    )
    p.add_argument(
        "--hours",
        type=float,
        help="draw each realisation this many hours long (stationary scenarios only)",
    )
    p.add_argument("--out", type=Path, default=Path("build/autoscale-realisations"))
    args = p.parse_args(argv)
    argv_shown = sys.argv[1:] if argv is None else argv
    out = args.out.resolve()
    if out == HERE.parent or HERE.parent in out.parents:
        p.error(f"{args.out}: the results of a run are not committed; write them under build/")
    if args.count < 1:
        p.error("--count must be at least 1")
    specs = load_traces()
    scenarios = {s.name: s for s in load_set(args.which, specs)}
    names, unknown = chosen_names(args.only, list(scenarios))
    if unknown:
        p.error(f"no such scenario in the {args.which} set: {', '.join(sorted(unknown))}")
    chosen = [scenarios[name] for name in names]
    if any(s.never_ready for s in chosen):
        p.error("a never-Ready scenario has no static pool to compare with")
    if args.hours is not None:
        refused = [why for s in chosen if (why := lengthened(s, specs[s.trace], args.hours))]
        if refused:
            p.error("--hours: " + "; ".join(refused))
    latencies = args.latency or list(evaluate.LATENCIES)
    tasks = [
        (s, specs[s.trace], i, lat, out, not args.judge_only, args.hours)
        for s in chosen
        for lat in latencies
        for i in range(args.count)
    ]
    head = evaluate.commit()  # the code that runs is the code at the start
    started = time.perf_counter()
    entries: list[dict[str, Any]] = []
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            for entry in pool.map(_task, tasks):
                print(f"#{entry['realisation']:<3} {evaluate.summary_line(entry)}", flush=True)
                entries.append(entry)
    else:
        for task in tasks:
            entry = _task(task)
            print(f"#{entry['realisation']:<3} {evaluate.summary_line(entry)}", flush=True)
            entries.append(entry)
    summaries = []
    for s in chosen:
        for lat in latencies:
            mine = [e for e in entries if e["scenario"] == s.name and e["latency"].startswith(lat)]
            summary = {"scenario": s.name, "trace": s.trace, "latency": mine[0]["latency"]}
            summary.update(summarise(mine))
            summaries.append(summary)
            fixed = (
                ""
                if summary["best_fixed_met"] is None
                else f", the best fixed size {summary['best_fixed_sizes']} on "
                f"{summary['best_fixed_met']}"
            )
            print(
                f"{s.name} {summary['latency']}: autoscaler met on {summary['autoscaler_met']} "
                f"of {summary['realisations']} realisations{fixed}; hindsight "
                f"static {summary['hindsight_static_size']}"
            )
    pooled = pooled_counts(summaries)
    for lat, (met, warm_ok, n) in pooled.items():
        print(
            f"all {len(chosen)} scenarios, {lat}: autoscaler met on {met} of {n} ({warm_ok} warm)"
        )
    report = {
        "set": args.which,
        "command": "python bench/autoscale/realisations.py " + shlex.join(argv_shown),
        "commit": head,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "commit": head},
        "jobs": args.jobs,
        "seed_base": SEED_BASE,
        "hours": args.hours,
        "elapsed_s": time.perf_counter() - started,
        "goal": {
            "warm_slack": evaluate.WARM_SLACK,
            "idle_allowance": {
                "stationary": evaluate.IDLE_STATIONARY,
                "other": evaluate.IDLE_OTHER,
            },
        },
        "summaries": summaries,
        "pooled": {
            lat: {"autoscaler_met": met, "autoscaler_warm_ok": warm_ok, "realisations": n}
            for lat, (met, warm_ok, n) in pooled.items()
        },
        "results": entries,
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / "realisations.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {path} ({report['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
