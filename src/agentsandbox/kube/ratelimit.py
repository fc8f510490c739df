"""Client-side QPS/burst limiting, as client-go's token bucket (``--kube-api-qps/-burst``).

The bucket holds up to ``burst`` tokens and refills at ``qps`` tokens per second. Each request
takes one. A caller that finds the bucket empty *reserves* a future token (the balance goes
negative) and sleeps until it is due, so waiters are served first-come first-served with no
thundering herd and no busy loop. ``qps <= 0`` disables limiting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

__all__ = ["TokenBucket"]


class TokenBucket:
    """An asyncio token bucket with an injectable clock (and sleep) for tests."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self._qps = float(qps)
        self._burst = max(1, int(burst))
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(self._burst)
        self._last = clock()

    @property
    def enabled(self) -> bool:
        return self._qps > 0

    @property
    def qps(self) -> float:
        return self._qps

    @property
    def burst(self) -> int:
        return self._burst

    @property
    def tokens(self) -> float:
        """Tokens available now; negative when future tokens are already reserved."""
        if self.enabled:
            self._advance(self._clock())
        return self._tokens

    def _advance(self, now: float) -> None:
        elapsed = now - self._last
        if elapsed > 0:
            self._tokens = min(float(self._burst), self._tokens + elapsed * self._qps)
            self._last = now

    def reserve(self) -> float:
        """Take one token now and return how many seconds the caller must wait before using it."""
        if not self.enabled:
            return 0.0
        self._advance(self._clock())
        self._tokens -= 1.0
        if self._tokens >= 0:
            return 0.0
        return -self._tokens / self._qps

    def cancel_reservation(self) -> None:
        """Give back a token taken by :meth:`reserve` that will not be used."""
        if self.enabled:
            self._tokens = min(float(self._burst), self._tokens + 1.0)

    def try_acquire(self) -> bool:
        """Take a token only if one is available right now."""
        if not self.enabled:
            return True
        self._advance(self._clock())
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    async def acquire(self) -> float:
        """Wait for a token; return the seconds waited (0.0 when one was available)."""
        delay = self.reserve()
        if delay > 0:
            try:
                await self._sleep(delay)
            except asyncio.CancelledError:
                self.cancel_reservation()
                raise
        return delay
