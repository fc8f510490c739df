"""Refill times for the simulator's unit tests: every create -> Ready takes the same time."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Fixed:
    """Every create -> Ready takes ``seconds``."""

    seconds: float
    name: str = "fixed"

    def draw(self, rng: random.Random) -> float:
        return self.seconds

    def mean(self) -> float:
        return self.seconds

    def quantile(self, q: float) -> float:
        return self.seconds
