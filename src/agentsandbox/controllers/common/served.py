"""How each warm pool served the claims that asked for it, in process (autoscaler review #18).

The claim controller records one outcome per claim at its first serving (``warm_ready``: it
adopted a Ready member of the pool; ``warm_not_ready``: a member not Ready yet; ``cold``: none
was left and a sandbox was made for it); :class:`ServedCounts` keeps, per ``(namespace, pool)``,
the totals since this process started and the counts of the last ``window`` seconds in bins of
``bin_seconds``, so that a reader (the SandboxWarmPoolAutoscaler) can compute the realised warm
share over any window up to that one, to the bin. Memory: at most ``window / bin_seconds`` bins per
pool; a pool's bins go once they are all older than the window, and everything of a pool goes
with :meth:`ServedCounts.forget` (the claim controller calls it when the pool is deleted).

Nothing here survives a restart: after one, the totals and the window start empty (as the
Prometheus counter does).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Final

WARM_READY: Final = "warm_ready"
WARM_NOT_READY: Final = "warm_not_ready"
COLD: Final = "cold"
#: The outcomes, in the order of every tuple this module returns.
OUTCOMES: Final = (WARM_READY, WARM_NOT_READY, COLD)

DEFAULT_WINDOW: Final = 600.0
DEFAULT_BIN: Final = 10.0

Counts = tuple[int, int, int]  # (warm_ready, warm_not_ready, cold)
Key = tuple[str, str]  # (namespace, pool)


class ServedCounts:
    """Per-pool served counts, totals and windowed (see the module docstring). ``clock``:
    seconds, monotonic or not (only differences are used); thread-safe."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        window: float = DEFAULT_WINDOW,
        bin_seconds: float = DEFAULT_BIN,
    ) -> None:
        if window <= 0 or bin_seconds <= 0:
            raise ValueError("window and bin_seconds must be positive")
        self.clock = clock
        self.window_seconds = window
        self.bin_seconds = bin_seconds
        self._max_bins = max(math.ceil(window / bin_seconds), 1)  # the current one included
        self._lock = threading.Lock()
        self._totals: dict[Key, list[int]] = {}
        # per pool: (bin index, [warm_ready, warm_not_ready, cold]), oldest first
        self._bins: dict[Key, deque[tuple[int, list[int]]]] = {}

    def _bin(self, now: float) -> int:
        return math.floor(now / self.bin_seconds)

    def _drop_old(self, key: Key, current: int) -> None:
        bins = self._bins.get(key)
        if bins is None:
            return
        oldest = current - self._max_bins + 1
        while bins and bins[0][0] < oldest:
            bins.popleft()
        if not bins:
            del self._bins[key]

    def add(self, namespace: str, pool: str, outcome: str) -> None:
        """One claim served: ``outcome`` is one of :data:`OUTCOMES`."""
        i = OUTCOMES.index(outcome)
        key = (namespace, pool)
        with self._lock:
            current = self._bin(self.clock())
            self._totals.setdefault(key, [0, 0, 0])[i] += 1
            bins = self._bins.setdefault(key, deque())
            if not bins or bins[-1][0] != current:
                bins.append((current, [0, 0, 0]))
            bins[-1][1][i] += 1
            self._drop_old(key, current)

    def snapshot(self, namespace: str, pool: str) -> Counts:
        """(warm_ready, warm_not_ready, cold) since this process started or the pool appeared."""
        with self._lock:
            got = self._totals.get((namespace, pool), [0, 0, 0])
            return got[0], got[1], got[2]

    def window(self, namespace: str, pool: str, seconds: float | None = None) -> Counts:
        """(warm_ready, warm_not_ready, cold) of the last ``seconds`` (default and at most the
        whole window), to the bin: the last ``seconds / bin_seconds`` bins (at least one), the
        current, partly elapsed one included."""
        span = self.window_seconds if seconds is None else min(seconds, self.window_seconds)
        key = (namespace, pool)
        with self._lock:
            current = self._bin(self.clock())
            self._drop_old(key, current)
            oldest = current - max(math.ceil(span / self.bin_seconds), 1) + 1
            out = [0, 0, 0]
            for index, counts in self._bins.get(key, ()):
                if index >= oldest:
                    for i in range(3):
                        out[i] += counts[i]
            return out[0], out[1], out[2]

    def warm_share(self, namespace: str, pool: str, seconds: float | None = None) -> float | None:
        """The realised warm share of :meth:`window` (warm, Ready or not, over all claims
        counted); None when no claim was counted in it."""
        ready, not_ready, cold = self.window(namespace, pool, seconds)
        total = ready + not_ready + cold
        return None if total == 0 else (ready + not_ready) / total

    def bins(self, namespace: str, pool: str) -> int:
        """How many bins the pool holds now (after dropping the old ones)."""
        key = (namespace, pool)
        with self._lock:
            self._drop_old(key, self._bin(self.clock()))
            return len(self._bins.get(key, ()))

    def keys(self) -> list[Key]:
        """The pools with any count."""
        with self._lock:
            return sorted(set(self._totals) | set(self._bins))

    def prune(self) -> None:
        """Drop every pool's bins older than the window (reads do so for the pool they read)."""
        with self._lock:
            current = self._bin(self.clock())
            for key in list(self._bins):
                self._drop_old(key, current)

    def forget(self, namespace: str, pool: str) -> None:
        """Everything of a pool (it was deleted)."""
        with self._lock:
            self._totals.pop((namespace, pool), None)
            self._bins.pop((namespace, pool), None)


__all__ = [
    "COLD",
    "DEFAULT_BIN",
    "DEFAULT_WINDOW",
    "OUTCOMES",
    "WARM_NOT_READY",
    "WARM_READY",
    "Counts",
    "ServedCounts",
]


#: This process's served counts (the claim controller writes them, the autoscaler reads them).
SERVED = ServedCounts()
