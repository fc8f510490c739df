"""``python -m agentsandbox.sim``: simulate a warm pool on a trace, autoscaled and static.

    python -m agentsandbox.sim --trace burst            # both latency distributions
    python -m agentsandbox.sim --trace diurnal --latency lognormal
    python -m agentsandbox.sim --trace steady --rate 2 --hours 2
    python -m agentsandbox.sim --csv claims.csv
    python -m agentsandbox.sim --csv claims.csv.gz --restart-at 7200 --skew -3

Prints the comparison table and writes ``<out>/<trace>.json`` and ``<out>/<trace>.png``.
Scenario events (``--restart-at``, ``--skew``, ``--never-ready``) are described in
:mod:`.engine`; a restart must fall after the warm-up and before the end.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentsandbox.controllers.autoscaler.plan import Policy

from . import latency as lat
from . import traces
from .compare import Comparison, compare
from .engine import Config
from .report import table, write
from .traces import Trace


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m agentsandbox.sim",
        description="Discrete-event simulation of a SandboxWarmPool (the real plan() and the "
        "autoscaler's decide()): autoscaled vs the smallest static pool reaching the target.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--trace", choices=["burst", "burst-instant", "diurnal", "steady"], default="burst"
    )
    src.add_argument("--csv", type=Path, help="replay claim times from a CSV (first column)")
    p.add_argument("--latency", choices=["local", "lognormal", "both"], default="both")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--hours", type=float, default=None, help="simulated hours (default 24)")
    p.add_argument("--rate", type=float, default=1.0, help="steady: claims per second")
    p.add_argument("--dwell", type=float, default=None, help="seconds a claim holds its sandbox")
    p.add_argument("--target", type=float, default=0.99, help="warm share to reach")
    p.add_argument("--min-replicas", type=int, default=1)
    p.add_argument("--max-replicas", type=int, default=2000)
    p.add_argument("--scale-down-window", type=float, default=300.0)
    p.add_argument(
        "--decide-interval",
        type=float,
        default=5.0,
        help="seconds between the autoscaler's periodic passes (a claim also makes it decide "
        "within a second)",
    )
    p.add_argument("--warmup", type=float, default=3600.0, help="seconds not counted at start")
    p.add_argument("--lognormal-median", type=float, default=90.0)
    p.add_argument("--lognormal-sigma", type=float, default=0.3)
    p.add_argument("--static", type=int, default=None, help="compare with this static size")
    p.add_argument("--no-search", action="store_true", help="autoscaled only")
    p.add_argument("--out", type=Path, default=Path("sim-output"))
    p.add_argument("--no-plot", action="store_true")
    events = p.add_argument_group("scenario events")
    events.add_argument(
        "--restart-at",
        type=float,
        action="append",
        default=[],
        metavar="SECONDS",
        help="the controller restarts at this simulated time (repeatable): the autoscaler's "
        "memory is lost and its windows are rebuilt from a relist",
    )
    events.add_argument(
        "--skew",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="the controller's clock minus the API server's",
    )
    events.add_argument(
        "--never-ready",
        action="store_true",
        help="pool members never become Ready (no static search: no size reaches a target)",
    )
    return p


class ScenarioError(ValueError):
    """Scenario events that do not fit the trace."""


def load_trace(args: argparse.Namespace) -> Trace:
    duration = (args.hours if args.hours is not None else 24.0) * 3600
    if args.csv is not None:
        trace = traces.from_csv(
            args.csv,
            dwell=args.dwell if args.dwell is not None else 120.0,
            duration=duration if args.hours is not None else None,
        )
    elif args.trace in ("burst", "burst-instant"):
        trace = traces.burst(
            args.seed,
            duration,
            dwell=args.dwell if args.dwell is not None else 600.0,
            instant=2.0 if args.trace == "burst-instant" else None,
        )
    elif args.trace == "diurnal":
        trace = traces.diurnal(
            args.seed, duration, dwell=args.dwell if args.dwell is not None else 120.0
        )
    else:
        trace = traces.steady(
            args.seed, args.rate, duration, dwell=args.dwell if args.dwell is not None else 120.0
        )
    return trace


def configs(args: argparse.Namespace) -> tuple[Trace, list[Config], float]:
    """What the command simulates: (trace, one configuration per distribution, warm-up). The
    configurations carry the autoscaler's policy; a static pool is the same with ``static``
    set and no policy (:func:`.compare.smallest_static`)."""
    trace = load_trace(args)
    dists: list[lat.Latency] = []
    if args.latency in ("local", "both"):
        dists.append(lat.LOCAL)
    if args.latency in ("lognormal", "both"):
        dists.append(lat.lognormal(args.lognormal_median, args.lognormal_sigma))
    policy = Policy(
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        target_warm_share=args.target,
        scale_down_window=args.scale_down_window,
    )
    warmup = min(args.warmup, trace.duration / 4)
    restarts = tuple(sorted(args.restart_at))
    for at in restarts:
        if not warmup < at < trace.duration:
            raise ScenarioError(
                f"--restart-at {at:g}: a restart must fall after the warm-up ({warmup:g}s) "
                f"and before the end of the trace ({trace.duration:g}s)"
            )
    print(f"{trace.name}: {len(trace.arrivals)} claims, {trace.description}", file=sys.stderr)
    events = [f"restart at {at:g}s" for at in restarts]
    if args.skew:
        events.append(f"controller clock skew {args.skew:+g}s")
    if args.never_ready:
        events.append("members never Ready (no static search)")
    if events:
        print(f"events: {', '.join(events)}", file=sys.stderr)
    cfgs = [
        Config(
            trace=trace,
            latency=dist,
            seed=args.seed,
            policy=policy,
            decide_interval=args.decide_interval,
            warmup=warmup,
            restarts=restarts,
            skew=args.skew,
            never_ready=args.never_ready,
        )
        for dist in dists
    ]
    return trace, cfgs, warmup


def run(args: argparse.Namespace) -> tuple[Trace, list[Comparison], float]:
    """The simulations the command runs: (trace, one comparison per distribution, warm-up)."""
    trace, cfgs, warmup = configs(args)
    results: list[Comparison] = []
    for cfg in cfgs:
        print(f"{cfg.latency.name}:", file=sys.stderr)
        results.append(
            compare(
                cfg,
                args.target,
                static_size=args.static,
                search=not args.no_search and not args.never_ready,
                log=lambda line: print(line, file=sys.stderr, flush=True),
            )
        )
    return trace, results, warmup


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        trace, results, warmup = run(args)
    except ScenarioError as err:
        p.error(str(err))
    print(table(trace, results, warmup))
    for path in write(args.out, trace, results, plot=not args.no_plot):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
