"""Claim arrival traces: fixed shapes, fixed seeds, or a CSV replay.

- **burst**: every ``period`` seconds (5 min) a burst of ``size`` (200) claims, each at a time drawn
  uniformly within ``jitter`` (30 s) either side of the burst's mark; claims hold their sandbox
  for 10 min.
- **diurnal**: Poisson arrivals whose rate follows a 24 h sine between 0.1/s (midnight) and
  5/s (noon), drawn by thinning; dwell 2 min.
- **steady**: Poisson at a constant rate; dwell 2 min.
- **csv**: one claim creation time per line (the first column; seconds as a number, or an
  RFC 3339 timestamp; a header line is skipped), shifted so the first claim is at 0. A path
  ending in ``.gz`` is read through gzip.
"""

from __future__ import annotations

import csv
import gzip
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from agentsandbox.api.timefmt import parse_rfc3339

DAY = 86_400.0


@dataclass(frozen=True)
class Trace:
    name: str
    arrivals: Sequence[float]  # sorted claim creation times, seconds from 0
    dwell: float  # seconds a claim holds its sandbox
    duration: float  # seconds simulated
    description: str = ""


def burst(
    seed: int = 1,
    duration: float = DAY,
    size: int = 200,
    period: float = 300.0,
    jitter: float = 30.0,
    dwell: float = 600.0,
    instant: float | None = None,
) -> Trace:
    """``instant=None``: each claim uniform within ``jitter`` of its burst's mark (the burst is
    spread over 2·jitter). ``instant=L`` (the other reading of "± 30 s"): the burst's time is
    uniform within ``jitter`` of the mark and its claims arrive uniformly within L seconds."""
    rng = random.Random(f"burst-{seed}")
    times: list[float] = []
    mark = period
    while mark - jitter < duration:
        if instant is None:
            times.extend(mark + rng.uniform(-jitter, jitter) for _ in range(size))
        else:
            at = mark + rng.uniform(-jitter, jitter)
            times.extend(at + rng.uniform(0, instant) for _ in range(size))
        mark += period
    arrivals = sorted(t for t in times if 0 <= t < duration)
    if instant is None:
        shape = f"{size} claims every {period:g}s ± {jitter:g}s (uniform), dwell {dwell:g}s"
    else:
        shape = (
            f"{size} claims within {instant:g}s every {period:g}s ± {jitter:g}s (uniform), "
            f"dwell {dwell:g}s"
        )
    return Trace("burst" if instant is None else "burst-instant", arrivals, dwell, duration, shape)


def poisson(
    rate_at: Callable[[float], float],
    peak: float,
    duration: float,
    rng: random.Random,
) -> list[float]:
    """Non-homogeneous Poisson arrivals by thinning (``rate_at(t) <= peak``)."""
    out: list[float] = []
    t = 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= duration:
            return out
        if rng.random() * peak < rate_at(t):
            out.append(t)


def diurnal(
    seed: int = 1,
    duration: float = DAY,
    low: float = 0.1,
    high: float = 5.0,
    dwell: float = 120.0,
) -> Trace:
    def rate_at(t: float) -> float:
        return low + (high - low) * (1 - math.cos(2 * math.pi * t / DAY)) / 2

    arrivals = poisson(rate_at, high, duration, random.Random(f"diurnal-{seed}"))
    return Trace(
        "diurnal",
        arrivals,
        dwell,
        duration,
        f"Poisson, rate on a 24 h sine {low:g}/s (midnight) .. {high:g}/s (noon), dwell {dwell:g}s",
    )


def steady(seed: int = 1, rate: float = 1.0, duration: float = DAY, dwell: float = 120.0) -> Trace:
    arrivals = poisson(lambda _t: rate, rate, duration, random.Random(f"steady-{seed}"))
    return Trace("steady", arrivals, dwell, duration, f"Poisson {rate:g}/s, dwell {dwell:g}s")


def _seconds(cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        return parse_rfc3339(cell).timestamp()


def _open_text(path: str | Path) -> TextIO:
    """The file as text; a path ending in ``.gz`` through gzip."""
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt", newline="")
    return open(path, newline="")


def from_csv(path: str | Path, dwell: float = 120.0, duration: float | None = None) -> Trace:
    times: list[float] = []
    with _open_text(path) as fh:
        for i, row in enumerate(csv.reader(fh)):
            if not row or not row[0].strip() or row[0].lstrip().startswith("#"):
                continue
            try:
                times.append(_seconds(row[0].strip()))
            except ValueError:
                if i == 0:
                    continue  # a header
                raise ValueError(f"{path}:{i + 1}: not a time: {row[0]!r}") from None
    if not times:
        raise ValueError(f"{path}: no claim times")
    times.sort()
    first = times[0]
    arrivals = [t - first for t in times]
    span = duration if duration is not None else arrivals[-1] + 1.0
    return Trace(
        f"csv:{Path(path).name}",
        [t for t in arrivals if t < span],
        dwell,
        span,
        f"replay of {len(arrivals)} claims from {path}, dwell {dwell:g}s",
    )
