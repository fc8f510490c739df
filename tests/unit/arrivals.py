"""Claim arrival times for the autoscaler's unit tests: Poisson at a constant rate between two
times, from a seed (the same seed, the same times)."""

from __future__ import annotations

import random


def poisson(rate: float, start: float, end: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    out, t = [], start
    while True:
        t += rng.expovariate(rate)
        if t >= end:
            return out
        out.append(t)
