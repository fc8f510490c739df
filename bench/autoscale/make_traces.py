"""Write the autoscaler evaluation's arrival traces (``bench/autoscale/traces.toml``) as CSV files
that ``python -m agentsandbox.sim --csv`` replays.

    python bench/autoscale/make_traces.py                      # every trace -> build/traces/
    python bench/autoscale/make_traces.py --only eval-steady-low --out /tmp/traces --gz

A trace is the sum of its ``parts`` (below), each drawn from its own random stream named by the
trace's seed and the part's position, plus one claim at 0 s: the replay shifts the first claim
to 0, so every trace starts with one and the times in the scenario files are the replay's. Times
are written in seconds with 3 decimals, one per line after a header: the same parameters and
seed give the same bytes (``--gz`` too: the gzip header carries no time or name).

Parts (every rate in claims per second, every time in seconds from the start of the trace):

- ``poisson``: ``rate`` from ``start`` (0) to ``end`` (the end);
- ``steps``: Poisson whose rate is ``rates[i]`` from ``at[i]`` (``at[0]`` is 0);
- ``sine``: Poisson whose rate follows a sine between ``low`` (at ``phase``) and ``high`` with
  ``period``: a day's shape, compressed;
- ``bursts``: every ``period`` from ``start`` (``period``) a burst of ``size`` claims, its time
  uniform within ``jitter`` of the mark, its claims uniform within ``spread`` after it;
- ``random_bursts``: bursts of ``size_min`` .. ``size_max`` claims (uniform), gaps uniform in
  ``gap_min`` .. ``gap_max`` from ``start``, claims uniform within ``spread``;
- ``groups``: Poisson at ``rate`` groups of ``size`` claims with the same creation time;
- ``burst``: one burst of ``size`` claims at ``at``, uniform within ``spread``.
"""

from __future__ import annotations

import argparse
import gzip
import math
import random
import sys
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "src"))

from scenarios import TRACES, TraceSpec, load_traces  # noqa: E402

from agentsandbox.sim.traces import poisson  # noqa: E402

Part = Mapping[str, Any]


def _window(rate: float, start: float, end: float) -> Callable[[float], float]:
    return lambda t: rate if start <= t < end else 0.0


def _poisson(p: Part, duration: float, rng: random.Random) -> list[float]:
    start, end = float(p.get("start", 0.0)), float(p.get("end", duration))
    return poisson(_window(float(p["rate"]), start, end), float(p["rate"]), duration, rng)


def _steps(p: Part, duration: float, rng: random.Random) -> list[float]:
    at = [float(x) for x in p["at"]]
    rates = [float(x) for x in p["rates"]]
    if len(at) != len(rates) or at[0] != 0.0 or at != sorted(at):
        raise ValueError(f"steps: 'at' must start at 0, rise, and match 'rates': {p}")

    def rate_at(t: float) -> float:
        i = 0
        while i + 1 < len(at) and at[i + 1] <= t:
            i += 1
        return rates[i]

    return poisson(rate_at, max(rates), duration, rng)


def _sine(p: Part, duration: float, rng: random.Random) -> list[float]:
    low, high = float(p["low"]), float(p["high"])
    period, phase = float(p["period"]), float(p.get("phase", 0.0))

    def rate_at(t: float) -> float:
        return low + (high - low) * (1 - math.cos(2 * math.pi * (t - phase) / period)) / 2

    return poisson(rate_at, high, duration, rng)


def _bursts(p: Part, duration: float, rng: random.Random) -> list[float]:
    size, period = int(p["size"]), float(p["period"])
    jitter, spread = float(p.get("jitter", 0.0)), float(p.get("spread", 0.0))
    out: list[float] = []
    mark = float(p.get("start", period))
    while mark < duration:
        at = mark + rng.uniform(-jitter, jitter)
        out.extend(at + rng.uniform(0.0, spread) for _ in range(size))
        mark += period
    return out


def _random_bursts(p: Part, duration: float, rng: random.Random) -> list[float]:
    spread = float(p.get("spread", 0.0))
    out: list[float] = []
    at = float(p.get("start", 0.0)) + rng.uniform(float(p["gap_min"]), float(p["gap_max"]))
    while at < duration:
        size = rng.randint(int(p["size_min"]), int(p["size_max"]))
        out.extend(at + rng.uniform(0.0, spread) for _ in range(size))
        at += rng.uniform(float(p["gap_min"]), float(p["gap_max"]))
    return out


def _groups(p: Part, duration: float, rng: random.Random) -> list[float]:
    size, rate = int(p["size"]), float(p["rate"])
    start, end = float(p.get("start", 0.0)), float(p.get("end", duration))
    marks = poisson(_window(rate, start, end), rate, duration, rng)
    return [round(t, 3) for t in marks for _ in range(size)]


def _burst(p: Part, duration: float, rng: random.Random) -> list[float]:
    at, spread = float(p["at"]), float(p.get("spread", 0.0))
    return [at + rng.uniform(0.0, spread) for _ in range(int(p["size"]))]


KINDS: dict[str, Callable[[Part, float, random.Random], list[float]]] = {
    "poisson": _poisson,
    "steps": _steps,
    "sine": _sine,
    "bursts": _bursts,
    "random_bursts": _random_bursts,
    "groups": _groups,
    "burst": _burst,
}


def arrivals(spec: TraceSpec, leave_out: Collection[int] = ()) -> list[float]:
    """The trace's claim times: sorted, from 0 (a claim at 0), before its duration. The parts
    numbered ``leave_out`` are left out; each other part draws from its own stream, so its claims
    are the same with them or without."""
    times = [0.0]
    for i, part in enumerate(spec.parts):
        if i in leave_out:
            continue
        kind = str(part["kind"])
        if kind not in KINDS:
            raise ValueError(f"trace {spec.name}: unknown part kind {kind!r}")
        rng = random.Random(f"{spec.seed}:{i}:{kind}")
        times.extend(t for t in KINDS[kind](part, spec.duration, rng) if 0.0 <= t < spec.duration)
    return sorted(times)


def csv_text(times: list[float]) -> str:
    return "creation_seconds\n" + "".join(f"{t:.3f}\n" for t in times)


def write(spec: TraceSpec, out: Path, gz: bool = False) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    data = csv_text(arrivals(spec)).encode()
    if gz:
        path = out / f"{spec.name}.csv.gz"
        path.write_bytes(gzip.compress(data, mtime=0))
    else:
        path = out / f"{spec.name}.csv"
        path.write_bytes(data)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--traces", type=Path, default=TRACES, help="the trace parameters (TOML)")
    p.add_argument("--out", type=Path, default=Path("build/traces"))
    p.add_argument("--only", action="append", default=[], metavar="NAME")
    p.add_argument("--gz", action="store_true", help="write <name>.csv.gz")
    args = p.parse_args(argv)
    specs = load_traces(args.traces)
    unknown = set(args.only) - set(specs)
    if unknown:
        p.error(f"no such trace: {', '.join(sorted(unknown))}")
    for name, spec in specs.items():
        if args.only and name not in args.only:
            continue
        path = write(spec, args.out, gz=args.gz)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
